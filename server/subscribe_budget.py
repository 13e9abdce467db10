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
messages, and none waits for budget another holds). The memory held for streams is therefore at
most::

    2 x (subscribe_buffer_bytes_total + streams x one batch)      (serialized bytes + gRPC's copy)

plus the idle cost of each stream (gRPC's call state and the handler's task: ~40 KiB, measured
in docs/server.md). A stream waiting for appends holds no lease.

Invariants (:meth:`SubscribeBudget.check`): ``in_use_bytes`` is the sum of the open leases'
sizes, never negative; a lease's size is what its stream holds or may read.

Concurrency: event-loop only.
"""

from __future__ import annotations

__all__ = ["MESSAGE_COPIES_HELD", "Lease", "SubscribeBudget"]

#: Copies of a message in flight that live while gRPC's flow control waits: the serialized
#: bytes the stream wrote, and gRPC core's copy of them.
MESSAGE_COPIES_HELD = 2


class Lease:
    """One stream's share of the budget for one message: ``max_bytes`` to read with, then the
    message's real size once built. Released once; later releases do nothing."""

    __slots__ = ("_budget", "max_bytes", "size_bytes")

    def __init__(self, budget: SubscribeBudget, max_bytes: int) -> None:
        self._budget: SubscribeBudget | None = budget
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
        self.size_bytes = size_bytes

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget.in_use_bytes -= self.size_bytes
            budget.leases -= 1


class SubscribeBudget:
    """Bytes of Subscribe messages in flight, all streams together, against ``total_bytes``.

    Holds the two limits, ``in_use_bytes`` and the number of open leases. Event-loop only;
    every method is O(1).
    """

    def __init__(self, total_bytes: int, message_bytes_max: int) -> None:
        assert total_bytes >= 0 and message_bytes_max >= 1
        self.total_bytes = total_bytes
        self.message_bytes_max = message_bytes_max
        self.in_use_bytes = 0
        self.leases = 0

    @property
    def free_bytes(self) -> int:
        """What is left; negative while streams hold batches larger than their leases."""
        return self.total_bytes - self.in_use_bytes

    def lease(self, wanted_bytes: int) -> Lease:
        """A lease of ``min(wanted_bytes, subscribe_buffer_bytes, what is free)`` bytes; of 0
        (one batch) when nothing is free. Never waits."""
        max_bytes = min(wanted_bytes, self.message_bytes_max, max(self.free_bytes, 0))
        self.in_use_bytes += max_bytes
        self.leases += 1
        return Lease(self, max_bytes)

    def check(self) -> None:
        """Assert the invariants of the module docstring (for tests)."""
        assert self.in_use_bytes >= 0, self.in_use_bytes
        assert self.leases >= 0, self.leases
        assert self.leases or not self.in_use_bytes, (self.leases, self.in_use_bytes)
