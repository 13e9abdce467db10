"""The log cleaner's threads and bookkeeping (placeholder: the interface; the work follows)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CleanerPartitionStatus", "CleanerStats"]


@dataclass(frozen=True, slots=True)
class CleanerPartitionStatus:
    """Where the cleaner stands on one compacted partition (a snapshot).

    ``cleaned_offset`` is the checkpointed first dirty offset (``cleaner-offset-checkpoint``);
    ``dirty_bytes`` the bytes of the segments from it up to the first uncleanable offset,
    ``cleanable_bytes`` those plus the already cleaned ones below it, and ``dirty_ratio`` the
    first over the second (0 when nothing is cleanable). ``last_clean_ms`` is the wall clock of
    the last cleaning of this partition by this process, or -1; ``in_progress`` says a cleaner
    thread is cleaning it now.
    """

    cleaned_offset: int
    dirty_ratio: float
    dirty_bytes: int
    cleanable_bytes: int
    last_clean_ms: int
    in_progress: bool


@dataclass(frozen=True, slots=True)
class CleanerStats:
    """Cumulative figures of every cleaning since the LogManager opened (a snapshot).

    ``last_run_ms`` is the wall clock of the last cleaning's end (-1: none yet);
    ``max_dirty_ratio`` the largest dirty ratio among compacted partitions at the last check.
    """

    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    cleanings: int = 0
    last_run_ms: int = -1
    max_dirty_ratio: float = 0.0
