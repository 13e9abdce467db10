"""One cleaning of one compacted log (placeholder: the interface; the algorithm follows)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CleaningResult"]


@dataclass(frozen=True, slots=True)
class CleaningResult:
    """What one cleaning of one partition did.

    ``first_dirty_offset_before`` is the checkpointed first dirty offset the cleaning started
    from; ``end_offset`` the first offset it did not clean (the new first dirty offset).
    Bytes and records count the cleaned section ``[log start, end_offset)``: read, and kept.
    ``segments_before``/``segments_after`` count that section's segments.
    """

    topic: str
    partition: int
    first_dirty_offset_before: int
    end_offset: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int
    segments_before: int
    segments_after: int
    duration_ms: int
