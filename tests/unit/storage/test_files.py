"""Segment file paths (stratalog.server.storage.files), against LogFileUtils and
docs/kafka-behaviours.md#segment-files.

The names themselves are tested in tests/unit/records/test_log_layout.py; here, the paths built
from them and the engine's error type for a bad name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records import log_layout
from stratalog.server.storage import files
from stratalog.server.storage.errors import InvalidSegmentFileNameError, StorageError

LONG_MAX = 2**63 - 1


def test_segment_file_paths(tmp_path: Path) -> None:
    assert files.log_file(tmp_path, 0) == tmp_path / "00000000000000000000.log"
    assert files.offset_index_file(tmp_path, 1234) == tmp_path / "00000000000000001234.index"
    assert files.time_index_file(tmp_path, 5) == tmp_path / "00000000000000000005.timeindex"
    assert files.transaction_index_file(tmp_path, 7) == tmp_path / "00000000000000000007.txnindex"
    assert files.producer_snapshot_file(tmp_path, 9) == tmp_path / "00000000000000000009.snapshot"


def test_temporary_suffixes_go_after_the_normal_suffix(tmp_path: Path) -> None:
    assert (
        files.log_file(tmp_path, 0, log_layout.DELETED_FILE_SUFFIX).name
        == "00000000000000000000.log.deleted"
    )
    assert (
        files.offset_index_file(tmp_path, 100, log_layout.SWAP_FILE_SUFFIX).name
        == "00000000000000000100.index.swap"
    )
    assert (
        files.time_index_file(tmp_path, 100, log_layout.CLEANED_FILE_SUFFIX).name
        == "00000000000000000100.timeindex.cleaned"
    )
    assert (
        files.transaction_index_file(tmp_path, 3, ".swap").name
        == "00000000000000000003.txnindex.swap"
    )


def test_paths_accept_a_string_directory() -> None:
    assert files.log_file("/data/t-0", 42) == Path("/data/t-0/00000000000000000042.log")


@pytest.mark.parametrize(
    ("name", "offset"),
    [
        ("00000000000000000000.log", 0),
        ("00000000000000001234.index", 1234),
        ("00000000000000000100.index.swap", 100),
        ("09223372036854775807.timeindex", LONG_MAX),
        ("42.log", 42),  # Kafka parses any digits, padded or not
        ("/some/dir/00000000000000000007.snapshot", 7),
    ],
)
def test_offset_from_file_name(name: str, offset: int) -> None:
    assert files.offset_from_file_name(name) == offset


def test_offset_from_file_uses_the_last_path_component(tmp_path: Path) -> None:
    # A directory name with dots and digits must not confuse the parser.
    path = tmp_path / "topic.v2-0" / "00000000000000000077.log.deleted"
    assert files.offset_from_file(path) == 77
    assert files.offset_from_file_name(path) == 77


# Every bad name is in tests/unit/records/test_log_layout.py; here, the storage error.
@pytest.mark.parametrize(
    "name",
    [
        "abc.log",
        "١٢٣.log",  # Arabic-Indic digits: int() would take them, Kafka would not
        "09223372036854775808.log",  # Long.MAX + 1
    ],
)
def test_offset_from_file_name_rejects_bad_names(name: str) -> None:
    with pytest.raises(InvalidSegmentFileNameError) as caught:
        files.offset_from_file_name(name)
    # A ValueError (as asked of the API) and a StorageError (our tree), naming the file.
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, StorageError)
    assert repr(name) in str(caught.value)


@given(st.integers(min_value=0, max_value=LONG_MAX))
def test_paths_parse_back_to_their_offset(offset: int) -> None:
    for make in (files.log_file, files.offset_index_file, files.time_index_file,
                 files.transaction_index_file, files.producer_snapshot_file):
        assert files.offset_from_file(make("/d", offset)) == offset
