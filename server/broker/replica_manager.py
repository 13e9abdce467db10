"""The partition-serving layer: every write to a partition and every read of one goes through
:class:`ReplicaManager`.

Kafka's ``ReplicaManager`` (``core/src/main/scala/kafka/server/ReplicaManager.scala``:
``appendRecords``, ``fetchMessages``, ``deleteRecords``) over its ``Partition``\\ s
(partition.py), with the waits of its purgatories: the acks=all produce (delayed_produce.py) and
the long poll (delayed_fetch.py). A front end (the gRPC servicer, server/rpc/service.py; a Kafka
protocol listener later) checks a request's shape, makes one call here and translates the
answer; what it means to serve a partition is decided here:

* **who may be served**: a replicated partition (cluster mode) only on its leader, under its
  lease (server/cluster/replica.py), appends stamped with the leader's epoch; a single server
  is replication factor 1 with itself as leader (epoch 0);
* **writers** (each wakes the partition's readers and completes its delayed operations through
  :meth:`ReplicaManager.complete_delayed`, the one path):

  ==================  =========================================================
  client produce      :meth:`append_records` (append lock, placement, acks=all)
  transaction marker  :meth:`write_txn_markers` (the coordinator's pool threads)
  follower append     the replica fetcher tells its replica (``ReplicaEvents``)
  high watermark      the leader's replica tells it (``ReplicaEvents``)
  cleaner swap        the log cleaner's listener (``CleanerManager.cleaned_listener``)
  topic deletion      :meth:`delete_partitions` (waiters wake for good)
  ==================  =========================================================

* **where the work runs**: an append is tried inline when the placement says so
  (append_placement.py) through ``PartitionLog.try_append_without_blocking``, and what storage
  gives back undone (a roll, an fsync for ``flush.messages``, the log's lock held by
  maintenance) is finished in the thread pool, so the loop never waits on the file system
  (docs/server.md, "Where appends run"); a ``flush`` append runs in the pool; small reads run
  on the loop (page-cache reads are cheaper inline than a thread hop), large ones in the pool;
* **waits**: a long poll that found too little waits on the partition's reader wake-up it took
  *before* reading (so a write between its read and its wait is never missed), up to its
  ``max_wait_ms``; an acks=all produce waits until the high watermark passed its records.

Shutdown: :meth:`begin_shutdown` makes waiting long polls answer with what they have, ends
Subscribe streams that wait (SHUTTING_DOWN, retriable) and answers acks=all producers
SHUTTING_DOWN; appends in flight complete.

Concurrency: event-loop only, but for :meth:`write_txn_markers` (pool threads) and the cleaner's
listener (cleaner threads), which hand their wake-ups to the loop. Blocking storage calls go to
the executor given at construction; LogManager admin calls are serialised by one asyncio lock
(:meth:`admin`), so that the LogManager sees one admin operation at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from stratalog.server.append_placement import AppendPlacement
from stratalog.server.byte_budget import ByteBudget
from stratalog.server.storage.errors import (
    InvalidTopicError,
    LogClosedError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.storage.fetch_isolation import SlicedWalk
from stratalog.server.storage.log_manager import SERVER_WRITTEN_TOPICS
from stratalog.server.storage.partition_log import LEADER_EPOCH, AppendInfo, IsolationLevel

from .partition import Partition

if TYPE_CHECKING:
    from stratalog.server.cluster.node import ClusterNode
    from stratalog.server.cluster.replica import Replica
    from stratalog.server.cluster.replica_roles import ReplicaRoles
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.settings import Settings
    from stratalog.server.storage.cleaner import CleaningResult
    from stratalog.server.storage.log_manager import LogManager
    from stratalog.server.storage.partition_log import FetchedBatches, PartitionLog
    from stratalog.server.storage.time_index import TimestampOffset
    from stratalog.server.transactions import TransactionCoordinator

__all__ = ["ACKS_ALL", "FetchResult", "PartitionRead", "PartitionReadResult", "ReplicaManager"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Kafka's acks=all: wait for every in-sync replica.
ACKS_ALL = -1
#: ListOffsets' target for the log end a reader sees (the LSO for READ_COMMITTED).
_LATEST = -1


class TransactionVerifier(Protocol):
    """Cluster mode: a leader not told of a producer's transaction asks its coordinator
    (server/transaction_service/append_verifier.py)."""

    async def verify_before_append(self, topic: str, partition: int,
                                   transactional_id: str | None,
                                   records: bytes | memoryview) -> None: ...

    async def verify_producer(self, topic: str, partition: int, transactional_id: str,
                              producer_id: int, producer_epoch: int) -> None: ...


class Releasable(Protocol):
    """A slot a waiting request holds (client_limits.py's WaitingRpc)."""

    def release(self) -> None: ...


class FetchResult(NamedTuple):
    """What a fetch read: the batches (for a ``max_records`` fetch, the records taken:
    :meth:`PartitionLog.take_records`), and the log they came from (whose high watermark, log
    start and last stable offset the answer carries, read after the data)."""

    log: PartitionLog
    fetched: FetchedBatches | SlicedWalk


class PartitionRead(NamedTuple):
    """One partition of a multi-partition fetch (:meth:`ReplicaManager.fetch_messages`)."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    #: The leader epoch the client believes current (Kafka's Fetch v9+), -1: unchecked.
    current_leader_epoch: int = -1


class PartitionReadResult(NamedTuple):
    """What :meth:`ReplicaManager.fetch_messages` read of one partition: the batches and the
    log they came from (its high watermark, log start and LSO read after the data), or the
    error that partition met (the others are read regardless)."""

    read: PartitionRead
    log: PartitionLog | None
    fetched: FetchedBatches | None
    error: Exception | None


def client_out_of_range(
    topic: str, partition: int, offset: int, exc: OffsetOutOfRangeError
) -> OffsetOutOfRangeError:
    """The engine's error as the client should see it: the engine names the log by its
    directory; the client named a topic partition, and must not learn the server's paths
    (docs/api.md)."""
    return OffsetOutOfRangeError(
        f"offset {offset} is out of range for {topic}-{partition}: the log holds "
        f"offsets [{exc.log_start_offset}, {exc.log_end_offset})",
        log_start_offset=exc.log_start_offset,
        log_end_offset=exc.log_end_offset,
    )


def _close_regions(results: list[PartitionReadResult]) -> None:
    """Give back the file regions of reads that will not be answered (file_region.py)."""
    for result in results:
        data = result.fetched.data if result.fetched is not None else None
        if getattr(data, "file_region", False):
            data.close()  # type: ignore[union-attr]


def _nothing_read(offset: int) -> FetchedBatches:
    from stratalog.server.storage.segment import FetchedBatches

    return FetchedBatches(b"", offset, 0)


async def _wait_any(signals: list[asyncio.Event], timeout_s: float) -> None:
    """Wait until one of ``signals`` is set or ``timeout_s`` passed."""
    if len(signals) == 1:
        await Partition.wait(signals[0], timeout_s)
        return
    if any(signal.is_set() for signal in signals):
        return
    waiters = [asyncio.ensure_future(signal.wait()) for signal in dict.fromkeys(signals)]
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _upper_bound(partition_log: PartitionLog) -> int | None:
    """Where a consumer's read stops: a replicated partition's high watermark (None: the log
    end, a single server's)."""
    return partition_log.high_watermark if partition_log.tracks_high_watermark else None


class ReplicaManager:
    """This server's partitions as they are served (module docstring).

    Holds the LogManager, the settings, the metrics, the executor, the placement, the budget of
    decompressed bytes, one :class:`Partition` per partition that has been produced to or read
    from, the admin lock, and once joined to a cluster the cluster node and the replica roles
    (server/cluster/replica_roles.py), which tell it of their changes (``ReplicaEvents``).

    The transaction coordinator is opened with :meth:`write_txn_markers` as its marker writer
    (it completes half-written transactions as it loads), so it exists only after this
    manager: :meth:`verify_transactions_with` hands it over, before anything is served.
    """

    def __init__(
        self,
        log_manager: LogManager,
        settings: Settings,
        metrics: ServerMetrics,
        executor: Executor,
        *,
        placement: AppendPlacement | None = None,
    ) -> None:
        """``placement`` defaults to the settings' rule."""
        self.log_manager = log_manager
        self._settings = settings
        self._metrics = metrics
        self._executor = executor
        self.placement = placement if placement is not None else AppendPlacement(settings)
        #: The bytes compressed Produce requests may decompress to while they are validated,
        #: all together (each is charged produce_decompressed_bytes_max; the rest wait).
        self.decompression = ByteBudget(
            "produce_decompressed_bytes_in_flight_max",
            settings.produce_decompressed_bytes_in_flight_max,
        )
        self._coordinator: TransactionCoordinator | None = None
        #: Cluster mode: asks a producer's coordinator before a transactional append this
        #: server was not told of (server/transaction_service/append_verifier.py).
        self._transaction_verifier: TransactionVerifier | None = None
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._admin_lock = asyncio.Lock()
        self.shutting_down = False
        #: The event loop, from the first Partition made on it: before that nobody waits, and
        #: the writers in other threads have nobody to wake.
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Told (on the loop) of each transaction marker written to a topic the server writes
        #: itself (``topic, partition, producer_id, committed``): the group coordinators apply
        #: their transactional offsets so (server/group_service/). None: nobody listens.
        self.internal_marker_listener: Callable[[str, int, int, bool], None] | None = None
        #: This server in the cluster and its replicas' roles, once it joined (join_cluster).
        self.cluster_node: ClusterNode | None = None
        self.replica_roles: ReplicaRoles | None = None
        # The cleaner swaps segments from its threads: its readers wake as for any write.
        log_manager.cleaner.cleaned_listener = self._cleaned

    def verify_transactions_with(self, coordinator: TransactionCoordinator) -> None:
        """Check transactional appends with ``coordinator`` (class docstring); once, before
        anything is served."""
        assert self._coordinator is None and not self._partitions
        self._coordinator = coordinator

    def verify_before_appends_with(self, verifier: TransactionVerifier) -> None:
        """``verifier.verify_before_append`` is awaited before each client append, outside
        the log's lock (Kafka's ``handleProduceAppend`` verifies before ``appendRecords``): in
        cluster mode, a leader not told of a producer's transaction asks its coordinator
        (docs/cluster.md, "Transactions"). Once, before anything is served."""
        assert self._transaction_verifier is None
        self._transaction_verifier = verifier

    async def verify_transaction(self, topic: str, partition: int, transactional_id: str,
                                 producer_id: int, producer_epoch: int) -> None:
        """The same verification for a transactional write the server makes itself (a
        TxnOffsetCommit's offsets, written by the group coordinator), before its own check.
        Nothing on a single server.

        Raises:
            what ``TransactionVerifier.verify_producer`` raises.
        """
        if self._transaction_verifier is not None:
            await self._transaction_verifier.verify_producer(
                topic, partition, transactional_id, producer_id, producer_epoch)

    def listen_to_internal_markers(self, listener: Callable[[str, int, int, bool], None]) -> None:
        """Tell ``listener`` (on this event loop) of each transaction marker written to a topic
        the server writes itself; called on the loop, once, before anything is served.

        The loop is remembered now, not at the first Partition made: after a restart the
        transaction coordinator may abort a transaction left open (InitProducerId of its id,
        or its timeout) before any produce or fetch made a Partition, and a marker written to
        ``__consumer_offsets`` then must still reach its group coordinator, else the
        transaction's offsets stay pending (OffsetFetch UNSTABLE_OFFSET_COMMIT) until the next
        restart.
        """
        self.internal_marker_listener = listener
        self._loop = asyncio.get_running_loop()

    def join_cluster(self, node: ClusterNode, roles: ReplicaRoles) -> None:
        """Serve replicated partitions as ``roles`` lead them; before the roles apply the view
        (a replicated topic must never be served as a local one)."""
        self.cluster_node = node
        self.replica_roles = roles
        self._loop = asyncio.get_running_loop()

    # ---------------------------------------------------------------- plumbing

    async def _blocking(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking storage call in the executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(function, *args))

    async def admin(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a LogManager admin call in the executor, one at a time."""
        async with self._admin_lock:
            return await self._blocking(function, *args)

    def _partition(self, topic: str, partition: int) -> Partition:
        key = (topic, partition)
        state = self._partitions.get(key)
        if state is None:
            self._loop = asyncio.get_running_loop()
            coordinator = self._coordinator
            verify = (functools.partial(coordinator.verify_transactional_append, topic,
                                        partition) if coordinator is not None else None)
            state = self._partitions[key] = Partition(topic, partition, verify)
        return state

    def get_partition(self, topic: str, partition: int) -> tuple[PartitionLog, Partition]:
        """The partition's log (UnknownTopicOrPartitionError if none) and its state.

        Still served while the server stops: the front ends refuse new requests then, and the
        ones already in flight have the grace period to finish.
        """
        partition_log = self.log_manager.get_log(topic, partition)
        return partition_log, self._partition(topic, partition)

    def leader(self, topic: str, partition: int) -> Replica | None:
        """In cluster mode, the replicated partition if this server leads it now (None: a
        single server, or a topic that is not replicated, served as on a single server).

        Raises:
            NotLeaderOrFollowerError: another server leads it (the hint names it), or this
                one joins the cluster still. LeaderNotAvailableError: nobody leads it.
        """
        roles = self.replica_roles
        if roles is None:
            if self._settings.cluster:
                from stratalog.server.cluster.errors import NotLeaderOrFollowerError

                raise NotLeaderOrFollowerError(topic, partition)
            return None
        return roles.leader_partition(topic, partition)

    def leader_at_epoch(self, topic: str, partition: int,
                        current_leader_epoch: int) -> Replica | None:
        """:meth:`leader`, and the leader epoch a client believes current checked against the
        leader's (-1: not checked; a single server has nothing to check against), as Kafka's
        ``Partition.checkCurrentLeaderEpoch``.

        Raises:
            what :meth:`leader` raises; FencedLeaderEpochError: ``current_leader_epoch`` is
            older than the leader's (the client refreshes its metadata);
            UnknownLeaderEpochError: newer (this server has not seen that election yet).
        """
        replica = self.leader(topic, partition)
        if replica is None or current_leader_epoch < 0:
            return replica
        from stratalog.server.cluster.errors import (
            FencedLeaderEpochError,
            UnknownLeaderEpochError,
        )

        if current_leader_epoch < replica.leader_epoch:
            raise FencedLeaderEpochError(
                topic, partition, f"leader epoch {current_leader_epoch} is older than the"
                f" leader's, {replica.leader_epoch}: refresh the metadata",
                replica.node_id, replica.leader_epoch)
        if current_leader_epoch > replica.leader_epoch:
            raise UnknownLeaderEpochError(
                topic, partition, f"leader epoch {current_leader_epoch} is newer than this"
                f" leader's, {replica.leader_epoch}: retry after a metadata refresh")
        return replica

    # ---------------------------------------------------------------- waking (every writer)

    def complete_delayed(self, topic: str, partition: int) -> None:
        """Something was written to the partition, or its high watermark, ISR or role changed:
        complete its acks=all produces and wake its long polls and Subscribe streams.
        Event-loop only; a partition nobody produced to or read from has no state."""
        state = self._partitions.get((topic, partition))
        if state is not None:
            state.complete_delayed()

    def replica_changed(self, topic: str, partition: int) -> None:
        """``ReplicaEvents``: a replica's high watermark, ISR, role or log changed (a follower
        appended)."""
        self.complete_delayed(topic, partition)

    def _call_on_loop(self, function: Callable[..., None], *args: Any) -> None:
        """From another thread: ``function(*args)`` on the event loop, if anyone can wait."""
        loop = self._loop
        if loop is None:
            return  # no partition served yet: nobody waits
        # A closed loop (the process is exiting) has nobody waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(function, *args)

    def _cleaned(self, topic: str, partition: int) -> None:
        """The cleaner swapped segments of the partition (a cleaner thread)."""
        self._call_on_loop(self.complete_delayed, topic, partition)

    # ---------------------------------------------------------------- internal topics

    @staticmethod
    def refuse_client_change(topic: str, operation: str) -> None:
        """Refuse a client's ``operation`` (Produce, DeleteRecords, DeleteTopic, ...) on a topic
        the server writes itself (``__consumer_offsets``: the group coordinator's), as Kafka's
        ``ReplicaManager.appendRecords`` refuses appends to internal topics from clients.
        Reading them is allowed.

        Raises:
            InvalidTopicError: ``topic`` is one of ``SERVER_WRITTEN_TOPICS``.
        """
        if topic in SERVER_WRITTEN_TOPICS:
            raise InvalidTopicError(
                f"topic {topic} is internal: only the server writes it (the group coordinator"
                f" commits offsets there); {operation} on it is refused. Read it, or use the"
                " group RPCs (OffsetCommit, DeleteGroups)"
            )

    def check_partition_exists(self, topic: str, partition: int) -> None:
        """That ``topic``-``partition`` exists (Kafka's KafkaApis asks its metadata cache): in
        cluster mode as the cluster view has it, wherever its replicas are (this server may
        hold none), else this server's logs (a single server's, or a topic held only here).
        O(1), no I/O.

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition.
        """
        node = self.cluster_node
        if node is not None:
            assignment = node.view.topics.get(topic)
            if assignment is not None:
                if partition not in assignment.replicas:
                    raise UnknownTopicOrPartitionError(
                        f"topic {topic} has partitions 0 .. {assignment.partition_count - 1};"
                        f" there is no partition {partition}")
                return
        self.log_manager.get_log(topic, partition)

    # ---------------------------------------------------------------- appends

    async def append_records(
        self,
        topic: str,
        partition: int,
        acks: int,
        records: bytes | memoryview | Callable[[], Awaitable[bytes]],
        *,
        size_bytes: int,
        compressed: bool,
        flush: bool = False,
        appended: Callable[[], None] | None = None,
        internal_topics_allowed: bool = False,
        transactional_id: str | None = None,
    ) -> AppendInfo:
        """Append ``records`` (batches, or a coroutine function that encodes them once the
        partition is known to be served here) to the partition's leader: Kafka's
        ``appendRecords`` -> ``Partition.appendRecordsToLeader``, then for acks=all on a
        replicated partition the delayed produce.

        ``size_bytes`` and ``compressed`` choose where the append runs (the placement);
        ``flush`` fsyncs before the records are visible; ``appended`` is called once they are
        in the log, before an acks=all produce waits for its replicas (a Session stream lets
        the next Produce of the partition go then, as Kafka's in-flight requests of a
        connection are). ``internal_topics_allowed``: the server's own write (the group
        coordinator's); a client's append to an internal topic is refused.
        ``transactional_id``: the producer's (Kafka's ProduceRequest field), with which a
        cluster's leader asks its coordinator about a transaction it was not told of
        (:meth:`verify_before_appends_with`).

        Raises:
            InvalidTopicError: a client's append to an internal topic.
            InvalidTxnStateError, InvalidProducerEpochError,
                TxnVerificationUnavailableError: the verification before the append.
            NotLeaderOrFollowerError, LeaderNotAvailableError: not the leader here.
            NotEnoughReplicasError: acks=all with the ISR below min.insync.replicas, before
                anything is written; the delayed produce's errors after.
            what the log's append raises.
        """
        if not internal_topics_allowed:
            self.refuse_client_change(topic, "Produce")
        # Cluster mode: only the leader appends; acks=all needs min.insync.replicas in sync
        # before anything is written (Kafka's NOT_ENOUGH_REPLICAS).
        replica = self.leader(topic, partition)
        partition_log, state = self.get_partition(topic, partition)
        waits_for_replicas = replica is not None and acks == ACKS_ALL
        if waits_for_replicas:
            assert replica is not None
            min_insync = partition_log.config.min_insync_replicas
            replica.check_enough_replicas(min_insync)
        payload = records if not callable(records) else await records()
        if (transactional_id and self._transaction_verifier is not None
                and not internal_topics_allowed):
            # Only a transactional producer's request (it names its id): no coroutine on
            # every other produce's path.
            await self._transaction_verifier.verify_before_append(
                topic, partition, transactional_id, payload)
        while True:
            async with state.append_lock:
                if state.closed:
                    # The topic was deleted (or recreated) while this request waited: look again.
                    partition_log, state = self.get_partition(topic, partition)
                    continue
                leader_epoch = LEADER_EPOCH
                if replica is not None:
                    # Still the leader after waiting for the lock, and stamped with its epoch.
                    replica = self.leader(topic, partition) or replica
                    leader_epoch = replica.leader_epoch
                info = await self._append(
                    partition_log, state, payload, size_bytes, compressed, flush, leader_epoch
                )
                state.complete_delayed()
                if replica is not None:
                    replica.notify_append()
                break
        if waits_for_replicas:
            assert replica is not None
            # The records are acknowledged once every in-sync replica has them (Kafka's
            # delayed produce): the high watermark passed them.
            if appended is not None:
                appended()
            await state.delayed_produces.wait(
                replica, info.last_offset + 1, min_insync,
                self._settings.request_timeout_ms / 1000,
            )
        return info

    async def _append(
        self,
        partition_log: PartitionLog,
        state: Partition,
        payload: bytes | memoryview,
        size_bytes: int,
        compressed: bool,
        flush: bool,
        leader_epoch: int,
    ) -> AppendInfo:
        """Append ``payload`` where the placement says for ``size_bytes`` and ``compressed``,
        with the partition's transaction verifier and the bound on decompressed bytes; the
        caller holds the append lock. A ``compressed`` payload first waits for its charge of
        the decompression budget (``produce_decompressed_bytes_in_flight_max``).

        Tried inline, the append may come back undone from storage (it would roll, fsync or
        wait for maintenance): the thread pool finishes it, reusing its validation. ``flush``
        (a Produce with ``flush=true``): in the thread pool, fsynced before its records are
        visible (PartitionLog.append). ``leader_epoch`` is stamped on the batches (a
        replicated partition's leader's; 0 on a single server).
        """
        if compressed:
            # Validation decompresses every batch: charged what it may reach, so that
            # concurrent requests cannot decompress more than the in-flight budget at once.
            charge = await self.decompression.reserve(
                self._settings.produce_decompressed_bytes_max
            )
            try:
                return await self._append_now(
                    partition_log, state, payload, size_bytes, compressed, flush, leader_epoch
                )
            finally:
                self.decompression.release(charge)
        return await self._append_now(
            partition_log, state, payload, size_bytes, compressed, flush, leader_epoch
        )

    async def _append_now(
        self,
        partition_log: PartitionLog,
        state: Partition,
        payload: bytes | memoryview,
        size_bytes: int,
        compressed: bool,
        flush: bool,
        leader_epoch: int,
    ) -> AppendInfo:
        verify = state.verify_transaction
        bound = self._settings.produce_decompressed_bytes_max
        if flush:
            return await self._blocking(
                functools.partial(
                    partition_log.append, verify_transaction=verify, flush=True,
                    decompressed_bytes_max=bound, leader_epoch=leader_epoch,
                ),
                payload,
            )
        if self.placement.tries_append_inline(size_bytes, compressed=compressed):
            outcome = partition_log.try_append_without_blocking(
                payload, verify_transaction=verify, decompressed_bytes_max=bound,
                leader_epoch=leader_epoch,
            )
            if type(outcome) is AppendInfo:
                return outcome
            return await self._blocking(partition_log.append_deferred, outcome)
        return await self._blocking(
            functools.partial(
                partition_log.append, verify_transaction=verify, decompressed_bytes_max=bound,
                leader_epoch=leader_epoch,
            ),
            payload,
        )

    def write_txn_markers(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> None:
        """The coordinator's ``write_markers``: append a COMMIT or ABORT marker to a partition,
        fsync it, and complete the partition's delayed operations on the event loop (a marker
        moves the last stable offset, which READ_COMMITTED long polls and Subscribe streams
        wait for). Called from pool threads.

        The fsync: the coordinator logs the transaction complete next, and one server has no
        replica to keep the marker if the machine loses power.

        Raises:
            UnknownTopicOrPartitionError: the partition is gone (the coordinator skips it).
            NotLeaderOrFollowerError: a replicated partition this server does not lead (the
                coordinator retries).
            LogClosedError: the server is stopping (the coordinator retries at the next load).
            what the append or the flush raises (the coordinator retries).
        """
        partition_log = self.log_manager.get_log(topic, partition)
        # A replicated partition takes markers on its leader only, stamped with its epoch (a
        # follower refuses, and the coordinator retries); a single server's epoch is 0.
        leader_epoch, replica = LEADER_EPOCH, None
        roles = self.replica_roles
        if roles is not None:
            replica = roles.partitions.get((topic, partition))
            if replica is not None:
                if not replica.is_leader():
                    raise replica.not_leader(roles.leader_address(replica.leader_id))
                leader_epoch = replica.leader_epoch
        partition_log.write_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                       leader_epoch=leader_epoch)
        partition_log.flush()
        self._call_on_loop(self.complete_delayed, topic, partition)
        listener = self.internal_marker_listener
        if listener is not None and topic in SERVER_WRITTEN_TOPICS:
            # After the write and before EndTxn's answer (both go through the loop, in order).
            self._call_on_loop(listener, topic, partition, producer_id, commit)
        if replica is not None:
            self._call_on_loop(replica.notify_append)  # followers copy it

    async def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Move the log start to ``before_offset`` (-1: the high watermark) on the leader;
        returns the new log start."""
        self.refuse_client_change(topic, "DeleteRecords")
        # Kafka's rule: the leader moves the log start; followers follow it through their
        # fetches (replica_fetcher.py), never on their own.
        self.leader(topic, partition)
        _, state = self.get_partition(topic, partition)
        async with state.append_lock:
            return await self._blocking(
                self.log_manager.delete_records, topic, partition, before_offset
            )

    async def clean_partition(self, topic: str, partition: int) -> CleaningResult:
        """Clean a compacted partition once now (its swap wakes its readers as the cleaner
        threads' do)."""
        # Neither the append lock nor the admin lock: a cleaning runs beside appends and reads
        # (the log's own lock is taken only for the swap of segments) and may take seconds;
        # the LogManager pauses it against a deletion of the topic.
        return await self._blocking(self.log_manager.clean_now, topic, partition)

    async def delete_partitions(self, topic: str) -> None:
        """Delete the topic's logs on this server: DeleteTopic's local part, and the replica
        roles' for a topic that left the cluster (``ReplicaEvents``). Appends in flight finish
        first (no append may be half-way through a partition while its log closes); waiters
        wake."""
        async with self._admin_lock, contextlib.AsyncExitStack() as held:
            for key, state in sorted(self._partitions.items()):
                if key[0] == topic:
                    await held.enter_async_context(state.append_lock)
            await self._blocking(self.log_manager.delete_topic, topic)
            self.forget_topic(topic)

    def forget_topic(self, topic: str) -> None:
        """Drop the partitions of a deleted topic, waking their waiters."""
        for key in [key for key in self._partitions if key[0] == topic]:
            self._partitions.pop(key).close()
        self._metrics.forget_topic(topic)

    # ---------------------------------------------------------------- reads

    def reads_inline(
        self, partition_log: PartitionLog, offset: int, max_bytes: int, max_records: int = 0
    ) -> bool:
        """Whether a fetch at ``offset`` is read on the loop: when it can return fewer than
        ``read_in_executor_min_bytes``, by its ``max_bytes`` or by what the partition holds
        past ``offset`` (nothing at the log end; no more than the active segment when it
        reads there), or when it asks for ``max_records`` (the storage then reads the batch
        holding the offset and at most ``read_in_executor_min_bytes`` more). Such reads are
        page-cache reads, cheaper inline than a thread hop, and a burst of them (1,000 long
        polls at the log end) must not queue in the pool ahead of other clients' reads."""
        if max_records > 0:
            return True
        fetchable = partition_log.fetchable_bytes_max(offset)
        if fetchable is not None and fetchable < max_bytes:
            max_bytes = fetchable
        return max_bytes < self._settings.read_in_executor_min_bytes

    def fetch_now(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        offset: int,
        max_bytes: int,
        isolation_level: IsolationLevel,
        max_records: int = 0,
        enough_bytes: int | None = None,
    ) -> FetchedBatches | SlicedWalk:
        """Read on the loop: page-cache reads are cheaper inline than a thread hop. With
        ``max_records`` > 0, the records taken (:meth:`PartitionLog.take_records`: the bound,
        the reader's filter and the slicing in one walk, which counts the whole batches read
        only as far as ``enough_bytes``)."""
        try:
            if max_records > 0:
                return partition_log.take_records(
                    offset, max_bytes, max_records, isolation_level=isolation_level,
                    upper_bound=_upper_bound(partition_log), whole_bytes_enough=enough_bytes,
                )
            return partition_log.fetch(
                offset, max_bytes, isolation_level=isolation_level,
                upper_bound=_upper_bound(partition_log),
            )
        except OffsetOutOfRangeError as exc:
            raise client_out_of_range(topic, partition, offset, exc) from None

    async def read(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        offset: int,
        max_bytes: int,
        isolation_level: IsolationLevel,
    ) -> FetchedBatches | SlicedWalk:
        """One read at ``offset``: on the loop when small (:meth:`reads_inline`), else in the
        executor."""
        if self.reads_inline(partition_log, offset, max_bytes):
            return self.fetch_now(
                topic, partition, partition_log, offset, max_bytes, isolation_level
            )
        # Large reads, which may also be cold, go to the executor so that they cannot stall
        # every other request.
        try:
            return await self._blocking(
                functools.partial(
                    partition_log.fetch, isolation_level=isolation_level,
                    upper_bound=_upper_bound(partition_log),
                ),
                offset, max_bytes,
            )
        except OffsetOutOfRangeError as exc:
            raise client_out_of_range(topic, partition, offset, exc) from None

    async def fetch_records(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        isolation_level: IsolationLevel,
        *,
        max_records: int = 0,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        admit_wait: Callable[[], Releasable] | None = None,
        pause: Callable[[], None] | None = None,
        resume: Callable[[], Awaitable[None]] | None = None,
    ) -> FetchResult:
        """Kafka's ``fetchMessages`` for a consumer: read from ``offset`` on the leader; if
        fewer than ``min_bytes`` (at least one) came and ``max_wait_ms`` allows, wait for a
        write to the partition and read again (the delayed fetch), until enough came, the
        time is up or the server stops.

        A long poll takes a slot from ``admit_wait`` when it first waits (one that finds its
        data at once never does), and gives it back when it answers. ``pause`` is called
        before each wait and ``resume`` awaited after it (a Session request gives its charge
        of the session's byte budgets back meanwhile).

        Raises:
            NotLeaderOrFollowerError, LeaderNotAvailableError: not the leader (before or
                after a wait); UnknownTopicOrPartitionError: deleted meanwhile;
            OffsetOutOfRangeError: in the client's terms (no server paths); what limits
                ``admit_wait`` raises.
        """
        self.leader(topic, partition)  # cluster mode: the leader serves reads
        partition_log, state = self.get_partition(topic, partition)
        # Answer as soon as this much is there; never more than one read can return.
        enough_bytes = max(1, min(min_bytes, max_bytes))
        # The clock only matters to a request that may wait.
        loop = asyncio.get_running_loop() if max_wait_ms else None
        deadline = loop.time() + max_wait_ms / 1000 if loop is not None else 0.0
        # READ_COMMITTED reads stop at the LSO: a long poll there waits for a marker to move
        # it (the coordinator's marker writes complete the delayed fetches too).
        waiting: Releasable | None = None
        try:
            while True:
                signal = state.signal()
                # The common case, without a coroutine per read.
                if self.reads_inline(partition_log, offset, max_bytes, max_records):
                    fetched = self.fetch_now(
                        topic, partition, partition_log, offset, max_bytes, isolation_level,
                        max_records, enough_bytes,
                    )
                else:
                    fetched = await self.read(
                        topic, partition, partition_log, offset, max_bytes, isolation_level
                    )
                # (A max_records read counts the whole batches it read, as any fetch.)
                read_bytes = (fetched.whole_bytes if isinstance(fetched, SlicedWalk)
                              else len(fetched.data))
                if read_bytes >= enough_bytes or loop is None or self.shutting_down:
                    break
                remaining_s = deadline - loop.time()
                if remaining_s <= 0:
                    break
                if waiting is None and admit_wait is not None:
                    waiting = admit_wait()
                if pause is not None:
                    pause()
                await state.wait(signal, remaining_s)
                if resume is not None:
                    await resume()
                self.leader(topic, partition)  # still the leader after the wait
                if state.closed:
                    # Deleted while we waited: the lookup raises UNKNOWN_TOPIC_OR_PARTITION.
                    partition_log, state = self.get_partition(topic, partition)
        finally:
            if waiting is not None:
                waiting.release()
        return FetchResult(partition_log, fetched)

    async def fetch_messages(
        self,
        reads: list[PartitionRead],
        isolation_level: IsolationLevel,
        *,
        max_bytes: int,
        min_bytes: int = 0,
        max_wait_ms: int = 0,
        admit_wait: Callable[[], Releasable] | None = None,
        region_bytes_min: int | None = None,
    ) -> list[PartitionReadResult]:
        """Kafka's ``fetchMessages`` for a consumer's multi-partition fetch (the Kafka front
        end's Fetch): read every partition of ``reads`` on its leader, each at most its own
        ``max_bytes`` and all together about ``max_bytes`` (the first partition with data
        gives at least one whole batch, KIP-74; once the total is reached the others are
        answered without data, to be fetched next time); if fewer than ``min_bytes`` (at
        least one) came, no partition failed and ``max_wait_ms`` allows, wait for a write to
        any of them and read them all again (the delayed fetch).

        A partition's error (not the leader, unknown, offset out of range in the client's
        terms) is its result's, never the call's. A long poll takes a slot from
        ``admit_wait`` when it first waits and gives it back when it answers.

        ``region_bytes_min`` (not None: a caller that sends batches from the file, the Kafka
        front end on a plaintext connection): a partition's batches of that many bytes or more
        are a file region (:meth:`PartitionLog.fetch_region`), read on the loop (no batch is
        read, only where they start and end); the caller closes the regions it gets.
        """
        enough_bytes = max(1, min(min_bytes, max_bytes))
        loop = asyncio.get_running_loop() if max_wait_ms else None
        deadline = loop.time() + max_wait_ms / 1000 if loop is not None else 0.0
        waiting: Releasable | None = None
        try:
            while True:
                signals: list[asyncio.Event] = []
                results = await self._read_partitions(reads, isolation_level, max_bytes,
                                                      signals, region_bytes_min)
                read_bytes = sum(len(r.fetched.data) for r in results if r.fetched is not None)
                failed = any(r.error is not None for r in results)
                if (read_bytes >= enough_bytes or failed or loop is None or not signals
                        or self.shutting_down):
                    return results
                remaining_s = deadline - loop.time()
                if remaining_s <= 0:
                    return results
                _close_regions(results)  # read again after the wait
                if waiting is None and admit_wait is not None:
                    waiting = admit_wait()
                await _wait_any(signals, remaining_s)
        finally:
            if waiting is not None:
                waiting.release()

    async def _read_partitions(
        self, reads: list[PartitionRead], isolation_level: IsolationLevel, max_bytes: int,
        signals: list[asyncio.Event], region_bytes_min: int | None = None,
    ) -> list[PartitionReadResult]:
        """One pass of :meth:`fetch_messages`: every partition read once; the wake-up event
        of each partition served here is appended to ``signals`` (taken before its read)."""
        results: list[PartitionReadResult] = []
        remaining = max_bytes
        first = True
        for read in reads:
            try:
                self.leader_at_epoch(read.topic, read.partition, read.current_leader_epoch)
                partition_log, state = self.get_partition(read.topic, read.partition)
                signals.append(state.signal())
                if remaining <= 0:
                    fetched = _nothing_read(read.offset)
                else:
                    limit = min(read.max_bytes, remaining)
                    fetched = await self._read_one(read, partition_log, limit,
                                                   isolation_level, first, region_bytes_min)
                size = len(fetched.data)
                if size:
                    first = False
                    remaining -= size
                results.append(PartitionReadResult(read, partition_log, fetched, None))
            except Exception as exc:
                results.append(PartitionReadResult(read, None, None, exc))
        return results

    async def _read_one(
        self, read: PartitionRead, partition_log: PartitionLog, max_bytes: int,
        isolation_level: IsolationLevel, min_one_message: bool,
        region_bytes_min: int | None = None,
    ) -> FetchedBatches:
        if region_bytes_min is not None and max_bytes >= region_bytes_min:
            try:
                return partition_log.fetch_region(
                    read.offset, max_bytes, region_bytes_min=region_bytes_min,
                    min_one_message=min_one_message, isolation_level=isolation_level,
                    upper_bound=_upper_bound(partition_log),
                )
            except OffsetOutOfRangeError as exc:
                raise client_out_of_range(read.topic, read.partition, read.offset,
                                          exc) from None
        call = functools.partial(
            partition_log.fetch, read.offset, max_bytes, min_one_message=min_one_message,
            isolation_level=isolation_level, upper_bound=_upper_bound(partition_log),
        )
        try:
            if self.reads_inline(partition_log, read.offset, max_bytes):
                return call()
            return await self._blocking(call)
        except OffsetOutOfRangeError as exc:
            raise client_out_of_range(read.topic, read.partition, read.offset, exc) from None

    async def fetch_by_timestamp(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        max_bytes: int,
        isolation_level: IsolationLevel,
        max_records: int = 0,
    ) -> tuple[PartitionLog, TimestampOffset | None, FetchedBatches | SlicedWalk]:
        """The first record at or after ``timestamp`` (READ_COMMITTED: below the LSO, the
        engine's rule, Kafka's) and the batches from it, on the leader; with ``max_records``
        > 0, the records taken from it (or from where the read ended when none was found) as
        :meth:`PartitionLog.take_records_by_timestamp` takes them, in one walk."""
        self.leader(topic, partition)
        partition_log, _ = self.get_partition(topic, partition)
        # The search decodes the batch it finds, which is also the first batch of the answer:
        # one pass reads it once. Large reads go to the executor (see read), never a
        # max_records read (the front end bounds its bytes).
        if max_records > 0:
            # The cut, the reader's filter and the slicing in the one walk of the batches read.
            found, taken = partition_log.take_records_by_timestamp(
                timestamp, max_bytes, max_records, isolation_level=isolation_level
            )
            return partition_log, found, taken
        lookup = functools.partial(
            partition_log.fetch_by_timestamp, isolation_level=isolation_level
        )
        if max_bytes < self._settings.read_in_executor_min_bytes:
            found, fetched = lookup(timestamp, max_bytes)
        else:
            found, fetched = await self._blocking(lookup, timestamp, max_bytes)
        return partition_log, found, fetched

    def offset_for_timestamp(
        self, topic: str, partition: int, target: int, isolation_level: IsolationLevel
    ) -> TimestampOffset | None:
        """ListOffsets on the leader: the offset of ``target`` (-1 latest, -2 earliest, -3 max
        timestamp, or a timestamp), None when nothing matches."""
        self.leader(topic, partition)
        partition_log, _ = self.get_partition(topic, partition)
        return partition_log.offset_for_timestamp(target, isolation_level=isolation_level)

    def offset_and_epoch_for_timestamp(
        self, topic: str, partition: int, target: int, isolation_level: IsolationLevel,
        current_leader_epoch: int = -1,
    ) -> tuple[TimestampOffset | None, int]:
        """:meth:`offset_for_timestamp` with the client's leader epoch checked
        (:meth:`leader_at_epoch`), and the leader epoch of the offset found (Kafka's
        ``Partition.fetchOffsetForTimestamp``): for -1 (latest) the leader's current epoch,
        else the epoch the record at that offset was written in; -1 when the leader-epoch
        cache does not know it (a log written before epochs were kept)."""
        replica = self.leader_at_epoch(topic, partition, current_leader_epoch)
        partition_log, _ = self.get_partition(topic, partition)
        found = partition_log.offset_for_timestamp(target, isolation_level=isolation_level)
        if found is None:
            return None, -1
        if target == _LATEST:
            epoch = replica.leader_epoch if replica is not None else partition_log.latest_epoch
        else:
            epoch = partition_log.leader_epoch_cache.epoch_for_offset(found.offset)
        return found, -1 if epoch is None else epoch

    def end_offset_for_epoch(self, topic: str, partition: int, leader_epoch: int,
                             current_leader_epoch: int = -1) -> tuple[int, int]:
        """OffsetsForLeaderEpoch on the leader (Kafka's ``Partition.lastOffsetForLeaderEpoch``,
        ``fetchOnlyFromLeader``): ``(epoch, end offset)`` of the greatest epoch at or below
        ``leader_epoch`` in the partition's leader-epoch cache (LeaderEpochCache.end_offset_for:
        the log end for the latest epoch), ``(-1, -1)`` when the cache cannot say; the client's
        ``current_leader_epoch`` is checked first (:meth:`leader_at_epoch`)."""
        self.leader_at_epoch(topic, partition, current_leader_epoch)
        partition_log, _ = self.get_partition(topic, partition)
        return partition_log.end_offset_for_epoch(leader_epoch)

    def subscription_start(
        self, topic: str, partition: int, isolation_level: IsolationLevel, offset: int,
        timestamp: int | None,
    ) -> tuple[PartitionLog, Partition, TimestampOffset | None, int]:
        """Where a Subscribe stream starts, on the leader: ``offset``, or with ``timestamp`` the
        first record at or after it (returned too) and, when there is none (readable at this
        isolation level) yet, the end a reader of this level sees, the LSO for READ_COMMITTED
        (a Kafka consumer seeks to the end when offsetsForTimes finds nothing). Returns the
        log, the partition, the record found and the offset to start at."""
        self.leader(topic, partition)
        partition_log, state = self.get_partition(topic, partition)
        if timestamp is None:
            return partition_log, state, None, offset
        found = partition_log.offset_for_timestamp(timestamp, isolation_level=isolation_level)
        if found is not None:
            return partition_log, state, found, found.offset
        latest = partition_log.offset_for_timestamp(_LATEST, isolation_level=isolation_level)
        assert latest is not None
        return partition_log, state, None, latest.offset

    def ensure_following(
        self, topic: str, partition: int, partition_log: PartitionLog, state: Partition
    ) -> tuple[PartitionLog, Partition]:
        """Before a follower (a Subscribe stream) reads again: SHUTTING_DOWN when stopping,
        NOT_LEADER_OR_FOLLOWER when this server stopped leading a replicated partition, and a
        fresh lookup (UNKNOWN_TOPIC_OR_PARTITION) when the topic was deleted under it."""
        if self.shutting_down:
            raise LogClosedError("the server is shutting down; subscribe again later")
        self.leader(topic, partition)  # a leader that stepped down ends its streams
        if state.closed:
            return self.get_partition(topic, partition)
        return partition_log, state

    # ---------------------------------------------------------------- shutdown

    def begin_shutdown(self) -> None:
        """Wake every waiter: long polls answer with what they have, Subscribe streams end,
        acks=all producers answer SHUTTING_DOWN (their records are in the log; an idempotent
        retry is answered as a duplicate) instead of holding the shutdown until their timeout.

        Appends in flight go on (they finish within the grace period); only waiting for
        *future* appends stops.
        """
        self.shutting_down = True
        error = LogClosedError("the server is shutting down; the records were written on the"
                               " leader but may not be replicated: retry")
        for state in self._partitions.values():
            state.delayed_produces.fail_all(error)
            state.wake_readers()
