"""ReplicaManager.fetch_records with ``max_records``: the records taken in the walk that bounds
the read, and a long poll that counts the whole batches read (as a fetch without
``max_records`` does), not the records taken."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.broker import ReplicaManager
from stratalog.server.metrics import ServerMetrics
from stratalog.server.settings import Settings
from stratalog.server.storage.fetch_isolation import IsolationLevel, SlicedWalk
from stratalog.server.storage.log_manager import LogManager

T0 = 1_700_000_000_000


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


async def test_a_long_poll_over_a_marker_alone_answers_at_once_with_no_record(
    replicas: ReplicaManager,
) -> None:
    partition_log, _ = replicas.get_partition("t", 0)
    partition_log.append(build_batch([(T0, None, b"in a txn", ())], producer_id=1,
                                      producer_epoch=0, base_sequence=0, is_transactional=True))
    partition_log.write_txn_marker(1, 0, 0, commit=True)  # offset 1
    waited = []
    for isolation in IsolationLevel:
        # The read at 1 holds the marker only: whole batches came (min_bytes 1), so the long
        # poll answers now, with no record and the offset past the marker; it never waits.
        # (max_wait_ms only bounds a broken run.)
        _, fetched = await replicas.fetch_records(
            "t", 0, 1, 1 << 20, isolation, max_records=1, max_wait_ms=2_000, min_bytes=1,
            admit_wait=lambda: waited.append(True),  # type: ignore[arg-type,func-returns-value]
        )
        assert isinstance(fetched, SlicedWalk)
        assert fetched[:3] == (b"", 2, 0)
        assert fetched.whole_bytes > 0
    assert not waited


async def test_a_point_read_takes_one_record_of_a_batch(replicas: ReplicaManager) -> None:
    partition_log, _ = replicas.get_partition("t", 0)
    partition_log.append(build_batch([(T0 + i, None, b"v%d" % i, ()) for i in range(5)]))
    _, fetched = await replicas.fetch_records(
        "t", 0, 2, 1 << 20, IsolationLevel.READ_UNCOMMITTED, max_records=1)
    assert (fetched.next_offset, fetched.records_count, fetched.positions) == (3, 1, (0,))
    assert fetched.whole_bytes == len(partition_log.fetch(2, 1 << 20).data)
