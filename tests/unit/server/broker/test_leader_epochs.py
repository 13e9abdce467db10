"""ReplicaManager's leader-epoch answers on a single server (its cluster-mode checks are in
tests/kafka/test_kafka_cluster.py): the end offset of an epoch from the partition's
leader-epoch cache, and the epoch of the offset ListOffsets finds; a client's current leader
epoch is not checked without a cluster (nothing to check it against)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.broker import ReplicaManager
from stratalog.server.metrics import ServerMetrics
from stratalog.server.settings import Settings
from stratalog.server.storage.errors import UnknownTopicOrPartitionError
from stratalog.server.storage.fetch_isolation import IsolationLevel
from stratalog.server.storage.log_manager import LogManager

T0 = 1_700_000_000_000
LATEST, EARLIEST = -1, -2


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    log_manager = LogManager.open([tmp_path / "data"],
                                  defaults={"log.cleaner.dedupe.buffer.size": "65536"})
    executor = ThreadPoolExecutor(1)
    replicas = ReplicaManager(log_manager, Settings(), ServerMetrics(), executor)
    log_manager.create_topic("t", 1, {})
    try:
        yield replicas
    finally:
        replicas.begin_shutdown()
        executor.shutdown()
        log_manager.close()


def _append(replicas: ReplicaManager, count: int, leader_epoch: int) -> None:
    """``count`` records, one batch each, the record at offset N timestamped T0 + N."""
    partition_log, _ = replicas.get_partition("t", 0)
    start = partition_log.log_end_offset
    for n in range(start, start + count):
        partition_log.append(build_batch([(T0 + n, None, b"v", ())]), leader_epoch=leader_epoch)


async def test_an_empty_log_knows_no_epoch(replicas: ReplicaManager) -> None:
    assert replicas.end_offset_for_epoch("t", 0, 0) == (-1, -1)
    assert replicas.offset_and_epoch_for_timestamp("t", 0, LATEST,
                                                   IsolationLevel.READ_UNCOMMITTED)[1] == -1


async def test_epochs_end_where_the_next_begins(replicas: ReplicaManager) -> None:
    _append(replicas, 3, leader_epoch=0)  # offsets 0..2
    _append(replicas, 2, leader_epoch=4)  # offsets 3..4
    assert replicas.end_offset_for_epoch("t", 0, 0) == (0, 3)
    assert replicas.end_offset_for_epoch("t", 0, 2) == (0, 3)  # the greatest epoch <= 2
    assert replicas.end_offset_for_epoch("t", 0, 4) == (4, 5)  # the latest: the log end
    assert replicas.end_offset_for_epoch("t", 0, 9) == (-1, -1)
    # A current leader epoch is not checked on a single server.
    assert replicas.end_offset_for_epoch("t", 0, 4, current_leader_epoch=99) == (4, 5)
    uncommitted = IsolationLevel.READ_UNCOMMITTED
    found = {target: replicas.offset_and_epoch_for_timestamp("t", 0, target, uncommitted)
             for target in (EARLIEST, LATEST, T0 + 1, T0 + 3)}
    assert {target: (f.offset, epoch) for target, (f, epoch) in found.items()} == {
        EARLIEST: (0, 0), LATEST: (5, 4), T0 + 1: (1, 0), T0 + 3: (3, 4)}
    assert replicas.offset_and_epoch_for_timestamp("t", 0, T0 + 99, uncommitted) == (None, -1)


async def test_an_unknown_partition_is_named(replicas: ReplicaManager) -> None:
    with pytest.raises(UnknownTopicOrPartitionError):
        replicas.end_offset_for_epoch("t", 7, 0)
