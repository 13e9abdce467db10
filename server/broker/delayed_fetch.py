"""A reader's wait for the next write to its partition: the long poll's and Subscribe's wake-up.

Kafka parks a fetch that found too little in its ``DelayedFetch`` purgatory
(``core/src/main/scala/kafka/server/DelayedFetch.scala``), and every append, high watermark
move or marker tries to complete the fetches parked on its partition. Here one
:class:`ReaderWakeup` per partition does that with an ``asyncio.Event`` that is set, then
replaced, by each write (:meth:`ReaderWakeup.notify`). A reader takes the current event
*before* it reads and waits on that one: a write between its read and its wait has set it
already, so no wake-up is ever lost, and nothing polls.

Every writer reaches it through the serving layer
(:meth:`stratalog.server.broker.ReplicaManager.complete_delayed`): client produce, transaction
markers, follower appends and high watermark moves (through the cluster's ``ReplicaEvents``),
cleaner swaps.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio

__all__ = ["ReaderWakeup"]


class ReaderWakeup:
    """The event the next write to one partition sets, and ``closed`` once the partition is
    gone (its waiters wake and look the partition up again). Event-loop only."""

    __slots__ = ("_signal", "closed")

    def __init__(self) -> None:
        self._signal = asyncio.Event()
        self.closed = False

    def signal(self) -> asyncio.Event:
        """The event the next write sets; take it *before* reading, then wait on it."""
        return self._signal

    def notify(self) -> None:
        """Wake everyone waiting for a write (or a marker) that happened."""
        signal, self._signal = self._signal, asyncio.Event()
        signal.set()

    def close(self) -> None:
        """Wake every waiter for good: the partition is gone."""
        self.closed = True
        self.notify()

    @staticmethod
    async def wait(signal: asyncio.Event, timeout_s: float | None) -> bool:
        """Wait until ``signal`` is set or ``timeout_s`` passed (None: no limit); True if set."""
        if signal.is_set():
            return True
        if timeout_s is None:
            await signal.wait()
            return True
        try:
            await asyncio.wait_for(signal.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
