"""The serving layer GroupService runs on, in-process: a real LogManager (topic ``t`` with ten
records) and ReplicaManager, their executor and metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

from stratalog.records import build_batch
from stratalog.server.broker import ReplicaManager
from stratalog.server.group_service import GroupService
from stratalog.server.metrics import ServerMetrics
from stratalog.server.settings import Settings
from stratalog.server.storage.log_manager import LogManager

PARTITIONS = 2
#: Bounds of the waits below: they only end a broken test.
WAIT_S = 10.0


class Serving(NamedTuple):
    replicas: ReplicaManager
    settings: Settings
    executor: ThreadPoolExecutor
    metrics: ServerMetrics


@pytest.fixture
async def serving(tmp_path: Path) -> AsyncIterator[Serving]:
    log_manager = LogManager.open([tmp_path / "data"],
                                  defaults={"log.cleaner.dedupe.buffer.size": "65536"})
    executor = ThreadPoolExecutor(2)
    settings = Settings(offsets_topic_num_partitions=PARTITIONS,
                        group_initial_rebalance_delay_ms=3_000)
    metrics = ServerMetrics()
    replicas = ReplicaManager(log_manager, settings, metrics, executor)
    log_manager.create_topic("t", 1)
    replicas.log_manager.get_log("t", 0).append(build_batch([(1, None, b"v", ())] * 10))
    try:
        yield Serving(replicas, settings, executor, metrics)
    finally:
        replicas.begin_shutdown()
        executor.shutdown()
        log_manager.close()


def service_of(serving: Serving) -> GroupService:
    return GroupService(serving.replicas, serving.settings, serving.executor,
                        metrics=serving.metrics)
