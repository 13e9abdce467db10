"""LocalLog: a partition's segments under the PartitionLog, driven directly (Kafka's
LocalLogTest where it applies): what readers see is the published end, rolls, truncation,
deferred deletion, flush and the recovery point, segment swaps, offline handling. The
behaviour through PartitionLog is in test_partition_log*.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.errors import (
    CleaningAbortedError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    StorageIOError,
)
from stratalog.server.storage.local_log import LocalLog, LogEnd
from stratalog.server.storage.segment import Segment
from stratalog.server.storage.segments import Segments

T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def open_local(
    directory: Path, clock: Clock, **kwargs: object
) -> tuple[LocalLog, LogConfig]:
    config = LogConfig.from_mapping({"file.delete.delay.ms": "1000"})
    active = Segment.create(directory, 0, config, time_ms=clock, active=True)
    local = LocalLog(
        directory, config, clock, Segments([active]), threading.RLock(), LogEnd(0, 0, 0),
        recovery_point=0, **kwargs,  # type: ignore[arg-type]
    )
    return local, config


def write(local: LocalLog, base_offset: int, count: int) -> int:
    """Write ``count`` records at ``base_offset`` to the active segment and publish them, as
    the LogWriter does; returns the new end offset."""
    data = build_batch([(T0, None, b"v", ())] * count, base_offset=base_offset)
    last = base_offset + count - 1
    segment = local.active_segment
    local.append(segment, last, T0, last, [data])
    local.publish_end(LogEnd(last + 1, segment.base_offset, segment.size_bytes))
    return last + 1


def test_readers_see_only_what_was_published(tmp_path: Path) -> None:
    local, _ = open_local(tmp_path, Clock())
    segment = local.active_segment
    data = build_batch([(T0, None, b"v", ())] * 3)
    local.append(segment, 2, T0, 2, [data])
    # Written, not published: the end is still 0, where a read returns nothing.
    assert local.log_end_offset == 0
    assert local.read(0, 1 << 20, True, 0, 0) is None
    with pytest.raises(OffsetOutOfRangeError):
        local.read(1, 1 << 20, True, 0, 0)
    local.publish_end(LogEnd(3, 0, segment.size_bytes))
    fetched = local.read(0, 1 << 20, True, 0, 0)
    assert fetched is not None
    assert (fetched.data, fetched.next_offset, fetched.records_count) == (data, 3, 3)
    with pytest.raises(OffsetOutOfRangeError):
        local.read(0, 1 << 20, True, 0, log_start_offset=1)


def test_roll_moves_the_end_to_a_new_segment_and_replaces_an_empty_one(tmp_path: Path) -> None:
    local, _ = open_local(tmp_path, Clock())
    end = write(local, 0, 2)
    first = local.active_segment
    rolled = local.roll(None)
    assert rolled.base_offset == end == 2
    assert local.end == LogEnd(2, 2, 0)
    assert [s.base_offset for s in local.segments] == [0, 2]
    assert not first.is_active and rolled.is_active
    # KAFKA-6388: rolling again at the end of the empty active segment recreates it.
    again = local.roll(None)
    assert again is not rolled and again.base_offset == 2
    assert [s.base_offset for s in local.segments] == [0, 2]
    assert local.pending_deletes == 1
    # A follower's append may start past the end: the roll goes there.
    assert local.roll(10).base_offset == 10
    assert local.end == LogEnd(2, 10, 0)


def test_truncate_to_cuts_the_active_segment_and_schedules_the_others(tmp_path: Path) -> None:
    clock = Clock()
    local, _ = open_local(tmp_path, clock)
    write(local, 0, 2)
    local.roll(None)
    write(local, 2, 2)
    local.roll(None)
    write(local, 4, 1)
    local.flush(None, None)
    assert local.recovery_point == 5
    active = local.truncate_to(2)
    assert active.base_offset == 2 and active.size_bytes == 0
    assert local.end == LogEnd(2, 2, 0)
    assert local.recovery_point == 2
    assert [s.base_offset for s in local.segments] == [0, 2]
    assert local.pending_deletes == 1
    assert sorted(p.name for p in tmp_path.glob("*.deleted"))[0].startswith(
        "00000000000000000004."
    )
    # Deleted only once file.delete.delay.ms has passed.
    assert local.maybe_delete_pending(clock.now_ms + 999) == 0
    assert local.maybe_delete_pending(clock.now_ms + 1000) == 1
    assert not list(tmp_path.glob("*.deleted"))


def test_flush_moves_the_recovery_point_and_fsyncs_the_noted_snapshots(tmp_path: Path) -> None:
    flushed: list[int] = []
    local, _ = open_local(tmp_path, Clock(), flush_snapshot=flushed.append)
    write(local, 0, 3)
    local.roll(None)
    local.note_unflushed_snapshot(3)
    write(local, 3, 2)
    local.flush(2, None)
    assert local.recovery_point == 2 and flushed == []  # the snapshot at 3 is above it
    local.flush(None, None)
    assert local.recovery_point == 5 and flushed == [3]
    local.flush(None, None)
    assert flushed == [3]  # once


def test_segments_are_swapped_in_three_renames_and_a_stale_swap_is_refused(
    tmp_path: Path,
) -> None:
    local, config = open_local(tmp_path, Clock())
    write(local, 0, 2)
    old = local.active_segment
    local.roll(None)
    stale = Segment.create(tmp_path, 0, config, file_suffix=".cleaned")
    # The active segment is never swapped out: nothing is renamed, the new segment deleted.
    with pytest.raises(CleaningAbortedError):
        local.replace_segments(stale, [local.active_segment], lambda step: None)
    assert not stale.log_path.exists()
    assert local.segments.first is old
    cleaned = Segment.create(tmp_path, 0, config, file_suffix=".cleaned")
    steps: list[str] = []
    local.replace_segments(cleaned, [old], steps.append)
    assert steps == ["swap", "delete 0", "rename"]
    assert local.segments.first is cleaned and local.pending_deletes == 1
    assert cleaned.log_path.name == "00000000000000000000.log"
    assert (tmp_path / "00000000000000000000.log.deleted").exists()


def test_an_io_error_takes_the_log_offline_once(tmp_path: Path) -> None:
    failures: list[BaseException] = []
    local, _ = open_local(tmp_path, Clock(), io_failure_handler=failures.append)
    write(local, 0, 1)
    local.io_failed(ValueError("bad input"), "write")  # not an I/O error: nothing changes
    assert not local.is_offline and failures == []
    error = StorageIOError("disk gone")
    local.io_failed(error, "write")
    local.io_failed(StorageIOError("again"), "fsync")
    assert local.is_offline and failures == [error]
    with pytest.raises(LogDirOfflineError):
        local.read(0, 1 << 20, True, 0, 0)
    with pytest.raises(LogDirOfflineError):
        local.ensure_open()
    local.close_for_deletion()
    assert local.is_closed
