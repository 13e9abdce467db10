"""Which producers may append transactional batches to the partitions this server leads, in a
cluster: KIP-890 part 1's verification, told by the coordinator.

On one server the partition log asks the coordinator directly (its ``verify_transactional_append``,
in-process). In a cluster the coordinator of a producer is elsewhere, and the partition's verifier
runs under the log's lock, where it must not wait for a network call. So the coordinator tells
the leaders first, as Kafka 3.6's leaders ask it first (``core/src/main/scala/kafka/server/
ReplicaManager.scala``, ``maybeStartTransactionVerificationForPartition``; the coordinator's side
``handleVerifyPartitionsInTransaction``)::

    AddPartitionsToTxn(t, pid, epoch, [p])  at the coordinator:
        Ongoing [.., p] logged (acks=all)
        -> AllowTxnAppends(pid, epoch, [p]) to p's leader: allow(p, pid, epoch)
        -> answered only then; a leader not told: the request fails (retriable), and its
           retry tells it again
    Produce(p, transactional batch of pid at epoch e)  at p's leader, under the log's lock:
        check(p, pid, e): allowed at e -> appended; at a newer epoch -> INVALID_PRODUCER_EPOCH;
        not allowed -> INVALID_TXN_STATE (nothing written)
    EndTxn / abort: for each p, at p's leader: end(p, pid), then the marker is written

``end`` comes before the marker, under no lock the produce path holds: a batch that was checked
before ``end`` is written before the marker (both take the log's lock), a batch checked after
it is refused. So every transactional batch lands inside a transaction the coordinator had
open with that partition: a Produce retried after its transaction ended (Jepsen's "late
produce") is refused instead of opening a transaction in the partition that no marker closes
(the last stable offset stuck behind it for ever).

What it does not stop (Kafka's part 1 neither; part 2, an epoch bump per transaction, does): a
late batch of transaction T1 arriving after the same producer's T2 added the partition is taken
into T2. A producer sends EndTxn only after every batch of T1 was acknowledged, so such a batch
is a retry of an acknowledged one, and the idempotent producer state drops it as a duplicate;
docs/cluster.md, "Transactions".

The permissions of a partition are dropped when this server stops leading it (a stale one
could otherwise admit a late batch after leadership came back). A leader that was not told
(its leadership began after the AddPartitionsToTxn) asks the producer's coordinator before the
append (append_verifier.py), and records a yes with a guard, Kafka's ``VerificationGuard``
(``storage/src/main/java/org/apache/kafka/storage/internals/log/VerificationGuard.java``)::

    guard = begin(p, pid, e)        before the question leaves
    ... the coordinator answers Ongoing with p ...
    allow_verified(guard)           kept only if no end(p, pid) nor forget_partition(p) came
                                    between: a yes that crossed the transaction's marker (or a
                                    leadership change) is not recorded, and the batch refused

so a yes the coordinator gave before it decided the transaction can never admit a batch after
the marker. Memory: at most ``entries_max`` (partition, producer) pairs; beyond, :meth:`allow`
refuses (retriable); the guards are bounded by the verifier's concurrency cap.

Concurrency: thread-safe (one lock, held for a dict operation): :meth:`check` runs under a
partition log's lock on the event loop or in a pool thread, the others on the loop or in the
pool. Never blocks. Nothing is durable: after a restart every partition is led anew.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from stratalog.server.storage.errors import InvalidProducerEpochError
from stratalog.server.transactions import CoordinatorNotAvailableError, InvalidTxnStateError

__all__ = ["VERIFIED_ENTRIES_MAX", "VerificationGuard", "VerifiedPartitions"]

#: Most (partition, producer) permissions held: a partition in 100,000 open transactions.
VERIFIED_ENTRIES_MAX = 100_000


class VerificationGuard(NamedTuple):
    """One question to a coordinator under way (:meth:`VerifiedPartitions.begin`); compared by
    identity, never by value."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int


class VerifiedPartitions:
    """(topic, partition) -> producer id -> the producer epoch whose open transaction holds the
    partition, for the partitions this server leads (module docstring); and the guards of the
    questions under way. Invariants: no empty inner map; ``_count`` is the number of
    (partition, producer) entries, at most ``entries_max``; a guard is in ``_guards`` until
    :meth:`allow_verified`, :meth:`discard`, :meth:`end` or :meth:`forget_partition` takes it
    out (at most one per (partition, producer): a newer one replaces it)."""

    def __init__(self, entries_max: int = VERIFIED_ENTRIES_MAX) -> None:
        assert entries_max > 0
        self._entries_max = entries_max
        self._partitions: dict[tuple[str, int], dict[int, int]] = {}
        self._count = 0
        self._guards: dict[tuple[str, int], dict[int, VerificationGuard]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._count

    def holds(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> bool:
        """Whether :meth:`check` would let the batch through, or refuse it for its epoch (a
        question to the coordinator cannot change either). O(1)."""
        with self._lock:
            producers = self._partitions.get((topic, partition))
            allowed = producers.get(producer_id) if producers is not None else None
        return allowed is not None and allowed >= producer_epoch

    def allow(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> None:
        """``producer_id`` at ``producer_epoch`` may append to ``topic``-``partition`` until
        :meth:`end` (a newer epoch replaces an older one). O(1).

        Raises:
            CoordinatorNotAvailableError: ``entries_max`` permissions are held already.
        """
        with self._lock:
            self._allow_locked(topic, partition, producer_id, producer_epoch)

    def begin(self, topic: str, partition: int, producer_id: int,
              producer_epoch: int) -> VerificationGuard:
        """A question about the producer at the partition leaves now: its guard (module
        docstring), replacing an older one of the same (partition, producer). O(1)."""
        guard = VerificationGuard(topic, partition, producer_id, producer_epoch)
        with self._lock:
            self._guards.setdefault((topic, partition), {})[producer_id] = guard
        return guard

    def allow_verified(self, guard: VerificationGuard) -> bool:
        """The coordinator said yes to ``guard``'s question: allow the producer as
        :meth:`allow` does, if the guard is still the partition's (no :meth:`end`,
        :meth:`forget_partition` or newer :meth:`begin` since). Whether it was. O(1).

        Raises:
            CoordinatorNotAvailableError: ``entries_max`` permissions are held already.
        """
        with self._lock:
            if not self._take_guard(guard):
                return False
            self._allow_locked(guard.topic, guard.partition, guard.producer_id,
                               guard.producer_epoch)
            return True

    def discard(self, guard: VerificationGuard) -> None:
        """The question failed or was refused: drop its guard if it is still there. O(1)."""
        with self._lock:
            self._take_guard(guard)

    @property
    def guards(self) -> int:
        """Questions under way (their guards held)."""
        with self._lock:
            return sum(len(guards) for guards in self._guards.values())

    def _take_guard(self, guard: VerificationGuard) -> bool:
        key = (guard.topic, guard.partition)
        guards = self._guards.get(key)
        if guards is None or guards.get(guard.producer_id) is not guard:
            return False
        del guards[guard.producer_id]
        if not guards:
            del self._guards[key]
        return True

    def _allow_locked(self, topic: str, partition: int, producer_id: int,
                      producer_epoch: int) -> None:
        producers = self._partitions.get((topic, partition))
        if producers is None or producer_id not in producers:
            if self._count >= self._entries_max:
                raise CoordinatorNotAvailableError(
                    f"{topic}-{partition}: {self._entries_max} transactional (partition,"
                    " producer) pairs are open on this server already; retry once some"
                    " end")
            self._count += 1
            if producers is None:
                producers = self._partitions[(topic, partition)] = {}
        producers[producer_id] = producer_epoch

    def check(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> None:
        """The partition's transaction verifier: refuse a transactional batch of a producer
        whose coordinator did not allow it here at this epoch. O(1).

        Raises:
            InvalidProducerEpochError: the producer's transaction here is at a newer epoch (a
                newer instance, or a timeout abort, fenced this one).
            InvalidTxnStateError: the partition is in no open transaction of the producer (not
                added, or its transaction ended, or this server led it only since).
        """
        with self._lock:
            producers = self._partitions.get((topic, partition))
            allowed = producers.get(producer_id) if producers is not None else None
        if allowed == producer_epoch:
            return
        if allowed is not None and allowed > producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} wrote to {topic}-{partition} with epoch "
                f"{producer_epoch}, but its transaction there is at epoch {allowed}: a newer"
                " InitProducerId or a transaction timeout fenced this producer",
                producer_id=producer_id)
        raise InvalidTxnStateError(
            f"partition {topic}-{partition} is in no open transaction of producer "
            f"{producer_id} at epoch {producer_epoch} that its coordinator told this leader of:"
            " call AddPartitionsToTxn first (or the transaction ended)")

    def end(self, topic: str, partition: int, producer_id: int) -> None:
        """The producer's transaction ends at the partition (its marker is written next); a
        question about it under way is void. O(1)."""
        with self._lock:
            guards = self._guards.get((topic, partition))
            if guards is not None and guards.pop(producer_id, None) is not None and not guards:
                del self._guards[(topic, partition)]
            producers = self._partitions.get((topic, partition))
            if producers is not None and producers.pop(producer_id, None) is not None:
                self._count -= 1
                if not producers:
                    del self._partitions[(topic, partition)]

    def forget_partition(self, topic: str, partition: int) -> int:
        """Drop every permission of ``topic``-``partition`` (this server stopped leading it);
        how many. The questions under way about it are void. O(1) but for freeing them."""
        with self._lock:
            self._guards.pop((topic, partition), None)
            producers = self._partitions.pop((topic, partition), None)
            dropped = len(producers) if producers is not None else 0
            self._count -= dropped
        return dropped
