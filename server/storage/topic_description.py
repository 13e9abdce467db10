"""What a topic and its partitions look like from outside: the answer to describe and list.

A :class:`TopicDescription` is a snapshot: the topic's name, every effective config (server
defaults with the topic's overrides on top), which configs the topic sets itself, and one
:class:`PartitionDescription` per open partition (offsets, bytes, segments, its log directory,
its largest record timestamp), as Kafka's ``DescribeTopicPartitions`` and ``DescribeLogDirs``
answer between them. :func:`describe_partition` reads one partition without mapping the time
index of any inactive segment (a describe of a log with 10,000 segments reads 12 bytes of each).
Immutable values; :func:`describe_partition` is safe against a concurrent append (it reads the
log's published end and a snapshot of its segments).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stratalog.records.log_layout import TIME_INDEX_ENTRY, TIME_INDEX_TIMESTAMP

if TYPE_CHECKING:
    from .partition_log import PartitionLog
    from .segment import Segment

__all__ = ["PartitionDescription", "TopicDescription", "describe_partition"]


@dataclass(frozen=True)
class PartitionDescription:
    """One partition as :meth:`LogManager.describe_topic` reports it (a snapshot)."""

    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    segment_count: int
    log_dir: str
    max_timestamp: int  # the largest record timestamp; -1 when the log has none


@dataclass(frozen=True)
class TopicDescription:
    """A topic: its name, every effective config (defaults included), its partitions, and
    which configs are set on the topic itself (``overridden_configs``, sorted; the others are
    the server's defaults)."""

    name: str
    configs: dict[str, str]
    partitions: list[PartitionDescription]
    overridden_configs: tuple[str, ...] = ()


def describe_partition(
    partition: int, partition_log: PartitionLog, log_dir: Path
) -> PartitionDescription:
    """A snapshot of one partition's log, living in ``log_dir``."""
    segments = list(partition_log.segments)
    max_timestamp = max(
        (_segment_max_timestamp(segment, segment is segments[-1]) for segment in segments),
        default=-1,
    )
    return PartitionDescription(
        partition=partition,
        log_start_offset=partition_log.log_start_offset,
        log_end_offset=partition_log.log_end_offset,
        size_bytes=sum(segment.size_bytes for segment in segments),
        segment_count=len(segments),
        log_dir=str(log_dir),
        max_timestamp=max(max_timestamp, -1),
    )


def _segment_max_timestamp(segment: Segment, is_active: bool) -> int:
    """A segment's largest record timestamp (-1 if none), without opening its time index.

    An inactive segment's ``.timeindex`` was trimmed when it was rolled (or rebuilt at load),
    and its last entry holds the segment's largest timestamp; reading those 12 bytes keeps a
    describe of a log with 10,000 segments from mapping (and keeping open) 10,000 indexes.
    The active segment, or a file that does not look trimmed, goes through the index itself.
    """
    if is_active or segment.indexes_loaded[1]:
        return segment.max_timestamp_so_far
    entry_size = TIME_INDEX_ENTRY.size
    try:
        fd = os.open(segment.time_index_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return segment.max_timestamp_so_far
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return -1
        if size % entry_size:
            return segment.max_timestamp_so_far
        last_entry = os.pread(fd, entry_size, size - entry_size)
        return max(TIME_INDEX_TIMESTAMP.read(last_entry), -1)
    except OSError:
        return segment.max_timestamp_so_far
    finally:
        os.close(fd)
