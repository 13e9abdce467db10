"""Offset ranges: how a read is cut into Spark tasks, and how a trigger's size is limited.

An :class:`OffsetRange` is the half-open ``[from_offset, until_offset)`` of one partition; one
range is one Spark task. Two rules decide the ranges, both Spark's Kafka source's own, so that
the same options give the same tasks:

* :func:`split_ranges` (``KafkaOffsetRangeCalculator``): empty ranges are dropped; with
  ``maxRecordsPerPartition`` each range is cut into ``ceil(size / max)`` near-equal parts; then,
  while there are fewer ranges than ``minPartitions``, the large ones are cut in proportion to
  their share of all records (``round(size / total * minPartitions)`` parts, at least one),
  counting the ranges too small to cut as one task each.
* :func:`rate_limit` (``KafkaMicroBatchStream.rateLimit``): ``maxOffsetsPerTrigger`` records per
  micro-batch, shared between partitions in proportion to their lag (records available), with
  at least one record for a partition whose share rounds below one, so none starves.

Offsets are estimates of record counts: after compaction a range may hold fewer records than its
size, which is why the rules speak of offsets, not records.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from stratalog.client import TopicPartition

__all__ = ["OffsetRange", "rate_limit", "split_ranges"]


class OffsetRange(NamedTuple):
    """Offsets ``[from_offset, until_offset)`` of one topic-partition: one Spark task's work.

    ``until_offset`` None means "to the end of the data" (file mode's last segment).
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int | None

    @property
    def size(self) -> int:
        """Offsets in the range (an upper bound on its records); unbounded ranges count 1."""
        if self.until_offset is None:
            return 1
        return self.until_offset - self.from_offset


def _divide(offset_range: OffsetRange, parts: int) -> list[OffsetRange]:
    """Cut a range into ``parts`` consecutive near-equal ranges; the last takes the remainder
    of the integer divisions (Kafka's ``getDividedPartition``)."""
    remaining = offset_range.size
    start = offset_range.from_offset
    until = offset_range.until_offset
    assert until is not None
    out = []
    for part in range(parts):
        this_part = remaining // (parts - part)
        remaining -= this_part
        end = min(start + this_part, until)
        out.append(offset_range._replace(from_offset=start, until_offset=end))
        start = end
    return [r for r in out if r.size > 0]


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round: half up.
    return max(math.floor(size / total * min_parts + 0.5), 1)


def split_ranges(
    ranges: Iterable[OffsetRange],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """The tasks for ``ranges``: Spark's KafkaOffsetRangeCalculator.getRanges.

    Unbounded ranges (``until_offset`` None) are kept whole. O(number of output ranges).
    """
    bounded = [r for r in ranges if r.until_offset is None or r.size > 0]
    if max_records_per_partition is not None:
        divided: list[OffsetRange] = []
        for offset_range in bounded:
            if offset_range.until_offset is None:
                divided.append(offset_range)
            else:
                parts = math.ceil(offset_range.size / max_records_per_partition)
                divided.extend(_divide(offset_range, parts))
        bounded = divided
    if min_partitions is None or len(bounded) >= min_partitions:
        return bounded
    total = sum(r.size for r in bounded)
    if total <= 0:
        return bounded
    unsplit = {
        i for i, r in enumerate(bounded)
        if r.until_offset is None or _part_count(r.size, total, min_partitions) == 1
    }
    unsplit_total = sum(bounded[i].size for i in unsplit)
    split_total = total - unsplit_total
    split_min_partitions = max(min_partitions - len(unsplit), 1)
    out: list[OffsetRange] = []
    for i, offset_range in enumerate(bounded):
        if i in unsplit:
            out.append(offset_range)
        else:
            parts = _part_count(offset_range.size, split_total, split_min_partitions)
            out.extend(_divide(offset_range, parts))
    return out


def rate_limit(
    limit: int,
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """End offsets for the next micro-batch: at most about ``limit`` records past ``start``.

    Each partition of ``latest`` with records to read gets ``limit * lag / total_lag`` of them,
    rounded down, or up when below one. Partitions missing from ``start`` take their
    ``latest`` offset unchanged. Never returns an offset past ``latest``.
    """
    sizes = {
        tp: end - start[tp]
        for tp, end in latest.items()
        if tp in start and end - start[tp] > 0
    }
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        prorate = limit * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + share)
    return out
