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

Endpoints (``--cluster etcd://h1:2379,h2:2379``, members of one etcd cluster): :meth:`open`
uses the first that answers; while running, a renewal that cannot reach the endpoint in use
moves the session to the next one in turn (wrapping round), so a dead etcd member costs at most
one renewal interval plus a call's deadline. The lease is etcd's, not the member's: the next
member renews the same lease. The other parts read :attr:`client` for every call, so they use
the new endpoint from their next call, and the etcd watches (watches.py), whose streams on the
old client break, are created again on the new one; the old client is closed a call's deadline
later, after the calls it carries ended. With etcd credentials, each renewal is followed by a read of one
key (etcd checks no token on lease renewals): refused for an expired auth token (etcd
restarted: etcd_client.py), the session connects to the same endpoint again, which
authenticates again, so the other parts' calls work again within one renewal interval.

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
from .errors import (
    ClusterError,
    CoordinationUnavailableError,
    EtcdAuthenticationError,
    EtcdTlsError,
)
from .etcd_client import EtcdSecurity, is_token_expired, new_client, start_failure

__all__ = ["EtcdSession"]

logger = logging.getLogger(__name__)

#: Deadline of one etcd call (seconds): a down etcd must not hold a loop for long.
CALL_TIMEOUT_S = 2.0


class EtcdSession:
    """A connected etcd client and a lease kept alive; :meth:`open` makes one."""

    def __init__(self, client: aetcd.Client, endpoint: Endpoint, ttl_s: int,
                 endpoints: list[Endpoint] | None = None,
                 security: EtcdSecurity | None = None) -> None:
        self.client = client
        self.endpoint = endpoint
        self.ttl_s = ttl_s
        self._endpoints = list(endpoints or [endpoint])
        self._security = security or EtcdSecurity()
        # With etcd credentials: a key read after each renewal, to find an expired token.
        self._token_check_key: bytes | None = None
        # Clients replaced by _switch_to, each closed a call's deadline later (or at close).
        self._retiring: dict[asyncio.Task[None], aetcd.Client] = {}
        self.lease_id = 0
        self._renewed_at = -math.inf  # monotonic time the last confirmed renewal was sent
        # Monotonic time the last renewal attempt that could not reach etcd was sent; None once
        # etcd answered one (may_lead).
        self._unreachable_at: float | None = None
        self._on_new_lease: list[Callable[[], Awaitable[None]]] = []
        self._keep_alive: asyncio.Task[None] | None = None
        self._unreachable_logged = False
        # Endpoint switches since etcd last answered: the first is logged at WARNING, a whole
        # round without an answer once more, the others at DEBUG (etcd down for everyone
        # would otherwise log a switch every renewal interval).
        self._switches_in_outage = 0

    @classmethod
    async def open(cls, endpoints: list[Endpoint], session_timeout_ms: int,
                   security: EtcdSecurity | None = None,
                   access_check_key: bytes | None = None) -> EtcdSession:
        """Connect to the first endpoint that answers, grant the lease, and, given
        ``access_check_key``, read that key (etcd's auth allows leases to any user: the read
        is what finds out whether this user may use the cluster's prefix).

        Raises:
            EtcdAuthenticationError: etcd refused the credentials, or their access to the key
                (the same credentials everywhere: the other endpoints are not tried).
            EtcdTlsError: no endpoint answered, and one failed its TLS handshake.
            CoordinationUnavailableError: no endpoint answered within :data:`CALL_TIMEOUT_S`.
        """
        security = security or EtcdSecurity()
        ttl_s = max(1, math.ceil(session_timeout_ms / 1000))
        failures: list[ClusterError] = []
        for endpoint in endpoints:
            client = new_client(endpoint, security, CALL_TIMEOUT_S)
            try:
                await client.connect()
                session = cls(client, endpoint, ttl_s, endpoints, security)
                if security.username:
                    session._token_check_key = access_check_key
                await session._grant()
                if access_check_key is not None:
                    await client.get(access_check_key)
            except (TimeoutError, aetcd.ClientError, OSError) as exc:
                prefix = (access_check_key or b"").decode(errors="replace").rpartition("/")[0]
                failure = start_failure(endpoint, security, exc, prefix)
                with contextlib.suppress(Exception):
                    await client.close()
                if isinstance(failure, EtcdAuthenticationError):
                    raise failure from None
                failures.append(failure)
                continue
            return session
        detail = "; ".join(map(str, failures))
        # A TLS failure is a configuration to fix, not an etcd to wait for: named as such.
        if any(isinstance(f, EtcdTlsError) for f in failures):
            raise EtcdTlsError("no TLS connection to any etcd endpoint: " + detail)
        raise CoordinationUnavailableError("no etcd endpoint answered: " + detail)

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
                self._switches_in_outage = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # etcd down or slow: the data path goes on; renewals are retried each tick.
                if not self._unreachable_logged:
                    logger.warning("etcd %s: cannot renew the lease (%s); retrying every"
                                   " %.1f s", self.endpoint, exc or type(exc).__name__,
                                   interval_s)
                self._unreachable_logged = True
                if self._unreachable_at is not None and len(self._endpoints) > 1:
                    index = self._endpoints.index(self.endpoint)
                    self._switch_to(self._endpoints[(index + 1) % len(self._endpoints)])
                continue
            if self._token_check_key is not None:
                await self._maybe_authenticate_again()

    async def _maybe_authenticate_again(self) -> None:
        """Connect again (which authenticates again) when etcd no longer takes this server's
        auth token. etcd does not check tokens on lease renewals, so a read tells."""
        assert self._token_check_key is not None
        try:
            await self.client.get(self._token_check_key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_token_expired(exc):
                logger.info("etcd %s no longer takes this server's auth token (%s; etcd"
                            " restarted?): authenticating again", self.endpoint, exc)
                self._switch_to(self.endpoint)

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

    def _switch_to(self, endpoint: Endpoint) -> None:
        """Use a new client of ``endpoint`` from the next call on (module docstring)."""
        old = self.client
        self.client = new_client(endpoint, self._security, CALL_TIMEOUT_S)
        if endpoint != self.endpoint:
            self._switches_in_outage += 1
            if self._switches_in_outage == 1:
                logger.warning("etcd %s does not answer: using %s", self.endpoint, endpoint)
            elif self._switches_in_outage == len(self._endpoints):
                logger.warning("none of the %d etcd endpoints answers; trying each in turn"
                               " every %.1f s", len(self._endpoints), self.ttl_s / 3)
            else:
                logger.debug("etcd %s does not answer: using %s", self.endpoint, endpoint)
        self.endpoint = endpoint

        async def retire() -> None:
            await asyncio.sleep(CALL_TIMEOUT_S)  # the calls under way end by their deadline
            with contextlib.suppress(Exception):
                await old.close()

        task = asyncio.create_task(retire(), name="stratalog-etcd-retire-client")
        self._retiring[task] = old
        task.add_done_callback(lambda done: self._retiring.pop(done, None))

    async def close(self) -> None:
        """Stop renewing, revoke the lease (its keys go at once), close the client."""
        if self._keep_alive is not None:
            self._keep_alive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keep_alive
        for task, old in list(self._retiring.items()):
            task.cancel()
            with contextlib.suppress(Exception):
                await old.close()
        try:
            if self.lease_id:
                await asyncio.wait_for(self.client.revoke_lease(self.lease_id), CALL_TIMEOUT_S)
        except Exception as exc:  # etcd down: the lease expires by itself
            logger.warning("etcd: could not revoke lease %x (%s); it expires within %d s",
                           self.lease_id, exc or type(exc).__name__, self.ttl_s)
        with contextlib.suppress(Exception):
            await self.client.close()
