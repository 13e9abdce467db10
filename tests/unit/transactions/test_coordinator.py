"""TransactionCoordinator: InitProducerId, AddPartitionsToTxn, EndTxn, timeouts, expiry, restart
replay and bad input, modelled on Kafka's TransactionCoordinatorTest. ``write_markers`` is a
recording function standing for the storage call that appends a control batch."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stratalog.server.storage.errors import (
    InvalidTopicError,
    LogClosedError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.transactions import (
    COORDINATOR_EPOCH,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidProducerIdMappingError,
    InvalidTransactionalIdError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    ProducerIdAndEpoch,
    TransactionalIdNotFoundError,
    TransactionConfig,
    TransactionCoordinator,
    TransactionError,
    TransactionMetadata,
    TransactionsNotSupportedError,
    TransactionState,
)
from stratalog.server.transactions.producer_ids import LOCAL_ID_BITS
from stratalog.server.transactions.transaction_log import decode_key, decode_transaction_value

S = TransactionState
T0 = 1_700_000_000_000


class Crash(BaseException):
    """Stands for a kill -9: nothing catches it."""


@dataclass
class Markers:
    """A recording write_markers; ``fail`` maps a partition to the exception its next writes
    raise (removed with ``heal``)."""

    calls: list[tuple[str, int, int, int, int, bool]] = field(default_factory=list)
    fail: dict[tuple[str, int], BaseException] = field(default_factory=dict)

    def __call__(self, topic, partition, producer_id, producer_epoch, coordinator_epoch, commit):
        error = self.fail.get((topic, partition))
        if error is not None:
            raise error
        self.calls.append((topic, partition, producer_id, producer_epoch, coordinator_epoch,
                           commit))

    def heal(self) -> None:
        self.fail.clear()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def markers() -> Markers:
    return Markers()


@pytest.fixture
def coordinator(tmp_path: Path, markers: Markers, clock: Clock):
    coordinator = TransactionCoordinator.open([tmp_path], markers, time_ms=clock)
    yield coordinator
    coordinator.close()


def logged_states(coordinator: TransactionCoordinator, transactional_id: str) -> list[str]:
    """The states the log holds for an id, in order (None for a tombstone)."""
    log = coordinator.state_manager.partition_log
    states = []
    offset = log.log_start_offset
    from stratalog.records import iter_batches

    while offset < log.log_end_offset:
        fetched = log.fetch(offset, 1 << 20)
        for _, records in iter_batches(fetched.data):
            for record in records:
                key = decode_key(record.key)
                if getattr(key, "transactional_id", None) != transactional_id:
                    continue
                states.append(None if record.value is None else
                              decode_transaction_value(transactional_id, record.value)
                              .state.kafka_name)
        offset = fetched.next_offset
    return states


def log_end(coordinator: TransactionCoordinator) -> int:
    return coordinator.state_manager.partition_log.log_end_offset


# ---------------------------------------------------------------- InitProducerId


def test_init_without_transactional_id_gives_new_producer_ids_with_epoch_0(coordinator) -> None:
    first = coordinator.init_producer_id()
    second = coordinator.init_producer_id(None)
    assert first.producer_epoch == second.producer_epoch == 0
    assert first.producer_id != second.producer_id
    assert coordinator.state_manager.transactions() == []


def test_init_with_transactional_id_keeps_the_producer_id_and_bumps_the_epoch(
    coordinator,
) -> None:
    first = coordinator.init_producer_id("t", 30000)
    second = coordinator.init_producer_id("t", 30000)
    third = coordinator.init_producer_id("t", 45000)
    assert (first.producer_epoch, second.producer_epoch, third.producer_epoch) == (0, 1, 2)
    assert first.producer_id == second.producer_id == third.producer_id
    metadata = coordinator.describe_transaction("t")
    assert (metadata.state, metadata.txn_timeout_ms) == (S.EMPTY, 45000)
    assert logged_states(coordinator, "t") == ["Empty", "Empty", "Empty"]
    assert coordinator.init_producer_id("other").producer_id != first.producer_id


def test_init_fences_the_previous_instance(coordinator) -> None:
    old = coordinator.init_producer_id("t")
    new = coordinator.init_producer_id("t")
    end = log_end(coordinator)
    with pytest.raises(ProducerFencedError, match="fenced"):
        coordinator.add_partitions_to_txn("t", old.producer_id, old.producer_epoch, [("a", 0)])
    with pytest.raises(ProducerFencedError):
        coordinator.end_txn("t", old.producer_id, old.producer_epoch, commit=True)
    assert log_end(coordinator) == end  # nothing written
    coordinator.add_partitions_to_txn("t", new.producer_id, new.producer_epoch, [("a", 0)])


def test_init_aborts_an_open_transaction_first(coordinator, markers) -> None:
    old = coordinator.init_producer_id("t")
    coordinator.add_partitions_to_txn("t", *old, [("a", 0), ("b", 2)])
    new = coordinator.init_producer_id("t")
    fenced_epoch = old.producer_epoch + 1
    assert markers.calls == [
        ("a", 0, old.producer_id, fenced_epoch, COORDINATOR_EPOCH, False),
        ("b", 2, old.producer_id, fenced_epoch, COORDINATOR_EPOCH, False),
    ]
    # Kafka's client retries after CONCURRENT_TRANSACTIONS and gets the second bump; here the
    # abort completes inside the call.
    assert new == (old.producer_id, old.producer_epoch + 2)
    assert logged_states(coordinator, "t") == [
        "Empty", "Ongoing", "PrepareAbort", "CompleteAbort", "Empty"]
    with pytest.raises(ProducerFencedError):
        coordinator.end_txn("t", *old, commit=True)


def test_an_expected_producer_bumps_its_own_epoch_and_a_stale_one_is_fenced(
    coordinator, markers, tmp_path, clock,
) -> None:
    """KIP-360: a producer that goes on after an abortable error names its id and epoch."""
    first = coordinator.init_producer_id("t")
    bumped = coordinator.init_producer_id("t", expected=first)
    assert bumped == (first.producer_id, first.producer_epoch + 1)
    # Its retry (the answer lost) gets the same epoch again, not a second bump.
    assert coordinator.init_producer_id("t", expected=first) == bumped
    end = log_end(coordinator)
    for stale in (ProducerIdAndEpoch(first.producer_id + 1, bumped.producer_epoch),
                  ProducerIdAndEpoch(first.producer_id, bumped.producer_epoch + 5)):
        with pytest.raises(ProducerFencedError, match="another producer instance took over"):
            coordinator.init_producer_id("t", expected=stale)
    assert log_end(coordinator) == end  # nothing written
    # A new instance (no expected epoch) takes over: both earlier epochs are fenced now.
    taken = coordinator.init_producer_id("t")
    for stale in (first, bumped):
        with pytest.raises(ProducerFencedError):
            coordinator.init_producer_id("t", expected=stale)
    # With a transaction open, the check comes before the fence that aborts it.
    coordinator.add_partitions_to_txn("t", *taken, [("a", 0)])
    with pytest.raises(ProducerFencedError):
        coordinator.init_producer_id("t", expected=bumped)
    assert markers.calls == []
    again = coordinator.init_producer_id("t", expected=taken)
    assert again == (first.producer_id, taken.producer_epoch + 2)
    assert markers.calls == [("a", 0, first.producer_id, taken.producer_epoch + 1, 0, False)]
    # The abort's fence forgets the expected epoch: its repeat is fenced, as in Kafka.
    with pytest.raises(ProducerFencedError):
        coordinator.init_producer_id("t", expected=taken)
    # An idempotent producer's expected id is ignored, as Kafka does: a new id, epoch 0.
    fresh = coordinator.init_producer_id(None, expected=again)
    assert fresh.producer_epoch == 0 and fresh.producer_id != again.producer_id
    # The epoch a bump replaced is kept in memory only (Kafka logs it neither): a restart
    # forgets it, and the repeat is fenced then.
    last = coordinator.init_producer_id("t", expected=again)
    coordinator.close()
    reopened = TransactionCoordinator.open([tmp_path], markers, time_ms=clock)
    try:
        assert reopened.describe_transaction("t").producer_epoch == last.producer_epoch
        with pytest.raises(ProducerFencedError):
            reopened.init_producer_id("t", expected=again)
    finally:
        reopened.close()


def test_a_cluster_servers_own_coordinator_gives_node_ids_and_refuses_transactional_ids(
    tmp_path, markers, clock,
) -> None:
    # In a cluster, transactional ids are the state partitions' coordinators'
    # (test_partition_coordinator.py); this server's own one hands out producer ids.
    coordinator = TransactionCoordinator.open([tmp_path], markers, time_ms=clock,
                                              cluster_node_id=3)
    try:
        ids = [coordinator.init_producer_id().producer_id for _ in range(2)]
        assert [i >> LOCAL_ID_BITS for i in ids] == [3, 3] and ids[0] != ids[1]
        refusals = [
            lambda: coordinator.init_producer_id("t"),
            lambda: coordinator.add_partitions_to_txn("t", ids[0], 0, [("a", 0)]),
            lambda: coordinator.end_txn("t", ids[0], 0, commit=True),
            lambda: coordinator.verify_transactional_append("a", 0, ids[0], 0),
        ]
        for refusal in refusals:
            with pytest.raises(TransactionsNotSupportedError,
                               match="hands out producer ids only"):
                refusal()
        assert coordinator.state_manager.transactions() == []
    finally:
        coordinator.close()


def _install(coordinator, metadata: TransactionMetadata) -> None:
    coordinator.state_manager.append_transaction(metadata)


def test_epoch_exhaustion_gives_a_new_producer_id(coordinator) -> None:
    first = coordinator.init_producer_id("t")
    current = coordinator.describe_transaction("t")
    _install(coordinator, TransactionMetadata(
        "t", first.producer_id, 32765, current.txn_timeout_ms, S.EMPTY, frozenset(), -1, T0))
    assert coordinator.init_producer_id("t") == (first.producer_id, 32766)
    rotated = coordinator.init_producer_id("t")
    assert rotated.producer_id != first.producer_id
    assert rotated.producer_epoch == 0


def test_a_fence_at_the_last_epoch_then_rotates(coordinator, markers) -> None:
    first = coordinator.init_producer_id("t")
    _install(coordinator, TransactionMetadata(
        "t", first.producer_id, 32766, 60000, S.ONGOING, frozenset({("a", 0)}), T0, T0))
    rotated = coordinator.init_producer_id("t")
    assert markers.calls == [("a", 0, first.producer_id, 32767, 0, False)]
    assert rotated.producer_id != first.producer_id and rotated.producer_epoch == 0


# ---------------------------------------------------------------- AddPartitionsToTxn


def test_add_partitions_begins_and_extends_the_transaction(coordinator, clock) -> None:
    producer = coordinator.init_producer_id("t")
    clock.now += 5
    coordinator.add_partitions_to_txn("t", *producer, [("a", 0)])
    clock.now += 5
    coordinator.add_partitions_to_txn("t", *producer, [("a", 0), ("b", 1)])
    metadata = coordinator.describe_transaction("t")
    assert metadata.state is S.ONGOING
    assert metadata.partitions == {("a", 0), ("b", 1)}
    assert metadata.txn_start_timestamp_ms == T0 + 5
    end = log_end(coordinator)
    coordinator.add_partitions_to_txn("t", *producer, [("b", 1)])
    assert log_end(coordinator) == end  # already in: nothing written


# ---------------------------------------------------------------- EndTxn


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_writes_a_marker_to_every_partition_then_completes(
    coordinator, markers, commit
) -> None:
    producer = coordinator.init_producer_id("t")
    partitions = [("b", 0), ("a", 1), ("a", 0)]
    coordinator.add_partitions_to_txn("t", *producer, partitions)
    coordinator.end_txn("t", *producer, commit=commit)
    assert markers.calls == [(topic, partition, producer.producer_id, producer.producer_epoch,
                              COORDINATOR_EPOCH, commit) for topic, partition in sorted(partitions)]
    prepare, complete = ("PrepareCommit", "CompleteCommit") if commit else (
        "PrepareAbort", "CompleteAbort")
    assert logged_states(coordinator, "t") == ["Empty", "Ongoing", prepare, complete]
    metadata = coordinator.describe_transaction("t")
    assert metadata.partitions == frozenset()
    # The same producer goes on with a next transaction.
    coordinator.add_partitions_to_txn("t", *producer, [("c", 0)])
    assert coordinator.describe_transaction("t").state is S.ONGOING


def test_end_txn_retried_after_completion_succeeds_without_writing(coordinator, markers) -> None:
    producer = coordinator.init_producer_id("t")
    coordinator.add_partitions_to_txn("t", *producer, [("a", 0)])
    coordinator.end_txn("t", *producer, commit=True)
    end, calls = log_end(coordinator), len(markers.calls)
    coordinator.end_txn("t", *producer, commit=True)
    assert (log_end(coordinator), len(markers.calls)) == (end, calls)
    with pytest.raises(InvalidTxnStateError, match="other way"):
        coordinator.end_txn("t", *producer, commit=False)
    assert log_end(coordinator) == end


def test_end_txn_with_no_transaction_open_is_invalid(coordinator) -> None:
    producer = coordinator.init_producer_id("t")
    end = log_end(coordinator)
    with pytest.raises(InvalidTxnStateError, match="no transaction is open"):
        coordinator.end_txn("t", *producer, commit=True)
    assert log_end(coordinator) == end


def test_markers_that_fail_leave_the_commit_decided_and_are_retried(coordinator, markers) -> None:
    producer = coordinator.init_producer_id("t")
    coordinator.add_partitions_to_txn("t", *producer, [("a", 0), ("b", 0)])
    markers.fail[("b", 0)] = OSError("b-0 is on a broken disk")
    coordinator.end_txn("t", *producer, commit=True)  # decided: the client is told it commits
    assert coordinator.describe_transaction("t").state is S.PREPARE_COMMIT
    with pytest.raises(ConcurrentTransactionsError, match="broken disk") as raised:
        coordinator.add_partitions_to_txn("t", *producer, [("c", 0)])
    assert raised.value.retriable
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.init_producer_id("t")
    report = coordinator.run_maintenance()
    assert report.completed == 0 and "broken disk" in report.errors[0]
    markers.heal()
    report = coordinator.run_maintenance()
    assert report.completed == 1
    assert coordinator.describe_transaction("t").state is S.COMPLETE_COMMIT
    # Every attempt (EndTxn, AddPartitions, InitProducerId, two passes) wrote every partition's
    # marker again, up to the failing one: markers are idempotent.
    assert markers.calls.count(("b", 0, producer.producer_id, producer.producer_epoch, 0,
                                True)) == 1
    assert markers.calls.count(("a", 0, producer.producer_id, producer.producer_epoch, 0,
                                True)) == 5


def test_a_deleted_partition_does_not_block_the_transaction(coordinator, markers) -> None:
    producer = coordinator.init_producer_id("t")
    coordinator.add_partitions_to_txn("t", *producer, [("gone", 0), ("a", 0)])
    markers.fail[("gone", 0)] = UnknownTopicOrPartitionError("unknown topic gone")
    coordinator.end_txn("t", *producer, commit=True)
    assert coordinator.describe_transaction("t").state is S.COMPLETE_COMMIT
    assert [call[:2] for call in markers.calls] == [("a", 0)]


# ---------------------------------------------------------------- timeouts and expiry


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(
    coordinator, markers, clock
) -> None:
    producer = coordinator.init_producer_id("t", transaction_timeout_ms=1000)
    coordinator.add_partitions_to_txn("t", *producer, [("a", 0)])
    other = coordinator.init_producer_id("u", transaction_timeout_ms=5000)
    coordinator.add_partitions_to_txn("u", *other, [("b", 0)])
    clock.now += 1000
    assert coordinator.abort_timed_out_transactions() == 0  # not past it yet
    clock.now += 1
    assert coordinator.abort_timed_out_transactions() == 1
    assert markers.calls == [("a", 0, producer.producer_id, producer.producer_epoch + 1, 0, False)]
    metadata = coordinator.describe_transaction("t")
    assert (metadata.state, metadata.producer_epoch) == (S.COMPLETE_ABORT,
                                                         producer.producer_epoch + 1)
    with pytest.raises(ProducerFencedError):
        coordinator.end_txn("t", *producer, commit=True)
    assert coordinator.describe_transaction("u").state is S.ONGOING
    # The maintenance pass does the same, at its interval.
    clock.now += 5000
    report = coordinator.run_maintenance()
    assert report.aborted_timed_out == 1
    assert coordinator.describe_transaction("u").state is S.COMPLETE_ABORT


def test_unused_transactional_ids_expire(tmp_path, markers, clock) -> None:
    config = TransactionConfig(transactional_id_expiration_ms=10_000)
    coordinator = TransactionCoordinator.open([tmp_path], markers, time_ms=clock, config=config)
    idle = coordinator.init_producer_id("idle")
    busy = coordinator.init_producer_id("busy", transaction_timeout_ms=900_000)
    coordinator.add_partitions_to_txn("busy", *busy, [("a", 0)])
    clock.now += 10_000
    assert coordinator.remove_expired_transactional_ids() == 1
    assert logged_states(coordinator, "idle") == ["Empty", None]
    with pytest.raises(TransactionalIdNotFoundError, match="expired"):
        coordinator.add_partitions_to_txn("idle", *idle, [("a", 0)])
    assert coordinator.describe_transaction("busy").state is S.ONGOING  # open: never expired
    coordinator.close()
    reopened = TransactionCoordinator.open([tmp_path], markers, time_ms=clock, config=config)
    with pytest.raises(TransactionalIdNotFoundError):
        reopened.describe_transaction("idle")
    assert reopened.init_producer_id("idle").producer_id != idle.producer_id
    reopened.close()


# ---------------------------------------------------------------- transactional produce


def test_verify_accepts_a_partition_of_the_ongoing_transaction_at_the_current_epoch(
    coordinator,
) -> None:
    producer = coordinator.init_producer_id("t")
    coordinator.add_partitions_to_txn("t", *producer, [("orders", 1)])
    coordinator.verify_transactional_append("orders", 1, *producer)


def test_verify_refuses_a_partition_not_added_naming_it_and_the_producer(coordinator) -> None:
    producer = coordinator.init_producer_id("x")
    message = (rf"partition orders-1 was not added to the transaction of producer "
               rf"{producer.producer_id} \(transactional id 'x', state Empty\); call "
               rf"AddPartitionsToTxn first")
    with pytest.raises(InvalidTxnStateError, match=message):
        coordinator.verify_transactional_append("orders", 1, *producer)
    coordinator.add_partitions_to_txn("x", *producer, [("orders", 0)])
    with pytest.raises(InvalidTxnStateError, match="orders-1 was not added"):
        coordinator.verify_transactional_append("orders", 1, *producer)
    # After the commit the transaction is over: its partitions take no more batches.
    coordinator.end_txn("x", *producer, commit=True)
    with pytest.raises(InvalidTxnStateError, match="state CompleteCommit"):
        coordinator.verify_transactional_append("orders", 0, *producer)


def test_verify_refuses_a_stale_or_future_epoch_as_kafka_answers_a_produce(coordinator) -> None:
    from stratalog.server.storage.errors import InvalidProducerEpochError

    old = coordinator.init_producer_id("t")
    new = coordinator.init_producer_id("t")
    coordinator.add_partitions_to_txn("t", *new, [("a", 0)])
    with pytest.raises(InvalidProducerEpochError, match="fenced this producer"):
        coordinator.verify_transactional_append("a", 0, *old)
    with pytest.raises(InvalidProducerEpochError, match="from the future"):
        coordinator.verify_transactional_append("a", 0, new.producer_id, new.producer_epoch + 1)


def test_verify_refuses_a_producer_id_of_no_transactional_id(coordinator) -> None:
    idempotent = coordinator.init_producer_id()
    with pytest.raises(InvalidProducerIdMappingError, match="belongs to no transactional id"):
        coordinator.verify_transactional_append("a", 0, *idempotent)


def test_verify_during_a_commit_is_concurrent_transactions(coordinator, markers) -> None:
    producer = coordinator.init_producer_id("t")
    coordinator.add_partitions_to_txn("t", *producer, [("a", 0), ("b", 0)])
    markers.fail[("b", 0)] = OSError("disk")
    coordinator.end_txn("t", *producer, commit=True)  # decided; b's marker is pending
    with pytest.raises(ConcurrentTransactionsError, match="being committed") as raised:
        coordinator.verify_transactional_append("a", 0, *producer)
    assert raised.value.retriable
    markers.heal()
    coordinator.run_maintenance()
    with pytest.raises(InvalidTxnStateError):
        coordinator.verify_transactional_append("a", 0, *producer)


def test_verify_follows_rotation_expiry_and_restart(tmp_path, markers, clock) -> None:
    config = TransactionConfig(transactional_id_expiration_ms=10_000)
    coordinator = TransactionCoordinator.open([tmp_path], markers, time_ms=clock, config=config)
    first = coordinator.init_producer_id("t")
    _install(coordinator, TransactionMetadata(
        "t", first.producer_id, 32766, 60000, S.EMPTY, frozenset(), -1, T0))
    rotated = coordinator.init_producer_id("t")
    assert rotated.producer_id != first.producer_id
    coordinator.add_partitions_to_txn("t", *rotated, [("a", 0)])
    coordinator.verify_transactional_append("a", 0, *rotated)
    with pytest.raises(InvalidProducerIdMappingError):  # the old id is no one's now
        coordinator.verify_transactional_append("a", 0, first.producer_id, 32766)
    coordinator.close()
    # The index is rebuilt by the replay.
    coordinator = TransactionCoordinator.open([tmp_path], markers, time_ms=clock, config=config)
    coordinator.verify_transactional_append("a", 0, *rotated)
    with pytest.raises(InvalidProducerIdMappingError):
        coordinator.verify_transactional_append("a", 0, first.producer_id, 32766)
    coordinator.end_txn("t", *rotated, commit=False)
    clock.now += 3_600_000
    assert coordinator.remove_expired_transactional_ids() == 1
    assert coordinator.state_manager.get_by_producer_id(rotated.producer_id) is None
    coordinator.close()
    with pytest.raises(LogClosedError):
        coordinator.verify_transactional_append("a", 0, *rotated)


# ---------------------------------------------------------------- restart


def test_restart_completes_a_prepared_commit_and_leaves_an_ongoing_one(
    tmp_path, markers, clock
) -> None:
    coordinator = TransactionCoordinator.open([tmp_path], markers, time_ms=clock)
    committing = coordinator.init_producer_id("committing")
    coordinator.add_partitions_to_txn("committing", *committing, [("a", 0), ("b", 0)])
    open_ = coordinator.init_producer_id("open", transaction_timeout_ms=1000)
    coordinator.add_partitions_to_txn("open", *open_, [("c", 0)])
    markers.fail[("b", 0)] = Crash()  # killed between the two partitions' markers
    with pytest.raises(Crash):
        coordinator.end_txn("committing", *committing, commit=True)
    coordinator.state_manager.partition_log.close_for_deletion()  # no clean close

    after = Markers()
    reopened = TransactionCoordinator.open([tmp_path], after, time_ms=clock)
    assert after.calls == [
        ("a", 0, committing.producer_id, committing.producer_epoch, 0, True),
        ("b", 0, committing.producer_id, committing.producer_epoch, 0, True),
    ]
    assert reopened.describe_transaction("committing").state is S.COMPLETE_COMMIT
    assert reopened.describe_transaction("open").state is S.ONGOING
    clock.now += 1001
    assert reopened.run_maintenance().aborted_timed_out == 1
    assert after.calls[-1] == ("c", 0, open_.producer_id, open_.producer_epoch + 1, 0, False)
    # The committed producer goes on where it was.
    reopened.add_partitions_to_txn("committing", *committing, [("a", 0)])
    reopened.close()


def test_a_completion_that_fails_at_load_is_retried_by_maintenance(tmp_path, clock) -> None:
    markers = Markers()
    coordinator = TransactionCoordinator.open([tmp_path], markers, time_ms=clock)
    producer = coordinator.init_producer_id("t")
    coordinator.add_partitions_to_txn("t", *producer, [("a", 0)])
    markers.fail[("a", 0)] = OSError("not yet")
    coordinator.end_txn("t", *producer, commit=False)
    coordinator.close()
    reopened = TransactionCoordinator.open([tmp_path], markers, time_ms=clock)  # still failing
    assert reopened.describe_transaction("t").state is S.PREPARE_ABORT
    markers.heal()
    assert reopened.run_maintenance().completed == 1
    assert reopened.describe_transaction("t").state is S.COMPLETE_ABORT
    reopened.close()


def test_producer_ids_are_unique_across_restarts(tmp_path, markers, clock) -> None:
    seen: list[int] = []
    for round_ in range(3):
        coordinator = TransactionCoordinator.open([tmp_path], markers, time_ms=clock)
        seen += [coordinator.init_producer_id().producer_id for _ in range(700)]
        seen.append(coordinator.init_producer_id(f"t{round_}").producer_id)
        coordinator.close()
    assert len(set(seen)) == len(seen)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("timeout", [0, -1, 900_001, True, "60000"])
def test_an_invalid_timeout_is_refused_and_nothing_written(coordinator, timeout) -> None:
    end = log_end(coordinator)
    with pytest.raises(InvalidTransactionTimeoutError, match=r"transaction\.max\.timeout\.ms"):
        coordinator.init_producer_id("t", timeout)
    assert log_end(coordinator) == end
    coordinator.init_producer_id("t", 900_000)  # the maximum itself is valid


@pytest.mark.parametrize("transactional_id", ["", "x" * 32768, b"t"])
def test_an_invalid_transactional_id_is_refused(coordinator, transactional_id) -> None:
    end = log_end(coordinator)
    for call in (lambda: coordinator.init_producer_id(transactional_id),
                 lambda: coordinator.add_partitions_to_txn(transactional_id, 0, 0, [("a", 0)]),
                 lambda: coordinator.end_txn(transactional_id, 0, 0, True)):
        with pytest.raises(InvalidTransactionalIdError):
            call()
    assert log_end(coordinator) == end


def test_an_unknown_transactional_id_is_refused(coordinator) -> None:
    end = log_end(coordinator)
    with pytest.raises(TransactionalIdNotFoundError, match="'nope' is unknown"):
        coordinator.add_partitions_to_txn("nope", 0, 0, [("a", 0)])
    with pytest.raises(TransactionalIdNotFoundError):
        coordinator.end_txn("nope", 0, 0, commit=True)
    with pytest.raises(TransactionalIdNotFoundError):
        coordinator.describe_transaction("nope")
    assert log_end(coordinator) == end


def test_a_producer_id_of_another_id_is_refused(coordinator) -> None:
    mine = coordinator.init_producer_id("t")
    other = coordinator.init_producer_id("u")
    end = log_end(coordinator)
    with pytest.raises(InvalidProducerIdMappingError, match=f"producer id {other.producer_id}"):
        coordinator.add_partitions_to_txn("t", other.producer_id, mine.producer_epoch, [("a", 0)])
    with pytest.raises(ProducerFencedError, match="from the future"):
        coordinator.add_partitions_to_txn("t", mine.producer_id, 5, [("a", 0)])
    assert log_end(coordinator) == end


@pytest.mark.parametrize(("partitions", "error", "message"), [
    ([], InvalidTransactionalIdError, "no partitions"),
    ([("bad/topic", 0)], InvalidTopicError, "bad/topic"),
    ([("a", -1)], InvalidTopicError, "-1"),
    (["a-0"], InvalidTopicError, "not \\(topic, partition\\)"),
    ([("a", p) for p in range(1001)], InvalidTransactionalIdError, "transaction.partitions.max"),
])
def test_bad_partitions_are_refused(coordinator, partitions, error, message) -> None:
    producer = coordinator.init_producer_id("t")
    end = log_end(coordinator)
    with pytest.raises(error, match=message):
        coordinator.add_partitions_to_txn("t", *producer, partitions)
    assert log_end(coordinator) == end


def test_the_partition_limit_counts_the_whole_transaction(tmp_path, markers, clock) -> None:
    config = TransactionConfig(transaction_partitions_max=3)
    coordinator = TransactionCoordinator.open([tmp_path], markers, time_ms=clock, config=config)
    producer = coordinator.init_producer_id("t")
    coordinator.add_partitions_to_txn("t", *producer, [("a", 0), ("a", 1)])
    with pytest.raises(InvalidTransactionalIdError, match="4 partitions"):
        coordinator.add_partitions_to_txn("t", *producer, [("a", 2), ("a", 3)])
    coordinator.add_partitions_to_txn("t", *producer, [("a", 2)])
    coordinator.close()


def test_requests_before_load_and_after_close(tmp_path, markers) -> None:
    coordinator = TransactionCoordinator([tmp_path], markers)
    with pytest.raises(CoordinatorLoadInProgressError) as raised:
        coordinator.init_producer_id("t")
    assert raised.value.retriable
    coordinator.load()
    coordinator.init_producer_id("t")
    coordinator.close()
    coordinator.close()
    with pytest.raises(LogClosedError):
        coordinator.init_producer_id("t")


def test_retriable_flags() -> None:
    retriable = {cls.__name__ for cls in _leaves(TransactionError) if cls.retriable}
    assert retriable == {"ConcurrentTransactionsError", "CoordinatorLoadInProgressError",
                         "NotCoordinatorError", "CoordinatorNotAvailableError"}


def _leaves(cls: type) -> list[type]:
    return [cls, *(leaf for sub in cls.__subclasses__() for leaf in _leaves(sub))]


def test_config_by_kafka_names() -> None:
    config = TransactionConfig.from_mapping({"transaction.max.timeout.ms": "1000"})
    assert config.transaction_max_timeout_ms == 1000
    from stratalog.server.storage.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match="unknown transaction setting"):
        TransactionConfig.from_mapping({"transaction.timeout": 1})
    with pytest.raises(InvalidConfigError, match=r"transactional\.id\.expiration\.ms"):
        TransactionConfig(transactional_id_expiration_ms=0)


# ---------------------------------------------------------------- concurrency


def test_concurrent_producers_each_commit_their_transactions(coordinator, markers) -> None:
    errors: list[BaseException] = []

    def producer(index: int) -> None:
        try:
            transactional_id = f"t{index % 4}"  # two threads per id: they fence each other
            for round_ in range(20):
                try:
                    pid = coordinator.init_producer_id(transactional_id)
                    coordinator.add_partitions_to_txn(transactional_id, *pid,
                                                      [("a", index), ("b", round_)])
                    coordinator.end_txn(transactional_id, *pid, commit=True)
                except ProducerFencedError:
                    pass  # the other instance of the id bumped the epoch in between
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for metadata in coordinator.state_manager.transactions():
        assert metadata.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.EMPTY)
    # Every marker names an epoch the id had when its transaction ended: each (id, epoch) ends
    # once, so no epoch has markers of both outcomes.
    outcomes: dict[tuple[int, int], set[bool]] = {}
    for _, _, pid, epoch, _, commit in markers.calls:
        outcomes.setdefault((pid, epoch), set()).add(commit)
    assert all(len(kinds) == 1 for kinds in outcomes.values())
