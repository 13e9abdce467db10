"""The Broker servicer: broker.proto's RPCs translated to calls on the LogManager, and back.

Each RPC method, named exactly as in broker.proto, does three things: check the request's shape
(the field a bad value came in is named in the error), call the storage engine or the
transaction coordinator, and build the response message. Storage semantics (validation of
batches, offsets, lookups, retention, producer state, the LSO) live in the engine; transactions
in :mod:`stratalog.server.transactions`; proto <-> records translation (records-form Produce,
decoded fetches, topic descriptions) in :mod:`stratalog.server.rpc.translation`; where a Produce's
work runs in :mod:`stratalog.server.append_placement`; errors become statuses in
:mod:`stratalog.server.rpc.status`, the one place that decides them, through :func:`_rpc`.

How a partition is served (leader and epoch checks, the append lock, where an append runs,
transaction verification, the acks=all wait, the long poll's wait and its wake-ups) is the
partition-serving layer's, :class:`stratalog.server.broker.ReplicaManager`: each RPC here makes
one call to it (docs/server.md, "The layers").

Request limits come from :class:`~stratalog.server.settings.Settings` (``max_bytes`` defaults and
caps, the long-poll cap, the Subscribe buffer). Subscribe streams and long polls that wait are
admitted by :class:`~stratalog.server.client_limits.ClientLimits` (per connection, per client,
in all; a refusal names the setting). A Subscribe stream reads its next message only after
``await context.write`` returned, i.e. after gRPC's flow control took the previous one, within
a lease of the server-wide :class:`~stratalog.server.subscribe_budget.SubscribeBudget`, and
holds only the serialized message meanwhile: a reader that stops reading costs the server one
message (twice: gRPC copies it), all of them together at most the budget plus one batch each,
and the streams of one connection at most its share (``subscribe_buffer_bytes_per_connection``):
past it they read nothing, and one that waits longer than ``subscribe_stall_ms_max`` ends
RESOURCE_EXHAUSTED.

Session streams (server/rpc/session.py) carry Produce, fetch and ListOffsets requests by id, each
served by this servicer's method of that RPC, as a unary call is.

Concurrency: event-loop only. The coordinator's requests (they fsync its state log and write
markers), the encoding of large records-form Produce requests and the reads of topic
descriptions go to the executor given at construction; topic admin calls go through the
serving layer's admin lock, so that the LogManager sees one admin operation at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.aio

from stratalog.server.append_placement import holds_compressed_batches
from stratalog.server.broker import ReplicaManager
from stratalog.server.byte_budget import ByteBudget
from stratalog.server.client_limits import (
    ClientLimitExceededError,
    ClientLimits,
    WaitingRpc,
    WaitingRpcKind,
    call_origin,
)
from stratalog.server.cluster.controller import NO_CONTROLLER, ControllerState
from stratalog.server.cluster.errors import (
    CoordinationUnavailableError,
    InvalidReplicationFactorError,
)
from stratalog.server.cluster.membership import BrokerInfo
from stratalog.server.cluster.producer_ids import cluster_producer_id
from stratalog.server.metadata import (
    SINGLE_SERVER_NODE_ID,
    cluster_metadata_response,
    metadata_response,
)
from stratalog.server.rpc import status
from stratalog.server.rpc.decoding import ProduceRequestView, UndecodableRequest
from stratalog.server.rpc.session import RequestHandlers, SessionBudgets, Sessions
from stratalog.server.rpc.subscribe_messages import Built, SharedMessages
from stratalog.server.rpc.translation import (
    PRODUCER_EPOCH_MAX,
    BadRequestError,
    CleanerPositions,
    ProducerFields,
    decode_records_into,
    encode_records,
    slice_batches,
    topic_message,
)
from stratalog.server.security.acl_messages import (
    binding_from_message,
    binding_message,
    filter_from_message,
)
from stratalog.server.security.authentication import peer_host
from stratalog.server.security.errors import SecurityDisabledError
from stratalog.server.security.principal import ANONYMOUS, CallIdentity, current_identity
from stratalog.server.storage.clock import wall_clock_ms
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.errors import (
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.storage.partition_log import IsolationLevel
from stratalog.server.subscribe_budget import Lease, SubscribeBudget
from stratalog.server.topic_name_memo import ValidTopicNames
from stratalog.server.transactions import DEFAULT_TRANSACTION_TIMEOUT_MS
from stratalog.v1 import broker_pb2, broker_pb2_grpc

if TYPE_CHECKING:
    from stratalog.server.broker import Partition
    from stratalog.server.cluster.topic_admin import TopicAdmin
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.security.authorizer import Authorizer
    from stratalog.server.settings import Settings
    from stratalog.server.storage.log_manager import LogManager, TopicDescription
    from stratalog.server.storage.partition_log import FetchedBatches, PartitionLog
    from stratalog.server.transactions import TransactionCoordinator, TransactionMetadata

__all__ = ["BadRequestError", "BrokerService"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# The lowest special ListOffsets target of broker.proto (-1 latest, -2 earliest, -3 max
# timestamp); -1 also stands for "no match" in responses.
_MAX_TIMESTAMP = -3
_NO_MATCH = -1

_FETCH_FORMATS = frozenset(broker_pb2.FetchFormat.values())
_RECORD_BATCHES = broker_pb2.FETCH_FORMAT_RECORD_BATCHES
_ISOLATION_LEVELS = frozenset(broker_pb2.IsolationLevel.values())
# Kafka's acks: none, the leader, all the in-sync replicas.
_ACKS = (0, 1, -1)


# ------------------------------------------------------------------------ request checks


def cleaner_positions(
    log_manager: LogManager, description: TopicDescription
) -> CleanerPositions:
    """Blocking: the cleaner's position in each partition of a compacted topic (empty for
    any other topic; a partition deleted meanwhile is left out)."""
    if not LogConfig.from_mapping(description.configs).is_compacted:
        return {}
    positions = {}
    for p in description.partitions:
        with contextlib.suppress(UnknownTopicOrPartitionError):
            positions[p.partition] = log_manager.cleaner_status(description.name, p.partition)
    return positions


def _single_server_replication_factor(replication_factor: int) -> None:
    """A server without --cluster holds one copy: CreateTopic's 0 (the default) and 1 only."""
    if replication_factor not in (0, 1):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor}: a single server (no --cluster) holds one"
            " copy of each partition; use 0 (the default) or 1"
        )


def _partition(value: int) -> int:
    if value < 0:
        raise BadRequestError("partition", f"must be >= 0, got {value}")
    return value


def _non_negative(field: str, value: int) -> int:
    if value < 0:
        raise BadRequestError(field, f"must be >= 0, got {value}")
    return value


def _enum(field: str, value: int, allowed: frozenset[int]) -> int:
    if value not in allowed:
        raise BadRequestError(field, f"unknown value {value}; one of {sorted(allowed)}")
    return value


def _isolation_level(value: int) -> IsolationLevel:
    # broker.proto's IsolationLevel values are Kafka's, as the engine's are.
    return IsolationLevel(_enum("isolation_level", value, _ISOLATION_LEVELS))


def _transactional_id(value: str) -> str:
    if not value:
        raise BadRequestError("transactional_id", "must not be empty")
    return value


def _producer(producer_id: int, producer_epoch: int) -> tuple[int, int]:
    """The producer id and epoch of a transaction request, range-checked."""
    if producer_id < 0:
        raise BadRequestError("producer_id", f"must be >= 0, got {producer_id}")
    if not 0 <= producer_epoch <= PRODUCER_EPOCH_MAX:
        raise BadRequestError(
            "producer_epoch", f"must be in 0..{PRODUCER_EPOCH_MAX}, got {producer_epoch}"
        )
    return producer_id, producer_epoch


# ------------------------------------------------------------------------ the servicer


def _rpc(stream: bool = False) -> Callable[[Callable[..., Awaitable[Any]]], Any]:
    """Wrap an RPC method: errors to statuses, and the request metrics.

    Request bytes that were not a message (:class:`UndecodableRequest`) and request-shape errors
    (:class:`BadRequestError`) become INVALID_ARGUMENT with their field;
    every other exception goes through :func:`status.abort_with_error` (engine errors to their
    reasons, anything unexpected to INTERNAL, logged). Unary RPCs observe their latency;
    streams count only their outcome.
    """

    def decorate(method: Callable[..., Awaitable[Any]]) -> Any:
        name = method.__name__

        @functools.wraps(method)
        async def wrapper(
            self: BrokerService, request: Any, context: grpc.aio.ServicerContext
        ) -> Any:
            started = time.perf_counter()
            code = "OK"
            try:
                if type(request) is UndecodableRequest:
                    raise BadRequestError(
                        "request", f"not a valid {request.message_type}: {request.error}"
                    )
                return await method(self, request, context)
            except BadRequestError as exc:
                code = "INVALID_ARGUMENT"
                await context.abort_with_status(exc.to_status())
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except grpc.aio.AbortError:
                code = _code_name(context)
                raise
            except Exception as exc:
                mapping = status.classify(exc)
                code = mapping.code.name if mapping is not None else "INTERNAL"
                await status.abort_with_error(context, exc)
            finally:
                elapsed = None if stream else time.perf_counter() - started
                self._metrics.observe_request(name, code, elapsed)

        return wrapper

    return decorate


def _stalled_too_long(
    budget: SubscribeBudget, connection: str, offset: int
) -> ClientLimitExceededError:
    """The error of a Subscribe stream ended because its connection took none of its streams'
    messages (retriable: subscribe again, and read)."""
    return ClientLimitExceededError(
        f"Subscribe stream ended: the streams of this connection ({connection}) hold "
        f"{budget.connection_bytes_max} bytes of messages its client has not read "
        f"(subscribe_buffer_bytes_per_connection), and none was taken for "
        f"{budget.stall_ms_max} ms (subscribe_stall_ms_max); read the streams you open, "
        f"and subscribe again from offset {offset}",
        limit="subscribe_buffer_bytes_per_connection",
    )


def _appended_hook(context: Any) -> Callable[[], None] | None:
    """For a Session request's Produce: what lets the next Produce of its partition on the
    stream go once this one appended (server/rpc/session.py's ``RequestContext.served``; a unary
    call has none)."""
    served = getattr(context, "served", None)
    if served is None:
        return None

    def appended() -> None:
        if not served.done():
            served.set_result(None)

    return appended


def _code_name(context: grpc.aio.ServicerContext) -> str:
    code = context.code()
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


class BrokerService(broker_pb2_grpc.BrokerServicer):
    """broker.proto's Broker service over the partition-serving layer and the transaction
    coordinator.

    Holds the serving layer (:class:`~stratalog.server.broker.ReplicaManager`, which holds the
    LogManager and the partitions), the coordinator, the settings, the metrics, the executor
    for blocking calls, the memo of valid topic names, the limits of waiting RPCs and the
    Subscribe budget, and the Session streams.

    Shutdown: :meth:`begin_shutdown` makes waiting long polls answer with what they have and ends
    Subscribe streams with SHUTTING_DOWN (retriable), so that the server's grace period is spent on
    requests that finish, not on streams that never would. Appends in flight complete.

    Concurrency: event-loop only (grpc.aio calls every method on the loop).
    """

    def __init__(
        self,
        replica_manager: ReplicaManager,
        settings: Settings,
        metrics: ServerMetrics,
        executor: Executor,
        *,
        coordinator: TransactionCoordinator,
        time_ms: Callable[[], int] | None = None,
        topic_names: ValidTopicNames | None = None,
        limits: ClientLimits | None = None,
        subscribe_budget: SubscribeBudget | None = None,
        authorizer: Authorizer | None = None,
        request_interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> None:
        """``time_ms`` is the clock records-form Produce stamps records with (default: the
        wall clock); ``topic_names`` defaults to an empty memo of its own, ``limits`` and
        ``subscribe_budget`` to the settings' limits.
        ``authorizer`` (None: authorization is off) holds the ACLs that the ACL RPCs manage;
        it checks calls in its own interceptor, not here. ``request_interceptors`` are the
        server's interceptors that apply to each request (authorization, quotas: all but
        authentication), which Session requests go through as unary calls do."""
        self._replicas = replica_manager
        self._log_manager = replica_manager.log_manager
        self._placement = replica_manager.placement
        self._coordinator = coordinator
        self._settings = settings
        self._cluster_topic_admin: TopicAdmin | None = None
        #: HOST:PORT clients reach this server at (app.py sets it once the port is bound).
        self.advertised_address = settings.advertised_listen or settings.listen
        self._metrics = metrics
        self._executor = executor
        self._time_ms = time_ms if time_ms is not None else wall_clock_ms
        self._topic_names = topic_names if topic_names is not None else ValidTopicNames()
        self._limits = limits if limits is not None else ClientLimits(
            settings.waiting_rpcs_per_connection_max,
            settings.waiting_rpcs_per_client_max,
            settings.waiting_rpcs_max,
            metrics,
        )
        self._subscribe_budget = subscribe_budget if subscribe_budget is not None else (
            SubscribeBudget(settings.subscribe_buffer_bytes_total, settings.subscribe_buffer_bytes,
                            settings.subscribe_buffer_bytes_per_connection,
                            settings.subscribe_stall_ms_max)
        )
        self._shared_messages = SharedMessages()
        self._authorizer = authorizer
        self._sessions = Sessions(
            RequestHandlers(self, request_interceptors), self._limits, metrics,
            settings.session_requests_in_flight_max,
            SessionBudgets(
                settings.session_buffer_bytes,
                ByteBudget("session_buffer_bytes_total", settings.session_buffer_bytes_total),
                settings.fetch_max_bytes_default,
                settings.fetch_max_bytes_max,
            ),
        )

    # ---------------------------------------------------------------- plumbing

    def take_held_peak_bytes(self) -> int:
        """The most memory held for Session answers and for decompression since the last call
        (twice the bytes charged: a Session answer waits beside gRPC's copy of it, and a
        decompression's output beside its pieces), for the server's heap-trim watch: a burst
        that came and went between two calls shows. Event-loop only."""
        return 2 * (self._sessions.budgets.total.take_peak_bytes()
                    + self._replicas.decompression.take_peak_bytes())

    def _topic(self, name: str, field: str = "topic") -> str:
        """``name`` if it is a valid topic name: the engine's rules, the request's field name."""
        try:
            return self._topic_names.check(name)
        except InvalidTopicError as exc:  # the engine's description of the fault
            raise BadRequestError(field, str(exc), "INVALID_TOPIC") from None

    async def _blocking(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking storage call in the executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(function, *args))

    async def admin(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a LogManager admin call in the executor, one at a time (the serving layer's
        admin lock)."""
        return await self._replicas.admin(function, *args)

    def _fetch_max_bytes(self, requested: int, cap: int | None = None) -> int:
        _non_negative("max_bytes", requested)
        max_bytes = requested or self._settings.fetch_max_bytes_default
        return min(max_bytes, cap if cap is not None else self._settings.fetch_max_bytes_max)

    def _records_read_bytes(self, max_bytes: int) -> int:
        """The bytes a ``max_records`` read may take: the batch holding its offset whole (the
        storage reads only that batch when it holds the records asked for, as a point read's
        does), and beyond it at most ``read_in_executor_min_bytes``, so that such a read is
        small enough to run on the loop, without a thread hop. An answer cut short by it says
        where to go on (``next_offset``), as any fetch."""
        return min(max_bytes, self._settings.read_in_executor_min_bytes)

    def begin_shutdown(self) -> None:
        """Wake every waiter: long polls answer with what they have, streams end.

        Appends in flight go on (they finish within the grace period); only waiting for
        *future* appends stops. Session streams answer what they hold and end (SHUTTING_DOWN).
        """
        self._replicas.begin_shutdown()
        self._sessions.begin_shutdown()

    def _fetch_response(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        offset: int,
        fetched: FetchedBatches,
        fetch_format: int,
        max_bytes: int,
        isolation_level: IsolationLevel,
        matched: tuple[int, int] = (_NO_MATCH, _NO_MATCH),
        max_records: int = 0,
        counts: list[int] | None = None,
    ) -> broker_pb2.FetchResponse:
        """A FetchResponse for ``fetched`` (whole batches read at ``offset`` with ``max_bytes``).
        ``counts`` (if given) receives the records and bytes the answer carries, as the metrics
        counted them.

        With ``max_records`` > 0 the answer holds at most that many records from ``offset``,
        in either format: the stored batches are cut to them first
        (:func:`~stratalog.server.rpc.translation.slice_batches`: record batches re-framed to hold
        just those records, control batches and for READ_COMMITTED aborted ones left out, so
        no aborted transactions come with them), and RECORDS decodes only what was cut.

        Raw batches come with the next offset and record count the read took from their
        headers, and for READ_COMMITTED with the aborted transactions overlapping them (the
        client drops their records, as Kafka's consumer does). Decoded records
        (FETCH_FORMAT_RECORDS) never include control records, and for READ_COMMITTED not the
        records of aborted transactions; they are bounded by ``max_bytes`` too, counting keys
        and values: compressed batches can decode to far more than they store, and a response
        must stay under the gRPC message limit. The batches left out are fetched next time.
        Every response carries the high watermark and the last stable offset, read after the
        data: the high watermark is never below ``next_offset``, nor is the LSO for
        READ_COMMITTED.
        """
        data = fetched.data
        committed = isolation_level == IsolationLevel.READ_COMMITTED
        if max_records:
            return self._partial_fetch_response(
                topic, partition, partition_log, offset, fetched, fetch_format, max_bytes,
                committed, matched, max_records,
            )
        if fetch_format == _RECORD_BATCHES:
            records_out = fetched.records_count
            response = broker_pb2.FetchResponse(
                topic=topic,
                partition=partition,
                record_batches=data,
                high_watermark=partition_log.high_watermark,
                log_start_offset=partition_log.log_start_offset,
                next_offset=fetched.next_offset,
                matched_offset=matched[0],
                matched_timestamp=matched[1],
                last_stable_offset=partition_log.last_stable_offset,
            )
            if committed and fetched.aborted_transactions:
                add = response.aborted_transactions.add
                for txn in fetched.aborted_transactions:
                    add(producer_id=txn.producer_id, first_offset=txn.first_offset)
            self._observe_fetch(topic, records_out, len(data), counts)
            return response
        response = broker_pb2.FetchResponse(
            topic=topic,
            partition=partition,
            matched_offset=matched[0],
            matched_timestamp=matched[1],
        )
        next_offset, records_out, bytes_out = decode_records_into(
            response.records, data, offset, max_bytes,
            fetched.aborted_transactions if committed else None,
        )
        response.high_watermark = partition_log.high_watermark
        response.log_start_offset = partition_log.log_start_offset
        response.last_stable_offset = partition_log.last_stable_offset
        response.next_offset = next_offset
        self._observe_fetch(topic, records_out, bytes_out, counts)
        return response

    def _observe_fetch(
        self, topic: str, records_out: int, bytes_out: int, counts: list[int] | None
    ) -> None:
        self._metrics.observe_fetch(topic, records_out, bytes_out)
        if counts is not None:
            counts[:] = (records_out, bytes_out)

    def _partial_fetch_response(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        offset: int,
        fetched: FetchedBatches,
        fetch_format: int,
        max_bytes: int,
        committed: bool,
        matched: tuple[int, int],
        max_records: int,
    ) -> broker_pb2.FetchResponse:
        """:meth:`_fetch_response` for a ``max_records`` read."""
        sliced = slice_batches(
            fetched.data, offset, max_records, max_bytes,
            fetched.aborted_transactions if committed else None,
        )
        response = broker_pb2.FetchResponse(
            topic=topic,
            partition=partition,
            matched_offset=matched[0],
            matched_timestamp=matched[1],
        )
        next_offset = sliced.next_offset
        if fetch_format == _RECORD_BATCHES:
            response.record_batches = sliced.data
            bytes_out = len(sliced.data)
            records_out = sliced.records_count
        else:
            decoded_next, records_out, bytes_out = decode_records_into(
                response.records, sliced.data, offset, max_bytes
            )
            if bytes_out < len(sliced.data):
                # A whole compressed batch decoded past max_bytes: the rest comes next time.
                next_offset = decoded_next
        response.high_watermark = partition_log.high_watermark
        response.log_start_offset = partition_log.log_start_offset
        response.last_stable_offset = partition_log.last_stable_offset
        response.next_offset = next_offset
        self._metrics.observe_fetch(topic, records_out, bytes_out)
        return response

    # ---------------------------------------------------------------- topics

    def _topic_admin(self) -> TopicAdmin | None:
        """Cluster mode: the topic administration that writes etcd (server/cluster/
        topic_admin.py), made on first use; None for a single server.

        Raises:
            CoordinationUnavailableError: cluster mode, but this server has not joined yet.
        """
        if not self._settings.cluster:
            return None
        node = self._replicas.cluster_node
        if node is None:
            raise CoordinationUnavailableError(
                "this server has not joined its cluster yet (it registers in etcd right after"
                " it starts listening): retry in a moment"
            )
        if self._cluster_topic_admin is None:
            from stratalog.server.cluster.topic_admin import TopicAdmin

            self._cluster_topic_admin = TopicAdmin(
                node, self._log_manager, self._settings.default_replication_factor,
                self._settings.unclean_leader_election_enable,
            )
        return self._cluster_topic_admin

    def _topic_message(
        self, description: TopicDescription, cleaner: CleanerPositions | None = None
    ) -> broker_pb2.TopicDescription:
        # Log directories by their index in log_dirs: clients never learn the server's paths.
        return topic_message(description, self._log_manager.log_dirs, cleaner)

    def _described(self, name: str) -> tuple[TopicDescription, CleanerPositions]:
        """Blocking: a topic and, if it is compacted, its cleaner's position per partition."""
        description = self._log_manager.describe_topic(name)
        return description, cleaner_positions(self._log_manager, description)

    def _listed(self) -> list[tuple[TopicDescription, CleanerPositions]]:
        """Blocking: every topic, each with its cleaner's positions (as :meth:`_described`)."""
        return [
            (description, cleaner_positions(self._log_manager, description))
            for description in self._log_manager.list_topics()
        ]

    def _check_partition_count(self, field: str, count: int, reason: str) -> None:
        """A topic's partition count from a request: 1..topic_partitions_max, else
        INVALID_ARGUMENT naming ``field`` with ``reason``."""
        if not 1 <= count <= self._settings.topic_partitions_max:
            raise BadRequestError(
                field, f"must be in 1..{self._settings.topic_partitions_max}, got {count}",
                reason,
            )

    @_rpc()
    async def CreateTopic(
        self, request: broker_pb2.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CreateTopicResponse:
        name = self._topic(request.name, "name")
        self._check_partition_count("partitions", request.partitions, "INVALID_TOPIC")
        description = await self._create_topic(
            name, request.partitions, dict(request.configs), request.replication_factor
        )
        return broker_pb2.CreateTopicResponse(topic=self._topic_message(description))

    async def _create_topic(self, name: str, partitions: int, configs: dict[str, str],
                            replication_factor: int) -> TopicDescription:
        """A new topic, through etcd in cluster mode, else in the LogManager."""
        topic_admin = self._topic_admin()
        if topic_admin is None:
            _single_server_replication_factor(replication_factor)
            return await self.admin(self._log_manager.create_topic, name, partitions, configs)
        return await topic_admin.create_topic(name, partitions, configs, replication_factor)

    async def _maybe_create_topics(self, names: list[str]) -> None:
        """Kafka's ``auto.create.topics.enable`` for a Metadata request that allows it: create
        each topic named that does not exist, with ``num_partitions`` partitions and the
        default replication factor, if the caller may CREATE it (with an authorizer on). A
        topic it may not create is left unknown: the answer then says so, as without the
        setting. Two callers creating one topic at once: the second finds it there."""
        from stratalog.server.security.authorizer import may_create_topic

        node = self._replicas.cluster_node
        for name in dict.fromkeys(names):
            if node is not None:
                exists = name in node.view.topics
            else:
                exists = self._log_manager.has_topic(name)
            if exists:
                continue
            if self._authorizer is not None:
                identity = current_identity.get(None)
                if identity is None or not may_create_topic(self._authorizer, identity, name):
                    continue
            try:
                await self._create_topic(name, self._settings.num_partitions, {}, 0)
            except TopicAlreadyExistsError:
                continue  # created meanwhile by another request
            logger.info("created topic %s automatically (auto_create_topics_enable): %d "
                        "partition(s)", name, self._settings.num_partitions)

    @_rpc()
    async def DeleteTopic(
        self, request: broker_pb2.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteTopicResponse:
        name = self._topic(request.name, "name")
        topic_admin = self._topic_admin()
        if topic_admin is not None and await topic_admin.delete_topic(name):
            return broker_pb2.DeleteTopicResponse()  # each replica deletes its local log
        await self._replicas.delete_partitions(name)
        return broker_pb2.DeleteTopicResponse()

    @_rpc()
    async def ListTopics(
        self, request: broker_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListTopicsResponse:
        topics = await self.admin(self._listed)
        topic_admin = self._topic_admin()
        if topic_admin is not None:
            cleaners = {description.name: cleaner for description, cleaner in topics}
            topics = [
                (description, cleaners.get(description.name, {}))
                for description in topic_admin.listed([d for d, _ in topics])
            ]
        return broker_pb2.ListTopicsResponse(
            topics=[self._topic_message(t, cleaner) for t, cleaner in topics]
        )

    @_rpc()
    async def DescribeTopic(
        self, request: broker_pb2.DescribeTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeTopicResponse:
        name = self._topic(request.name, "name")
        topic_admin = self._topic_admin()
        if topic_admin is not None and topic_admin.knows(name):
            try:
                local, cleaner = await self.admin(self._described, name)
            except UnknownTopicOrPartitionError:  # this server does not hold it (yet)
                local, cleaner = None, {}
            description = topic_admin.describe(name, local)
        else:
            description, cleaner = await self.admin(self._described, name)
        return broker_pb2.DescribeTopicResponse(topic=self._topic_message(description, cleaner))

    @_rpc()
    async def AlterTopicConfigs(
        self, request: broker_pb2.AlterTopicConfigsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AlterTopicConfigsResponse:
        name = self._topic(request.name, "name")
        both = set(request.set) & set(request.delete)
        if both:
            raise BadRequestError(
                "delete", f"configs both set and deleted: {sorted(both)}", "INVALID_CONFIG"
            )
        description = await self.admin(
            self._log_manager.alter_topic_configs, name, dict(request.set), list(request.delete)
        )
        return broker_pb2.AlterTopicConfigsResponse(topic=self._topic_message(description))

    @_rpc()
    async def CreatePartitions(
        self, request: broker_pb2.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CreatePartitionsResponse:
        name = self._topic(request.name, "name")
        self._check_partition_count("count", request.count, "INVALID_PARTITIONS")
        if self._settings.cluster:
            # The controller would have to assign the new partitions' replicas and write their
            # first states to etcd (topic_admin.py); not built yet: refused, not half done.
            raise BadRequestError(
                "name",
                "CreatePartitions is not supported in cluster mode yet: create a topic with the "
                "partitions it needs (docs/cluster.md)",
            )
        description = await self.admin(self._log_manager.create_partitions, name, request.count)
        return broker_pb2.CreatePartitionsResponse(topic=self._topic_message(description))

    # ---------------------------------------------------------------- produce

    def _encoder(self, request: ProduceRequestView) -> Callable[[], Awaitable[bytes]]:
        """The records of a records-form Produce as one batch, encoded when called: on the
        loop when small, else in the executor. The server's own batch decompresses to about
        the request: it is sized by it."""

        async def encode() -> bytes:
            records = request.records
            producer = ProducerFields.of_request(
                request.producer_id, request.producer_epoch, request.base_sequence,
                request.transactional,
            )
            if self._placement.encodes_inline(len(records), request.request_bytes):
                return encode_records(records, request.compression, self._time_ms(), producer)
            return await self._blocking(
                encode_records, records, request.compression, self._time_ms(), producer
            )

        return encode

    @_rpc()
    async def Produce(
        self, request: ProduceRequestView, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ProduceResponse:
        # ``request`` comes from decoding.parse_produce_request: its record_batches is a
        # view of the received message, appended without a copy.
        topic = self._topic(request.topic)
        partition = _partition(request.partition)
        has_records = len(request.records) > 0
        record_batches = request.record_batches
        has_batches = len(record_batches) > 0
        if has_records == has_batches:
            raise BadRequestError(
                "records",
                "set exactly one of records and record_batches "
                + ("(both are set)" if has_records else "(neither is set)"),
            )
        if has_batches and request.producer_id is not None:
            raise BadRequestError(
                "producer_id",
                "set only with records: record_batches carry their producer id, epoch and "
                "sequence in their own headers",
            )
        acks = request.acks
        if acks not in _ACKS:
            raise BadRequestError("acks", f"must be 0, 1 or -1 (all), got {acks}")
        records: bytes | memoryview | Callable[[], Awaitable[bytes]]
        if has_records:
            # Encoded once the serving layer found the partition served here.
            records, size_bytes, compressed = self._encoder(request), request.request_bytes, False
        else:
            records = record_batches
            size_bytes, compressed = len(record_batches), holds_compressed_batches(record_batches)
        info = await self._replicas.append_records(
            topic, partition, acks, records, size_bytes=size_bytes, compressed=compressed,
            flush=request.flush, appended=_appended_hook(context),
        )
        self._metrics.observe_produce(topic, info.record_count, info.size_bytes)
        return broker_pb2.ProduceResponse(
            base_offset=info.first_offset,
            last_offset=info.last_offset,
            log_append_time=info.log_append_time,
            log_start_offset=info.log_start_offset,
            record_count=info.record_count,
            duplicate=info.duplicate,
        )

    # ---------------------------------------------------------------- fetch

    @_rpc()
    async def FetchByOffset(
        self, request: broker_pb2.FetchByOffsetRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.FetchResponse:
        self._placement.read_served()
        topic = self._topic(request.topic)
        partition = _partition(request.partition)
        max_bytes = self._fetch_max_bytes(request.max_bytes)
        max_wait_ms = min(
            _non_negative("max_wait_ms", request.max_wait_ms), self._settings.fetch_max_wait_ms_max
        )
        min_bytes = _non_negative("min_bytes", request.min_bytes)
        fetch_format = _enum("format", request.format, _FETCH_FORMATS)
        isolation_level = _isolation_level(request.isolation_level)
        max_records = _non_negative("max_records", request.max_records)
        if max_records:
            max_bytes = self._records_read_bytes(max_bytes)
        offset = request.offset
        admit_wait = None
        if max_wait_ms:
            # A long poll takes a slot of its client's waiting RPCs when it first waits (one
            # that finds its data at once never does), and gives it back when it answers. A
            # Session request gives its charge of the session's byte budgets back meanwhile
            # (server/rpc/session.py's ``RequestContext.pause_charge``; a unary call has none).
            def admit_wait() -> WaitingRpc:
                return self._limits.admit(call_origin(context), WaitingRpcKind.LONG_POLL)

        partition_log, fetched = await self._replicas.fetch_records(
            topic, partition, offset, max_bytes, isolation_level, max_records=max_records,
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, admit_wait=admit_wait,
            pause=getattr(context, "pause_charge", None),
            resume=getattr(context, "resume_charge", None),
        )
        return self._fetch_response(
            topic, partition, partition_log, offset, fetched, fetch_format, max_bytes,
            isolation_level, max_records=max_records,
        )

    @_rpc()
    async def FetchByTimestamp(
        self, request: broker_pb2.FetchByTimestampRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.FetchResponse:
        self._placement.read_served()
        topic = self._topic(request.topic)
        partition = _partition(request.partition)
        timestamp = _non_negative("timestamp", request.timestamp)
        max_bytes = self._fetch_max_bytes(request.max_bytes)
        fetch_format = _enum("format", request.format, _FETCH_FORMATS)
        isolation_level = _isolation_level(request.isolation_level)
        max_records = _non_negative("max_records", request.max_records)
        if max_records:
            max_bytes = self._records_read_bytes(max_bytes)
        partition_log, found, fetched = await self._replicas.fetch_by_timestamp(
            topic, partition, timestamp, max_bytes, isolation_level, max_records
        )
        if found is None:
            return self._fetch_response(
                topic, partition, partition_log, fetched.next_offset, fetched, fetch_format,
                max_bytes, isolation_level, max_records=max_records,
            )
        return self._fetch_response(
            topic, partition, partition_log, found.offset, fetched, fetch_format, max_bytes,
            isolation_level, (found.offset, found.timestamp), max_records,
        )

    @_rpc()
    async def ListOffsets(
        self, request: broker_pb2.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListOffsetsResponse:
        self._placement.read_served()
        topic = self._topic(request.topic)
        partition = _partition(request.partition)
        target = request.timestamp
        if target < _MAX_TIMESTAMP:
            raise BadRequestError(
                "timestamp", f"must be -2 (earliest), -1 (latest), -3 (max timestamp) or a "
                f"timestamp >= 0, got {target}"
            )
        isolation_level = _isolation_level(request.isolation_level)
        found = self._replicas.offset_for_timestamp(topic, partition, target, isolation_level)
        if found is None:
            return broker_pb2.ListOffsetsResponse(offset=_NO_MATCH, timestamp=_NO_MATCH)
        return broker_pb2.ListOffsetsResponse(offset=found.offset, timestamp=found.timestamp)

    @_rpc(stream=True)
    async def Subscribe(
        self, request: broker_pb2.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> None:
        topic = self._topic(request.topic)
        partition = _partition(request.partition)
        max_bytes = self._fetch_max_bytes(request.max_bytes, self._settings.subscribe_buffer_bytes)
        fetch_format = _enum("format", request.format, _FETCH_FORMATS)
        isolation_level = _isolation_level(request.isolation_level)
        start = request.WhichOneof("start")
        if start is None:
            raise BadRequestError("start", "set offset or timestamp")
        timestamp = (_non_negative("timestamp", request.timestamp) if start == "timestamp"
                     else None)
        partition_log, gate, found, offset = self._replicas.subscription_start(
            topic, partition, isolation_level, request.offset, timestamp
        )
        matched: tuple[int, int] | None = None
        if timestamp is not None:
            matched = (found.offset, found.timestamp) if found is not None else (
                _NO_MATCH, _NO_MATCH)
        # Admitted once the request is known good: a bad one is INVALID_ARGUMENT, not a limit.
        with self._limits.admit(call_origin(context), WaitingRpcKind.SUBSCRIBE):
            self._metrics.subscribers.inc()
            try:
                await self._follow(
                    context, topic, partition, partition_log, gate, offset, max_bytes,
                    fetch_format, isolation_level, matched,
                )
            finally:
                self._metrics.subscribers.dec()

    async def _follow(
        self,
        context: grpc.aio.ServicerContext,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        gate: Partition,
        offset: int,
        max_bytes: int,
        fetch_format: int,
        isolation_level: IsolationLevel,
        matched: tuple[int, int] | None,
    ) -> None:
        """Subscribe's loop: read a message within a lease of the budget, write it, read on;
        wait for an append at the end. Returns only by an exception (the stream ends)."""
        budget = self._subscribe_budget
        connection = context.peer() or "unknown"
        while True:
            partition_log, gate = self._replicas.ensure_following(
                topic, partition, partition_log, gate)
            signal = gate.signal()
            lease = budget.lease(max_bytes, connection)
            if lease is None:
                # The connection's streams hold its share: read nothing until one of its
                # messages is taken; a connection that takes none is cut off (its waiting
                # streams hold nothing gRPC would keep: subscribe_budget.py).
                try:
                    await asyncio.wait_for(asyncio.shield(budget.room(connection)),
                                           budget.stall_ms_max / 1000)
                except TimeoutError:
                    raise _stalled_too_long(budget, connection, offset) from None
                continue
            # Streams making the same reading send one message (subscribe_messages.py); the
            # first one's timestamp match is its own.
            share = None if matched is not None else self._shared_messages.join(
                (topic, partition, offset, lease.max_bytes, fetch_format, isolation_level,
                 signal))
            try:
                built = None if share is None or share.builder else await share.wait()
                if built is None:
                    built = await self._subscribe_message(
                        topic, partition, partition_log, offset, lease, fetch_format,
                        isolation_level, matched or (_NO_MATCH, _NO_MATCH),
                    )
                    if share is not None and share.builder:
                        share.publish(built)
                elif built.message is not None:
                    self._metrics.observe_fetch(topic, built.records_out, built.bytes_out)
                message, offset, read_any = built.message, built.next_offset, built.read_any
                del built
                if message is not None:
                    lease.hold(len(message))
                    self._placement.read_served()
                    # Flow control: returns once gRPC took the message; only then read on.
                    # The serialized bytes (shared by the streams of this reading) and gRPC's
                    # copy are all the stream holds meanwhile.
                    await context.write(message)
                    matched = None  # the match is reported in the first message only
                    del message
            finally:
                if share is not None:
                    share.release()
                lease.release()
            if not read_any:
                await gate.wait(signal, None)  # idle: no lease, no message, only this task

    async def _subscribe_message(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        offset: int,
        lease: Lease,
        fetch_format: int,
        isolation_level: IsolationLevel,
        matched: tuple[int, int],
    ) -> Built:
        """The next Subscribe message from ``offset``, serialized, within ``lease``: the
        message, or None when there is nothing to send; the offset to read next; whether
        anything was read at all, so that the stream waits only at the end of what it may
        read; and the records and bytes it carries.

        Serialized here, so that the batches read and the protobuf message are garbage when
        this returns, before the stream waits for gRPC to take the message (Subscribe's
        serializer passes bytes through: :func:`stratalog.server.rpc.decoding.add_broker_service`).
        """
        fetched = await self._replicas.read(
            topic, partition, partition_log, offset, lease.max_bytes, isolation_level
        )
        if not fetched.data:
            return Built(None, offset, False, 0, 0)
        counts: list[int] = []
        response = self._fetch_response(
            topic, partition, partition_log, offset, fetched, fetch_format, lease.max_bytes,
            isolation_level, matched, counts=counts,
        )
        if not (response.records or response.record_batches):
            # Left empty by the filters (aborted records, markers): move past, send nothing.
            return Built(None, response.next_offset, True, 0, 0)
        records_out, bytes_out = counts
        return Built(response.SerializeToString(), response.next_offset, True, records_out,
                     bytes_out)

    # ---------------------------------------------------------------- sessions

    @_rpc(stream=True)
    async def Session(
        self, request_iterator: Any, context: grpc.aio.ServicerContext
    ) -> None:
        # Each request is served by this servicer's method of its RPC, as the interceptors wrap
        # it (server/rpc/session.py); the stream only carries them.
        await self._sessions.serve(context)

    # ---------------------------------------------------------------- delete records

    @_rpc()
    async def DeleteRecords(
        self, request: broker_pb2.DeleteRecordsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteRecordsResponse:
        topic = self._topic(request.topic)
        partition = _partition(request.partition)
        before_offset = request.before_offset
        if before_offset < -1:
            raise BadRequestError(
                "before_offset", f"must be >= 0, or -1 for the high watermark, got {before_offset}"
            )
        log_start_offset = await self._replicas.delete_records(topic, partition, before_offset)
        return broker_pb2.DeleteRecordsResponse(log_start_offset=log_start_offset)

    # ---------------------------------------------------------------- compaction

    @_rpc()
    async def CleanPartition(
        self, request: broker_pb2.CleanPartitionRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CleanPartitionResponse:
        topic = self._topic(request.topic)
        partition = _partition(request.partition)
        result = await self._replicas.clean_partition(topic, partition)
        return broker_pb2.CleanPartitionResponse(
            first_dirty_offset_before=result.first_dirty_offset_before,
            end_offset=result.end_offset,
            bytes_read=result.bytes_read,
            bytes_written=result.bytes_written,
            records_read=result.records_read,
            records_kept=result.records_kept,
            segments_before=result.segments_before,
            segments_after=result.segments_after,
            duration_ms=result.duration_ms,
        )

    # ---------------------------------------------------------------- cluster

    @_rpc()
    async def Metadata(
        self, request: broker_pb2.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.MetadataResponse:
        topics = [self._topic(name, "topics") for name in request.topics]
        if request.allow_auto_topic_creation and topics and self._settings.auto_create_topics_enable:
            await self._maybe_create_topics(topics)
        node = self._replicas.cluster_node
        if node is not None:
            return cluster_metadata_response(node.node_id, node.brokers, node.controller,
                                             node.view.topics, node.view.partitions, topics)
        if self._settings.cluster:
            # Between the bind and the registration (app.py): nothing known of the cluster yet.
            node_id, brokers, controller = self._settings.node_id, [], NO_CONTROLLER
        else:
            node_id = SINGLE_SERVER_NODE_ID
            brokers = [BrokerInfo(node_id, self.advertised_address)]
            controller = ControllerState(node_id, 0)
        return await self._blocking(
            metadata_response, self._log_manager, node_id, brokers, controller, topics
        )

    # ---------------------------------------------------------------- transactions

    @_rpc()
    async def InitProducerId(
        self, request: broker_pb2.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.InitProducerIdResponse:
        transactional_id: str | None = None
        if request.HasField("transactional_id"):
            if not request.transactional_id:
                raise BadRequestError(
                    "transactional_id",
                    "must not be empty; leave it unset for an idempotent producer",
                )
            transactional_id = request.transactional_id
            if self._settings.cluster:
                # The coordinator's state and its markers live on one server's disk; in a
                # cluster they would need a replicated __transaction_state (docs/cluster.md).
                raise BadRequestError(
                    "transactional_id",
                    "transactions are not supported in cluster mode yet; leave it unset for an"
                    " idempotent producer",
                )
        # 0 is proto3's unset: Kafka's producer default. A negative timeout is the
        # coordinator's to refuse (INVALID_TRANSACTION_TIMEOUT, with the allowed range).
        timeout_ms = request.transaction_timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS
        producer = await self._blocking(
            self._coordinator.init_producer_id, transactional_id, timeout_ms
        )
        producer_id = producer.producer_id
        if self._settings.cluster:
            producer_id = cluster_producer_id(self._settings.node_id, producer_id)
        return broker_pb2.InitProducerIdResponse(
            producer_id=producer_id, producer_epoch=producer.producer_epoch
        )

    @_rpc()
    async def AddPartitionsToTxn(
        self, request: broker_pb2.AddPartitionsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AddPartitionsToTxnResponse:
        transactional_id = _transactional_id(request.transactional_id)
        producer_id, producer_epoch = _producer(request.producer_id, request.producer_epoch)
        count = len(request.partitions)
        if not count:
            raise BadRequestError("partitions", "add at least one partition")
        limit = self._settings.transaction_partitions_max
        if count > limit:
            raise BadRequestError(
                "partitions", f"{count} partitions exceed transaction_partitions_max={limit}"
            )
        partitions = []
        for index, item in enumerate(request.partitions):
            topic = self._topic(item.topic, f"partitions[{index}].topic")
            if item.partition < 0:
                raise BadRequestError(
                    f"partitions[{index}].partition", f"must be >= 0, got {item.partition}"
                )
            # Only existing partitions join a transaction (Kafka answers
            # UNKNOWN_TOPIC_OR_PARTITION): a marker could never be written to another.
            self._log_manager.get_log(topic, item.partition)
            partitions.append((topic, item.partition))
        await self._blocking(
            self._coordinator.add_partitions_to_txn,
            transactional_id, producer_id, producer_epoch, partitions,
        )
        return broker_pb2.AddPartitionsToTxnResponse()

    @_rpc()
    async def EndTxn(
        self, request: broker_pb2.EndTxnRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.EndTxnResponse:
        transactional_id = _transactional_id(request.transactional_id)
        producer_id, producer_epoch = _producer(request.producer_id, request.producer_epoch)
        # The markers are written (and their partitions' readers woken) before this returns.
        await self._blocking(
            functools.partial(self._coordinator.end_txn, commit=request.commit),
            transactional_id, producer_id, producer_epoch,
        )
        return broker_pb2.EndTxnResponse()

    @_rpc()
    async def DescribeTransaction(
        self, request: broker_pb2.DescribeTransactionRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeTransactionResponse:
        transactional_id = _transactional_id(request.transactional_id)
        # In the pool: the state's lock is held across the state log's fsyncs.
        metadata = await self._blocking(self._coordinator.describe_transaction, transactional_id)
        return _transaction_message(metadata)

    # ---------------------------------------------------------------- security

    @_rpc()
    async def WhoAmI(
        self, request: broker_pb2.WhoAmIRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.WhoAmIResponse:
        # The authentication interceptor decided the identity; without one installed (a test
        # servicer) the caller is anonymous.
        identity = current_identity.get(None)
        if identity is None:
            identity = CallIdentity(ANONYMOUS, peer_host(context.peer()))
        return broker_pb2.WhoAmIResponse(
            principal=str(identity.principal),
            authenticated_by=identity.authenticated_by,
            host=identity.host,
        )

    # ---------------------------------------------------------------- ACLs

    def _acl_authorizer(self) -> Authorizer:
        if self._authorizer is None:
            raise SecurityDisabledError(
                "this server has no authorizer (authorizer = \"none\"), so ACLs would have no"
                " effect and none are stored; start it with authorizer = \"acl\" (and"
                " super_users) to manage them"
            )
        return self._authorizer

    @_rpc()
    async def CreateAcls(
        self, request: broker_pb2.CreateAclsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CreateAclsResponse:
        authorizer = self._acl_authorizer()
        await authorizer.create_acls([binding_from_message(b) for b in request.creations])
        return broker_pb2.CreateAclsResponse()

    @_rpc()
    async def DeleteAcls(
        self, request: broker_pb2.DeleteAclsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteAclsResponse:
        authorizer = self._acl_authorizer()
        deleted = await authorizer.delete_acls([filter_from_message(f) for f in request.filters])
        return broker_pb2.DeleteAclsResponse(deleted=[binding_message(b) for b in deleted])

    @_rpc()
    async def DescribeAcls(
        self, request: broker_pb2.DescribeAclsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeAclsResponse:
        authorizer = self._acl_authorizer()
        acls = authorizer.describe_acls(filter_from_message(request.filter))
        return broker_pb2.DescribeAclsResponse(acls=[binding_message(b) for b in acls])


def _transaction_message(
    metadata: TransactionMetadata,
) -> broker_pb2.DescribeTransactionResponse:
    """The coordinator's metadata of one transactional id as DescribeTransaction answers it,
    with Kafka's state names, the partitions sorted, and no start time when no transaction is
    open (broker.proto's contract; the metadata keeps the last one's)."""
    is_open = not metadata.state.is_complete_or_empty
    return broker_pb2.DescribeTransactionResponse(
        transactional_id=metadata.transactional_id,
        producer_id=metadata.producer_id,
        producer_epoch=metadata.producer_epoch,
        state=metadata.state.kafka_name,
        transaction_timeout_ms=metadata.txn_timeout_ms,
        transaction_start_time_ms=metadata.txn_start_timestamp_ms if is_open else -1,
        last_update_time_ms=metadata.txn_last_update_timestamp_ms,
        partitions=[
            broker_pb2.TopicPartition(topic=topic, partition=partition)
            for topic, partition in sorted(metadata.partitions)
        ],
    )
