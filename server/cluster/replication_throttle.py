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

The leader's side uses a second bucket at the same rate (Kafka's
``leader.replication.throttled.rate``, which ``kafka-reassign-partitions --throttle`` sets to
the same value): fetch_session.py leaves a partition whose follower is being added out of
the leader's answers while that bucket owes, and pays each answer's bytes into it.

Where it is applied on the follower (server/cluster/replica_roles.py, :meth:`ReplicaRoles._throttled_delay`,
called by the follower's fetcher, replica_fetcher.py): for a partition this server is being
added to (the assignment's ``adding``), each answer's record bytes are recorded, and the
partition stays out of the fetch session until the delay has passed. In-sync replicas and
replicas not being added are never throttled: the ISR, and so acks=all, is never slowed.

Concurrency: not thread-safe; event-loop only (one bucket, callers on the loop).
"""

from __future__ import annotations

__all__ = ["ReplicationThrottle"]


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
