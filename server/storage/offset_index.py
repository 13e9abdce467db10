"""The offset index (``.index``): sparse map from offsets to byte positions in a segment's ``.log``.

A segment appends an entry every ``index.interval.bytes`` of log. An entry says "the append that
starts at byte ``position`` of the ``.log`` ends at offset ``base_offset + relative_offset``". To
read offset ``o`` the segment takes the entry with the largest offset ``<= o`` and scans batch
headers forward from its position; an offset before the first entry scans from position 0.

Byte layout: entries of 8 bytes, big-endian, no header, no checksum (Kafka's ``OffsetIndex``)::

    offset size field
         0    4 relative_offset   int32, offset - base_offset, in [0, 2^31 - 1]
         4    4 position          int32, byte position of the append in the .log

    base offset 100, entry (offset 105, position 4096) -> 00000005 00001000

Entries are strictly increasing in offset (and, as written by a segment, in position). The layout
is defined once, in :mod:`stratalog.records.offset_index_file`, which ``dump-log`` reads it with.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import NamedTuple

from stratalog.records.entry_field import SanityRule
from stratalog.records.offset_index_file import (
    OFFSET_INDEX_ENTRY,
    OFFSET_INDEX_POSITION,
    OFFSET_INDEX_RELATIVE_OFFSET,
    offset_index_sanity,
)

from .errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from .index import INT32_MAX, Column, Index

__all__ = ["DEFAULT_MAX_INDEX_SIZE_BYTES", "OffsetIndex", "OffsetPosition"]

DEFAULT_MAX_INDEX_SIZE_BYTES = 10 * 1024 * 1024  # segment.index.bytes

_ENTRY = OFFSET_INDEX_ENTRY
_ENTRY_SIZE = OFFSET_INDEX_ENTRY.size
_OFFSET_COLUMN = Column(*OFFSET_INDEX_RELATIVE_OFFSET, relative=True)
_POSITION_COLUMN = Column(*OFFSET_INDEX_POSITION, relative=False)
# The single-field reads of the lookup path, bound once.
_unpack_relative_offset = OFFSET_INDEX_RELATIVE_OFFSET.fmt.unpack_from
_unpack_position = OFFSET_INDEX_POSITION.fmt.unpack_from
_POSITION_FIELD_OFFSET = OFFSET_INDEX_POSITION.field_offset


class OffsetPosition(NamedTuple):
    """An offset and the byte position in the ``.log`` where the batch holding it starts."""

    offset: int
    position: int


class OffsetIndex(Index):
    """The ``.index`` file of one segment: (offset, position) entries, strictly increasing.

    Holds what :class:`~stratalog.server.storage.index.Index` holds plus ``last_offset``, the
    offset of the last entry (``base_offset`` when empty), kept in memory.

    Invariants: entry offsets strictly increase and lie in ``[base_offset, base_offset +
    2^31 - 1]``; ``last_offset`` equals the last entry's offset. Full at ``entries ==
    max_entries``.

    Crash behaviour: as for every index: not checksummed; an untrimmed file reopens as full of
    ``(base_offset, 0)`` entries, which :meth:`sanity_check` does not catch (their offset equals
    the base offset) but :meth:`check` does; recovery rebuilds the file from the ``.log``.

    Concurrency: single writer (PartitionLog serialises :meth:`append`, :meth:`truncate_to`,
    resizes and close); :meth:`lookup`, :meth:`entry` and :meth:`fetch_upper_bound_offset` may run
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
        self._last_offset = self._read_last_offset()

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or ``base_offset`` if the index is empty."""
        return self._last_offset

    def append(self, offset: int, position: int) -> None:
        """Add the entry (``offset``, ``position``) after the last one.

        Runtime O(1).

        Raises:
            IndexFullError: every slot is used (the segment should have rolled).
            InvalidOffsetError: the index is not empty and ``offset <= last_offset``.
            OffsetOverflowError: ``offset - base_offset`` is not in ``[0, 2^31 - 1]``.
            ValueError: ``position`` is not in ``[0, 2^31 - 1]`` (a caller bug: a ``.log`` never
                grows past 2 GiB).
        """
        self._ensure_open()
        n = self._entries
        if n >= self._max_entries:
            raise IndexFullError(
                f"attempt to append offset {offset} to the full index {self.path} "
                f"({n} entries, {self.length_bytes} bytes)"
            )
        if n > 0 and offset <= self._last_offset:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to slot {n} of {self.path}, no larger "
                f"than the last offset appended ({self._last_offset})"
            )
        relative = self.relative_offset(offset)
        if not 0 <= position <= INT32_MAX:
            raise ValueError(
                f"position {position} of offset {offset} does not fit an index entry of "
                f"{self.path} (must be in [0, {INT32_MAX}])"
            )
        # Bytes first, count second: a concurrent lookup reads `entries` once and must only
        # ever see complete entries.
        self._write_entry(n, _ENTRY.pack(relative, position))
        self._entries = n + 1
        self._last_offset = offset

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset ``<= target_offset`` (Kafka OffsetIndex.lookup;
        docs/kafka-behaviours.md#index-lookups).

        Returns ``(base_offset, 0)`` if the index is empty or every entry is above the target:
        the scan then starts at the beginning of the segment. Runtime O(log entries).
        """
        found = self._largest_lower_bound(target_offset, _OFFSET_COLUMN, self._parse)
        return OffsetPosition(self.base_offset, 0) if found is None else found

    def lookup_position(self, target_offset: int) -> int:
        """``lookup(target_offset).position``, without building the entry (the read path's call).

        The position to scan the ``.log`` from for ``target_offset``: that of the entry with the
        largest offset ``<= target_offset``, or 0. Runtime O(log entries).
        """
        found = self._largest_lower_bound(target_offset, _OFFSET_COLUMN, _read_position)
        return 0 if found is None else found

    def lookup_floor_and_next(self, target_offset: int) -> tuple[int, int, int]:
        """The floor entry's offset and position (as :meth:`lookup`; ``(-1, 0)`` when there
        is none) and the position of the entry after it (-1 if none).

        The batch holding ``target_offset`` starts between the two positions when the next
        entry exists: a reader can guess where it is and how large. Runtime O(log entries).
        """
        found = self._largest_lower_bound(target_offset, _OFFSET_COLUMN, self._floor_and_next)
        if found is not None:
            return found
        try:  # below every entry (or none): the scan starts at 0, the first entry is next
            return -1, 0, self._read_slot(0, _read_position)
        except ValueError:
            return -1, 0, -1

    def lookup_by_position(self, target_position: int) -> OffsetPosition | None:
        """The entry with the largest position ``<= target_position``, or None (every entry is
        above it, or none). Entries point at batch starts, so a reader bounded at a byte
        position walks from here to find the last whole batch before it. Runtime
        O(log entries)."""
        return self._largest_lower_bound(target_position, _POSITION_COLUMN, self._parse)

    def entry(self, slot: int) -> OffsetPosition:
        """The entry in ``slot`` (Kafka OffsetIndex.entry; docs/kafka-behaviours.md#index-lookups).

        Raises:
            ValueError: ``slot`` is negative or ``>= entries``.
        """
        return self._read_slot(slot, self._parse)

    def entries_list(self) -> list[OffsetPosition]:
        """Every entry in slot order (for dumps and tests). Runtime O(entries)."""
        return self._read_all(self._parse)

    def fetch_upper_bound_offset(
        self, start_position: int, fetch_size: int
    ) -> OffsetPosition | None:
        """The entry with the smallest position ``>= start_position + fetch_size`` (Kafka
        OffsetIndex.fetchUpperBoundOffset; docs/kafka-behaviours.md#index-lookups).

        Its offset is certainly outside a fetch of ``fetch_size`` bytes from ``start_position``
        (though not generally the smallest such offset); ``None`` if no entry is that far. Used
        to bound the aborted-transaction lookup of a read_committed fetch.
        """
        return self._smallest_upper_bound(
            start_position + fetch_size, _POSITION_COLUMN, self._parse
        )

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is ``>= offset`` (Kafka OffsetIndex.truncateTo;
        docs/kafka-behaviours.md#truncation).

        Truncating to an offset above the last entry changes nothing. The file keeps its length.
        """
        found = self._largest_lower_bound(offset, _OFFSET_COLUMN, self._slot_and_offset)
        if found is None:
            new_entries = 0  # every entry is above the offset
        else:
            slot, slot_offset = found
            # An entry for exactly this offset goes too; otherwise keep the floor entry.
            new_entries = slot if slot_offset == offset else slot + 1
        self._truncate_to_entries(new_entries)

    def sanity_check(self) -> None:
        """Kafka's checks (Kafka OffsetIndex.sanityCheck; docs/kafka-behaviours.md#sanity-checks):
        last offset not below the base, whole entries only.

        Raises:
            CorruptIndexError: the index has entries and its last offset is below the base
                offset, or the file length is not a multiple of 8.
        """
        self._ensure_open()
        last_relative = self._last_offset - self.base_offset if self._entries else None
        # The rules are the records package's, shared with dump-log; the words are ours.
        for rule in offset_index_sanity(self._length_bytes, last_relative):
            if rule is SanityRule.LAST_OFFSET_NOT_BELOW_BASE:
                raise CorruptIndexError(
                    f"corrupt index found: index file {self.path} has {self._entries} entries "
                    f"but the last offset is {self._last_offset}, below the base offset "
                    f"{self.base_offset}"
                )
            super().sanity_check()  # WHOLE_ENTRIES: the partial entry, in Index's words

    def check(self) -> None:
        """Verify every entry (stricter than :meth:`sanity_check`; O(entries)).

        Raises:
            CorruptIndexError: a relative offset outside ``[0, 2^31 - 1]``, an offset that does
                not increase, a position that goes down or is negative, or a partial entry.
        """
        super().sanity_check()
        previous: OffsetPosition | None = None
        for slot, current in enumerate(self.entries_list()):
            relative = current.offset - self.base_offset
            if relative < 0:
                raise CorruptIndexError(
                    f"index file {self.path}: slot {slot} has offset {current.offset}, below "
                    f"the base offset {self.base_offset}"
                )
            if current.position < 0:
                raise CorruptIndexError(
                    f"index file {self.path}: slot {slot} has negative position {current.position}"
                )
            if previous is not None and current.offset <= previous.offset:
                raise CorruptIndexError(
                    f"index file {self.path}: slot {slot} has offset {current.offset}, not "
                    f"above the offset {previous.offset} of slot {slot - 1}"
                )
            if previous is not None and current.position < previous.position:
                raise CorruptIndexError(
                    f"index file {self.path}: slot {slot} has position {current.position}, "
                    f"below the position {previous.position} of slot {slot - 1}"
                )
            previous = current

    # ------------------------------------------------------------------------------ private

    def _truncate_to_entries(self, entries: int) -> None:
        super()._truncate_to_entries(entries)
        self._last_offset = self._read_last_offset()

    def _read_last_offset(self) -> int:
        n = self._entries
        if n == 0:
            return self.base_offset
        return self._read_slot(n - 1, self._read_offset)

    def _read_offset(self, mm: mmap.mmap, slot: int) -> int:
        return self._base_offset + _unpack_relative_offset(mm, slot * _ENTRY_SIZE)[0]

    def _slot_and_offset(self, mm: mmap.mmap, slot: int) -> tuple[int, int]:
        return slot, self._read_offset(mm, slot)

    def _floor_and_next(self, mm: mmap.mmap, slot: int) -> tuple[int, int, int]:
        # Under the remap lock (a parser): slots below `entries` are whole and mapped.
        relative, position = _ENTRY.unpack_from(mm, slot * _ENTRY_SIZE)
        following = -1
        if slot + 1 < self._entries:
            following = _read_position(mm, slot + 1)
        return self._base_offset + relative, position, following

    def _parse(self, mm: mmap.mmap, slot: int) -> OffsetPosition:
        relative, position = _ENTRY.unpack_from(mm, slot * _ENTRY_SIZE)
        return OffsetPosition(self._base_offset + relative, position)


def _read_position(mm: mmap.mmap, slot: int) -> int:
    return _unpack_position(mm, slot * _ENTRY_SIZE + _POSITION_FIELD_OFFSET)[0]
