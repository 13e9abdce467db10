"""A partition leader's question to a producer's coordinator before a transactional append it
was not told of (server/transaction_service/append_verifier.py): asked once per (partition,
producer) however many Produce requests wait for it, bounded in number and time, recorded
only while no marker crossed it, and a no refuses the batch.

The coordinator here is a plain map of what each transactional id's Ongoing transaction holds
(the ``ask`` the verifier is built with is the network call in a cluster): the verifier, the
verified set and the batch parsing are the real ones."""

from __future__ import annotations

import asyncio

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.cluster.errors import NotEnoughReplicasError
from stratalog.server.storage.errors import InvalidProducerEpochError
from stratalog.server.transaction_service.append_verifier import (
    AppendVerifier,
    TxnVerificationUnavailableError,
    transactional_producer,
)
from stratalog.server.transaction_service.verified_partitions import VerifiedPartitions
from stratalog.server.transactions import CoordinatorNotAvailableError, InvalidTxnStateError

T0 = 1_700_000_000_000


def batch(producer_id: int, epoch: int, *, transactional: bool = True,
          sequence: int = 0) -> bytes:
    return build_batch([(T0, b"k", b"v", ())], producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=sequence,
                       is_transactional=transactional)


async def turns_until(condition: object) -> None:
    """Let the loop run the tasks just made until ``condition()`` holds (a few turns)."""
    for _ in range(100):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


class Coordinator:
    """transactional id -> (producer id, epoch, partitions of its Ongoing transaction); each
    question counted, and held until ``release`` is set (a slow coordinator)."""

    def __init__(self) -> None:
        self.ongoing: dict[str, tuple[int, int, set[tuple[str, int]]]] = {}
        self.questions = 0
        self.release = asyncio.Event()
        self.release.set()
        self.asked = asyncio.Event()

    async def ask(self, transactional_id: str, producer_id: int, producer_epoch: int,
                  topic: str, partition: int) -> None:
        self.questions += 1
        self.asked.set()
        await self.release.wait()
        found = self.ongoing.get(transactional_id)
        if found is None or found[0] != producer_id or (topic, partition) not in found[2]:
            raise InvalidTxnStateError(f"{topic}-{partition} is in no transaction of"
                                       f" {transactional_id!r}")
        if found[1] != producer_epoch:
            raise InvalidProducerEpochError("fenced", producer_id=producer_id)


def test_the_transactional_producer_of_a_request() -> None:
    assert transactional_producer(batch(7, 2)) == (7, 2)
    assert transactional_producer(batch(7, 2) + batch(7, 2, sequence=1)) == (7, 2)
    assert transactional_producer(batch(7, 2, transactional=False)) is None  # idempotent
    assert transactional_producer(build_batch([(T0, None, b"v", ())])) is None  # plain
    # Two producers in one request, or bytes that are no batch: left to the append's
    # validation, which refuses them.
    assert transactional_producer(batch(7, 2) + batch(8, 0)) is None
    assert transactional_producer(b"\x00" * 70) is None


async def test_a_producer_not_told_of_is_verified_and_appends() -> None:
    coordinator = Coordinator()
    coordinator.ongoing["tx"] = (7, 1, {("t", 0)})
    verified = VerifiedPartitions()
    verifier = AppendVerifier(verified, coordinator.ask)
    await verifier.verify_before_append("t", 0, "tx", batch(7, 1))
    verified.check("t", 0, 7, 1)  # the check under the log's lock now lets it through
    await verifier.verify_before_append("t", 0, "tx", batch(7, 1, sequence=1))
    assert coordinator.questions == 1  # known now: not asked again
    assert verifier.in_flight == 0 and verified.guards == 0


async def test_nothing_is_asked_without_a_question_to_ask() -> None:
    coordinator = Coordinator()
    verified = VerifiedPartitions()
    verifier = AppendVerifier(verified, coordinator.ask)
    verified.allow("t", 0, 7, 2)
    await verifier.verify_before_append("t", 0, "tx", batch(7, 1))  # fenced: the lock's check
    await verifier.verify_before_append("t", 0, "tx", batch(8, 0, transactional=False))
    await verifier.verify_before_append("t", 0, None, batch(9, 0))  # no transactional id
    assert coordinator.questions == 0


async def test_a_late_produce_after_its_transaction_ended_is_refused() -> None:
    coordinator = Coordinator()
    coordinator.ongoing["tx"] = (7, 1, {("t", 0)})
    verified = VerifiedPartitions()
    verifier = AppendVerifier(verified, coordinator.ask)
    await verifier.verify_before_append("t", 0, "tx", batch(7, 1))
    # The transaction commits: the coordinator's state moves on, the marker ends the permission.
    del coordinator.ongoing["tx"]
    verified.end("t", 0, 7)
    with pytest.raises(InvalidTxnStateError, match="no transaction"):
        await verifier.verify_before_append("t", 0, "tx", batch(7, 1))
    with pytest.raises(InvalidTxnStateError):
        verified.check("t", 0, 7, 1)
    assert verified.guards == 0


async def test_a_fenced_producer_is_told_so() -> None:
    coordinator = Coordinator()
    coordinator.ongoing["tx"] = (7, 2, {("t", 0)})
    verifier = AppendVerifier(VerifiedPartitions(), coordinator.ask)
    with pytest.raises(InvalidProducerEpochError):
        await verifier.verify_before_append("t", 0, "tx", batch(7, 1))


async def test_a_yes_crossing_the_marker_is_refused() -> None:
    coordinator = Coordinator()
    coordinator.ongoing["tx"] = (7, 1, {("t", 0)})
    coordinator.release.clear()
    verified = VerifiedPartitions()
    verifier = AppendVerifier(verified, coordinator.ask)
    produce = asyncio.ensure_future(verifier.verify_before_append("t", 0, "tx", batch(7, 1)))
    await coordinator.asked.wait()
    verified.end("t", 0, 7)  # the marker reaches the partition while the yes is on its way
    coordinator.release.set()
    with pytest.raises(InvalidTxnStateError, match="ended here"):
        await produce
    with pytest.raises(InvalidTxnStateError):
        verified.check("t", 0, 7, 1)


async def test_concurrent_produces_share_one_question() -> None:
    coordinator = Coordinator()
    coordinator.ongoing["tx"] = (7, 1, {("t", 0), ("t", 1)})
    coordinator.release.clear()
    verified = VerifiedPartitions()
    verifier = AppendVerifier(verified, coordinator.ask)
    same = [asyncio.ensure_future(verifier.verify_before_append(
        "t", 0, "tx", batch(7, 1, sequence=n))) for n in range(5)]
    other = asyncio.ensure_future(verifier.verify_before_append("t", 1, "tx", batch(7, 1)))
    await coordinator.asked.wait()
    await turns_until(lambda: verifier.in_flight == 2)  # each question leaves on its turn
    assert verifier.in_flight == 2  # one per partition, not one per Produce
    coordinator.release.set()
    await asyncio.gather(*same, other)
    assert coordinator.questions == 2 and verifier.asked == 2
    verified.check("t", 0, 7, 1)
    verified.check("t", 1, 7, 1)


async def test_a_cancelled_produce_does_not_fail_the_others() -> None:
    coordinator = Coordinator()
    coordinator.ongoing["tx"] = (7, 1, {("t", 0)})
    coordinator.release.clear()
    verifier = AppendVerifier(VerifiedPartitions(), coordinator.ask)
    first = asyncio.ensure_future(verifier.verify_before_append("t", 0, "tx", batch(7, 1)))
    second = asyncio.ensure_future(verifier.verify_before_append("t", 0, "tx", batch(7, 1)))
    await coordinator.asked.wait()
    first.cancel()
    coordinator.release.set()
    await second
    assert first.cancelled()


async def test_questions_are_bounded() -> None:
    coordinator = Coordinator()
    coordinator.ongoing["tx"] = (7, 1, {("t", p) for p in range(3)})
    coordinator.release.clear()
    verifier = AppendVerifier(VerifiedPartitions(), coordinator.ask, in_flight_max=2)
    waiting = [asyncio.ensure_future(verifier.verify_before_append("t", p, "tx", batch(7, 1)))
               for p in range(2)]
    await turns_until(lambda: verifier.in_flight == 2)
    with pytest.raises(TxnVerificationUnavailableError, match="2 questions") as caught:
        await verifier.verify_before_append("t", 2, "tx", batch(7, 1))
    # Answered as Kafka answers a verification that could not be made: retriable.
    assert isinstance(caught.value, NotEnoughReplicasError)
    coordinator.release.set()
    await asyncio.gather(*waiting)
    await verifier.verify_before_append("t", 2, "tx", batch(7, 1))  # room again


async def test_a_silent_coordinator_times_out_retriably() -> None:
    coordinator = Coordinator()
    coordinator.release.clear()  # never answers
    verified = VerifiedPartitions()
    verifier = AppendVerifier(verified, coordinator.ask, timeout_s=0.05)
    with pytest.raises(TxnVerificationUnavailableError, match="did not answer"):
        await verifier.verify_before_append("t", 0, "tx", batch(7, 1))
    assert verifier.in_flight == 0 and verified.guards == 0


async def test_a_coordinator_that_cannot_say_is_retriable() -> None:
    async def moving(*_: object) -> None:
        raise CoordinatorNotAvailableError("__cluster_transaction_state-3 has no leader now")

    verifier = AppendVerifier(VerifiedPartitions(), moving)
    with pytest.raises(TxnVerificationUnavailableError, match="has no leader now"):
        await verifier.verify_before_append("t", 0, "tx", batch(7, 1))


async def test_closing_cancels_the_questions_under_way() -> None:
    coordinator = Coordinator()
    coordinator.release.clear()  # never answers
    verified = VerifiedPartitions()
    verifier = AppendVerifier(verified, coordinator.ask)
    produce = asyncio.ensure_future(verifier.verify_before_append("t", 0, "tx", batch(7, 1)))
    await coordinator.asked.wait()
    await verifier.close()
    with pytest.raises(TxnVerificationUnavailableError, match="stopping"):
        await produce  # retriable: the client tries another server
    assert verifier.in_flight == 0 and verified.guards == 0
    with pytest.raises(TxnVerificationUnavailableError, match="stopping"):
        await verifier.verify_before_append("t", 1, "tx", batch(7, 1))


async def test_a_question_whose_produces_all_went_away_still_ends() -> None:
    coordinator = Coordinator()  # no transaction: the answer is no
    coordinator.release.clear()
    verified = VerifiedPartitions()
    verifier = AppendVerifier(verified, coordinator.ask)
    produce = asyncio.ensure_future(verifier.verify_before_append("t", 0, "tx", batch(7, 1)))
    await coordinator.asked.wait()
    produce.cancel()  # its client hung up
    coordinator.release.set()
    await turns_until(lambda: verifier.in_flight == 0)
    assert verified.guards == 0 and len(verified) == 0


def test_no_answer_is_not_enough_replicas_in_both_front_ends() -> None:
    """Kafka answers a Produce whose verification failed retriably NOT_ENOUGH_REPLICAS (older
    clients retry that, not the coordinator's errors): the gRPC status and the Kafka code."""
    import grpc

    from stratalog.server.kafka.error_codes import code_of
    from stratalog.server.rpc import status

    error = TxnVerificationUnavailableError("t", 0, "the coordinator is loading")
    assert "t-0" in str(error) and "the coordinator is loading" in str(error)
    assert status.classify(error) == status.ErrorMapping(grpc.StatusCode.UNAVAILABLE,
                                                         "NOT_ENOUGH_REPLICAS")
    assert code_of(error) == 19  # Kafka's NOT_ENOUGH_REPLICAS
