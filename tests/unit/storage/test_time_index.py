"""The time index (stratalog.server.storage.time_index).

Ports the intent of Kafka's TimeIndexTest, checks the bytes on disk against
docs/kafka-behaviours.md#index-files and Kafka TimeIndex.maybeAppend
(docs/kafka-behaviours.md#index-appends), TimeIndex.lastEntry
(docs/kafka-behaviours.md#index-files-mechanics), TimeIndex.lookup
(docs/kafka-behaviours.md#index-lookups), OffsetIndex.truncateTo
(docs/kafka-behaviours.md#truncation) and TimeIndex.sanityCheck
(docs/kafka-behaviours.md#sanity-checks), and runs random operations against a plain sorted-list
model.
"""

from __future__ import annotations

import bisect
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from stratalog.server.storage.errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    InvalidTimestampError,
    LogClosedError,
    OffsetOverflowError,
)
from stratalog.server.storage.time_index import TimeIndex, TimestampOffset

MAX_ENTRIES = 30
BASE_OFFSET = 45


@pytest.fixture
def index(tmp_path: Path):
    idx = TimeIndex(tmp_path / "00000000000000000045.timeindex", BASE_OFFSET, MAX_ENTRIES * 12)
    yield idx
    idx.close()


def append_entries(idx: TimeIndex, count: int) -> None:
    for i in range(1, count + 1):
        idx.maybe_append(i * 10, i * 10 + BASE_OFFSET)


# --------------------------------------------------------------------------- Kafka's tests


def test_lookup(index: TimeIndex) -> None:
    assert index.lookup(100) == TimestampOffset(-1, BASE_OFFSET), "empty index"
    append_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(9) == TimestampOffset(-1, BASE_OFFSET), "below the first timestamp"
    assert index.lookup(25) == TimestampOffset(20, 65), "between two entries"
    assert index.lookup(30) == TimestampOffset(30, 75), "equal to an entry"
    assert index.lookup(10**15) == TimestampOffset(290, 335), "past the last entry"


def test_entry(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    assert index.entry(0) == TimestampOffset(10, 55)
    assert index.entry(1) == TimestampOffset(20, 65)
    assert index.entry(2) == TimestampOffset(30, 75)
    assert index.entry(3) == TimestampOffset(40, 85)


def test_entry_out_of_range_is_a_value_error(index: TimeIndex) -> None:
    with pytest.raises(ValueError, match=re.escape(str(index.path))):
        index.entry(0)


def test_truncate(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate()
    assert index.entries == 0
    assert index.last_entry == TimestampOffset(-1, BASE_OFFSET)
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate_to(10 + BASE_OFFSET)
    assert index.entries == 0


def test_truncate_to_uses_the_offset_column(index: TimeIndex) -> None:
    append_entries(index, 5)  # (10, 55) (20, 65) (30, 75) (40, 85) (50, 95)
    index.truncate_to(100)
    assert index.entries == 5, "past the last offset: nothing removed"
    index.truncate_to(95)
    assert index.last_entry == TimestampOffset(40, 85), "an exact offset is removed"
    index.truncate_to(70)
    assert index.entries_list() == [TimestampOffset(10, 55), TimestampOffset(20, 65)]
    assert index.last_entry == TimestampOffset(20, 65), "re-read after truncation"
    index.maybe_append(25, 70)
    assert index.last_entry == TimestampOffset(25, 70)


def test_append(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    with pytest.raises(IndexFullError, match=re.escape(str(index.path))):
        index.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    index.maybe_append(10000, 1000, skip_full_check=True)
    assert index.entries == MAX_ENTRIES
    assert index.last_entry == TimestampOffset(10000, 1000)
    with pytest.raises(IndexFullError, match="not even the reserved one"):
        index.maybe_append(10001, 1001, skip_full_check=True)


def test_sanity_check(tmp_path: Path, index: TimeIndex) -> None:
    index.sanity_check()
    append_entries(index, 5)
    index.sanity_check()
    index.close()
    path = index.path
    good = path.read_bytes()
    assert len(good) == 5 * 12

    # Last offset below the base offset: relative offset -1 in the last entry.
    path.write_bytes(good[:-4] + struct.pack(">i", -1))
    with TimeIndexOpen(path) as idx, pytest.raises(CorruptIndexError, match="last offset is 44"):
        idx.sanity_check()

    # Last timestamp below the first.
    path.write_bytes(good[:-12] + struct.pack(">qi", 9, 50))
    with (
        TimeIndexOpen(path) as idx,
        pytest.raises(CorruptIndexError, match=r"last timestamp is 9.*first timestamp 10"),
    ):
        idx.sanity_check()

    # A partial entry.
    path.write_bytes(good + b"\x00")
    with TimeIndexOpen(path) as idx, pytest.raises(CorruptIndexError, match="61 bytes"):
        idx.sanity_check()

    path.write_bytes(good)
    with TimeIndexOpen(path) as idx:
        idx.sanity_check()
        idx.check()


class TimeIndexOpen:
    """Open an existing time index for one check, closing it without trimming."""

    def __init__(self, path: Path) -> None:
        self.index = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * 12)

    def __enter__(self) -> TimeIndex:
        return self.index

    def __exit__(self, *exc: object) -> None:
        self.index.close_handler()


def test_untrimmed_file_fails_the_sanity_check(tmp_path: Path) -> None:
    # KAFKA-10207: zeros left by a crash before trimming read as (0, base) entries, whose
    # timestamp is below the first one; the check must catch it.
    path = tmp_path / "45.timeindex"
    idx = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * 12)
    append_entries(idx, 3)
    idx.flush()
    idx.close_handler()  # crash: no trim
    reopened = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * 12)
    assert reopened.entries == MAX_ENTRIES
    assert reopened.last_entry == TimestampOffset(0, BASE_OFFSET)
    with pytest.raises(CorruptIndexError, match="last timestamp is 0"):
        reopened.sanity_check()
    reopened.close()


def test_is_full_reserves_the_last_slot(index: TimeIndex) -> None:
    assert not index.is_full
    append_entries(index, MAX_ENTRIES - 2)
    assert not index.is_full
    append_entries_from = MAX_ENTRIES - 1
    index.maybe_append(append_entries_from * 10, append_entries_from * 10 + BASE_OFFSET)
    assert index.entries == MAX_ENTRIES - 1
    assert index.is_full


def test_last_entry(index: TimeIndex) -> None:
    assert index.last_entry == TimestampOffset(-1, BASE_OFFSET)
    index.maybe_append(1, 1 + BASE_OFFSET)
    assert index.last_entry == TimestampOffset(1, BASE_OFFSET + 1)


def test_resize(index: TimeIndex) -> None:
    assert index.resize(MAX_ENTRIES * 12) is False
    assert index.resize(MAX_ENTRIES // 2 * 12) is True
    assert index.max_entries == MAX_ENTRIES // 2
    assert index.resize(MAX_ENTRIES * 2 * 12) is True
    assert index.max_entries == MAX_ENTRIES * 2


def test_entry_size(index: TimeIndex) -> None:
    assert index.ENTRY_SIZE == 12


# ------------ Kafka TimeIndex.maybeAppend (docs/kafka-behaviours.md#index-appends) append semantics


def test_equal_timestamp_is_ignored(index: TimeIndex) -> None:
    index.maybe_append(100, 50)
    index.maybe_append(100, 50)  # the roll/close entry repeating the last one
    index.maybe_append(100, 60)  # same timestamp, later offset: still ignored
    assert index.entries_list() == [TimestampOffset(100, 50)]


def test_no_timestamp_never_adds_an_entry(index: TimeIndex) -> None:
    index.maybe_append(-1, 50)
    index.maybe_append(-1, 60, skip_full_check=True)
    assert index.entries == 0
    assert index.last_entry == TimestampOffset(-1, BASE_OFFSET)


def test_smaller_timestamp_is_an_error(index: TimeIndex) -> None:
    index.maybe_append(100, 50)
    with pytest.raises(InvalidTimestampError, match=r"timestamp 99 .*last timestamp .*\(100\)"):
        index.maybe_append(99, 51)
    assert index.entries == 1


def test_smaller_offset_is_an_error(index: TimeIndex) -> None:
    index.maybe_append(100, 50)
    with pytest.raises(InvalidOffsetError, match=r"offset 49 .*\(50\)"):
        index.maybe_append(101, 49)


def test_larger_timestamp_at_the_same_offset_is_appended(index: TimeIndex) -> None:
    index.maybe_append(100, 50)
    index.maybe_append(200, 50)
    assert index.entries_list() == [TimestampOffset(100, 50), TimestampOffset(200, 50)]
    index.truncate_to(50)
    assert index.entries == 0, "both entries at offset 50 go (the first one >= 50 and after)"


def test_offset_overflow_is_an_error(index: TimeIndex) -> None:
    with pytest.raises(OffsetOverflowError, match="44"):
        index.maybe_append(5, BASE_OFFSET - 1)
    with pytest.raises(OffsetOverflowError):
        index.maybe_append(5, BASE_OFFSET + 2**31)
    assert index.entries == 0


def test_timestamp_outside_int64_is_an_error(index: TimeIndex) -> None:
    with pytest.raises(InvalidTimestampError, match="int64"):
        index.maybe_append(2**63, BASE_OFFSET)


# ----------------------------------------------------------------- files, sizes and bytes


def test_new_file_is_preallocated_to_the_default_size(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    idx = TimeIndex(path, 0)
    assert path.stat().st_size == 10485756
    assert idx.max_entries == 873813
    assert idx.max_index_size_bytes == 10485760
    idx.close()
    assert path.stat().st_size == 0


def test_entry_bytes_are_kafkas(tmp_path: Path) -> None:
    # docs/kafka-behaviours.md#index-files: base offset 100, entry (1700000000000, 105) ->
    # 0000018bcfe5680000000005.
    idx = TimeIndex(tmp_path / "100.timeindex", 100, 120)
    idx.maybe_append(1700000000000, 105)
    idx.maybe_append(2**63 - 1, 100 + 2**31 - 1, skip_full_check=True)
    idx.close()
    assert (tmp_path / "100.timeindex").read_bytes() == bytes.fromhex(
        "0000018bcfe56800000000057fffffffffffffff7fffffff"
    )


def test_trim_on_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "1000.timeindex"
    idx = TimeIndex(path, 1000, 1200)
    entries = [TimestampOffset(1700000000000 + 7 * i, 1000 + 3 * i) for i in range(40)]
    for entry in entries:
        idx.maybe_append(*entry)
    assert path.stat().st_size == 1200
    idx.close()
    assert path.stat().st_size == 40 * 12
    reopened = TimeIndex(path, 1000, 1200)
    assert reopened.entries_list() == entries
    assert reopened.last_entry == entries[-1]
    assert reopened.is_full
    assert reopened.resize(1200)
    assert reopened.last_entry == entries[-1], "re-read after resize"
    reopened.maybe_append(1800000000000, 5000)
    reopened.close()
    assert path.stat().st_size == 41 * 12


def test_lookups_over_the_warm_section(tmp_path: Path) -> None:
    # More entries than the 682-entry warm section of a time index.
    count = 3000
    idx = TimeIndex(tmp_path / "0.timeindex", 0, (count + 1) * 12)
    timestamps = [1000 + 5 * i + (i % 3) for i in range(count)]
    offsets = [2 * i for i in range(count)]
    for timestamp, offset in zip(timestamps, offsets, strict=True):
        idx.maybe_append(timestamp, offset)
    for target in range(900, timestamps[-1] + 10, 3):
        slot = bisect.bisect_right(timestamps, target) - 1
        expected = (
            TimestampOffset(-1, 0) if slot < 0 else TimestampOffset(timestamps[slot], offsets[slot])
        )
        assert idx.lookup(target) == expected
    idx.truncate_to(offsets[2900])
    assert idx.entries == 2900
    idx.truncate_to(offsets[10] + 1)
    assert idx.entries == 11
    idx.close()


def test_closed_index_refuses_operations(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "0.timeindex", 0, 120)
    idx.close()
    with pytest.raises(LogClosedError):
        idx.lookup(0)
    with pytest.raises(LogClosedError):
        idx.maybe_append(1, 1)


class SmallWarmTimeIndex(TimeIndex):
    """A warm section of 2 entries, so that small indexes exercise the cold branch too."""

    warm_section_bytes = 2 * 12


@given(
    steps=st.lists(st.tuples(st.integers(1, 9), st.integers(0, 3)), max_size=40),
    targets=st.lists(st.integers(-5, 500), min_size=1, max_size=30),
)
def test_warm_and_cold_searches_agree_with_bisect(
    steps: list[tuple[int, int]], targets: list[int]
) -> None:
    directory = Path(tempfile.mkdtemp(prefix="time-index-warm-"))
    try:
        idx = SmallWarmTimeIndex(directory / "0.timeindex", 10, 64 * 12)
        timestamps, offsets = [], []
        timestamp, offset = 0, 10
        for timestamp_step, offset_step in steps:
            timestamp, offset = timestamp + timestamp_step, offset + offset_step
            idx.maybe_append(timestamp, offset)
            timestamps.append(timestamp)
            offsets.append(offset)
        for target in targets:
            slot = bisect.bisect_right(timestamps, target) - 1
            expected = (
                TimestampOffset(-1, 10)
                if slot < 0
                else TimestampOffset(timestamps[slot], offsets[slot])
            )
            assert idx.lookup(target) == expected
        # Offsets may repeat here (offset step 0): truncation must still drop every entry
        # whose offset is >= the target.
        idx.truncate_to(targets[0])
        assert idx.entries_list() == [
            TimestampOffset(t, o)
            for t, o in zip(timestamps, offsets, strict=True)
            if o < targets[0]
        ]
        idx.close()
    finally:
        shutil.rmtree(directory)


# -------------------------------------------------------------------- model-based testing


class TimeIndexMachine(RuleBasedStateMachine):
    """Random appends, lookups, truncations, resizes and reopens against a sorted list."""

    BASE = 500
    MAX_BYTES = 12 * 12

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="time-index-"))
        self.path = self.dir / "00000000000000000500.timeindex"
        self.index = TimeIndex(self.path, self.BASE, self.MAX_BYTES)
        self.model: list[TimestampOffset] = []
        self.length_bytes = self.MAX_BYTES

    def teardown(self) -> None:
        self.index.close()
        shutil.rmtree(self.dir)

    def last(self) -> TimestampOffset:
        return self.model[-1] if self.model else TimestampOffset(-1, self.BASE)

    @rule(
        ts_step=st.integers(-3, 40),
        offset_step=st.integers(-2, 30),
        skip_full_check=st.booleans(),
    )
    def maybe_append(self, ts_step: int, offset_step: int, skip_full_check: bool) -> None:
        last = self.last()
        timestamp = last.timestamp + ts_step
        offset = last.offset + offset_step
        max_entries = self.length_bytes // 12
        full = len(self.model) >= max_entries - 1
        expected_error: type[Exception] | None = None
        if not skip_full_check and full:
            expected_error = IndexFullError
        elif self.model and offset < last.offset:
            expected_error = InvalidOffsetError
        elif self.model and timestamp < last.timestamp:
            expected_error = InvalidTimestampError
        elif timestamp > last.timestamp and len(self.model) >= max_entries:
            expected_error = IndexFullError
        elif timestamp > last.timestamp and offset < self.BASE:
            expected_error = OffsetOverflowError
        if expected_error is not None:
            with pytest.raises(expected_error):
                self.index.maybe_append(timestamp, offset, skip_full_check)
            return
        self.index.maybe_append(timestamp, offset, skip_full_check)
        if timestamp > last.timestamp:
            self.model.append(TimestampOffset(timestamp, offset))

    @rule(target_timestamp=st.integers(-5, 1200))
    def lookup(self, target_timestamp: int) -> None:
        timestamps = [e.timestamp for e in self.model]
        slot = bisect.bisect_right(timestamps, target_timestamp) - 1
        expected = TimestampOffset(-1, self.BASE) if slot < 0 else self.model[slot]
        assert self.index.lookup(target_timestamp) == expected

    @rule(offset=st.integers(BASE - 5, BASE + 400))
    def truncate_to(self, offset: int) -> None:
        self.index.truncate_to(offset)
        self.model = [e for e in self.model if e.offset < offset]

    @rule(size=st.integers(0, 30 * 12))
    def resize(self, size: int) -> None:
        expected = max(size - size % 12, len(self.model) * 12)
        assert self.index.resize(size) == (expected != self.length_bytes)
        self.length_bytes = expected

    @rule()
    def trim(self) -> None:
        self.index.trim_to_valid_size()
        self.length_bytes = len(self.model) * 12

    @rule()
    def reset(self) -> None:
        self.index.reset()
        self.model = []
        self.length_bytes = self.MAX_BYTES

    @rule()
    def reopen(self) -> None:
        self.index.close()
        self.length_bytes = len(self.model) * 12
        self.index = TimeIndex(self.path, self.BASE, self.MAX_BYTES)

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert self.index.entries == len(self.model)
        assert self.index.length_bytes == self.length_bytes
        assert os.path.getsize(self.path) == self.length_bytes
        assert self.index.is_full == (len(self.model) >= self.length_bytes // 12 - 1)
        assert self.index.entries_list() == self.model
        assert self.index.last_entry == self.last()
        self.index.sanity_check()
        self.index.check()


TimeIndexMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_time_index_against_a_sorted_list = TimeIndexMachine.TestCase
