"""A count of bytes the server holds for clients, against a limit: what a crowd may cost.

Intuition: a count of requests in flight does not bound memory when one request can hold
megabytes (1,024 fetch answers of 2 MiB on one Session stream held 2 GiB). A :class:`ByteBudget`
counts the bytes themselves: a caller reserves what it may hold *before* it holds it, and gives
it back when the bytes are gone. Who uses one, and what happens when it is full, is the user's
choice, documented there:

* server/rpc/session.py: the answers a Session stream holds, per stream (its reader waits: HTTP/2's
  flow control then holds the client back) and in total (a request beyond it is refused,
  RESOURCE_EXHAUSTED, retriable);
* server/rpc/service.py: the bytes compressed Produce requests may decompress to, all together
  (a request beyond it waits its turn; ``produce_decompressed_bytes_in_flight_max``).

A reservation larger than the whole budget is clamped to it, so that a single large request is
served alone rather than never.

Waiting is first come, first served: a large reservation at the head of the queue is not
overtaken by small ones (it would otherwise wait for ever behind a stream of them).

``peak_bytes`` is the most held since :meth:`ByteBudget.take_peak_bytes` last read it: the
server's maintenance pass reads it to see bursts that came and went between two passes, after
which it gives freed memory back to the kernel (server/allocator.py, ``TrimWatch``).

Invariants (:meth:`ByteBudget.check`): ``0 <= in_use_bytes``, and ``<= total_bytes`` but
through :meth:`ByteBudget.adjust` (an estimate that fell short); ``peak_bytes >=
in_use_bytes``; a waiter is queued only while the one before it could not be served.

Concurrency: event-loop only; :meth:`~ByteBudget.try_reserve` and
:meth:`~ByteBudget.release` are O(1) plus the waiters they wake.
"""

from __future__ import annotations

import asyncio
import collections

__all__ = ["ByteBudget"]


class ByteBudget:
    """Bytes held against ``total_bytes``, with a queue of reservations waiting for room.

    ``name`` is the setting that sets the total, for messages and logs.
    """

    def __init__(self, name: str, total_bytes: int) -> None:
        assert total_bytes >= 1, total_bytes
        self.name = name
        self.total_bytes = total_bytes
        self.in_use_bytes = 0
        self.peak_bytes = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @property
    def free_bytes(self) -> int:
        return self.total_bytes - self.in_use_bytes

    def clamp(self, size_bytes: int) -> int:
        """What a reservation of ``size_bytes`` takes: at most the whole budget."""
        assert size_bytes >= 0, size_bytes
        return min(size_bytes, self.total_bytes)

    def try_reserve(self, size_bytes: int) -> int | None:
        """Take :meth:`clamp` (``size_bytes``) now if it fits and nobody waits before it; the
        bytes taken (give them to :meth:`release`), or None."""
        size_bytes = self.clamp(size_bytes)
        if self._waiters or size_bytes > self.free_bytes:
            return None
        self._take(size_bytes)
        return size_bytes

    async def reserve(self, size_bytes: int) -> int:
        """Take :meth:`clamp` (``size_bytes``), waiting (first come, first served) until it
        fits; the bytes taken. A cancelled wait takes nothing."""
        taken = self.try_reserve(size_bytes)
        if taken is not None:
            return taken
        size_bytes = self.clamp(size_bytes)
        waiter = asyncio.get_running_loop().create_future()
        entry = (size_bytes, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release(size_bytes)  # granted as it was cancelled: give it back
            else:
                if entry in self._waiters:
                    self._waiters.remove(entry)
                self._wake()  # the one behind it may fit
            raise
        return size_bytes

    def release(self, size_bytes: int) -> None:
        """Give back ``size_bytes`` taken by a reservation; wakes the waiters that now fit."""
        assert 0 <= size_bytes <= self.in_use_bytes, (size_bytes, self.in_use_bytes)
        self.in_use_bytes -= size_bytes
        self._wake()

    def adjust(self, taken_bytes: int, size_bytes: int) -> int:
        """Count ``size_bytes`` instead of ``taken_bytes`` (a reservation made on an estimate,
        now that what it holds is known); returns ``size_bytes``. Growing past the total is
        allowed (what is held is held already): until it falls back, nothing else fits."""
        assert 0 <= taken_bytes <= self.in_use_bytes and size_bytes >= 0
        if size_bytes >= taken_bytes:
            self._take(size_bytes - taken_bytes)
        else:
            self.release(taken_bytes - size_bytes)
        return size_bytes

    def take_peak_bytes(self) -> int:
        """The most held since the last call (then the count starts again from now)."""
        peak, self.peak_bytes = self.peak_bytes, self.in_use_bytes
        return peak

    def _take(self, size_bytes: int) -> None:
        self.in_use_bytes += size_bytes
        if self.in_use_bytes > self.peak_bytes:
            self.peak_bytes = self.in_use_bytes

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters:
            size_bytes, waiter = waiters[0]
            if waiter.done():  # cancelled: its reserve() removes it
                waiters.popleft()
                continue
            if size_bytes > self.free_bytes:
                return
            waiters.popleft()
            self._take(size_bytes)
            waiter.set_result(None)

    def check(self) -> None:
        """Assert the invariants of the module docstring (for tests)."""
        assert self.in_use_bytes >= 0, self.in_use_bytes
        assert self.peak_bytes >= self.in_use_bytes, (self.peak_bytes, self.in_use_bytes)
        if self._waiters:
            head_bytes, head = self._waiters[0]
            assert head.done() or head_bytes > self.free_bytes, (head_bytes, self.free_bytes)
