"""The offset index (stratalog.server.storage.offset_index).

Ports the intent of Kafka's OffsetIndexTest, checks the bytes on disk against
docs/kafka-behaviours.md#index-files, and runs random operations against a plain sorted-list model.
"""

from __future__ import annotations

import bisect
import os
import random
import re
import shutil
import struct
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from stratalog.server.storage.errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidConfigError,
    InvalidOffsetError,
    LogClosedError,
    OffsetOverflowError,
    StorageIOError,
)
from stratalog.server.storage.index import _interpolation_search
from stratalog.server.storage.offset_index import OffsetIndex, OffsetPosition

BASE_OFFSET = 45
INT32_MAX = 2**31 - 1


@pytest.fixture
def index(tmp_path: Path):
    idx = OffsetIndex(tmp_path / "00000000000000000045.index", BASE_OFFSET, 30 * 8)
    yield idx
    idx.close()


def monotonic_seq(rng: random.Random, base: int, length: int) -> list[int]:
    seq, last = [], base
    for _ in range(length):
        last += rng.randint(1, 15)
        seq.append(last)
    return seq


# --------------------------------------------------------------------------- Kafka's tests


def test_random_lookup(index: OffsetIndex) -> None:
    rng = random.Random(7)
    assert index.lookup(92) == OffsetPosition(BASE_OFFSET, 0), "empty index gives (base, 0)"
    offsets = monotonic_seq(rng, BASE_OFFSET + 1, index.max_entries)
    positions = monotonic_seq(rng, 0, index.max_entries)
    for offset, position in zip(offsets, positions, strict=True):
        index.append(offset, position)
    for offset, position in zip(offsets, positions, strict=True):
        assert index.lookup(offset) == OffsetPosition(offset, position)
    for target in range(BASE_OFFSET, offsets[-1] + 20):
        slot = bisect.bisect_right(offsets, target) - 1
        expected = (
            OffsetPosition(BASE_OFFSET, 0)
            if slot < 0
            else OffsetPosition(offsets[slot], positions[slot])
        )
        assert index.lookup(target) == expected, target


def test_lookup_extreme_cases(index: OffsetIndex) -> None:
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    last = BASE_OFFSET + index.max_entries
    assert index.lookup(last) == OffsetPosition(last, index.max_entries - 1)
    assert index.lookup(2**62) == OffsetPosition(last, index.max_entries - 1)
    assert index.lookup(-(2**62)) == OffsetPosition(BASE_OFFSET, 0)


def test_entry(index: OffsetIndex) -> None:
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i, i)
    for i in range(index.max_entries):
        assert index.entry(i) == OffsetPosition(BASE_OFFSET + i, i)


@pytest.mark.parametrize("slot", [0, 1, -1])
def test_entry_out_of_range_is_a_value_error(index: OffsetIndex, slot: int) -> None:
    with pytest.raises(ValueError, match="has 0 entries"):
        index.entry(slot)
    index.append(BASE_OFFSET, 0)
    if slot != 0:
        with pytest.raises(ValueError, match=re.escape(str(index.path))):
            index.entry(slot)


def test_append_to_a_full_index_fails(index: OffsetIndex) -> None:
    assert index.max_entries == 30
    for i in range(index.max_entries):
        assert not index.is_full
        index.append(BASE_OFFSET + i + 1, i)
    assert index.is_full
    with pytest.raises(IndexFullError, match=re.escape(str(index.path))):
        index.append(BASE_OFFSET + index.max_entries + 1, 1)
    assert index.entries == 30


def test_append_out_of_order_fails(index: OffsetIndex) -> None:
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError, match="51"):
        index.append(50, 1)
    with pytest.raises(InvalidOffsetError):
        index.append(51, 1)  # equal is not larger
    assert index.entries == 1
    assert index.last_offset == 51


def test_fetch_upper_bound_offset(index: OffsetIndex) -> None:
    first = OffsetPosition(BASE_OFFSET, 0)
    second = OffsetPosition(BASE_OFFSET + 1, 10)
    third = OffsetPosition(BASE_OFFSET + 2, 23)
    fourth = OffsetPosition(BASE_OFFSET + 3, 37)
    assert index.fetch_upper_bound_offset(first.position, 5) is None
    for entry in (first, second, third, fourth):
        index.append(*entry)
    assert index.fetch_upper_bound_offset(first.position, 5) == second
    assert index.fetch_upper_bound_offset(first.position, 10) == second
    assert index.fetch_upper_bound_offset(first.position, 23) == third
    assert index.fetch_upper_bound_offset(first.position, 22) == third
    assert index.fetch_upper_bound_offset(second.position, 24) == fourth
    assert index.fetch_upper_bound_offset(fourth.position, 1) is None
    assert index.fetch_upper_bound_offset(first.position, 200) is None
    assert index.fetch_upper_bound_offset(second.position, 200) is None
    assert index.fetch_upper_bound_offset(first.position, 0) == first


def test_reopen(index: OffsetIndex) -> None:
    first, second = OffsetPosition(51, 0), OffsetPosition(52, 1)
    index.append(*first)
    index.append(*second)
    index.close()
    reopened = OffsetIndex(index.path, BASE_OFFSET)
    try:
        assert reopened.lookup(first.offset) == first
        assert reopened.lookup(second.offset) == second
        assert reopened.last_offset == second.offset
        assert reopened.entries == 2
        # Closed (trimmed) file reopened: exactly full, so appends fail until it is resized.
        assert reopened.is_full
        with pytest.raises(IndexFullError):
            reopened.append(53, 2)
    finally:
        reopened.close()


def test_truncate(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 10 * 8)
    idx.truncate()
    for i in range(1, 10):
        idx.append(i, i)

    idx.truncate_to(12)
    assert idx.lookup(10) == OffsetPosition(9, 9), "truncate past the end changes nothing"
    assert idx.last_offset == 9

    idx.append(10, 10)
    idx.truncate_to(10)
    assert idx.lookup(10) == OffsetPosition(9, 9), "truncate at the last entry removes it"
    assert idx.last_offset == 9
    idx.append(10, 10)

    idx.truncate_to(9)
    assert idx.lookup(10) == OffsetPosition(8, 8)
    assert idx.last_offset == 8
    idx.append(9, 9)

    idx.truncate_to(5)
    assert idx.lookup(10) == OffsetPosition(4, 4)
    assert idx.last_offset == 4
    idx.append(5, 5)

    idx.truncate()
    assert idx.entries == 0
    assert idx.last_offset == 0
    idx.append(0, 0)
    idx.close()


def test_truncate_to_between_entries_keeps_the_floor_entry(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 100, 80)
    for offset, position in [(105, 0), (110, 100), (120, 200)]:
        idx.append(offset, position)
    idx.truncate_to(115)  # no entry for 115: keep 105 and 110, drop 120
    assert idx.entries_list() == [OffsetPosition(105, 0), OffsetPosition(110, 100)]
    idx.truncate_to(100)  # below every entry: drop all
    assert idx.entries == 0
    assert idx.last_offset == 100
    idx.close()


def test_closed_index_refuses_operations(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    idx.append(1, 1)
    idx.close()
    idx.close()  # idempotent
    assert idx.is_closed
    for call in (
        lambda: idx.lookup(1),
        lambda: idx.append(2, 2),
        lambda: idx.entry(0),
        lambda: idx.flush(),
        lambda: idx.resize(80),
        lambda: idx.truncate_to(0),
    ):
        with pytest.raises(LogClosedError, match="closed"):
            call()


def test_sanity_check_accepts_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "20.index", 20, 80)
    idx.append(20, 0)
    idx.sanity_check()
    idx.close()


# ------------------------------------------------------------------- files, sizes and bytes


def test_new_file_is_preallocated_to_the_default_size(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0)
    assert path.stat().st_size == 10485760
    assert idx.length_bytes == 10485760
    assert idx.max_entries == 1310720
    assert idx.entries == 0
    assert idx.max_index_size_bytes == 10485760
    idx.close()
    assert path.stat().st_size == 0, "close trims an empty index to nothing"


@pytest.mark.parametrize(("max_bytes", "length"), [(8, 8), (15, 8), (16, 16), (10485756, 10485752)])
def test_new_file_length_is_rounded_down_to_whole_entries(
    tmp_path: Path, max_bytes: int, length: int
) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, max_bytes)
    assert (tmp_path / "0.index").stat().st_size == length
    assert idx.max_entries == length // 8
    assert (tmp_path / "0.index").read_bytes() == bytes(length), "preallocated with zeros"
    idx.close()


@pytest.mark.parametrize("max_bytes", [0, 4, 7])
def test_max_size_below_one_entry_is_rejected_and_leaves_no_file(
    tmp_path: Path, max_bytes: int
) -> None:
    with pytest.raises(InvalidConfigError, match="max index size"):
        OffsetIndex(tmp_path / "0.index", 0, max_bytes)
    assert not (tmp_path / "0.index").exists()


def test_entry_bytes_are_kafkas(tmp_path: Path) -> None:
    # docs/kafka-behaviours.md#index-files: base offset 100, entry (105, 4096) -> 0000000500001000.
    idx = OffsetIndex(tmp_path / "100.index", 100, 64)
    idx.append(105, 4096)
    idx.append(100 + INT32_MAX, INT32_MAX)
    idx.close()
    assert (tmp_path / "100.index").read_bytes() == bytes.fromhex(
        "00000005000010007fffffff7fffffff"
    )


def test_trim_on_close_and_reopen_gives_the_same_entries(tmp_path: Path) -> None:
    path = tmp_path / "1000.index"
    idx = OffsetIndex(path, 1000, 4096)
    entries = [OffsetPosition(1000 + 3 * i, 150 * i) for i in range(1, 40)]
    for entry in entries:
        idx.append(*entry)
    assert path.stat().st_size == 4096
    idx.close()
    assert path.stat().st_size == 39 * 8
    reopened = OffsetIndex(path, 1000, 4096)
    assert reopened.entries_list() == entries
    assert reopened.last_offset == entries[-1].offset
    assert reopened.max_index_size_bytes == 4096
    # Grow back (what the log does for the active segment after load) and keep appending.
    assert reopened.resize(reopened.max_index_size_bytes)
    assert path.stat().st_size == 4096
    reopened.append(2000, 99999)
    assert reopened.entries_list() == [*entries, OffsetPosition(2000, 99999)]
    reopened.close()
    assert path.stat().st_size == 40 * 8


def test_existing_file_is_trusted_blindly(tmp_path: Path) -> None:
    # An untrimmed file left by a crash: every zero slot reads as (base_offset, 0).
    path = tmp_path / "50.index"
    path.write_bytes(bytes.fromhex("0000000100000010") + bytes(8 * 9))
    idx = OffsetIndex(path, 50, 1024)
    assert idx.entries == 10
    assert idx.max_entries == 10
    assert idx.length_bytes == 80, "an existing file is not resized on open"
    assert idx.entry(0) == OffsetPosition(51, 16)
    assert idx.entry(9) == OffsetPosition(50, 0)
    assert idx.last_offset == 50
    idx.sanity_check()  # Kafka's check does not catch this (last offset == base offset)
    with pytest.raises(CorruptIndexError, match="slot 1"):
        idx.check()  # the full check does
    idx.close()


def test_existing_file_with_a_partial_entry_fails_the_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(bytes.fromhex("0000000100000010") + b"\x00\x00\x00")
    idx = OffsetIndex(path, 0)
    assert idx.entries == 1, "a trailing partial entry is ignored"
    assert idx.lookup(5) == OffsetPosition(1, 16)
    with pytest.raises(CorruptIndexError, match=r"11 bytes.*multiple of the 8-byte"):
        idx.sanity_check()
    with pytest.raises(CorruptIndexError, match=re.escape(str(path))):
        idx.check()
    idx.close()
    assert path.stat().st_size == 8, "trim cuts the partial entry"


def test_sanity_check_detects_last_offset_below_base(tmp_path: Path) -> None:
    path = tmp_path / "100.index"
    path.write_bytes(bytes.fromhex("0000000100000000ffffffff00000010"))  # rel -1
    idx = OffsetIndex(path, 100)
    assert idx.last_offset == 99
    with pytest.raises(CorruptIndexError, match=r"last offset is 99.*base offset 100"):
        idx.sanity_check()
    idx.close()


def test_empty_existing_file_opens_without_a_map(tmp_path: Path) -> None:
    path = tmp_path / "7.index"
    path.touch()
    idx = OffsetIndex(path, 7, 80)
    assert idx.entries == 0
    assert idx.max_entries == 0
    assert idx.is_full, "a zero-length index has no slot (the log resizes it before use)"
    assert idx.lookup(100) == OffsetPosition(7, 0)
    assert idx.fetch_upper_bound_offset(0, 10) is None
    idx.truncate_to(3)
    idx.flush()
    idx.sanity_check()
    with pytest.raises(IndexFullError):
        idx.append(8, 0)
    assert idx.resize(80)
    idx.append(8, 0)
    assert idx.lookup(100) == OffsetPosition(8, 0)
    idx.close()
    assert path.read_bytes() == bytes.fromhex("0000000100000000")


def test_resize(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 30 * 8)
    assert idx.resize(30 * 8) is False, "same size: nothing to do"
    assert idx.resize(30 * 8 + 7) is False, "rounded down to the same size"
    assert idx.resize(15 * 8) is True
    assert idx.max_entries == 15
    assert idx.resize(60 * 8) is True
    assert idx.max_entries == 60
    assert (tmp_path / "0.index").stat().st_size == 480
    for i in range(10):
        idx.append(i, i * 10)
    # Below the used bytes: raised to them, nothing dropped.
    assert idx.resize(8) is True
    assert idx.length_bytes == 80
    assert idx.entries == 10
    assert idx.is_full
    assert idx.entries_list() == [OffsetPosition(i, i * 10) for i in range(10)]
    idx.close()


def test_reset_drops_entries_and_grows_back(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    for i in range(5):
        idx.append(i, i)
    idx.trim_to_valid_size()
    assert idx.length_bytes == 40
    idx.reset()
    assert idx.entries == 0
    assert idx.length_bytes == 80
    assert idx.last_offset == 0
    idx.close()


def test_relative_offset_bounds(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "1000.index", 1000, 80)
    assert idx.relative_offset(1000) == 0
    assert idx.relative_offset(1000 + INT32_MAX) == INT32_MAX
    assert idx.can_append_offset(1000)
    assert idx.can_append_offset(1000 + INT32_MAX)
    assert not idx.can_append_offset(999)
    assert not idx.can_append_offset(1000 + INT32_MAX + 1)
    for offset in (999, 1000 + INT32_MAX + 1):
        with pytest.raises(OffsetOverflowError, match=re.escape(str(offset))):
            idx.relative_offset(offset)
        with pytest.raises(OffsetOverflowError, match=r"1000\.index"):
            idx.append(offset, 0)
    assert idx.entries == 0
    idx.close()


@pytest.mark.parametrize("position", [-1, INT32_MAX + 1])
def test_position_outside_int32_is_rejected(tmp_path: Path, position: int) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    with pytest.raises(ValueError, match="position"):
        idx.append(1, position)
    assert idx.entries == 0
    idx.close()


def test_rename_delete_and_update_parent_dir(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 80)
    idx.append(3, 30)
    renamed = tmp_path / "0.index.deleted"
    idx.rename_to(renamed)
    assert idx.path == renamed
    assert renamed.exists() and not path.exists()
    idx.append(4, 40)  # still mapped: appends and lookups keep working after a rename
    assert idx.lookup(4) == OffsetPosition(4, 40)
    assert idx.delete_if_exists() is True
    assert not renamed.exists()
    assert idx.delete_if_exists() is False
    assert idx.is_closed

    other = OffsetIndex(tmp_path / "1.index", 1, 80)
    other.update_parent_dir(tmp_path / "elsewhere")
    assert other.path == tmp_path / "elsewhere" / "1.index"
    other.close()


def test_rename_of_a_missing_file_is_a_storage_io_error(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    (tmp_path / "0.index").unlink()
    with pytest.raises(StorageIOError, match=r"0\.index"):
        idx.rename_to(tmp_path / "x.index")
    assert idx.path == tmp_path / "x.index", "the path follows the rename even on failure"
    idx.delete_if_exists()


def test_open_failure_is_a_storage_io_error(tmp_path: Path) -> None:
    with pytest.raises(StorageIOError, match="no-such-dir"):
        OffsetIndex(tmp_path / "no-such-dir" / "0.index", 0, 80)


def test_flush_writes_entries_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 80)
    idx.append(1, 2)
    idx.flush()
    # The mapping is shared with the page cache: a plain read sees the entry without a close.
    assert path.read_bytes()[:8] == bytes.fromhex("0000000100000002")
    idx.close()


def test_warm_section_lookups_match_a_plain_binary_search(tmp_path: Path) -> None:
    # More entries than the 1024-entry warm section, so both branches of the search run.
    rng = random.Random(11)
    count = 5000
    idx = OffsetIndex(tmp_path / "0.index", 0, count * 8)
    offsets = monotonic_seq(rng, 0, count)
    positions = monotonic_seq(rng, -1, count)
    for offset, position in zip(offsets, positions, strict=True):
        idx.append(offset, position)
    targets = list(range(0, offsets[-1] + 3, 7)) + offsets + [o - 1 for o in offsets]
    for target in targets:
        slot = bisect.bisect_right(offsets, target) - 1
        expected = (
            OffsetPosition(0, 0) if slot < 0 else OffsetPosition(offsets[slot], positions[slot])
        )
        assert idx.lookup(target) == expected
    for target in list(range(0, positions[-1] + 3, 11)) + positions:
        slot = bisect.bisect_left(positions, target)
        expected = None if slot == count else OffsetPosition(offsets[slot], positions[slot])
        assert idx.fetch_upper_bound_offset(target, 0) == expected
    # Truncation in the cold part and in the warm part.
    idx.truncate_to(offsets[4500])
    assert idx.entries == 4500
    idx.truncate_to(offsets[100] + 1)
    assert idx.entries == 101
    assert idx.last_offset == offsets[100]
    idx.close()


@pytest.mark.parametrize("shape", ["exponential", "clumped", "uniform"])
def test_lookups_over_skewed_offsets_match_a_plain_binary_search(
    tmp_path: Path, shape: str
) -> None:
    # The search guesses where the target lies from the values at the ends of the range:
    # offsets far from linear in the slot make the guesses poor, never the answers wrong.
    rng = random.Random(shape)
    count = 3000
    if shape == "exponential":
        offsets = sorted({int(1.006**i) + i for i in range(count)})
    elif shape == "clumped":
        offsets, last = [], 0
        for i in range(count):
            last += 1 if (i // 100) % 2 else rng.randint(10_000, 1_000_000)
            offsets.append(last)
    else:
        offsets = list(range(5, 5 + 7 * count, 7))
    idx = OffsetIndex(tmp_path / "0.index", 0, len(offsets) * 8)
    positions = list(range(0, 4 * len(offsets), 4))
    for offset, position in zip(offsets, positions, strict=True):
        idx.append(offset, position)
    targets = offsets + [o - 1 for o in offsets] + [o + 1 for o in offsets]
    targets += [rng.randrange(offsets[-1] + 10) for _ in range(3000)]
    for target in targets:
        slot = bisect.bisect_right(offsets, target) - 1
        expected = (
            OffsetPosition(0, 0) if slot < 0 else OffsetPosition(offsets[slot], positions[slot])
        )
        assert idx.lookup(target) == expected, target
        assert idx.lookup_position(target) == expected.position, target
    idx.close()


def test_lookup_position(index: OffsetIndex) -> None:
    assert index.lookup_position(BASE_OFFSET + 7) == 0, "empty index: scan from the start"
    index.append(BASE_OFFSET + 5, 100)
    index.append(BASE_OFFSET + 9, 250)
    assert index.lookup_position(BASE_OFFSET + 4) == 0, "below every entry"
    assert index.lookup_position(BASE_OFFSET + 5) == 100
    assert index.lookup_position(BASE_OFFSET + 8) == 100
    assert index.lookup_position(BASE_OFFSET + 9) == 250
    assert index.lookup_position(2**40) == 250
    index.close()
    with pytest.raises(LogClosedError):
        index.lookup_position(BASE_OFFSET)


def test_lookup_floor_and_next(index: OffsetIndex) -> None:
    # The floor entry and the next entry's position: the batch wanted starts between them.
    assert index.lookup_floor_and_next(BASE_OFFSET + 7) == (-1, 0, -1), "empty index"
    index.append(BASE_OFFSET + 5, 100)
    index.append(BASE_OFFSET + 9, 250)
    assert index.lookup_floor_and_next(BASE_OFFSET + 4) == (-1, 0, 100), "below every entry"
    assert index.lookup_floor_and_next(BASE_OFFSET + 5) == (BASE_OFFSET + 5, 100, 250)
    assert index.lookup_floor_and_next(BASE_OFFSET + 8) == (BASE_OFFSET + 5, 100, 250)
    assert index.lookup_floor_and_next(BASE_OFFSET + 9) == (BASE_OFFSET + 9, 250, -1)
    assert index.lookup_floor_and_next(2**40) == (BASE_OFFSET + 9, 250, -1)
    index.truncate_to(BASE_OFFSET + 9)
    assert index.lookup_floor_and_next(BASE_OFFSET + 9) == (BASE_OFFSET + 5, 100, -1)
    index.close()
    with pytest.raises(LogClosedError):
        index.lookup_floor_and_next(BASE_OFFSET)


def test_lookups_in_an_unsorted_index_return_one_of_its_entries(tmp_path: Path) -> None:
    # A corrupt file (as an untrimmed one is, or bytes gone bad) is trusted blindly when
    # reopened: lookups must still end, with an entry of the file or the empty answer.
    rng = random.Random(5)
    path = tmp_path / "0.index"
    entries = [(rng.randrange(0, 5000), rng.randrange(0, 10**6)) for _ in range(2000)]
    path.write_bytes(b"".join(struct.pack(">ii", o, p) for o, p in entries))
    idx = OffsetIndex(path, 0)
    present = {OffsetPosition(o, p) for o, p in entries} | {OffsetPosition(0, 0)}
    for target in [rng.randrange(-10, 5010) for _ in range(2000)]:
        assert idx.lookup(target) in present
    idx.close_handler()


@given(
    values=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=60),
    target=st.integers(-(2**31), 2**31 + 5),
    data=st.data(),
)
def test_interpolation_search_is_a_binary_search(
    values: list[int], target: int, data: st.DataObject
) -> None:
    # On a strictly increasing column: the binary search's answer. On any column: a slot in
    # range, without an error or an endless loop.
    column = struct.Struct(">i")
    for increasing in (True, False):
        if increasing:
            values = sorted(set(values))
        lo = data.draw(st.integers(0, len(values) - 1))
        hi = data.draw(st.integers(lo, len(values) - 1))
        if values[lo] > target:
            continue  # outside the search's precondition: values[lo] <= target
        buf = b"".join(column.pack(v) for v in values)
        slot = _interpolation_search(buf, column.unpack_from, 4, 0, target, lo, values[lo], hi)
        assert lo <= slot <= hi
        if increasing:
            assert slot == bisect.bisect_right(values, target, lo, hi + 1) - 1


def test_concurrent_lookups_never_see_a_partial_or_unknown_entry(tmp_path: Path) -> None:
    # One writer appends while readers look up; every answer must be an entry that was (or is
    # being) appended, or the empty answer. No timing is asserted.
    # Starts small and is grown whenever full, so the map is replaced under the readers.
    idx = OffsetIndex(tmp_path / "0.index", 0, 64 * 8)
    appended = {OffsetPosition(0, 0)} | {OffsetPosition(2 * i + 1, 3 * i) for i in range(20000)}
    done = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        rng = random.Random(threading.get_ident())
        try:
            while not done.is_set():
                result = idx.lookup(rng.randrange(0, 40002))
                assert result in appended, result
        except BaseException as exc:
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for thread in readers:
        thread.start()
    try:
        for i in range(20000):
            if idx.is_full:
                assert idx.resize(idx.length_bytes * 2)
            idx.append(2 * i + 1, 3 * i)
            if i % 5000 == 4999:
                idx.flush()
                idx.trim_to_valid_size()  # shrink to the used bytes: also a remap
    finally:
        done.set()
        for thread in readers:
            thread.join()
    assert errors == []
    assert idx.entries == 20000
    idx.close()


class SmallWarmOffsetIndex(OffsetIndex):
    """A warm section of 3 entries, so that small indexes exercise the cold branch too."""

    warm_section_bytes = 3 * 8


@given(
    gaps=st.lists(st.tuples(st.integers(1, 9), st.integers(0, 9)), min_size=0, max_size=40),
    targets=st.lists(st.integers(-5, 500), min_size=1, max_size=30),
)
def test_warm_and_cold_searches_agree_with_bisect(
    gaps: list[tuple[int, int]], targets: list[int]
) -> None:
    directory = Path(tempfile.mkdtemp(prefix="offset-index-warm-"))
    try:
        idx = SmallWarmOffsetIndex(directory / "0.index", 10, 64 * 8)
        offsets, positions = [], []
        offset, position = 9, 0
        for offset_gap, position_gap in gaps:
            offset, position = offset + offset_gap, position + position_gap + 1
            idx.append(offset, position)
            offsets.append(offset)
            positions.append(position)
        for target in targets:
            slot = bisect.bisect_right(offsets, target) - 1
            expected = (
                OffsetPosition(10, 0)
                if slot < 0
                else OffsetPosition(offsets[slot], positions[slot])
            )
            assert idx.lookup(target) == expected
            assert idx.lookup_position(target) == expected.position
            following = bisect.bisect_right(offsets, target)
            assert idx.lookup_floor_and_next(target) == (
                offsets[slot] if slot >= 0 else -1,
                expected.position,
                positions[following] if following < len(offsets) else -1,
            )
            slot = bisect.bisect_left(positions, target)
            expected_upper = (
                None if slot == len(positions) else OffsetPosition(offsets[slot], positions[slot])
            )
            assert idx.fetch_upper_bound_offset(target, 0) == expected_upper
        idx.truncate_to(targets[0])
        assert idx.entries_list() == [
            OffsetPosition(o, p) for o, p in zip(offsets, positions, strict=True) if o < targets[0]
        ]
        idx.close()
    finally:
        shutil.rmtree(directory)


def test_preallocation_is_sparse(tmp_path: Path) -> None:
    # The default 10 MiB file is a hole, not 10 MiB of written zeros.
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0)
    assert path.stat().st_blocks * 512 < idx.length_bytes
    idx.close()


def _vm_flags_of_mapping(path: Path) -> list[str]:
    """The VmFlags of this process's mappings of ``path`` (Linux's /proc/self/smaps)."""
    flags, inside = [], False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("VmFlags:"):
                flags.append(line.split(":", 1)[1].split())
    return flags


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux's /proc only")
def test_a_map_with_a_sparse_tail_is_advised_random_a_trimmed_one_is_not(tmp_path: Path) -> None:
    # Without MADV_RANDOM the first write into a new, sparse index made the kernel read ahead
    # read_ahead_kb of holes (8 MiB, ~3.5 ms, in the append after every roll). A trimmed index
    # keeps the default advice (fault-around for lookups). "rr" is VM_RAND_READ, the flag
    # MADV_RANDOM sets.
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0)
    idx.append(1, 100)
    assert [("rr" in flags) for flags in _vm_flags_of_mapping(path)] == [True]
    idx.resize(80)  # still room past the one entry
    assert [("rr" in flags) for flags in _vm_flags_of_mapping(path)] == [True]
    idx.trim_to_valid_size()
    assert [("rr" in flags) for flags in _vm_flags_of_mapping(path)] == [False]
    idx.close()
    assert _vm_flags_of_mapping(path) == []
    reopened = OffsetIndex(path, 0)  # an existing file: every slot is an entry
    assert [("rr" in flags) for flags in _vm_flags_of_mapping(path)] == [False]
    reopened.resize(800)  # grown back, as the active segment's index after a load
    assert [("rr" in flags) for flags in _vm_flags_of_mapping(path)] == [True]
    reopened.close()


# -------------------------------------------------------------------- model-based testing


class OffsetIndexMachine(RuleBasedStateMachine):
    """Random appends, lookups, truncations, resizes and reopens against a sorted list."""

    BASE = 1000
    MAX_BYTES = 16 * 8

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="offset-index-"))
        self.path = self.dir / "00000000000000001000.index"
        self.index = OffsetIndex(self.path, self.BASE, self.MAX_BYTES)
        self.model: list[OffsetPosition] = []
        self.length_bytes = self.MAX_BYTES

    def teardown(self) -> None:
        self.index.close()
        shutil.rmtree(self.dir)

    def _next_offset(self, gap: int) -> int:
        return (self.model[-1].offset if self.model else self.BASE - 1) + gap

    @rule(gap=st.integers(1, 50), position_gap=st.integers(0, 5000))
    def append(self, gap: int, position_gap: int) -> None:
        offset = self._next_offset(gap)
        position = (self.model[-1].position if self.model else 0) + position_gap
        if len(self.model) >= self.length_bytes // 8:
            with pytest.raises(IndexFullError):
                self.index.append(offset, position)
            return
        self.index.append(offset, position)
        self.model.append(OffsetPosition(offset, position))

    @precondition(lambda self: self.model and len(self.model) < self.length_bytes // 8)
    @rule(back=st.integers(0, 30))
    def append_not_increasing(self, back: int) -> None:
        with pytest.raises(InvalidOffsetError):
            self.index.append(self.model[-1].offset - back, 0)

    @rule(target_offset=st.integers(BASE - 10, BASE + 2000))
    def lookup(self, target_offset: int) -> None:
        offsets = [e.offset for e in self.model]
        slot = bisect.bisect_right(offsets, target_offset) - 1
        expected = OffsetPosition(self.BASE, 0) if slot < 0 else self.model[slot]
        assert self.index.lookup(target_offset) == expected

    @rule(start=st.integers(0, 100_000), size=st.integers(0, 20_000))
    def fetch_upper_bound(self, start: int, size: int) -> None:
        positions = [e.position for e in self.model]
        slot = bisect.bisect_left(positions, start + size)
        expected = None if slot == len(self.model) else self.model[slot]
        assert self.index.fetch_upper_bound_offset(start, size) == expected

    @rule(offset=st.integers(BASE - 10, BASE + 2000))
    def truncate_to(self, offset: int) -> None:
        self.index.truncate_to(offset)
        self.model = [e for e in self.model if e.offset < offset]

    @rule(size=st.integers(0, 40 * 8))
    def resize(self, size: int) -> None:
        expected = max(size - size % 8, len(self.model) * 8)
        changed = self.index.resize(size)
        assert changed == (expected != self.length_bytes)
        self.length_bytes = expected

    @rule()
    def trim(self) -> None:
        self.index.trim_to_valid_size()
        self.length_bytes = len(self.model) * 8

    @rule()
    def reset(self) -> None:
        self.index.reset()
        self.model = []
        self.length_bytes = self.MAX_BYTES

    @rule()
    def reopen(self) -> None:
        self.index.close()
        self.length_bytes = len(self.model) * 8
        self.index = OffsetIndex(self.path, self.BASE, self.MAX_BYTES)

    @rule()
    def reopen_untrimmed(self) -> None:
        # A crash: the file keeps its length and the zero slots come back as entries.
        self.index.flush()
        reopened = OffsetIndex(self.path, self.BASE, self.MAX_BYTES)
        assert reopened.entries == self.length_bytes // 8
        assert reopened.entries_list()[: len(self.model)] == self.model
        # Past the model are zeros or entries truncated away (truncation does not erase bytes).
        reopened.close_handler()  # drop this view without trimming the shared file

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert self.index.entries == len(self.model)
        assert self.index.length_bytes == self.length_bytes
        assert os.path.getsize(self.path) == self.length_bytes
        assert self.index.max_entries == self.length_bytes // 8
        assert self.index.is_full == (len(self.model) >= self.length_bytes // 8)
        assert self.index.entries_list() == self.model
        assert self.index.last_offset == (self.model[-1].offset if self.model else self.BASE)
        self.index.sanity_check()
        self.index.check()


OffsetIndexMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_offset_index_against_a_sorted_list = OffsetIndexMachine.TestCase


def test_close_handler_closes_without_trimming(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 80)
    idx.append(1, 1)
    idx.close_handler()
    idx.close_handler()  # idempotent
    assert idx.is_closed
    assert path.stat().st_size == 80, "not trimmed: a reopen sees 10 entries"
    idx.close()  # a no-op on a closed index
    assert path.stat().st_size == 80
