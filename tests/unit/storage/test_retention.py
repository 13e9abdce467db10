"""Retention (Kafka UnifiedLog.deleteOldSegments; docs/kafka-behaviours.md#retention): the plan
(which prefix goes, and why) on real segments, and its execution by PartitionLog and LogManager,
including the asynchronous ``.deleted`` window."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.errors import OffsetOutOfRangeError
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.partition_log import PartitionLog
from stratalog.server.storage.retention import RetentionReason, plan_retention
from stratalog.server.storage.segment import Segment

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def batch(timestamp: int, size: int = 100) -> bytes:
    return build_batch([(timestamp, None, b"x" * size, ())])


BATCH_BYTES = len(batch(T0))
# One batch per segment: segment i holds offset i, with timestamp T0 + i hours.
CONFIG = LogConfig(segment_bytes=BATCH_BYTES, retention_ms=-1, file_delete_delay_ms=0)


@pytest.fixture
def log(tmp_path: Path):  # type: ignore[no-untyped-def]
    partition_log = PartitionLog.open(tmp_path / "t-0", CONFIG, time_ms=Clock(T0 + 100 * HOUR_MS))
    for i in range(5):
        partition_log.append(batch(T0 + i * HOUR_MS))
    yield partition_log
    partition_log.close()


def plan(
    log: PartitionLog,
    *,
    now_ms: int = T0 + 100 * HOUR_MS,
    log_start_offset: int | None = None,
    high_watermark: int | None = None,
    max_segments: int | None = None,
    **config: object,
):  # type: ignore[no-untyped-def]
    return plan_retention(
        list(log.segments),
        dataclasses.replace(CONFIG, **config),  # type: ignore[arg-type]
        log_start_offset=log.log_start_offset if log_start_offset is None else log_start_offset,
        log_end_offset=log.log_end_offset,
        high_watermark=log.log_end_offset if high_watermark is None else high_watermark,
        now_ms=now_ms,
        max_segments=max_segments,
    )


def bases(segments: tuple[Segment, ...]) -> list[int]:
    return [segment.base_offset for segment in segments]


def test_the_log_has_one_batch_per_segment(log: PartitionLog) -> None:
    assert log.segments.base_offsets() == [0, 1, 2, 3, 4]
    assert log.log_end_offset == 5


def test_nothing_to_delete_by_default(log: PartitionLog) -> None:
    result = plan(log)
    assert not result and result.segments == () and not result.limited


def test_time_retention_deletes_the_expired_prefix(log: PartitionLog) -> None:
    # now - largest timestamp > retention.ms: segments 0 and 1 are older than 2.5 h at T0+4h.
    result = plan(log, now_ms=T0 + 4 * HOUR_MS, retention_ms=int(2.5 * HOUR_MS))
    assert bases(result.segments) == [0, 1]
    assert result.reasons == (RetentionReason.RETENTION_MS,) * 2
    # Exactly retention.ms old is not yet expired (strictly greater).
    result = plan(log, now_ms=T0 + 3 * HOUR_MS, retention_ms=2 * HOUR_MS)
    assert bases(result.segments) == [0]


def test_time_retention_can_take_the_active_segment(log: PartitionLog) -> None:
    # Kafka UnifiedLog.deleteSegments (docs/kafka-behaviours.md#retention): the whole log, active
    # included; PartitionLog rolls before deleting.
    result = plan(log, retention_ms=HOUR_MS)
    assert bases(result.segments) == [0, 1, 2, 3, 4]


def test_a_future_timestamp_blocks_itself_and_later_segments(tmp_path: Path) -> None:
    # Kafka UnifiedLog.deleteRetentionMsBreachedSegments (docs/kafka-behaviours.md#retention)
    partition_log = PartitionLog.open(tmp_path / "t-0", CONFIG, time_ms=Clock(T0 + 100 * HOUR_MS))
    for timestamp in (T0, T0 + 200 * HOUR_MS, T0 + HOUR_MS, T0 + 2 * HOUR_MS):
        partition_log.append(batch(timestamp))
    result = plan(partition_log, retention_ms=HOUR_MS)
    assert bases(result.segments) == [0]
    assert result.future_timestamp_segment is not None
    assert result.future_timestamp_segment.base_offset == 1
    partition_log.close()


def test_time_retention_falls_back_to_the_file_mtime(tmp_path: Path) -> None:
    # Kafka UnifiedLog.deleteOldSegments (docs/kafka-behaviours.md#retention): a segment without
    # record timestamps is judged by its .log mtime.
    partition_log = PartitionLog.open(tmp_path / "t-0", CONFIG, time_ms=Clock(T0 + 100 * HOUR_MS))
    for _ in range(3):
        partition_log.append(batch(-1))
    segments = list(partition_log.segments)
    segments[0].set_last_modified_ms(T0)
    segments[1].set_last_modified_ms(T0 + 99 * HOUR_MS)
    result = plan(partition_log, retention_ms=10 * HOUR_MS)
    assert bases(result.segments) == [0]
    partition_log.close()


def test_size_retention_keeps_the_log_at_or_above_the_limit(log: PartitionLog) -> None:
    # Kafka UnifiedLog.deleteOldSegments (docs/kafka-behaviours.md#retention): delete the oldest
    # while size - deleted stays >= retention.bytes.
    result = plan(log, retention_bytes=2 * BATCH_BYTES)
    assert bases(result.segments) == [0, 1, 2]
    assert result.reasons == (RetentionReason.RETENTION_BYTES,) * 3
    result = plan(log, retention_bytes=2 * BATCH_BYTES + 1)
    assert bases(result.segments) == [0, 1]
    result = plan(log, retention_bytes=5 * BATCH_BYTES)
    assert bases(result.segments) == []
    result = plan(log, retention_bytes=0)
    assert bases(result.segments) == [0, 1, 2, 3, 4]


def test_log_start_offset_breach(log: PartitionLog) -> None:
    # The next segment's base offset <= log start offset: segments 0, 1 and 2 hold nothing
    # readable once the log starts at 3.
    result = plan(log, log_start_offset=3)
    assert bases(result.segments) == [0, 1, 2]
    assert result.reasons == (RetentionReason.LOG_START_OFFSET,) * 3
    # Inside segment 3: it stays.
    assert bases(plan(log, log_start_offset=2).segments) == [0, 1]
    # At the log end, every closed segment goes; the active one (no next segment) stays.
    assert bases(plan(log, log_start_offset=5).segments) == [0, 1, 2, 3]


def test_rules_run_in_kafkas_order_and_continue(log: PartitionLog) -> None:
    result = plan(
        log, log_start_offset=1, retention_bytes=3 * BATCH_BYTES, retention_ms=int(96.5 * HOUR_MS),
        now_ms=T0 + 100 * HOUR_MS,
    )
    assert bases(result.segments) == [0, 1, 2, 3]
    assert result.reasons == (
        RetentionReason.LOG_START_OFFSET,
        RetentionReason.RETENTION_BYTES,
        RetentionReason.RETENTION_MS,
        RetentionReason.RETENTION_MS,
    )


def test_compacted_topics_only_follow_the_log_start_offset(log: PartitionLog) -> None:
    result = plan(log, cleanup_policy=("compact",), retention_ms=0, retention_bytes=0,
                  log_start_offset=2)
    assert bases(result.segments) == [0, 1]
    result = plan(log, cleanup_policy=("compact", "delete"), retention_ms=0)
    assert bases(result.segments) == [0, 1, 2, 3, 4]


def test_nothing_at_or_above_the_high_watermark_goes(log: PartitionLog) -> None:
    # Kafka UnifiedLog.deletableSegments (docs/kafka-behaviours.md#retention): a segment goes only
    # if all its offsets are below the high watermark.
    assert bases(plan(log, retention_ms=0, high_watermark=3).segments) == [0, 1, 2]
    assert bases(plan(log, retention_ms=0, high_watermark=0).segments) == []


def test_an_empty_active_segment_never_goes(log: PartitionLog) -> None:
    log.roll()
    assert log.segments.base_offsets()[-1] == 5
    assert bases(plan(log, retention_ms=0).segments) == [0, 1, 2, 3, 4]


def test_plans_are_bounded(log: PartitionLog) -> None:
    result = plan(log, retention_ms=0, max_segments=2)
    assert bases(result.segments) == [0, 1] and result.limited
    result = plan(log, retention_ms=0, max_segments=5)
    assert bases(result.segments) == [0, 1, 2, 3, 4] and not result.limited
    result = plan(log, retention_ms=0, max_segments=0)
    assert result.segments == () and result.limited


# -------------------------------------------------------------------- carried out by the log


def deleted_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".deleted"))


def test_delete_old_segments_renames_then_deletes_after_the_delay(tmp_path: Path) -> None:
    clock = Clock(T0 + 100 * HOUR_MS)
    config = dataclasses.replace(CONFIG, retention_ms=int(97.5 * HOUR_MS),
                                 file_delete_delay_ms=1000)
    partition_log = PartitionLog.open(tmp_path / "t-0", config, time_ms=clock)
    for i in range(5):
        partition_log.append(batch(T0 + i * HOUR_MS))
    directory = partition_log.directory
    plan = partition_log.delete_old_segments()
    assert bases(plan.segments) == [0, 1, 2]
    assert partition_log.segments.base_offsets() == [3, 4]
    assert partition_log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(2, 1000)
    assert partition_log.read(3, 1000)
    # Kafka LocalLog.deleteSegmentFiles (docs/kafka-behaviours.md#retention): renamed at once,
    # deleted file.delete.delay.ms later.
    assert deleted_files(directory) == sorted(
        f"{base:020d}.{kind}.deleted" for base in (0, 1, 2) for kind in ("log", "index", "timeindex")
    )
    assert partition_log.pending_deletes == 3
    clock.now_ms += 999
    assert partition_log.maybe_delete_pending() == 0
    clock.now_ms += 1
    assert partition_log.maybe_delete_pending() == 3
    assert deleted_files(directory) == []
    assert not partition_log.delete_old_segments()  # nothing more
    partition_log.close()


def test_deleting_every_segment_rolls_first(tmp_path: Path) -> None:
    # Kafka UnifiedLog.deleteSegments (docs/kafka-behaviours.md#retention): the active segment goes
    # too, an empty one takes its place at the log end.
    config = dataclasses.replace(CONFIG, segment_bytes=10 * BATCH_BYTES, retention_ms=0)
    partition_log = PartitionLog.open(tmp_path / "t-0", config, time_ms=Clock(T0 + HOUR_MS))
    for i in range(3):
        partition_log.append(batch(T0 + i))
    assert partition_log.segments.base_offsets() == [0]
    plan = partition_log.delete_old_segments()
    assert bases(plan.segments) == [0]
    assert partition_log.segments.base_offsets() == [3]
    assert (partition_log.log_start_offset, partition_log.log_end_offset) == (3, 3)
    assert partition_log.read(3, 1000) == b""
    assert partition_log.append(batch(T0 + HOUR_MS)).first_offset == 3
    partition_log.close()


def test_delete_records_then_retention(tmp_path: Path) -> None:
    # Kafka UnifiedLog.maybeIncrementLogStartOffset (docs/kafka-behaviours.md#retention): the start
    # moves at once; whole segments below it go at the next retention pass.
    partition_log = PartitionLog.open(tmp_path / "t-0", CONFIG, time_ms=Clock(T0))
    for i in range(5):
        partition_log.append(batch(T0 + i))
    assert partition_log.maybe_increment_log_start_offset(3)
    assert partition_log.segments.base_offsets() == [0, 1, 2, 3, 4]
    plan = partition_log.delete_old_segments()
    assert plan.reasons == (RetentionReason.LOG_START_OFFSET,) * 3
    assert partition_log.segments.base_offsets() == [3, 4]
    assert partition_log.log_start_offset == 3
    partition_log.close()


def test_retention_is_bounded_and_resumes(tmp_path: Path) -> None:
    config = dataclasses.replace(CONFIG, retention_bytes=0)
    partition_log = PartitionLog.open(tmp_path / "t-0", config, time_ms=Clock(T0))
    for i in range(5):
        partition_log.append(batch(T0 + i))
    first = partition_log.delete_old_segments(max_segments=2)
    assert bases(first.segments) == [0, 1] and first.limited
    assert partition_log.log_start_offset == 2
    second = partition_log.delete_old_segments(max_segments=2)
    assert bases(second.segments) == [2, 3] and second.limited
    third = partition_log.delete_old_segments(max_segments=2)
    assert bases(third.segments) == [4] and not third.limited
    assert partition_log.segments.base_offsets() == [5]
    partition_log.close()


def test_a_crash_inside_the_deleted_window_leaves_nothing_behind(tmp_path: Path) -> None:
    config = dataclasses.replace(CONFIG, retention_ms=0, file_delete_delay_ms=60_000)
    partition_log = PartitionLog.open(tmp_path / "t-0", config, time_ms=Clock(T0 + HOUR_MS))
    for i in range(4):
        partition_log.append(batch(T0 + i))
    partition_log.delete_old_segments()
    directory = partition_log.directory
    assert len(deleted_files(directory)) == 12
    for segment in partition_log.segments:
        segment.close_handlers()  # the process dies before the delay passes
    reopened = PartitionLog.open(directory, config, time_ms=Clock(T0 + HOUR_MS),
                                 had_clean_shutdown=False, log_start_offset=4)
    assert deleted_files(directory) == []
    assert reopened.segments.base_offsets() == [4]
    assert (reopened.log_start_offset, reopened.log_end_offset) == (4, 4)
    reopened.close()


# -------------------------------------------------------------------- through the LogManager


def test_log_manager_runs_retention_on_its_interval_and_bounded(tmp_path: Path) -> None:
    clock = Clock(T0 + 100 * HOUR_MS)
    defaults = {
        "log.retention.check.interval.ms": "1000",
        "log.retention.segments.per.pass.max": "3",
        "log.segment.delete.delay.ms": "500",
        "log.flush.start.offset.checkpoint.interval.ms": "1000",
    }
    manager = LogManager.open([tmp_path / "d"], defaults=defaults, time_ms=clock)
    manager.create_topic("t", 2, {"segment.bytes": str(BATCH_BYTES), "retention.ms": str(HOUR_MS)})
    for partition in (0, 1):
        for i in range(3):
            manager.get_log("t", partition).append(batch(T0 + i))
    clock.now_ms += 999
    report = manager.run_maintenance()
    assert not report.retention_checked and report.segments_deleted == 0
    clock.now_ms += 1
    report = manager.run_maintenance()
    assert report.retention_checked
    assert (report.segments_deleted, report.more_work) == (3, True)
    # The backlog is worked off at the next pass, without waiting for the interval.
    clock.now_ms += 1
    report = manager.run_maintenance()
    assert (report.segments_deleted, report.more_work) == (3, False)
    assert report.log_start_offsets_moved == 1
    assert report.files_deleted == 0
    clock.now_ms += 499
    assert manager.run_maintenance().files_deleted == 3  # the first pass's, 500 ms later
    clock.now_ms += 1
    report = manager.run_maintenance()
    assert report.files_deleted == 3
    assert report.log_start_offset_checkpoints_written == 0
    for partition in (0, 1):
        partition_log = manager.get_log("t", partition)
        assert (partition_log.log_start_offset, partition_log.log_end_offset) == (3, 3)
        assert not deleted_files(partition_log.directory)
    clock.now_ms += 500
    report = manager.run_maintenance()
    assert report.log_start_offset_checkpoints_written == 1
    manager.close()
    reopened = LogManager.open([tmp_path / "d"], defaults=defaults, time_ms=clock)
    assert reopened.get_log("t", 0).log_start_offset == 3
    reopened.close()
