r"""Retention: which of a log's oldest segments may go, by time, size and log start offset.

Kafka deletes whole segments, oldest first, never a record at a time (Kafka
UnifiedLog.deleteOldSegments; docs/kafka-behaviours.md#retention). Three rules each mark a prefix of
the log; they run in Kafka's order, each continuing from where the previous one stopped::

    [seg 0][seg 100][seg 200][seg 300 ...][active]
    \______ log start offset breached: the NEXT segment starts at or below log_start_offset
             \____ retention.bytes: while the log stays >= retention.bytes without it
                      \___ retention.ms: now - largest timestamp > retention.ms (mtime if none)

A scan stops at the first segment the rule keeps, so deletion is always a prefix: a segment
with a future timestamp keeps itself and everything after it (Kafka
UnifiedLog.deleteRetentionMsBreachedSegments; docs/kafka-behaviours.md#retention). A segment is
never deleted unless all its offsets are below the high watermark (for a single replica, the log end
offset), and an empty active segment never is. When every segment goes, including a non-empty active
one, the log rolls first so that an empty active segment remains (Kafka UnifiedLog.deleteSegments;
docs/kafka-behaviours.md#retention). ``log.start.offset`` rules apply whatever ``cleanup.policy``
says; time and size rules only when it contains ``delete``.

This module decides; :class:`~stratalog.server.storage.partition_log.PartitionLog` acts (roll,
move the log start offset, rename to ``.deleted``, delete after ``file.delete.delay.ms``).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .config import LogConfig
from .segment import Segment

__all__ = ["RetentionPlan", "RetentionReason", "plan_retention"]

log = logging.getLogger(__name__)


class RetentionReason(enum.Enum):
    """Why a segment is deleted (Kafka logs the same three)."""

    LOG_START_OFFSET = "log start offset breach"
    RETENTION_MS = "retention time breach"
    RETENTION_BYTES = "retention size breach"


@dataclass(frozen=True)
class RetentionPlan:
    """The oldest segments to delete, in order, each with its reason.

    ``limited`` is True when ``max_segments`` cut the plan short (more is deletable);
    ``future_timestamp_segment`` names the segment whose timestamp in the future stopped the
    time rule, if one did (Kafka's KIP-937 warning).
    """

    segments: tuple[Segment, ...] = ()
    reasons: tuple[RetentionReason, ...] = ()
    limited: bool = False
    future_timestamp_segment: Segment | None = None

    def __bool__(self) -> bool:
        return bool(self.segments)


# (segment, next segment or None) -> delete it?
_Predicate = Callable[[Segment, "Segment | None"], bool]


def plan_retention(
    segments: Sequence[Segment],
    config: LogConfig,
    *,
    log_start_offset: int,
    log_end_offset: int,
    high_watermark: int,
    now_ms: int,
    max_segments: int | None = None,
) -> RetentionPlan:
    """Decide which prefix of ``segments`` (oldest first, the last active) to delete.

    ``max_segments`` bounds the plan (a retention pass must be bounded); the remainder is
    found by the next pass. Reads each candidate's ``largest_timestamp`` (which may open its
    time index) and ``size_bytes``; nothing is changed.
    """
    if max_segments is not None and max_segments <= 0:
        return RetentionPlan(limited=bool(segments))
    remaining = list(segments)
    chosen: list[Segment] = []
    reasons: list[RetentionReason] = []
    future_segment: Segment | None = None

    def run(predicate: _Predicate, reason: RetentionReason) -> None:
        nonlocal remaining
        taken = _deletable_prefix(
            remaining, predicate, log_end_offset=log_end_offset, high_watermark=high_watermark
        )
        chosen.extend(taken)
        reasons.extend([reason] * len(taken))
        remaining = remaining[len(taken) :]

    def log_start_offset_breached(segment: Segment, next_segment: Segment | None) -> bool:
        return next_segment is not None and next_segment.base_offset <= log_start_offset

    run(log_start_offset_breached, RetentionReason.LOG_START_OFFSET)
    if config.is_delete and config.retention_bytes >= 0:
        size_bytes = sum(segment.size_bytes for segment in remaining)
        if size_bytes >= config.retention_bytes:
            excess_bytes = size_bytes - config.retention_bytes

            def retention_bytes_breached(segment: Segment, next_segment: Segment | None) -> bool:
                nonlocal excess_bytes
                if excess_bytes - segment.size_bytes >= 0:
                    excess_bytes -= segment.size_bytes
                    return True
                return False

            run(retention_bytes_breached, RetentionReason.RETENTION_BYTES)
    if config.is_delete and config.retention_ms >= 0:
        retention_ms = config.retention_ms

        def retention_ms_breached(segment: Segment, next_segment: Segment | None) -> bool:
            nonlocal future_segment
            largest_timestamp = segment.largest_timestamp
            if largest_timestamp > now_ms and future_segment is None:
                future_segment = segment
            return now_ms - largest_timestamp > retention_ms

        run(retention_ms_breached, RetentionReason.RETENTION_MS)
        if future_segment is not None and (not remaining or remaining[0] is not future_segment):
            future_segment = None  # it did not stop the scan
    limited = False
    if max_segments is not None and len(chosen) > max_segments:
        chosen, reasons, limited = chosen[:max_segments], reasons[:max_segments], True
    if future_segment is not None:
        log.warning(
            "segment %s has a timestamp %d ms in the future; it and every later segment are "
            "kept past retention.ms until then", future_segment.log_path,
            future_segment.largest_timestamp - now_ms,
        )
    return RetentionPlan(tuple(chosen), tuple(reasons), limited, future_segment)


def _deletable_prefix(
    segments: list[Segment],
    predicate: _Predicate,
    *,
    log_end_offset: int,
    high_watermark: int,
) -> list[Segment]:
    """Kafka's ``deletableSegments`` (Kafka UnifiedLog.deletableSegments;
    docs/kafka-behaviours.md#retention): the longest prefix the predicate accepts whose every offset
    is below the high watermark, never ending in an empty last segment."""
    deletable: list[Segment] = []
    for position, segment in enumerate(segments):
        next_segment = segments[position + 1] if position + 1 < len(segments) else None
        upper_bound_offset = next_segment.base_offset if next_segment else log_end_offset
        is_last_and_empty = next_segment is None and segment.size_bytes == 0
        if is_last_and_empty or high_watermark < upper_bound_offset:
            break
        if not predicate(segment, next_segment):
            break
        deletable.append(segment)
    return deletable
