"""The time index (``.timeindex``): sparse map from timestamps to offsets in one segment.

An entry ``(timestamp, offset)`` says "the largest timestamp seen in this segment up to and
including the batch whose last offset is ``offset`` is ``timestamp``": every record with a larger
timestamp comes after ``offset``. Entries are written with the offset-index entries (running max
timestamp, last offset of the batch where that max first appeared) and once more at roll, close
and the end of recovery. A lookup for time ``T`` takes the entry with the largest timestamp
``<= T`` and hands its offset to the offset index, which gives the position to scan from.

Byte layout: entries of 12 bytes, big-endian, no header, no checksum (Kafka's ``TimeIndex``)::

    offset size field
         0    8 timestamp         int64, milliseconds since the epoch
         8    4 relative_offset   int32, offset - base_offset, in [0, 2^31 - 1]

    base offset 100, entry (timestamp 1700000000000, offset 105) -> 0000018bcfe56800 00000005

Timestamps strictly increase; offsets never decrease. The default 10485760-byte file is
preallocated to 10485756 bytes (873,813 entries), and the index counts as full one entry early
(``entries >= max_entries - 1``): the last slot is kept for the entry written at roll or close.
The layout is defined once, in :mod:`stratalog.records.time_index_file`.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import NamedTuple

from stratalog.records.batch import NO_TIMESTAMP
from stratalog.records.entry_field import SanityRule
from stratalog.records.time_index_file import (
    TIME_INDEX_ENTRY,
    TIME_INDEX_RELATIVE_OFFSET,
    TIME_INDEX_TIMESTAMP,
    TimeIndexEntry,
    time_index_sanity,
)

from .errors import CorruptIndexError, IndexFullError, InvalidOffsetError, InvalidTimestampError
from .index import Column, Index

__all__ = ["DEFAULT_MAX_INDEX_SIZE_BYTES", "TimeIndex", "TimestampOffset"]

DEFAULT_MAX_INDEX_SIZE_BYTES = 10 * 1024 * 1024  # segment.index.bytes

_ENTRY = TIME_INDEX_ENTRY
_ENTRY_SIZE = TIME_INDEX_ENTRY.size
_TIMESTAMP_COLUMN = Column(*TIME_INDEX_TIMESTAMP, relative=False)
_OFFSET_COLUMN = Column(*TIME_INDEX_RELATIVE_OFFSET, relative=True)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


class TimestampOffset(NamedTuple):
    """A timestamp (ms) and the offset up to which it is the segment's largest timestamp."""

    timestamp: int
    offset: int


class TimeIndex(Index):
    """The ``.timeindex`` file of one segment: (timestamp, offset) entries.

    Holds what :class:`~stratalog.server.storage.index.Index` holds plus ``last_entry``, kept in
    memory (``(-1, base_offset)`` when empty) and re-read from the file after every resize and
    truncation (Kafka TimeIndex.lastEntry; docs/kafka-behaviours.md#index-files-mechanics).

    Invariants: timestamps strictly increase, offsets never decrease, offsets lie in
    ``[base_offset, base_offset + 2^31 - 1]``. Full at ``entries >= max_entries - 1``, so that
    :meth:`maybe_append` with ``skip_full_check=True`` at roll or close always finds a slot.

    Crash behaviour: not checksummed. An untrimmed file reopens with zero entries ``(0,
    base_offset)`` at its end, so its last timestamp (0) is below its first: :meth:`sanity_check`
    catches that (KAFKA-10207: such a file made the segment look old and get deleted early).
    Recovery rebuilds the file from the ``.log``.

    Concurrency: single writer (PartitionLog serialises :meth:`maybe_append`,
    :meth:`truncate_to`, resizes and close); :meth:`lookup` and :meth:`entry` may run
    concurrently from reader threads and never see a half-written entry.
    """

    ENTRY_SIZE = _ENTRY.size

    def __init__(
        self,
        path: Path | str,
        base_offset: int,
        max_index_size_bytes: int = DEFAULT_MAX_INDEX_SIZE_BYTES,
    ) -> None:
        super().__init__(path, base_offset, max_index_size_bytes)
        self._last_entry = self._read_last_entry()

    @property
    def is_full(self) -> bool:
        """True iff at most the slot reserved for the roll/close entry is left."""
        return self._entries >= self._max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when the index is empty."""
        return self._last_entry

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append (``timestamp``, ``offset``) if ``timestamp`` is above the last entry's (Kafka
        TimeIndex.maybeAppend; docs/kafka-behaviours.md#index-appends).

        An equal timestamp is ignored silently: that is the same entry once more (the roll or
        close entry repeats the last one when no larger timestamp came since). As the empty index
        has last timestamp -1, batches without timestamps never add entries. Runtime O(1).

        Args:
            skip_full_check: True only for the entry written at roll or close, which may take
                the reserved last slot.
        Raises:
            IndexFullError: the index is full (and ``skip_full_check`` is False), or no slot is
                left at all.
            InvalidOffsetError: the index is not empty and ``offset`` is below the last entry's.
            InvalidTimestampError: the index is not empty and ``timestamp`` is below the last
                entry's (Kafka's IllegalStateException; the caller passes a running maximum), or
                ``timestamp`` does not fit an int64.
            OffsetOverflowError: an entry is due and ``offset - base_offset`` is not in
                ``[0, 2^31 - 1]``.
        """
        self._ensure_open()
        n = self._entries
        if not skip_full_check and self.is_full:
            raise IndexFullError(
                f"attempt to append ({timestamp}, {offset}) to the full time index {self.path} "
                f"({n} entries, {self.length_bytes} bytes)"
            )
        last = self._last_entry
        if n != 0 and offset < last.offset:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to slot {n} of time index {self.path}, "
                f"below the last offset appended ({last.offset})"
            )
        if n != 0 and timestamp < last.timestamp:
            raise InvalidTimestampError(
                f"attempt to append timestamp {timestamp} to slot {n} of time index "
                f"{self.path}, below the last timestamp appended ({last.timestamp})"
            )
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise InvalidTimestampError(
                f"timestamp {timestamp} for offset {offset} does not fit the int64 field of "
                f"time index {self.path}"
            )
        if timestamp <= last.timestamp:
            return
        if n >= self._max_entries:
            raise IndexFullError(
                f"attempt to append ({timestamp}, {offset}) to time index {self.path}: no slot "
                f"left, not even the reserved one ({n} entries, {self.length_bytes} bytes)"
            )
        relative = self.relative_offset(offset)
        # Bytes first, count second: a concurrent lookup reads `entries` once.
        self._write_entry(n, _ENTRY.pack(timestamp, relative))
        self._entries = n + 1
        self._last_entry = TimestampOffset(timestamp, offset)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp ``<= target_timestamp`` (Kafka TimeIndex.lookup;
        docs/kafka-behaviours.md#index-lookups).

        Returns ``(-1, base_offset)`` when there is none: the scan then starts at the beginning
        of the segment. Runtime O(log entries).
        """
        found = self._largest_lower_bound(target_timestamp, _TIMESTAMP_COLUMN, self._parse)
        return TimestampOffset(NO_TIMESTAMP, self.base_offset) if found is None else found

    def entry(self, slot: int) -> TimestampOffset:
        """The entry in ``slot``.

        Raises:
            ValueError: ``slot`` is negative or ``>= entries``.
        """
        return self._read_slot(slot, self._parse)

    def entries_list(self) -> list[TimestampOffset]:
        """Every entry in slot order (for dumps and tests). Runtime O(entries)."""
        return self._read_all(self._parse)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is ``>= offset`` (Kafka OffsetIndex.truncateTo;
        docs/kafka-behaviours.md#truncation, on the offset column).

        Truncating to an offset above the last entry changes nothing. Kafka searches for the
        floor entry and keeps it unless its offset equals ``offset``; this takes the first entry
        with offset ``>= offset`` instead, which gives the same result when offsets strictly
        increase (as a segment writes them) and the documented one when two entries share an
        offset.
        """
        found = self._smallest_upper_bound(offset, _OFFSET_COLUMN, _slot_of)
        if found is not None:
            self._truncate_to_entries(found)

    def resize(self, new_size_bytes: int) -> bool:
        """As :meth:`Index.resize`; the in-memory last entry is re-read from the file."""
        changed = super().resize(new_size_bytes)
        if changed:
            self._last_entry = self._read_last_entry()
        return changed

    def sanity_check(self) -> None:
        """Kafka's checks (Kafka TimeIndex.sanityCheck; docs/kafka-behaviours.md#sanity-checks):
        timestamps not going back, last offset not below the base, whole entries only.

        Raises:
            CorruptIndexError: the index has entries and its last timestamp is below its first
                (typically zeros left by an untrimmed file), or its last offset is below the base
                offset; or the file length is not a multiple of 12.
        """
        self._ensure_open()
        last = self._last_entry
        first_timestamp = last_entry = None
        if self._entries != 0:
            first_timestamp = self._read_slot(0, _read_timestamp)
            last_entry = TimeIndexEntry(last.timestamp, last.offset - self.base_offset)
        # The rules are the records package's, shared with dump-log; the words are ours.
        for rule in time_index_sanity(self._length_bytes, first_timestamp, last_entry):
            if rule is SanityRule.LAST_TIMESTAMP_NOT_BELOW_FIRST:
                raise CorruptIndexError(
                    f"corrupt time index found: time index file {self.path} has "
                    f"{self._entries} entries but the last timestamp is {last.timestamp}, below "
                    f"the first timestamp {first_timestamp}"
                )
            if rule is SanityRule.LAST_OFFSET_NOT_BELOW_BASE:
                raise CorruptIndexError(
                    f"corrupt time index found: time index file {self.path} has "
                    f"{self._entries} entries but the last offset is {last.offset}, below the "
                    f"base offset {self.base_offset}"
                )
            super().sanity_check()  # WHOLE_ENTRIES: the partial entry, in Index's words

    def check(self) -> None:
        """Verify every entry (stricter than :meth:`sanity_check`; O(entries)).

        Raises:
            CorruptIndexError: an offset below the base offset, a timestamp that does not
                increase, an offset that goes down, or a partial entry.
        """
        super().sanity_check()
        previous: TimestampOffset | None = None
        for slot, current in enumerate(self.entries_list()):
            if current.offset < self.base_offset:
                raise CorruptIndexError(
                    f"time index file {self.path}: slot {slot} has offset {current.offset}, "
                    f"below the base offset {self.base_offset}"
                )
            if previous is not None and current.timestamp <= previous.timestamp:
                raise CorruptIndexError(
                    f"time index file {self.path}: slot {slot} has timestamp "
                    f"{current.timestamp}, not above the timestamp {previous.timestamp} of "
                    f"slot {slot - 1}"
                )
            if previous is not None and current.offset < previous.offset:
                raise CorruptIndexError(
                    f"time index file {self.path}: slot {slot} has offset {current.offset}, "
                    f"below the offset {previous.offset} of slot {slot - 1}"
                )
            previous = current

    # ------------------------------------------------------------------------------ private

    def _truncate_to_entries(self, entries: int) -> None:
        super()._truncate_to_entries(entries)
        self._last_entry = self._read_last_entry()

    def _read_last_entry(self) -> TimestampOffset:
        n = self._entries
        if n == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self._read_slot(n - 1, self._parse)

    def _parse(self, mm: mmap.mmap, slot: int) -> TimestampOffset:
        timestamp, relative = _ENTRY.unpack_from(mm, slot * _ENTRY_SIZE)
        return TimestampOffset(timestamp, self._base_offset + relative)


def _read_timestamp(mm: mmap.mmap, slot: int) -> int:
    # An mmap is a buffer, which entry_field's Buffer alias does not name.
    return TIME_INDEX_TIMESTAMP.read(mm, slot * _ENTRY_SIZE)  # type: ignore[arg-type]


def _slot_of(mm: mmap.mmap, slot: int) -> int:
    return slot
