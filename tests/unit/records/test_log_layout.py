"""records.log_layout: the map of the on-disk formats, one module each, and their readers.

Each format's own rules are tested beside its module (test_file_names.py, test_partition_dirs.py,
test_index_files.py, test_producer_snapshot.py, test_offset_checkpoint.py); the storage engine's
wrappers of these (files.py, topic_names.py, checkpoints.py, the index modules) have their own
tests, which check the same rules through files and the engine's errors. Here: that every reader
uses the one definition, and that each format has its module.
"""

from __future__ import annotations

import importlib

import pytest
from hypothesis import strategies as st

from stratalog.records import log_layout as layout

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
int32s = st.integers(-(2**31), INT_MAX)
int64s = st.integers(-(2**63), LONG_MAX)
LEGAL = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
valid_topics = st.text(alphabet=LEGAL, min_size=1, max_size=layout.TOPIC_NAME_LENGTH_MAX).filter(
    lambda name: name not in (".", "..")
)


# --- one definition, many readers ------------------------------------------------------------


def test_storage_and_cli_read_with_the_layout_objects() -> None:
    # Agreement by construction: the engine and dump-log import these objects rather than
    # defining their own (the Spark reader's counterpart is in tests/spark/test_files.py).
    from stratalog.cli import dump_log
    from stratalog.server.storage import (
        checkpoints,
        files,
        log_dirs,
        offset_index,
        recovery,
        time_index,
        topic_description,
        topic_names,
        txn_index,
    )

    assert checkpoints.parse_offset_checkpoint is layout.parse_offset_checkpoint
    assert checkpoints.format_offset_checkpoint is layout.format_offset_checkpoint
    assert offset_index.OFFSET_INDEX_ENTRY is dump_log.OFFSET_INDEX_ENTRY is layout.OFFSET_INDEX_ENTRY
    assert time_index.TIME_INDEX_ENTRY is dump_log.TIME_INDEX_ENTRY is layout.TIME_INDEX_ENTRY
    assert topic_description.TIME_INDEX_TIMESTAMP is time_index.TIME_INDEX_TIMESTAMP
    assert txn_index.unpack_txn_index_entry is layout.unpack_txn_index_entry
    assert dump_log.unpack_txn_index is layout.unpack_txn_index
    assert dump_log.unpack_producer_snapshot is layout.unpack_producer_snapshot
    assert files.segment_file_name is layout.segment_file_name
    assert recovery.LOG_FILE_SUFFIX is dump_log.LOG_FILE_SUFFIX is layout.LOG_FILE_SUFFIX
    assert topic_names.log_layout is layout  # every name rule goes through the module
    assert log_dirs.LOG_START_OFFSET_CHECKPOINT_FILE is layout.LOG_START_OFFSET_CHECKPOINT_FILE


# --- one module per format ----------------------------------------------------------------------

# The modules log_layout maps, each holding one format (or, for entry_field and checkpoint_text,
# what two or three formats share).
FORMAT_MODULES = (
    "file_names", "partition_dirs", "offset_index_file", "time_index_file", "txn_index_file",
    "producer_snapshot", "offset_checkpoint", "leader_epoch_checkpoint", "checkpoint_text",
    "entry_field",
)


@pytest.mark.parametrize("name", FORMAT_MODULES)
def test_each_format_module_opens_with_its_layout(name: str) -> None:
    module = importlib.import_module(f"stratalog.records.{name}")
    opening = "\n".join(module.__doc__.splitlines()[:25])
    # A literal block (the byte or text layout) in the opening, except for the shared pieces,
    # which point at the formats that use them.
    assert "::" in opening or name == "entry_field", opening
    assert name in layout.__doc__  # the map names it


def test_log_layout_re_exports_the_format_modules_names() -> None:
    owners = {}
    for name in FORMAT_MODULES:
        module = importlib.import_module(f"stratalog.records.{name}")
        for exported in module.__all__:
            owners.setdefault(exported, getattr(module, exported))
    for exported in layout.__all__:
        assert getattr(layout, exported) is owners[exported], exported
