"""A leader's produce permissions (server/transaction_service/verified_partitions.py): a
transactional batch is accepted only from a producer its coordinator allowed at that epoch, and
never after the permission ended (the marker) or the leadership moved."""

from __future__ import annotations

import random

import pytest

from stratalog.server.storage.errors import InvalidProducerEpochError
from stratalog.server.transaction_service.verified_partitions import VerifiedPartitions
from stratalog.server.transactions import CoordinatorNotAvailableError, InvalidTxnStateError


def test_only_an_allowed_producer_at_its_epoch_appends() -> None:
    verified = VerifiedPartitions()
    with pytest.raises(InvalidTxnStateError, match="AddPartitionsToTxn first"):
        verified.check("t", 0, 7, 1)
    verified.allow("t", 0, 7, 1)
    verified.check("t", 0, 7, 1)
    with pytest.raises(InvalidTxnStateError):
        verified.check("t", 1, 7, 1)  # another partition
    with pytest.raises(InvalidProducerEpochError, match="fenced"):
        verified.check("t", 0, 7, 0)  # an older instance
    with pytest.raises(InvalidTxnStateError):
        verified.check("t", 0, 7, 2)  # an epoch the coordinator never allowed


def test_a_late_produce_after_the_marker_is_refused() -> None:
    verified = VerifiedPartitions()
    verified.allow("t", 0, 7, 1)
    verified.end("t", 0, 7)  # the transaction's marker is written next
    with pytest.raises(InvalidTxnStateError, match="transaction ended"):
        verified.check("t", 0, 7, 1)
    verified.allow("t", 0, 7, 1)  # the producer's next transaction
    verified.check("t", 0, 7, 1)


def test_leadership_lost_drops_the_partitions_permissions() -> None:
    verified = VerifiedPartitions()
    verified.allow("t", 0, 7, 1)
    verified.allow("t", 0, 8, 1)
    verified.allow("t", 1, 7, 1)
    assert verified.forget_partition("t", 0) == 2
    assert len(verified) == 1
    with pytest.raises(InvalidTxnStateError):
        verified.check("t", 0, 8, 1)
    verified.check("t", 1, 7, 1)


def test_entries_are_bounded() -> None:
    verified = VerifiedPartitions(entries_max=2)
    verified.allow("t", 0, 1, 0)
    verified.allow("t", 0, 2, 0)
    verified.allow("t", 0, 2, 1)  # a newer epoch replaces: no new entry
    with pytest.raises(CoordinatorNotAvailableError, match="2 transactional"):
        verified.allow("t", 1, 3, 0)
    verified.end("t", 0, 1)
    verified.allow("t", 1, 3, 0)


def test_random_operations_match_a_plain_map() -> None:
    rng = random.Random(29)
    verified = VerifiedPartitions(entries_max=50)
    model: dict[tuple[str, int, int], int] = {}
    for _ in range(5_000):
        topic, partition, producer = rng.choice("ab"), rng.randrange(3), rng.randrange(30)
        operation = rng.random()
        if operation < 0.4:
            epoch = rng.randrange(3)
            if (topic, partition, producer) in model or len(model) < 50:
                verified.allow(topic, partition, producer, epoch)
                model[(topic, partition, producer)] = epoch
            else:
                with pytest.raises(CoordinatorNotAvailableError):
                    verified.allow(topic, partition, producer, epoch)
        elif operation < 0.7:
            verified.end(topic, partition, producer)
            model.pop((topic, partition, producer), None)
        elif operation < 0.75:
            verified.forget_partition(topic, partition)
            for key in [k for k in model if k[:2] == (topic, partition)]:
                del model[key]
        else:
            epoch = rng.randrange(3)
            allowed = model.get((topic, partition, producer))
            if allowed == epoch:
                verified.check(topic, partition, producer, epoch)
            else:
                with pytest.raises((InvalidTxnStateError, InvalidProducerEpochError)):
                    verified.check(topic, partition, producer, epoch)
        assert len(verified) == len(model)


def test_holds_says_whether_a_question_could_change_the_check() -> None:
    verified = VerifiedPartitions()
    assert not verified.holds("t", 0, 7, 1)  # not told: ask
    verified.allow("t", 0, 7, 2)
    assert verified.holds("t", 0, 7, 2)  # allowed
    assert verified.holds("t", 0, 7, 1)  # fenced: the check refuses, asking cannot help
    assert not verified.holds("t", 0, 7, 3)  # a newer epoch than told: ask


def test_a_verified_yes_is_recorded_through_its_guard() -> None:
    verified = VerifiedPartitions()
    guard = verified.begin("t", 0, 7, 1)
    assert verified.guards == 1
    assert verified.allow_verified(guard)
    verified.check("t", 0, 7, 1)
    assert verified.guards == 0
    assert not verified.allow_verified(guard)  # once


def test_a_yes_that_crossed_the_marker_is_void() -> None:
    """The coordinator said yes, then decided and wrote the marker (end) before the yes came
    back: recording it would let the late batch in after the marker."""
    verified = VerifiedPartitions()
    guard = verified.begin("t", 0, 7, 1)
    verified.end("t", 0, 7)
    assert not verified.allow_verified(guard)
    with pytest.raises(InvalidTxnStateError):
        verified.check("t", 0, 7, 1)
    assert verified.guards == 0 and len(verified) == 0


def test_a_yes_across_a_leadership_change_or_a_newer_question_is_void() -> None:
    verified = VerifiedPartitions()
    lost = verified.begin("t", 0, 7, 1)
    other = verified.begin("t", 1, 7, 1)
    verified.forget_partition("t", 0)
    assert not verified.allow_verified(lost)
    assert verified.allow_verified(other)  # another partition: untouched
    older = verified.begin("t", 2, 8, 1)
    newer = verified.begin("t", 2, 8, 2)
    assert not verified.allow_verified(older)
    verified.discard(older)  # not the partition's guard any more: nothing happens
    assert verified.allow_verified(newer)
    verified.check("t", 2, 8, 2)
    assert verified.guards == 0


def test_a_verified_yes_obeys_the_entries_bound() -> None:
    verified = VerifiedPartitions(entries_max=1)
    verified.allow("t", 0, 1, 0)
    guard = verified.begin("t", 0, 2, 0)
    with pytest.raises(CoordinatorNotAvailableError):
        verified.allow_verified(guard)
    assert verified.guards == 0
