"""The idempotent producer's per-partition sequence bookkeeping (stratalog.client.sequences)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from stratalog.client.sequences import (
    NO_PRODUCER,
    SEQUENCE_MAX,
    PartitionSequences,
    increment_sequence,
)
from stratalog.client.types import ProducerIdAndEpoch

P1 = ProducerIdAndEpoch(7, 0)
P2 = ProducerIdAndEpoch(8, 0)


@dataclass(eq=False)
class FakeBatch:
    count: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1


def test_increment_wraps_past_int32_max_to_zero_as_kafka() -> None:
    # DefaultRecordBatch.incrementSequence: 2**31 - 1 is followed by 0.
    assert increment_sequence(0, 5) == 5
    assert increment_sequence(SEQUENCE_MAX - 1, 1) == SEQUENCE_MAX
    assert increment_sequence(SEQUENCE_MAX, 1) == 0
    assert increment_sequence(SEQUENCE_MAX - 2, 5) == 2
    assert increment_sequence(SEQUENCE_MAX, SEQUENCE_MAX + 1) == SEQUENCE_MAX


def test_batches_get_consecutive_base_sequences_in_drain_order() -> None:
    sequences = PartitionSequences()
    assert sequences.producer == NO_PRODUCER and sequences.head() is None
    batches = [FakeBatch(3), FakeBatch(2), FakeBatch(4)]
    assert [sequences.stamp(b, P1) for b in batches] == [0, 3, 5]
    assert [(b.producer_id, b.producer_epoch) for b in batches] == [(7, 0)] * 3
    assert sequences.next_sequence == 9
    assert sequences.is_head(batches[0]) and not sequences.is_head(batches[1])
    sequences.check()
    sequences.resolve(batches[0])
    assert sequences.is_head(batches[1])
    sequences.resolve(batches[0])  # resolving twice is harmless
    sequences.check()


def test_a_batch_after_the_wrap_starts_at_zero() -> None:
    sequences = PartitionSequences()
    sequences.producer = P1
    sequences.next_sequence = SEQUENCE_MAX - 1
    first, second = FakeBatch(3), FakeBatch(1)
    assert sequences.stamp(first, P1) == SEQUENCE_MAX - 1  # holds MAX-1, MAX, 0
    assert sequences.stamp(second, P1) == 1
    sequences.check()


def test_a_new_producer_waits_for_the_old_ones_batches_then_starts_at_zero() -> None:
    sequences = PartitionSequences()
    old = FakeBatch(4)
    sequences.stamp(old, P1)
    assert not sequences.can_stamp(P2)
    with pytest.raises(ValueError, match="unacknowledged"):
        sequences.stamp(FakeBatch(1), P2)
    sequences.resolve(old)
    assert sequences.can_stamp(P2)
    new = FakeBatch(2)
    assert sequences.stamp(new, P2) == 0
    assert (new.producer_id, sequences.next_sequence) == (8, 2)
    sequences.check()


def test_restart_restamps_the_unacked_batches_from_zero_in_order() -> None:
    sequences = PartitionSequences()
    batches = [FakeBatch(3), FakeBatch(2), FakeBatch(4)]
    for batch in batches:
        sequences.stamp(batch, P1)
    sequences.resolve(batches[0])  # acknowledged: keeps its stamp
    assert sequences.restart(P2) == batches[1:]
    assert [(b.producer_id, b.base_sequence) for b in batches] == [(7, 0), (8, 0), (8, 2)]
    assert sequences.next_sequence == 6 and sequences.producer == P2
    sequences.check()
    with pytest.raises(ValueError, match="new producer id"):
        sequences.restart(P2)


def test_an_empty_batch_cannot_be_stamped() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        PartitionSequences().stamp(FakeBatch(0), P1)


@pytest.mark.parametrize("seed", range(5))
def test_random_operations_keep_the_invariants_and_match_a_model(seed: int) -> None:
    # A model: the records of a partition numbered from 0 per producer; a stamped batch
    # covers count consecutive numbers (mod 2**31), resolutions in any order, restarts at 0.
    rng = random.Random(seed)
    sequences = PartitionSequences()
    sequences.next_sequence = rng.choice([0, SEQUENCE_MAX - 20])
    sequences.producer = P1
    producer_ids = iter(range(100, 10_000))
    producer = P1
    unacked: list[FakeBatch] = []
    expected_next = sequences.next_sequence
    for _ in range(500):
        operation = rng.random()
        if operation < 0.5 and sequences.can_stamp(producer):
            batch = FakeBatch(rng.randrange(1, 10))
            if sequences.producer != producer:
                expected_next = 0
            assert sequences.stamp(batch, producer) == expected_next
            expected_next = (expected_next + batch.count) % (SEQUENCE_MAX + 1)
            unacked.append(batch)
        elif operation < 0.8 and unacked:
            # Acknowledged in order, or failed anywhere.
            batch = unacked[0] if rng.random() < 0.7 else rng.choice(unacked)
            unacked.remove(batch)
            sequences.resolve(batch)
        elif operation < 0.9:
            producer = ProducerIdAndEpoch(next(producer_ids), 0)
        elif sequences.producer != producer:
            sequences.restart(producer)
            expected_next = 0
            for batch in unacked:
                assert batch.base_sequence == expected_next
                expected_next += batch.count
        sequences.check()
        assert list(sequences.unacked) == unacked
        assert sequences.next_sequence == expected_next
