"""Per-client limits on waiting RPCs: no client may hold all of the server's call slots.

Intuition: most RPCs are over in milliseconds, but three kinds can hold a call slot for as long
as their client likes while costing it nothing: a **Subscribe stream** (for ever), a **Session
stream** (for ever: server/rpc/session.py) and a **long poll** (a FetchByOffset with ``max_wait_ms``
> 0 that found too little and waits, up to ``fetch_max_wait_ms_max``, whether it came as a unary
call or on a session). These are the *waiting RPCs*. A long poll on a session holds no call
slot of its own, but a task and its frames as a unary one does, and is admitted the same way
(the same code path serves both), so that moving long polls into sessions does not lift their
limit. gRPC's own cap,
``max_concurrent_rpcs``, counts every RPC of every client together: one client with 1,030
streams used to take every slot, and everyone else's RPCs failed with RESOURCE_EXHAUSTED
("Concurrent RPC limit exceeded!"). :class:`ClientLimits` admits each waiting RPC against three
limits, checked in this order (the first one reached is the one named)::

    waiting_rpcs_per_connection_max   one HTTP/2 connection (gRPC's peer, "ipv4:10.0.0.5:53122")
    waiting_rpcs_per_client_max       one client: its principal ("User:alice") when the call was
                                      authenticated, else its host ("host:10.0.0.5")
    waiting_rpcs_max                  all clients together; kept below max_concurrent_rpcs (the
                                      settings check it), so that unary RPCs always find a slot

A refused RPC fails with RESOURCE_EXHAUSTED and reason RESOURCE_LIMIT_EXCEEDED, the setting's
name in ``ErrorInfo.metadata["limit"]`` (:class:`ClientLimitExceededError`; retriable: the slot
frees when one of the client's own waiting RPCs ends).

Who a client is: the authentication interceptor publishes the call's
:class:`~stratalog.server.security.principal.CallIdentity` in ``current_identity``. A call
without one (no authentication configured) or with the anonymous principal is counted by its
host, as Kafka counts ``max.connections.per.ip``: anonymous clients on different hosts do not
share one budget, and one host cannot take another's.

What is not limited here: connections. grpc.aio does not show a server its connections (no
accept hook, no per-connection callback): only a call's peer. The server caps the connections of
all clients together (``max_connections``, gRPC core's ``grpc.max_allowed_incoming_connections``)
and closes idle ones (``connections_max_idle_ms``); a per-host connection count, Kafka's
``max.connections.per.ip``, has no place to be enforced. What connections can hold is bounded by
the waiting RPC limits above, per host too.

Invariants (:meth:`ClientLimits.check`): every count is the number of admissions not yet
released; no count is kept at 0 (the dictionaries hold only connections and clients with a
waiting RPC, so their size is bounded by ``waiting_rpcs_max``); the per-connection and
per-client counts each add up to the total.

Concurrency: event-loop only (plain counters; admission and release never await).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stratalog.server.security.principal import ANONYMOUS, CallIdentity, current_identity

if TYPE_CHECKING:
    import grpc.aio

    from stratalog.server.metrics import ServerMetrics

__all__ = [
    "WAITING_RPC_BYTES_ESTIMATE",
    "ClientLimitExceededError",
    "ClientLimits",
    "Origin",
    "WaitingRpc",
    "WaitingRpcKind",
    "call_origin",
    "host_of_peer",
]

#: The settings whose limits :class:`ClientLimits` enforces, in the order they are checked.
PER_CONNECTION_LIMIT = "waiting_rpcs_per_connection_max"
PER_CLIENT_LIMIT = "waiting_rpcs_per_client_max"
TOTAL_LIMIT = "waiting_rpcs_max"


#: What one waiting RPC costs the server while it waits (gRPC's call and stream state, the
#: handler's task and frames), for the heap-trim estimate: 1,000 idle Subscribe streams measured
#: ~37 MiB (docs/server.md).
WAITING_RPC_BYTES_ESTIMATE = 40 * 1024


class ClientLimitExceededError(Exception):
    """A waiting RPC refused: ``limit`` names the setting whose limit was reached.

    server/rpc/status.py answers it RESOURCE_EXHAUSTED + RESOURCE_LIMIT_EXCEEDED, with ``limit`` in
    the ErrorInfo metadata. The message names the limit, its value and whose it is, never a
    server path.
    """

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class WaitingRpcKind(enum.Enum):
    """What a waiting RPC waits in: a Subscribe stream, a Session stream or a long poll."""

    SUBSCRIBE = "Subscribe stream"
    LONG_POLL = "long poll"
    SESSION = "Session stream"
    #: A JoinGroup or SyncGroup parked until its group's rebalance completes (issue 27).
    GROUP_REBALANCE = "JoinGroup or SyncGroup"
    #: A Heartbeat with max_wait_ms > 0, held until its group rebalances or its wait ends.
    HELD_HEARTBEAT = "held Heartbeat"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a call comes from: its ``connection`` (gRPC's peer string) and its ``client``
    (``"User:alice"``, or ``"host:10.0.0.5"`` for an anonymous call). Immutable."""

    connection: str
    client: str


def host_of_peer(peer: str) -> str:
    """The host of gRPC's peer string: ``ipv4:10.0.0.5:53122`` -> ``10.0.0.5``,
    ``ipv6:[::1]:53122`` -> ``::1``; a peer of another form (``unix:/path``) as it is."""
    scheme, sep, address = peer.partition(":")
    if not sep or scheme not in ("ipv4", "ipv6"):
        return peer
    host, sep, _port = address.rpartition(":")
    if not sep:
        return address
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def call_origin(context: grpc.aio.ServicerContext) -> Origin:
    """The :class:`Origin` of the call ``context`` serves: the peer, and the principal the
    authentication interceptor published for this call (its host when there is none or it is
    anonymous)."""
    peer = context.peer() or "unknown"
    identity: CallIdentity | None = current_identity.get(None)
    if identity is not None and identity.principal != ANONYMOUS:
        return Origin(peer, str(identity.principal))
    host = identity.host if identity is not None and identity.host else host_of_peer(peer)
    return Origin(peer, f"host:{host}")


class WaitingRpc:
    """One admitted waiting RPC: :meth:`release` (or leaving the ``with`` block) gives its slot
    back, once; later calls do nothing. Event-loop only."""

    __slots__ = ("_kind", "_limits", "_origin")

    def __init__(self, limits: ClientLimits, origin: Origin, kind: WaitingRpcKind) -> None:
        self._limits: ClientLimits | None = limits
        self._origin = origin
        self._kind = kind

    def release(self) -> None:
        limits, self._limits = self._limits, None
        if limits is not None:
            limits._release(self._origin, self._kind)

    def __enter__(self) -> WaitingRpc:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class ClientLimits:
    """The waiting RPCs admitted now, counted per connection, per client and in all.

    Holds the three limits (see the module docstring), a count per connection and per client
    with at least one waiting RPC, the total, the count per :class:`WaitingRpcKind`, and the
    metrics it keeps current (``stratalog_waiting_rpcs{kind}``,
    ``stratalog_waiting_rpcs_refused_total{limit}``: labels from these fixed sets only, never a
    client's name, so that a million clients make no million time series).

    Admission and release are O(1). Event-loop only.
    """

    def __init__(
        self,
        per_connection_max: int,
        per_client_max: int,
        total_max: int,
        metrics: ServerMetrics | None = None,
    ) -> None:
        assert per_connection_max >= 1 and per_client_max >= 1 and total_max >= 1
        self.per_connection_max = per_connection_max
        self.per_client_max = per_client_max
        self.total_max = total_max
        self._metrics = metrics
        # The gauge's children, looked up once: admission is on the path of every stream.
        self._gauges = (
            {kind: metrics.waiting_rpcs.labels(kind.name.lower()) for kind in WaitingRpcKind}
            if metrics is not None else None
        )
        self._by_connection: dict[str, int] = {}
        self._by_client: dict[str, int] = {}
        self._by_kind = dict.fromkeys(WaitingRpcKind, 0)
        self.total = 0
        self._peak_total = 0

    def admit(self, origin: Origin, kind: WaitingRpcKind) -> WaitingRpc:
        """Count one more waiting RPC of ``origin``, or refuse it.

        Raises:
            ClientLimitExceededError: the connection, the client or the server already holds
                as many waiting RPCs as its limit allows (checked in that order).
        """
        connection_count = self._by_connection.get(origin.connection, 0)
        client_count = self._by_client.get(origin.client, 0)
        if connection_count >= self.per_connection_max:
            self._refuse(
                PER_CONNECTION_LIMIT,
                f"this connection ({origin.connection}) already holds {connection_count}"
                f" waiting RPCs (Subscribe streams, sessions, long polls), its limit"
                f" ({PER_CONNECTION_LIMIT}="
                f"{self.per_connection_max}); end one, or spread them over more connections",
                kind,
            )
        if client_count >= self.per_client_max:
            self._refuse(
                PER_CLIENT_LIMIT,
                f"{origin.client} already holds {client_count} waiting RPCs (Subscribe streams,"
                f" sessions, long polls), its limit ({PER_CLIENT_LIMIT}={self.per_client_max}); end one first",
                kind,
            )
        if self.total >= self.total_max:
            self._refuse(
                TOTAL_LIMIT,
                f"the server already holds {self.total} waiting RPCs (Subscribe streams, sessions,"
                f" long polls) of all clients, its limit ({TOTAL_LIMIT}={self.total_max}); retry later",
                kind,
            )
        self._by_connection[origin.connection] = connection_count + 1
        self._by_client[origin.client] = client_count + 1
        self._by_kind[kind] += 1
        self.total += 1
        self._peak_total = max(self._peak_total, self.total)
        if self._gauges is not None:
            self._gauges[kind].inc()
        return WaitingRpc(self, origin, kind)

    def take_peak_total(self) -> int:
        """The most waiting RPCs held at once since the last call (or since start-up), and
        start over from the count now: a crowd that came and went between two calls counts."""
        peak, self._peak_total = self._peak_total, self.total
        return peak

    def count(self, origin: Origin) -> tuple[int, int]:
        """The waiting RPCs of ``origin``'s connection and of its client."""
        return (self._by_connection.get(origin.connection, 0),
                self._by_client.get(origin.client, 0))

    def count_of(self, kind: WaitingRpcKind) -> int:
        return self._by_kind[kind]

    def _refuse(self, limit: str, message: str, kind: WaitingRpcKind) -> None:
        if self._metrics is not None:
            self._metrics.waiting_rpcs_refused.labels(limit).inc()
        raise ClientLimitExceededError(f"{kind.value} refused: {message}", limit=limit)

    def _release(self, origin: Origin, kind: WaitingRpcKind) -> None:
        _decrement(self._by_connection, origin.connection)
        _decrement(self._by_client, origin.client)
        self._by_kind[kind] -= 1
        self.total -= 1
        if self._gauges is not None:
            self._gauges[kind].dec()

    def check(self) -> None:
        """Assert the invariants of the module docstring (for tests)."""
        assert 0 <= self.total <= self.total_max, self.total
        assert self.total <= self._peak_total, (self.total, self._peak_total)
        for counts, limit in ((self._by_connection, self.per_connection_max),
                              (self._by_client, self.per_client_max)):
            assert all(1 <= count <= limit for count in counts.values()), counts
            assert sum(counts.values()) == self.total, (counts, self.total)
        assert all(count >= 0 for count in self._by_kind.values()), self._by_kind
        assert sum(self._by_kind.values()) == self.total, self._by_kind


def _decrement(counts: dict[str, int], key: str) -> None:
    remaining = counts[key] - 1
    if remaining:
        counts[key] = remaining
    else:
        del counts[key]  # no entry at 0: the maps stay as small as the waiting RPCs
