"""The asyncio client: one method per Broker RPC, over one grpc.aio channel.

``Client("127.0.0.1:50051")`` opens a channel (lazily: nothing connects until the first call),
and each method builds the request with :mod:`stratalog.client.wire` (which checks every
argument first), awaits the RPC, and returns plain values from :mod:`stratalog.client.types`.
A failed RPC raises the :mod:`stratalog.client.errors` exception for its status and
``ErrorInfo`` reason, never a bare ``grpc.RpcError``; ``error.retriable`` says whether sending
the same request again may succeed. The client itself never retries: the
:class:`~stratalog.client.Producer` and :class:`~stratalog.client.Consumer` do, where it is safe.

Sessions: by default, Produce, FetchByOffset, FetchByTimestamp and ListOffsets travel on one
long-lived ``Session`` stream per Client (:mod:`stratalog.client.session`), opened at the first
of them, each request matched to its answer by id: a message on an open stream costs a fraction
of a unary call. Their results and errors are the unary calls' own. ``sessions=False`` sends
them as unary calls, as every other RPC always is; a server without the Session RPC, or one that
refuses the stream for the client's limit of waiting RPCs, gets unary calls too (the requests
were not read: they are sent again as unary calls). A broken stream (a server restart) fails
its requests in flight with the stream's retriable error, and the next request opens a new one.

Deadlines: every call gets ``timeout_s`` (per call, overridable); a long-poll fetch gets its
``max_wait_ms`` on top, so the deadline never cuts a wait the server was asked to do.
Subscribe streams and sessions have no deadline of their own unless one is passed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import grpc
import grpc.aio

from stratalog.records import Compression
from stratalog.v1 import broker_pb2, broker_pb2_grpc

from . import wire
from .acls import AclBinding, AclBindingFilter
from .credentials import Credentials, TlsConfig, channel_security
from .errors import BrokerUnavailableError, from_rpc_error
from .session import ClientSession, SessionRefusedError
from .types import (
    CleaningResult,
    ClusterMetadata,
    FetchResult,
    Identity,
    OffsetAndTimestamp,
    ProduceResult,
    ProducerIdAndEpoch,
    ProducerRecord,
    TopicInfo,
    TopicPartition,
    TransactionDescription,
)
from .wire import FetchFormat, IsolationLevel

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "RECONNECT_BACKOFF_MAX_MS",
    "RECONNECT_BACKOFF_MS",
    "SESSION_RETRY_AFTER_S",
    "Client",
    "channel_options",
    "log_throttle",
]

logger = logging.getLogger(__name__)

#: Largest gRPC message sent or received, both ways. Fetch responses and produce requests of
#: several MiB are the client's normal traffic; gRPC's own 4 MiB receive default is too small.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

#: Deadline of each unary call unless the call passes its own (``timeout_s=None``: none).
DEFAULT_TIMEOUT_S = 30.0

#: After the server refused a session for the client's limit of waiting RPCs, requests go as
#: unary calls for this long before a session is tried again.
SESSION_RETRY_AFTER_S = 5.0

# A SessionRequest's bytes beyond its unary request: the id and the member's tag and length.
_SESSION_REQUEST_OVERHEAD_BYTES = 32

# The SessionRequest member of each RPC a session carries, and its unary response class.
_PRODUCE = (broker_pb2.SessionRequest.PRODUCE_FIELD_NUMBER, broker_pb2.ProduceResponse)
_FETCH_BY_OFFSET = (broker_pb2.SessionRequest.FETCH_BY_OFFSET_FIELD_NUMBER,
                    broker_pb2.FetchResponse)
_FETCH_BY_TIMESTAMP = (broker_pb2.SessionRequest.FETCH_BY_TIMESTAMP_FIELD_NUMBER,
                       broker_pb2.FetchResponse)
_LIST_OFFSETS = (broker_pb2.SessionRequest.LIST_OFFSETS_FIELD_NUMBER,
                 broker_pb2.ListOffsetsResponse)

_UNSET: Any = object()


#: First and largest wait of gRPC before it connects again after a failed connection (Kafka's
#: reconnect.backoff.ms and reconnect.backoff.max.ms are 50 ms and 1 s). gRPC's own defaults
#: (1 s growing to 120 s) would keep a channel failing calls at once for up to two minutes after
#: its server came back, whatever the Producer's retries and delivery timeout.
RECONNECT_BACKOFF_MS = 100
RECONNECT_BACKOFF_MAX_MS = 1000


def channel_options(
    max_message_bytes: int, options: Sequence[tuple[str, Any]] = ()
) -> list[tuple[str, Any]]:
    """gRPC channel arguments: message size limits and reconnect backoff first, then the
    caller's (which win)."""
    wire.check_int(max_message_bytes, "max_message_bytes", 1024, wire.INT32_MAX)
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
        *options,
    ]


def log_throttle(what: str, topic: str, partition: int, throttle_time_ms: int) -> None:
    """Log (DEBUG) an answer the server held back for the principal's byte-rate quota; the
    result's ``throttle_time_ms`` says it too."""
    if throttle_time_ms:
        logger.debug("%s %s-%d: the server held the answer back %d ms (byte-rate quota)",
                     what, topic, partition, throttle_time_ms)


def check_timeout(timeout_s: object, name: str = "timeout_s") -> float | None:
    """``None`` (no deadline) or a positive number of seconds."""
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise TypeError(f"{name} must be a number of seconds or None, got {timeout_s!r}")
    if not timeout_s > 0:
        raise ValueError(f"{name} must be > 0, got {timeout_s}")
    return float(timeout_s)


class Client:
    """An asyncio connection to one stratalog server: every RPC of the Broker service.

    Holds one ``grpc.aio`` channel (HTTP/2, multiplexing every concurrent call) and the default
    deadline. Use it as ``async with Client(target) as client:`` or call :meth:`close`.
    Event-loop only: create and use it on one running loop. Concurrent calls from many tasks are
    fine (that is what the channel multiplexes). Holds no other state, so a crash loses nothing.

    Args:
        target: gRPC target, e.g. ``"127.0.0.1:50051"`` or ``"dns:///broker:50051"``.
        timeout_s: default deadline of each unary call in seconds; ``None`` for none.
        max_message_bytes: largest message sent or received.
        credentials: raw ``grpc.ssl_channel_credentials(...)`` for TLS; ``None`` for plaintext
            (or ``tls``).
        tls: TLS towards the server (:class:`~stratalog.client.credentials.TlsConfig`): the CA
            to trust and, for mTLS, the client certificate.
        auth: a user and password or a token
            (:class:`~stratalog.client.credentials.Credentials`), sent with every call; refused
            without TLS unless the credentials allow plaintext.
        options: more gRPC channel arguments, e.g. ``[("grpc.keepalive_time_ms", 30000)]``.
        sessions: carry Produce, the fetches and ListOffsets on a Session stream (the
            default); ``False``: unary calls for every RPC.
    """

    def __init__(
        self,
        target: str,
        *,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        tls: TlsConfig | None = None,
        auth: Credentials | None = None,
        sessions: bool = True,
    ) -> None:
        if not isinstance(target, str) or not target:
            raise TypeError("target must be a non-empty str such as '127.0.0.1:50051'")
        self._target = target
        self._timeout_s = check_timeout(timeout_s)
        credentials, tls_options, self._metadata = channel_security(
            target, tls, auth, credentials
        )
        channel_args = channel_options(max_message_bytes, [*tls_options, *options])
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(target, options=channel_args)
        else:
            self._channel = grpc.aio.secure_channel(target, credentials, options=channel_args)
        self._stub = broker_pb2_grpc.BrokerStub(self._channel)
        if not isinstance(sessions, bool):
            raise TypeError(f"sessions must be a bool, got {sessions!r}")
        self._sessions = sessions
        self._session: ClientSession | None = None
        self._session_retry_at = 0.0
        self._request_bytes_max: int | None = None

    @property
    def target(self) -> str:
        """The target string the channel was opened with."""
        return self._target

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def sessions(self) -> bool:
        """Whether Produce, the fetches and ListOffsets go on a Session stream now (False when
        turned off, or after the server refused one: see the module docstring)."""
        return self._sessions and time.monotonic() >= self._session_retry_at

    async def close(self, grace_s: float | None = None) -> None:
        """Close the channel; calls still running are cancelled after ``grace_s`` seconds,
        requests on the session at once."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        await self._channel.close(grace_s)

    async def wait_ready(self, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Wait until the channel is connected; ``BrokerUnavailableError`` after ``timeout_s``."""
        try:
            if timeout_s is None:
                await self._channel.channel_ready()
            else:
                await asyncio.wait_for(self._channel.channel_ready(), timeout_s)
        except TimeoutError:
            raise BrokerUnavailableError(
                f"no connection to {self._target} within {timeout_s} s",
                code=grpc.StatusCode.UNAVAILABLE,
            ) from None

    def _deadline(self, timeout_s: Any, extra_ms: int = 0) -> float | None:
        timeout = self._timeout_s if timeout_s is _UNSET else check_timeout(timeout_s)
        if timeout is None:
            return None
        return timeout + extra_ms / 1000.0

    async def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        try:
            return await method(request, timeout=timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err

    async def _request(
        self, rpc: tuple[int, Any], unary: Any, request: Any, timeout: float | None
    ) -> Any:
        """``request`` on the session (opened if there is none), or as the unary call
        ``unary`` when sessions are off, the server refused the stream, or the request is over
        the server's largest (learnt when one broke a stream: a unary call fails alone)."""
        if self._sessions and time.monotonic() >= self._session_retry_at:
            session = self._session
            if session is None or session.closed:
                if session is not None and session.request_bytes_max is not None:
                    self._request_bytes_max = session.request_bytes_max
                session = self._session = ClientSession(self._channel, self._metadata)
            body = request.SerializeToString()
            limit = self._request_bytes_max
            if limit is None or len(body) + _SESSION_REQUEST_OVERHEAD_BYTES <= limit:
                field, response_class = rpc
                try:
                    _, answer = await session.request(field, body, timeout)
                except SessionRefusedError as refused:
                    if refused.permanent:
                        self._sessions = False
                        logger.info("%s has no Session RPC: unary calls from now on (%s)",
                                    self._target, refused.error)
                    else:
                        self._session_retry_at = time.monotonic() + SESSION_RETRY_AFTER_S
                        logger.info("%s refused a session, unary calls for %.0f s: %s",
                                    self._target, SESSION_RETRY_AFTER_S, refused.error)
                else:
                    return response_class.FromString(answer)
        return await self._call(unary, request, timeout)

    # --- topics ----------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        replication_factor: int = 0,
        timeout_s: float | None = _UNSET,
    ) -> TopicInfo:
        """Create a topic with ``partitions`` partitions and Kafka-named ``configs``, each
        partition on ``replication_factor`` brokers (cluster mode; 0: the server's
        ``default_replication_factor``; a single server takes 0 or 1).

        Raises TopicAlreadyExistsError, InvalidTopicError, InvalidConfigError, and a
        StratalogError with reason INVALID_REPLICATION_FACTOR (more than the live brokers) or
        COORDINATION_UNAVAILABLE (etcd did not answer).
        """
        request = wire.create_topic_request(name, partitions, configs)
        request.replication_factor = wire.check_int(
            replication_factor, "replication_factor", 0, 2**31 - 1)
        response = await self._call(self._stub.CreateTopic, request, self._deadline(timeout_s))
        return wire.topic_info(response.topic)

    async def delete_topic(self, name: str, *, timeout_s: float | None = _UNSET) -> None:
        """Delete a topic and all its data. Raises UnknownTopicOrPartitionError."""
        request = wire.delete_topic_request(name)
        await self._call(self._stub.DeleteTopic, request, self._deadline(timeout_s))

    async def list_topics(self, *, timeout_s: float | None = _UNSET) -> list[TopicInfo]:
        """Every topic, sorted by name."""
        response = await self._call(
            self._stub.ListTopics, broker_pb2.ListTopicsRequest(), self._deadline(timeout_s)
        )
        return sorted((wire.topic_info(t) for t in response.topics), key=lambda t: t.name)

    async def describe_topic(self, name: str, *, timeout_s: float | None = _UNSET) -> TopicInfo:
        """One topic's configs and partitions. Raises UnknownTopicOrPartitionError."""
        request = wire.describe_topic_request(name)
        response = await self._call(self._stub.DescribeTopic, request, self._deadline(timeout_s))
        return wire.topic_info(response.topic)

    async def alter_topic_configs(
        self,
        name: str,
        set: Mapping[str, str] | None = None,  # the RPC field names, shadowing is harmless
        delete: Sequence[str] = (),
        *,
        timeout_s: float | None = _UNSET,
    ) -> TopicInfo:
        """Set some topic configs and return others (``delete``) to the server default."""
        request = wire.alter_topic_configs_request(name, set, delete)
        response = await self._call(
            self._stub.AlterTopicConfigs, request, self._deadline(timeout_s)
        )
        return wire.topic_info(response.topic)

    # --- records ---------------------------------------------------------------------------------

    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[ProducerRecord | bytes] | None = None,
        *,
        record_batches: bytes | None = None,
        compression: Compression | str = Compression.NONE,
        flush: bool = False,
        producer_id: int | None = None,
        producer_epoch: int = 0,
        base_sequence: int = 0,
        transactional: bool = False,
        timeout_s: float | None = _UNSET,
    ) -> ProduceResult:
        """Append to one partition, atomically: ``records`` (the server encodes them as one
        batch, compressed with ``compression``) or ``record_batches`` (Kafka v2 batches with base
        offset 0, as :class:`~stratalog.records.BatchBuilder` builds them). ``flush``: fsync
        before answering. Not retried: see :class:`~stratalog.client.Producer` for that.

        ``producer_id`` (from :meth:`init_producer_id`), ``producer_epoch``, ``base_sequence``
        (the sequence of the first record) and ``transactional`` make a ``records`` produce
        idempotent or transactional; a repeat of a batch already stored comes back with
        ``duplicate=True`` and the original offsets. ``record_batches`` carry these in their
        headers instead. Raises OutOfOrderSequenceError, InvalidProducerEpochError,
        UnknownProducerIdError, InvalidTxnStateError as the partition's producer state decides.
        """
        request = wire.produce_request(
            topic, partition, records, record_batches, compression, flush,
            producer_id, producer_epoch, base_sequence, transactional,
        )
        response = await self._request(
            _PRODUCE, self._stub.Produce, request, self._deadline(timeout_s)
        )
        log_throttle("produce to", topic, partition, response.throttle_time_ms)
        return wire.produce_result(response)

    async def fetch_by_offset(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = 0,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        fetch_format: FetchFormat = FetchFormat.RECORDS,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        max_records: int = 0,
        timeout_s: float | None = _UNSET,
    ) -> FetchResult:
        """Read from the batch holding ``offset``, up to about ``max_bytes`` (0 = server default;
        the first batch always comes whole). With ``max_wait_ms`` > 0 and ``offset`` at the log
        end, wait up to that long for ``min_bytes`` of new data (long poll).

        ``max_records`` > 0: at most that many records from ``offset`` on, cut out of their
        batches by the server (in RECORD_BATCHES too: re-framed batches holding just them,
        without control batches or, for READ_COMMITTED, aborted ones). A point read is
        ``max_records=1`` (docs/client.md); 0 (the default) is Kafka's fetch: whole batches.

        Raises OffsetOutOfRangeError (with the log's bounds), UnknownTopicOrPartitionError.
        """
        request = wire.fetch_by_offset_request(
            topic, partition, offset, max_bytes, max_wait_ms, min_bytes, fetch_format,
            isolation_level, max_records,
        )
        response = await self._request(
            _FETCH_BY_OFFSET, self._stub.FetchByOffset, request,
            self._deadline(timeout_s, max_wait_ms),
        )
        log_throttle("fetch from", topic, partition, response.throttle_time_ms)
        return wire.fetch_result(response, by_timestamp=False)

    async def fetch_by_timestamp(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        *,
        max_bytes: int = 0,
        fetch_format: FetchFormat = FetchFormat.RECORDS,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        max_records: int = 0,
        timeout_s: float | None = _UNSET,
    ) -> FetchResult:
        """Read from the earliest record whose timestamp is >= ``timestamp_ms``.

        ``matched_offset``/``matched_timestamp`` of the result name that record (-1, -1 and no
        records when none is that recent). ``max_records`` as for :meth:`fetch_by_offset`,
        from that record on (``max_records=1``: the record found, alone).
        """
        request = wire.fetch_by_timestamp_request(
            topic, partition, timestamp_ms, max_bytes, fetch_format, isolation_level,
            max_records,
        )
        response = await self._request(
            _FETCH_BY_TIMESTAMP, self._stub.FetchByTimestamp, request, self._deadline(timeout_s)
        )
        log_throttle("fetch from", topic, partition, response.throttle_time_ms)
        return wire.fetch_result(response, by_timestamp=True)

    async def list_offsets(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        timeout_s: float | None = _UNSET,
    ) -> OffsetAndTimestamp:
        """Resolve ``timestamp_ms``: :data:`~stratalog.client.wire.EARLIEST` (-2), ``LATEST``
        (-1), ``MAX_TIMESTAMP`` (-3), or the first offset with a timestamp >= a time >= 0."""
        request = wire.list_offsets_request(topic, partition, timestamp_ms, isolation_level)
        response = await self._request(
            _LIST_OFFSETS, self._stub.ListOffsets, request, self._deadline(timeout_s)
        )
        return wire.offset_and_timestamp(response)

    def subscribe(
        self,
        topic: str,
        partition: int,
        *,
        offset: int | None = None,
        timestamp_ms: int | None = None,
        max_bytes: int = 0,
        fetch_format: FetchFormat = FetchFormat.RECORDS,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        timeout_s: float | None = None,
    ) -> AsyncIterator[FetchResult]:
        """Stream the partition from ``offset`` (or ``timestamp_ms``) and keep following its end.

        Returns an async generator of :class:`FetchResult` messages (arguments are checked
        now, the stream starts at the first ``__anext__``); leaving the ``async for`` and
        ``aclose()`` cancel the stream. gRPC flow control applies: a consumer that stops reading
        makes the server stop sending, not buffer.
        """
        request = wire.subscribe_request(
            topic, partition, offset, timestamp_ms, max_bytes, fetch_format, isolation_level
        )
        deadline = check_timeout(timeout_s)
        return self._stream(request, deadline, by_timestamp=timestamp_ms is not None)

    async def _stream(
        self, request: broker_pb2.SubscribeRequest, timeout: float | None, *, by_timestamp: bool
    ) -> AsyncIterator[FetchResult]:
        call = self._stub.Subscribe(request, timeout=timeout, metadata=self._metadata)
        try:
            async for response in call:
                log_throttle("subscription to", request.topic, request.partition,
                             response.throttle_time_ms)
                yield wire.fetch_result(response, by_timestamp=by_timestamp)
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        finally:
            call.cancel()

    async def delete_records(
        self,
        topic: str,
        partition: int,
        before_offset: int,
        *,
        timeout_s: float | None = _UNSET,
    ) -> int:
        """Move the log start offset to ``before_offset`` (-1: the high watermark); return it."""
        request = wire.delete_records_request(topic, partition, before_offset)
        response = await self._call(self._stub.DeleteRecords, request, self._deadline(timeout_s))
        return response.log_start_offset

    async def clean_partition(
        self, topic: str, partition: int, *, timeout_s: float | None = _UNSET
    ) -> CleaningResult:
        """Clean one partition of a compacted topic now, whatever its dirty ratio (the
        CleanPartition RPC; needs ALTER on the topic), and say what the cleaning did. As the
        server's background cleaner, it keeps each key's latest record and never cleans the
        active segment. A cleaning of a large log takes seconds: give ``timeout_s``.

        Raises InvalidConfigError (the topic is not compacted), UnknownTopicOrPartitionError.
        """
        request = wire.clean_partition_request(topic, partition)
        response = await self._call(self._stub.CleanPartition, request, self._deadline(timeout_s))
        return wire.cleaning_result(topic, partition, response)

    # --- exactly-once ----------------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str | None = None,
        *,
        transaction_timeout_ms: int = 0,
        timeout_s: float | None = _UNSET,
    ) -> ProducerIdAndEpoch:
        """A producer id and epoch: a new id (epoch 0) for an idempotent producer, or, with a
        ``transactional_id``, that id's own producer id with its epoch bumped, which fences every
        older instance and aborts the transaction it left open. ``transaction_timeout_ms``: how
        long a transaction may stay open before the server aborts it (0: 60000).

        Raises ConcurrentTransactionsError, CoordinatorLoadInProgressError (both retriable),
        InvalidTransactionTimeoutError.
        """
        request = wire.init_producer_id_request(transactional_id, transaction_timeout_ms)
        response = await self._call(self._stub.InitProducerId, request, self._deadline(timeout_s))
        return wire.producer_id_and_epoch(response)

    async def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition | tuple[str, int]],
        *,
        timeout_s: float | None = _UNSET,
    ) -> None:
        """Add ``partitions`` to the producer's transaction, beginning one if none is open; a
        transactional batch is accepted only on a partition added this way.

        Raises ProducerFencedError, InvalidProducerIdMappingError, ConcurrentTransactionsError
        (retriable), UnknownTopicOrPartitionError.
        """
        request = wire.add_partitions_to_txn_request(
            transactional_id, producer_id, producer_epoch, partitions
        )
        await self._call(self._stub.AddPartitionsToTxn, request, self._deadline(timeout_s))

    async def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        timeout_s: float | None = _UNSET,
    ) -> None:
        """Commit (``commit=True``) or abort the open transaction: the server writes a COMMIT or
        ABORT marker to every partition of it before answering.

        Raises ProducerFencedError, InvalidTxnStateError (nothing open, or the other outcome
        already decided), ConcurrentTransactionsError (retriable).
        """
        request = wire.end_txn_request(transactional_id, producer_id, producer_epoch, commit)
        await self._call(self._stub.EndTxn, request, self._deadline(timeout_s))

    async def describe_transaction(
        self, transactional_id: str, *, timeout_s: float | None = _UNSET
    ) -> TransactionDescription:
        """The coordinator's state of ``transactional_id``. Raises
        TransactionalIdNotFoundError."""
        request = wire.describe_transaction_request(transactional_id)
        response = await self._call(
            self._stub.DescribeTransaction, request, self._deadline(timeout_s)
        )
        return wire.transaction_description(response)

    # --- security --------------------------------------------------------------------------------

    async def who_am_i(self, *, timeout_s: float | None = _UNSET) -> Identity:
        """The principal the server authenticated this client as, how, and from which host.

        Raises AuthenticationFailedError (wrong credentials).
        """
        response = await self._call(
            self._stub.WhoAmI, broker_pb2.WhoAmIRequest(), self._deadline(timeout_s)
        )
        return Identity(response.principal, response.authenticated_by, response.host)

    # --- cluster ---------------------------------------------------------------------------------

    async def metadata(
        self, topics: Sequence[str] = (), *, timeout_s: float | None = _UNSET
    ) -> ClusterMetadata:
        """The cluster as the server sees it (the Metadata RPC): brokers, controller and
        epoch, and ``topics`` (empty: every topic the caller may DESCRIBE) with each
        partition's leader, replicas and in-sync replicas. Raises UnknownTopicOrPartitionError
        for a topic named that does not exist."""
        response = await self._call(
            self._stub.Metadata, wire.metadata_request(topics), self._deadline(timeout_s)
        )
        return wire.cluster_metadata(response)

    # --- ACLs ------------------------------------------------------------------------------------

    async def create_acls(
        self, bindings: Sequence[AclBinding], *, timeout_s: float | None = _UNSET
    ) -> None:
        """Create ACL bindings, all or none (one already there is not repeated). Needs ALTER on
        the cluster. Raises InvalidRequestError naming the first bad binding
        (``creations[2].host``), ResourceLimitExceededError past the server's ACL limits."""
        request = wire.create_acls_request(bindings)
        await self._call(self._stub.CreateAcls, request, self._deadline(timeout_s))

    async def delete_acls(
        self, filters: Sequence[AclBindingFilter], *, timeout_s: float | None = _UNSET
    ) -> list[AclBinding]:
        """Delete every binding any of ``filters`` selects; the bindings deleted. Needs ALTER
        on the cluster."""
        request = wire.delete_acls_request(filters)
        response = await self._call(self._stub.DeleteAcls, request, self._deadline(timeout_s))
        return [wire.acl_binding(b) for b in response.deleted]

    async def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, *, timeout_s: float | None = _UNSET
    ) -> list[AclBinding]:
        """The bindings ``acl_filter`` selects (default: all), in creation order. Needs
        DESCRIBE on the cluster."""
        request = wire.describe_acls_request(
            AclBindingFilter() if acl_filter is None else acl_filter
        )
        response = await self._call(self._stub.DescribeAcls, request, self._deadline(timeout_s))
        return [wire.acl_binding(b) for b in response.acls]
