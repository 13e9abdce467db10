"""The pure parts of benchmarks/bench_group_service.py: its groups live where it says, it reads
the load's figures from the log line a real GroupService writes, and its baseline package has
every package a server imports. Nothing here starts a server process (that is the benchmark's
run)."""

from __future__ import annotations

import asyncio
import logging
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[3]
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks.bench_group_service import (  # noqa: E402
    LOAD_PARTITION,
    OFFSETS_PARTITIONS,
    PACKAGE_DIRS,
    _groups_of_partition,
    _load_line,
    _spread_groups,
)
from stratalog.records.group_partition import partition_for_group  # noqa: E402
from stratalog.server.broker import ReplicaManager  # noqa: E402
from stratalog.server.group_service import GroupService  # noqa: E402
from stratalog.server.groups import OffsetCommitRequest, PartitionOffset  # noqa: E402
from stratalog.server.metrics import ServerMetrics  # noqa: E402
from stratalog.server.settings import Settings  # noqa: E402
from stratalog.server.storage.log_manager import LogManager  # noqa: E402

#: Bound of the wait for a load: it only ends a broken test.
WAIT_S = 10.0


def test_the_load_groups_live_in_the_load_partition_and_the_spread_covers_every_one() -> None:
    groups = _groups_of_partition("load", LOAD_PARTITION, 20)
    assert len(set(groups)) == 20
    assert {partition_for_group(g, OFFSETS_PARTITIONS) for g in groups} == {LOAD_PARTITION}
    spread = _spread_groups("rate0-", 64)
    assert len(set(spread)) == 64
    assert {partition_for_group(g, OFFSETS_PARTITIONS) for g in spread} == set(
        range(OFFSETS_PARTITIONS))


def _baseline_path(source: str) -> str | None:
    """Where the baseline package puts pyproject's source directory ``source`` (relative to
    its ``stratalog``), or None if it copies no directory holding it."""
    for copied, target in PACKAGE_DIRS.items():
        if source == copied:
            return "" if target == "." else target
        if source.startswith(copied + "/") and target != ".":
            return target + source.removeprefix(copied)
    return None


def test_the_baseline_package_has_every_package_a_server_imports() -> None:
    # pyproject.toml's package-dir: each stratalog package but Spark's must be where the
    # baseline's layout puts it.
    package_dirs = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"][
        "setuptools"]["package-dir"]
    for package, source in package_dirs.items():
        if package != "stratalog.spark":
            expected = package.removeprefix("stratalog").removeprefix(".").replace(".", "/")
            assert _baseline_path(source) == expected, (package, source)


async def test_the_load_figures_are_read_from_the_line_a_load_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    log_manager = LogManager.open([tmp_path / "data"])
    executor = ThreadPoolExecutor(2)
    settings = Settings(offsets_topic_num_partitions=OFFSETS_PARTITIONS)
    replicas = ReplicaManager(log_manager, settings, ServerMetrics(), executor)
    log_manager.create_topic("t", 1)
    group = _groups_of_partition("load", LOAD_PARTITION, 1)[0]
    try:
        first = GroupService(replicas, settings, executor)
        await first.start()
        await first.commit_offsets(OffsetCommitRequest(group, (PartitionOffset("t", 0, 0),)))
        await first.close()
        again = GroupService(replicas, settings, executor)
        with caplog.at_level(logging.INFO, logger="stratalog.server.group_service"):
            await again.start()
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while again.partitions[LOAD_PARTITION].core.loading:
                assert asyncio.get_running_loop().time() < deadline, "never loaded"
                await asyncio.sleep(0.01)
        await again.close()
    finally:
        replicas.begin_shutdown()
        executor.shutdown()
        log_manager.close()
    server_log = tmp_path / "server.log"
    earlier = "__consumer_offsets-7: loaded 9 records, 9 groups in 9.0 s (process CPU 1.0 s)\n"
    server_log.write_text(earlier + "\n".join(r.getMessage() for r in caplog.records) + "\n")
    records, groups, seconds, cpu_s = _load_line(server_log, len(earlier))
    assert (records, groups) == (1, 1)
    assert seconds >= 0 and cpu_s is not None and cpu_s >= 0
    # A server that does not log its CPU (the baseline's): the figure is None.
    server_log.write_text("__consumer_offsets-7: loaded 5 records, 2 groups in 0.5 s\n")
    assert _load_line(server_log, 0) == (5, 2, 0.5, None)
    # Only lines after the start's offset count: an earlier start's line is not this one's.
    with pytest.raises(RuntimeError, match="no load line of __consumer_offsets-7"):
        _load_line(server_log, server_log.stat().st_size)
