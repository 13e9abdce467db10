"""Transactions in a cluster: the coordinators of the state partitions this server leads, and
what both front ends call (docs/cluster.md, "Transactions").

On one server a single :class:`~stratalog.server.transactions.TransactionCoordinator` keeps every
transactional id in its own log. In a cluster, as in Kafka
(``core/src/main/scala/kafka/coordinator/transaction/TransactionCoordinator.scala``,
``TransactionStateManager.scala``, ``TransactionMarkerChannelManager.scala``):

* **State** lives in the replicated, compacted topic ``__cluster_transaction_state``
  (server/transactions/state_partitions.py: transaction.state.log.num.partitions partitions,
  min(transaction.state.log.replication.factor, live servers) replicas,
  min.insync.replicas = transaction.state.log.min.isr), made in etcd by the first
  FindCoordinator for a transactional id (server/coordinator_placement.py). An id belongs to
  partition ``abs(hashCode(id)) % partitions``; its coordinator is that partition's leader.
* **Leadership** (the replica roles' ``LeadershipListener``): :meth:`became_leader` starts a
  load: once the previous coordinator of the partition closed and the high watermark reached
  the log end this leader took over with (every state change the old leader acknowledged is
  then below it), the partition is replayed to the high watermark
  (``TransactionStateManager.load_replicated``), a coordinator serves it
  (``TransactionCoordinator.for_partition``, its markers stamped with the partition's leader
  epoch), and every transaction found in PrepareCommit/PrepareAbort is completed: its markers
  sent again, then Complete* logged. Requests meanwhile: COORDINATOR_LOAD_IN_PROGRESS.
  :meth:`stopped_leading` unloads it (requests NOT_COORDINATOR; its writes refused) and closes
  it in the background.
* **Writes** of the state go through the serving layer with acks=all: a state change is
  answered once transaction.state.log.min.isr replicas hold it, so a failover never loses an
  answered decision. A write whose acknowledgement fails (too few replicas, a timeout) may
  still be in the log; the record is the id's whole state, so the next successful write, or
  the next leader's load, settles it.
* **Markers** go to each partition's leader through the marker channel (marker_channel.py: in
  order per partition, retried until written) and leader_calls.py (local, or WriteTxnMarkers).
* **Produce verification** (verified_partitions.py): AddPartitionsToTxn is answered only after
  each partition's leader was told (AllowTxnAppends); a leader accepts transactional batches only
  from producers so allowed, until their marker. A leader not told (its leadership is newer)
  asks the producer's coordinator before the append (append_verifier.py: :meth:`_ask`, and
  the coordinators' answer :meth:`verify_in_transaction`).

So a coordinator's failover in the middle of a commit completes it: the decision is in the state
partition before any marker is written, and the new leader finds it and sends every marker
again (idempotent at the partitions). Before the decision the transaction is Ongoing: the new
coordinator aborts it when it times out, or when the producer starts again (InitProducerId).
Never half: a partition gets the marker the decision says, or (fenced, its coordinator replaced)
the next coordinator's.

Producer ids are the local coordinator's (cluster-wide ids: server/transactions/producer_ids.py),
for idempotent producers and for every transactional id's first id alike.

The front ends call the same synchronous methods as on one server, in the pool; those that
write wait for the event loop (acks=all, markers), at most :data:`STATE_WRITE_TIMEOUT_S` /
:data:`MARKER_WAIT_S` per step. The markers of the partitions this server leads are written in
:data:`MARKER_WRITE_THREADS` threads of their own, not the pool the waiting requests hold. Concurrency: the listener calls and :meth:`find_coordinator` on
the event loop; the requests in pool threads (they never run on the loop: they would wait for
it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from stratalog.server.broker.replica_manager import ACKS_ALL
from stratalog.server.cluster import errors as cluster_errors
from stratalog.server.coordinator_placement import (
    CoordinatorLocation,
    InternalTopicPlacement,
    wait_until_caught_up,
)
from stratalog.server.storage.errors import LogClosedError, UnknownTopicOrPartitionError
from stratalog.server.transactions import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    CoordinatorLoadInProgressError,
    CoordinatorMaintenanceReport,
    CoordinatorNotAvailableError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerIdAndEpoch,
    TransactionalIdNotFoundError,
    TransactionConfig,
    TransactionCoordinator,
    TransactionMetadata,
    TransactionStateManager,
)
from stratalog.server.transactions.state_partitions import (
    CLUSTER_TRANSACTION_STATE_TOPIC,
    partition_for_transactional_id,
    topic_configs,
)
from stratalog.server.transactions.transaction_metadata import TopicPartition

from .append_verifier import AppendVerifier
from .leader_calls import LEADER_CALL_TIMEOUT_S, LeaderCalls
from .marker_channel import Marker, TxnMarkerChannel
from .verified_partitions import VerifiedPartitions

if TYPE_CHECKING:
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.settings import Settings

__all__ = ["MARKER_WAIT_S", "STATE_WRITE_TIMEOUT_S", "ClusterTransactions"]

logger = logging.getLogger(__name__)

#: The longest a request waits for one state write's acknowledgement (acks=all).
STATE_WRITE_TIMEOUT_S = 30.0
#: The longest a request waits for one marker (it stays queued after that).
MARKER_WAIT_S = 15.0
#: Threads writing (and fsyncing) the markers of the partitions this server leads.
MARKER_WRITE_THREADS = 4

_T = TypeVar("_T")


class ClusterTransactions:
    """Every transaction request of this server in cluster mode (module docstring).

    Holds the local coordinator (producer ids), the topic's placement, the coordinator of each
    state partition loaded here with the leader epoch it serves at, the loads and closes under
    way, the marker channel, the calls to leaders and this server's produce permissions.
    Invariant: ``_coordinators[p]`` exists only while ``_epochs[p]`` is the epoch it was made
    at, i.e. while this server leads ``p`` (as last told).
    """

    def __init__(self, local: TransactionCoordinator, replica_manager: ReplicaManager,
                 settings: Settings, executor: Executor, config: TransactionConfig) -> None:
        """Made on the event loop (it is remembered: the pool threads' waits go through it)."""
        self.local = local
        self._replicas = replica_manager
        self._executor = executor
        self._config = config
        self._loop = asyncio.get_running_loop()
        self.verified = VerifiedPartitions()
        # The markers this server writes as a leader fsync in their own threads: the requests
        # that wait for them hold pool threads (the front ends call in the pool), and a pool
        # full of waiting requests must not be what the markers queue behind.
        self._marker_executor = ThreadPoolExecutor(
            max_workers=MARKER_WRITE_THREADS, thread_name_prefix="stratalog-txn-markers")
        self.calls = LeaderCalls(replica_manager, self._marker_executor, self.verified,
                                 self.verify_in_transaction)
        # This server's partitions ask the coordinators of producers they were not told of.
        self.verifier = AppendVerifier(self.verified, self._ask)
        replica_manager.verify_before_appends_with(self.verifier)
        self.markers = TxnMarkerChannel(self.calls.send_marker)
        self._placement = InternalTopicPlacement(
            replica_manager, settings, CLUSTER_TRANSACTION_STATE_TOPIC,
            partitions=settings.transaction_state_log_num_partitions,
            replication_factor=settings.transaction_state_log_replication_factor,
            configs=lambda factor: topic_configs(settings.transaction_state_log_min_isr,
                                                 factor),
            unavailable=CoordinatorNotAvailableError, key_name="transactional id")
        self._coordinators: dict[int, TransactionCoordinator] = {}
        self._epochs: dict[int, int] = {}
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._closing: dict[int, asyncio.Task[None]] = {}
        self._closed = False

    @property
    def config(self) -> TransactionConfig:
        return self._config

    # ---------------------------------------------------------------- where

    async def find_coordinator(self, transactional_id: str) -> CoordinatorLocation:
        """The id's state partition and its leader, the topic made first if need be.

        Raises:
            CoordinatorNotAvailableError: not joined, the topic cannot be made now, or the
                partition has no live leader.
        """
        if self._closed:
            raise CoordinatorNotAvailableError("the server is shutting down")
        partition = partition_for_transactional_id(
            transactional_id, await self._placement.ensure_topic())
        return self._placement.leader_of(transactional_id, partition)

    def is_loading(self, partition: int) -> bool:
        """Whether this server leads ``partition`` and is still loading it."""
        return partition in self._epochs and partition not in self._coordinators

    def _coordinator_for(self, transactional_id: str, *,
                         make_topic: bool = True) -> TransactionCoordinator:
        """The id's coordinator if this server has it loaded; without the topic, it is made
        first (``make_topic``: a pool thread's call; on the loop, NOT_COORDINATOR instead)."""
        count = self._placement.partition_count()
        if not count and not make_topic:
            raise NotCoordinatorError(f"{CLUSTER_TRANSACTION_STATE_TOPIC} does not exist yet")
        if not count:
            # A client that did not ask FindCoordinator first (the stratalog clients ask the
            # server they know, and find the coordinator on NOT_COORDINATOR) gets the topic
            # made too.
            count = self._wait(self._placement.ensure_topic(), STATE_WRITE_TIMEOUT_S,
                               f"making {CLUSTER_TRANSACTION_STATE_TOPIC}")
        partition = partition_for_transactional_id(transactional_id, count)
        coordinator = self._coordinators.get(partition)
        if coordinator is not None:
            return coordinator
        if partition in self._epochs:
            raise CoordinatorLoadInProgressError(
                f"{CLUSTER_TRANSACTION_STATE_TOPIC}-{partition}, the partition of transactional"
                f" id {transactional_id!r}, is loading on this server: retry")
        raise NotCoordinatorError(
            f"this server does not lead {CLUSTER_TRANSACTION_STATE_TOPIC}-{partition}, the"
            f" partition of transactional id {transactional_id!r}: ask FindCoordinator again")

    def _serve(self, transactional_id: str,
               call: Callable[[TransactionCoordinator], _T]) -> _T:
        """``call(coordinator)`` on the id's coordinator; one that was unloaded meanwhile
        answers NOT_COORDINATOR rather than SHUTTING_DOWN."""
        coordinator = self._coordinator_for(transactional_id)
        try:
            return call(coordinator)
        except LogClosedError:
            if self._closed:
                raise
            raise NotCoordinatorError(
                f"this server stopped coordinating transactional id {transactional_id!r}:"
                " ask FindCoordinator again") from None

    # ---------------------------------------------------------------- requests (pool threads)

    def init_producer_id(
        self,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        expected: ProducerIdAndEpoch | None = None,
    ) -> ProducerIdAndEpoch:
        """As ``TransactionCoordinator.init_producer_id``; without a transactional id, from
        this server's local coordinator (no partition involved)."""
        if transactional_id is None:
            return self.local.init_producer_id(None)
        return self._serve(transactional_id, lambda c: c.init_producer_id(
            transactional_id, transaction_timeout_ms, expected))

    def add_partitions_to_txn(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, partitions: Iterable[TopicPartition]) -> None:
        """As ``TransactionCoordinator.add_partitions_to_txn``, then each partition's leader
        is told (module docstring) before the answer.

        Raises:
            CoordinatorNotAvailableError: a leader could not be told (retriable: the retry
                tells it again).
        """
        requested = list(partitions)
        self._serve(transactional_id, lambda c: c.add_partitions_to_txn(
            transactional_id, producer_id, producer_epoch, requested))
        self._wait(self.calls.allow_appends(producer_id, producer_epoch, requested),
                   LEADER_CALL_TIMEOUT_S + 1.0, "telling the partitions' leaders")

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool) -> None:
        """As ``TransactionCoordinator.end_txn`` (markers through the marker channel)."""
        self._serve(transactional_id, lambda c: c.end_txn(
            transactional_id, producer_id, producer_epoch, commit))

    def describe_transaction(self, transactional_id: str) -> TransactionMetadata:
        return self._serve(transactional_id, lambda c: c.describe_transaction(transactional_id))

    def verify_transactional_append(self, topic: str, partition: int, producer_id: int,
                                    producer_epoch: int) -> None:
        """The partitions' transaction verifier: this server's permissions
        (verified_partitions.py). O(1), never blocks."""
        self.verified.check(topic, partition, producer_id, producer_epoch)

    def verify_in_transaction(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, topic: str, partition: int) -> None:
        """A partition leader's question (VerifyTxnAppend, or this server's own): is
        ``topic``-``partition`` in the Ongoing transaction of ``transactional_id`` at
        ``producer_id``/``producer_epoch``? Returns if so (Kafka's
        ``handleVerifyPartitionsInTransaction``). Event loop; O(1), no I/O, no lock.

        Raises:
            InvalidTxnStateError: no (the id has another producer id, or none; the partition
                was not added; the transaction ended).
            InvalidProducerEpochError: the producer was fenced (a newer epoch).
            NotCoordinatorError, CoordinatorLoadInProgressError, ConcurrentTransactionsError
                (the transaction is being ended: asked again, the answer is no),
                LogClosedError: no answer now (the leader answers its Produce retriably).
        """
        coordinator = self._coordinator_for(transactional_id, make_topic=False)
        try:
            coordinator.verify_transactional_append(topic, partition, producer_id,
                                                    producer_epoch)
            owner = coordinator.describe_transaction(transactional_id).producer_id
        except (InvalidProducerIdMappingError, TransactionalIdNotFoundError) as exc:
            raise InvalidTxnStateError(str(exc)) from exc
        if owner != producer_id:
            raise InvalidTxnStateError(
                f"producer id {producer_id} is not transactional id {transactional_id!r}'s"
                f" (it has {owner}): {topic}-{partition} is in no transaction of it")

    async def _ask(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   topic: str, partition: int) -> None:
        """The verifier's question (append_verifier.py), to the id's coordinator: this server's
        own, or over VerifyTxnAppend."""
        location = await self.find_coordinator(transactional_id)
        node = self._replicas.cluster_node
        if node is None or location.node_id is None:
            raise CoordinatorNotAvailableError("this server has not joined its cluster yet")
        if location.node_id == node.node_id:
            self.verify_in_transaction(transactional_id, producer_id, producer_epoch, topic,
                                       partition)
            return
        await self.calls.ask_coordinator(location.node_id, transactional_id, producer_id,
                                         producer_epoch, topic, partition)

    def run_maintenance(self, now_ms: int | None = None) -> CoordinatorMaintenanceReport:
        """The local coordinator's pass, then each loaded partition's (timeouts, expiry,
        markers not written yet); one report with every error."""
        report = self.local.run_maintenance(now_ms)
        for partition, coordinator in sorted(self._coordinators.items()):
            try:
                part = coordinator.run_maintenance(now_ms)
            except LogClosedError:
                continue  # unloaded meanwhile
            except Exception as exc:
                report.errors.append(f"{CLUSTER_TRANSACTION_STATE_TOPIC}-{partition}: {exc}")
                continue
            report.completed += part.completed
            report.aborted_timed_out += part.aborted_timed_out
            report.expired_ids += part.expired_ids
            report.errors.extend(f"{CLUSTER_TRANSACTION_STATE_TOPIC}-{partition}: {error}"
                                 for error in part.errors)
        return report

    def close(self) -> None:
        """Close every partition coordinator and the local one (blocking: after
        :meth:`stop`)."""
        self._closed = True
        for coordinator in list(self._coordinators.values()):
            coordinator.close()
        self._coordinators.clear()
        self.local.close()

    def _wait(self, work: Awaitable[_T], timeout_s: float, what: str, *,
              cancel_late: bool = True) -> _T:
        """Run ``work`` on the loop from a pool thread and wait for it at most ``timeout_s``;
        then it is cancelled, unless ``cancel_late`` is False (it runs to its end unwatched)."""
        future = asyncio.run_coroutine_threadsafe(_awaited(work), self._loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            if cancel_late:
                future.cancel()
            raise CoordinatorNotAvailableError(
                f"{what} took longer than {timeout_s:.0f} s: retry") from None

    # ---------------------------------------------------------------- the partitions' I/O

    def _state_writer(self, partition: int, leader_epoch: int) -> Callable[[bytes], None]:
        def write(data: bytes) -> None:
            self._wait(self._append_state(partition, leader_epoch, data),
                       STATE_WRITE_TIMEOUT_S,
                       f"writing to {CLUSTER_TRANSACTION_STATE_TOPIC}-{partition}")
        return write

    async def _append_state(self, partition: int, leader_epoch: int, data: bytes) -> None:
        """One state write, acks=all, only while this server leads ``partition`` at the
        epoch its coordinator was made at (an unloaded coordinator's late write is refused)."""
        name = f"{CLUSTER_TRANSACTION_STATE_TOPIC}-{partition}"
        if self._epochs.get(partition) != leader_epoch:
            raise NotCoordinatorError(f"this server no longer leads {name} at epoch"
                                      f" {leader_epoch}: ask FindCoordinator again")
        try:
            await self._replicas.append_records(
                CLUSTER_TRANSACTION_STATE_TOPIC, partition, ACKS_ALL, data,
                size_bytes=len(data), compressed=False, internal_topics_allowed=True)
        except (cluster_errors.NotLeaderOrFollowerError,
                cluster_errors.LeaderNotAvailableError) as exc:
            raise NotCoordinatorError(f"{name} is not led here any more: {exc}") from exc
        except (cluster_errors.ClusterError, UnknownTopicOrPartitionError) as exc:
            # Too few in-sync replicas, a replication timeout: the state change may or may not
            # be in the log (module docstring); the request is retried.
            raise CoordinatorNotAvailableError(f"{name} could not be written: {exc}") from exc

    def _write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, commit: bool) -> None:
        """A partition coordinator's ``write_markers`` (pool threads): through the channel."""
        self.markers.write_blocking(
            self._loop, Marker(topic, partition, producer_id, producer_epoch,
                               coordinator_epoch, commit), MARKER_WAIT_S)

    def _write_markers_many(self, partitions: Sequence[TopicPartition], producer_id: int,
                            producer_epoch: int, coordinator_epoch: int, commit: bool) -> None:
        """A partition coordinator's ``write_markers_many`` (pool threads): every marker of a
        transaction queued at once, each behind its own partition's; waits for all."""
        markers = [Marker(topic, partition, producer_id, producer_epoch, coordinator_epoch,
                          commit) for topic, partition in partitions]
        # Not cancelled when the wait ends: every marker must be queued, and stays queued.
        self._wait(_all(self.markers.write(marker) for marker in markers), MARKER_WAIT_S,
                   f"writing the {len(markers)} markers of producer {producer_id}",
                   cancel_late=False)

    def _generate_producer_id(self) -> int:
        return self.local.init_producer_id(None).producer_id

    # ---------------------------------------------------------------- leadership (the loop)

    def became_leader(self, topic: str, partition: int, leader_epoch: int) -> None:
        """``LeadershipListener``: a state partition led here from now on loads (module
        docstring); the same epoch again (a lease renewed) keeps its coordinator."""
        if topic != CLUSTER_TRANSACTION_STATE_TOPIC or self._closed:
            return
        if self._epochs.get(partition) == leader_epoch:
            return
        previous = self._resign(partition)
        self._epochs[partition] = leader_epoch
        self._loads[partition] = self._loop.create_task(
            self._load(partition, leader_epoch, previous),
            name=f"stratalog-txn-load-{partition}")
        logger.info("%s-%d: leader at epoch %d: its transaction coordinator loads",
                    CLUSTER_TRANSACTION_STATE_TOPIC, partition, leader_epoch)

    def stopped_leading(self, topic: str, partition: int) -> None:
        """``LeadershipListener``: the partition's produce permissions are dropped; a state
        partition's coordinator is unloaded and closed."""
        self.verified.forget_partition(topic, partition)
        if topic == CLUSTER_TRANSACTION_STATE_TOPIC and partition in self._epochs:
            self._resign(partition)
            logger.info("%s-%d: no longer leader: its transaction coordinator unloaded",
                        CLUSTER_TRANSACTION_STATE_TOPIC, partition)

    def _resign(self, partition: int) -> asyncio.Task[None] | None:
        """Unload ``partition``'s coordinator now; the task closing it (None: none)."""
        self._epochs.pop(partition, None)
        coordinator = self._coordinators.pop(partition, None)
        load = self._loads.pop(partition, None)
        if load is not None:
            load.cancel()
        if coordinator is None and load is None:
            return self._closing.get(partition)
        closing = self._loop.create_task(self._close_after(coordinator, load, partition),
                                         name=f"stratalog-txn-close-{partition}")
        self._closing[partition] = closing
        closing.add_done_callback(
            lambda task: self._closing.pop(partition, None)
            if self._closing.get(partition) is task else None)
        return closing

    async def _close_after(self, coordinator: TransactionCoordinator | None,
                           load: asyncio.Task[None] | None, partition: int) -> None:
        """Close ``coordinator`` (in the pool: its lock may be held across a write) once its
        load task ended; a coordinator the load made after the cancel is closed by it."""
        if load is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await load
        if coordinator is not None:
            await self._loop.run_in_executor(self._executor, coordinator.close)

    async def _load(self, partition: int, leader_epoch: int,
                    previous: asyncio.Task[None] | None) -> None:
        name = f"{CLUSTER_TRANSACTION_STATE_TOPIC}-{partition}"
        if previous is not None:
            await asyncio.wait({previous})  # the old coordinator's writes are over
        end = await wait_until_caught_up(self._replicas, CLUSTER_TRANSACTION_STATE_TOPIC,
                                         partition, name)
        if end is None:
            return
        try:
            log = self._replicas.log_manager.get_log(CLUSTER_TRANSACTION_STATE_TOPIC, partition)
            state = await self._loop.run_in_executor(
                self._executor, TransactionStateManager.load_replicated, log, end,
                self._state_writer(partition, leader_epoch))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s: the transaction coordinator could not load its partition;"
                             " its ids answer COORDINATOR_LOAD_IN_PROGRESS until it is led"
                             " anew", name)
            return
        coordinator = TransactionCoordinator.for_partition(
            state, self._write_marker, self._generate_producer_id, leader_epoch,
            config=self._config, write_markers_many=self._write_markers_many)
        if self._epochs.get(partition) != leader_epoch or self._closed:
            await self._loop.run_in_executor(self._executor, coordinator.close)
            return
        self._coordinators[partition] = coordinator
        pending = sum(1 for m in state.transactions() if m.state.is_prepare)
        logger.info("%s: loaded %d transactional ids at leader epoch %d; completing %d"
                    " decided transactions", name, len(state.transactions()), leader_epoch,
                    pending)
        if pending:
            report = await self._loop.run_in_executor(
                self._executor, coordinator.complete_pending_transactions)
            for error in report.errors:
                logger.warning("%s: completing a transaction at load failed (retried by the"
                               " maintenance pass): %s", name, error)

    # ---------------------------------------------------------------- the end

    async def stop(self) -> None:
        """Stop the loads, the closes and the marker senders (the markers not written are the
        next coordinator's: their transactions are still Prepare* in the state partitions)."""
        self._closed = True
        loads = list(self._loads.values())
        for task in loads:
            task.cancel()
        for task in [*loads, *self._closing.values()]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.markers.close()
        await self.verifier.close()
        await asyncio.to_thread(self._marker_executor.shutdown, True)  # writes under way end


async def _awaited(work: Awaitable[_T]) -> _T:
    return await work


async def _all(works: Iterable[Awaitable[None]]) -> None:
    """Every one of ``works`` to its end (each marker stays queued if this is cancelled); the
    first failure raised after all ended."""
    results = await asyncio.gather(*works, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result

