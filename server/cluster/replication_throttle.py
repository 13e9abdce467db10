"""The replication throttle for reassignment traffic: a token bucket that spaces a follower's
fetches of the partitions it is being *added* to, so that a new replica catching up does not
take the bandwidth the producers and the in-sync followers need (Kafka's
``follower.replication.throttled.rate`` with ``follower.replication.throttled.replicas``, the
quota ``kafka-reassign-partitions --throttle`` sets, applied in
``core/src/main/scala/kafka/server/ReplicationQuotaManager.scala``).

Sans-IO: the caller passes the clock and waits itself. The bucket holds at most one second of
tokens (``rate_bytes_per_s`` bytes: the burst); each fetch answer takes its size from it, and
may take it below zero (an answer is never split: a 1 MiB answer at 100 KiB/s is taken whole,
then the debt is paid by waiting). The wait before the next fetch is the time the bucket needs
to be back at zero::

    tokens(t) = min(rate, tokens(t0) + rate * (t - t0))       refilled, capped at one second
    record(n) : tokens -= n                                    may go below zero
    delay_s   = max(0, -tokens / rate)                         until the debt is paid

So over any long stretch the bytes fetched are at most ``rate * seconds + rate`` (the burst)
plus one answer. A rate of 0 turns the throttle off: every delay is 0. One bucket per server
(the follower's): every partition it is being added to shares the rate, as Kafka's quota is
per broker.

Where it is applied (server/cluster/replica_roles.py, :meth:`ReplicaRoles._peer`): the
follower's fetcher asks for its leader's peer before each fetch; for a partition this server
is being added to (the assignment's ``adding``), the peer is wrapped by
:class:`ThrottledPeer`, which records each answer's record bytes and waits out the delay
before it returns the answer. In-sync replicas and replicas not being added are never
throttled: the ISR, and so acks=all, is never slowed.

Concurrency: not thread-safe; event-loop only (one bucket, callers on the loop).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stratalog.v1 import replication_pb2

    from .peer_channels import ReplicationPeer

__all__ = ["ReplicationThrottle", "ThrottledPeer"]


class ReplicationThrottle:
    """A token bucket of ``rate_bytes_per_s`` (0: off) starting full at ``now_s``.

    Invariant: ``tokens <= rate`` (at most one second of burst)."""

    def __init__(self, rate_bytes_per_s: int, now_s: float) -> None:
        assert rate_bytes_per_s >= 0, rate_bytes_per_s
        self.rate_bytes_per_s = rate_bytes_per_s
        self.tokens = float(rate_bytes_per_s)
        self._updated_s = now_s

    @property
    def enabled(self) -> bool:
        return self.rate_bytes_per_s > 0

    def _refill(self, now_s: float) -> None:
        elapsed = max(0.0, now_s - self._updated_s)  # a clock that went back refills nothing
        self.tokens = min(float(self.rate_bytes_per_s),
                          self.tokens + elapsed * self.rate_bytes_per_s)
        self._updated_s = max(self._updated_s, now_s)

    def record(self, size_bytes: int, now_s: float) -> None:
        """``size_bytes`` were fetched at ``now_s``. O(1)."""
        if not self.enabled:
            return
        self._refill(now_s)
        self.tokens -= size_bytes

    def delay_s(self, now_s: float) -> float:
        """How long to wait at ``now_s`` before the next throttled fetch (0: none). O(1)."""
        if not self.enabled:
            return 0.0
        self._refill(now_s)
        return max(0.0, -self.tokens / self.rate_bytes_per_s)

    def check(self) -> None:
        """Assert the invariant (tests call it after every step)."""
        assert self.tokens <= self.rate_bytes_per_s, (self.tokens, self.rate_bytes_per_s)


class ThrottledPeer:
    """A leader's peer whose fetch answers are paid for from ``throttle`` (module docstring):
    the answer is returned once the bucket's debt is paid, so the fetcher's next round waits."""

    __slots__ = ("_peer", "_throttle")

    def __init__(self, peer: ReplicationPeer, throttle: ReplicationThrottle) -> None:
        self._peer = peer
        self._throttle = throttle

    async def replica_fetch(self, request: replication_pb2.ReplicaFetchRequest, timeout_s: float
                            ) -> replication_pb2.ReplicaFetchResponse:
        response = await self._peer.replica_fetch(request, timeout_s)
        self._throttle.record(len(response.records), time.monotonic())
        delay = self._throttle.delay_s(time.monotonic())
        if delay > 0:
            await asyncio.sleep(delay)
        return response
