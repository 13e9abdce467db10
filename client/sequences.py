"""The idempotent producer's sequence numbers of one partition (Kafka's ``TxnPartitionEntry``).

Intuition: an idempotent producer stamps every batch with its producer id, epoch and *base
sequence*, the number of its first record; a partition numbers a producer's records 0, 1, 2, ...
(after 2**31 - 1 comes 0 again, as Kafka's ``DefaultRecordBatch.incrementSequence``). The server
stores a batch only if its base sequence follows the last one it stored for that producer and
epoch, and answers a repeat of one of the last 5 with the offsets of the original. So that a
resend is recognised and nothing is stored out of order, the producer keeps, per partition:

* the base sequence of a batch is fixed once, when the batch is drained (closed for sending), in
  drain order, and a resend carries the same one;
* ``unacked``: the batches stamped and not yet resolved, in sequence order. Only the first
  (the *head*) may be resent, so that resends reach the server in sequence order; the Producer
  keeps at most 5 (the server's window) so that any resend is still recognised;
* when the server says a sequence cannot be filled (a gap: OUT_OF_ORDER_SEQUENCE for the head,
  UNKNOWN_PRODUCER_ID), the partition restarts at 0 under a new producer id or epoch:
  :meth:`PartitionSequences.restart` restamps the unacknowledged batches from 0, in order.

Example: batches of 3, 2 and 4 records get base sequences 0, 3 and 5, and the next is 9. If the
server refuses the first for good, the other two are restamped 0 and 2 under the new producer id.

A batch is any object with ``count`` (its records) and the three writable stamps
``producer_id``, ``producer_epoch``, ``base_sequence`` (see :class:`Sequenced`).
"""

from __future__ import annotations

import collections
import contextlib
from typing import Protocol

from stratalog.records.batch import SEQUENCE_MAX, increment_sequence

from .types import ProducerIdAndEpoch

__all__ = [
    "NO_PRODUCER",
    "SEQUENCE_MAX",
    "PartitionSequences",
    "Sequenced",
    "increment_sequence",
]


#: The producer of a partition that has stamped nothing yet.
NO_PRODUCER = ProducerIdAndEpoch(-1, -1)


class Sequenced(Protocol):
    """What :class:`PartitionSequences` needs of a batch."""

    count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int


class PartitionSequences:
    """The sequence state of one partition: whose sequences, the next one, the batches unacked.

    Holds ``producer`` (the id and epoch the sequences belong to; :data:`NO_PRODUCER` before the
    first batch), ``next_sequence`` (the base sequence of the next batch stamped) and ``unacked``
    (stamped, not yet acknowledged or failed, in sequence order).

    Invariants (:meth:`check`): every unacked batch is stamped with ``producer``; their base
    sequences increase in deque order (modulo the wrap); each one's base sequence plus its count
    is the next one's unless a batch between them failed for good; ``next_sequence`` follows the
    last batch stamped (at or after the end of the last unacked one). Pure bookkeeping, no
    I/O; event-loop only, like the Producer that owns it.
    """

    __slots__ = ("next_sequence", "producer", "unacked")

    def __init__(self) -> None:
        self.producer = NO_PRODUCER
        self.next_sequence = 0
        self.unacked: collections.deque[Sequenced] = collections.deque()

    def can_stamp(self, producer: ProducerIdAndEpoch) -> bool:
        """Whether a new batch may be stamped for ``producer`` now: it is this partition's
        producer, or no batch of the previous one is unacknowledged (a batch with a new id or
        epoch and sequence 0 must not overtake the old one's batches). O(1)."""
        return producer == self.producer or not self.unacked

    def stamp(self, batch: Sequenced, producer: ProducerIdAndEpoch) -> int:
        """Give ``batch`` (drained now, ``batch.count`` records) the next base sequence under
        ``producer``; it joins ``unacked``. A new producer restarts the sequences at 0.
        Returns the base sequence. O(1).

        Raises:
            ValueError: :meth:`can_stamp` is false, or the batch is empty.
        """
        if not self.can_stamp(producer):
            raise ValueError(
                f"cannot stamp a batch for producer {producer}: {len(self.unacked)} batches of "
                f"producer {self.producer} are unacknowledged"
            )
        if batch.count < 1:
            raise ValueError(f"a batch must hold at least one record, got {batch.count}")
        if producer != self.producer:
            self.producer = producer
            self.next_sequence = 0
        base_sequence = self.next_sequence
        batch.producer_id, batch.producer_epoch = producer
        batch.base_sequence = base_sequence
        self.next_sequence = increment_sequence(base_sequence, batch.count)
        self.unacked.append(batch)
        return base_sequence

    def head(self) -> Sequenced | None:
        """The unacknowledged batch with the lowest sequence (the only one that may be resent)."""
        return self.unacked[0] if self.unacked else None

    def is_head(self, batch: Sequenced) -> bool:
        """Whether every batch stamped before ``batch`` is resolved."""
        return bool(self.unacked) and self.unacked[0] is batch

    def resolve(self, batch: Sequenced) -> None:
        """``batch`` was acknowledged or failed for good: it leaves ``unacked`` (a no-op if it
        was not there). O(unacked), at most 5."""
        with contextlib.suppress(ValueError):
            self.unacked.remove(batch)

    def restart(self, producer: ProducerIdAndEpoch) -> list[Sequenced]:
        """Restart at sequence 0 under ``producer`` (a new id or epoch): restamp the unacked
        batches from 0 in their order, and continue after them (Kafka's
        ``startSequencesAtBeginning``). Returns the restamped batches; the caller rewrites their
        headers before resending them. O(unacked).

        Raises:
            ValueError: ``producer`` is the current one (sequences would repeat under it).
        """
        if producer == self.producer:
            raise ValueError(
                f"restarting sequences needs a new producer id or epoch, not {producer}"
            )
        self.producer = producer
        sequence = 0
        for batch in self.unacked:
            batch.producer_id, batch.producer_epoch = producer
            batch.base_sequence = sequence
            sequence = increment_sequence(sequence, batch.count)
        self.next_sequence = sequence
        return list(self.unacked)

    def check(self) -> None:
        """Assert the invariants (for tests: call after every mutation)."""
        previous_end: int | None = None
        for batch in self.unacked:
            stamp = (batch.producer_id, batch.producer_epoch)
            assert stamp == self.producer, (batch, self.producer)
            assert 0 <= batch.base_sequence <= SEQUENCE_MAX and batch.count >= 1
            if previous_end is not None:
                assert _not_before(batch.base_sequence, previous_end), (previous_end, batch)
            previous_end = increment_sequence(batch.base_sequence, batch.count)
        if previous_end is not None:
            assert _not_before(self.next_sequence, previous_end), (self.next_sequence, previous_end)


def _not_before(sequence: int, reference: int) -> bool:
    # Equal, or later by less than half the sequence space (later after a failed batch; never
    # earlier), modulo the wrap.
    return (sequence - reference) % (SEQUENCE_MAX + 1) < (SEQUENCE_MAX + 1) // 2
