"""The ordered set of a log's segments: base offset -> segment, Kafka's ``LogSegments``.

A partition log is a sequence of segments with increasing base offsets; the last one is the
*active* segment that takes appends. Finding the segment that holds an offset is a floor lookup on
the base offsets, so the segments live in a sorted map (``sortedcontainers.SortedDict``, a
B-tree-like sorted list: O(log n) lookups, fast in-order iteration).

Reads run in reader threads while the single writer rolls, truncates and deletes segments, so the
map is copy-on-write: a mutation builds a new ``SortedDict`` and publishes it with one reference
assignment. A reader that grabbed the map keeps a consistent snapshot; mutations are O(n) in the
number of segments, which is fine because they happen once per roll or retention pass.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import TYPE_CHECKING

from sortedcontainers import SortedDict

if TYPE_CHECKING:
    from .segment import Segment

__all__ = ["Segments"]


class Segments:
    """Sorted map of base offset -> :class:`~stratalog.server.storage.segment.Segment`.

    Invariants: keys are the segments' base offsets; ``add`` replaces a segment with an equal base
    offset (Kafka LogSegments; docs/kafka-behaviours.md#segment-map). The container does not open,
    close or delete segment files: that is the local log's job (``local_log.py``).

    Concurrency: one writer (the owning ``LocalLog``, under its ``PartitionLog``'s lock; the
    recovery loader before the log exists); any number of reader threads. Every
    read method works on one snapshot of the map taken at its start (copy-on-write), so readers
    never see a half-applied mutation. Iteration is over a snapshot too.
    """

    __slots__ = ("_lists", "_map", "_version")

    def __init__(self, segments: Iterator[Segment] | list[Segment] | None = None) -> None:
        self._map: SortedDict = SortedDict()
        self._version = 0
        # (map, its base offsets, its segments) as plain lists, for floor lookups by the C
        # bisect: a read's first step. Built on first use after each mutation; the map it was
        # built from is part of the tuple, so a reader never pairs lists with another map.
        self._lists: tuple[SortedDict, list[int], list[Segment]] | None = None
        if segments:
            self._map = SortedDict((segment.base_offset, segment) for segment in segments)

    def _publish(self, new_map: SortedDict) -> None:
        # The map first, then the version: a reader that reads the version and then the map
        # gets a map at least as new as that version (what caches keyed on it rely on).
        self._map = new_map
        self._version += 1

    @property
    def version(self) -> int:
        """Increases with every mutation: a cheap key for caches derived from the map."""
        return self._version

    # ---------------------------------------------------------------- mutation (writer only)

    def add(self, segment: Segment) -> Segment | None:
        """Insert ``segment``; returns the segment it replaced (same base offset) or None."""
        new_map = self._map.copy()
        previous = new_map.get(segment.base_offset)
        new_map[segment.base_offset] = segment
        self._publish(new_map)
        return previous

    def remove(self, base_offset: int) -> Segment | None:
        """Remove the segment at ``base_offset``; returns it, or None if there was none."""
        if base_offset not in self._map:
            return None
        new_map = self._map.copy()
        segment = new_map.pop(base_offset)
        self._publish(new_map)
        return segment

    def remove_many(self, base_offsets: list[int]) -> list[Segment]:
        """Remove several segments in one copy; returns those that were present."""
        new_map = self._map.copy()
        removed = [new_map.pop(base) for base in base_offsets if base in new_map]
        self._publish(new_map)
        return removed

    def replace(self, new_segment: Segment, old_base_offsets: list[int]) -> list[Segment]:
        """Remove the segments at ``old_base_offsets`` and add ``new_segment``, in one copy
        (a reader sees the old segments or the new one, never neither: the cleaner's swap).
        Returns the segments removed or replaced."""
        new_map = self._map.copy()
        removed = [new_map.pop(base) for base in old_base_offsets if base in new_map]
        previous = new_map.get(new_segment.base_offset)
        if previous is not None:
            removed.append(previous)
        new_map[new_segment.base_offset] = new_segment
        self._publish(new_map)
        return removed

    def clear(self) -> list[Segment]:
        """Remove every segment; returns them in base-offset order."""
        removed = list(self._map.values())
        self._publish(SortedDict())
        return removed

    # ---------------------------------------------------------------- lookups

    def __len__(self) -> int:
        return len(self._map)

    def __bool__(self) -> bool:
        return bool(self._map)

    def __iter__(self) -> Iterator[Segment]:
        return iter(list(self._map.values()))

    def __contains__(self, base_offset: object) -> bool:
        return base_offset in self._map

    def __repr__(self) -> str:
        return f"Segments({list(self._map.keys())})"

    def get(self, base_offset: int) -> Segment | None:
        return self._map.get(base_offset)

    def base_offsets(self) -> list[int]:
        return list(self._map.keys())

    @property
    def first(self) -> Segment | None:
        snapshot = self._map
        return snapshot.peekitem(0)[1] if snapshot else None

    @property
    def last(self) -> Segment | None:
        snapshot = self._map
        return snapshot.peekitem(-1)[1] if snapshot else None

    @property
    def active(self) -> Segment | None:
        """The active segment: the one with the largest base offset (None if empty)."""
        return self.last

    def floor_segment(self, offset: int) -> Segment | None:
        """The segment with the largest base offset <= ``offset``. O(log n).

        The first floor lookup after a mutation copies the map into two lists (O(n), as the
        mutation was); every other one is a bisection of a plain list.
        """
        snapshot = self._map
        lists = self._lists
        if lists is None or lists[0] is not snapshot:
            lists = (snapshot, list(snapshot.keys()), list(snapshot.values()))
            self._lists = lists
        index = bisect.bisect_right(lists[1], offset)
        return lists[2][index - 1] if index > 0 else None

    def lower_segment(self, offset: int) -> Segment | None:
        """The segment with the largest base offset < ``offset``. O(log n)."""
        snapshot = self._map
        index = snapshot.bisect_left(offset)
        return snapshot.peekitem(index - 1)[1] if index > 0 else None

    def higher_segment(self, offset: int) -> Segment | None:
        """The segment with the smallest base offset > ``offset``. O(log n)."""
        snapshot = self._map
        index = snapshot.bisect_right(offset)
        return snapshot.peekitem(index)[1] if index < len(snapshot) else None

    def higher_segments(self, offset: int) -> list[Segment]:
        """Every segment with base offset > ``offset``, in order."""
        snapshot = self._map
        index = snapshot.bisect_right(offset)
        return list(snapshot.values()[index:])

    def values(self, from_offset: int | None = None, to_offset: int | None = None) -> list[Segment]:
        """Segments that may hold offsets in ``[from_offset, to_offset)``, as Kafka's ``values``.

        With no bounds, every segment. Otherwise: ``from == to`` gives nothing; ``to < from`` is a
        programmer error (ValueError); else the segments from the floor segment of ``from`` (or
        the first segment when ``from`` is below it) up to those with base offset < ``to``.
        """
        snapshot = self._map
        if from_offset is None and to_offset is None:
            return list(snapshot.values())
        if from_offset is None:
            from_offset = snapshot.peekitem(0)[0] if snapshot else 0
        if to_offset is None:
            to_offset = 2**63 - 1
        if from_offset == to_offset:
            return []
        if to_offset < from_offset:
            raise ValueError(
                f"invalid segment range: to_offset {to_offset} is below from_offset {from_offset}"
            )
        start = snapshot.bisect_right(from_offset) - 1
        start = max(start, 0)
        stop = snapshot.bisect_left(to_offset)
        return list(snapshot.values()[start:stop]) if start < stop else []

    def non_active_from(self, from_offset: int) -> list[Segment]:
        """Segments from the one holding ``from_offset`` up to, excluding, the active segment."""
        snapshot = self._map
        if not snapshot:
            return []
        active_base = snapshot.peekitem(-1)[0]
        if from_offset > active_base:
            return []
        return self.values(from_offset, active_base)

    @property
    def size_bytes(self) -> int:
        """Total bytes of every segment's ``.log`` (a Python int: no overflow)."""
        return sum(segment.size_bytes for segment in list(self._map.values()))
