"""Where a Produce's work runs: inline on the event loop, or in the thread pool.

A Produce does two pieces of CPU work the event loop could do itself: encoding a records-form
request into a batch, and the append (validation, a page-cache write). Inline, each holds the
loop, and a request that arrives meanwhile waits. In the thread pool, each costs the hop there
and back (thread wake-ups and GIL hand-offs), which is more CPU than a page-cache write of a
MiB. So the rule trades the two (docs/server.md, "Where appends run"; figures in
docs/performance.md)::

    append of size_bytes              where it is tried
    client batches, any compressed    the thread pool, whatever their size
    < append_in_executor_min_bytes    inline
    < append_inline_max_bytes         inline while no read was served in the last
                                      READS_RECENT_S, else the thread pool
    otherwise                         the thread pool

    records-form Produce of n records in a request of b bytes: encoded inline below
                                      ENCODE_IN_EXECUTOR_MIN_RECORDS records and
                                      append_inline_max_bytes bytes, in the thread pool
                                      otherwise; its append is sized by b (see below)

Compressed client batches always leave the loop because their size says nothing of their cost:
validation decompresses every one of them, and a few KiB of zstd can hold 64 MiB of zeros (one
1 MiB request of such batches held the loop for 25 s before produce_decompressed_bytes_max bounded
it). In the pool, the loop keeps answering other clients while they are decompressed (zstd, zlib,
lz4 and snappy release the GIL while they work). A batch the server encoded from a records-form
request decompresses to about the request's size, which is what its append is judged by.

"Tried" inline, because only storage knows whether an append would do more than write: an
inline append goes through ``PartitionLog.try_append_without_blocking``, which gives the append
back undone when it would roll, fsync or wait for the log's lock (maintenance holds it while it
renames segments), and the servicer finishes it in the thread pool. The placement judges the
cost of the work; storage guards the loop against blocking.

This module owns the two settings it reads and the one piece of state the rule needs: when a
read was last served.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from stratalog.records.batch import Compression, iter_batch_headers
from stratalog.records.errors import RecordError

if TYPE_CHECKING:
    from stratalog.server.settings import Settings

__all__ = ["AppendPlacement", "holds_compressed_batches"]


def holds_compressed_batches(record_batches: bytes | memoryview) -> bool:
    """Whether a batch of ``record_batches`` (client batches laid back to back) names a codec.

    Reads only the 61-byte headers, up to the first compressed one: O(batches). Stops at
    bytes that are not a well-framed batch (validation refuses them before it decompresses
    anything past them), and then says False.
    """
    try:
        for header in iter_batch_headers(record_batches):
            if header.compression != Compression.NONE:
                return True
    except RecordError:
        pass
    return False


class AppendPlacement:
    """The placement rule for one servicer, and its "reads recently served" state.

    Holds ``append_in_executor_min_bytes`` and ``append_inline_max_bytes`` from the settings,
    the clock (``time.monotonic`` unless given: seconds, only differences matter) and the clock
    reading of the last read served. Invariant: a decision depends only on its argument, those
    settings and the time since the last :meth:`read_served`.

    Concurrency: event-loop only, like the servicer that owns it; no locks.
    """

    #: A read served this recently means readers are active: appends between
    #: ``append_in_executor_min_bytes`` and ``append_inline_max_bytes`` then leave the loop to
    #: them.
    READS_RECENT_S = 0.1
    #: Records-form Produce requests with this many records are encoded in the thread pool:
    #: ~1 µs a record, and compression on top; a request of a million small records
    #: (``max_request_bytes`` allows it) would hold the loop for seconds.
    ENCODE_IN_EXECUTOR_MIN_RECORDS = 1000

    __slots__ = ("_clock", "_in_executor_min_bytes", "_inline_max_bytes", "_last_read_at")

    def __init__(
        self, settings: Settings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._in_executor_min_bytes = settings.append_in_executor_min_bytes
        self._inline_max_bytes = settings.append_inline_max_bytes
        self._clock = clock
        self._last_read_at = -float("inf")  # no read served yet

    def read_served(self) -> None:
        """Note that a read was served now (a fetch, a timestamp lookup, ListOffsets, a
        Subscribe message)."""
        self._last_read_at = self._clock()

    @property
    def reads_recent(self) -> bool:
        """Whether a read was served in the last :attr:`READS_RECENT_S`."""
        return self._clock() - self._last_read_at < self.READS_RECENT_S

    def tries_append_inline(self, size_bytes: int, *, compressed: bool = False) -> bool:
        """Whether an append of ``size_bytes`` is tried on the event loop (True) or goes to
        the thread pool (False); see the module's table. ``compressed``: client batches of
        which at least one is compressed (:func:`holds_compressed_batches`)."""
        if compressed:
            return False
        if size_bytes < self._in_executor_min_bytes:
            return True
        if size_bytes >= self._inline_max_bytes:
            return False
        return not self.reads_recent

    def encodes_inline(self, record_count: int, request_bytes: int) -> bool:
        """Whether a records-form Produce of ``record_count`` records in a request of
        ``request_bytes`` is encoded on the loop: few records (the per-record cost) and few
        bytes (compression's cost)."""
        return (
            record_count < self.ENCODE_IN_EXECUTOR_MIN_RECORDS
            and request_bytes < self._inline_max_bytes
        )
