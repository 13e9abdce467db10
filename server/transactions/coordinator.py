"""The transaction coordinator: Kafka's ``TransactionCoordinator`` for a single server.

It answers the three transaction requests of a producer, and keeps every transactional id's state
in ``__transaction_state`` (:mod:`.transaction_state_manager`)::

    InitProducerId(None)            -> a new producer id, epoch 0 (an idempotent producer)
    InitProducerId("t", timeout)    -> t's producer id, epoch + 1: the previous instance is fenced;
                                       an open transaction of t is aborted first; at epoch
                                       32766 t gets a new producer id with epoch 0
    InitProducerId("t", timeout, expected=(pid, epoch))  the same, for a producer that goes on
                                       after an abortable error (KIP-360): fenced unless it is
                                       t's current producer id and epoch (or the one the last
                                       such bump replaced: its retry, answered the same)
    AddPartitionsToTxn(t, pid, epoch, partitions)  Empty/Complete* -> Ongoing (a transaction
                                       begins), Ongoing -> Ongoing with more partitions
    EndTxn(t, pid, epoch, commit)   Ongoing -> Prepare{Commit,Abort} logged -> a COMMIT/ABORT
                                       marker written to every partition (``write_markers``)
                                       -> Complete{Commit,Abort} logged

``write_markers(topic, partition, producer_id, producer_epoch, coordinator_epoch, commit)`` is
injected: the server passes the call that appends a control batch to a partition log. Markers
must be idempotent (the coordinator writes them again after a crash or a failed write).

Once Prepare* is logged the outcome is decided: EndTxn succeeds even if a marker write fails
then (as in Kafka, where markers are sent after the answer); the markers are retried by
:meth:`TransactionCoordinator.run_maintenance` and by the next request for the id, which gets
CONCURRENT_TRANSACTIONS (retriable) until they are all written. On load, every transaction
found in Prepare* is completed; one found Ongoing is left to time out. The maintenance pass
aborts transactions open past their timeout, fencing their producer (epoch + 1) as Kafka does,
and expires ids unused for ``transactional.id.expiration.ms``.

Differences from Kafka, all from having one server (a cluster has coordinator partitions,
leadership and FindCoordinator: server/transaction_service/): this server coordinates every id,
the coordinator epoch is always 0; markers
are written in-process and synchronously, so an InitProducerId that must abort an open
transaction answers once the abort is complete instead of asking the client to retry
(CONCURRENT_TRANSACTIONS); an unknown transactional id gets TRANSACTIONAL_ID_NOT_FOUND rather
than INVALID_PRODUCER_ID_MAPPING; KIP-360's epoch bump with an expected producer id and epoch
is served, and its retry (the answer lost) answered from the epoch it replaced, kept in memory
as Kafka keeps it, but not after a restart nor across a producer id rotation (Kafka logs the
previous producer id for that); no transaction version 2 (KIP-890).

Cluster mode (docs/cluster.md, "Transactions"): this server's own coordinator
(``cluster_node_id`` set) hands out producer ids, each carrying the node id
(:func:`.producer_ids.cluster_producer_id`), and refuses transactional ids
(:class:`TransactionsNotSupportedError`: the front ends never send it one then). The
transactional ids are served by one coordinator per partition of the replicated state topic
this server leads (:meth:`TransactionCoordinator.for_partition`, made and driven by
server/transaction_service/): the same class over a replicated
:class:`TransactionStateManager`, its markers stamped with the partition's leader epoch
(``coordinator_epoch``) and sent to the partitions' leaders through its ``write_markers``.

Transactional produce: a transactional batch is appended only to a partition of its producer's
Ongoing transaction, at the producer's current epoch: the server hands each partition log
``verify_transactional_append`` as its verifier. Without the check, a batch sent to a partition
never added, or after the transaction ended, would open a transaction in that partition that no
marker ever closes, and its last stable offset would stay behind it for ever. The log calls the
check under the lock its markers also take, so a batch the check accepted is written before the
marker that ends its transaction (Kafka's KIP-890 verification, done in-process).

Concurrency: thread-safe; the servicer calls it from its thread pool (every method blocks on
file I/O and on ``write_markers``), except ``verify_transactional_append``, which never blocks
(the produce path calls it, on the event loop too). Requests for one transactional id are
serialised by a lock (one of :data:`LOCK_STRIPES`, by the id's hash), held across the state log
appends and the marker writes, so each answer is given after its state change is in the log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from stratalog.server.storage.clock import wall_clock_ms
from stratalog.server.storage.errors import (
    InvalidProducerEpochError,
    InvalidTopicError,
    LogClosedError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.storage.topic_names import validate_partition, validate_topic_name

from .config import DEFAULT_TRANSACTION_TIMEOUT_MS, TransactionConfig
from .errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidProducerIdMappingError,
    InvalidTransactionalIdError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
    TransactionsNotSupportedError,
)
from .producer_ids import ProducerIdManager, cluster_producer_id
from .transaction_log import TRANSACTIONAL_ID_BYTES_MAX
from .transaction_metadata import (
    NO_PRODUCER_EPOCH,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
)
from .transaction_state_manager import TransactionStateManager

__all__ = [
    "COORDINATOR_EPOCH",
    "LOCK_STRIPES",
    "CoordinatorMaintenanceReport",
    "ProducerIdAndEpoch",
    "TransactionCoordinator",
    "WriteMarkers",
    "WriteMarkersMany",
]

log = logging.getLogger(__name__)

#: Kafka's coordinator epoch is the leader epoch of the id's __transaction_state partition; one
#: server leads its only partition for ever.
COORDINATOR_EPOCH = 0
#: Locks serialising the requests of one transactional id (ids share a lock by hash).
LOCK_STRIPES = 64


class WriteMarkers(Protocol):
    """Writes one COMMIT (``commit``) or ABORT marker for a producer to one partition.

    Raises what the partition log raises; ``UnknownTopicOrPartitionError`` means the partition
    is gone, and the coordinator then skips it (as Kafka's marker channel does).
    """

    def __call__(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                 coordinator_epoch: int, commit: bool) -> None: ...


class WriteMarkersMany(Protocol):
    """Writes the COMMIT (``commit``) or ABORT markers of a producer to every partition of
    ``partitions`` (at once), returning once all are written or skipped (a partition gone);
    raises if any could not be written (the coordinator retries them all: markers are
    idempotent)."""

    def __call__(self, partitions: Sequence[TopicPartition], producer_id: int,
                 producer_epoch: int, coordinator_epoch: int, commit: bool) -> None: ...


class ProducerIdAndEpoch(NamedTuple):
    """What InitProducerId answers."""

    producer_id: int
    producer_epoch: int


@dataclass
class CoordinatorMaintenanceReport:
    """What one :meth:`TransactionCoordinator.run_maintenance` pass did."""

    now_ms: int
    completed: int = 0  # Prepare* transactions whose markers were written
    aborted_timed_out: int = 0
    expired_ids: int = 0
    compacted: bool = False
    errors: list[str] = field(default_factory=list)


class TransactionCoordinator:
    """Transactional ids, their producers and transactions; producer ids for every producer.

    Holds: the state manager (the log and the latest metadata per id) once loaded, the producer
    id manager, ``write_markers``, the settings, the clock, the id locks and the maintenance
    schedule. Invariants: see :class:`TransactionStateManager`; a transactional id's state
    changes only under its lock, and only by appending the new state first.

    Crash behaviour: whatever was answered is in the log (fsynced); a crash between Prepare*
    and Complete* is completed at the next load.

    Lifecycle: ``TransactionCoordinator(...)`` does no I/O; :meth:`load` opens and replays the
    log (requests before it get COORDINATOR_LOAD_IN_PROGRESS); :meth:`close` closes it (requests
    after it get LogClosedError, SHUTTING_DOWN). :meth:`open` is both first steps.
    :meth:`for_partition` makes the coordinator of one partition of the cluster's state topic
    over its loaded state (server/transaction_service/).
    """

    def __init__(
        self,
        log_dirs: Sequence[Path | str],
        write_markers: WriteMarkers | Callable[..., None],
        *,
        config: TransactionConfig | None = None,
        time_ms: Callable[[], int] | None = None,
        flush_each_append: bool = True,
        broker_id: int = 0,
        clean_log_dirs: Collection[Path] = (),
        cluster_node_id: int | None = None,
    ) -> None:
        assert log_dirs, "at least one log directory"
        # Cluster mode: producer ids carry the node id; transactional ids are refused here
        # (they are the partition coordinators', server/transaction_service/).
        self._cluster_node_id = cluster_node_id
        # A partition coordinator's (for_partition): where its new producer ids come from, and
        # the leader epoch of its partition, stamped on its markers.
        self._generate_external: Callable[[], int] | None = None
        self._coordinator_epoch = COORDINATOR_EPOCH
        self._write_markers_many: WriteMarkersMany | None = None
        # The directories closed cleanly last time: the state log there needs no recovery
        # (TransactionStateManager.open).
        self._clean_log_dirs = frozenset(clean_log_dirs)
        self._log_dirs = [Path(d) for d in log_dirs]
        self._write_markers = write_markers
        self._config = config if config is not None else TransactionConfig()
        self._time_ms = time_ms if time_ms is not None else wall_clock_ms
        self._flush_each_append = flush_each_append
        self._broker_id = broker_id
        self._stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._state: TransactionStateManager | None = None
        self._producer_ids: ProducerIdManager | None = None
        self._closed = False
        self._lifecycle_lock = threading.Lock()
        self._maintenance_lock = threading.Lock()
        self._next_abort_check_ms = 0
        self._next_expiry_check_ms = 0

    @classmethod
    def open(
        cls,
        log_dirs: Sequence[Path | str],
        write_markers: WriteMarkers | Callable[..., None],
        **kwargs: object,
    ) -> TransactionCoordinator:
        """Construct (``kwargs`` as for the constructor) and :meth:`load`."""
        coordinator = cls(log_dirs, write_markers, **kwargs)  # type: ignore[arg-type]
        coordinator.load()
        return coordinator

    @classmethod
    def for_partition(
        cls,
        state: TransactionStateManager,
        write_markers: WriteMarkers | Callable[..., None],
        generate_producer_id: Callable[[], int],
        coordinator_epoch: int,
        *,
        config: TransactionConfig | None = None,
        time_ms: Callable[[], int] | None = None,
        write_markers_many: WriteMarkersMany | None = None,
    ) -> TransactionCoordinator:
        """The coordinator of the transactional ids of one partition of the cluster's state
        topic, over ``state`` (loaded: :meth:`TransactionStateManager.load_replicated`).

        ``generate_producer_id()`` hands out a cluster-wide producer id (this server's local
        coordinator's); ``coordinator_epoch`` is the partition's leader epoch, stamped on every
        marker so that a partition refuses the markers of a coordinator it has seen replaced
        (Kafka's coordinator epoch). The transactions it finds in Prepare* are completed by
        :meth:`complete_pending_transactions`, which the caller runs next.
        ``write_markers_many``, when given, writes a transaction's markers all at once instead
        of ``write_markers`` one partition after the other.
        """
        coordinator = cls([state.directory], write_markers, config=config, time_ms=time_ms)
        coordinator._write_markers_many = write_markers_many
        coordinator._state = state
        coordinator._generate_external = generate_producer_id
        coordinator._coordinator_epoch = coordinator_epoch
        return coordinator

    @property
    def coordinator_epoch(self) -> int:
        """The epoch stamped on this coordinator's markers (0 on a single server)."""
        return self._coordinator_epoch

    def complete_pending_transactions(self) -> CoordinatorMaintenanceReport:
        """Write the markers of every transaction found in Prepare* and log it complete (a
        new coordinator's first step, Kafka's ``TransactionMarkerChannelManager`` on load);
        a failure is in the report's ``errors`` and retried by :meth:`run_maintenance`."""
        report = CoordinatorMaintenanceReport(self._time_ms())
        with self._maintenance_lock:
            self._complete_pending(report)
        return report

    def load(self) -> None:
        """Open and replay the state log, then complete the transactions found in Prepare*.

        A completion that fails (a marker write) is logged and retried by the maintenance pass.

        Raises:
            StorageError: the state log cannot be opened or read.
            CorruptTransactionLogError: a record of it does not decode.
        """
        with self._lifecycle_lock:
            if self._closed:
                raise LogClosedError("the transaction coordinator is closed")
            assert self._state is None, "load() once"
            state = TransactionStateManager.open(
                self._log_dirs, time_ms=self._time_ms,
                flush_each_append=self._flush_each_append, broker_id=self._broker_id,
                clean_log_dirs=self._clean_log_dirs,
            )
            self._producer_ids = ProducerIdManager(state.append_producer_ids,
                                                   state.next_producer_id)
            self._state = state
        report = CoordinatorMaintenanceReport(self._time_ms())
        self._complete_pending(report)
        for error in report.errors:
            log.error("completing a transaction at load failed (retried later): %s", error)

    def close(self) -> None:
        """Close the state log. Idempotent. Requests in flight finish or fail with LogClosedError."""
        with self._lifecycle_lock:
            self._closed = True
            if self._state is not None:
                self._state.close()

    @property
    def config(self) -> TransactionConfig:
        return self._config

    @property
    def state_manager(self) -> TransactionStateManager:
        """The loaded state (for tests and tools).

        Raises:
            CoordinatorLoadInProgressError, LogClosedError: not loaded yet, or closed.
        """
        return self._loaded()

    def _loaded(self) -> TransactionStateManager:
        if self._closed:
            raise LogClosedError("the transaction coordinator is closed")
        state = self._state
        if state is None:
            raise CoordinatorLoadInProgressError(
                "the transaction coordinator is loading its state log; retry"
            )
        return state

    def _lock_for(self, transactional_id: str) -> threading.Lock:
        return self._stripes[hash(transactional_id) % LOCK_STRIPES]

    # ---------------------------------------------------------------- requests

    def init_producer_id(
        self,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        expected: ProducerIdAndEpoch | None = None,
    ) -> ProducerIdAndEpoch:
        """Kafka's InitProducerId: a producer id and epoch for a producer that starts.

        Without ``transactional_id``: a producer id never handed out before, epoch 0 (the
        timeout and ``expected`` are ignored, as Kafka does: an idempotent producer that bumps
        its epoch gets a new id). With one: the id's producer id (allocated on its first call)
        with its epoch bumped, fencing every earlier instance; a transaction left open is
        aborted first (its markers written); at an exhausted epoch (32766) the id gets a new
        producer id with epoch 0. The timeout is stored for the id's transactions.

        ``expected``: the producer id and epoch of a producer that goes on after an abortable
        error (KIP-360, Kafka's ``prepareInitProducerIdTransit``): the bump happens only if
        they are the id's current ones (or the id has no epoch yet); the epoch the last such
        bump replaced gets the same answer again (a retry whose answer was lost); otherwise
        another instance took over and this one is fenced.

        Raises:
            InvalidTransactionalIdError: an empty or oversized transactional id.
            TransactionsNotSupportedError: a transactional id in cluster mode.
            InvalidTransactionTimeoutError: timeout not in 1 .. transaction.max.timeout.ms.
            ProducerFencedError: ``expected`` is not the id's current producer id and epoch.
            ConcurrentTransactionsError: a commit or abort of the id cannot complete yet.
            CoordinatorLoadInProgressError, LogClosedError, StorageError, ProducerIdsExhaustedError.
        """
        state = self._loaded()
        if transactional_id is None:
            return ProducerIdAndEpoch(self._generate_producer_id(), 0)
        _check_transactional_id(transactional_id)
        self._refuse_in_cluster()
        self._check_timeout(transactional_id, transaction_timeout_ms)
        with self._lock_for(transactional_id):
            now_ms = self._time_ms()
            metadata = state.get(transactional_id)
            if metadata is None:
                metadata = TransactionMetadata.new(
                    transactional_id, self._generate_producer_id(), transaction_timeout_ms, now_ms)
            else:
                metadata = self._complete_or_refuse(metadata)
            if expected is not None and _is_repeated_bump(metadata, expected):
                repeated = metadata.prepare_repeated_bump(transaction_timeout_ms, now_ms)
                state.append_transaction(repeated)
                return ProducerIdAndEpoch(repeated.producer_id, repeated.producer_epoch)
            if metadata.state is TransactionState.ONGOING:
                log.info("InitProducerId for %s: aborting its open transaction",
                         metadata.describe())
                metadata = self._fence_and_abort(metadata, now_ms, refuse_on_failure=True)
            if metadata.is_producer_epoch_exhausted:
                new = metadata.prepare_producer_id_rotation(
                    self._generate_producer_id(), transaction_timeout_ms, now_ms)
                log.info("%s: epoch exhausted, new producer id %d", metadata.describe(),
                         new.producer_id)
            else:
                # An expected epoch that an abort just fenced is not remembered (Kafka's fence
                # forgets the last epoch too).
                new = metadata.prepare_increment_epoch(
                    transaction_timeout_ms, now_ms,
                    expected=expected is not None and expected.producer_epoch == (
                        metadata.producer_epoch))
            state.append_transaction(new)
            return ProducerIdAndEpoch(new.producer_id, new.producer_epoch)

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> None:
        """Kafka's AddPartitionsToTxn: ``partitions`` join the id's transaction, which begins if
        none is open (state Ongoing). Adding partitions already in it writes nothing.

        Raises:
            InvalidTransactionalIdError: empty/oversized id, no partitions, or more than
                transaction.partitions.max in the transaction.
            TransactionsNotSupportedError: in cluster mode.
            InvalidTopicError: a bad topic name or partition number.
            TransactionalIdNotFoundError: the id has no state (InitProducerId first).
            InvalidProducerIdMappingError: ``producer_id`` is not the id's.
            ProducerFencedError: ``producer_epoch`` is not the id's current epoch.
            ConcurrentTransactionsError: a commit or abort of the id cannot complete yet.
            CoordinatorLoadInProgressError, LogClosedError, StorageError.
        """
        state = self._loaded()
        _check_transactional_id(transactional_id)
        self._refuse_in_cluster()
        requested = self._check_partitions(transactional_id, partitions)
        with self._lock_for(transactional_id):
            metadata = self._complete_or_refuse(self._require(state, transactional_id))
            self._check_producer(metadata, producer_id, producer_epoch)
            if metadata.state is TransactionState.ONGOING and requested <= metadata.partitions:
                return
            if metadata.state is TransactionState.ONGOING:
                total = len(metadata.partitions | requested)
            else:
                total = len(requested)
            if total > self._config.transaction_partitions_max:
                raise InvalidTransactionalIdError(
                    f"transactional id {transactional_id!r}: a transaction of {total} partitions "
                    f"exceeds transaction.partitions.max={self._config.transaction_partitions_max}"
                )
            state.append_transaction(metadata.prepare_add_partitions(requested, self._time_ms()))

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """Kafka's EndTxn: commit or abort the id's transaction.

        Logs PrepareCommit/PrepareAbort, writes a marker to every partition of the transaction,
        logs CompleteCommit/CompleteAbort. Returns once the decision is logged: if a marker
        write fails after that, the completion is retried (see the module docstring). Ending a
        transaction that already completed the same way succeeds again (a client's retry).

        Raises:
            InvalidTransactionalIdError: an empty or oversized id.
            TransactionsNotSupportedError: in cluster mode.
            TransactionalIdNotFoundError, InvalidProducerIdMappingError, ProducerFencedError:
                as for :meth:`add_partitions_to_txn`.
            InvalidTxnStateError: no transaction open (Empty), or the opposite outcome already
                decided (commit after an abort, abort after a commit).
            ConcurrentTransactionsError: the previous commit or abort cannot complete yet.
            CoordinatorLoadInProgressError, LogClosedError, StorageError.
        """
        state = self._loaded()
        _check_transactional_id(transactional_id)
        self._refuse_in_cluster()
        with self._lock_for(transactional_id):
            metadata = self._complete_or_refuse(self._require(state, transactional_id))
            self._check_producer(metadata, producer_id, producer_epoch)
            completed = (TransactionState.COMPLETE_COMMIT if commit
                         else TransactionState.COMPLETE_ABORT)
            if metadata.state is completed:
                return  # a retry of the EndTxn that completed it
            if metadata.state is not TransactionState.ONGOING:
                outcome = "commit" if commit else "abort"
                raise InvalidTxnStateError(
                    f"cannot {outcome} {metadata.describe()}: "
                    + ("no transaction is open (add partitions first)"
                       if metadata.state is TransactionState.EMPTY
                       else "the transaction already ended the other way")
                )
            prepared = metadata.prepare_end(commit, self._time_ms())
            state.append_transaction(prepared)
            try:
                self._write_markers_and_complete(prepared)
            except Exception as exc:  # the outcome is logged: completion is retried
                log.warning("%s: markers not all written, retried later: %s",
                            prepared.describe(), exc)

    def verify_transactional_append(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int
    ) -> None:
        """Check that a transactional batch of ``producer_id`` at ``producer_epoch`` may be
        appended to ``topic``-``partition``: the partition is in the Ongoing transaction of the
        producer's transactional id, and the epoch is the id's current one (Kafka's
        ``handleVerifyPartitionsInTransaction``, with its produce-side error mapping).

        O(1): a lookup by producer id, without a lock and without I/O (safe on an event loop).

        Raises:
            InvalidProducerIdMappingError: no transactional id has this producer id.
            InvalidProducerEpochError: the epoch is not the id's current one (a newer
                InitProducerId, or a timeout abort, fenced it); Kafka answers a produce so.
            ConcurrentTransactionsError: the id's transaction is being committed or aborted
                (retriable: once it completes the answer is INVALID_TXN_STATE).
            InvalidTxnStateError: no transaction is open, or the partition is not in it.
            TransactionsNotSupportedError: in cluster mode.
            CoordinatorLoadInProgressError, LogClosedError: not loaded yet, or closed.
        """
        self._refuse_in_cluster()
        metadata = self._loaded().get_by_producer_id(producer_id)
        if metadata is None:
            raise InvalidProducerIdMappingError(
                f"a transactional batch for {topic}-{partition} from producer id {producer_id}, "
                "which belongs to no transactional id: a transactional producer gets its id "
                "from InitProducerId with a transactional id (or the id expired)"
            )
        if producer_epoch != metadata.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} (transactional id {metadata.transactional_id!r}) wrote "
                f"to {topic}-{partition} with epoch {producer_epoch}, but the current epoch is "
                f"{metadata.producer_epoch}: "
                + ("a newer InitProducerId or a transaction timeout fenced this producer"
                   if producer_epoch < metadata.producer_epoch else "the epoch is from the future"),
                producer_id=producer_id,
            )
        state = metadata.state
        if state.is_prepare:
            raise ConcurrentTransactionsError(
                f"partition {topic}-{partition}: the transaction of producer {producer_id} "
                f"(transactional id {metadata.transactional_id!r}) is being "
                f"{'committed' if state is TransactionState.PREPARE_COMMIT else 'aborted'}; "
                "no batch may join it now"
            )
        if state is not TransactionState.ONGOING or (topic, partition) not in metadata.partitions:
            raise InvalidTxnStateError(
                f"partition {topic}-{partition} was not added to the transaction of producer "
                f"{producer_id} (transactional id {metadata.transactional_id!r}, state "
                f"{state.kafka_name}); call AddPartitionsToTxn first"
            )

    def describe_transaction(self, transactional_id: str) -> TransactionMetadata:
        """The id's latest logged metadata (Kafka's DescribeTransactions).

        Raises:
            TransactionalIdNotFoundError, CoordinatorLoadInProgressError, LogClosedError.
        """
        return self._require(self._loaded(), transactional_id)

    # ---------------------------------------------------------------- maintenance

    def run_maintenance(self, now_ms: int | None = None) -> CoordinatorMaintenanceReport:
        """One background pass: complete Prepare* transactions, abort the timed-out ones
        (every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``), expire
        unused ids (every ``transaction.remove.expired.transaction.cleanup.interval.ms``),
        and compact the state log when it is due. A failure of one id does not stop the pass
        (``errors``). Passes do not overlap (a second caller waits).
        """
        now = self._time_ms() if now_ms is None else now_ms
        report = CoordinatorMaintenanceReport(now)
        with self._maintenance_lock:
            state = self._loaded()
            self._complete_pending(report)
            if now >= self._next_abort_check_ms:
                self._next_abort_check_ms = now + self._config.abort_timed_out_interval_ms
                report.aborted_timed_out = self._abort_timed_out(now, report)
            if now >= self._next_expiry_check_ms:
                self._next_expiry_check_ms = now + self._config.remove_expired_interval_ms
                report.expired_ids = self._remove_expired(now, report)
            try:
                report.compacted = state.maybe_compact()
            except Exception as exc:
                report.errors.append(f"compacting the transaction state log: {exc}")
        return report

    def abort_timed_out_transactions(self, now_ms: int | None = None) -> int:
        """Abort every transaction Ongoing for longer than its timeout, bumping its producer's
        epoch (Kafka's ``abortTimedOutTransactions``). Returns how many were aborted.
        """
        report = CoordinatorMaintenanceReport(self._time_ms() if now_ms is None else now_ms)
        self._loaded()
        count = self._abort_timed_out(report.now_ms, report)
        for error in report.errors:
            log.error("%s", error)
        return count

    def remove_expired_transactional_ids(self, now_ms: int | None = None) -> int:
        """Forget every id with no open transaction and no state change for
        ``transactional.id.expiration.ms`` (a tombstone each). Returns how many.
        """
        report = CoordinatorMaintenanceReport(self._time_ms() if now_ms is None else now_ms)
        self._loaded()
        count = self._remove_expired(report.now_ms, report)
        for error in report.errors:
            log.error("%s", error)
        return count

    def _complete_pending(self, report: CoordinatorMaintenanceReport) -> None:
        state = self._loaded()
        for metadata in state.transactions():
            if not metadata.state.is_prepare:
                continue
            with self._lock_for(metadata.transactional_id):
                current = state.get(metadata.transactional_id)
                if current is None or not current.state.is_prepare:
                    continue
                try:
                    self._write_markers_and_complete(current)
                    report.completed += 1
                except Exception as exc:
                    report.errors.append(f"completing {current.describe()}: {exc}")

    def _abort_timed_out(self, now_ms: int, report: CoordinatorMaintenanceReport) -> int:
        state = self._loaded()
        aborted = 0
        for metadata in state.transactions():
            if not metadata.is_timed_out(now_ms):
                continue
            with self._lock_for(metadata.transactional_id):
                current = state.get(metadata.transactional_id)
                if current is None or not current.is_timed_out(now_ms):
                    continue
                log.info("aborting the transaction of %s: open since %d, timeout %d ms",
                         current.describe(), current.txn_start_timestamp_ms,
                         current.txn_timeout_ms)
                try:
                    self._fence_and_abort(current, now_ms, refuse_on_failure=False)
                    aborted += 1
                except Exception as exc:
                    report.errors.append(f"aborting timed-out {current.describe()}: {exc}")
        return aborted

    def _remove_expired(self, now_ms: int, report: CoordinatorMaintenanceReport) -> int:
        state = self._loaded()
        horizon_ms = now_ms - self._config.transactional_id_expiration_ms
        expired = 0
        for metadata in state.transactions():
            if not _expired(metadata, horizon_ms):
                continue
            with self._lock_for(metadata.transactional_id):
                current = state.get(metadata.transactional_id)
                if current is None or not _expired(current, horizon_ms):
                    continue
                try:
                    state.append_transaction(current.prepare_dead(now_ms))
                    expired += 1
                    log.info("expired %s: unused since %d", current.describe(),
                             current.txn_last_update_timestamp_ms)
                except Exception as exc:
                    report.errors.append(f"expiring {current.describe()}: {exc}")
        return expired

    # ---------------------------------------------------------------- steps

    def _generate_producer_id(self) -> int:
        if self._generate_external is not None:
            return self._generate_external()
        producer_ids = self._producer_ids
        assert producer_ids is not None
        if self._cluster_node_id is None:
            return producer_ids.generate()
        return cluster_producer_id(self._cluster_node_id, producer_ids.generate())

    def _refuse_in_cluster(self) -> None:
        if self._cluster_node_id is not None:
            raise TransactionsNotSupportedError(
                "this server's own coordinator hands out producer ids only in cluster mode:"
                " transactional ids are served by the cluster's state partitions' coordinators"
                " (server/transaction_service/, docs/cluster.md)"
            )

    def _check_timeout(self, transactional_id: str, timeout_ms: int) -> None:
        maximum = self._config.transaction_max_timeout_ms
        if (isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int)
                or not 0 < timeout_ms <= maximum):
            raise InvalidTransactionTimeoutError(
                f"transactional id {transactional_id!r}: transaction timeout {timeout_ms!r} ms "
                f"is not in 1 .. {maximum} (transaction.max.timeout.ms)"
            )

    def _check_partitions(
        self, transactional_id: str, partitions: Iterable[TopicPartition]
    ) -> frozenset[TopicPartition]:
        requested = frozenset(partitions)
        if not requested:
            raise InvalidTransactionalIdError(
                f"transactional id {transactional_id!r}: no partitions to add"
            )
        if len(requested) > self._config.transaction_partitions_max:
            raise InvalidTransactionalIdError(
                f"transactional id {transactional_id!r}: {len(requested)} partitions exceed "
                f"transaction.partitions.max={self._config.transaction_partitions_max}"
            )
        for item in requested:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise InvalidTopicError(
                    f"transactional id {transactional_id!r}: {item!r} is not (topic, partition)"
                )
            validate_topic_name(item[0])
            validate_partition(item[1])
        return requested

    @staticmethod
    def _require(state: TransactionStateManager, transactional_id: str) -> TransactionMetadata:
        metadata = state.get(transactional_id)
        if metadata is None:
            raise TransactionalIdNotFoundError(
                f"transactional id {transactional_id!r} is unknown: InitProducerId was not "
                "called for it, or it expired (transactional.id.expiration.ms)"
            )
        return metadata

    @staticmethod
    def _check_producer(metadata: TransactionMetadata, producer_id: int, epoch: int) -> None:
        if producer_id != metadata.producer_id:
            raise InvalidProducerIdMappingError(
                f"producer id {producer_id} does not belong to {metadata.describe()}"
            )
        if epoch != metadata.producer_epoch:
            raise ProducerFencedError(
                f"producer epoch {epoch} is not the current one of {metadata.describe()}: "
                + ("a newer producer instance fenced this one" if epoch < metadata.producer_epoch
                   else "the epoch is from the future")
            )

    def _complete_or_refuse(self, metadata: TransactionMetadata) -> TransactionMetadata:
        """A Prepare* transaction completed (markers written), or ConcurrentTransactionsError."""
        if not metadata.state.is_prepare:
            return metadata
        try:
            return self._write_markers_and_complete(metadata)
        except Exception as exc:
            raise ConcurrentTransactionsError(
                f"{metadata.describe()}: the markers of its "
                f"{'commit' if metadata.state is TransactionState.PREPARE_COMMIT else 'abort'} "
                f"are not all written yet ({exc}); retry"
            ) from exc

    def _fence_and_abort(
        self, metadata: TransactionMetadata, now_ms: int, *, refuse_on_failure: bool
    ) -> TransactionMetadata:
        """Ongoing -> (epoch + 1) PrepareAbort logged -> markers -> CompleteAbort logged."""
        state = self._loaded()
        prepared = metadata.prepare_fence_producer_epoch(now_ms).prepare_end(False, now_ms)
        state.append_transaction(prepared)
        if refuse_on_failure:
            return self._complete_or_refuse(prepared)
        return self._write_markers_and_complete(prepared)

    def _write_markers_and_complete(self, prepared: TransactionMetadata) -> TransactionMetadata:
        """Write the marker of a Prepare* transaction to each of its partitions (sorted), then
        log Complete*. Raises what a marker write or the append raises (state stays Prepare*).
        """
        assert prepared.state.is_prepare
        commit = prepared.state is TransactionState.PREPARE_COMMIT
        if self._write_markers_many is not None:
            # A partition coordinator's markers go to several leaders at once.
            self._write_markers_many(sorted(prepared.partitions), prepared.producer_id,
                                     prepared.producer_epoch, self._coordinator_epoch, commit)
            partitions: list[TopicPartition] = []
        else:
            partitions = sorted(prepared.partitions)
        for topic, partition in partitions:
            try:
                self._write_markers(topic, partition, prepared.producer_id,
                                    prepared.producer_epoch, self._coordinator_epoch, commit)
            except UnknownTopicOrPartitionError:
                log.warning("%s: partition %s-%d no longer exists; its marker is skipped",
                            prepared.describe(), topic, partition)
        completed = prepared.prepare_complete(self._time_ms())
        self._loaded().append_transaction(completed)
        return completed


def _check_transactional_id(transactional_id: str) -> None:
    if not isinstance(transactional_id, str) or not transactional_id:
        raise InvalidTransactionalIdError(
            f"transactional id must be a non-empty string, got {transactional_id!r}"
        )
    size = len(transactional_id.encode("utf-8"))
    if size > TRANSACTIONAL_ID_BYTES_MAX:
        raise InvalidTransactionalIdError(
            f"transactional id of {size} UTF-8 bytes exceeds {TRANSACTIONAL_ID_BYTES_MAX}"
        )


def _is_repeated_bump(metadata: TransactionMetadata, expected: ProducerIdAndEpoch) -> bool:
    """KIP-360: whether a producer going on after an abortable error repeats a bump whose
    answer it lost (True: answer the same epoch again), or asks for a new one (False). Raises
    ProducerFencedError when another instance took over since (Kafka's ``isValidProducerId``
    and ``prepareIncrementProducerEpoch``). A transaction open at the bumped epoch means the
    answer was not lost: then the repeat is fenced, as Kafka's eventually is."""
    if metadata.producer_epoch == NO_PRODUCER_EPOCH:
        return False  # a new id: nothing to fence
    if expected == (metadata.producer_id, metadata.producer_epoch):
        return False
    if (expected.producer_id == metadata.producer_id
            and expected.producer_epoch == metadata.last_producer_epoch != NO_PRODUCER_EPOCH
            and metadata.state is not TransactionState.ONGOING):
        return True
    raise ProducerFencedError(
        f"InitProducerId expected producer id {expected.producer_id} at epoch "
        f"{expected.producer_epoch}, but {metadata.describe()}: another producer instance"
        " took over this transactional id"
    )


def _expired(metadata: TransactionMetadata, horizon_ms: int) -> bool:
    return (metadata.state.is_complete_or_empty
            and metadata.txn_last_update_timestamp_ms <= horizon_ms)
