"""The asyncio client: one method per Broker RPC, to a single server or a cluster.

``Client("127.0.0.1:50051")`` opens a channel (lazily: nothing connects until the first call),
and each method builds the request with :mod:`stratalog.client.wire` (which checks every
argument first), awaits the RPC, and returns plain values from :mod:`stratalog.client.types`.
A failed RPC raises the :mod:`stratalog.client.errors` exception for its status and
``ErrorInfo`` reason, never a bare ``grpc.RpcError``; ``error.retriable`` says whether sending
the same request again may succeed. The client itself retries only requests that reached the
wrong server (below); the :class:`~stratalog.client.Producer` and
:class:`~stratalog.client.Consumer` retry the rest, where it is safe.

Routing (issue 17, Kafka's client ``Metadata`` and ``NetworkClient``): a client takes one target
or several bootstrap targets (``"db1:50051,db2:50051"``, :mod:`stratalog.client.bootstrap`),
and keeps one connection (:mod:`stratalog.client.broker_connection`) per broker address it talks
to. Requests about one partition's data (Produce, both fetches, ListOffsets, Subscribe,
DeleteRecords, CleanPartition) go to the partition's leader, which the
:class:`~stratalog.client.metadata_cache.MetadataCache` knows from Metadata answers; the other
requests go to any broker, the one that answered last (a bootstrap target first), and to the
next when it does not answer. When a server answers NOT_LEADER_OR_FOLLOWER,
LEADER_NOT_AVAILABLE or UNKNOWN_LEADER_EPOCH (nothing was done), the request goes again, within
its deadline, to the leader the error's hint names, else after ``retry_backoff_ms`` to the one
a metadata refresh names. When a broker does not answer (UNAVAILABLE: gone, or stopping), the
topic is refreshed before its next request; a read is sent again at once to the new leader, a
Produce is not (its answer may have been lost after an append: the Producer resends it with its
sequence numbers, which makes the resend safe). These decisions are made in one place, the
sans-IO :mod:`stratalog.client.routing` (its :class:`~stratalog.client.routing.LeaderRouter`
says send, refresh, back off or raise; its :class:`~stratalog.client.routing.BrokerWalk`
which server an admin or Metadata request asks next), which this client and the
:class:`~stratalog.client.SyncClient` drive with their own I/O.

Failover (issue 24): a connection to a dead server fails as soon as gRPC's attempt does — at
once when the process died on a live host (the connection is refused), after
:data:`CONNECT_TIMEOUT_MS` when its packets go unanswered (a killed container, a frozen host) —
and a request that found no connection was not sent, so it goes on to the leader a refresh
names (a call gRPC failed for want of a connection, its channel READY a moment before, was
not sent either: ``BrokerUnavailableError.unsent``). A broker that did not answer is marked
unreachable in the cache and asked for metadata and admin requests after every other until it
answers again. While Metadata still names a dead
leader (its election pending), the request asks again every ``retry_backoff_ms`` until its
deadline, so it reaches the new leader within ``retry_backoff_ms`` of its election.

With one target, nothing of this costs anything until a server says it does not lead a
partition: requests go to that target without any Metadata call (a single server leads all its
partitions and never says so). With several, each topic's leaders are asked for at its first
request, and again after ``metadata_max_age_ms``.

Sessions: by default, Produce, FetchByOffset, FetchByTimestamp and ListOffsets travel on one
long-lived ``Session`` stream per broker connection (:mod:`stratalog.client.session`), opened
at the first of them, each request matched to its answer by id: a message on an open stream
costs a fraction of a unary call. Their results and errors are the unary calls' own.
``sessions=False`` sends them as unary calls, as every other RPC always is; a server without
the Session RPC, or one that refuses the stream for the client's limit of waiting RPCs, gets
unary calls too (the requests were not read: they are sent again as unary calls). A broken
stream (a server restart) fails its requests in flight with the stream's retriable error, and
the next request opens a new one.

Deadlines: every call gets ``timeout_s`` (per call, overridable); a long-poll fetch gets its
``max_wait_ms`` on top, so the deadline never cuts a wait the server was asked to do. Reroutes
happen within the call's deadline. Subscribe streams and sessions have no deadline of their own
unless one is passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc
import grpc.aio

from stratalog.records import Compression
from stratalog.v1 import broker_pb2

from . import errors, wire
from .acls import AclBinding, AclBindingFilter
from .bootstrap import bootstrap_targets
from .broker_connection import SESSION_RETRY_AFTER_S, BrokerConnection
from .credentials import Credentials, TlsConfig, channel_security
from .errors import (
    BrokerUnavailableError,
    StratalogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from .group_calls import UNSET, GroupCalls
from .metadata_cache import METADATA_MAX_AGE_MS, MetadataCache
from .routing import (
    ATTEMPT_TIME_MIN_S,
    NEW_TOPIC_WAIT_MS,
    NOT_THERE,
    UNANSWERED,
    AskCluster,
    Backoff,
    BrokerWalk,
    CheckTopic,
    Found,
    LeaderRouter,
    NewTopicWait,
    Refresh,
    Routing,
    Send,
    TopicCheck,
)
from .types import (
    CleaningResult,
    ClusterMetadata,
    FetchResult,
    Identity,
    OffsetAndTimestamp,
    PartitionReassignment,
    ProduceResult,
    ProducerIdAndEpoch,
    ProducerRecord,
    TopicInfo,
    TopicPartition,
    TransactionDescription,
)
from .wire import FetchFormat, IsolationLevel

__all__ = [
    "CONNECT_TIMEOUT_MS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "NEW_TOPIC_WAIT_MS",
    "RECONNECT_BACKOFF_MAX_MS",
    "RECONNECT_BACKOFF_MS",
    "RETRY_BACKOFF_MS",
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

#: Kafka's ``retry.backoff.ms``: the least time between two metadata refreshes, and the wait
#: before a request goes out again after a routing error without a usable hint.
RETRY_BACKOFF_MS = 100

# The SessionRequest member of each RPC a session carries, and its unary response class.
_PRODUCE = (broker_pb2.SessionRequest.PRODUCE_FIELD_NUMBER, broker_pb2.ProduceResponse)
_FETCH_BY_OFFSET = (broker_pb2.SessionRequest.FETCH_BY_OFFSET_FIELD_NUMBER,
                    broker_pb2.FetchResponse)
_FETCH_BY_TIMESTAMP = (broker_pb2.SessionRequest.FETCH_BY_TIMESTAMP_FIELD_NUMBER,
                       broker_pb2.FetchResponse)
_LIST_OFFSETS = (broker_pb2.SessionRequest.LIST_OFFSETS_FIELD_NUMBER,
                 broker_pb2.ListOffsetsResponse)

_UNSET: Any = UNSET  # group_calls' sentinel: one value for every method


#: First and largest wait of gRPC before it connects again after a failed connection (Kafka's
#: reconnect.backoff.ms and reconnect.backoff.max.ms are 50 ms and 1 s). gRPC's own defaults
#: (1 s growing to 120 s) would keep a channel failing calls at once for up to two minutes after
#: its server came back, whatever the Producer's retries and delivery timeout.
RECONNECT_BACKOFF_MS = 100
RECONNECT_BACKOFF_MAX_MS = 1000

#: How long one connection attempt (TCP, TLS and HTTP/2 handshakes) may take before it fails
#: and the requests waiting for it fail UNAVAILABLE (gRPC's ``grpc.min_reconnect_backoff_ms``,
#: which is its least connect timeout: 20 s by default). A server killed in a container
#: network, or a frozen one, does not refuse connections: its packets go unanswered, and
#: requests to a leader gone that way would wait 20 s before the client looks for the new
#: leader. Kafka's ``socket.connection.setup.timeout.ms`` is 10 s; 3 s keeps a failover under
#: issue 17's 5 s goal. A slow link can raise it through ``options``. A refused connection (a
#: dead process on a live host) fails at once, whatever this is.
CONNECT_TIMEOUT_MS = 3000


def channel_options(
    max_message_bytes: int, options: Sequence[tuple[str, Any]] = ()
) -> list[tuple[str, Any]]:
    """gRPC channel arguments: message size limits, reconnect backoff and the connect timeout
    first, then the caller's (which win)."""
    wire.check_int(max_message_bytes, "max_message_bytes", 1024, wire.INT32_MAX)
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
        ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
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


#: The call metadata that carries a Client's ``client_id`` (server/rpc/group_rpcs.py reads it).
CLIENT_ID_METADATA = "x-client-id"
_CLIENT_ID_CHARS_MAX = 255


def check_client_id(client_id: object) -> bool:
    """True if ``client_id`` names the client (False for ""); refuses what gRPC metadata cannot
    carry.

    Raises:
        TypeError: not a str.
        ValueError: longer than 255 characters, or not printable ASCII.
    """
    if not isinstance(client_id, str):
        raise TypeError(f"client_id must be a str, got {client_id!r}")
    if len(client_id) > _CLIENT_ID_CHARS_MAX:
        raise ValueError(f"client_id: {len(client_id)} characters, at most {_CLIENT_ID_CHARS_MAX}")
    if not all(" " <= char <= "~" for char in client_id):
        raise ValueError(f"client_id must be printable ASCII (gRPC metadata), got {client_id!r}")
    return bool(client_id)


class Client(GroupCalls):
    """An asyncio client of a stratalog server or cluster: every RPC of the Broker service.

    Holds the bootstrap targets, one :class:`~.broker_connection.BrokerConnection` (a
    ``grpc.aio`` channel and its Session stream) per broker address it talked to, the
    :class:`~.metadata_cache.MetadataCache` and the default deadline. Use it as
    ``async with Client(target) as client:`` or call :meth:`close`. Event-loop only: create
    and use it on one running loop. Concurrent calls from many tasks are fine (that is what
    the channels multiplex). Holds nothing durable, so a crash loses nothing.

    Args:
        target: one gRPC target, e.g. ``"127.0.0.1:50051"`` or ``"dns:///broker:50051"``, or
            several bootstrap targets, as a list or a comma-separated string (Kafka's
            ``bootstrap.servers``; :mod:`stratalog.client.bootstrap`).
        timeout_s: default deadline of each unary call in seconds; ``None`` for none.
        max_message_bytes: largest message sent or received.
        credentials: raw ``grpc.ssl_channel_credentials(...)`` for TLS; ``None`` for plaintext
            (or ``tls``).
        tls: TLS towards the servers (:class:`~stratalog.client.credentials.TlsConfig`): the
            CA to trust and, for mTLS, the client certificate.
        auth: a user and password or a token
            (:class:`~stratalog.client.credentials.Credentials`), sent with every call; refused
            without TLS unless the credentials allow plaintext.
        options: more gRPC channel arguments, e.g. ``[("grpc.keepalive_time_ms", 30000)]``.
        sessions: carry Produce, the fetches and ListOffsets on a Session stream (the
            default); ``False``: unary calls for every RPC.
        retry_backoff_ms: the least time between two metadata refreshes, and the wait before
            a request is sent again after a routing error (Kafka's ``retry.backoff.ms``).
        metadata_max_age_ms: a topic's leaders are asked again at their first use after this
            long (Kafka's ``metadata.max.age.ms``).
        client_id: Kafka's ``client.id``: a name the servers see on every call (metadata
            ``x-client-id``), shown as a group member's client id (``stratalog groups
            describe``). Printable ASCII, at most 255 characters; "" sends none.
    """

    def __init__(
        self,
        target: str | Sequence[str],
        *,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        tls: TlsConfig | None = None,
        auth: Credentials | None = None,
        sessions: bool = True,
        retry_backoff_ms: int = RETRY_BACKOFF_MS,
        metadata_max_age_ms: int = METADATA_MAX_AGE_MS,
        client_id: str = "",
    ) -> None:
        self._targets = bootstrap_targets(target)
        self._target = ",".join(self._targets)
        self._timeout_s = check_timeout(timeout_s)
        self._credentials, tls_options, self._metadata = channel_security(
            self._target, tls, auth, credentials
        )
        if check_client_id(client_id):
            self._metadata = (*(self._metadata or ()), (CLIENT_ID_METADATA, client_id))
        self._channel_args = channel_options(max_message_bytes, [*tls_options, *options])
        self._tls = tls
        if not isinstance(sessions, bool):
            raise TypeError(f"sessions must be a bool, got {sessions!r}")
        self._sessions = sessions
        self._retry_backoff_s = wire.check_int(
            retry_backoff_ms, "retry_backoff_ms", 0, 3_600_000) / 1000.0
        self._cache = MetadataCache(max_age_ms=wire.check_int(
            metadata_max_age_ms, "metadata_max_age_ms", 0, wire.INT32_MAX))
        self._connections: dict[str, BrokerConnection] = {}
        self._routing = Routing(self._targets, self._cache,
                                retry_backoff_s=self._retry_backoff_s)
        self._home_connection = self._connection(self._routing.home)
        self._refresh_lock = asyncio.Lock()
        self._group_coordinators: dict[str, str] = {}  # group id -> address (group_calls)

    def _connection(self, address: str) -> BrokerConnection:
        """The connection to ``address``, opened (lazily: the channel connects at its first
        call) if there is none."""
        connection = self._connections.get(address)
        if connection is None:
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(address, options=self._channel_args)
            else:
                channel = grpc.aio.secure_channel(
                    address, self._credentials, options=self._channel_args
                )
            connection = BrokerConnection(
                address, channel, self._metadata, sessions=self._sessions, tls=self._tls,
                tls_on=self._credentials is not None,
            )
            self._connections[address] = connection
        return connection

    @property
    def _home(self) -> BrokerConnection:
        """The connection to the home broker (:attr:`~.routing.Routing.home`): admin requests
        go there first, and partition requests while no route is known."""
        return self._home_connection

    @_home.setter
    def _home(self, connection: BrokerConnection) -> None:
        self._home_connection = connection
        self._routing.home = connection.address

    @property
    def target(self) -> str:
        """The bootstrap targets, comma-separated (one target: that target)."""
        return self._target

    @property
    def targets(self) -> tuple[str, ...]:
        """The bootstrap targets, in order."""
        return self._targets

    @property
    def metadata_cache(self) -> MetadataCache:
        """The client's view of the cluster (read it; the Client keeps it)."""
        return self._cache

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def sessions(self) -> bool:
        """Whether Produce, the fetches and ListOffsets go on a Session stream now (False when
        turned off, or after the server refused one: see the module docstring)."""
        return self._home.sessions

    async def close(self, grace_s: float | None = None) -> None:
        """Close every channel; calls still running are cancelled after ``grace_s`` seconds,
        requests on the sessions at once."""
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            await connection.close(grace_s)

    async def wait_ready(self, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Wait until a bootstrap target is connected (the first that connects becomes the
        one admin requests go to); ``BrokerUnavailableError`` after ``timeout_s``."""
        connections = [self._connection(target) for target in self._targets]
        waits = {asyncio.ensure_future(c.channel.channel_ready()): c for c in connections}
        try:
            done, _ = await asyncio.wait(
                waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for wait in waits:
                wait.cancel()
        for wait in done:
            if not wait.cancelled() and wait.exception() is None:
                self._home = waits[wait]
                return
        raise await connections[0].diagnosed(BrokerUnavailableError(
            f"no connection to {self._target} within {timeout_s} s",
            code=grpc.StatusCode.UNAVAILABLE,
        ), None)

    def _deadline(self, timeout_s: Any, extra_ms: int = 0) -> float | None:
        timeout = self._timeout_s if timeout_s is _UNSET else check_timeout(timeout_s)
        if timeout is None:
            return None
        return timeout + extra_ms / 1000.0

    # --- routing ---------------------------------------------------------------------------------

    async def _call(self, name: str, request: Any, timeout: float | None) -> Any:
        """An admin request (not about one partition's data): to the home broker; in a
        cluster, to the brokers known and the bootstrap targets in turn (the unreachable ones
        last: :meth:`MetadataCache.candidates`) until one answers, within ``timeout``."""
        if not self._routing.in_cluster():
            home = self._home
            return await home.call(getattr(home.stub, name), request, timeout)
        loop = asyncio.get_running_loop()
        walk = BrokerWalk(self._routing,
                          deadline=None if timeout is None else loop.time() + timeout)
        while (attempt := walk.next_attempt(loop.time())) is not None:
            connection = self._connection(attempt.address)
            try:
                await self._connect(connection, walk.deadline)
                response = await connection.call(
                    getattr(connection.stub, name), request, attempt.timeout_s
                )
            except UNANSWERED as err:
                logger.debug("%s to %s: %s", name, attempt.address, err)
                walk.unanswered(attempt.address, err)
                continue
            self._home = connection
            return response
        raise walk.first_error or walk.timed_out(f"{name}: no broker answered within {timeout} s")

    async def _connect(self, connection: BrokerConnection, deadline: float | None) -> None:
        """Wait for ``connection``'s channel (:meth:`BrokerConnection.ensure_ready`) and tell
        the cache whether its address answered."""
        try:
            await connection.ensure_ready(self._connect_wait(deadline))
        except BrokerUnavailableError:
            self._cache.mark_unreachable(connection.address)
            raise
        self._cache.mark_reachable(connection.address)

    async def _to_leader(
        self,
        topic: str,
        partition: int,
        send: Callable[[BrokerConnection, float | None], Awaitable[Any]],
        timeout: float | None,
        *,
        resendable: bool,
    ) -> Any:
        """``send(connection, timeout)`` to the partition's leader, rerouted within ``timeout``
        as the :class:`~.routing.LeaderRouter` says (``resendable``: a read, which may be sent
        twice). This is its I/O: connect, send, refresh, ask, wait."""
        loop = asyncio.get_running_loop()
        router = LeaderRouter(self._routing, topic, partition, resendable=resendable,
                              timeout_s=timeout, now=loop.time())
        while True:
            step = router.next_step(loop.time())
            if isinstance(step, Send):
                connection = self._connection(step.address)
                try:
                    if step.connect:
                        await self._connect(connection, router.deadline)
                except StratalogError as err:
                    router.connect_failed(err)
                    continue
                try:
                    return await send(connection, router.timeout_s(loop.time()))
                except StratalogError as err:
                    router.send_failed(err)
            elif isinstance(step, Refresh):
                try:
                    await self._refresh(topic, router.deadline)
                except StratalogError as err:
                    router.refresh_failed(err)
                else:
                    router.refreshed()
            elif isinstance(step, CheckTopic):
                router.topic_checked(await self._known_elsewhere(topic, partition, router.deadline))
            elif isinstance(step, Backoff):
                await asyncio.sleep(step.delay_s)
            else:
                raise step.error

    async def _known_elsewhere(
        self, topic: str, partition: int, deadline: float | None
    ) -> bool:
        """After UNKNOWN_TOPIC_OR_PARTITION: whether a metadata refresh names a leader of the
        partition, as the :class:`~.routing.TopicCheck` says; this is its I/O."""
        loop = asyncio.get_running_loop()
        check = TopicCheck(self._routing, topic, partition, deadline=deadline)
        while not isinstance(step := check.next_step(loop.time()), Found):
            if isinstance(step, AskCluster):
                await self._ask_cluster(check, step)
                continue
            try:
                await self._refresh(topic, deadline)
            except StratalogError:
                check.refresh_failed()
            else:
                check.refreshed()
        return step.known

    async def _ask_cluster(self, asker: TopicCheck | NewTopicWait, step: AskCluster) -> None:
        """An :class:`~.routing.AskCluster`: the home server's Metadata about no topics, its
        answer (or that there was none) told to ``asker``."""
        try:
            response = await self._call("Metadata", wire.metadata_request(()), step.timeout_s)
        except StratalogError:
            asker.cluster_unanswered()
        else:
            asker.cluster_answered(wire.cluster_metadata(response), self._home.address)

    def _connect_wait(self, deadline: float | None) -> float:
        """How long a cluster's request waits for a connection: CONNECT_TIMEOUT_MS, or what
        is left before ``deadline``."""
        wait = CONNECT_TIMEOUT_MS / 1000
        if deadline is not None:
            wait = min(wait, max(deadline - asyncio.get_running_loop().time(),
                                 ATTEMPT_TIME_MIN_S))
        return wait

    async def _leader(
        self, topic: str, partition: int, deadline: float | None
    ) -> BrokerConnection:
        """The connection to the partition's leader, its topic refreshed first if needed (no
        entry, stale, too old): :meth:`~.routing.Routing.leader`.

        Raises:
            LeaderNotAvailableError: the partition has no leader now (retriable).
            BrokerUnavailableError: no broker answered the metadata request.
        """
        if self._cache.needs_refresh(topic):
            await self._refresh(topic, deadline)
        return self._connection(self._routing.leader(topic, partition))

    async def _refresh(self, topic: str, deadline: float | None) -> None:
        """Ask for ``topic``'s metadata, from the brokers known and the bootstrap targets in
        turn until one answers. One refresh at a time; at most one per ``retry_backoff_ms``:
        a caller that finds a refresh done meanwhile takes it."""
        loop = asyncio.get_running_loop()
        asked_at = loop.time()
        async with self._refresh_lock:
            wait = self._routing.refresh_wait_s(topic, asked_at=asked_at, now=loop.time())
            if wait is None:
                return
            if deadline is not None:
                wait = min(wait, deadline - loop.time())
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await self._fetch_metadata([topic], deadline)
            finally:
                self._routing.refresh_ended(loop.time())

    async def _fetch_metadata(self, topics: Sequence[str], deadline: float | None) -> None:
        """Metadata about ``topics``, from the brokers in turn (:class:`~.routing.BrokerWalk`)
        until one answers, into the cache; topics no broker knows are forgotten."""
        loop = asyncio.get_running_loop()
        request = wire.metadata_request(topics)
        walk = BrokerWalk(self._routing, deadline=deadline)
        while (attempt := walk.next_attempt(loop.time())) is not None:
            connection = self._connection(attempt.address)
            timeout = attempt.timeout_s if self._timeout_s is None else (
                self._timeout_s if attempt.timeout_s is None
                else min(self._timeout_s, attempt.timeout_s))
            try:
                await self._connect(connection, deadline)
                response = await connection.call(connection.stub.Metadata, request, timeout)
            except UnknownTopicOrPartitionError as err:
                walk.unknown_topic(err)  # another server's view may have it already
                continue
            except UNANSWERED as err:
                logger.debug("Metadata from %s: %s", attempt.address, err)
                walk.unanswered(attempt.address, err)
                continue
            self._cache.update(wire.cluster_metadata(response), attempt.address, topics)
            self._home = connection
            return
        if not walk.topics_unknown(topics):
            raise walk.last_error or walk.timed_out(
                f"no metadata for {', '.join(topics)} before the deadline")

    # --- topics ----------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        replication_factor: int | None = None,
        exist_ok: bool = False,
        timeout_s: float | None = _UNSET,
    ) -> TopicInfo:
        """Create a topic with ``partitions`` partitions and Kafka-named ``configs``;
        ``replication_factor`` replicas of each (a cluster; ``None``: the server's default).

        With ``exist_ok=True`` a topic of that name that exists already is not an error: its
        :class:`TopicInfo` is returned (DescribeTopic) as it is, without comparing its
        partitions and configs with those asked for, as kafka-topics.sh's
        ``--create --if-not-exists`` does; compare them yourself where it matters. The
        arguments are checked either way. ``timeout_s`` applies to each of the two calls.

        Raises TopicAlreadyExistsError (unless ``exist_ok``), InvalidTopicError,
        InvalidConfigError, InvalidReplicationFactorError, CoordinationUnavailableError (a
        cluster's etcd).
        """
        wire.check_bool(exist_ok, "exist_ok")
        request = wire.create_topic_request(name, partitions, configs, replication_factor)
        try:
            response = await self._call("CreateTopic", request, self._deadline(timeout_s))
        except TopicAlreadyExistsError:
            if not exist_ok:
                raise
            return await self.describe_topic(name, timeout_s=timeout_s)
        return wire.topic_info(response.topic)

    async def delete_topic(self, name: str, *, timeout_s: float | None = _UNSET) -> None:
        """Delete a topic and all its data. Raises UnknownTopicOrPartitionError."""
        request = wire.delete_topic_request(name)
        await self._call("DeleteTopic", request, self._deadline(timeout_s))

    async def list_topics(self, *, timeout_s: float | None = _UNSET) -> list[TopicInfo]:
        """Every topic, sorted by name."""
        response = await self._call("ListTopics", broker_pb2.ListTopicsRequest(), self._deadline(timeout_s)
        )
        return sorted((wire.topic_info(t) for t in response.topics), key=lambda t: t.name)

    async def describe_topic(self, name: str, *, timeout_s: float | None = _UNSET) -> TopicInfo:
        """One topic's configs and partitions. Raises UnknownTopicOrPartitionError.

        In a cluster, a server whose view of the cluster lags may not know a topic just
        created: the other servers are asked too, for up to :data:`NEW_TOPIC_WAIT_MS`
        (within the deadline) before the error is raised.
        """
        request = wire.describe_topic_request(name)
        timeout = self._deadline(timeout_s)
        try:
            response = await self._call("DescribeTopic", request, timeout)
        except UnknownTopicOrPartitionError:
            response = await self._describe_until_known(request, timeout)
            if response is None:
                raise
        return wire.topic_info(response.topic)

    async def _describe_until_known(self, request: Any, timeout: float | None) -> Any:
        """DescribeTopic of a topic one server did not know, asked of the servers in turn as
        the :class:`~.routing.NewTopicWait` says (for up to :data:`NEW_TOPIC_WAIT_MS`); None
        when it gives up. This is its I/O."""
        loop = asyncio.get_running_loop()
        wait = NewTopicWait(self._routing, timeout_s=timeout, now=loop.time())
        while (step := wait.next_step(loop.time())) is not None:
            if isinstance(step, AskCluster):
                await self._ask_cluster(wait, step)
            elif isinstance(step, Backoff):
                await asyncio.sleep(step.delay_s)
            else:
                connection = self._connection(step.address)
                try:
                    await self._connect(connection, wait.wait_until)
                    return await connection.call(connection.stub.DescribeTopic, request,
                                                 step.timeout_s)
                except NOT_THERE:
                    continue
        return None

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
        response = await self._call("AlterTopicConfigs", request, self._deadline(timeout_s))
        return wire.topic_info(response.topic)

    async def create_partitions(
        self, name: str, count: int, *, timeout_s: float | None = _UNSET
    ) -> TopicInfo:
        """Grow topic ``name`` to ``count`` partitions (Kafka's CreatePartitions); the topic
        as it is then. Raises InvalidPartitionsError when ``count`` is not above the topic's
        partition count. A keyed record may then go to another partition than the key's
        earlier records did (the default partitioner hashes modulo the count), as in Kafka.
        Producers learn of the new partitions when they next look the topic up."""
        request = wire.create_partitions_request(name, count)
        response = await self._call("CreatePartitions", request, self._deadline(timeout_s))
        return wire.topic_info(response.topic)

    async def elect_leaders(
        self, partitions: Iterable[tuple[str, int]] | None = None, *, unclean: bool = False,
        timeout_s: float | None = _UNSET,
    ) -> dict[tuple[str, int], StratalogError | None]:
        """Kafka's ElectLeaders: move each of ``partitions`` ((topic, partition) pairs; None:
        every partition of the cluster) back to its preferred replica, or with ``unclean``
        elect any live replica of a partition without a live leader. Each partition's outcome:
        None (elected) or the error saying why not (ElectionNotNeededError,
        PreferredLeaderNotAvailableError, EligibleLeadersNotAvailableError,
        UnknownTopicOrPartitionError); with ``partitions`` None the ones not needed are left
        out. Needs ALTER on the cluster."""
        request = wire.elect_leaders_request(partitions, unclean)
        response = await self._call("ElectLeaders", request, self._deadline(timeout_s))
        return wire.elect_leaders_outcomes(response)

    async def alter_partition_reassignments(
        self, targets: Mapping[tuple[str, int], Sequence[int] | None], *,
        timeout_s: float | None = _UNSET,
    ) -> dict[tuple[str, int], StratalogError | None]:
        """Kafka's AlterPartitionReassignments: move each partition ((topic, partition) ->
        its new replicas, the preferred leader first) to its target, or cancel its
        reassignment (None: back to the original replicas). Each partition's outcome: None
        (recorded; the controller carries it out: :meth:`list_partition_reassignments`) or
        the error saying why not (InvalidReplicaAssignmentError,
        NoReassignmentInProgressError, UnknownTopicOrPartitionError). Needs ALTER on the
        cluster; cluster mode only (docs/cluster.md, "Reassigning partitions")."""
        request = wire.alter_partition_reassignments_request(targets)
        response = await self._call("AlterPartitionReassignments", request,
                                    self._deadline(timeout_s))
        return wire.reassignment_outcomes(response.results)

    async def list_partition_reassignments(
        self, partitions: Iterable[tuple[str, int]] | None = None, *, progress: bool = False,
        timeout_s: float | None = _UNSET,
    ) -> list[PartitionReassignment]:
        """Kafka's ListPartitionReassignments: the partitions being reassigned (of
        ``partitions``, or all). With ``progress``, each partition's leader is asked too, for
        its log end offset and its followers' (the answer carries them only from the server
        leading the partition). Needs DESCRIBE on the cluster."""
        request = wire.list_partition_reassignments_request(partitions)
        deadline = self._deadline(timeout_s)
        listed = wire.partition_reassignments(
            await self._call("ListPartitionReassignments", request, deadline))
        if not progress:
            return listed
        completed = []
        if any(ongoing.leader >= 0 and self._cache.address_of(ongoing.leader) is None
               for ongoing in listed):
            with contextlib.suppress(StratalogError):  # to learn the leaders' addresses
                await self.metadata(timeout_s=deadline)
        for ongoing in listed:
            address = self._cache.address_of(ongoing.leader) if ongoing.leader >= 0 else None
            if ongoing.leader_log_end_offset < 0 and address is not None:
                connection = self._connection(address)
                with contextlib.suppress(StratalogError):  # no progress shown, then
                    answer = wire.partition_reassignments(await connection.call(
                        connection.stub.ListPartitionReassignments,
                        wire.list_partition_reassignments_request(
                            [(ongoing.topic, ongoing.partition)]), deadline))
                    ongoing = answer[0] if answer else ongoing
            completed.append(ongoing)
        return completed

    async def drain_broker(
        self, node_id: int, *, timeout_s: float | None = _UNSET,
    ) -> dict[tuple[str, int], tuple[int, ...] | StratalogError]:
        """Reassign every partition with ``node_id`` among its replicas to replicas without
        it (a replacement chosen by the servers' placement, racks respected; the leaderships
        leave it first). Each partition's new replicas, or the error saying why it was not
        moved. Needs ALTER on the cluster."""
        request = broker_pb2.DrainBrokerRequest(node_id=wire.check_int(node_id, "node_id", 0,
                                                               wire.INT32_MAX))
        response = await self._call("DrainBroker", request, self._deadline(timeout_s))
        return wire.drain_outcomes(response)

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
        acks: int | str = -1,
        timeout_s: float | None = _UNSET,
        transactional_id: str | None = None,
    ) -> ProduceResult:
        """Append to one partition, atomically: ``records`` (the server encodes them as one
        batch, compressed with ``compression``) or ``record_batches`` (Kafka v2 batches with base
        offset 0, as :class:`~stratalog.records.BatchBuilder` builds them). ``flush``: fsync
        before answering. ``acks`` (Kafka's: ``"all"``/-1, 1, 0) says which replicas must have
        the records before the answer (docs/client.md, "acks"). Not retried, but sent again to
        the partition's leader when it reached another server (module docstring): see
        :class:`~stratalog.client.Producer` for retries.

        ``producer_id`` (from :meth:`init_producer_id`), ``producer_epoch``, ``base_sequence``
        (the sequence of the first record) and ``transactional`` make a ``records`` produce
        idempotent or transactional; a repeat of a batch already stored comes back with
        ``duplicate=True`` and the original offsets. ``record_batches`` carry these in their
        headers instead. Raises OutOfOrderSequenceError, InvalidProducerEpochError,
        UnknownProducerIdError, InvalidTxnStateError as the partition's producer state decides.
        ``transactional_id`` (a transactional produce's): in a cluster, a partition leader that
        was not told of the transaction asks its coordinator with it (docs/cluster.md).
        """
        request = wire.produce_request(
            topic, partition, records, record_batches, compression, flush,
            producer_id, producer_epoch, base_sequence, transactional, acks, transactional_id,
        )
        response = await self._to_leader(
            topic, partition,
            lambda connection, timeout: connection.request(_PRODUCE, "Produce", request, timeout),
            self._deadline(timeout_s), resendable=False,
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
        response = await self._to_leader(
            topic, partition,
            lambda connection, timeout: connection.request(
                _FETCH_BY_OFFSET, "FetchByOffset", request, timeout),
            self._deadline(timeout_s, max_wait_ms), resendable=True,
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
        response = await self._to_leader(
            topic, partition,
            lambda connection, timeout: connection.request(
                _FETCH_BY_TIMESTAMP, "FetchByTimestamp", request, timeout),
            self._deadline(timeout_s), resendable=True,
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
        response = await self._to_leader(
            topic, partition,
            lambda connection, timeout: connection.request(
                _LIST_OFFSETS, "ListOffsets", request, timeout),
            self._deadline(timeout_s), resendable=True,
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
        topic, partition = request.topic, request.partition
        connection = self._home
        try:
            if self._routing.route_by_metadata:
                loop = asyncio.get_running_loop()
                deadline = None if timeout is None else loop.time() + timeout
                connection = await self._leader(topic, partition, deadline)
            call = connection.stub.Subscribe(request, timeout=timeout, metadata=self._metadata)
            try:
                async for response in call:
                    log_throttle("subscription to", topic, partition, response.throttle_time_ms)
                    yield wire.fetch_result(response, by_timestamp=by_timestamp)
            except grpc.aio.AioRpcError as err:
                raise await connection.error_of(err) from err
            finally:
                call.cancel()
        except StratalogError as err:
            # The stream is not sent again here (the Consumer resubscribes from its position):
            # the cache learns where the next one goes.
            self._routing.learn(err, topic=topic, partition=partition,
                                refused_by=connection.address, resendable=True)
            raise

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
        response = await self._to_leader(
            topic, partition,
            lambda connection, timeout: connection.call(
                connection.stub.DeleteRecords, request, timeout),
            self._deadline(timeout_s), resendable=True,
        )
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
        response = await self._to_leader(
            topic, partition,
            lambda connection, timeout: connection.call(
                connection.stub.CleanPartition, request, timeout),
            self._deadline(timeout_s), resendable=True,
        )
        return wire.cleaning_result(topic, partition, response)

    # --- exactly-once ----------------------------------------------------------------------------

    async def _to_transaction_coordinator(
        self, transactional_id: str | None, name: str, request: Any, timeout_s: Any,
    ) -> Any:
        """``request`` as RPC ``name`` to the coordinator of ``transactional_id``: on one
        server (or without an id) the admin path; in a cluster, the leader of the id's state
        partition, which FindCoordinator names (docs/cluster.md, "Transactions"), found again
        once when it answers that it is not (or no longer) the coordinator."""
        if transactional_id is None or not self._routing.in_cluster():
            try:
                return await self._call(name, request, self._deadline(timeout_s))
            except errors.NotCoordinatorError:
                if transactional_id is None:
                    raise
                # A cluster the client did not know it was talking to: find the coordinator.
        for attempt in range(2):
            found = await self.find_coordinator(
                transactional_id, key_type=broker_pb2.COORDINATOR_TYPE_TRANSACTION,
                timeout_s=timeout_s)
            if not found.address:
                raise errors.CoordinatorNotAvailableError(
                    f"FindCoordinator named no address for transactional id"
                    f" {transactional_id!r}")
            connection = self._connection(found.address)
            try:
                return await connection.call(getattr(connection.stub, name), request,
                                             self._deadline(timeout_s))
            except (errors.NotCoordinatorError, errors.CoordinatorNotAvailableError,
                    errors.BrokerUnavailableError) as err:
                if attempt == 1:
                    raise
                logger.debug("%s of transactional id %s to %s: %s; finding the coordinator"
                             " again", name, transactional_id, found.address, err)
        raise AssertionError("unreachable")

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
        response = await self._to_transaction_coordinator(
            transactional_id, "InitProducerId", request, timeout_s)
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
        await self._to_transaction_coordinator(
            transactional_id, "AddPartitionsToTxn", request, timeout_s)

    async def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        *,
        timeout_s: float | None = _UNSET,
    ) -> None:
        """Add group ``group_id``'s ``__consumer_offsets`` partition to the producer's
        transaction (KIP-447; then :meth:`txn_offset_commit`). Raises ProducerFencedError,
        InvalidProducerIdMappingError, ConcurrentTransactionsError (retriable)."""
        request = broker_pb2.AddOffsetsToTxnRequest(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, group_id=group_id)
        await self._to_transaction_coordinator(
            transactional_id, "AddOffsetsToTxn", request, timeout_s)

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
        await self._to_transaction_coordinator(transactional_id, "EndTxn", request, timeout_s)

    async def describe_transaction(
        self, transactional_id: str, *, timeout_s: float | None = _UNSET
    ) -> TransactionDescription:
        """The coordinator's state of ``transactional_id``. Raises
        TransactionalIdNotFoundError."""
        request = wire.describe_transaction_request(transactional_id)
        response = await self._to_transaction_coordinator(
            transactional_id, "DescribeTransaction", request, timeout_s)
        return wire.transaction_description(response)

    # --- security --------------------------------------------------------------------------------

    async def who_am_i(self, *, timeout_s: float | None = _UNSET) -> Identity:
        """The principal the server authenticated this client as, how, and from which host.

        Raises AuthenticationFailedError (wrong credentials).
        """
        response = await self._call(
            "WhoAmI", broker_pb2.WhoAmIRequest(), self._deadline(timeout_s)
        )
        return Identity(response.principal, response.authenticated_by, response.host)

    # --- cluster ---------------------------------------------------------------------------------

    async def metadata(
        self, topics: Sequence[str] = (), *, allow_auto_topic_creation: bool = False,
        timeout_s: float | None = _UNSET,
    ) -> ClusterMetadata:
        """The cluster as the server sees it (the Metadata RPC): brokers, controller and
        epoch, and ``topics`` (empty: every topic the caller may DESCRIBE) with each
        partition's leader, replicas and in-sync replicas. Raises UnknownTopicOrPartitionError
        for a topic named that does not exist, unless ``allow_auto_topic_creation`` (Kafka's
        field of the Metadata request) and the server creates it: its
        ``auto_create_topics_enable`` is on and the caller may CREATE the topic. The answer
        also refreshes the client's metadata cache."""
        response = await self._call(
            "Metadata", wire.metadata_request(topics, allow_auto_topic_creation),
            self._deadline(timeout_s),
        )
        metadata = wire.cluster_metadata(response)
        self._cache.update(metadata, self._home.address, topics)
        return metadata

    # --- ACLs ------------------------------------------------------------------------------------

    async def create_acls(
        self, bindings: Sequence[AclBinding], *, timeout_s: float | None = _UNSET
    ) -> None:
        """Create ACL bindings, all or none (one already there is not repeated). Needs ALTER on
        the cluster. Raises InvalidRequestError naming the first bad binding
        (``creations[2].host``), ResourceLimitExceededError past the server's ACL limits."""
        request = wire.create_acls_request(bindings)
        await self._call("CreateAcls", request, self._deadline(timeout_s))

    async def delete_acls(
        self, filters: Sequence[AclBindingFilter], *, timeout_s: float | None = _UNSET
    ) -> list[AclBinding]:
        """Delete every binding any of ``filters`` selects; the bindings deleted. Needs ALTER
        on the cluster."""
        request = wire.delete_acls_request(filters)
        response = await self._call("DeleteAcls", request, self._deadline(timeout_s))
        return [wire.acl_binding(b) for b in response.deleted]

    async def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, *, timeout_s: float | None = _UNSET
    ) -> list[AclBinding]:
        """The bindings ``acl_filter`` selects (default: all), in creation order. Needs
        DESCRIBE on the cluster."""
        request = wire.describe_acls_request(
            AclBindingFilter() if acl_filter is None else acl_filter
        )
        response = await self._call("DescribeAcls", request, self._deadline(timeout_s))
        return [wire.acl_binding(b) for b in response.acls]
