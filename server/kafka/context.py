"""What a Kafka API handler is given: the services it calls and who is asking.

:class:`KafkaServices` holds the server's parts that the Kafka front end calls, the same objects
the gRPC front end calls (the composition root, server/app.py, makes both): the partition-serving
layer, the coordinators, security and limits. :class:`ConnectionState` is one connection's
state across its requests (who it authenticated as; the SASL exchange moves it);
:class:`RequestContext` is one request's view of both.

Concurrency: event-loop only.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stratalog.server.client_limits import Origin
from stratalog.server.kafka.fetch_sessions import (
    FETCH_PARTITION_BYTES_MIN,
    FETCH_SESSION_PARTITIONS_MAX,
    FetchSessionCache,
)
from stratalog.server.security.acls import AclOperation, ResourceType
from stratalog.server.security.principal import ANONYMOUS, CallIdentity

if TYPE_CHECKING:
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.client_limits import ClientLimits
    from stratalog.server.group_service import GroupService
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.security.authentication import Authenticator
    from stratalog.server.security.authorizer import Authorizer
    from stratalog.server.security.quotas import QuotaManager
    from stratalog.server.settings import Address, Settings
    from stratalog.server.storage.log_manager import LogManager
    from stratalog.server.transaction_service import ClusterTransactions
    from stratalog.server.transactions import TransactionCoordinator

__all__ = ["ConnectionState", "KafkaServices", "RequestContext"]


@dataclass(slots=True)
class KafkaServices:
    """The server's parts a Kafka API handler calls (module docstring). ``authorizer`` is None
    when the server runs without one (``authorizer = "none"``); ``admin`` is the topic
    administration (server/broker/admin_manager.py) once the server made it.
    ``advertised`` is this server's Kafka address as clients reach it (Metadata's broker)."""

    replicas: ReplicaManager
    log_manager: LogManager
    groups: GroupService
    #: A single server's coordinator, or in cluster mode the replicated coordinators'
    #: front (server/transaction_service/), which answers the same calls.
    transactions: TransactionCoordinator | ClusterTransactions
    settings: Settings
    metrics: ServerMetrics
    executor: Executor
    limits: ClientLimits
    quotas: QuotaManager
    authorizer: Authorizer | None
    advertised: Callable[[], Address]
    time_ms: Callable[[], int]
    #: meta.properties' cluster.id: a single server's cluster id (current_cluster_id).
    cluster_id: str | None = None
    admin: Any = None
    #: Every live server's node id -> the address its Kafka listener is reached at (Metadata's
    #: brokers, FindCoordinator's answer). None: a single server, node 0 at ``advertised()``.
    kafka_brokers: Callable[[], dict[int, Address]] | None = None
    #: In cluster mode, node id -> rack of every live server with one (issue 29); None
    #: otherwise.
    kafka_racks: Callable[[], dict[int, str]] | None = None
    #: The credential checks SASL's exchanges go through (the gRPC calls' own); None: no SASL.
    authenticator: Authenticator | None = None
    #: The server's fetch sessions (KIP-227: fetch_sessions.py), made from the settings.
    fetch_sessions: FetchSessionCache = field(init=False)

    def __post_init__(self) -> None:
        settings = self.settings
        # A session never caches more partitions than one request can name (module docstring
        # of fetch_sessions.py), nor do all of them together.
        cache = self.fetch_sessions = FetchSessionCache(
            settings.kafka_fetch_session_cache_slots,
            max(min(settings.kafka_request_bytes_max // FETCH_PARTITION_BYTES_MIN,
                    FETCH_SESSION_PARTITIONS_MAX), 1),
            on_evict=self.metrics.kafka_fetch_session_evictions.inc)
        self.metrics.kafka_fetch_sessions.set_function(lambda: len(cache))
        self.metrics.kafka_fetch_session_partitions.set_function(lambda: cache.partitions_cached)

    def current_cluster_id(self) -> str | None:
        """Metadata's and DescribeCluster's cluster id: a cluster's is etcd's, the same on
        every server (server/cluster/cluster_id.py; None until this server joined); a single
        server's is its meta.properties cluster.id."""
        if not self.settings.cluster:
            return self.cluster_id
        node = self.replicas.cluster_node
        return node.cluster_id or None if node is not None else None

    def broker_addresses(self) -> dict[int, Address]:
        """Node id -> Kafka address of every live server (this one alone without a cluster)."""
        if self.kafka_brokers is None:
            return {0: self.advertised()}
        return self.kafka_brokers()

    def broker_rack(self, node_id: int) -> str | None:
        """The rack (``broker_rack``) a live server registered; None for none (Metadata's and
        DescribeCluster's null), and always for a single server."""
        return (self.kafka_racks() if self.kafka_racks is not None else {}).get(node_id) or None


@dataclass(slots=True)
class ConnectionState:
    """One connection's state across its requests: its peer's host, its identity (anonymous,
    or from the client certificate, until a SASL exchange sets it), and its SASL session
    (``sasl``: server/kafka/sasl_session.py's SaslSession from its first SaslHandshake on)."""

    connection_id: str
    host: str
    identity: CallIdentity
    sasl: Any = None
    #: Whether a request other than ApiVersions and SASL's may be served (False until a
    #: required SASL exchange succeeded).
    authenticated: bool = True
    #: Whether the connection is TLS (PLAIN sends a password: only over TLS, unless allowed).
    tls: bool = False
    #: Whether Fetch answers may send batches from the segment files (a plaintext TCP
    #: connection; TLS encrypts them in this process): connection.py sets it.
    zero_copy: bool = False


@dataclass(slots=True)
class RequestContext:
    """One request: the services, the connection, the header's fields. ``throttle_ms`` is set
    by the handler when a quota delays the client: the answer says so and the connection
    reads nothing more for that long (Kafka mutes a throttled channel)."""

    services: KafkaServices
    connection: ConnectionState
    api_key: int
    api_version: int
    client_id: str
    throttle_ms: int = 0
    #: Set by a handler whose answer is the connection's last (a refused SASL request, as
    #: Kafka's SaslServerAuthenticator closes it): the answer is written, then it closes.
    close_after_answer: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def identity(self) -> CallIdentity:
        return self.connection.identity

    def origin(self) -> Origin:
        """Whose waiting requests a long poll counts in (client_limits.py): this connection,
        and the principal (its host when anonymous), as for a gRPC call."""
        identity = self.connection.identity
        if identity.principal != ANONYMOUS:
            return Origin(self.connection.connection_id, str(identity.principal))
        return Origin(self.connection.connection_id, f"host:{self.connection.host}")

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether the caller may do ``operation`` on the resource (always, without an
        authorizer). A topic name that is not valid is never allowed: the caller gets the
        authorization error or the topic's own error, whichever the handler checks first."""
        authorizer = self.services.authorizer
        if authorizer is None:
            return True
        try:
            return authorizer.authorize(self.identity, operation, resource_type, name)
        except Exception:  # an invalid topic name: nothing to authorize
            return False
