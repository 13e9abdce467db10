"""The log cleaner: Kafka's LogCleanerTest cases, on a real PartitionLog in tmp_path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stratalog.records.batch import parse_header
from stratalog.records.builder import build_batch
from stratalog.records.errors import InvalidRecordError
from stratalog.records.reader import iter_batches
from stratalog.server.storage import PartitionLog
from stratalog.server.storage.cleaner import (
    Cleaner,
    cleanable_range,
    group_segments_by_size,
)
from stratalog.server.storage.errors import CleaningAbortedError
from stratalog.server.storage.offset_map import OffsetMap
from stratalog.server.storage.partition_log import IsolationLevel

T0 = 1_700_000_000_000
DAY_MS = 86_400_000


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def open_log(directory: Path, clock: Clock | None = None, **config: object) -> PartitionLog:
    settings: dict[str, object] = {"cleanup.policy": "compact", "segment.bytes": 1024}
    settings.update({k.replace("_", "."): v for k, v in config.items()})
    return PartitionLog.open(directory, settings, time_ms=clock or Clock())


def put(log: PartitionLog, key: bytes | None, value: bytes | None, timestamp: int = T0) -> int:
    return log.append(build_batch([(timestamp, key, value, ())])).first_offset


def records(log: PartitionLog) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record from the log start, by fetches (offset, timestamp, key, value)."""
    found = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        fetched = log.fetch(offset, 1 << 20)
        for _, batch_records in iter_batches(fetched.data):
            found.extend((r.offset, r.timestamp, r.key, r.value) for r in batch_records
                         if r.offset >= offset)
        assert fetched.next_offset > offset
        offset = fetched.next_offset
    return found


def latest_by_key(entries) -> dict[bytes, bytes | None]:
    model: dict[bytes, bytes | None] = {}
    for _, _, key, value in entries:
        model[key] = value
    return model


def clean(log: PartitionLog, checkpoint: int | None = None, *, map_bytes: int = 1 << 16,
          now_ms: int = T0, cleaner: Cleaner | None = None):
    cleanable = cleanable_range(log, checkpoint, now_ms)
    cleaner = cleaner or Cleaner(OffsetMap(map_bytes))
    return cleaner.clean(log, cleanable.first_dirty_offset, cleanable.first_uncleanable_offset)


# ------------------------------------------------------------------------- the offset map


def test_offset_map_keeps_the_last_offset_per_key_and_fills_at_its_load_factor() -> None:
    offset_map = OffsetMap(24 * 10, load_factor=0.5)
    assert (offset_map.slots, offset_map.max_entries) == (10, 5)
    for offset, key in enumerate([b"a", b"b", b"a", b"c"]):
        offset_map.put(key, offset)
    assert [offset_map.get(k) for k in (b"a", b"b", b"c", b"zz")] == [2, 1, 3, -1]
    assert (offset_map.entries, offset_map.latest_offset) == (3, 3)
    offset_map.put(b"d", 4)
    offset_map.put(b"e", 5)
    assert offset_map.is_full()
    offset_map.put(b"a", 6)  # an existing key still updates
    assert offset_map.get(b"a") == 6
    with pytest.raises(OverflowError, match="full offset map"):
        offset_map.put(b"f", 7)
    offset_map.clear()
    assert (offset_map.entries, offset_map.latest_offset, offset_map.get(b"a")) == (0, -1, -1)


# A 64 MiB map in a fresh process: its pages are resident only once puts touch them, and a
# clear gives them back (the server's idle cleaner held 128 MiB from start-up before).
_MAP_MEMORY_SCRIPT = """
from stratalog.server.storage.offset_map import OffsetMap
def rss_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20
start = rss_mib()
offset_map = OffsetMap(64 * 2**20)
made = rss_mib()
for offset in range(200_000):
    offset_map.put(offset.to_bytes(8, "big"), offset)
filled = rss_mib()
offset_map.clear()
cleared = rss_mib()
print(made - start, filled - start, cleared - start, offset_map.get((7).to_bytes(8, "big")))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_offset_map_memory_is_resident_only_while_used() -> None:
    result = subprocess.run([sys.executable, "-c", _MAP_MEMORY_SCRIPT], capture_output=True,
                            text=True, check=True, timeout=120)
    made, filled, cleared, after_clear = result.stdout.split()
    assert float(made) < 8, result.stdout  # made: nothing touched yet
    assert float(filled) > 40, result.stdout  # 200,000 keys touch most of its 16,384 pages
    assert float(cleared) < 8, result.stdout  # cleared: given back
    assert after_clear == "-1"  # and reading zeros


def test_offset_map_probes_past_collisions_in_a_one_slot_table() -> None:
    offset_map = OffsetMap(24 * 3, load_factor=1.0)  # 3 slots: every key collides somewhere
    for index in range(3):
        offset_map.put(b"key-%d" % index, 100 + index)
    assert [offset_map.get(b"key-%d" % i) for i in range(3)] == [100, 101, 102]


# ------------------------------------------------------------------------- LogCleanerTest


def test_clean_keeps_the_latest_record_of_each_key_with_its_offset_and_timestamp(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(300):
        put(log, b"k%d" % (i % 7), b"v%d" % i, T0 + i)
    before = records(log)
    result = clean(log)
    after = records(log)
    assert result.end_offset == log.active_segment.base_offset
    # The active segment is never cleaned: its records all stay.
    active_base = log.active_segment.base_offset
    assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    cleaned = [r for r in after if r[0] < active_base]
    assert set(cleaned) <= set(before)  # offsets and timestamps unchanged
    assert latest_by_key(after) == latest_by_key(before)
    keys_below = [r[2] for r in cleaned]
    assert len(keys_below) == len(set(keys_below))  # one record per key below the active
    assert result.records_kept == len(cleaned)
    assert result.records_read == len([r for r in before if r[0] < active_base])
    assert 0 < result.bytes_written < result.bytes_read
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert records(reopened) == after
    reopened.close()


def test_a_fetch_at_a_removed_offset_returns_the_next_surviving_record(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=4096)
    for i in range(40):
        put(log, b"same" if i < 30 else b"k%d" % i, b"v%d" % i, T0 + i)
    log.roll()
    clean(log)
    fetched = log.fetch(3, 1 << 20)
    first = next(r for _, rs in iter_batches(fetched.data) for r in rs if r.offset >= 3)
    assert (first.offset, first.value) == (29, b"v29")
    # By time: the first surviving record at or after the target's time.
    found = log.offset_for_timestamp(T0 + 5)
    assert (found.offset, found.timestamp) == (29, T0 + 29)
    record, batches = log.fetch_by_timestamp(T0 + 5, 1 << 20)
    assert record.offset == 29 and batches.data
    assert log.offset_for_timestamp(T0 + 35).offset == 35
    log.close()


def test_timestamp_lookup_goes_past_a_segment_left_with_only_an_empty_batch(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=200)
    put(log, b"a", b"old", T0 + 50)  # segment 0: overwritten below, then empty
    log.roll()
    put(log, b"b", b"x", T0 + 10)
    put(log, b"a", b"new", T0 + 60)
    log.roll()
    clean(log)
    found = log.offset_for_timestamp(T0 + 40)
    assert (found.offset, found.timestamp) == (2, T0 + 60)
    log.close()


def test_tombstones_stay_for_delete_retention_ms_after_the_segment_was_cleaned(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=200, delete_retention_ms=DAY_MS)
    big = b"x" * 120  # one such record per segment: no two segments merge
    for key, value in [(b"a", big), (b"a", None), (b"b", big), (b"c", big)]:
        put(log, key, value)
        log.roll()
    first = clean(log)
    assert (1, T0, b"a", None) in records(log)  # first cleaning: the tombstone stays
    # Kafka's legacy horizon: a segment keeps its tombstones while its mtime is within
    # delete.retention.ms of the last segment cleaned before this cleaning.
    segments = list(log.segments)
    for segment in segments[:2]:
        segment.set_last_modified_ms(T0 - 2 * DAY_MS)
    for segment in segments[2:-1]:
        segment.set_last_modified_ms(T0)
    put(log, b"d", big)
    log.roll()
    clean(log, first.end_offset)
    remaining = records(log)
    assert [r for r in remaining if r[3] is None] == []
    assert sorted(latest_by_key(remaining)) == [b"b", b"c", b"d"]
    log.close()


def test_records_without_a_key_are_refused_on_a_compacted_topic(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    with pytest.raises(InvalidRecordError, match="compacted topic cannot accept a record "
                                                 "without a key"):
        put(log, None, b"v")
    assert log.log_end_offset == 0
    log.close()


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=200, min_compaction_lag_ms=60_000)
    put(log, b"a", b"1", T0)
    log.roll()
    put(log, b"a", b"2", T0 + 50_000)
    log.roll()
    put(log, b"a", b"3", T0 + 100_000)
    cleanable = cleanable_range(log, None, T0 + 100_000)
    # The second segment's record is 50 s old, younger than the 60 s lag: cleaning stops there.
    assert (cleanable.first_dirty_offset, cleanable.first_uncleanable_offset) == (0, 1)
    assert cleanable_range(log, None, T0 + 200_000).first_uncleanable_offset == 2
    log.close()


def test_max_compaction_lag_makes_a_log_due_whatever_its_ratio(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=200, max_compaction_lag_ms=1000)
    put(log, b"a", b"1", T0)
    log.roll()
    assert not cleanable_range(log, None, T0 + 500).max_lag_exceeded
    assert cleanable_range(log, None, T0 + 5000).max_lag_exceeded
    log.close()


def test_cleaning_stops_at_the_first_unstable_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=4096)
    put(log, b"a", b"1")
    open_txn = build_batch([(T0, b"a", b"txn", ())], producer_id=7, producer_epoch=0,
                           base_sequence=0, is_transactional=True)
    log.append(open_txn)
    put(log, b"a", b"2")
    log.roll()
    cleanable = cleanable_range(log, None, T0)
    assert cleanable.first_uncleanable_offset == 1  # the open transaction's first offset
    log.close()


def test_aborted_data_goes_and_markers_stay_until_their_data_is_gone(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    put(log, b"k", b"plain")
    for seq, (commit, value) in enumerate([(False, b"aborted"), (True, b"committed")]):
        log.append(build_batch([(T0, b"t%d" % seq, value, ())], producer_id=5, producer_epoch=0,
                               base_sequence=seq, is_transactional=True))
        log.write_txn_marker(5, 0, 0, commit=commit)
    log.roll()
    first = clean(log)
    kept = records(log)
    assert [r[3] for r in kept if r[2] and r[2].startswith(b"t")] == [b"committed"]
    control = [h for h in _headers(log) if h.attributes & 0x20]
    assert len(control) == 2  # both markers had data in this cleaning: they stay
    # The ABORT marker keeps its transaction index entry in the new segment.
    aborted = log.fetch(0, 1 << 20, isolation_level=IsolationLevel.READ_COMMITTED)
    assert [(t.producer_id, t.first_offset) for t in aborted.aborted_transactions] == [(5, 1)]
    # A later cleaning, once the markers' segment is past the delete horizon: the ABORT
    # marker has no data left and goes; the COMMIT marker's data stays, and so does it.
    put(log, b"z", b"y" * 500)  # a segment of its own, cleaned next, then the horizon's
    log.roll()
    second = clean(log, first.end_offset)
    segments = list(log.segments)
    segments[0].set_last_modified_ms(T0 - 10 * DAY_MS)
    segments[1].set_last_modified_ms(T0)
    put(log, b"w", b"1")
    log.roll()
    clean(log, second.end_offset)
    control = [h for h in _headers(log) if h.attributes & 0x20 and h.records_count]
    assert len(control) == 1
    assert latest_by_key(records(log))[b"t1"] == b"committed"
    log.close()


def _headers(log: PartitionLog):
    headers = []
    for segment in log.segments:
        headers.extend(segment.iter_batch_headers())
    return headers


def test_batches_larger_than_the_read_buffer_clean_as_with_a_large_buffer(tmp_path: Path) -> None:
    # The cleaner reads its segments io_buffer_bytes at a time, and reads a batch larger than
    # that again with a buffer its size (Kafka's growBuffers): every batch is seen either way.
    def value(i: int) -> bytes:
        return b"v%d" % i + bytes(150 if i % 3 else 0)  # ~220-byte batches and ~75-byte ones

    cleaned = []
    for name, buffer_bytes in (("small", 100), ("large", 1 << 20)):
        log = open_log(tmp_path / f"{name}-0", segment_bytes=4096)
        for i in range(30):
            put(log, b"k%d" % (i % 4), value(i))
        log.roll()
        assert len(log.segments) == 3
        clean(log, cleaner=Cleaner(OffsetMap(1 << 16), io_buffer_bytes=buffer_bytes))
        cleaned.append(records(log))
        log.close()
    assert cleaned[0] == cleaned[1] == [(i, T0, b"k%d" % (i % 4), value(i)) for i in range(26, 30)]


def test_a_partial_offset_map_cleans_in_rounds(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    for round_ in range(5):
        for key in range(20):
            put(log, b"key-%02d" % key, b"v%d" % round_, T0 + round_)
    log.roll()
    before = records(log)
    cleaner = Cleaner(OffsetMap(24 * 10, load_factor=0.9))  # 9 keys per round
    checkpoint = None
    ends = []
    while True:
        cleanable = cleanable_range(log, checkpoint, T0)
        if cleanable.first_dirty_offset >= cleanable.first_uncleanable_offset:
            break
        result = cleaner.clean(log, cleanable.first_dirty_offset,
                               cleanable.first_uncleanable_offset)
        assert result.end_offset > cleanable.first_dirty_offset
        ends.append(result.end_offset)
        checkpoint = result.end_offset
        assert latest_by_key(records(log)) == latest_by_key(before)
    assert len(ends) > 2 and ends[-1] == log.active_segment.base_offset
    # Every key once more: a full clean leaves exactly one record per key.
    clean(log)
    assert sorted(r[2] for r in records(log)) == sorted(latest_by_key(before))
    log.close()


def test_segments_are_grouped_up_to_segment_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    for i in range(60):
        put(log, b"k%d" % (i % 3), b"v%d" % i, T0 + i)
    log.roll()
    segments_before = len(log.segments)
    clean(log)
    clean(log)  # the now tiny segments merge
    segments = list(log.segments)
    assert len(segments) < segments_before
    assert all(segment.size_bytes <= 400 for segment in segments)
    groups = group_segments_by_size(segments[:-1], 400, 10 << 20, segments[-1].base_offset)
    assert sum(len(group) for group in groups) == len(segments) - 1
    sizes = [sum(s.size_bytes for s in g) for g in groups]
    assert all(size <= 400 for size in sizes)
    log.close()


def test_group_segments_respects_the_offset_span_of_one_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=1 << 20)
    put(log, b"a", b"1")
    log.roll()
    put(log, b"b", b"1")
    log.roll()
    segments = list(log.segments)[:-1]
    # A last segment whose offsets run 2^31 past the first base cannot share its segment.
    far = segments[0].base_offset + (1 << 31) + 5
    assert len(group_segments_by_size(segments, 1 << 20, 1 << 20, far)) == 2
    assert len(group_segments_by_size(segments, 1 << 20, 1 << 20, 10)) == 1
    log.close()


def test_appends_go_on_while_a_log_is_cleaned_and_a_truncation_aborts_it(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    for i in range(30):
        put(log, b"k%d" % (i % 3), b"v%d" % i, T0 + i)
    log.roll()
    cleanable = cleanable_range(log, None, T0)
    appended = []

    def append_meanwhile() -> None:
        appended.append(put(log, b"new", b"x", T0))

    cleaner = Cleaner(OffsetMap(1 << 12))
    cleaner.clean(log, cleanable.first_dirty_offset, cleanable.first_uncleanable_offset,
                  check_done=append_meanwhile)
    assert appended and all(r in records(log) for r in [(o, T0, b"new", b"x") for o in appended])

    def truncate_meanwhile() -> None:
        if log.log_end_offset > 29:
            log.truncate_to(29)  # removes segments the cleaner is about to replace

    cleanable = cleanable_range(log, None, T0)
    before = records(log)
    with pytest.raises(CleaningAbortedError):
        cleaner.clean(log, cleanable.first_dirty_offset, cleanable.first_uncleanable_offset,
                      check_done=truncate_meanwhile)
    assert log.log_end_offset == 29
    assert latest_by_key(records(log)) == latest_by_key([r for r in before if r[0] < 29])
    assert not [name for name in os.listdir(log.directory) if name.endswith((".cleaned",
                                                                             ".swap"))]
    log.close()


def test_an_empty_batch_keeps_the_last_batch_of_an_active_producer(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=1 << 20)
    log.append(build_batch([(T0, b"a", b"1", ())], producer_id=9, producer_epoch=0,
                           base_sequence=0))
    put(log, b"a", b"2")
    log.roll()
    clean(log)
    headers = _headers(log)
    empty = [h for h in headers if h.records_count == 0 and h.producer_id == 9]
    assert len(empty) == 1 and empty[0].base_offset == 0 and empty[0].base_sequence == 0
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert reopened.producer_state.last_entry(9).last_seq == 0
    # The producer's next sequence is accepted after the restart.
    reopened.append(build_batch([(T0, b"a", b"3", ())], producer_id=9, producer_epoch=0,
                                base_sequence=1))
    reopened.close()


def test_the_new_segment_ends_where_its_group_ended(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=600)  # the two segments cannot merge
    for i in range(5):
        put(log, b"dup", b"v%d" % i)
    put(log, b"a", b"keep")
    put(log, b"dup", b"last")  # the segment's last record survives, the ones before go
    put(log, b"a", b"final")   # ... and this one goes: the segment ends in an empty batch
    log.roll()
    put(log, b"a", b"newest")
    log.roll()
    clean(log)
    first = log.segments.first
    assert first.read_next_offset() == 8
    last = parse_header(first.read_bytes(first.size_bytes - 61, 61))
    assert (last.base_offset, last.records_count, last.producer_id) == (7, 0, -1)
    log.close()


def test_a_full_table_answers_absent_keys_without_probing_forever() -> None:
    offset_map = OffsetMap(24 * 2, load_factor=1.0)
    offset_map.put(b"a", 1)
    offset_map.put(b"b", 2)
    assert offset_map.get(b"c") == -1
    with pytest.raises(OverflowError):
        offset_map.put(b"c", 3)


def test_stale_cleaner_output_of_a_failed_cleaning_is_replaced(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=1 << 20)
    for i in range(10):
        put(log, b"k", b"v%d" % i)
    log.roll()
    (log.directory / "00000000000000000000.log.cleaned").write_bytes(b"torn")
    clean(log)
    assert records(log) == [(9, T0, b"k", b"v9")]
    assert not [n for n in os.listdir(log.directory) if n.endswith(".cleaned")]
    log.close()


def test_point_reads_over_holes_and_empty_batches_take_the_next_record(tmp_path: Path) -> None:
    from stratalog.server.storage.fetch_isolation import take_records

    log = open_log(tmp_path / "t-0", segment_bytes=600)
    for i in range(8):
        put(log, b"dup", b"v%d" % i, T0 + i)  # offsets 0..7 go: "dup" is written again at 9
    put(log, b"a", b"x", T0 + 8)
    put(log, b"dup", b"last", T0 + 9)
    log.roll()
    clean(log)
    for offset, expected in [(0, (8, b"x")), (3, (8, b"x")), (8, (8, b"x")), (9, (9, b"last"))]:
        fetched = log.fetch(offset, 1 << 20, max_records=1)
        sliced = take_records(fetched.data, offset, 1, 1 << 20)
        found = [(r.offset, r.value) for _, rs in iter_batches(sliced.data) for r in rs]
        assert found == [expected], (offset, found, sliced.next_offset)
