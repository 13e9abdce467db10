"""The inactive segments whose files are open: a bounded cache that closes the least used.

Every segment holds descriptors while its files are open: its ``.log``, each mapped index (the
file and its map: Python's ``mmap`` keeps a duplicate of the descriptor) and a ``.txnindex``,
up to :data:`DESCRIPTORS_PER_SEGMENT`. Kafka keeps every segment of every partition open and
asks operators to raise ``ulimit -n``; with small segments that is thousands of descriptors per
partition, and a process that runs out of them cannot even restart (every file it opens at
load is one more). Here only the *active* segment of each partition always stays open (it takes
every append); the files of the others are opened on use and kept open in this cache, at most
``capacity`` segments, and the cache closes the least recently used when a segment beyond that
is opened (the table cache of LevelDB and RocksDB's ``max_open_files`` do the same for their
files)::

    opened or used       evictable (the ring)                          closed
    ─────────────▶  [ s7  s3  s9  s1 ... ]  ──(over capacity: the hand)──▶  files closed, the
                      ▲ referenced bit set on use                          Segment object kept;
                      └── second chance: a referenced one is skipped once   reopened on next use

The order is CLOCK's rather than a strict LRU: a use of a segment sets a flag on the segment (one
attribute store on the read path, no lock), and the hand that looks for a segment to close gives
each flagged one a second chance. A strict LRU would take a lock and move an entry on every read.

Closing is the segment's business (:meth:`Segment.try_close_files`): it refuses while a reader
or writer holds the segment (a reference count of users: no file is ever closed under a read),
and the hand goes on to the next one. A segment in use when the hand passes stays in the cache
beyond its capacity until the next segment opened (the one just reopened for a read is in use
while it is added): the excess is bounded by the threads reading at once.

Crash behaviour: nothing of its own; a segment's files closed here hold no unwritten state
(closing unmaps an index, whose pages stay in the page cache, and closes descriptors; an fsync
of a reopened descriptor writes what an earlier one left dirty).

Concurrency: thread-safe; one lock guards the ring. The cache takes a segment's own lock only
with ``blocking=False`` and a segment never calls the cache while holding its own lock, so the
two cannot deadlock.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

__all__ = ["DEFAULT_OPEN_SEGMENTS_MAX", "DESCRIPTORS_PER_SEGMENT", "Evictable", "OpenSegments"]

log = logging.getLogger(__name__)

#: Descriptors one segment holds with every file open: the ``.log``, the ``.index`` and the
#: ``.timeindex`` with their maps (Python's ``mmap`` duplicates the descriptor it maps), and the
#: ``.txnindex``.
DESCRIPTORS_PER_SEGMENT = 6

#: The default ``log.open.segments.max``: inactive segments whose files stay open.
DEFAULT_OPEN_SEGMENTS_MAX = 1000


class Evictable(Protocol):
    """What the cache needs of a segment (:class:`~stratalog.server.storage.segment.Segment`)."""

    #: Set by every use of the segment, cleared by the cache's hand (CLOCK's reference bit).
    referenced: bool

    def try_close_files(self) -> bool:
        """Close the files unless the segment is in use; True if they are closed now."""
        ...


class OpenSegments:
    """The evictable segments whose files are open, at most ``capacity`` of them (while none
    is in use beyond it).

    Holds the ring (an insertion-ordered dict used as a queue: the hand takes from the front,
    second chances go to the back), the capacity, and counts for the tests and the logs.

    Invariants: a segment is in the ring at most once; a segment in the ring has (or had, until
    it closed them itself) its files open; after :meth:`add` returns, the ring holds at most
    ``capacity`` segments unless the others were all in use.
    """

    def __init__(self, capacity: int = DEFAULT_OPEN_SEGMENTS_MAX) -> None:
        """Raises ValueError: ``capacity`` negative."""
        if capacity < 0:
            raise ValueError(f"the open segment capacity must not be negative, got {capacity}")
        self._capacity = capacity
        self._ring: dict[Evictable, None] = {}
        self._lock = threading.Lock()
        self.closed_count = 0  # segments whose files this cache closed, since it was made

    @property
    def capacity(self) -> int:
        """Most evictable segments kept open (``log.open.segments.max``, or less when the
        descriptor budget leaves less)."""
        return self._capacity

    def set_capacity(self, capacity: int) -> None:
        """Change the capacity; a lower one closes segments at once (those not in use)."""
        if capacity < 0:
            raise ValueError(f"the open segment capacity must not be negative, got {capacity}")
        with self._lock:
            self._capacity = capacity
            self._evict_locked()

    def __len__(self) -> int:
        return len(self._ring)

    def __contains__(self, segment: object) -> bool:
        return segment in self._ring

    def add(self, segment: Evictable) -> None:
        """``segment`` has its files open and may be closed: keep it, closing others (or it)
        if that makes more than ``capacity``. O(1) amortised: each look of the hand either
        closes a segment or clears a reference bit."""
        with self._lock:
            segment.referenced = True
            self._ring[segment] = None
            if len(self._ring) > self._capacity:
                self._evict_locked()

    def remove(self, segment: Evictable) -> None:
        """Forget ``segment`` (it became active, was closed or deleted); absent is fine."""
        with self._lock:
            self._ring.pop(segment, None)

    def _evict_locked(self) -> None:
        """CLOCK's hand: from the front, close unreferenced segments not in use until the ring
        fits; referenced ones lose their bit and go to the back. Two rounds at most: after one,
        every bit is clear, so a second round skips only segments in use."""
        ring = self._ring
        looks = 2 * len(ring)
        while len(ring) > self._capacity and looks > 0:
            looks -= 1
            segment = next(iter(ring))
            del ring[segment]
            if segment.referenced:
                segment.referenced = False
                ring[segment] = None
            elif segment.try_close_files():
                self.closed_count += 1
            else:
                ring[segment] = None  # in use: try the others first
        if len(ring) > self._capacity:
            log.debug("%d open segments, above the capacity of %d: the rest are in use",
                      len(ring), self._capacity)

    def __repr__(self) -> str:
        return f"OpenSegments({len(self._ring)} of {self._capacity})"
