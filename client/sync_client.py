"""The blocking client: the same methods as :class:`~stratalog.client.Client`, without asyncio.

For scripts, the command line, Spark tasks and threads. It sits on gRPC's own synchronous
channel (``grpc.insecure_channel``), whose calls block the calling thread inside the gRPC core;
no event loop runs in a background thread, so it works in programs that run an event loop of
their own, and in forked workers. Requests and responses go through the same
:mod:`stratalog.client.wire` functions as the async client, so arguments are checked the same way
and results are the same values; errors are the same :mod:`stratalog.client.errors` classes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import grpc

from stratalog.records import Compression
from stratalog.v1 import broker_pb2, broker_pb2_grpc

from . import wire
from .acls import AclBinding, AclBindingFilter
from .bootstrap import bootstrap_targets
from .client import (
    CONNECT_TIMEOUT_MS,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_TIMEOUT_S,
    RETRY_BACKOFF_MS,
    channel_options,
    check_timeout,
    log_throttle,
)
from .credentials import Credentials, TlsConfig, channel_security
from .errors import (
    BrokerUnavailableError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    StratalogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    from_rpc_error,
)
from .metadata_cache import METADATA_MAX_AGE_MS, MetadataCache
from .routing import (
    ATTEMPT_TIME_MIN_S,
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
from .tls_diagnosis import Diagnoser
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

__all__ = ["SyncClient"]

_UNSET: Any = object()

# The period of grpc's connectivity poller (grpc/_channel.py, _poll_connectivity), with slack.
_CONNECTIVITY_POLL_S = 0.25
# A channel in one of these states has settled a connection attempt: connected, failed, or
# closed.
_SETTLED_STATES = (
    grpc.ChannelConnectivity.READY,
    grpc.ChannelConnectivity.TRANSIENT_FAILURE,
    grpc.ChannelConnectivity.SHUTDOWN,
)


class SyncClient:
    """A blocking client of a stratalog server or cluster: every RPC of the Broker service.

    Holds the bootstrap targets, one synchronous gRPC channel per broker address it talked to,
    the :class:`~.metadata_cache.MetadataCache` and the default deadline; routes requests as
    the async :class:`~stratalog.client.Client` does (its module docstring, "Routing"), with
    the same :mod:`~stratalog.client.routing` decisions, waiting by blocking the calling
    thread. Thread-safe: gRPC channels may be shared by threads, and the routing state, the
    cache and the connections are changed under a lock. Use it as
    ``with SyncClient(target) as client:`` or call :meth:`close`. Arguments and results are
    those of :class:`~stratalog.client.Client`.
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
        retry_backoff_ms: int = RETRY_BACKOFF_MS,
        metadata_max_age_ms: int = METADATA_MAX_AGE_MS,
    ) -> None:
        self._targets = bootstrap_targets(target)
        self._target = ",".join(self._targets)
        self._timeout_s = check_timeout(timeout_s)
        self._credentials, tls_options, self._metadata = channel_security(
            self._target, tls, auth, credentials
        )
        self._channel_args = channel_options(max_message_bytes, [*tls_options, *options])
        self._tls = tls
        self._diagnosers: dict[str, Diagnoser] = {}
        self._retry_backoff_s = wire.check_int(
            retry_backoff_ms, "retry_backoff_ms", 0, 3_600_000) / 1000.0
        self._cache = MetadataCache(max_age_ms=wire.check_int(
            metadata_max_age_ms, "metadata_max_age_ms", 0, wire.INT32_MAX))
        self._lock = threading.Lock()  # the routing state and cache, the connections
        self._refresh_lock = threading.Lock()  # one refresh at a time
        self._channels: dict[str, tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]] = {}
        # Addresses connected once (a request that finds one gone UNAVAILABLE drops it), and
        # when gRPC's connectivity poller was last started (close() lets it stop first).
        self._ready: set[str] = set()
        self._watched_at = -float("inf")
        self._routing = Routing(self._targets, self._cache,
                                retry_backoff_s=self._retry_backoff_s)
        self._connection(self._home)

    def _connection(self, address: str) -> broker_pb2_grpc.BrokerStub:
        """The stub of ``address``, its channel opened if there is none."""
        with self._lock:
            entry = self._channels.get(address)
            if entry is None:
                if self._credentials is None:
                    channel = grpc.insecure_channel(address, options=self._channel_args)
                else:
                    channel = grpc.secure_channel(
                        address, self._credentials, options=self._channel_args
                    )
                entry = self._channels[address] = (channel, broker_pb2_grpc.BrokerStub(channel))
            return entry[1]

    @property
    def _home(self) -> str:
        """The home broker's address (:attr:`~.routing.Routing.home`)."""
        return self._routing.home

    @_home.setter
    def _home(self, address: str) -> None:
        self._routing.home = address

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
        """The client's view of the cluster (read it; the client keeps it)."""
        return self._cache

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every channel; calls still running end with a cancelled error."""
        # gRPC's connectivity poller (started by a wait for a connection) looks at its channel
        # every 0.2 s until it notices it is not needed: closing the channel under it makes it
        # raise in its thread.
        poller_left_s = self._watched_at + _CONNECTIVITY_POLL_S - time.monotonic()
        if poller_left_s > 0:
            time.sleep(poller_left_s)
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        for channel, _ in channels:
            channel.close()

    def wait_ready(self, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Block until a bootstrap target is connected (tried in order, sharing ``timeout_s``);
        ``BrokerUnavailableError`` after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        share = None if timeout_s is None else timeout_s / len(self._targets)
        for target in self._targets:
            self._connection(target)
            with self._lock:
                channel = self._channels[target][0]
            wait = share if deadline is None else max(0.0, min(
                share or 0.0, deadline - time.monotonic()))
            try:
                grpc.channel_ready_future(channel).result(
                    timeout=None if timeout_s is None else wait)
            except grpc.FutureTimeoutError:
                continue
            self._home = target
            return
        raise self._diagnoser(self._targets[0]).diagnosed(BrokerUnavailableError(
            f"no connection to {self._target} within {timeout_s} s",
            code=grpc.StatusCode.UNAVAILABLE,
        ), None)

    def _deadline(self, timeout_s: Any, extra_ms: int = 0) -> float | None:
        timeout = self._timeout_s if timeout_s is _UNSET else check_timeout(timeout_s)
        if timeout is None:
            return None
        return timeout + extra_ms / 1000.0

    def _ensure_ready(self, address: str, deadline: float | None) -> None:
        """The async BrokerConnection's ``ensure_ready``, in a cluster only: return once the
        channel to ``address`` is connected; BrokerUnavailableError as soon as a connection
        attempt failed (a dead process refuses at once: TRANSIENT_FAILURE), or after
        CONNECT_TIMEOUT_MS (or at ``deadline``) without an answer (an address that drops
        packets). Tells the cache whether ``address`` answered."""
        if address in self._ready:
            return
        wait = CONNECT_TIMEOUT_MS / 1000
        if deadline is not None:
            wait = min(wait, max(deadline - time.monotonic(), ATTEMPT_TIME_MIN_S))
        self._connection(address)
        with self._lock:
            channel = self._channels[address][0]
            self._watched_at = time.monotonic()
        # gRPC's connectivity poller calls ``watch`` with the channel's state now, then with
        # each change; the wait ends at the first settled one.
        changed = threading.Condition()
        latest: list[grpc.ChannelConnectivity | None] = [None]

        def watch(state: grpc.ChannelConnectivity) -> None:
            with changed:
                latest[0] = state
                changed.notify_all()

        channel.subscribe(watch, try_to_connect=True)
        try:
            with changed:
                changed.wait_for(lambda: latest[0] in _SETTLED_STATES, timeout=wait)
                state = latest[0]
        finally:
            channel.unsubscribe(watch)
            with self._lock:
                self._watched_at = time.monotonic()
        if state is grpc.ChannelConnectivity.READY:
            self._ready.add(address)
            self._diagnoser(address).connected = True
            with self._lock:
                self._cache.mark_reachable(address)
            return
        with self._lock:
            self._cache.mark_unreachable(address)
        if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            message = (f"no connection to {address}: the connection attempt failed"
                       " (refused, reset or timed out)")
        elif state is grpc.ChannelConnectivity.SHUTDOWN:
            message = f"no connection to {address}: the client closed the channel"
        else:
            message = f"no connection to {address} within {wait:.1f} s"
        error = BrokerUnavailableError(message, code=grpc.StatusCode.UNAVAILABLE)
        if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            raise self._diagnoser(address).diagnosed(error, None)
        raise error

    def _diagnoser(self, address: str) -> Diagnoser:
        """The :class:`~.tls_diagnosis.Diagnoser` of ``address`` (one per address, kept while
        the client lives, as its channel is)."""
        diagnoser = self._diagnosers.get(address)  # the common case, without the lock
        if diagnoser is not None:
            return diagnoser
        with self._lock:
            diagnoser = self._diagnosers.get(address)
            if diagnoser is None:
                diagnoser = self._diagnosers[address] = Diagnoser(
                    address, self._tls, tls_on=self._credentials is not None)
            return diagnoser

    def _error_of(self, address: str, err: grpc.RpcError) -> StratalogError:
        """The StratalogError of a failed call to ``address`` (diagnosed: a TLS set-up the
        server refuses becomes a TlsHandshakeError; that may probe, blocking)."""
        error = from_rpc_error(err)
        return self._diagnoser(address).diagnosed(error, error.message)

    def _invoke(self, address: str, name: str, request: Any, timeout: float | None) -> Any:
        stub = self._connection(address)
        try:
            response = getattr(stub, name)(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            error = self._error_of(address, err)
            if isinstance(error, UNANSWERED):
                self._ready.discard(address)  # connect again before the next call there
            raise error from err
        self._diagnoser(address).connected = True
        return response

    # --- routing (the async Client's, blocking) --------------------------------------------------

    def _call(self, name: str, request: Any, timeout: float | None) -> Any:
        """An admin request: to the home broker; in a cluster, to the brokers known and the
        bootstrap targets in turn (the unreachable ones last) until one answers, within
        ``timeout``."""
        if not self._routing.in_cluster():
            return self._invoke(self._home, name, request, timeout)
        with self._lock:
            walk = BrokerWalk(self._routing, deadline=None if timeout is None else
                              time.monotonic() + timeout)
        while (attempt := walk.next_attempt(time.monotonic())) is not None:
            try:
                self._ensure_ready(attempt.address, walk.deadline)
                response = self._invoke(attempt.address, name, request, attempt.timeout_s)
            except UNANSWERED as err:
                self._unanswered(walk, attempt.address, err)
                continue
            self._home = attempt.address
            return response
        raise walk.first_error or walk.timed_out(f"{name}: no broker answered within {timeout} s")

    def _unanswered(self, walk: BrokerWalk, address: str, error: StratalogError) -> None:
        """A call to ``address`` went unanswered: connect again before the next, and ask it
        last."""
        self._ready.discard(address)
        with self._lock:
            walk.unanswered(address, error)

    def _to_leader(
        self, topic: str, partition: int, name: str, request: Any, timeout: float | None,
        *, resendable: bool,
    ) -> Any:
        """``request`` (the stub's ``name``) to the partition's leader, rerouted within
        ``timeout`` as the :class:`~.routing.LeaderRouter` says, as the async Client's
        ``_to_leader``; this is its I/O, blocking."""
        with self._lock:
            router = LeaderRouter(self._routing, topic, partition, resendable=resendable,
                                  timeout_s=timeout, now=time.monotonic())
        while True:
            with self._lock:  # the router reads and updates the cache
                step = router.next_step(time.monotonic())
            if isinstance(step, Send):
                try:
                    if step.connect:
                        self._ensure_ready(step.address, router.deadline)
                except StratalogError as err:
                    router.connect_failed(err)
                    continue
                try:
                    return self._invoke(step.address, name, request,
                                        router.timeout_s(time.monotonic()))
                except StratalogError as err:
                    router.send_failed(err)
            elif isinstance(step, Refresh):
                try:
                    self._refresh(topic, router.deadline)
                except StratalogError as err:
                    router.refresh_failed(err)
                else:
                    router.refreshed()
            elif isinstance(step, CheckTopic):
                router.topic_checked(self._known_elsewhere(topic, partition, router.deadline))
            elif isinstance(step, Backoff):
                time.sleep(step.delay_s)
            else:
                raise step.error

    def _known_elsewhere(self, topic: str, partition: int, deadline: float | None) -> bool:
        """The async Client's ``_known_elsewhere``: after UNKNOWN_TOPIC_OR_PARTITION, whether
        a metadata refresh names a leader of the partition (:class:`~.routing.TopicCheck`)."""
        with self._lock:
            check = TopicCheck(self._routing, topic, partition, deadline=deadline)
        while True:
            with self._lock:  # the check reads and updates the cache
                step = check.next_step(time.monotonic())
            if isinstance(step, Found):
                return step.known
            if isinstance(step, AskCluster):
                self._ask_cluster(check, step)
                continue
            try:
                self._refresh(topic, deadline)
            except StratalogError:
                with self._lock:
                    check.refresh_failed()
            else:
                with self._lock:
                    check.refreshed()

    def _ask_cluster(self, asker: TopicCheck | NewTopicWait, step: AskCluster) -> None:
        """The async Client's ``_ask_cluster``: the home server's Metadata about no topics,
        its answer (or that there was none) told to ``asker``."""
        try:
            response = self._call("Metadata", wire.metadata_request(()), step.timeout_s)
        except StratalogError:
            with self._lock:
                asker.cluster_unanswered()
            return
        with self._lock:
            asker.cluster_answered(wire.cluster_metadata(response), self._home)

    def _leader(self, topic: str, partition: int, deadline: float | None) -> str:
        """The address of the partition's leader (the topic refreshed first if needed):
        :meth:`~.routing.Routing.leader`."""
        with self._lock:
            refresh = self._cache.needs_refresh(topic)
        if refresh:
            self._refresh(topic, deadline)
        with self._lock:
            return self._routing.leader(topic, partition)

    def _refresh(self, topic: str, deadline: float | None) -> None:
        asked_at = time.monotonic()
        with self._refresh_lock:
            with self._lock:
                wait = self._routing.refresh_wait_s(topic, asked_at=asked_at,
                                                    now=time.monotonic())
                if wait is None:
                    return
                walk = BrokerWalk(self._routing, deadline=deadline)
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            if wait > 0:
                time.sleep(wait)
            try:
                self._fetch_metadata(topic, walk)
            finally:
                with self._lock:
                    self._routing.refresh_ended(time.monotonic())

    def _fetch_metadata(self, topic: str, walk: BrokerWalk) -> None:
        """Metadata about ``topic``, from the brokers in turn (``walk``) until one answers,
        into the cache; a topic no broker knows is forgotten."""
        request = wire.metadata_request([topic])
        while (attempt := walk.next_attempt(time.monotonic())) is not None:
            timeout = attempt.timeout_s if self._timeout_s is None else (
                self._timeout_s if attempt.timeout_s is None
                else min(self._timeout_s, attempt.timeout_s))
            try:
                self._ensure_ready(attempt.address, walk.deadline)
                response = self._invoke(attempt.address, "Metadata", request, timeout)
            except UnknownTopicOrPartitionError as err:
                walk.unknown_topic(err)  # another server's view may have it already
                continue
            except UNANSWERED as err:
                self._unanswered(walk, attempt.address, err)
                continue
            with self._lock:
                self._cache.update(wire.cluster_metadata(response), attempt.address, [topic])
            self._home = attempt.address
            return
        with self._lock:
            if walk.topics_unknown([topic]):
                return
        raise walk.last_error or walk.timed_out(f"no metadata for {topic} before the deadline")

    # --- topics ----------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        replication_factor: int | None = None,
        exist_ok: bool = False,
        timeout_s: float | None = _UNSET,
    ) -> TopicInfo:
        """See :meth:`Client.create_topic <stratalog.client.Client.create_topic>` (with
        ``exist_ok=True``, an existing topic's TopicInfo is returned as it is)."""
        wire.check_bool(exist_ok, "exist_ok")
        request = wire.create_topic_request(name, partitions, configs, replication_factor)
        try:
            response = self._call("CreateTopic", request, self._deadline(timeout_s))
        except TopicAlreadyExistsError:
            if not exist_ok:
                raise
            return self.describe_topic(name, timeout_s=timeout_s)
        return wire.topic_info(response.topic)

    def delete_topic(self, name: str, *, timeout_s: float | None = _UNSET) -> None:
        """See :meth:`Client.delete_topic <stratalog.client.Client.delete_topic>`."""
        request = wire.delete_topic_request(name)
        self._call("DeleteTopic", request, self._deadline(timeout_s))

    def list_topics(self, *, timeout_s: float | None = _UNSET) -> list[TopicInfo]:
        """See :meth:`Client.list_topics <stratalog.client.Client.list_topics>`."""
        response = self._call(
            "ListTopics", broker_pb2.ListTopicsRequest(), self._deadline(timeout_s)
        )
        return sorted((wire.topic_info(t) for t in response.topics), key=lambda t: t.name)

    def describe_topic(self, name: str, *, timeout_s: float | None = _UNSET) -> TopicInfo:
        """See :meth:`Client.describe_topic <stratalog.client.Client.describe_topic>` (in a
        cluster, a topic one server does not know yet is asked of the others too)."""
        request = wire.describe_topic_request(name)
        timeout = self._deadline(timeout_s)
        try:
            response = self._call("DescribeTopic", request, timeout)
        except UnknownTopicOrPartitionError:
            response = self._describe_until_known(request, timeout)
            if response is None:
                raise
        return wire.topic_info(response.topic)

    def _describe_until_known(self, request: Any, timeout: float | None) -> Any:
        """The async Client's ``_describe_until_known`` (:class:`~.routing.NewTopicWait`),
        blocking."""
        with self._lock:
            wait = NewTopicWait(self._routing, timeout_s=timeout, now=time.monotonic())
        while True:
            with self._lock:  # the wait reads the cache's candidates
                step = wait.next_step(time.monotonic())
            if step is None:
                return None
            if isinstance(step, AskCluster):
                self._ask_cluster(wait, step)
            elif isinstance(step, Backoff):
                time.sleep(step.delay_s)
            else:
                try:
                    return self._invoke(step.address, "DescribeTopic", request, step.timeout_s)
                except NOT_THERE:
                    continue

    def alter_topic_configs(
        self,
        name: str,
        set: Mapping[str, str] | None = None,  # the RPC field names, shadowing is harmless
        delete: Sequence[str] = (),
        *,
        timeout_s: float | None = _UNSET,
    ) -> TopicInfo:
        """See :meth:`Client.alter_topic_configs <stratalog.client.Client.alter_topic_configs>`."""
        request = wire.alter_topic_configs_request(name, set, delete)
        response = self._call("AlterTopicConfigs", request, self._deadline(timeout_s))
        return wire.topic_info(response.topic)

    def create_partitions(
        self, name: str, count: int, *, timeout_s: float | None = _UNSET
    ) -> TopicInfo:
        """See :meth:`Client.create_partitions <stratalog.client.Client.create_partitions>`."""
        request = wire.create_partitions_request(name, count)
        response = self._call("CreatePartitions", request, self._deadline(timeout_s))
        return wire.topic_info(response.topic)

    def elect_leaders(
        self, partitions: Iterable[tuple[str, int]] | None = None, *, unclean: bool = False,
        timeout_s: float | None = _UNSET,
    ) -> dict[tuple[str, int], StratalogError | None]:
        """See :meth:`Client.elect_leaders <stratalog.client.Client.elect_leaders>`."""
        request = wire.elect_leaders_request(partitions, unclean)
        response = self._call("ElectLeaders", request, self._deadline(timeout_s))
        return wire.elect_leaders_outcomes(response)

    def alter_partition_reassignments(
        self, targets: Mapping[tuple[str, int], Sequence[int] | None], *,
        timeout_s: float | None = _UNSET,
    ) -> dict[tuple[str, int], StratalogError | None]:
        """See :meth:`Client.alter_partition_reassignments
        <stratalog.client.Client.alter_partition_reassignments>`."""
        request = wire.alter_partition_reassignments_request(targets)
        response = self._call("AlterPartitionReassignments", request, self._deadline(timeout_s))
        return wire.reassignment_outcomes(response.results)

    def list_partition_reassignments(
        self, partitions: Iterable[tuple[str, int]] | None = None, *,
        timeout_s: float | None = _UNSET,
    ) -> list[PartitionReassignment]:
        """See :meth:`Client.list_partition_reassignments
        <stratalog.client.Client.list_partition_reassignments>` (without ``progress``: the
        answering server's view)."""
        request = wire.list_partition_reassignments_request(partitions)
        return wire.partition_reassignments(
            self._call("ListPartitionReassignments", request, self._deadline(timeout_s)))

    def drain_broker(
        self, node_id: int, *, timeout_s: float | None = _UNSET,
    ) -> dict[tuple[str, int], tuple[int, ...] | StratalogError]:
        """See :meth:`Client.drain_broker <stratalog.client.Client.drain_broker>`."""
        request = broker_pb2.DrainBrokerRequest(node_id=wire.check_int(node_id, "node_id", 0,
                                                               wire.INT32_MAX))
        return wire.drain_outcomes(
            self._call("DrainBroker", request, self._deadline(timeout_s)))

    # --- records ---------------------------------------------------------------------------------

    def produce(
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
        """See :meth:`Client.produce <stratalog.client.Client.produce>`."""
        request = wire.produce_request(
            topic, partition, records, record_batches, compression, flush,
            producer_id, producer_epoch, base_sequence, transactional, acks, transactional_id,
        )
        response = self._to_leader(
            topic, partition, "Produce", request, self._deadline(timeout_s), resendable=False
        )
        log_throttle("produce to", topic, partition, response.throttle_time_ms)
        return wire.produce_result(response)

    def fetch_by_offset(
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
        """See :meth:`Client.fetch_by_offset <stratalog.client.Client.fetch_by_offset>`."""
        request = wire.fetch_by_offset_request(
            topic, partition, offset, max_bytes, max_wait_ms, min_bytes, fetch_format,
            isolation_level, max_records,
        )
        response = self._to_leader(
            topic, partition, "FetchByOffset", request, self._deadline(timeout_s, max_wait_ms),
            resendable=True,
        )
        log_throttle("fetch from", topic, partition, response.throttle_time_ms)
        return wire.fetch_result(response, by_timestamp=False)

    def fetch_by_timestamp(
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
        """See :meth:`Client.fetch_by_timestamp <stratalog.client.Client.fetch_by_timestamp>`."""
        request = wire.fetch_by_timestamp_request(
            topic, partition, timestamp_ms, max_bytes, fetch_format, isolation_level,
            max_records,
        )
        response = self._to_leader(
            topic, partition, "FetchByTimestamp", request, self._deadline(timeout_s), resendable=True
        )
        log_throttle("fetch from", topic, partition, response.throttle_time_ms)
        return wire.fetch_result(response, by_timestamp=True)

    def list_offsets(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        timeout_s: float | None = _UNSET,
    ) -> OffsetAndTimestamp:
        """See :meth:`Client.list_offsets <stratalog.client.Client.list_offsets>`."""
        request = wire.list_offsets_request(topic, partition, timestamp_ms, isolation_level)
        response = self._to_leader(
            topic, partition, "ListOffsets", request, self._deadline(timeout_s), resendable=True
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
    ) -> Iterator[FetchResult]:
        """See :meth:`Client.subscribe <stratalog.client.Client.subscribe>`.

        A generator; closing it (``close()``, ``break`` then garbage collection, or leaving a
        ``with contextlib.closing(...)`` block) cancels the stream.
        """
        # Checked here, before the generator starts, so a bad argument raises at the call.
        request = wire.subscribe_request(
            topic, partition, offset, timestamp_ms, max_bytes, fetch_format, isolation_level
        )
        deadline = check_timeout(timeout_s)
        return self._stream(request, deadline, by_timestamp=timestamp_ms is not None)

    def _stream(
        self, request: broker_pb2.SubscribeRequest, timeout: float | None, *, by_timestamp: bool
    ) -> Iterator[FetchResult]:
        topic, partition = request.topic, request.partition
        address = self._home
        try:
            if self._routing.route_by_metadata:
                deadline = None if timeout is None else time.monotonic() + timeout
                address = self._leader(topic, partition, deadline)
            stub = self._connection(address)
            call = stub.Subscribe(request, timeout=timeout, metadata=self._metadata)
            try:
                for response in call:
                    log_throttle("subscription to", topic, partition, response.throttle_time_ms)
                    yield wire.fetch_result(response, by_timestamp=by_timestamp)
            except grpc.RpcError as err:
                raise self._error_of(address, err) from err
            finally:
                call.cancel()
        except StratalogError as err:
            # Not subscribed again here: the cache learns where the next stream goes.
            with self._lock:
                self._routing.learn(err, topic=topic, partition=partition, refused_by=address,
                                    resendable=True)
            raise

    def delete_records(
        self,
        topic: str,
        partition: int,
        before_offset: int,
        *,
        timeout_s: float | None = _UNSET,
    ) -> int:
        """See :meth:`Client.delete_records <stratalog.client.Client.delete_records>`."""
        request = wire.delete_records_request(topic, partition, before_offset)
        response = self._to_leader(
            topic, partition, "DeleteRecords", request, self._deadline(timeout_s), resendable=True
        )
        return response.log_start_offset

    def clean_partition(
        self, topic: str, partition: int, *, timeout_s: float | None = _UNSET
    ) -> CleaningResult:
        """See :meth:`Client.clean_partition <stratalog.client.Client.clean_partition>`."""
        request = wire.clean_partition_request(topic, partition)
        response = self._to_leader(
            topic, partition, "CleanPartition", request, self._deadline(timeout_s), resendable=True
        )
        return wire.cleaning_result(topic, partition, response)

    # --- exactly-once ----------------------------------------------------------------------------

    def _to_transaction_coordinator(
        self, transactional_id: str | None, name: str, request: Any, timeout_s: Any,
    ) -> Any:
        """As the Client's: to the coordinator of ``transactional_id`` (in a cluster, the
        server FindCoordinator names, found again once when it is not the coordinator)."""
        timeout = self._deadline(timeout_s)
        if transactional_id is None or not self._routing.in_cluster():
            try:
                return self._call(name, request, timeout)
            except NotCoordinatorError:
                if transactional_id is None:
                    raise
                # A cluster the client did not know it was talking to: find the coordinator.
        for attempt in range(2):
            found = self._call("FindCoordinator", broker_pb2.FindCoordinatorRequest(
                key=transactional_id, key_type=broker_pb2.COORDINATOR_TYPE_TRANSACTION),
                timeout)
            if not found.address:
                raise CoordinatorNotAvailableError(
                    f"FindCoordinator named no address for transactional id"
                    f" {transactional_id!r}")
            try:
                self._ensure_ready(found.address, None if timeout is None
                                   else time.monotonic() + timeout)
                return self._invoke(found.address, name, request, timeout)
            except (NotCoordinatorError, CoordinatorNotAvailableError,
                    BrokerUnavailableError):
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def init_producer_id(
        self,
        transactional_id: str | None = None,
        *,
        transaction_timeout_ms: int = 0,
        timeout_s: float | None = _UNSET,
    ) -> ProducerIdAndEpoch:
        """See :meth:`Client.init_producer_id <stratalog.client.Client.init_producer_id>`."""
        request = wire.init_producer_id_request(transactional_id, transaction_timeout_ms)
        response = self._to_transaction_coordinator(
            transactional_id, "InitProducerId", request, timeout_s)
        return wire.producer_id_and_epoch(response)

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition | tuple[str, int]],
        *,
        timeout_s: float | None = _UNSET,
    ) -> None:
        """See :meth:`Client.add_partitions_to_txn
        <stratalog.client.Client.add_partitions_to_txn>`."""
        request = wire.add_partitions_to_txn_request(
            transactional_id, producer_id, producer_epoch, partitions
        )
        self._to_transaction_coordinator(
            transactional_id, "AddPartitionsToTxn", request, timeout_s)

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        timeout_s: float | None = _UNSET,
    ) -> None:
        """See :meth:`Client.end_txn <stratalog.client.Client.end_txn>`."""
        request = wire.end_txn_request(transactional_id, producer_id, producer_epoch, commit)
        self._to_transaction_coordinator(transactional_id, "EndTxn", request, timeout_s)

    def describe_transaction(
        self, transactional_id: str, *, timeout_s: float | None = _UNSET
    ) -> TransactionDescription:
        """See :meth:`Client.describe_transaction
        <stratalog.client.Client.describe_transaction>`."""
        request = wire.describe_transaction_request(transactional_id)
        response = self._to_transaction_coordinator(
            transactional_id, "DescribeTransaction", request, timeout_s)
        return wire.transaction_description(response)

    # --- security --------------------------------------------------------------------------------

    def who_am_i(self, *, timeout_s: float | None = _UNSET) -> Identity:
        """See :meth:`Client.who_am_i <stratalog.client.Client.who_am_i>`."""
        response = self._call(
            "WhoAmI", broker_pb2.WhoAmIRequest(), self._deadline(timeout_s)
        )
        return Identity(response.principal, response.authenticated_by, response.host)

    # --- cluster ---------------------------------------------------------------------------------

    def metadata(
        self, topics: Sequence[str] = (), *, allow_auto_topic_creation: bool = False,
        timeout_s: float | None = _UNSET,
    ) -> ClusterMetadata:
        """See :meth:`Client.metadata <stratalog.client.Client.metadata>`."""
        response = self._call(
            "Metadata", wire.metadata_request(topics, allow_auto_topic_creation),
            self._deadline(timeout_s),
        )
        metadata = wire.cluster_metadata(response)
        with self._lock:
            self._cache.update(metadata, self._home, topics)
        return metadata

    # --- ACLs ------------------------------------------------------------------------------------

    def create_acls(
        self, bindings: Sequence[AclBinding], *, timeout_s: float | None = _UNSET
    ) -> None:
        """See :meth:`Client.create_acls <stratalog.client.Client.create_acls>`."""
        request = wire.create_acls_request(bindings)
        self._call("CreateAcls", request, self._deadline(timeout_s))

    def delete_acls(
        self, filters: Sequence[AclBindingFilter], *, timeout_s: float | None = _UNSET
    ) -> list[AclBinding]:
        """See :meth:`Client.delete_acls <stratalog.client.Client.delete_acls>`."""
        request = wire.delete_acls_request(filters)
        response = self._call("DeleteAcls", request, self._deadline(timeout_s))
        return [wire.acl_binding(b) for b in response.deleted]

    def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, *, timeout_s: float | None = _UNSET
    ) -> list[AclBinding]:
        """See :meth:`Client.describe_acls <stratalog.client.Client.describe_acls>`."""
        request = wire.describe_acls_request(
            AclBindingFilter() if acl_filter is None else acl_filter
        )
        response = self._call("DescribeAcls", request, self._deadline(timeout_s))
        return [wire.acl_binding(b) for b in response.acls]
