"""The open segments cache (open_segments.py) and the segments whose files it closes.

Descriptors are counted in ``/proc/self/fd``: the tests check what the process holds, not what
the code says it holds. The stress test reads evicted segments from several threads while one
appends and rolls and another shrinks and grows the cache, and compares every answer with the
records written.
"""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.records.reader import iter_records
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.errors import LogClosedError
from stratalog.server.storage.open_segments import DESCRIPTORS_PER_SEGMENT, OpenSegments
from stratalog.server.storage.partition_log import PartitionLog
from stratalog.server.storage.segment import Segment

T0 = 1_700_000_000_000

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux's /proc only")


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def one_record(index: int) -> bytes:
    return build_batch([(T0 + index, b"k%d" % index, b"v%d" % index, ())])


CONFIG = {"segment.bytes": "100", "retention.ms": "-1"}


def small_segments_log(directory: Path, cache: OpenSegments, records: int) -> PartitionLog:
    """A log of one record per segment (segment.bytes 100)."""
    log = PartitionLog.open(directory, CONFIG, open_segments=cache)
    for index in range(records):
        log.append(one_record(index))
    assert len(log.segments) == records
    return log


def value_at(log: PartitionLog, offset: int) -> bytes | None:
    data = log.read(offset, 1)
    return next(r.value for r in iter_records(data) if r.offset == offset)


def test_inactive_segments_beyond_the_capacity_are_closed_and_reopened_on_use(
    tmp_path: Path,
) -> None:
    before = open_descriptors()
    cache = OpenSegments(10)
    log = small_segments_log(tmp_path / "t-0", cache, 1000)
    assert len(cache) == 10 and cache.closed_count == 999 - 10
    # The active segment and 10 others: at most 6 descriptors each.
    assert open_descriptors() - before <= 11 * DESCRIPTORS_PER_SEGMENT
    closed = [s for s in log.segments if not s.files_open]
    assert len(closed) >= 989
    for offset in random.Random(1).sample(range(1000), 200):
        assert value_at(log, offset) == b"v%d" % offset
        assert log.offset_for_timestamp(T0 + offset).offset == offset
    assert open_descriptors() - before <= 11 * DESCRIPTORS_PER_SEGMENT
    log.close()
    assert open_descriptors() == before and len(cache) == 0


def test_the_active_segment_is_never_closed(tmp_path: Path) -> None:
    cache = OpenSegments(0)
    log = small_segments_log(tmp_path / "t-0", cache, 50)
    active = log.active_segment
    assert active.is_active and active.files_open and active not in cache
    assert not active.try_close_files()
    cache.set_capacity(0)
    assert active.files_open
    # Every inactive one is closed, and still read.
    assert all(not s.files_open for s in log.segments if s is not active)
    assert value_at(log, 3) == b"v3"
    # Reopened in use, it stays in the cache until the next segment opened closes it.
    assert log.segments.get(3).files_open and len(cache) == 1
    assert value_at(log, 4) == b"v4"
    assert not log.segments.get(3).files_open and len(cache) == 1
    log.close()


def test_a_segment_in_use_is_not_closed_under_its_reader(tmp_path: Path) -> None:
    cache = OpenSegments(100)
    log = small_segments_log(tmp_path / "t-0", cache, 20)
    segment = log.segments.get(5)
    with segment.pinned():
        assert not segment.try_close_files()
        cache.set_capacity(0)
        assert segment.files_open and segment in cache  # kept: in use
    headers = segment.iter_batch_headers()
    assert next(headers).base_offset == 5  # an iterator holds the files until it is done
    assert not segment.try_close_files()
    assert list(headers) == []
    assert segment.try_close_files() and not segment.files_open
    log.close()


def test_a_segment_closed_for_good_is_not_reopened(tmp_path: Path) -> None:
    cache = OpenSegments(0)
    segment = Segment.create(tmp_path, 0, LogConfig(), open_segments=cache)
    segment.append(0, T0, 0, one_record(0))
    assert segment.try_close_files()
    assert segment.read_next_offset() == 1  # reopened for the read
    segment.close()
    assert segment.is_closed and segment not in cache
    with pytest.raises(LogClosedError):
        segment.fetch(0, 100)


def test_renames_and_deletion_follow_closed_files(tmp_path: Path) -> None:
    cache = OpenSegments(0)
    log = small_segments_log(tmp_path / "t-0", cache, 30)
    log.maybe_increment_log_start_offset(20)
    plan = log.delete_old_segments()  # renamed .deleted while closed
    assert len(plan.segments) == 20
    assert value_at(log, 25) == b"v25"
    log.close()
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.suffix == ".log")
    assert len(names) == 10 and names[0] == "00000000000000000020.log"


def test_a_log_reopened_after_a_clean_close_keeps_the_bound(tmp_path: Path) -> None:
    cache = OpenSegments(5)
    log = small_segments_log(tmp_path / "t-0", cache, 200)
    log.close()
    before = open_descriptors()
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, open_segments=cache,
                            had_clean_shutdown=True)
    assert open_descriptors() - before <= 6 * DESCRIPTORS_PER_SEGMENT
    assert [value_at(log, o) for o in range(0, 200, 13)] == [b"v%d" % o for o in range(0, 200, 13)]
    log.append(one_record(200))
    assert value_at(log, 200) == b"v200"
    log.close()


def test_unclean_recovery_and_truncation_with_a_tiny_cache(tmp_path: Path) -> None:
    cache = OpenSegments(1)
    log = small_segments_log(tmp_path / "t-0", cache, 60)
    log.flush()
    log.close_for_deletion()  # no clean close: the next open recovers every segment
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, open_segments=cache,
                            had_clean_shutdown=False, recovery_point=0)
    assert log.recovered_segments == 60 and log.log_end_offset == 60
    # Truncation makes an old, closed segment the active one again.
    log.truncate_to(31)
    assert log.active_segment.base_offset == 31 and log.active_segment.files_open
    log.append(one_record(31))
    log.append(one_record(32))
    assert [value_at(log, o) for o in (0, 30, 31, 32)] == [b"v0", b"v30", b"v31", b"v32"]
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, open_segments=cache,
                            had_clean_shutdown=True)
    assert log.log_end_offset == 33 and value_at(log, 32) == b"v32"
    log.close()


def test_concurrent_reads_of_closed_segments_beside_appends_and_a_changing_capacity(
    tmp_path: Path,
) -> None:
    cache = OpenSegments(4)
    log = small_segments_log(tmp_path / "t-0", cache, 300)
    stop = threading.Event()
    errors: list[BaseException] = []

    def guard(target):
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
                stop.set()
        return run

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(1500):
            if stop.is_set():
                return
            end = log.log_end_offset
            offset = rng.randrange(end)
            assert value_at(log, offset) == b"v%d" % offset
            found = log.offset_for_timestamp(T0 + offset)
            assert found is not None and found.offset == offset

    def appender() -> None:
        index = 300
        while not stop.is_set() and index < 900:
            log.append(one_record(index))
            index += 1

    def resizer() -> None:
        rng = random.Random(7)
        while not stop.is_set():
            cache.set_capacity(rng.choice([0, 1, 2, 8, 30]))

    readers = [threading.Thread(target=guard(lambda s=s: reader(s))) for s in range(4)]
    others = [threading.Thread(target=guard(appender)), threading.Thread(target=guard(resizer))]
    for thread in readers + others:
        thread.start()
    for thread in readers:
        thread.join()
    stop.set()
    for thread in others:
        thread.join()
    assert errors == []
    assert cache.closed_count > 1000
    log.close()
    assert len(cache) == 0
