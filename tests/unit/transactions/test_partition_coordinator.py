"""The coordinator of one partition of the cluster's state topic
(``TransactionCoordinator.for_partition`` over ``TransactionStateManager.load_replicated``):
what a new leader replays, how it completes decided transactions, where its writes and markers
go, and that an unloaded one writes nothing more (Kafka's TransactionStateManagerTest
``loadTransactionsForPartition`` cases)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratalog.server.storage import PartitionLog
from stratalog.server.storage.errors import LogClosedError
from stratalog.server.transactions import TransactionCoordinator
from stratalog.server.transactions.transaction_metadata import TransactionState
from stratalog.server.transactions.transaction_state_manager import (
    STATE_LOG_CONFIG,
    TransactionStateManager,
)

LEADER_EPOCH = 7


class Replicated:
    """A replica of one state partition: ``write`` appends as the acks=all append would (it
    returns once the bytes are in the log), and counts the writes."""

    def __init__(self, directory: Path) -> None:
        self.log = PartitionLog.open(directory, STATE_LOG_CONFIG)
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.log.append(data)
        self.writes += 1


@pytest.fixture
def replica(tmp_path: Path):
    replica = Replicated(tmp_path / "__cluster_transaction_state-3")
    yield replica
    replica.log.close()


def markers_recorder(calls: list[tuple]):
    def write_markers(*args) -> None:
        calls.append(args)
    return write_markers


def ids(start: int = 1 << 40):
    counter = iter(range(start, start + 1000))
    return lambda: next(counter)


def load(replica: Replicated, calls: list[tuple], epoch: int = LEADER_EPOCH,
         end: int | None = None) -> TransactionCoordinator:
    state = TransactionStateManager.load_replicated(
        replica.log, replica.log.log_end_offset if end is None else end, replica.write)
    return TransactionCoordinator.for_partition(state, markers_recorder(calls), ids(), epoch)


def test_writes_go_through_the_replicated_append_and_markers_carry_the_leader_epoch(
        replica: Replicated) -> None:
    calls: list[tuple] = []
    coordinator = load(replica, calls)
    producer_id, epoch = coordinator.init_producer_id("t", 60_000)
    assert producer_id == 1 << 40  # from the server's cluster-wide ids, not a local block
    coordinator.add_partitions_to_txn("t", producer_id, epoch, [("orders", 0), ("orders", 1)])
    coordinator.end_txn("t", producer_id, epoch, commit=True)
    assert calls == [("orders", 0, producer_id, epoch, LEADER_EPOCH, True),
                     ("orders", 1, producer_id, epoch, LEADER_EPOCH, True)]
    # Empty, Ongoing, PrepareCommit, CompleteCommit: four writes, no producer id block.
    assert replica.writes == 4
    assert coordinator.coordinator_epoch == LEADER_EPOCH
    assert coordinator.run_maintenance().compacted is False  # the log cleaner's job


def test_a_new_leader_replays_below_the_high_watermark_only(replica: Replicated) -> None:
    calls: list[tuple] = []
    first = load(replica, calls)
    producer_id, epoch = first.init_producer_id("t", 60_000)
    high_watermark = replica.log.log_end_offset
    first.add_partitions_to_txn("t", producer_id, epoch, [("orders", 0)])  # not replicated yet
    first.close()
    second = load(replica, calls, epoch=LEADER_EPOCH + 1, end=high_watermark)
    assert second.describe_transaction("t").state is TransactionState.EMPTY


def test_a_decided_transaction_is_completed_by_the_next_leader(replica: Replicated) -> None:
    calls: list[tuple] = []
    first = load(replica, calls)
    producer_id, epoch = first.init_producer_id("t", 60_000)
    first.add_partitions_to_txn("t", producer_id, epoch, [("orders", 0), ("audit", 2)])
    # The leader dies right after logging PrepareCommit, before any marker.
    metadata = first.describe_transaction("t")
    first.state_manager.append_transaction(metadata.prepare_end(True, 1))
    first.close()
    calls.clear()
    second = load(replica, calls, epoch=LEADER_EPOCH + 1)
    assert second.describe_transaction("t").state is TransactionState.PREPARE_COMMIT
    report = second.complete_pending_transactions()
    assert (report.completed, report.errors) == (1, [])
    assert sorted(calls) == [("audit", 2, producer_id, epoch, LEADER_EPOCH + 1, True),
                             ("orders", 0, producer_id, epoch, LEADER_EPOCH + 1, True)]
    assert second.describe_transaction("t").state is TransactionState.COMPLETE_COMMIT
    # And a third leader finds it complete: nothing sent again.
    second.close()
    calls.clear()
    assert load(replica, calls, epoch=LEADER_EPOCH + 2).complete_pending_transactions(
        ).completed == 0
    assert calls == []


def test_an_unloaded_coordinator_writes_nothing_more(replica: Replicated) -> None:
    calls: list[tuple] = []
    coordinator = load(replica, calls)
    producer_id, epoch = coordinator.init_producer_id("t", 60_000)
    coordinator.close()
    end = replica.log.log_end_offset
    with pytest.raises(LogClosedError):
        coordinator.add_partitions_to_txn("t", producer_id, epoch, [("orders", 0)])
    assert replica.log.log_end_offset == end
    assert not replica.log.is_closed  # the LogManager's log, not the coordinator's


def test_a_failed_replicated_write_changes_nothing_in_memory(replica: Replicated) -> None:
    calls: list[tuple] = []

    def refused(data: bytes) -> None:
        raise ConnectionError("too few in-sync replicas")

    state = TransactionStateManager.load_replicated(replica.log, 0, refused)
    coordinator = TransactionCoordinator.for_partition(state, markers_recorder(calls), ids(),
                                                       LEADER_EPOCH)
    with pytest.raises(ConnectionError):
        coordinator.init_producer_id("t", 60_000)
    assert state.get("t") is None


def test_markers_many_are_written_in_one_call_per_transaction(replica: Replicated) -> None:
    calls: list[tuple] = []
    many: list[tuple] = []
    state = TransactionStateManager.load_replicated(replica.log, 0, replica.write)
    coordinator = TransactionCoordinator.for_partition(
        state, markers_recorder(calls), ids(), LEADER_EPOCH,
        write_markers_many=lambda *args: many.append(args))
    producer_id, epoch = coordinator.init_producer_id("t", 60_000)
    coordinator.add_partitions_to_txn("t", producer_id, epoch, [("b", 1), ("a", 0), ("b", 0)])
    coordinator.end_txn("t", producer_id, epoch, commit=False)
    assert calls == []
    assert many == [([("a", 0), ("b", 0), ("b", 1)], producer_id, epoch, LEADER_EPOCH, False)]
    assert coordinator.describe_transaction("t").state is TransactionState.COMPLETE_ABORT
