"""TransactionMetadata: Kafka's state machine and epoch rules (TransactionMetadataTest)."""

from __future__ import annotations

import itertools

import pytest

from stratalog.server.transactions.transaction_log import (
    decode_transaction_value,
    encode_transaction_value,
)
from stratalog.server.transactions.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    PRODUCER_EPOCH_MAX,
    VALID_PREVIOUS_STATES,
    TransactionMetadata,
    TransactionState,
)

S = TransactionState


def new(epoch: int = 0) -> TransactionMetadata:
    metadata = TransactionMetadata.new("t", 42, 60000, now_ms=100)
    if epoch >= 0:
        metadata = metadata.prepare_increment_epoch(60000, 100)
    while metadata.producer_epoch < epoch:
        metadata = metadata.prepare_increment_epoch(60000, 100)
    return metadata


def test_kafka_state_ids_and_names() -> None:
    assert [(s.value, s.kafka_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]


def test_a_new_id_has_no_epoch_until_its_first_init() -> None:
    metadata = TransactionMetadata.new("t", 42, 60000, now_ms=100)
    assert (metadata.state, metadata.producer_epoch) == (S.EMPTY, NO_PRODUCER_EPOCH)
    assert metadata.prepare_increment_epoch(30000, 200).producer_epoch == 0


def test_a_commit_cycle() -> None:
    empty = new()
    ongoing = empty.prepare_add_partitions(frozenset({("a", 0)}), 200)
    assert (ongoing.state, ongoing.txn_start_timestamp_ms) == (S.ONGOING, 200)
    more = ongoing.prepare_add_partitions(frozenset({("b", 1)}), 300)
    assert more.partitions == {("a", 0), ("b", 1)}
    assert more.txn_start_timestamp_ms == 200  # a transaction starts when it begins
    prepared = more.prepare_end(True, 400)
    assert (prepared.state, prepared.partitions) == (S.PREPARE_COMMIT, more.partitions)
    done = prepared.prepare_complete(500)
    assert (done.state, done.partitions, done.txn_last_update_timestamp_ms) == (
        S.COMPLETE_COMMIT, frozenset(), 500)
    # The next transaction starts afresh.
    again = done.prepare_add_partitions(frozenset({("c", 0)}), 600)
    assert (again.partitions, again.txn_start_timestamp_ms) == ({("c", 0)}, 600)


def test_fence_bumps_the_epoch_and_leads_to_an_abort() -> None:
    ongoing = new(3).prepare_add_partitions(frozenset({("a", 0)}), 200)
    fenced = ongoing.prepare_fence_producer_epoch(300)
    assert (fenced.state, fenced.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 4)
    aborting = fenced.prepare_end(False, 300)
    assert (aborting.state, aborting.producer_epoch) == (S.PREPARE_ABORT, 4)
    with pytest.raises(AssertionError):
        fenced.prepare_end(True, 300)  # a fence only aborts


def test_epoch_exhaustion_is_kafkas_short_max_minus_one() -> None:
    assert not new(PRODUCER_EPOCH_MAX - 2).is_producer_epoch_exhausted
    exhausted = new(PRODUCER_EPOCH_MAX - 1)
    assert exhausted.is_producer_epoch_exhausted
    with pytest.raises(AssertionError):
        exhausted.prepare_increment_epoch(60000, 1)
    rotated = exhausted.prepare_producer_id_rotation(43, 60000, 1)
    assert (rotated.producer_id, rotated.producer_epoch, rotated.state) == (43, 0, S.EMPTY)


def test_timed_out_only_when_ongoing_past_its_timeout() -> None:
    ongoing = new().prepare_add_partitions(frozenset({("a", 0)}), 1000)
    assert not ongoing.is_timed_out(1000 + 60000)
    assert ongoing.is_timed_out(1000 + 60001)
    assert not new().is_timed_out(10**12)


def test_last_update_never_moves_back() -> None:
    ongoing = new().prepare_add_partitions(frozenset({("a", 0)}), 1000)
    assert ongoing.prepare_end(True, 500).txn_last_update_timestamp_ms == 1000


_REACH = {
    S.EMPTY: lambda: new(),
    S.ONGOING: lambda: new().prepare_add_partitions(frozenset({("a", 0)}), 1),
    S.PREPARE_COMMIT: lambda: _REACH[S.ONGOING]().prepare_end(True, 1),
    S.PREPARE_ABORT: lambda: _REACH[S.ONGOING]().prepare_end(False, 1),
    S.COMPLETE_COMMIT: lambda: _REACH[S.PREPARE_COMMIT]().prepare_complete(1),
    S.COMPLETE_ABORT: lambda: _REACH[S.PREPARE_ABORT]().prepare_complete(1),
    S.DEAD: lambda: new().prepare_dead(1),
    S.PREPARE_EPOCH_FENCE: lambda: _REACH[S.ONGOING]().prepare_fence_producer_epoch(1),
}
_ENTER = {
    S.EMPTY: lambda m: m._transit(S.EMPTY, 2),
    S.ONGOING: lambda m: m.prepare_add_partitions(frozenset({("b", 0)}), 2),
    S.PREPARE_COMMIT: lambda m: m._transit(S.PREPARE_COMMIT, 2),
    S.PREPARE_ABORT: lambda m: m._transit(S.PREPARE_ABORT, 2),
    S.COMPLETE_COMMIT: lambda m: m._transit(S.COMPLETE_COMMIT, 2),
    S.COMPLETE_ABORT: lambda m: m._transit(S.COMPLETE_ABORT, 2),
    S.DEAD: lambda m: m.prepare_dead(2),
    S.PREPARE_EPOCH_FENCE: lambda m: m._transit(S.PREPARE_EPOCH_FENCE, 2),
}


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)))
def test_every_transition_is_allowed_exactly_when_kafka_allows_it(source, target) -> None:
    metadata = _REACH[source]()
    assert metadata.state is source
    if source in VALID_PREVIOUS_STATES[target]:
        assert _ENTER[target](metadata).state is target
    else:
        with pytest.raises(AssertionError, match="no transition"):
            _ENTER[target](metadata)


def test_an_expected_bump_remembers_the_epoch_it_replaced_in_memory_only() -> None:
    bumped = new(3).prepare_increment_epoch(60000, 200, expected=True)
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (4, 3)
    repeated = bumped.prepare_repeated_bump(45000, 300)
    assert (repeated.producer_epoch, repeated.last_producer_epoch) == (4, 3)
    assert (repeated.state, repeated.txn_timeout_ms) == (S.EMPTY, 45000)
    # Transitions keep it, a plain bump and a fence forget it.
    ongoing = repeated.prepare_add_partitions(frozenset({("a", 0)}), 400)
    assert ongoing.last_producer_epoch == 3
    assert ongoing.prepare_fence_producer_epoch(500).last_producer_epoch == NO_PRODUCER_EPOCH
    assert repeated.prepare_increment_epoch(60000, 600).last_producer_epoch == NO_PRODUCER_EPOCH
    # Not logged (Kafka's TransactionLogValue has no field for it): the log gives -1.
    decoded = decode_transaction_value("t", encode_transaction_value(bumped))
    assert decoded == bumped and decoded.last_producer_epoch == NO_PRODUCER_EPOCH
