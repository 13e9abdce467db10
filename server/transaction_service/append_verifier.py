"""A partition leader asks a producer's transaction coordinator before it appends a
transactional batch it was not told of: KIP-890 part 1's verification, asked by the leader
(docs/cluster.md, "Transactions").

The coordinator tells a partition's leader of each producer that added the partition to its
transaction (AllowTxnAppends, verified_partitions.py). A leadership that began after that
(a kill, a preferred-leader election, a reassignment, a rolling restart) was never told; so,
as Kafka 3.6's leader (``core/src/main/scala/kafka/server/ReplicaManager.scala``:
``handleProduceAppend``, ``maybeStartTransactionVerificationForPartition``; the coordinator's
``handleVerifyPartitionsInTransaction`` in ``core/src/main/scala/kafka/coordinator/transaction/
TransactionCoordinator.scala``), the leader asks::

    Produce(p, transactional batches of pid at epoch e, transactional id t)  at p's leader,
    before the append and outside the log's lock:
        verified set holds (p, pid) at e, or at a newer epoch -> nothing to ask (the check
            under the lock decides, as before)
        else guard = begin(p, pid, e); ask t's coordinator (VerifyTxnAppend, or in-process when
            it is this server): is t's transaction Ongoing, with p, at pid/e?
            yes -> allow_verified(guard) (void if the marker or a leadership change came
                   between: the batch is then refused under the lock) -> the append goes on
            no  -> INVALID_TXN_STATE (or INVALID_PRODUCER_EPOCH): nothing written
            no answer (coordinator moving, loading, busy; a timeout; too many questions) ->
                   NOT_ENOUGH_REPLICAS, retriable, as Kafka answers a produce whose
                   verification failed so (older clients do not retry coordinator errors on a
                   Produce)

The late-produce protection stands: a Produce retried after its transaction ended finds no
permission, asks, and the coordinator (Complete*, or Ongoing without p) says no.

Bounds: at most ``in_flight_max`` questions under way on this server (beyond: the retriable
error at once); one question per (partition, producer id, epoch), which every Produce that
needs the same answer meanwhile waits for (coalesced); each waits at most ``timeout_s``.
Nothing is kept once answered but the verified set's entry.

A Produce without a transactional id (a gRPC client that does not send it) is not verified
here: the check under the lock refuses it as before. A TxnOffsetCommit (the offsets the group
coordinator writes to ``__consumer_offsets`` in the transaction) is verified the same way
(:meth:`AppendVerifier.verify_producer`), before the group service's own check: Kafka's group
coordinator verifies it too.

Concurrency: event-loop only. Crash: nothing durable; a restarted leader asks again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable

from stratalog.records.batch import iter_batch_headers
from stratalog.records.errors import RecordError
from stratalog.server.cluster.errors import NotEnoughReplicasError
from stratalog.server.storage.errors import InvalidProducerEpochError
from stratalog.server.transactions import InvalidTxnStateError

from .verified_partitions import VerificationGuard, VerifiedPartitions

__all__ = [
    "VERIFICATIONS_IN_FLIGHT_MAX",
    "VERIFICATION_TIMEOUT_S",
    "AppendVerifier",
    "TxnVerificationUnavailableError",
    "transactional_producer",
]

logger = logging.getLogger(__name__)

#: Most questions to coordinators under way on one server at once.
VERIFICATIONS_IN_FLIGHT_MAX = 1_000
#: The longest one question may take (the Produce then answers NOT_ENOUGH_REPLICAS).
VERIFICATION_TIMEOUT_S = 5.0

#: ``ask(transactional_id, producer_id, producer_epoch, topic, partition)``: returns when the
#: coordinator said yes; raises InvalidTxnStateError or InvalidProducerEpochError when it said
#: no, anything else when it could not say.
Ask = Callable[[str, int, int, str, int], Awaitable[None]]


class TxnVerificationUnavailableError(NotEnoughReplicasError):
    """The producer's coordinator could not be asked now (not found, loading, moving, busy, a
    timeout, too many questions): a retriable refusal, answered NOT_ENOUGH_REPLICAS by both
    front ends as Kafka's ``handleProduceAppend`` does; nothing was written."""

    def __init__(self, topic: str, partition: int, reason: str) -> None:
        # NotEnoughReplicasError's message speaks of the ISR: this one names its own cause.
        self.isr_size = -1
        self.min_insync = -1
        super(NotEnoughReplicasError, self).__init__(
            topic, partition, "the partition's leader could not verify with the producer's"
            f" transaction coordinator that the partition is in its transaction: {reason};"
            " nothing was written, retry")


def transactional_producer(records: bytes | memoryview) -> tuple[int, int] | None:
    """The (producer id, epoch) of the transactional batches in ``records`` (client batches
    back to back), None if there are none. Reads the 61-byte headers only: O(batches). Bytes
    that are not well-framed batches, or transactional batches of two producers, are left to
    the append's validation, which refuses them (None here).
    """
    found: tuple[int, int] | None = None
    try:
        for header in iter_batch_headers(records):
            if header.is_transactional and header.producer_id >= 0:
                producer = (header.producer_id, header.producer_epoch)
                if found is not None and found != producer:
                    return None
                found = producer
    except RecordError:
        return None
    return found


class AppendVerifier:
    """The questions of this leader to the coordinators (module docstring).

    Holds the verified set, the ``ask`` call, and the questions under way by (topic,
    partition, producer id, epoch). Invariant: ``len(_in_flight) <= in_flight_max``; each
    entry's task removes it when it ends.
    """

    def __init__(self, verified: VerifiedPartitions, ask: Ask, *,
                 in_flight_max: int = VERIFICATIONS_IN_FLIGHT_MAX,
                 timeout_s: float = VERIFICATION_TIMEOUT_S) -> None:
        assert in_flight_max > 0 and timeout_s > 0
        self._verified = verified
        self._ask = ask
        self._in_flight_max = in_flight_max
        self._timeout_s = timeout_s
        self._in_flight: dict[tuple[str, int, int, int], asyncio.Task[None]] = {}
        #: Questions sent (not coalesced into another), for tests and metrics.
        self.asked = 0
        self._closed = False

    @property
    def in_flight(self) -> int:
        """Questions under way."""
        return len(self._in_flight)

    async def verify_before_append(self, topic: str, partition: int,
                                   transactional_id: str | None,
                                   records: bytes | memoryview) -> None:
        """Ask the coordinator, if need be, before ``records`` are appended to the partition
        (module docstring). O(batches) when nothing needs asking.

        Raises:
            InvalidTxnStateError, InvalidProducerEpochError: the coordinator said no.
            TxnVerificationUnavailableError: it could not be asked or did not answer.
        """
        if not transactional_id:
            return
        producer = transactional_producer(records)
        if producer is None:
            return
        await self.verify_producer(topic, partition, transactional_id, *producer)

    async def verify_producer(self, topic: str, partition: int, transactional_id: str,
                              producer_id: int, producer_epoch: int) -> None:
        """As :meth:`verify_before_append` for a known producer (a TxnOffsetCommit's, whose
        offsets the group coordinator writes): one question (or the one under way for the
        same partition and producer) and its answer recorded, unless the verified set holds
        the producer already. O(1) then."""
        if self._verified.holds(topic, partition, producer_id, producer_epoch):
            return
        key = (topic, partition, producer_id, producer_epoch)
        task = self._in_flight.get(key)
        if task is None:
            if self._closed:
                raise TxnVerificationUnavailableError(topic, partition,
                                                      "the server is stopping")
            if len(self._in_flight) >= self._in_flight_max:
                raise TxnVerificationUnavailableError(
                    topic, partition, f"{self._in_flight_max} questions to transaction"
                    " coordinators are under way on this server already")
            guard = self._verified.begin(topic, partition, producer_id, producer_epoch)
            self.asked += 1
            task = asyncio.get_running_loop().create_task(
                self._question(guard, transactional_id),
                name=f"stratalog-txn-verify-{topic}-{partition}-{producer_id}")
            self._in_flight[key] = task
            task.add_done_callback(functools.partial(self._finished, key))
        # Shielded: one caller's cancellation (its client went away) does not fail the others.
        await asyncio.shield(task)

    def _finished(self, key: tuple[str, int, int, int], task: asyncio.Task[None]) -> None:
        if self._in_flight.get(key) is task:
            del self._in_flight[key]
        # Every waiting Produce may have gone (cancelled): a failure nobody reads is not an
        # asyncio warning.
        if not task.cancelled():
            task.exception()

    async def close(self) -> None:
        """Cancel the questions under way, and refuse new ones (the server stops): their
        Produce requests fail retriably. Idempotent."""
        self._closed = True
        tasks = list(self._in_flight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _question(self, guard: VerificationGuard, transactional_id: str) -> None:
        topic, partition, producer_id, producer_epoch = guard
        try:
            try:
                await asyncio.wait_for(
                    self._ask(transactional_id, producer_id, producer_epoch, topic, partition),
                    self._timeout_s)
            except (InvalidTxnStateError, InvalidProducerEpochError):
                raise
            except TimeoutError:
                raise TxnVerificationUnavailableError(
                    topic, partition, f"the coordinator of transactional id"
                    f" {transactional_id!r} did not answer within {self._timeout_s:.1f} s"
                ) from None
            except asyncio.CancelledError:
                if self._closed:  # close(): every waiting Produce is answered, retriably
                    raise TxnVerificationUnavailableError(
                        topic, partition, "the server is stopping") from None
                raise
            except Exception as exc:
                logger.debug("%s-%d: the coordinator of %r could not verify producer %d: %s",
                             topic, partition, transactional_id, producer_id, exc)
                raise TxnVerificationUnavailableError(topic, partition, str(exc)) from exc
            try:
                recorded = self._verified.allow_verified(guard)
            except Exception as exc:  # entries_max permissions held
                raise TxnVerificationUnavailableError(topic, partition, str(exc)) from exc
            if not recorded:
                raise InvalidTxnStateError(
                    f"partition {topic}-{partition}: the transaction of producer {producer_id}"
                    f" (transactional id {transactional_id!r}) ended here, or this server's"
                    " leadership changed, while its coordinator was asked: the batch is not"
                    " part of it")
        finally:
            self._verified.discard(guard)  # a no-op after allow_verified took it
