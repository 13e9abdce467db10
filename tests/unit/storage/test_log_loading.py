"""Loading a server's partition logs (log_loading.py), against real directories and logs.

The LogManager's own tests (test_log_manager.py) cover loading through ``LogManager.open``:
interrupted deletions, adoption, missing directories. These check what the module hands back
that an open does not show: the logs that did open when another failed, and where a missing
partition is created.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.dir_lock import LogDirLock
from stratalog.server.storage.errors import StorageIOError
from stratalog.server.storage.log_dirs import (
    LogDirState,
    create_log_dirs,
    lock_log_dirs,
    scan_log_dirs,
)
from stratalog.server.storage.log_loading import load_logs, reconcile_catalog
from stratalog.server.storage.partition_log import PartitionLog
from stratalog.server.storage.topic_catalog import (
    STATE_DELETING,
    TopicCatalog,
    TopicEntry,
    read_catalog,
)
from stratalog.server.storage.topic_names import partition_dir_name

T0 = 1_700_000_000_000


@pytest.fixture
def dirs(tmp_path: Path) -> Any:
    locks: list[LogDirLock] = []
    states = lock_log_dirs(create_log_dirs([tmp_path / "a", tmp_path / "b"]), 1, locks)
    yield states
    for lock in locks:
        lock.release()


def _open_log(directory: Path, config: LogConfig, **kwargs: Any) -> PartitionLog:
    return PartitionLog.open(directory, config, time_ms=lambda: T0, **kwargs)


def _config(entry: TopicEntry) -> LogConfig:
    return LogConfig()


def test_a_failed_open_hands_back_the_logs_that_opened(dirs: list[LogDirState]) -> None:
    catalog = TopicCatalog().with_topic(TopicEntry("t", 3))
    failure = StorageIOError("the disk is gone")

    def open_log(directory: Path, config: LogConfig, **kwargs: Any) -> PartitionLog:
        if directory.name == partition_dir_name("t", 1):
            raise failure
        return _open_log(directory, config, **kwargs)

    loaded = load_logs(dirs, catalog, {}, _config, open_log, threads=2)
    try:
        assert loaded.first_error is failure
        assert sorted(loaded.logs) == [("t", 0), ("t", 2)]
        assert all(not lg.is_closed for lg in loaded.logs.values())
        assert set(loaded.log_dir_of) == set(loaded.logs)
    finally:
        for partition_log in loaded.logs.values():
            partition_log.close()


def test_missing_partitions_go_to_the_directory_with_the_fewest(
    dirs: list[LogDirState],
) -> None:
    a, b = (state.path for state in dirs)
    existing = _open_log(a / partition_dir_name("t", 0), LogConfig())
    existing.append(build_batch([(T0, b"k", b"v", ())]))
    existing.close()
    found, _ = scan_log_dirs(dirs, frozenset())
    assert found == {("t", 0): a}
    catalog = TopicCatalog().with_topic(TopicEntry("t", 3))
    loaded = load_logs(dirs, catalog, found, _config, _open_log, threads=1)
    try:
        assert loaded.first_error is None
        # t-1 to b (0 there, 1 in a), then t-2 to a (a tie goes to the first directory).
        assert loaded.log_dir_of == {("t", 0): a, ("t", 1): b, ("t", 2): a}
        assert loaded.logs[("t", 0)].log_end_offset == 1
        assert (b / partition_dir_name("t", 1)).is_dir()
    finally:
        for partition_log in loaded.logs.values():
            partition_log.close()


def test_reconcile_completes_deletions_and_adopts(dirs: list[LogDirState]) -> None:
    a, b = (state.path for state in dirs)
    found = {("gone", 0): a, ("gone", 1): b, ("kept", 0): a, ("kept", 3): b, ("new", 1): a}
    catalog = (
        TopicCatalog()
        .with_topic(TopicEntry("gone", 2, {}, STATE_DELETING))
        .with_topic(TopicEntry("kept", 2, {"retention.ms": "1000"}))
    )
    renamed: list[tuple[Path, str, int]] = []
    log_dirs = [a, b]
    reconciled = reconcile_catalog(
        catalog, found, log_dirs, lambda d, t, p: renamed.append((d, t, p))
    )
    assert sorted(renamed) == [(a, "gone", 0), (b, "gone", 1)]
    assert sorted(found) == [("kept", 0), ("kept", 3), ("new", 1)]
    assert sorted(reconciled.topics) == ["kept", "new"]
    assert reconciled.topics["kept"].partitions == 4
    assert dict(reconciled.topics["kept"].configs) == {"retention.ms": "1000"}
    assert reconciled.topics["new"].partitions == 2
    assert read_catalog(log_dirs).topics == reconciled.topics
