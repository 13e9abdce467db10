"""The producer's identity and transaction state: Kafka's ``TransactionManager``, minus the I/O.

Intuition: an idempotent producer needs one thing from the server, a producer id and epoch
(InitProducerId), and must stop for good if a newer instance fences it. A transactional producer
(``transactional_id``) also moves through Kafka's transaction states, and every public call is
allowed in some of them only::

    UNINITIALIZED --init--> INITIALIZING --> READY --begin--> IN_TRANSACTION
    IN_TRANSACTION --commit--> COMMITTING --> READY
    IN_TRANSACTION or ABORTABLE_ERROR --abort--> ABORTING --> READY
                                                 (or --> INITIALIZING --> READY: a new epoch)
    IN_TRANSACTION or COMMITTING --a batch or AddPartitionsToTxn failed--> ABORTABLE_ERROR
    any --fenced--> FATAL_ERROR (the producer must be closed; a new one takes over)

:class:`TransactionManager` holds the state, the producer id and epoch, the partitions of the
open transaction, and decides what an error means (:func:`produce_error_action`,
:func:`coordinator_error_action`, after Kafka's ``canRetry`` and the response handlers of
``TransactionManager``). The :class:`~stratalog.client.Producer` does the RPCs and calls it;
a call in the wrong state raises :class:`TransactionStateError` naming the state.

Differences from Kafka: InitProducerId of broker.proto v1 carries no current producer id and
epoch (Kafka's KIP-360), so an idempotent producer that must restart its sequences asks for a
new producer id rather than a bumped epoch, and a transactional producer that must bump its epoch
after an abort (a batch of the transaction failed, leaving a sequence gap) calls InitProducerId
with its transactional id again; see docs/client.md.

Pure state, no I/O; event-loop only, like the Producer that owns it.
"""

from __future__ import annotations

import enum

import grpc

from .errors import StratalogError
from .types import ProducerIdAndEpoch, TopicPartition

__all__ = [
    "ErrorAction",
    "TransactionManager",
    "TransactionState",
    "TransactionStateError",
    "coordinator_error_action",
    "produce_error_action",
    "unsupported_error",
]


class TransactionState(enum.Enum):
    """Kafka's ``TransactionManager.State`` (COMMITTING and ABORTING are its
    COMMITTING_TRANSACTION and ABORTING_TRANSACTION)."""

    UNINITIALIZED = enum.auto()
    INITIALIZING = enum.auto()
    READY = enum.auto()
    IN_TRANSACTION = enum.auto()
    COMMITTING = enum.auto()
    ABORTING = enum.auto()
    ABORTABLE_ERROR = enum.auto()
    FATAL_ERROR = enum.auto()


S = TransactionState

# Kafka's isTransitionValid: target -> the states it may be entered from. FATAL_ERROR may be
# entered from any. READY -> INITIALIZING is ours: an idempotent producer taking a new producer
# id (Kafka passes through UNINITIALIZED).
_VALID_SOURCES: dict[TransactionState, frozenset[TransactionState]] = {
    S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR, S.INITIALIZING}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING, S.READY}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING, S.ABORTING}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING: frozenset({S.IN_TRANSACTION}),
    S.ABORTING: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(TransactionState),
}

# What each state means to a caller, for the wrong-state messages.
_STATE_HINTS = {
    S.UNINITIALIZED: "the producer has no producer id yet (begin_transaction() gets one)",
    S.INITIALIZING: "the producer id is being obtained",
    S.READY: "no transaction is open: call begin_transaction() first",
    S.IN_TRANSACTION: "a transaction is open: commit or abort it first",
    S.COMMITTING: "the transaction is being committed",
    S.ABORTING: "the transaction is being aborted",
    S.ABORTABLE_ERROR: "the transaction failed and must be aborted: call abort_transaction()",
    S.FATAL_ERROR: "the producer failed for good: close it",
}


class TransactionStateError(RuntimeError):
    """A Producer call in a state that does not allow it (Kafka's IllegalStateException): a
    bug of the caller, e.g. ``commit_transaction()`` with no transaction open, ``send()`` on a
    transactional producer outside a transaction."""


class ErrorAction(enum.Enum):
    """What the Producer does after a failed request."""

    RETRY = enum.auto()  # send the same request again after a backoff
    RESEND_IN_TURN = enum.auto()  # resend once every earlier batch of the partition is resolved
    RESTART_SEQUENCES = enum.auto()  # new producer id, the partition's sequences from 0, resend
    FAIL = enum.auto()  # the batch fails; the producer goes on
    ABORTABLE = enum.auto()  # the batch or call fails; the open transaction must be aborted
    FATAL = enum.auto()  # the producer is fenced or broken for good


# Reasons that mean another instance took over (Kafka turns INVALID_PRODUCER_EPOCH into
# ProducerFencedException): fatal for any producer.
_FENCED_REASONS = frozenset({"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})


def produce_error_action(
    error: StratalogError, *, transactional: bool, is_head: bool
) -> ErrorAction:
    """What to do after a Produce of an idempotent (or transactional) batch failed with
    ``error``; ``is_head``: every batch stamped before this one is resolved (after Kafka's
    ``TransactionManager.canRetry`` and ``handleFailedBatch``).

    * fenced (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH): FATAL;
    * OUT_OF_ORDER_SEQUENCE for a batch behind unresolved ones: the server saw it before an
      earlier batch (resent, or reordered on the way); RESEND_IN_TURN;
    * OUT_OF_ORDER_SEQUENCE for the head, or UNKNOWN_PRODUCER_ID: a gap nothing can fill (an
      earlier batch failed, or the server lost the producer's state): RESTART_SEQUENCES for an
      idempotent producer; for a transactional one the transaction must be aborted (ABORTABLE);
    * a retriable error: RETRY (with the same sequence);
    * anything else: FAIL (ABORTABLE for a transactional producer).
    """
    reason = error.reason
    if reason in _FENCED_REASONS:
        return ErrorAction.FATAL
    if reason == "OUT_OF_ORDER_SEQUENCE" and not is_head:
        return ErrorAction.RESEND_IN_TURN
    if reason in ("OUT_OF_ORDER_SEQUENCE", "UNKNOWN_PRODUCER_ID"):
        return ErrorAction.ABORTABLE if transactional else ErrorAction.RESTART_SEQUENCES
    if error.retriable:
        return ErrorAction.RETRY
    return ErrorAction.ABORTABLE if transactional else ErrorAction.FAIL


def coordinator_error_action(error: StratalogError, rpc: str) -> ErrorAction:
    """What to do after InitProducerId, AddPartitionsToTxn or EndTxn (``rpc``) failed with
    ``error`` (after the response handlers of Kafka's ``TransactionManager``): RETRY for the
    retriable (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, no connection, ...);
    FATAL when fenced, for INVALID_TXN_STATE, an unknown transactional id, and anything an
    InitProducerId or EndTxn did not expect; ABORTABLE for the rest of AddPartitionsToTxn
    (an unknown topic, say) and for UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_ID_MAPPING.
    """
    if error.retriable:
        return ErrorAction.RETRY
    reason = error.reason
    if reason in _FENCED_REASONS or reason in ("INVALID_TXN_STATE", "TRANSACTIONAL_ID_NOT_FOUND"):
        return ErrorAction.FATAL
    if rpc == "InitProducerId":
        return ErrorAction.FATAL
    if reason in ("UNKNOWN_PRODUCER_ID", "INVALID_PRODUCER_ID_MAPPING"):
        return ErrorAction.ABORTABLE
    return ErrorAction.ABORTABLE if rpc == "AddPartitionsToTxn" else ErrorAction.FATAL


def unsupported_error(error: StratalogError, target: str) -> StratalogError:
    """``error`` made clearer when the server does not know the exactly-once RPCs at all."""
    if error.code is not grpc.StatusCode.UNIMPLEMENTED:
        return error
    return StratalogError(
        f"the server at {target} does not implement InitProducerId (a stratalog server "
        f"without exactly-once): pass idempotent=False to produce to it ({error.message})",
        code=error.code,
    )


class TransactionManager:
    """The producer id and epoch, and Kafka's transaction state machine.

    Holds ``state``; ``producer`` (the current id and epoch, ``None`` until InitProducerId
    answered, and while a new one is asked for); ``last_error`` (what made the state
    ABORTABLE_ERROR or FATAL_ERROR); for a transaction: ``partitions`` (added to it and
    acknowledged), ``pending_partitions`` (waiting for AddPartitionsToTxn before their first
    batch goes out), ``transaction_started`` (an AddPartitionsToTxn went out: the server may
    have a transaction open, so it must be ended), ``epoch_bump_required`` (a stamped batch
    failed: its sequence left a gap, so the epoch must change before the next transaction).
    An idempotent producer without a transactional id only moves between UNINITIALIZED,
    INITIALIZING, READY and FATAL_ERROR. Invariant: ``producer`` is set in READY,
    IN_TRANSACTION, COMMITTING, ABORTING and ABORTABLE_ERROR. Event-loop only.
    """

    def __init__(self, transactional_id: str | None, transaction_timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = S.UNINITIALIZED
        self.producer: ProducerIdAndEpoch | None = None
        self.last_error: BaseException | None = None
        self.partitions: set[TopicPartition] = set()
        self.pending_partitions: set[TopicPartition] = set()
        self.transaction_started = False
        self.epoch_bump_required = False
        # Whether send() may go on without a call to check_send(): kept by transition(), so
        # the per-record check is one attribute read.
        self.sends_allowed = transactional_id is None

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def has_fatal_error(self) -> bool:
        return self.state is S.FATAL_ERROR

    def transition(self, target: TransactionState, error: BaseException | None = None) -> None:
        """Move to ``target``; raises TransactionStateError for a move Kafka's table forbids
        (a bug of the Producer, not of its caller)."""
        if self.state is S.FATAL_ERROR and target is not S.FATAL_ERROR:
            raise TransactionStateError(
                f"cannot move from FATAL_ERROR to {target.name}: the producer failed for good "
                f"({self.last_error})"
            )
        if self.state not in _VALID_SOURCES[target]:
            raise TransactionStateError(
                f"invalid transition from {self.state.name} to {target.name}"
            )
        if target in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
            self.last_error = error
        self.state = target
        if self.transactional_id is None:
            self.sends_allowed = target is not S.FATAL_ERROR
        else:
            self.sends_allowed = target is S.IN_TRANSACTION

    def wrong_state(self, call: str) -> TransactionStateError:
        """The error for ``call`` (e.g. ``"commit_transaction()"``) in the current state."""
        hint = _STATE_HINTS[self.state]
        if self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR) and self.last_error is not None:
            hint = f"{hint} (last error: {self.last_error})"
        return TransactionStateError(f"{call} in state {self.state.name}: {hint}")

    def raise_if_fatal(self) -> None:
        """Raise the error that made the producer fail for good, if one did."""
        if self.state is S.FATAL_ERROR:
            error = self.last_error or TransactionStateError("the producer failed for good")
            raise error.with_traceback(None)

    def require_transactional(self, call: str) -> None:
        if self.transactional_id is None:
            raise TransactionStateError(
                f"{call} needs a transactional producer: create the Producer with "
                f"transactional_id=..."
            )

    def check_send(self) -> None:
        """Raise unless a record may be sent now: fatal error; for a transactional producer,
        only inside a transaction (an abortable error raises that error: the caller must abort).
        """
        self.raise_if_fatal()
        if not self.is_transactional:
            return
        if self.state is S.ABORTABLE_ERROR and self.last_error is not None:
            raise self.last_error.with_traceback(None)
        if self.state is not S.IN_TRANSACTION:
            raise self.wrong_state("send() outside a transaction")

    # --- the producer id ---------------------------------------------------------------------

    def begin_initializing(self) -> None:
        """InitProducerId is about to be asked: from UNINITIALIZED, from READY (an idempotent
        producer's new id) or from ABORTING (a transactional producer's epoch bump)."""
        self.producer = None
        self.transition(S.INITIALIZING)

    def initialized(self, producer: ProducerIdAndEpoch) -> None:
        self.producer = producer
        self.epoch_bump_required = False
        self.transition(S.READY)

    def initialization_failed(self) -> None:
        """A retriable InitProducerId ran out of time: back to UNINITIALIZED, to try again."""
        if self.state is S.INITIALIZING:
            self.transition(S.UNINITIALIZED)

    # --- transactions ------------------------------------------------------------------------

    def begin_transaction(self) -> None:
        self.require_transactional("begin_transaction()")
        self.raise_if_fatal()
        if self.state is not S.READY:
            raise self.wrong_state("begin_transaction()")
        self.transition(S.IN_TRANSACTION)

    def needs_adding(self, partition: TopicPartition) -> bool:
        """Whether ``partition`` must be added to the transaction before its next batch goes
        out; if so it is queued in ``pending_partitions``. O(1)."""
        if partition in self.partitions:
            return False
        self.pending_partitions.add(partition)
        return True

    def partitions_added(self, added: list[TopicPartition]) -> None:
        self.partitions.update(added)
        self.pending_partitions.difference_update(added)

    def begin_commit(self) -> bool:
        """Enter COMMITTING (again, after a commit that timed out). Returns False in
        ABORTABLE_ERROR: the caller raises ``last_error``."""
        self.require_transactional("commit_transaction()")
        self.raise_if_fatal()
        if self.state is S.ABORTABLE_ERROR:
            return False
        if self.state is S.IN_TRANSACTION:
            self.transition(S.COMMITTING)
        elif self.state is not S.COMMITTING:
            raise self.wrong_state("commit_transaction()")
        return True

    def begin_abort(self) -> None:
        """Enter ABORTING (again, after an abort that timed out)."""
        self.require_transactional("abort_transaction()")
        self.raise_if_fatal()
        if self.state in (S.IN_TRANSACTION, S.ABORTABLE_ERROR):
            self.transition(S.ABORTING)
        elif self.state is not S.ABORTING:
            raise self.wrong_state("abort_transaction()")

    def abortable_error(self, error: BaseException, *, sequence_gap: bool = False) -> None:
        """A batch or AddPartitionsToTxn of the open transaction failed: it must be aborted.
        ``sequence_gap``: a stamped batch failed, so the epoch must change after the abort.
        Ignored once aborting (the abort goes on) or fatal."""
        if sequence_gap:
            self.epoch_bump_required = True
        if self.state in (S.IN_TRANSACTION, S.COMMITTING):
            self.transition(S.ABORTABLE_ERROR, error)

    def fatal_error(self, error: BaseException) -> None:
        if self.state is not S.FATAL_ERROR:
            self.transition(S.FATAL_ERROR, error)

    def clear_transaction(self) -> None:
        """Forget the partitions of the transaction that ended."""
        self.partitions.clear()
        self.pending_partitions.clear()
        self.transaction_started = False

    def complete_transaction(self) -> None:
        """The transaction ended (EndTxn answered, or there was nothing to end): READY."""
        self.clear_transaction()
        self.transition(S.READY)
