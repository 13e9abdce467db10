"""Authorization: may this caller do this RPC? Decided per call, at the front end.

(The gRPC front end asks through its interceptor, server/rpc/authorization.py.)

With ``authorizer = "acl"`` every RPC of the Broker service is checked against the ACLs before
the servicer sees it (at the edge, never in storage: docs/security.md, first section). Each RPC asks for
operations on resources as Kafka's ``KafkaApis`` does for the request of the same meaning
(:data:`RULES`)::

    RPC                      operation on resource                      answer filtered
    CreateTopic              CREATE on the cluster, or CREATE on the topic   configs*
    DeleteTopic              DELETE on the topic
    ListTopics               (none)                                      topics without DESCRIBE
                                                                         dropped; configs*
    DescribeTopic            DESCRIBE on the topic                       configs*
    AlterTopicConfigs        ALTER_CONFIGS on the topic
    CreatePartitions         ALTER on the topic (Kafka's CreatePartitions)
    ElectLeaders             ALTER on the cluster (Kafka's ElectLeaders)
    AlterPartitionReassignments, DrainBroker   ALTER on the cluster
    ListPartitionReassignments                 DESCRIBE on the cluster
    Produce                  WRITE on the topic
    FetchByOffset, FetchByTimestamp, Subscribe     READ on the topic
    ListOffsets              DESCRIBE on the topic
    DeleteRecords            DELETE on the topic
    CleanPartition           ALTER on the topic (a maintenance action, as Kafka's admin
                             requests on a topic's partitions, e.g. CreatePartitions)
    InitProducerId           with a transactional id: WRITE on it; without (idempotent):
                             IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679)
    AddPartitionsToTxn       WRITE on the transactional id and on every topic
    EndTxn                   WRITE on the transactional id
    DescribeTransaction      DESCRIBE on the transactional id            partitions of topics
                                                                         without DESCRIBE dropped
    CreateAcls, DeleteAcls   ALTER on the cluster
    DescribeAcls             DESCRIBE on the cluster
    WhoAmI                   (none: open, as health is)
    Metadata                 DESCRIBE on each topic named; with none     topics without DESCRIBE
                             named, none (the brokers and the            dropped
                             controller are open, as in Kafka); a
                             topic auto-created also needs CREATE
                             (may_create_topic, asked by the servicer)
    FindCoordinator          DESCRIBE on the group (or the transactional id) named by key
    JoinGroup, SyncGroup,    READ on the group
    Heartbeat, LeaveGroup
    OffsetCommit,            READ on the group and on every topic committed
    TxnOffsetCommit
    OffsetFetch              DESCRIBE on the group                       offsets of topics without
                                                                         DESCRIBE dropped
    ListGroups               (none)                                      all with DESCRIBE on the
                                                                         cluster, else groups
                                                                         without DESCRIBE dropped
    DescribeGroups           DESCRIBE on every group named
    DeleteGroups             DELETE on every group named
    OffsetDelete             DELETE on the group, READ on every topic named
    AddOffsetsToTxn          WRITE on the transactional id, READ on the group
    Session                  (none for the stream: each request on it needs what its unary
                             RPC needs, checked by the servicer with these same rules)
    Replication/ReplicaFetchSession CLUSTER_ACTION on the cluster (a follower's fetch: Kafka's
                             inter-broker action; replication.proto, cluster mode only).
                             The broker principals are super users; the service itself
                             refuses every other caller, whatever the ACLs
                             (server/cluster/broker_identity.py)
    TransactionMarkers/*     CLUSTER_ACTION on the cluster (a transaction coordinator's
                             WriteTxnMarkers and AllowTxnAppends to a partition's leader,
                             and a leader's VerifyTxnAppend to a coordinator: Kafka's
                             WriteTxnMarkers needs it; transaction_markers.proto,
                             cluster mode only), the same callers as ReplicaFetchSession

    * a topic's configs are left out of the answer unless the caller may DESCRIBE_CONFIGS it
      (Kafka's CreateTopics answer does the same).

Health (``grpc.health.v1``) is always open; server reflection needs DESCRIBE on the cluster,
unless ``reflection_open`` opens it to everyone (as it opens it to callers without credentials).
A method with no rule is refused (fail closed); a test over broker.proto's service makes sure
every RPC has one. A transactional Produce carries no transactional id in broker.proto: it is
covered by AddPartitionsToTxn's check, since the partition refuses a transactional batch of a
transaction it was not added to.

A refusal is PERMISSION_DENIED + NOT_AUTHORIZED naming the operation and the resource asked
about, the same whether the topic exists or not, so a principal without DESCRIBE learns nothing
about which topics exist (Kafka's TOPIC_AUTHORIZATION_FAILED for unknown topics).

Names first: a topic name is checked (Kafka's rule: 1 to 249 characters of ``[a-zA-Z0-9._-]``)
before anything is decided, cached or logged about it; an invalid one is refused INVALID_ARGUMENT
+ INVALID_TOPIC naming the problem (with at most the name's first 20 characters), whether the
caller could have used it or not: the answer says nothing about which topics exist. Kafka
decides authorization first and refuses an invalid name after (``KafkaApis``), but it never
caches a decision, and its request parser bounds a name to 32,767 bytes; here a name is a
protobuf string bounded only by ``max_request_bytes``.

Cost: every decision is cached per (principal, host, operation, resource type, name) until
the ACLs change, so an authorized Produce costs one dict lookup after its first. The cache
holds at most ``authorizer_cache_entries_max`` decisions and ``authorizer_cache_bytes_max``
bytes (each entry counted as :data:`CACHE_ENTRY_BYTES` plus its name's and host's lengths: a
transactional id may be 32 KiB), the oldest dropped first. Denials are logged, at most 20 lines
a second, with every client-chosen string escaped and cut (server/client_text.py).

ACL updates (CreateAcls, DeleteAcls) are serialised by one lock: the new set is written to the
ACL storage (acl_store.py's :class:`~.acl_store.AclStorage`: a single server's ACL file, fsynced
in the thread pool, or in cluster mode the cluster's etcd key, cluster_acls.py) and only then
installed, replacing the index and emptying the cache in one step on the event loop. A decision
under way uses the index it started with: the new ACLs apply to calls that begin after the
update answered. A change the storage learns of by itself (another server's update, read from
etcd) moves its ``revision``: the next decision installs it, before it looks at the cache.

Concurrency: event-loop only (the file writes run in the executor given).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stratalog.server.client_text import loggable
from stratalog.server.storage.topic_names import validate_topic_name
from stratalog.v1 import broker_pb2

from .acl_store import AclChange, AclStorage
from .acls import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    ResourceType,
    resource_label,
)
from .errors import AclLimitError, NotAuthorizedError, SecurityDisabledError
from .principal import CallIdentity, Principal

if TYPE_CHECKING:
    pass

__all__ = [
    "BROKER_SERVICE",
    "CACHE_ENTRY_BYTES",
    "HEALTH_PREFIX",
    "OPEN",
    "REFLECTION_PREFIXES",
    "REPLICATION_RULES",
    "REPLICATION_SERVICE",
    "RULES",
    "TRANSACTION_MARKERS_RULES",
    "TRANSACTION_MARKERS_SERVICE",
    "Authorizer",
    "Decider",
    "Rule",
    "decide_request",
    "managing_acls",
    "may_create_topic",
    "rule_for",
]

logger = logging.getLogger(__name__)

#: The Broker service's full name, the prefix of its method paths.
BROKER_SERVICE = broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name
#: The server-to-server service (replication.proto), registered in cluster mode.
REPLICATION_SERVICE = "stratalog.v1.Replication"
#: The transaction coordinators' calls to partitions' leaders (transaction_markers.proto).
TRANSACTION_MARKERS_SERVICE = "stratalog.v1.TransactionMarkers"
#: Method paths of gRPC's health service: open to every caller, always.
HEALTH_PREFIX = "/grpc.health.v1.Health/"
#: Method paths of server reflection (both versions): open with ``reflection_open``.
REFLECTION_PREFIXES = (
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)

# The cache key of authorize_by_resource_type's decisions (no resource name).
_ANY_NAME = None
# Denials logged per second at most (each is logged once, when first decided).
_DENIALS_LOGGED_PER_S = 20
#: What one cached decision costs besides its name and host strings: the dict slot, the key
#: tuple and the name's string header (measured with tracemalloc: ~180 bytes; rounded up).
CACHE_ENTRY_BYTES = 256


class Authorizer:
    """The ACLs, the super users, and the decisions made from them.

    Holds the :class:`~.acls.AclIndex` in force, the :class:`~.acl_store.AclStorage` it was
    read from and is written to, the super users, ``allow.everyone.if.no.acl.found``, the
    decision cache and the update lock. Invariant: at every decision the index holds exactly
    the bindings of the storage at its ``revision``, and the cache only decisions made from
    that index.

    Concurrency: event-loop only; updates run their file writes in ``executor``, one at a
    time.
    """

    def __init__(
        self,
        store: AclStorage,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        cache_entries_max: int = 100_000,
        cache_bytes_max: int = 64 << 20,
        bindings_max: int = 10_000,
        request_entries_max: int = 1_000,
        executor: Executor | None = None,
    ) -> None:
        assert cache_entries_max >= 0 and cache_bytes_max >= 0
        assert bindings_max >= 0 and request_entries_max >= 1
        self._store = store
        self._acls = AclIndex(store.bindings)
        self._revision = store.revision
        self._super_users = frozenset(Principal.parse(p) for p in super_users)
        self._allow_if_no_acl = allow_everyone_if_no_acl_found
        self._cache: dict[tuple[Any, ...], bool] = {}
        self._cache_entries_max = cache_entries_max
        self._cache_bytes_max = cache_bytes_max
        self._cache_bytes = 0  # the cache's entries as _entry_bytes counts them
        self._bindings_max = bindings_max
        self._request_entries_max = request_entries_max
        self._executor = executor
        self._update_lock = asyncio.Lock()
        self._denials_second = 0.0
        self._denials_logged = 0
        self._denials_unlogged = 0

    @property
    def acls(self) -> AclIndex:
        """The ACLs in force."""
        return self._current()

    def _current(self) -> AclIndex:
        """The index of the storage's bindings: rebuilt, and the cache emptied, when they
        changed since the last decision."""
        store = self._store
        if store.revision != self._revision:
            self._revision = store.revision
            self._acls = AclIndex(store.bindings)
            self._forget_decisions()
            logger.info("ACLs changed: %d bindings in force", len(self._acls))
        return self._acls

    @property
    def cached_decisions(self) -> int:
        return len(self._cache)

    @property
    def cached_bytes(self) -> int:
        """What the cached decisions are counted as (see :data:`CACHE_ENTRY_BYTES`)."""
        return self._cache_bytes

    def check(self) -> None:
        """Assert the cache's invariants (for tests): within both bounds, its byte count the
        sum of its entries'."""
        assert len(self._cache) <= self._cache_entries_max, len(self._cache)
        assert self._cache_bytes == sum(map(_entry_bytes, self._cache)), self._cache_bytes
        assert self._cache_bytes <= self._cache_bytes_max, self._cache_bytes

    def is_super_user(self, principal: Principal) -> bool:
        return principal in self._super_users

    # ---------------------------------------------------------------- decisions

    def authorize(
        self, identity: CallIdentity, operation: AclOperation, resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether ``identity`` may do ``operation`` on (``resource_type``, ``name``):
        super users always, others as the ACLs decide (acls.py's rules).

        Raises:
            InvalidTopicError: ``name`` is no valid topic name (for a topic): nothing about
                it is cached or logged.
        """
        if resource_type is ResourceType.TOPIC:
            validate_topic_name(name)
        acls = self._current()
        key = (identity.principal, identity.host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            principal = identity.principal
            decision = principal in self._super_users or acls.authorize(
                str(principal), identity.host, operation, resource_type, name,
                allow_if_no_acl=self._allow_if_no_acl,
            )
            self._remember(key, decision)
            if not decision:
                self._log_denial(principal, identity.host, operation, resource_type, name)
        return decision

    def _log_denial(self, principal: Principal, host: str, operation: AclOperation,
                    resource_type: ResourceType, name: str) -> None:
        # At most _DENIALS_LOGGED_PER_S lines a second: a client asking for many names it may
        # not use must not fill the server's log (the rest are counted in the next line).
        now = time.monotonic()
        if now - self._denials_second >= 1.0:
            self._denials_second, self._denials_logged = now, 0
        if self._denials_logged >= _DENIALS_LOGGED_PER_S:
            self._denials_unlogged += 1
            return
        self._denials_logged += 1
        unlogged, self._denials_unlogged = self._denials_unlogged, 0
        logger.info("denied %s from %s: %s on %s%s", loggable(principal), loggable(host),
                    operation.name, loggable(resource_label(resource_type, name)),
                    f" ({unlogged} more denials not logged)" if unlogged else "")

    def authorize_by_resource_type(
        self, identity: CallIdentity, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``identity`` may do ``operation`` on at least one resource of
        ``resource_type`` (Kafka's ``authorizeByResourceType``)."""
        acls = self._current()
        key = (identity.principal, identity.host, operation, resource_type, _ANY_NAME)
        decision = self._cache.get(key)
        if decision is None:
            principal = identity.principal
            decision = principal in self._super_users or acls.authorize_by_resource_type(
                str(principal), identity.host, operation, resource_type,
                allow_if_no_acl=self._allow_if_no_acl,
            )
            self._remember(key, decision)
        return decision

    def _remember(self, key: tuple[Any, ...], decision: bool) -> None:
        cache = self._cache
        size = _entry_bytes(key)
        if not self._cache_entries_max or size > self._cache_bytes_max:
            return
        # The oldest decisions first (dicts keep insertion order), until both bounds hold.
        while cache and (len(cache) >= self._cache_entries_max
                         or self._cache_bytes + size > self._cache_bytes_max):
            oldest = next(iter(cache))
            del cache[oldest]
            self._cache_bytes -= _entry_bytes(oldest)
        cache[key] = decision
        self._cache_bytes += size

    def _forget_decisions(self) -> None:
        self._cache.clear()
        self._cache_bytes = 0

    # ---------------------------------------------------------------- ACL updates

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Store ``bindings`` (validated here; all or none), durably, then apply them.

        Raises:
            InvalidAclError: a binding is malformed (named by its index: ``creations[2]``).
            AclLimitError: more than ``acl_request_entries_max`` bindings, or the set would
                exceed ``acl_bindings_max``.
            StorageIOError: the ACL file could not be written; nothing changed.
            CoordinationUnavailableError: (cluster mode) etcd did not answer; the message says
                whether the update may have been written.
        """
        self._check_entries(len(bindings), "bindings")
        validated = [binding.validated(f"creations[{i}]") for i, binding in enumerate(bindings)]

        def change(current: tuple[AclBinding, ...]) -> tuple[AclBinding, ...] | None:
            index = self._index_of(current)
            updated = index.with_added(validated)
            if len(updated) == len(index):
                return None  # every binding was there already (creating one twice is no change)
            if len(updated) > self._bindings_max:
                raise AclLimitError(
                    f"the server would hold {len(updated)} ACL bindings; acl_bindings_max is "
                    f"{self._bindings_max}",
                    limit="acl_bindings_max",
                )
            return updated.bindings

        await self._update(change)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """Delete every binding any of ``filters`` selects; the bindings deleted.

        Raises:
            InvalidAclError: a filter is malformed (``filters[1].operation``).
            AclLimitError: more than ``acl_request_entries_max`` filters.
            StorageIOError: the ACL file could not be written; nothing changed.
            CoordinationUnavailableError: (cluster mode) etcd did not answer.
        """
        self._check_entries(len(filters), "filters")
        validated = [f.validated(f"filters[{i}]") for i, f in enumerate(filters)]
        deleted: list[AclBinding] = []

        def change(current: tuple[AclBinding, ...]) -> tuple[AclBinding, ...] | None:
            # Called again when another server changed the ACLs meanwhile: start afresh.
            deleted[:] = [b for b in current if any(f.matches(b) for f in validated)]
            return self._index_of(current).without(deleted).bindings if deleted else None

        await self._update(change)
        return deleted

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings ``acl_filter`` selects, in creation order.

        Raises:
            InvalidAclError: the filter is malformed.
        """
        return self._current().matching(acl_filter.validated("filter"))

    def _check_entries(self, count: int, what: str) -> None:
        if count > self._request_entries_max:
            raise AclLimitError(
                f"{count} {what} in one request; acl_request_entries_max is "
                f"{self._request_entries_max}",
                limit="acl_request_entries_max",
            )

    def _index_of(self, bindings: tuple[AclBinding, ...]) -> AclIndex:
        current = self._current()
        return current if current.bindings == bindings else AclIndex(bindings)

    async def _update(self, change: AclChange) -> None:
        async with self._update_lock:
            try:
                await self._store.update(change, self._executor)
            finally:
                # Whatever the storage holds now (the new set, or after a failed write the
                # set it read back) is what applies: memory never differs from the storage.
                self._current()


def managing_acls(authorizer: Authorizer | None) -> Authorizer:
    """The authorizer whose ACLs a CreateAcls, DescribeAcls or DeleteAcls manages (either front
    end's).

    Raises:
        SecurityDisabledError: the server has none (``authorizer = "none"``): ACLs would have
            no effect, so none are stored (Kafka answers SECURITY_DISABLED without an
            ``authorizer.class.name``).
    """
    if authorizer is None:
        raise SecurityDisabledError(
            "this server has no authorizer (authorizer = \"none\"), so ACLs would have no"
            " effect and none are stored; start it with authorizer = \"acl\" (and"
            " super_users) to manage them"
        )
    return authorizer


def _entry_bytes(key: tuple[Any, ...]) -> int:
    """What one cached decision is counted as: the fixed cost and the key's two strings that
    a client chooses the length of (the principal is bounded by its credential or certificate;
    the host is an address)."""
    name = key[4]
    return CACHE_ENTRY_BYTES + len(key[1]) + (len(name) if name is not None else 0)


# ------------------------------------------------------------------------ the rules


class Decider:
    """The questions one call's rule asks: :meth:`require` (raise if refused) and
    :meth:`allowed` (a yes/no for filtering an answer), for one identity."""

    __slots__ = ("_authorizer", "identity")

    def __init__(self, authorizer: Authorizer, identity: CallIdentity) -> None:
        self._authorizer = authorizer
        self.identity = identity

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        return self._authorizer.authorize(self.identity, operation, resource_type, name)

    def allowed_on_some(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        return self._authorizer.authorize_by_resource_type(
            self.identity, operation, resource_type
        )

    def require(self, operation: AclOperation, resource_type: ResourceType, name: str) -> None:
        """Raises NotAuthorizedError unless the call may do ``operation`` on the resource."""
        if not self._authorizer.authorize(self.identity, operation, resource_type, name):
            raise self.refusal(operation, resource_type, name)

    def refusal(
        self, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> NotAuthorizedError:
        label = resource_label(resource_type, name)
        return NotAuthorizedError(
            f"not authorized: {self.identity.principal} may not {operation.name} {label}",
            operation=operation.name,
            resource=label,
            topic=name if resource_type == ResourceType.TOPIC else None,
        )


Check = Callable[[Decider, Any], None]
Answer = Callable[[Decider, Any], None]


@dataclass(frozen=True, slots=True)
class Rule:
    """How one RPC is authorized: ``check`` raises NotAuthorizedError to refuse the request
    (None: open to every caller), ``answer`` removes from the response what the caller may not
    see (None: the response as it is).

    ``single`` describes a ``check`` that asks one operation on one resource: (operation,
    resource type, the request field naming the resource, or None for the cluster). The
    interceptor then decides it inline, with one cache lookup and no objects made (the hot
    path of Produce and the fetches); ``check`` says the same, for every other caller.
    """

    check: Check | None
    answer: Answer | None = None
    single: tuple[AclOperation, ResourceType, str | None] | None = None


_TOPIC = ResourceType.TOPIC
_CLUSTER = ResourceType.CLUSTER
_TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
_GROUP = ResourceType.GROUP
_Op = AclOperation


def _one(
    operation: AclOperation, resource_type: ResourceType, field: str | None,
    answer: Answer | None = None,
) -> Rule:
    """The rule "``operation`` on the resource the request's ``field`` names" (the cluster
    when ``field`` is None)."""

    def check(decider: Decider, request: Any) -> None:
        decider.require(operation, resource_type,
                        CLUSTER_NAME if field is None else getattr(request, field))

    return Rule(check, answer, (operation, resource_type, field))


def _on_topic(operation: AclOperation, field: str = "topic", answer: Answer | None = None
              ) -> Rule:
    return _one(operation, _TOPIC, field, answer)


def _on_cluster(operation: AclOperation) -> Rule:
    return _one(operation, _CLUSTER, None)


def _on_transactional_id(operation: AclOperation, answer: Answer | None = None) -> Rule:
    return _one(operation, _TRANSACTIONAL_ID, "transactional_id", answer)


def _create_topic(decider: Decider, request: broker_pb2.CreateTopicRequest) -> None:
    if not decider.allowed(_Op.CREATE, _CLUSTER, CLUSTER_NAME):
        decider.require(_Op.CREATE, _TOPIC, request.name)


def may_create_topic(authorizer: Authorizer, identity: CallIdentity, name: str) -> bool:
    """Whether ``identity`` may create topic ``name``: CreateTopic's rule (CREATE on the
    cluster, or on the topic), which a Metadata request that auto-creates a topic also needs
    (Kafka's ``KafkaApis.handleTopicMetadataRequest``). A no is no error: the topic then stays
    unknown to the caller."""
    decider = Decider(authorizer, identity)
    return (decider.allowed(_Op.CREATE, _CLUSTER, CLUSTER_NAME)
            or decider.allowed(_Op.CREATE, _TOPIC, name))


def _init_producer_id(decider: Decider, request: broker_pb2.InitProducerIdRequest) -> None:
    if request.HasField("transactional_id"):
        if request.transactional_id:  # an empty one is the servicer's to refuse
            decider.require(_Op.WRITE, _TRANSACTIONAL_ID, request.transactional_id)
        return
    # An idempotent producer: Kafka's rule since KIP-679 (3.0).
    if not decider.allowed(_Op.IDEMPOTENT_WRITE, _CLUSTER, CLUSTER_NAME) and not (
        decider.allowed_on_some(_Op.WRITE, _TOPIC)
    ):
        # The permission a user grants is WRITE on the topic the producer writes to (which is
        # also what its Produce needs); IDEMPOTENT_WRITE on the cluster is the rarer way in, so
        # the refusal names the first and mentions the second (issue 25 item 9).
        principal = decider.identity.principal
        raise NotAuthorizedError(
            f"not authorized: {principal} may not WRITE any topic, which an idempotent "
            f"producer needs (grant WRITE on the topics it produces to: stratalog acls add "
            f"--allow-principal {principal} --operation WRITE --topic NAME; or "
            f"IDEMPOTENT_WRITE on the cluster)",
            operation=_Op.WRITE.name,
            resource=resource_label(_TOPIC, "*"),
        )


def _add_partitions_to_txn(
    decider: Decider, request: broker_pb2.AddPartitionsToTxnRequest
) -> None:
    decider.require(_Op.WRITE, _TRANSACTIONAL_ID, request.transactional_id)
    for item in request.partitions:
        decider.require(_Op.WRITE, _TOPIC, item.topic)


def _metadata(decider: Decider, request: broker_pb2.MetadataRequest) -> None:
    for name in request.topics:
        decider.require(_Op.DESCRIBE, _TOPIC, name)


def _metadata_answer(decider: Decider, response: broker_pb2.MetadataResponse) -> None:
    # Kafka's Metadata answer for all topics leaves out those the caller may not DESCRIBE.
    visible = [t for t in response.topics if decider.allowed(_Op.DESCRIBE, _TOPIC, t.name)]
    if len(visible) != len(response.topics):
        kept = [broker_pb2.TopicMetadata() for _ in visible]
        for copy, topic in zip(kept, visible, strict=True):
            copy.CopyFrom(topic)
        del response.topics[:]
        response.topics.extend(kept)


def _visible_configs(decider: Decider, description: broker_pb2.TopicDescription) -> None:
    if not decider.allowed(_Op.DESCRIBE_CONFIGS, _TOPIC, description.name):
        description.ClearField("configs")
        description.ClearField("overridden_configs")  # which are set says something too


def _topic_answer(decider: Decider, response: Any) -> None:
    _visible_configs(decider, response.topic)


def _list_topics_answer(decider: Decider, response: broker_pb2.ListTopicsResponse) -> None:
    visible = [t for t in response.topics if decider.allowed(_Op.DESCRIBE, _TOPIC, t.name)]
    if len(visible) != len(response.topics):
        kept = [broker_pb2.TopicDescription() for _ in visible]
        for copy, topic in zip(kept, visible, strict=True):
            copy.CopyFrom(topic)
        del response.topics[:]
        response.topics.extend(kept)
    for topic in response.topics:
        _visible_configs(decider, topic)


def _describe_transaction_answer(
    decider: Decider, response: broker_pb2.DescribeTransactionResponse
) -> None:
    # Kafka's DescribeTransactions leaves out the partitions of topics the caller may not see.
    visible = [(p.topic, p.partition) for p in response.partitions
               if decider.allowed(_Op.DESCRIBE, _TOPIC, p.topic)]
    if len(visible) != len(response.partitions):
        del response.partitions[:]
        for topic, partition in visible:
            response.partitions.add(topic=topic, partition=partition)


def _on_group(operation: AclOperation) -> Rule:
    return _one(operation, _GROUP, "group_id")


def _find_coordinator(decider: Decider, request: broker_pb2.FindCoordinatorRequest) -> None:
    # Kafka's handleFindCoordinatorRequest: DESCRIBE on the group, or on the transactional id.
    if request.key_type == broker_pb2.COORDINATOR_TYPE_TRANSACTION:
        decider.require(_Op.DESCRIBE, _TRANSACTIONAL_ID, request.key)
    else:
        decider.require(_Op.DESCRIBE, _GROUP, request.key)


def _offset_commit(decider: Decider, request: Any) -> None:
    # Kafka's handleOffsetCommitRequest (and TxnOffsetCommit's): READ on the group, and READ on
    # each topic committed (refused as a whole here, where Kafka fails the partitions).
    decider.require(_Op.READ, _GROUP, request.group_id)
    for name in dict.fromkeys(item.topic for item in request.offsets):
        decider.require(_Op.READ, _TOPIC, name)


def _offset_delete(decider: Decider, request: broker_pb2.OffsetDeleteRequest) -> None:
    decider.require(_Op.DELETE, _GROUP, request.group_id)
    for name in dict.fromkeys(item.topic for item in request.partitions):
        decider.require(_Op.READ, _TOPIC, name)


def _offset_fetch_answer(decider: Decider, response: broker_pb2.OffsetFetchResponse) -> None:
    # Kafka's OffsetFetch leaves out the partitions of topics the caller may not DESCRIBE.
    visible = [o for o in response.offsets if decider.allowed(_Op.DESCRIBE, _TOPIC, o.topic)]
    if len(visible) != len(response.offsets):
        kept = [broker_pb2.CommittedOffset() for _ in visible]
        for copy, offset in zip(kept, visible, strict=True):
            copy.CopyFrom(offset)
        del response.offsets[:]
        response.offsets.extend(kept)


def _each_group(operation: AclOperation) -> Rule:
    """``operation`` on every group the request's ``group_ids`` names."""

    def check(decider: Decider, request: Any) -> None:
        for group_id in dict.fromkeys(request.group_ids):
            decider.require(operation, _GROUP, group_id)

    return Rule(check)


def _list_groups_answer(decider: Decider, response: broker_pb2.ListGroupsResponse) -> None:
    # Kafka's handleListGroupsRequest: every group with DESCRIBE on the cluster, else only the
    # groups the caller may DESCRIBE.
    if decider.allowed(_Op.DESCRIBE, _CLUSTER, CLUSTER_NAME):
        return
    visible = [g for g in response.groups if decider.allowed(_Op.DESCRIBE, _GROUP, g.group_id)]
    if len(visible) != len(response.groups):
        kept = [broker_pb2.ListedGroup() for _ in visible]
        for copy, group in zip(kept, visible, strict=True):
            copy.CopyFrom(group)
        del response.groups[:]
        response.groups.extend(kept)


def _add_offsets_to_txn(decider: Decider, request: broker_pb2.AddOffsetsToTxnRequest) -> None:
    # Kafka's handleAddOffsetsToTxnRequest: WRITE on the transactional id, READ on the group.
    decider.require(_Op.WRITE, _TRANSACTIONAL_ID, request.transactional_id)
    decider.require(_Op.READ, _GROUP, request.group_id)


#: Broker RPC name -> how it is authorized (the table of the module docstring).
RULES: Mapping[str, Rule] = {
    "CreateTopic": Rule(_create_topic, _topic_answer),
    "DeleteTopic": _on_topic(_Op.DELETE, "name"),
    "ListTopics": Rule(lambda decider, request: None, _list_topics_answer),
    "DescribeTopic": _on_topic(_Op.DESCRIBE, "name", _topic_answer),
    "AlterTopicConfigs": _on_topic(_Op.ALTER_CONFIGS, "name", _topic_answer),
    "CreatePartitions": _on_topic(_Op.ALTER, "name", _topic_answer),
    # Kafka's ElectLeaders: ALTER on the cluster (KafkaApis.handleElectLeaders).
    "ElectLeaders": _on_cluster(_Op.ALTER),
    # Kafka's AlterPartitionReassignments: ALTER on the cluster, its List: DESCRIBE; a drain
    # is a set of reassignments.
    "AlterPartitionReassignments": _on_cluster(_Op.ALTER),
    "ListPartitionReassignments": _on_cluster(_Op.DESCRIBE),
    "DrainBroker": _on_cluster(_Op.ALTER),
    "Produce": _on_topic(_Op.WRITE),
    "FetchByOffset": _on_topic(_Op.READ),
    "FetchByTimestamp": _on_topic(_Op.READ),
    "ListOffsets": _on_topic(_Op.DESCRIBE),
    "Subscribe": _on_topic(_Op.READ),
    "DeleteRecords": _on_topic(_Op.DELETE),
    "CleanPartition": _on_topic(_Op.ALTER),
    "InitProducerId": Rule(_init_producer_id),
    "AddPartitionsToTxn": Rule(_add_partitions_to_txn),
    "EndTxn": _on_transactional_id(_Op.WRITE),
    "DescribeTransaction": _on_transactional_id(_Op.DESCRIBE, _describe_transaction_answer),
    "CreateAcls": _on_cluster(_Op.ALTER),
    "DeleteAcls": _on_cluster(_Op.ALTER),
    "DescribeAcls": _on_cluster(_Op.DESCRIBE),
    "WhoAmI": Rule(None),
    "Metadata": Rule(_metadata, _metadata_answer),
    # Consumer groups (issue 27), as Kafka's KafkaApis handlers of the same names.
    "FindCoordinator": Rule(_find_coordinator),
    "JoinGroup": _on_group(_Op.READ),
    "SyncGroup": _on_group(_Op.READ),
    "Heartbeat": _on_group(_Op.READ),
    "LeaveGroup": _on_group(_Op.READ),
    "OffsetCommit": Rule(_offset_commit),
    "OffsetFetch": Rule(_on_group(_Op.DESCRIBE).check, _offset_fetch_answer),
    "ListGroups": Rule(lambda decider, request: None, _list_groups_answer),
    "DescribeGroups": _each_group(_Op.DESCRIBE),
    "DeleteGroups": _each_group(_Op.DELETE),
    "OffsetDelete": Rule(_offset_delete),
    "AddOffsetsToTxn": Rule(_add_offsets_to_txn),
    "TxnOffsetCommit": Rule(_offset_commit),
    # The stream is open; its requests are authorized one by one (issue 14: the servicer's
    # Session handler applies the rule of each request's unary RPC).
    "Session": Rule(None),
}

#: Replication RPC name (replication.proto, servers only) -> its rule: Kafka's inter-broker
#: requests need CLUSTER_ACTION on the cluster.
REPLICATION_RULES: Mapping[str, Rule] = {
    "ReplicaFetchSession": _on_cluster(_Op.CLUSTER_ACTION),
}

#: TransactionMarkers RPC name (transaction_markers.proto, servers only) -> its rule.
TRANSACTION_MARKERS_RULES: Mapping[str, Rule] = {
    "WriteTxnMarkers": _on_cluster(_Op.CLUSTER_ACTION),
    "AllowTxnAppends": _on_cluster(_Op.CLUSTER_ACTION),
    "VerifyTxnAppend": _on_cluster(_Op.CLUSTER_ACTION),
}

OPEN = Rule(None)
_REFLECTION = _on_cluster(_Op.DESCRIBE)


def _refuse_unknown_method(decider: Decider, request: Any) -> None:
    raise NotAuthorizedError(
        "not authorized: this method has no authorization rule", operation="ANY",
        resource=resource_label(_CLUSTER, CLUSTER_NAME),
    )


_UNKNOWN = Rule(_refuse_unknown_method)


def rule_for(
    method: str, rules: Mapping[str, Rule] = RULES, *, reflection_open: bool = False
) -> Rule:
    """The rule of a full method path (``/stratalog.v1.Broker/Produce``). Server reflection
    is open with ``reflection_open`` (the setting that opens it to callers without
    credentials), and needs DESCRIBE on the cluster otherwise."""
    service, _, name = method.lstrip("/").partition("/")
    if service == BROKER_SERVICE:
        return rules.get(name, _UNKNOWN)
    if service == REPLICATION_SERVICE:
        return REPLICATION_RULES.get(name, _UNKNOWN)
    if service == TRANSACTION_MARKERS_SERVICE:
        return TRANSACTION_MARKERS_RULES.get(name, _UNKNOWN)
    if method.startswith(HEALTH_PREFIX):
        return OPEN
    if method.startswith(REFLECTION_PREFIXES):
        return OPEN if reflection_open else _REFLECTION
    return _UNKNOWN


def decide_request(authorizer: Authorizer, identity: CallIdentity, rule: Rule, request: Any
                   ) -> Decider:
    """Whether ``identity`` may make ``request`` under ``rule``: the one decision every front
    end asks for (the gRPC interceptor for a call, the Session stream for each of its
    requests). A rule of one operation on one resource (``single``: Produce, the fetches) is
    decided with one cache lookup; any other by its ``check``. Returns the decider, which the
    rule's ``answer`` filters the response with.

    Raises:
        NotAuthorizedError: refused (``operation`` names what was asked).
        InvalidTopicError: a topic name refused before any decision on it.
    """
    decider = Decider(authorizer, identity)
    single = rule.single
    if single is not None:
        operation, resource_type, field = single
        name = CLUSTER_NAME if field is None else getattr(request, field)
        if not authorizer.authorize(identity, operation, resource_type, name):
            raise decider.refusal(operation, resource_type, name)
    elif rule.check is not None:
        rule.check(decider, request)
    return decider
