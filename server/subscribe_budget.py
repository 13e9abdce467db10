"""The server-wide budget of Subscribe messages in flight: what stalled subscribers may cost.

Intuition: a Subscribe stream reads a message, hands it to gRPC and waits until HTTP/2's flow
control took it (``await context.write``); only then does it read the next. A client that stops
reading stops its stream there, and the server holds that one message until the client reads
again or goes away. With 1 MiB messages that was cheap for one stream and 4 GiB for a thousand
(each message lived four times over: the batches read, the protobuf message, its serialized
bytes and gRPC's copy). The servicer now serializes a message itself and drops everything else
before the write, so a stream holds the serialized bytes and gRPC's copy of them: twice the
message. And this budget bounds the messages themselves, across all streams::

    subscribe_buffer_bytes          the largest message one stream reads (per stream)
    subscribe_buffer_bytes_total    the bytes of all messages read and not yet taken by gRPC's
                                    flow control, all streams together

A stream about to read takes a :class:`Lease` of ``min(wanted, what is free)``; with nothing
free it reads one batch only (batches are never split). Once the message is built the lease is
set to its real size (:meth:`Lease.hold`), and released when gRPC took it or the stream ended.
So while the budget lasts every stream reads full messages; when stalled streams hold it all,
the others go on one batch per message (slower, never stopped: no client can starve another of
messages, and none waits for budget another holds).

That alone grew with the streams (issue 24, finding 10: 1,000 stalled streams on 960 KiB batches,
one batch each, ~2 GiB), so each connection has a share too::

    subscribe_buffer_bytes_per_connection   the bytes of the messages one HTTP/2 connection's
                                            streams hold, all together

A stream whose connection's streams hold their share reads nothing: it waits until one of them
gives some back (:meth:`SubscribeBudget.room`), holding no message; if that takes longer than
``subscribe_stall_ms_max`` the servicer ends it with RESOURCE_EXHAUSTED (RESOURCE_LIMIT_EXCEEDED,
``limit`` subscribe_buffer_bytes_per_connection; retriable), as Redis's
``client-output-buffer-limit`` and NATS's slow-consumer rule cut a client off at a bound. Why the
waiting streams and not the stalled ones: gRPC's asyncio server cannot reset a stream, and a
status sent after a message that waits for the client's flow control waits behind it, so gRPC
keeps an ended stream's message until its client reads or disconnects (measured: ending 215 of
250 stalled streams gave back nothing). A stream that holds nothing in gRPC ends at once, and
one whose connection is stalled is never handed a message gRPC would keep. Other connections
are not held back: a reader on its own connection keeps receiving.

The memory held for streams is therefore at most::

    2 x min(subscribe_buffer_bytes_total + streams x one batch,
            connections x (subscribe_buffer_bytes_per_connection + one batch))

(serialized bytes + gRPC's copy; one batch more per stream that reads at that moment) plus the
idle cost of each stream (gRPC's call state and the handler's task: ~40 KiB, measured in
docs/server.md). A stream waiting for appends, or for room, holds no lease.

Invariants (:meth:`SubscribeBudget.check`): ``in_use_bytes`` is the sum of the open leases'
sizes, never negative; a lease's size is what its stream holds or may read; each connection's
share counts the sizes and the number of its open leases, and a connection is known only while
it has one.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import sys

__all__ = ["MESSAGE_COPIES_HELD", "Lease", "SubscribeBudget"]

#: Copies of a message in flight that live while gRPC's flow control waits: the serialized
#: bytes the stream wrote, and gRPC core's copy of them.
MESSAGE_COPIES_HELD = 2


class Lease:
    """One stream's share of the budget for one message: ``max_bytes`` to read with, then the
    message's real size once built. Released once; later releases do nothing."""

    __slots__ = ("_budget", "_share", "max_bytes", "size_bytes")

    def __init__(self, budget: SubscribeBudget, max_bytes: int, share: _Share) -> None:
        self._budget: SubscribeBudget | None = budget
        self._share = share
        #: What the stream may read: 0 means one batch, whatever its size.
        self.max_bytes = max_bytes
        #: What the lease counts in the budget now.
        self.size_bytes = max_bytes

    def hold(self, size_bytes: int) -> None:
        """Count ``size_bytes`` (the message built, possibly more than ``max_bytes``: one batch
        larger than the lease is sent whole) instead of what was leased."""
        assert size_bytes >= 0
        budget = self._budget
        assert budget is not None, "hold after release"
        budget.in_use_bytes += size_bytes - self.size_bytes
        budget.peak_bytes = max(budget.peak_bytes, budget.in_use_bytes)
        self._share.held_bytes += size_bytes - self.size_bytes
        self.size_bytes = size_bytes

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget.in_use_bytes -= self.size_bytes
            budget.leases -= 1
            budget._give_back(self._share, self.size_bytes)


class _Share:
    """One connection's part: the bytes and the number of its open leases, and the future its
    waiting streams wait on (resolved when a lease of the connection is released)."""

    __slots__ = ("connection", "held_bytes", "leases", "room")

    def __init__(self, connection: str) -> None:
        self.connection = connection
        self.held_bytes = 0
        self.leases = 0
        self.room: asyncio.Future[None] | None = None


class SubscribeBudget:
    """Bytes of Subscribe messages in flight, all streams together, against ``total_bytes``.

    Holds the two limits, ``in_use_bytes`` and the number of open leases. Event-loop only;
    every method is O(1).
    """

    def __init__(
        self,
        total_bytes: int,
        message_bytes_max: int,
        connection_bytes_max: int | None = None,
        stall_ms_max: int = 30_000,
    ) -> None:
        """``connection_bytes_max`` None: no share per connection."""
        assert total_bytes >= 0 and message_bytes_max >= 1 and stall_ms_max >= 1
        self.total_bytes = total_bytes
        self.message_bytes_max = message_bytes_max
        self.connection_bytes_max = (
            connection_bytes_max if connection_bytes_max is not None else sys.maxsize
        )
        assert self.connection_bytes_max >= 1
        self.stall_ms_max = stall_ms_max
        self.in_use_bytes = 0
        #: The most in use since the last :meth:`take_peak_bytes`.
        self.peak_bytes = 0
        self.leases = 0
        self._shares: dict[str, _Share] = {}

    @property
    def free_bytes(self) -> int:
        """What is left; negative while streams hold batches larger than their leases."""
        return self.total_bytes - self.in_use_bytes

    def lease(self, wanted_bytes: int, connection: str = "") -> Lease | None:
        """A lease of ``min(wanted_bytes, subscribe_buffer_bytes, what is free, what is left
        of the connection's share)`` bytes; of 0 (one batch) when nothing is free; None when
        the connection's streams hold its share (wait for :meth:`room`). Never waits."""
        share = self._shares.get(connection)
        if share is None:
            share = self._shares[connection] = _Share(connection)
        share_left = self.connection_bytes_max - share.held_bytes
        if share_left <= 0:
            if not share.leases:
                del self._shares[connection]
            return None
        max_bytes = min(wanted_bytes, self.message_bytes_max, max(self.free_bytes, 0),
                        share_left)
        self.in_use_bytes += max_bytes
        self.peak_bytes = max(self.peak_bytes, self.in_use_bytes)
        self.leases += 1
        share.held_bytes += max_bytes
        share.leases += 1
        return Lease(self, max_bytes, share)

    def take_peak_bytes(self) -> int:
        """The most bytes in use at once since the last call, and start over from what is in
        use now (streams that came and went between two calls count)."""
        peak, self.peak_bytes = self.peak_bytes, self.in_use_bytes
        return peak

    def room(self, connection: str) -> asyncio.Future[None]:
        """A future resolved once a lease of ``connection`` is given back (done at once if it
        holds none). Shared by the connection's waiting streams: do not cancel it (shield)."""
        loop = asyncio.get_running_loop()
        share = self._shares.get(connection)
        if share is None:
            done = loop.create_future()
            done.set_result(None)
            return done
        if share.room is None or share.room.done():
            share.room = loop.create_future()
        return share.room

    def _give_back(self, share: _Share, size_bytes: int) -> None:
        share.held_bytes -= size_bytes
        share.leases -= 1
        room, share.room = share.room, None
        if room is not None and not room.done():
            room.set_result(None)
        if not share.leases:
            del self._shares[share.connection]

    def check(self) -> None:
        """Assert the invariants of the module docstring (for tests)."""
        assert self.in_use_bytes >= 0, self.in_use_bytes
        assert self.peak_bytes >= self.in_use_bytes, (self.peak_bytes, self.in_use_bytes)
        assert self.leases >= 0, self.leases
        assert self.leases or not self.in_use_bytes, (self.leases, self.in_use_bytes)
        assert sum(share.leases for share in self._shares.values()) == self.leases
        assert sum(share.held_bytes for share in self._shares.values()) == self.in_use_bytes
        assert all(share.leases > 0 for share in self._shares.values())
