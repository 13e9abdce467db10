"""The etcd client and this server's lease, kept alive: etcd's ``concurrency.Session``.

One lease per server process, granted at start with a TTL of ``cluster_session_timeout_ms``
(whole seconds, rounded up: etcd's lease TTLs are seconds). Everything the server writes for
as long as it lives (its broker registration, the controller key while it is controller) is
put under this lease, so that etcd deletes it all when the server stops renewing it: killed,
frozen, or cut off from etcd for a whole TTL.

Keep-alive: a task renews the lease every TTL/3. A renewal that etcd answers with TTL 0 means
the lease expired (the server was frozen or cut off too long): its keys are gone. The session
then grants a new lease and calls the ``on_new_lease`` callbacks (membership registers again,
the election campaigns again). A renewal that fails (etcd down) is retried at the next tick;
the data path never waits for etcd.

:meth:`held` says whether the lease can still be alive as far as this server knows: the last
renewal etcd confirmed was less than a TTL ago, measured on this server's monotonic clock from
*before* the renewal was sent (so it errs on the side of "expired"). A controller that is no
longer sure of its lease stops acting as one (controller.py).

:meth:`may_lead` is what a partition leader asks (partition.py): the lease is held, *or* etcd
itself is not answering — the last renewal attempt failed to reach it and was sent less than two
renewal intervals (plus a call's deadline) ago, so this process is running, not thawing from a
freeze. While etcd answers nobody, no controller can elect another leader (every election is an
etcd transaction), so the current leaders keep serving (the issue's "etcd stopped" fault; Kafka's
brokers keep their leaderships while the metadata quorum is away). A server that was *frozen*
past its TTL finds, when it thaws, a last confirmed renewal older than a TTL and no recent failed
attempt: it refuses as leader until a renewal answers — which says the lease expired, so a new
one is granted and the replica manager re-reads who leads. A server cut off from etcd alone
(a network partition) keeps leading as ZooKeeper-era Kafka's leaders did until they learnt of
the new leader: acks=1 writes it takes meanwhile are truncated later, and acks=all writes are
never acknowledged (its followers left it, and its ISR shrink, an etcd write, cannot happen).

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable

import aetcd

from .endpoints import Endpoint
from .errors import CoordinationUnavailableError

__all__ = ["EtcdSession"]

logger = logging.getLogger(__name__)

#: Deadline of one etcd call (seconds): a down etcd must not hold a loop for long.
CALL_TIMEOUT_S = 2.0


class EtcdSession:
    """A connected etcd client and a lease kept alive; :meth:`open` makes one."""

    def __init__(self, client: aetcd.Client, endpoint: Endpoint, ttl_s: int) -> None:
        self.client = client
        self.endpoint = endpoint
        self.ttl_s = ttl_s
        self.lease_id = 0
        self._renewed_at = -math.inf  # monotonic time the last confirmed renewal was sent
        # Monotonic time the last renewal attempt that could not reach etcd was sent; None once
        # etcd answered one (may_lead).
        self._unreachable_at: float | None = None
        self._on_new_lease: list[Callable[[], Awaitable[None]]] = []
        self._keep_alive: asyncio.Task[None] | None = None
        self._unreachable_logged = False

    @classmethod
    async def open(cls, endpoints: list[Endpoint], session_timeout_ms: int) -> EtcdSession:
        """Connect to the first endpoint that answers and grant the lease.

        Raises:
            CoordinationUnavailableError: no endpoint answered within :data:`CALL_TIMEOUT_S`.
        """
        ttl_s = max(1, math.ceil(session_timeout_ms / 1000))
        failures = []
        for endpoint in endpoints:
            client = aetcd.Client(host=endpoint.host, port=endpoint.port, timeout=CALL_TIMEOUT_S)
            try:
                await client.connect()
                session = cls(client, endpoint, ttl_s)
                await session._grant()
            except (TimeoutError, aetcd.ClientError, OSError) as exc:
                failures.append(f"{endpoint}: {exc or type(exc).__name__}")
                with contextlib.suppress(Exception):
                    await client.close()
                continue
            return session
        raise CoordinationUnavailableError(
            "no etcd endpoint answered: " + "; ".join(failures)
        )

    def on_new_lease(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Call ``callback`` after a lease that expired was replaced by a new one."""
        self._on_new_lease.append(callback)

    def start(self) -> None:
        """Start renewing the lease every TTL/3."""
        self._keep_alive = asyncio.create_task(self._renew_forever(), name="stratalog-etcd-lease")

    def held(self) -> bool:
        """Whether the lease is alive as far as this server can know (module docstring)."""
        return time.monotonic() - self._renewed_at < self.ttl_s

    def may_lead(self) -> bool:
        """Whether a leader may serve now: the lease is held, or etcd is down for everyone as
        far as this server can tell (module docstring)."""
        now = time.monotonic()
        if now - self._renewed_at < self.ttl_s:
            return True
        unreachable_at = self._unreachable_at
        return (unreachable_at is not None
                and now - unreachable_at < 2 * self.ttl_s / 3 + CALL_TIMEOUT_S)

    async def _grant(self) -> None:
        sent_at = time.monotonic()
        lease = await self.client.lease(self.ttl_s)
        self.lease_id = lease.id
        self._renewed_at = sent_at
        logger.info("etcd %s: lease %x granted, TTL %d s", self.endpoint, lease.id, self.ttl_s)

    async def _renew_forever(self) -> None:
        interval_s = self.ttl_s / 3
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._renew()
                if self._unreachable_logged:
                    logger.info("etcd %s answers again", self.endpoint)
                self._unreachable_logged = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # etcd down or slow: the data path goes on; renewals are retried each tick.
                if not self._unreachable_logged:
                    logger.warning("etcd %s: cannot renew the lease (%s); retrying every"
                                   " %.1f s", self.endpoint, exc or type(exc).__name__,
                                   interval_s)
                self._unreachable_logged = True

    async def _renew(self) -> None:
        sent_at = time.monotonic()
        try:
            reply = await self.client.refresh_lease(self.lease_id)
        except (TimeoutError, aetcd.ConnectionFailedError, aetcd.ConnectionTimeoutError,
                OSError):
            self._unreachable_at = sent_at
            raise
        self._unreachable_at = None
        if reply is not None and reply.TTL > 0:
            self._renewed_at = sent_at
            return
        # Expired: everything under the lease is gone. A new lease, then everyone re-puts.
        logger.warning("etcd lease %x expired (this server was cut off or frozen for %d s or"
                       " more): granting a new one", self.lease_id, self.ttl_s)
        await self._grant()
        for callback in self._on_new_lease:
            await callback()

    async def close(self) -> None:
        """Stop renewing, revoke the lease (its keys go at once), close the client."""
        if self._keep_alive is not None:
            self._keep_alive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keep_alive
        try:
            if self.lease_id:
                await asyncio.wait_for(self.client.revoke_lease(self.lease_id), CALL_TIMEOUT_S)
        except Exception as exc:  # etcd down: the lease expires by itself
            logger.warning("etcd: could not revoke lease %x (%s); it expires within %d s",
                           self.lease_id, exc or type(exc).__name__, self.ttl_s)
        with contextlib.suppress(Exception):
            await self.client.close()
