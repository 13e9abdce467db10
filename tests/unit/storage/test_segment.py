"""Segment: appends and index entries (Kafka LogSegment.append; docs/kafka-behaviours.md#append),
laziness (Kafka LazyIndex; docs/kafka-behaviours.md#index-files-mechanics), roll conditions (Kafka
LogSegment.shouldRoll and LogSegment.timeWaitedForRoll; docs/kafka-behaviours.md#roll), reads (Kafka
LogSegment.translateOffset and LogSegment.read; docs/kafka-behaviours.md#reads), time lookups (Kafka
LogSegment.findOffsetByTimestamp; docs/kafka-behaviours.md#timestamp-lookup), truncation (Kafka
LogSegment.truncateTo; docs/kafka-behaviours.md#truncation), recovery (Kafka LogSegment.recover;
docs/kafka-behaviours.md#segment-recovery). Ports of Kafka's LogSegmentTest where they apply."""

from __future__ import annotations

import itertools
import os
import random
import struct
import zlib
from pathlib import Path

import pytest

from stratalog.records.batch import Compression, TimestampType, iter_batch_headers, parse_header
from stratalog.records.builder import build_batch
from stratalog.records.errors import CorruptRecordError, InvalidRecordError
from stratalog.records.reader import iter_batches
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    LogClosedError,
    OffsetOverflowError,
    StorageIOError,
)
from stratalog.server.storage.files import log_file, offset_index_file, time_index_file
from stratalog.server.storage.segment import (
    FetchedBatches,
    LogOffsetPosition,
    Segment,
)
from stratalog.server.storage.time_index import TimestampOffset
from stratalog.server.storage.txn_index import AbortedTxn

INT32_MAX = 2**31 - 1
T0 = 1_700_000_000_000


class Clock:
    """A settable clock in ms, for segment.ms and truncation tests."""

    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def batch(
    base_offset: int,
    timestamps: list[int],
    *,
    value: bytes = b"v",
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
) -> bytes:
    return build_batch(
        [(ts, None, value, ()) for ts in timestamps],
        base_offset=base_offset,
        compression=compression,
        timestamp_type=timestamp_type,
    )


def append(segment: Segment, base_offset: int, timestamps: list[int], **kw: object) -> bytes:
    """Append one batch the way the log does: last offset, max ts, last offset of the batch."""
    data = batch(base_offset, timestamps, **kw)  # type: ignore[arg-type]
    last = base_offset + len(timestamps) - 1
    segment.append(last, max(timestamps), last, data)
    return data


def config(**changes: object) -> LogConfig:
    defaults: dict[str, object] = {"segment_index_bytes": 4096, "index_interval_bytes": 4096}
    defaults.update(changes)
    return LogConfig(**defaults)  # type: ignore[arg-type]


def offset_entries(path: Path, base_offset: int) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [
        (base_offset + rel, pos) for rel, pos in struct.iter_unpack(">ii", data)
    ]


def time_entries(path: Path, base_offset: int) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [(ts, base_offset + rel) for ts, rel in struct.iter_unpack(">qi", data)]


# ---------------------------------------------------------------- files and laziness


def test_open_touches_no_index_file_until_first_use(tmp_path: Path) -> None:
    # Kafka LazyIndex (docs/kafka-behaviours.md#index-files-mechanics): LogSegment.open creates the
    # .log only; indexes appear on first access.
    segment = Segment.create(tmp_path, 0, config(segment_index_bytes=1000))
    assert log_file(tmp_path, 0).exists()
    assert not offset_index_file(tmp_path, 0).exists()
    assert not time_index_file(tmp_path, 0).exists()
    assert segment.indexes_loaded == (False, False)
    append(segment, 0, [T0])
    # Created and preallocated: 1000 rounded down to 8- and 12-byte entries.
    assert offset_index_file(tmp_path, 0).stat().st_size == 1000
    assert time_index_file(tmp_path, 0).stat().st_size == 996
    assert segment.indexes_loaded == (True, True)
    segment.close()
    reopened = Segment.open(tmp_path, 0, config())
    assert reopened.indexes_loaded == (False, False)
    assert reopened.size_bytes == log_file(tmp_path, 0).stat().st_size
    reopened.close()


def test_default_index_preallocation(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, LogConfig())
    append(segment, 0, [T0])
    assert offset_index_file(tmp_path, 0).stat().st_size == 10485760
    assert time_index_file(tmp_path, 0).stat().st_size == 10485756
    segment.close()
    # Kafka LogSegment.close (docs/kafka-behaviours.md#flush) Trimmed on close: no offset entry
    # (first append), one final time entry.
    assert offset_index_file(tmp_path, 0).stat().st_size == 0
    assert time_entries(time_index_file(tmp_path, 0), 0) == [(T0, 0)]


def test_create_refuses_to_overwrite_an_existing_log(tmp_path: Path) -> None:
    log_file(tmp_path, 0).write_bytes(b"someone's data")
    with pytest.raises(StorageIOError, match=r"00000000000000000000\.log"):
        Segment.create(tmp_path, 0, config())
    assert log_file(tmp_path, 0).read_bytes() == b"someone's data"


def test_open_missing_file_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageIOError, match="failed to open"):
        Segment.open(tmp_path, 0, config())


# ---------------------------------------------------------------- appends and index entries


def test_first_append_never_gets_an_index_entry_and_interval_zero_indexes_the_rest(
    tmp_path: Path,
) -> None:
    # Kafka LogSegment.append (docs/kafka-behaviours.md#append): with index.interval.bytes = 0 every
    # append after the first gets an entry, holding the append's LAST offset and its START position.
    segment = Segment.create(tmp_path, 100, config(index_interval_bytes=0))
    positions = []
    for i in range(4):
        positions.append(segment.size_bytes)
        append(segment, 100 + 2 * i, [T0 + i, T0 + i])  # two records per batch
    segment.on_become_inactive()
    assert offset_entries(offset_index_file(tmp_path, 100), 100) == [
        (103, positions[1]),
        (105, positions[2]),
        (107, positions[3]),
    ]
    # Time entries: (running max, last offset of the batch holding it) + the final entry,
    # which repeats the last one here and is therefore not written again.
    assert time_entries(time_index_file(tmp_path, 100), 100) == [
        (T0 + 1, 103),
        (T0 + 2, 105),
        (T0 + 3, 107),
    ]
    segment.close()


def test_index_entry_on_every_second_append_with_interval_two_b_minus_one(tmp_path: Path) -> None:
    # Kafka LogSegment.append (docs/kafka-behaviours.md#append): bytes_since_last_entry must exceed
    # the interval *before* adding this append, so with b-byte appends and interval 2b - 1 the
    # entries land on appends #3, #5, #7 (from 1).
    size = len(batch(0, [T0]))
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=2 * size - 1))
    starts = []
    for i in range(8):
        starts.append(segment.size_bytes)
        append(segment, i, [T0])
    assert all(b - a == size for a, b in itertools.pairwise(starts))
    entries = segment.offset_index.entries_list()
    assert [(e.offset, e.position) for e in entries] == [
        (2, starts[2]),
        (4, starts[4]),
        (6, starts[6]),
    ]
    segment.close()


def test_time_index_holds_running_max_and_shallow_offset(tmp_path: Path) -> None:
    # Out-of-order timestamps: the entry is (max so far, last offset of the batch where that
    # max first appeared), and entries only go up (Kafka UnifiedLog.analyzeAndValidateRecords,
    # docs/kafka-behaviours.md#append; TimeIndex.maybeAppend,
    # docs/kafka-behaviours.md#index-appends).
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=0))
    append(segment, 0, [T0 + 5])
    append(segment, 1, [T0 + 9, T0 + 1])  # max T0+9 at batch last offset 2
    append(segment, 3, [T0 + 3])  # max stays T0+9: no new time entry
    append(segment, 4, [T0 + 12])
    assert segment.max_timestamp_and_offset_so_far == TimestampOffset(T0 + 12, 4)
    assert [tuple(e) for e in segment.time_index.entries_list()] == [
        (T0 + 9, 2),
        (T0 + 12, 4),
    ]
    assert [tuple(e) for e in segment.offset_index.entries_list()] == [
        (2, len(batch(0, [T0 + 5]))),
        (3, segment.offset_index.entry(1).position),
        (4, segment.offset_index.entry(2).position),
    ]
    segment.close()


def test_batches_without_timestamps_never_add_time_entries(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=0))
    for i in range(3):
        append(segment, i, [-1])
    assert segment.offset_index.entries == 2
    assert segment.time_index.entries == 0
    assert segment.max_timestamp_so_far == -1
    segment.close()


def test_append_offset_overflow(tmp_path: Path) -> None:
    # LogSegmentTest.testAppendForLogSegmentOffsetOverflowException
    for base, largest in ((0, INT32_MAX + 1), (1, 0), (100, 10)):
        directory = tmp_path / f"{base}-{largest}"
        directory.mkdir()
        segment = Segment.create(directory, base, config())
        with pytest.raises(OffsetOverflowError, match=str(largest)):
            segment.append(largest, T0, largest, batch(0, [T0]))
        assert segment.size_bytes == 0
        segment.close()


def test_multi_batch_append_is_indexed_once(tmp_path: Path) -> None:
    # LogSegmentTest.testIndexForMultipleBatchesInMemoryRecords: one entry per append.
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=0))
    append(segment, 0, [T0])
    start = segment.size_bytes
    data = batch(1, [T0 + 1]) + batch(2, [T0 + 2, T0 + 3])
    segment.append(3, T0 + 3, 3, data)
    assert [tuple(e) for e in segment.offset_index.entries_list()] == [(3, start)]
    assert segment.translate_offset(2) == LogOffsetPosition(3, start + len(batch(1, [T0])),
                                                            len(batch(2, [T0, T0])))
    segment.close()


# ---------------------------------------------------------------- reads


def test_fetch_on_empty_segment(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 40, config())
    assert segment.fetch(40, 300) is None
    assert segment.read_next_offset() == 40
    segment.close()


def test_fetch_before_first_offset_returns_first_batch(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 40, config())
    data = append(segment, 50, [T0, T0, T0])
    assert segment.fetch(41, 300) == FetchedBatches(data, 53, 3)
    assert segment.translate_offset(41) == LogOffsetPosition(52, 0, len(data))
    segment.close()


def test_fetch_inside_a_batch_starts_at_the_batch(tmp_path: Path) -> None:
    # Kafka LogSegment.read (docs/kafka-behaviours.md#reads): a batch is never split; the reader
    # skips the records before its offset.
    segment = Segment.create(tmp_path, 0, config())
    first = append(segment, 0, [T0])
    second = append(segment, 1, [T0, T0, T0])
    assert segment.fetch(2, 1000) == FetchedBatches(second, 4, 3)
    assert segment.translate_offset(2).position == len(first)  # type: ignore[union-attr]
    segment.close()


def test_fetch_after_last_offset_is_none(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 40, config())
    append(segment, 50, [T0, T0])
    assert segment.fetch(52, 200) is None
    segment.close()


def test_fetch_from_gap_returns_the_next_batch_of_the_gap(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 40, config())
    append(segment, 50, [T0, T0])
    second = append(segment, 60, [T0, T0])
    fetched = segment.fetch(55, 200)
    assert fetched is not None and fetched.data == second
    segment.close()


def test_fetch_limits(tmp_path: Path) -> None:
    # Kafka LogSegment.read (docs/kafka-behaviours.md#reads): max_bytes bounds the batches (Kafka's
    # raw slice may end mid-batch: here only the whole batches of it come back); min_one_message
    # lifts it to the first batch; max_position bounds everything.
    segment = Segment.create(tmp_path, 0, config())
    batches = [append(segment, i, [T0]) for i in range(3)]
    size = len(batches[0])
    assert segment.fetch(0, size + 10) == FetchedBatches(batches[0], 1, 1)
    assert segment.fetch(0, 10) == FetchedBatches(b"", 0, 0)  # the first batch is incomplete
    assert segment.fetch(0, 10, min_one_message=True) == FetchedBatches(batches[0], 1, 1)
    assert segment.fetch(0, 0) == FetchedBatches(b"", 0, 0)
    bounded = segment.fetch(1, 10_000, max_position=2 * size)
    assert bounded is not None and bounded.data == batches[1]
    assert segment.fetch(2, 10_000, max_position=2 * size) is None
    with pytest.raises(ValueError, match="max size"):
        segment.fetch(0, -1)
    segment.close()


def test_translate_offset(tmp_path: Path) -> None:
    # Kafka LogSegment.translateOffset (docs/kafka-behaviours.md#reads): (last offset, position,
    # size) of the first batch whose last offset >= target.
    segment = Segment.create(tmp_path, 10, config(index_interval_bytes=0))
    sizes = []
    for base in (10, 13, 20):
        sizes.append(len(append(segment, base, [T0, T0])))
    assert segment.translate_offset(0) == LogOffsetPosition(11, 0, sizes[0])
    assert segment.translate_offset(12) == LogOffsetPosition(14, sizes[0], sizes[1])
    assert segment.translate_offset(15) == LogOffsetPosition(21, sizes[0] + sizes[1], sizes[2])
    assert segment.translate_offset(22) is None
    # starting_position skips ahead of the index's answer.
    assert segment.translate_offset(10, starting_position=sizes[0]) == LogOffsetPosition(
        14, sizes[0], sizes[1]
    )
    segment.close()


def test_next_offset_calculation(tmp_path: Path) -> None:
    # LogSegmentTest.testNextOffsetCalculation, and Kafka LogSegment.readNextOffset
    # (docs/kafka-behaviours.md#log-loading) on a reopened segment.
    segment = Segment.create(tmp_path, 40, config(index_interval_bytes=1))
    assert segment.read_next_offset() == 40
    append(segment, 50, [T0, T0, T0])
    append(segment, 53, [T0])
    assert segment.read_next_offset() == 54
    segment.close()
    reopened = Segment.open(tmp_path, 40, config())
    assert reopened.read_next_offset() == 54
    reopened.close()


# ---------------------------------------------------------------- timestamps


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    # Kafka LogSegment.findOffsetByTimestamp and UnifiedLog.fetchOffsetByTimestamp
    # (docs/kafka-behaviours.md#timestamp-lookup): the earliest record (>= starting offset) whose
    # timestamp >= target, with its own timestamp; works with out-of-order timestamps and compressed
    # batches.
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=0))
    append(segment, 0, [T0 + 10, T0 + 30, T0 + 20])
    append(segment, 3, [T0 + 25, T0 + 50, T0 + 40], compression=Compression.GZIP)
    append(segment, 6, [T0 + 60])
    find = segment.find_offset_by_timestamp
    assert find(T0, 0) == TimestampOffset(T0 + 10, 0)
    assert find(T0 + 11, 0) == TimestampOffset(T0 + 30, 1)
    assert find(T0 + 30, 0) == TimestampOffset(T0 + 30, 1)
    assert find(T0 + 31, 0) == TimestampOffset(T0 + 50, 4)
    assert find(T0 + 41, 0) == TimestampOffset(T0 + 50, 4)
    assert find(T0 + 51, 0) == TimestampOffset(T0 + 60, 6)
    assert find(T0 + 61, 0) is None
    # starting_offset excludes earlier records, even inside the matching batch.
    assert find(T0 + 11, 2) == TimestampOffset(T0 + 20, 2)
    assert find(T0 + 21, 2) == TimestampOffset(T0 + 25, 3)
    assert find(T0 + 31, 5) == TimestampOffset(T0 + 40, 5)
    segment.close()


def test_find_offset_by_timestamp_log_append_time(tmp_path: Path) -> None:
    # Kafka LogValidator (docs/kafka-behaviours.md#timestamp-lookup): every record of a
    # LogAppendTime batch has the batch max timestamp.
    segment = Segment.create(tmp_path, 0, config())
    append(segment, 0, [5, 1, 3], timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert segment.find_offset_by_timestamp(4, 0) == TimestampOffset(5, 0)
    segment.close()


def test_find_max_timestamp_record(tmp_path: Path) -> None:
    # ListOffsets -3: the exact record with the max timestamp (KAFKA-16310), not the batch.
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=0))
    append(segment, 0, [T0 + 1])
    append(segment, 1, [T0 + 3, T0 + 9, T0 + 2, T0 + 9], compression=Compression.LZ4)
    append(segment, 5, [T0 + 4])
    assert segment.find_max_timestamp_record() == TimestampOffset(T0 + 9, 2)
    segment.close()
    empty = Segment.create(tmp_path, 100, config())
    assert empty.find_max_timestamp_record() is None
    empty.close()


def test_largest_timestamp_falls_back_to_mtime(tmp_path: Path) -> None:
    # Kafka LogSegment.largestTimestamp (docs/kafka-behaviours.md#timestamp-lookup) and
    # LogSegment.sanityCheck (docs/kafka-behaviours.md#log-loading): no timestamps => the .log
    # file's last-modified time.
    segment = Segment.create(tmp_path, 0, config())
    append(segment, 0, [-1])
    segment.set_last_modified_ms(T0 - 1234)
    assert segment.max_timestamp_so_far == -1
    assert segment.largest_record_timestamp is None
    assert segment.largest_timestamp == T0 - 1234
    append(segment, 1, [T0])
    assert segment.largest_timestamp == T0
    segment.close()


def test_first_batch_timestamp(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config())
    assert segment.first_batch_timestamp is None
    append(segment, 0, [T0 + 7, T0 + 2])
    append(segment, 2, [T0 + 100])
    assert segment.first_batch_timestamp == T0 + 7
    segment.close()
    reopened = Segment.open(tmp_path, 0, config())
    assert reopened.first_batch_timestamp == T0 + 7  # loaded lazily from the first batch
    reopened.close()


# ---------------------------------------------------------------- roll conditions


def roll_args(**changes: int) -> dict[str, int]:
    args = {
        "max_segment_bytes": 10_000,
        "max_segment_ms": 1_000_000,
        "max_timestamp_in_messages": T0,
        "max_offset_in_messages": 0,
        "messages_size_bytes": 100,
        "now_ms": T0,
    }
    args.update(changes)
    return args


def test_should_roll_on_size(tmp_path: Path) -> None:
    # Kafka LogSegment.shouldRoll condition 1 (docs/kafka-behaviours.md#roll): size >
    # max_segment_bytes - messages_size.
    segment = Segment.create(tmp_path, 0, config())
    size = len(append(segment, 0, [T0]))
    fits = roll_args(max_segment_bytes=size + 100, max_offset_in_messages=1)
    assert not segment.should_roll(**fits)
    assert segment.should_roll(**{**fits, "max_segment_bytes": size + 99})
    segment.close()


def test_should_roll_on_message_time(tmp_path: Path) -> None:
    # Kafka LogSegment.shouldRoll condition 2 and LogSegment.timeWaitedForRoll
    # (docs/kafka-behaviours.md#roll): incoming max timestamp - first batch's timestamp >
    # segment.ms - jitter, whatever the wall clock says.
    segment = Segment.create(tmp_path, 0, config(), roll_jitter_ms=0, time_ms=Clock())
    append(segment, 0, [T0 + 500, T0])  # the first batch's MAX timestamp counts: T0 + 500
    edge = T0 + 500 + 1000
    assert not segment.should_roll(**roll_args(max_segment_ms=1000, max_timestamp_in_messages=edge))
    assert segment.should_roll(**roll_args(max_segment_ms=1000, max_timestamp_in_messages=edge + 1))
    # The wall clock is irrelevant when the first batch has a timestamp.
    assert not segment.should_roll(
        **roll_args(max_segment_ms=1000, max_timestamp_in_messages=edge, now_ms=T0 + 10**9)
    )
    segment.close()


def test_should_roll_on_message_time_with_jitter(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config(), roll_jitter_ms=300)
    append(segment, 0, [T0])
    assert segment.roll_jitter_ms == 300
    args = {"max_segment_ms": 1000}
    assert not segment.should_roll(**roll_args(**args, max_timestamp_in_messages=T0 + 700))
    assert segment.should_roll(**roll_args(**args, max_timestamp_in_messages=T0 + 701))
    segment.close()


def test_should_roll_on_wall_clock_when_first_batch_has_no_timestamp(tmp_path: Path) -> None:
    clock = Clock(T0)
    segment = Segment.create(tmp_path, 0, config(), roll_jitter_ms=0, time_ms=clock)
    append(segment, 0, [-1])
    assert segment.time_waited_for_roll(T0 + 42, T0 + 10**9) == 42
    assert not segment.should_roll(**roll_args(max_segment_ms=1000, now_ms=T0 + 1000))
    assert segment.should_roll(**roll_args(max_segment_ms=1000, now_ms=T0 + 1001))
    segment.close()


def test_empty_segment_never_rolls_on_time(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config(), roll_jitter_ms=0, time_ms=Clock(T0))
    assert not segment.should_roll(
        **roll_args(max_segment_ms=1, now_ms=T0 + 10**9, max_timestamp_in_messages=T0 + 10**9)
    )
    segment.close()


def test_should_roll_when_offset_index_is_full(tmp_path: Path) -> None:
    # Kafka LogSegment.shouldRoll condition 3 (docs/kafka-behaviours.md#roll): 16 bytes = 2 offset
    # entries (and 1 time slot: the time index is full at once, so use a time-less workload to
    # isolate the offset index).
    segment = Segment.create(tmp_path, 0, config(segment_index_bytes=24, index_interval_bytes=0))
    append(segment, 0, [-1])
    append(segment, 1, [-1])
    append(segment, 2, [-1])
    assert segment.offset_index.entries == 2 and not segment.offset_index.is_full
    assert not segment.time_index.is_full  # 2 slots, 0 used: full at entries >= 1
    assert not segment.should_roll(**roll_args(max_offset_in_messages=3))
    append(segment, 3, [-1])
    assert segment.offset_index.is_full
    assert segment.should_roll(**roll_args(max_offset_in_messages=4))
    segment.close()


def test_should_roll_when_time_index_is_full(tmp_path: Path) -> None:
    # Kafka LogSegment.shouldRoll condition 4 (docs/kafka-behaviours.md#roll): the time index is
    # full one entry early (entries >= max_entries - 1).
    segment = Segment.create(tmp_path, 0, config(segment_index_bytes=24, index_interval_bytes=0))
    append(segment, 0, [T0])
    assert not segment.should_roll(**roll_args(max_offset_in_messages=1))
    append(segment, 1, [T0 + 1])
    assert segment.time_index.entries == 1 and segment.time_index.max_entries == 2
    assert not segment.offset_index.is_full
    assert segment.should_roll(**roll_args(max_offset_in_messages=2))
    segment.close()


def test_should_roll_when_offset_does_not_fit_even_if_empty(tmp_path: Path) -> None:
    # Kafka LogSegment.shouldRoll condition 5 (docs/kafka-behaviours.md#roll) applies to an empty
    # segment too.
    segment = Segment.create(tmp_path, 10, config())
    assert not segment.should_roll(**roll_args(max_offset_in_messages=10 + INT32_MAX))
    assert segment.should_roll(**roll_args(max_offset_in_messages=10 + INT32_MAX + 1))
    segment.close()


# ---------------------------------------------------------------- becoming inactive, closing


def test_on_become_inactive_appends_final_time_entry_and_trims(tmp_path: Path) -> None:
    # Kafka LocalLog.roll (docs/kafka-behaviours.md#roll): the final time entry is written even into
    # the reserved slot; files are trimmed to exactly entries * entry size.
    size = len(batch(0, [T0]))
    cfg = config(segment_index_bytes=24, index_interval_bytes=2 * size - 1)
    segment = Segment.create(tmp_path, 0, cfg)
    for i, ts in enumerate([T0, T0 + 1, T0 + 2]):
        append(segment, i, [ts])  # the third append is indexed: (T0 + 2, 2)
    assert segment.time_index.is_full  # 1 of 2 slots: the last one is reserved
    append(segment, 3, [T0 + 5])  # not indexed (too few bytes since the last entry)
    segment.on_become_inactive()
    assert time_entries(time_index_file(tmp_path, 0), 0) == [(T0 + 2, 2), (T0 + 5, 3)]
    assert offset_entries(offset_index_file(tmp_path, 0), 0) == [(2, 2 * size)]
    segment.close()


def test_preallocated_log_is_trimmed_on_close(tmp_path: Path) -> None:
    # LogSegmentTest.testCreateWithInitFileSizeAppendMessage / ...ClearShutdown
    cfg = config(segment_bytes=512 * 1024, preallocate=True)
    segment = Segment.create(tmp_path, 40, cfg)
    assert log_file(tmp_path, 40).stat().st_size == 512 * 1024
    assert segment.size_bytes == 0
    data = append(segment, 40, [T0, T0])
    assert segment.fetch(40, 1000).data == data  # type: ignore[union-attr]
    segment.close()
    assert log_file(tmp_path, 40).read_bytes() == data
    reopened = Segment.open(tmp_path, 40, cfg)
    assert reopened.size_bytes == len(data) and reopened.read_next_offset() == 42
    reopened.close()


def test_close_is_idempotent_and_closed_segment_refuses_io(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config())
    append(segment, 0, [T0])
    segment.close()
    segment.close()
    assert segment.is_closed
    with pytest.raises(LogClosedError):
        segment.fetch(0, 100)


def test_change_file_suffixes_and_delete(tmp_path: Path) -> None:
    # LogSegmentTest.testChangeFileSuffixes; an index never created is not an error (Kafka
    # LazyIndex.renameTo; docs/kafka-behaviours.md#index-files-mechanics).
    segment = Segment.create(tmp_path, 0, config())
    data = append(segment, 0, [T0])
    lazy = Segment.create(tmp_path, 10, config())
    for seg in (segment, lazy):
        seg.change_file_suffixes("", ".deleted")
    names = sorted(os.listdir(tmp_path))
    assert names == [
        "00000000000000000000.index.deleted",
        "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted",
        "00000000000000000010.log.deleted",
    ]
    # The descriptor follows the rename: reads still work.
    assert segment.fetch(0, 1000).data == data  # type: ignore[union-attr]
    segment.change_file_suffixes(".deleted", "")
    assert log_file(tmp_path, 0).exists()
    segment.delete()
    lazy.delete()
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- truncation


def test_truncate(tmp_path: Path) -> None:
    # LogSegmentTest.testTruncate, batch-granular (Kafka LogSegment.truncateTo;
    # docs/kafka-behaviours.md#truncation); the indexes lose every entry at or above the target
    # (Kafka OffsetIndex.truncateTo; docs/kafka-behaviours.md#truncation).
    segment = Segment.create(tmp_path, 40, config(index_interval_bytes=1))
    offset = 40
    for _ in range(30):
        append(segment, offset, [T0 + offset, T0 + offset + 1])
        offset += 2
    for target in (100, 71, 60, 41):
        before = segment.size_bytes
        removed = segment.truncate_to(target)
        batch_base = target - (target - 40) % 2
        assert segment.read_next_offset() == batch_base
        assert segment.fetch(batch_base, 1000) is None
        assert removed == before - segment.size_bytes
        expected_max = T0 + batch_base - 1 if batch_base > 40 else -1
        assert segment.max_timestamp_so_far == expected_max
    segment.close()


def test_truncate_to_gap(tmp_path: Path) -> None:
    # LogSegmentTest.shouldTruncateEvenIfOffsetPointsToAGapInTheLog
    segment = Segment.create(tmp_path, 40, config())
    first = append(segment, 40, [T0, T0])
    append(segment, 50, [T0, T0])
    segment.truncate_to(45)
    assert segment.read_next_offset() == 42
    assert segment.size_bytes == len(first)
    segment.close()


def test_truncate_full_resets_roll_state(tmp_path: Path) -> None:
    # LogSegmentTest.testTruncateFull: an emptied segment is "created" again at truncation.
    clock = Clock(T0)
    segment = Segment.create(tmp_path, 0, config(), roll_jitter_ms=0, time_ms=clock)
    append(segment, 0, [T0 - 10**6])
    clock.now_ms = T0 + 5000
    segment.truncate_to(0)
    assert segment.size_bytes == 0
    assert segment.first_batch_timestamp is None
    assert segment.time_waited_for_roll(T0 + 5010, 0) == 10
    assert segment.max_timestamp_so_far == -1
    segment.close()


def test_truncate_grows_indexes_back(tmp_path: Path) -> None:
    # Kafka LogSegment.truncateTo (docs/kafka-behaviours.md#truncation) and KAFKA-6388: after an
    # inactive (trimmed) segment is truncated it can take appends again: both indexes are back at
    # segment.index.bytes, so not full.
    segment = Segment.create(tmp_path, 0, config(segment_index_bytes=800, index_interval_bytes=0))
    for i in range(3):
        append(segment, i, [T0 + i])
    segment.on_become_inactive()
    assert segment.offset_index.is_full and segment.time_index.is_full
    segment.truncate_to(0)
    assert offset_index_file(tmp_path, 0).stat().st_size == 800
    assert time_index_file(tmp_path, 0).stat().st_size == 792
    assert not segment.should_roll(**roll_args(max_offset_in_messages=0))
    segment.close()


def test_reload_largest_timestamp_and_next_offset_after_truncation(tmp_path: Path) -> None:
    # LogSegmentTest.testReloadLargestTimestampAndNextOffsetAfterTruncation
    segment = Segment.create(tmp_path, 40, config(index_interval_bytes=0))
    for i in range(10):
        append(segment, 40 + i, [T0 + [5, 1, 9, 3, 7, 2, 8, 4, 6, 0][i]])
    segment.truncate_to(44)  # remaining timestamps 5, 1, 9, 3 => max 9 at offset 42
    assert segment.max_timestamp_and_offset_so_far == TimestampOffset(T0 + 9, 42)
    assert segment.read_next_offset() == 44
    segment.truncate_to(42)
    assert segment.max_timestamp_and_offset_so_far == TimestampOffset(T0 + 5, 40)
    segment.close()


# ---------------------------------------------------------------- recovery


def fill(segment: Segment, count: int, start: int = 0) -> list[bytes]:
    return [append(segment, start + i, [T0 + i, T0 + i + 1]) for i in range(0, 2 * count, 2)]


def test_recovery_rebuilds_identical_indexes(tmp_path: Path) -> None:
    # With one batch per append the rebuilt offset index equals the original (Kafka
    # LogSegment.recover; docs/kafka-behaviours.md#segment-recovery).
    cfg = config(index_interval_bytes=300)
    segment = Segment.create(tmp_path, 0, cfg)
    fill(segment, 50)
    segment.on_become_inactive()  # appends the final (max) time entry, as recovery does
    original_offsets = segment.offset_index.entries_list()
    original_times = segment.time_index.entries_list()
    assert len(original_offsets) > 10
    assert segment.recover() == 0
    assert segment.offset_index.entries_list() == original_offsets
    assert segment.time_index.entries_list() == original_times
    segment.close()


def test_recovery_fixes_corrupt_index(tmp_path: Path) -> None:
    # LogSegmentTest.testRecoveryFixesCorruptIndex
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=1))
    fill(segment, 50)
    segment.close()
    rng = random.Random(1)
    data = bytearray(offset_index_file(tmp_path, 0).read_bytes())
    for i in range(len(data)):
        data[i] = rng.randrange(256)
    offset_index_file(tmp_path, 0).write_bytes(bytes(data))
    reopened = Segment.open(tmp_path, 0, config(index_interval_bytes=1))
    reopened.recover()
    for offset in range(100):
        fetched = reopened.fetch(offset, 1000)
        assert fetched is not None
        assert parse_header(fetched.data).base_offset == offset - offset % 2
    reopened.offset_index.check()
    reopened.close()


def test_recovery_fixes_corrupt_time_index(tmp_path: Path) -> None:
    # LogSegmentTest.testRecoveryFixesCorruptTimeIndex
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=1))
    fill(segment, 50)
    segment.close()
    size = time_index_file(tmp_path, 0).stat().st_size
    garbage = bytes(range(256)) * (size // 256) + b"\x00" * (size % 256)
    time_index_file(tmp_path, 0).write_bytes(garbage)
    reopened = Segment.open(tmp_path, 0, config(index_interval_bytes=1))
    reopened.recover()
    reopened.time_index.check()
    for i in range(0, 100, 2):
        assert reopened.find_offset_by_timestamp(T0 + i, 0) == TimestampOffset(T0 + i, i)
    reopened.close()


@pytest.mark.parametrize("seed", range(10))
def test_recovery_with_corrupt_tail(tmp_path: Path, seed: int) -> None:
    # LogSegmentTest.testRecoveryWithCorruptMessage: garbage from a random batch start on.
    rng = random.Random(seed)
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=1))
    batches = fill(segment, 20)
    segment.close()
    keep = rng.randrange(len(batches))
    position = sum(len(b) for b in batches[:keep])
    path = log_file(tmp_path, 0)
    with open(path, "r+b") as handle:
        handle.seek(position)
        handle.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))))
    corrupt_size = path.stat().st_size
    reopened = Segment.open(tmp_path, 0, config(index_interval_bytes=1))
    truncated = reopened.recover()
    assert reopened.size_bytes == position
    assert truncated == corrupt_size - position
    assert path.stat().st_size == position
    assert reopened.read_next_offset() == 2 * keep
    reopened.close()


def corrupt_and_recover(tmp_path: Path, tail: bytes) -> tuple[int, int, int]:
    """Write 3 good batches + ``tail``; returns (valid size, truncated, next offset)."""
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=0))
    good = sum(len(b) for b in fill(segment, 3))
    segment.close()
    with open(log_file(tmp_path, 0), "ab") as handle:
        handle.write(tail)
    reopened = Segment.open(tmp_path, 0, config(index_interval_bytes=0))
    truncated = reopened.recover()
    result = (reopened.size_bytes, truncated, reopened.read_next_offset())
    reopened.close()
    assert result[0] == good == log_file(tmp_path, 0).stat().st_size
    return result


def test_recovery_truncates_partial_trailing_batch(tmp_path: Path) -> None:
    # Kafka LogSegment.recover (docs/kafka-behaviours.md#segment-recovery): a batch whose declared
    # size runs past the end of the file.
    whole = batch(6, [T0, T0])
    assert corrupt_and_recover(tmp_path, whole[:-1])[1:] == (len(whole) - 1, 6)


def test_recovery_truncates_short_tail(tmp_path: Path) -> None:
    # Kafka LogSegment.recover (docs/kafka-behaviours.md#segment-recovery): 17 bytes or fewer are a
    # partial header.
    assert corrupt_and_recover(tmp_path, b"\x00" * 17)[1:] == (17, 6)


def test_recovery_truncates_at_small_size_field(tmp_path: Path) -> None:
    # Kafka LogSegment.recover (docs/kafka-behaviours.md#segment-recovery): size field < 14 (a
    # preallocated zero tail looks like this).
    tail = struct.pack(">qi", 6, 13) + b"\x00" * 100
    assert corrupt_and_recover(tmp_path, tail)[1:] == (len(tail), 6)


def test_recovery_truncates_batch_shorter_than_header(tmp_path: Path) -> None:
    # Kafka LogSegment.recover (docs/kafka-behaviours.md#segment-recovery): a v2 batch smaller than
    # 61 bytes.
    tail = struct.pack(">qiib", 6, 40, 0, 2) + b"\x00" * 36
    assert corrupt_and_recover(tmp_path, tail)[1:] == (len(tail), 6)


def test_recovery_truncates_at_crc_mismatch(tmp_path: Path) -> None:
    # Kafka LogSegment.recover (docs/kafka-behaviours.md#segment-recovery): everything from the
    # first batch failing its CRC, even if later batches are fine.
    bad = bytearray(batch(6, [T0, T0]))
    bad[-1] ^= 0xFF
    tail = bytes(bad) + batch(8, [T0])
    assert corrupt_and_recover(tmp_path, tail)[1:] == (len(tail), 6)


def test_recovery_keeps_valid_legacy_messages_out(tmp_path: Path) -> None:
    # A v1 message with a good checksum is not corruption: refuse instead of cutting data.
    body = struct.pack(">bbqii", 1, 0, T0, -1, 1) + b"x"
    legacy = struct.pack(">qiI", 6, 4 + len(body), zlib.crc32(body)) + body
    (tmp_path / "good").mkdir()
    with pytest.raises(InvalidRecordError, match="legacy"):
        corrupt_and_recover(tmp_path / "good", legacy)
    # With a bad checksum it is garbage like any other.
    broken = legacy[:-1] + b"y"
    (tmp_path / "bad").mkdir()
    assert corrupt_and_recover(tmp_path / "bad", broken)[1:] == (len(broken), 6)


def test_recovery_raises_on_offset_overflow(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config())
    append(segment, 0, [T0])
    segment.close()
    with open(log_file(tmp_path, 0), "ab") as handle:
        handle.write(batch(INT32_MAX + 1, [T0]))
    reopened = Segment.open(tmp_path, 0, config())
    with pytest.raises(OffsetOverflowError, match=str(INT32_MAX + 1)):
        reopened.recover()
    reopened.close_handlers()


def test_recovery_cuts_transaction_index_to_the_recovered_end(tmp_path: Path) -> None:
    # Kafka TransactionIndex.truncateTo (docs/kafka-behaviours.md#truncation): the transaction index
    # is cut at the first entry whose last offset is past the end.
    segment = Segment.create(tmp_path, 0, config())
    batches = fill(segment, 5)  # offsets 0..9
    segment.txn_index.append(AbortedTxn(1, 0, 3, 4))
    segment.txn_index.append(AbortedTxn(2, 5, 8, 9))
    segment.close()
    with open(log_file(tmp_path, 0), "r+b") as handle:
        handle.truncate(sum(len(b) for b in batches[:3]) + 5)  # keep offsets 0..5
    reopened = Segment.open(tmp_path, 0, config())
    reopened.recover()
    assert reopened.read_next_offset() == 6
    assert reopened.txn_index.all_aborted_txns() == [AbortedTxn(1, 0, 3, 4)]
    reopened.close()


def test_recovery_with_max_message_bytes(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config())
    small = append(segment, 0, [T0])
    append(segment, 1, [T0], value=b"x" * 500)
    segment.close()
    reopened = Segment.open(tmp_path, 0, config())
    assert reopened.recover(max_message_bytes=len(small)) > 500
    assert reopened.read_next_offset() == 1
    reopened.close()


def test_sanity_check_missing_index(tmp_path: Path) -> None:
    # Kafka LogSegment.sanityCheck (docs/kafka-behaviours.md#sanity-checks): a missing .index means
    # the segment must be recovered; a new .timeindex is empty.
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=0))
    fill(segment, 5)
    segment.close()
    offset_index_file(tmp_path, 0).unlink()
    reopened = Segment.open(tmp_path, 0, config())
    with pytest.raises(CorruptIndexError, match="does not exist"):
        reopened.sanity_check(time_index_file_newly_created=False)
    reopened.close_handlers()
    time_index_file(tmp_path, 0).unlink()
    reopened = Segment.open(tmp_path, 0, config())
    reopened.recover()  # creates .index
    reopened.close()
    time_index_file(tmp_path, 0).unlink()
    again = Segment.open(tmp_path, 0, config())
    again.sanity_check(time_index_file_newly_created=True)
    assert time_index_file(tmp_path, 0).stat().st_size == 0
    # not rebuilt (Kafka LogSegment.sanityCheck; docs/kafka-behaviours.md#log-loading)
    assert again.max_timestamp_so_far == -1
    again.close_handlers()


def test_scan_errors_name_the_file(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config())
    append(segment, 0, [T0])
    segment.close()
    with open(log_file(tmp_path, 0), "ab") as handle:
        handle.write(struct.pack(">qi", 1, 5) + b"\x00" * 100)
    reopened = Segment.open(tmp_path, 0, config())
    with pytest.raises(CorruptRecordError, match=r"00000000000000000000\.log"):
        reopened.read_next_offset()
    reopened.close_handlers()


def test_written_bytes_parse_as_the_batches_appended(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config())
    appended = [append(segment, 2 * i, [T0 + i, T0 + i]) for i in range(5)]
    segment.close()
    data = log_file(tmp_path, 0).read_bytes()
    assert data == b"".join(appended)
    assert [h.base_offset for h, _ in iter_batches(data)] == [0, 2, 4, 6, 8]


def test_reopened_segment_truncated_below_every_time_entry_keeps_its_max(tmp_path: Path) -> None:
    # Found by the model test: Kafka reads the max timestamp only after truncating the time
    # index, so a reopened segment whose time entries are all cut forgets the timestamps of
    # the batches it keeps. Here the max is read first and rebuilt by a scan.
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=0))
    append(segment, 0, [-1, T0])
    append(segment, 2, [T0 + 1])  # the only time entry: (T0 + 1, 2)
    segment.close()
    reopened = Segment.open(tmp_path, 0, config(index_interval_bytes=0))
    reopened.truncate_to(2)
    assert reopened.max_timestamp_and_offset_so_far == TimestampOffset(T0, 1)
    assert reopened.find_max_timestamp_record() == TimestampOffset(T0, 1)
    reopened.close()


def test_append_that_cannot_be_indexed_writes_nothing(tmp_path: Path) -> None:
    # A caller that skipped should_roll gets the index error before any byte is written.
    segment = Segment.create(tmp_path, 0, config(segment_index_bytes=24, index_interval_bytes=0))
    for i in range(4):
        append(segment, i, [-1])  # entries at appends 2, 3, 4: the 3 offset slots
    assert segment.offset_index.is_full and not segment.time_index.is_full
    size = segment.size_bytes
    with pytest.raises(IndexFullError, match="must roll"):
        append(segment, 4, [-1])
    assert segment.size_bytes == size == log_file(tmp_path, 0).stat().st_size
    assert segment.read_next_offset() == 4
    segment.close()


def test_append_with_offset_below_the_index_writes_nothing(tmp_path: Path) -> None:
    # Kafka OffsetIndex.append (docs/kafka-behaviours.md#index-appends): an offset not above the
    # last indexed one is an InvalidOffsetError, raised here before the write.
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=0))
    for i in range(3):
        append(segment, i, [-1])
    size = segment.size_bytes
    with pytest.raises(InvalidOffsetError, match="not above"):
        segment.append(1, -1, 1, batch(1, [-1]))  # 1 <= last indexed offset 2
    assert segment.size_bytes == size == log_file(tmp_path, 0).stat().st_size
    segment.close()


def test_append_refused_when_time_index_is_full(tmp_path: Path) -> None:
    # Kafka's TimeIndex.maybeAppend refuses a full index even when no entry would be added.
    segment = Segment.create(tmp_path, 0, config(segment_index_bytes=24, index_interval_bytes=0))
    append(segment, 0, [T0])
    append(segment, 1, [T0 + 1])  # time index full now (1 of 2 slots)
    size = segment.size_bytes
    for timestamp in (T0 + 2, T0):
        with pytest.raises(IndexFullError, match="time index"):
            append(segment, 2, [timestamp])
    assert segment.size_bytes == size
    segment.close()


@pytest.mark.parametrize(
    ("patch_at", "value", "error"),
    [
        (16, b"\x01", InvalidRecordError),  # magic 1
        (8, struct.pack(">i", 30), CorruptRecordError),  # a 42-byte "batch"
        (8, struct.pack(">i", 3), CorruptRecordError),  # size field below 14
    ],
)
def test_reads_of_a_corrupt_batch_raise_naming_the_file(
    tmp_path: Path, patch_at: int, value: bytes, error: type[Exception]
) -> None:
    segment = Segment.create(tmp_path, 0, config())
    first = append(segment, 0, [T0])
    append(segment, 1, [T0])
    segment.close()
    with open(log_file(tmp_path, 0), "r+b") as handle:
        handle.seek(len(first) + patch_at)
        handle.write(value)
    reopened = Segment.open(tmp_path, 0, config())
    # The walk to offset 0 stops at the first batch, before the corrupt one.
    assert reopened.fetch(0, 10) == FetchedBatches(b"", 0, 0)
    assert reopened.fetch(0, 10, min_one_message=True) == FetchedBatches(first, 1, 1)
    with pytest.raises(error, match=r"00000000000000000000\.log"):
        reopened.fetch(1, 1000)
    reopened.close_handlers()


# ---------------------------------------------------------------- fetch: whole batches and summary


def _kafka_slice(
    log: bytes, offset: int, max_bytes: int, max_position: int | None, min_one_message: bool
) -> bytes | None:
    """Reference for a segment read as Kafka's ``LogSegment.read`` makes it: the raw bytes
    from the first batch whose last offset is >= ``offset`` (below ``max_position``), at most
    ``max_bytes`` of them (``min_one_message``: at least that batch), possibly ending inside a
    batch; None when there is no such batch. Computed from the file's bytes by the records
    package's header parser."""
    end = len(log) if max_position is None else min(max_position, len(log))
    for header in iter_batch_headers(log, 0, end):
        if header.last_offset >= offset:
            limit = max(max_bytes, header.size_bytes) if min_one_message else max_bytes
            return log[header.position : header.position + min(end - header.position, limit)]
    return None


def _whole_batches_of(data: bytes) -> tuple[bytes, int | None, int]:
    """Reference for Segment.fetch: data cut after its last whole batch, the next offset and
    the record count of those batches, by the records package's own header parser."""
    end = 0
    next_offset = None
    records = 0
    for header in iter_batch_headers(data):
        end = header.end_position
        next_offset = header.next_offset
        records += header.records_count
    return data[:end], next_offset, records


def test_fetch_returns_whole_batches_with_their_next_offset_and_record_count(
    tmp_path: Path,
) -> None:
    segment = Segment.create(tmp_path, 0, config())
    batches = [append(segment, 3 * i, [T0, T0, T0]) for i in range(3)]
    size = len(batches[0])
    # Two and a half batches fit: the half is cut.
    fetched = segment.fetch(1, 2 * size + size // 2)
    assert fetched == FetchedBatches(batches[0] + batches[1], 6, 6)
    # The first batch does not fit: nothing, unless one message is asked for anyway.
    assert segment.fetch(4, 10) == FetchedBatches(b"", 4, 0)
    assert segment.fetch(4, 10, min_one_message=True) == FetchedBatches(batches[1], 6, 3)
    assert segment.fetch(4, 0, min_one_message=True) == FetchedBatches(batches[1], 6, 3)
    # max_position bounds the read; past the end (or past max_position) there is no batch.
    assert segment.fetch(0, 10_000, max_position=2 * size) == FetchedBatches(
        batches[0] + batches[1], 6, 6
    )
    assert segment.fetch(6, 10_000, max_position=2 * size) is None
    assert segment.fetch(9, 10_000) is None
    with pytest.raises(ValueError, match="max size"):
        segment.fetch(0, -1)
    segment.close()


def test_fetch_from_a_gap_returns_the_next_batch(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 40, config())
    append(segment, 50, [T0, T0])
    second = append(segment, 60, [T0, T0])
    assert segment.fetch(55, 200) == FetchedBatches(second, 62, 2)
    segment.close()


@pytest.mark.parametrize("seed", range(4))
def test_fetch_agrees_with_kafkas_slice_cut_to_whole_batches(tmp_path: Path, seed: int) -> None:
    # Batches from a few bytes to past the largest walk block, so that every refill path of
    # the walk runs (the first 4 KiB block, the size guess from the batch skipped, the 256 KiB
    # cap); index entries sparse or dense.
    rng = random.Random(seed)
    interval = rng.choice([0, 100, 4096, 50_000])
    segment = Segment.create(
        tmp_path, 0, config(index_interval_bytes=interval, segment_index_bytes=1 << 20)
    )
    offset = 0
    for _ in range(60):
        count = rng.choice([1, 2, 5, 30])
        value = rng.randbytes(rng.choice([10, 200, 3000, 12_000, 300_000 // count]))
        append(segment, offset, [T0 + offset + i for i in range(count)], value=value)
        offset += count + rng.choice([0, 0, 0, 3])  # an occasional gap, as compaction leaves
    log = log_file(tmp_path, 0).read_bytes()
    for _ in range(300):
        target = rng.randrange(offset + 2)
        max_bytes = rng.choice([0, 1, 100, 5000, 20_000, 400_000, 10_000_000])
        min_one = rng.random() < 0.7
        max_position = rng.choice([None, rng.randrange(segment.size_bytes + 1)])
        sliced = _kafka_slice(log, target, max_bytes, max_position, min_one)
        fetched = segment.fetch(target, max_bytes, max_position, min_one)
        if sliced is None:
            assert fetched is None, (target, max_bytes, max_position)
            continue
        data, next_offset, records = _whole_batches_of(sliced)
        expected = FetchedBatches(data, target if next_offset is None else next_offset, records)
        assert fetched == expected, (target, max_bytes, max_position, min_one)
    segment.close()


def test_fetch_stops_before_a_malformed_batch_and_the_next_fetch_raises(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config())
    first = append(segment, 0, [T0])
    second = append(segment, 1, [T0])
    append(segment, 2, [T0])
    segment.close()
    with open(log_file(tmp_path, 0), "r+b") as handle:
        handle.seek(len(first) + len(second) + 16)
        handle.write(b"\x01")  # magic 1 in the third batch
    reopened = Segment.open(tmp_path, 0, config())
    assert reopened.fetch(0, 10_000) == FetchedBatches(first + second, 2, 2)
    with pytest.raises(InvalidRecordError, match=r"00000000000000000000\.log"):
        reopened.fetch(2, 10_000)
    reopened.close_handlers()


def test_fetch_by_timestamp_is_find_then_fetch(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=0))
    append(segment, 0, [T0 + 10, T0 + 30, T0 + 20])
    append(segment, 3, [T0 + 25, T0 + 50, T0 + 40], compression=Compression.GZIP)
    append(segment, 6, [T0 + 60])
    for timestamp in range(T0, T0 + 62):
        for starting_offset in (0, 2, 5):
            for max_bytes in (1, 100, 10_000):
                found = segment.find_offset_by_timestamp(timestamp, starting_offset)
                both = segment.fetch_by_timestamp(
                    timestamp, starting_offset, max_bytes, min_one_message=True
                )
                if found is None:
                    assert both is None
                    continue
                assert both == (found, segment.fetch(found.offset, max_bytes, None, True))
    # The record is searched for below max_position only.
    first_size = segment.translate_offset(0).size_bytes  # type: ignore[union-attr]
    assert segment.fetch_by_timestamp(T0 + 31, 0, 100, max_position=first_size) is None
    with pytest.raises(ValueError, match="max size"):
        segment.fetch_by_timestamp(T0, 0, -1)
    segment.close()


def test_fetch_by_timestamp_names_the_file_of_a_corrupt_batch(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 0, config())
    data = append(segment, 0, [T0, T0 + 5])
    segment.close()
    with open(log_file(tmp_path, 0), "r+b") as handle:
        handle.seek(len(data) - 1)
        handle.write(bytes([data[-1] ^ 0xFF]))  # the CRC no longer matches
    reopened = Segment.open(tmp_path, 0, config())
    with pytest.raises(CorruptRecordError, match=r"00000000000000000000\.log.*position 0"):
        reopened.fetch_by_timestamp(T0 + 1, 0, 100)
    with pytest.raises(CorruptRecordError, match=r"00000000000000000000\.log.*position 0"):
        reopened.find_offset_by_timestamp(T0 + 1, 0)
    reopened.close_handlers()


def sized_batch(base_offset: int, size_bytes: int) -> bytes:
    """One batch of exactly ``size_bytes`` (a value of the length that makes it so)."""
    value_bytes = size_bytes - len(batch(base_offset, [T0], value=b""))
    while len(data := batch(base_offset, [T0], value=b"v" * value_bytes)) > size_bytes:
        value_bytes -= 1
    assert len(data) == size_bytes
    return data


def test_first_read_takes_a_header_when_the_next_entry_is_beyond_a_first_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fetch at an indexed offset walks from that entry: the first read takes 4 KiB when the
    # next entry is that close (a block reaches the batch after), only a header when it is
    # further, and 4 KiB when there is no next entry (nothing known).
    segment = Segment.create(tmp_path, 0, config(index_interval_bytes=1))
    batches = [sized_batch(i, size) for i, size in enumerate([100, 4096, 4097, 5000])]
    for i, data in enumerate(batches):
        segment.append(i, T0, i, data)  # entries (1, 100), (2, 4196), (3, 8293)
    reads: list[tuple[int, int]] = []
    real_pread = os.pread

    def recording_pread(fd: int, size: int, position: int) -> bytes:
        reads.append((size, position))
        return real_pread(fd, size, position)

    monkeypatch.setattr(os, "pread", recording_pread)
    for offset, first_read in [(1, 4096), (2, 61), (3, 4096)]:
        reads.clear()
        assert segment.fetch(offset, 1, None, True) == FetchedBatches(batches[offset], offset + 1, 1)
        assert reads[0] == (first_read, sum(len(b) for b in batches[:offset]))
    segment.close()


@pytest.mark.parametrize("seed", range(4))
def test_time_lookups_match_a_scan_of_every_record(tmp_path: Path, seed: int) -> None:
    # The time index lets the search skip what cannot qualify; a brute-force pass over every
    # record (in log order) says what the answer must be. Timestamps mostly rise, sometimes go
    # back; batches of one record and of many; sparse and dense index entries.
    rng = random.Random(seed)
    segment = Segment.create(
        tmp_path, 0,
        config(index_interval_bytes=rng.choice([0, 60, 500, 4096]), segment_index_bytes=1 << 16),
    )
    records: list[tuple[int, int]] = []  # (offset, timestamp) in log order
    offset, clock = 0, T0
    for _ in range(150):
        count = rng.choice([1, 1, 2, 7])
        timestamps = []
        for _ in range(count):
            clock += rng.choice([0, 1, 1, 2, 5])
            timestamps.append(clock - rng.choice([0, 0, 0, 3]))
        append(segment, offset, timestamps, value=b"x" * rng.choice([5, 100, 1500]))
        records += [(offset + i, ts) for i, ts in enumerate(timestamps)]
        offset += count + rng.choice([0, 0, 0, 0, 2])
    for _ in range(400):
        target = rng.randrange(T0 - 2, clock + 3)
        starting_offset = rng.choice([0, 0, rng.randrange(offset + 1)])
        expected = next(
            (TimestampOffset(ts, o) for o, ts in records if ts >= target and o >= starting_offset),
            None,
        )
        assert segment.find_offset_by_timestamp(target, starting_offset) == expected
        both = segment.fetch_by_timestamp(target, starting_offset, 1, min_one_message=True)
        assert (None if both is None else both[0]) == expected, (target, starting_offset)
        if both is not None:
            assert both[1] == segment.fetch(expected.offset, 1, None, True)  # type: ignore[union-attr]
    segment.close()
