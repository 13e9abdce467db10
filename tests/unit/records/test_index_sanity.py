"""The index sanity checks (records/offset_index_file.py, time_index_file.py): the one rule set
that the storage engine's indexes and ``stratalog dump-log --index-sanity-check`` apply."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from stratalog.cli.dump_log import DumpOptions, dump_files
from stratalog.records.entry_field import SanityRule
from stratalog.records.offset_index_file import offset_index_sanity
from stratalog.records.time_index_file import TimeIndexEntry, time_index_sanity
from stratalog.server.storage.errors import CorruptIndexError
from stratalog.server.storage.offset_index import OffsetIndex
from stratalog.server.storage.time_index import TimeIndex

RULE = SanityRule


def test_offset_index_rules_in_kafkas_order():
    assert offset_index_sanity(0, None) == ()
    assert offset_index_sanity(16, 0) == ()  # last offset == base offset is legal
    assert offset_index_sanity(16, -1) == (RULE.LAST_OFFSET_NOT_BELOW_BASE,)
    assert offset_index_sanity(11, 3) == (RULE.WHOLE_ENTRIES,)
    assert offset_index_sanity(3, None) == (RULE.WHOLE_ENTRIES,)
    assert offset_index_sanity(19, -5) == (RULE.LAST_OFFSET_NOT_BELOW_BASE, RULE.WHOLE_ENTRIES)


def test_time_index_rules_in_kafkas_order():
    assert time_index_sanity(0, None, None) == ()
    assert time_index_sanity(24, 5, TimeIndexEntry(5, 0)) == ()
    # The zeros of an untrimmed file: the last timestamp (0) below the first.
    assert time_index_sanity(24, 5, TimeIndexEntry(0, 0)) == (
        RULE.LAST_TIMESTAMP_NOT_BELOW_FIRST,
    )
    assert time_index_sanity(24, 5, TimeIndexEntry(9, -1)) == (RULE.LAST_OFFSET_NOT_BELOW_BASE,)
    assert time_index_sanity(25, 5, TimeIndexEntry(0, -1)) == tuple(RULE)[::-1]


# (file bytes, base offset) of offset indexes: sane, and broken in each way.
OFFSET_INDEXES = [
    (b"", 0),
    (struct.pack(">ii", 0, 0), 100),
    (struct.pack(">iiii", 3, 0, 7, 4096), 100),
    (struct.pack(">iiii", 3, 0, -2, 69), 100),
    (struct.pack(">ii", 3, 0) + b"\x00\x00\x00", 0),
    (struct.pack(">ii", -1, 0) + b"\x00", 100),
]
TIME_INDEXES = [
    (b"", 0),
    (struct.pack(">qiqi", 1000, 0, 2000, 5), 100),
    (struct.pack(">qiqi", 1000, 0, 0, 0), 100),
    (struct.pack(">qiqi", 1000, 0, 2000, -3), 100),
    (struct.pack(">qi", 1000, 0) + b"\x00", 0),
]


def _dump_passes(path: Path) -> bool:
    out, err = io.StringIO(), io.StringIO()
    code = dump_files([str(path)], DumpOptions(index_sanity_check=True), out, err)
    return code == 0 and out.getvalue().endswith("passed sanity check.\n")


def _index_passes(index: OffsetIndex | TimeIndex) -> bool:
    try:
        index.sanity_check()
    except CorruptIndexError:
        return False
    finally:
        index.close()
    return True


@pytest.mark.parametrize(("data", "base_offset"), OFFSET_INDEXES)
def test_dump_log_and_the_offset_index_agree(tmp_path: Path, data: bytes, base_offset: int):
    path = tmp_path / f"{base_offset:020d}.index"
    path.write_bytes(data)
    if not data:
        # dump-log says "is empty." before any check; the index passes.
        assert _index_passes(OffsetIndex(path, base_offset))
        return
    dumped = _dump_passes(path)
    path.write_bytes(data)  # (the index trims a partial entry when it closes)
    assert _index_passes(OffsetIndex(path, base_offset)) == dumped


@pytest.mark.parametrize(("data", "base_offset"), TIME_INDEXES)
def test_dump_log_and_the_time_index_agree(tmp_path: Path, data: bytes, base_offset: int):
    path = tmp_path / f"{base_offset:020d}.timeindex"
    path.write_bytes(data)
    dumped = _dump_passes(path)
    path.write_bytes(data)
    assert _index_passes(TimeIndex(path, base_offset)) == dumped
