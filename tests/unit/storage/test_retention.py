"""Retention ([B-59]..[B-65]): the plan (which prefix goes, and why) on real segments."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.storage.config import LogConfig
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
    # [B-63]: the whole log, active included; PartitionLog rolls before deleting.
    result = plan(log, retention_ms=HOUR_MS)
    assert bases(result.segments) == [0, 1, 2, 3, 4]


def test_a_future_timestamp_blocks_itself_and_later_segments(tmp_path: Path) -> None:
    # [B-62]
    partition_log = PartitionLog.open(tmp_path / "t-0", CONFIG, time_ms=Clock(T0 + 100 * HOUR_MS))
    for timestamp in (T0, T0 + 200 * HOUR_MS, T0 + HOUR_MS, T0 + 2 * HOUR_MS):
        partition_log.append(batch(timestamp))
    result = plan(partition_log, retention_ms=HOUR_MS)
    assert bases(result.segments) == [0]
    assert result.future_timestamp_segment is not None
    assert result.future_timestamp_segment.base_offset == 1
    partition_log.close()


def test_time_retention_falls_back_to_the_file_mtime(tmp_path: Path) -> None:
    # [B-61]: a segment without record timestamps is judged by its .log mtime.
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
    # [B-61]: delete the oldest while size - deleted stays >= retention.bytes.
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
    # [B-60]: a segment goes only if all its offsets are below the high watermark.
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
