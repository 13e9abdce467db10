"""The state of one transactional id: Kafka's ``TransactionState`` and ``TransactionMetadata``.

A transactional id moves through Kafka's state machine; an arrow is a logged transition::

    (new) -> Empty --AddPartitions--> Ongoing --EndTxn(commit)--> PrepareCommit --> CompleteCommit
               ^                         |     \\--EndTxn(abort)-> PrepareAbort  --> CompleteAbort
               |                         |                             ^
               +--InitProducerId---------+--fence (InitProducerId, ----+
                  (epoch + 1)                  timeout): epoch + 1
    Empty / CompleteCommit / CompleteAbort --expiry--> Dead (a tombstone in the log)

Prepare* means "decided, markers being written"; Complete* means "every partition of the
transaction has its marker". PrepareEpochFence is Kafka's in-memory step between Ongoing and
the PrepareAbort a fence writes: it is never logged (Kafka does not log it either).

:class:`TransactionMetadata` is immutable: each ``prepare_*`` method returns the metadata the
transition leads to, the coordinator appends it to the state log, and only then installs it.
So the cache never holds a state that is not in the log, and a failed append changes nothing,
with one exception, as in Kafka: ``last_producer_epoch``, the epoch a KIP-360 bump replaced,
is kept in memory only (Kafka's ``TransactionLogValue`` has no field for it either); a restart
forgets it, and the retry it serves is then fenced.
An invalid transition is a programmer error (an assertion): the coordinator checks the request
first and raises the operating errors of :mod:`.errors`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from stratalog.server.client_text import loggable

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_TIMESTAMP",
    "PRODUCER_EPOCH_MAX",
    "TopicPartition",
    "TransactionMetadata",
    "TransactionState",
]

TopicPartition = tuple[str, int]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_TIMESTAMP = -1
#: Java's Short.MAX_VALUE: an epoch is an int16 in every batch header.
PRODUCER_EPOCH_MAX = 32767


class TransactionState(enum.IntEnum):
    """Kafka's ``TransactionState``; the values are the ids stored in the log (int8)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (``PrepareCommit``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def is_prepare(self) -> bool:
        """Decided, markers not all written: PrepareCommit or PrepareAbort."""
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete_or_empty(self) -> bool:
        """No transaction open: Empty, CompleteCommit or CompleteAbort."""
        return self in _NOT_IN_TRANSACTION


_S = TransactionState
_NOT_IN_TRANSACTION = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})

#: Kafka's ``TransactionState.validPreviousStates``: the states each state may be entered from.
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """One transactional id's producer, timeout, state and partitions (Kafka's
    ``TransactionMetadata``, without its pending-state bookkeeping: see the module docstring).

    Invariants: ``partitions`` is empty unless the state is Ongoing, PrepareCommit,
    PrepareAbort or PrepareEpochFence; ``txn_start_timestamp_ms`` is the time the current (or
    last) transaction became Ongoing, -1 before the first; ``producer_epoch`` is -1 only for a
    new id that no InitProducerId completed yet. Immutable and thread-safe.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int
    #: The epoch that an InitProducerId with an expected epoch (KIP-360) bumped from, so that
    #: its retry (the answer lost) gets the same epoch again; -1 otherwise. Not logged, and
    #: not part of equality: see the module docstring.
    last_producer_epoch: int = field(default=NO_PRODUCER_EPOCH, compare=False)

    @classmethod
    def new(
        cls, transactional_id: str, producer_id: int, txn_timeout_ms: int, now_ms: int
    ) -> TransactionMetadata:
        """A new id in state Empty with no epoch yet: the first InitProducerId bumps it to 0."""
        return cls(transactional_id, producer_id, NO_PRODUCER_EPOCH, txn_timeout_ms,
                   TransactionState.EMPTY, frozenset(), NO_TIMESTAMP, now_ms)

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        """Kafka's rule: at ``Short.MAX_VALUE - 1`` an InitProducerId rotates the producer id,
        because a fence may still need to bump the epoch once more."""
        return self.producer_epoch >= PRODUCER_EPOCH_MAX - 1

    def is_timed_out(self, now_ms: int) -> bool:
        """Ongoing for longer than its timeout (Kafka's ``abortTimedOutTransactions`` test)."""
        return (self.state is TransactionState.ONGOING
                and self.txn_start_timestamp_ms + self.txn_timeout_ms < now_ms)

    def _transit(self, state: TransactionState, now_ms: int, **changes: object) -> TransactionMetadata:
        assert self.state in VALID_PREVIOUS_STATES[state], (
            f"transactional id {self.transactional_id!r}: no transition from "
            f"{self.state.kafka_name} to {state.kafka_name}"
        )
        return replace(self, state=state,
                       txn_last_update_timestamp_ms=max(now_ms, self.txn_last_update_timestamp_ms),
                       **changes)  # type: ignore[arg-type]

    def prepare_increment_epoch(
        self, txn_timeout_ms: int, now_ms: int, *, expected: bool = False
    ) -> TransactionMetadata:
        """InitProducerId with no transaction open: epoch + 1, new timeout, state Empty.
        ``expected``: the producer named this epoch (KIP-360), which is remembered as
        ``last_producer_epoch`` for a retry (Kafka's ``prepareIncrementProducerEpoch``)."""
        assert not self.is_producer_epoch_exhausted
        return self._transit(TransactionState.EMPTY, now_ms, producer_epoch=self.producer_epoch + 1,
                             txn_timeout_ms=txn_timeout_ms, partitions=frozenset(),
                             txn_start_timestamp_ms=NO_TIMESTAMP,
                             last_producer_epoch=(self.producer_epoch if expected
                                                  else NO_PRODUCER_EPOCH))

    def prepare_repeated_bump(self, txn_timeout_ms: int, now_ms: int) -> TransactionMetadata:
        """The retry of a KIP-360 bump whose answer was lost: the same epoch again, state
        Empty (Kafka answers it from ``lastProducerEpoch`` without a second bump)."""
        assert self.last_producer_epoch != NO_PRODUCER_EPOCH
        return self._transit(TransactionState.EMPTY, now_ms, txn_timeout_ms=txn_timeout_ms,
                             partitions=frozenset(), txn_start_timestamp_ms=NO_TIMESTAMP)

    def prepare_producer_id_rotation(
        self, producer_id: int, txn_timeout_ms: int, now_ms: int
    ) -> TransactionMetadata:
        """InitProducerId at an exhausted epoch: a new producer id with epoch 0, state Empty."""
        assert producer_id != self.producer_id
        return self._transit(TransactionState.EMPTY, now_ms, producer_id=producer_id,
                             producer_epoch=0, txn_timeout_ms=txn_timeout_ms,
                             partitions=frozenset(), txn_start_timestamp_ms=NO_TIMESTAMP,
                             last_producer_epoch=NO_PRODUCER_EPOCH)

    def prepare_fence_producer_epoch(self, now_ms: int) -> TransactionMetadata:
        """Ongoing -> PrepareEpochFence with epoch + 1: the open transaction's producer is fenced
        before the coordinator aborts it (never logged: :meth:`prepare_end` follows)."""
        assert self.producer_epoch < PRODUCER_EPOCH_MAX, "an Ongoing epoch is below Short.MAX"
        return self._transit(TransactionState.PREPARE_EPOCH_FENCE, now_ms,
                             producer_epoch=self.producer_epoch + 1,
                             last_producer_epoch=NO_PRODUCER_EPOCH)

    def prepare_add_partitions(
        self, partitions: frozenset[TopicPartition], now_ms: int
    ) -> TransactionMetadata:
        """Partitions join the transaction; a transaction begins when the first ones do."""
        if self.state is TransactionState.ONGOING:
            return self._transit(TransactionState.ONGOING, now_ms,
                                 partitions=self.partitions | partitions)
        return self._transit(TransactionState.ONGOING, now_ms, partitions=partitions,
                             txn_start_timestamp_ms=now_ms)

    def prepare_end(self, commit: bool, now_ms: int) -> TransactionMetadata:
        """Ongoing (or PrepareEpochFence, for an abort) -> PrepareCommit / PrepareAbort."""
        state = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        return self._transit(state, now_ms)

    def prepare_complete(self, now_ms: int) -> TransactionMetadata:
        """Every marker written: Prepare* -> Complete*, the partitions cleared."""
        assert self.state.is_prepare
        state = (TransactionState.COMPLETE_COMMIT if self.state is TransactionState.PREPARE_COMMIT
                 else TransactionState.COMPLETE_ABORT)
        return self._transit(state, now_ms, partitions=frozenset())

    def prepare_dead(self, now_ms: int) -> TransactionMetadata:
        """An expired id: Dead, written to the log as a tombstone."""
        return self._transit(TransactionState.DEAD, now_ms)

    def describe(self) -> str:
        """One line for messages and logs; the id, a client's string of up to 32 KiB, escaped
        and cut (server/client_text.py)."""
        return (f"transactional id {loggable(self.transactional_id)} (producer id"
                f" {self.producer_id}, "
                f"epoch {self.producer_epoch}, state {self.state.kafka_name})")
