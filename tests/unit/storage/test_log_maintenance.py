"""log_maintenance: the LogManager's background jobs through ``run_maintenance`` (flush.ms,
checkpoints on their intervals, -delete directories after their delay and a bounded number per
pass) and the embedded thread (moved from test_log_manager.py with the code)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from stratalog.server.storage.checkpoints import (
    RECOVERY_POINT_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from stratalog.server.storage.errors import StorageError
from tests.unit.storage.manager_helpers import T0, Clock, batch, open_manager


def test_leftover_delete_dirs_are_removed_after_a_restart(dirs: list[Path], clock: Clock) -> None:
    manager = open_manager(dirs, clock, **{"log.segment.delete.delay.ms": "10"})
    manager.create_topic("t", 1)
    manager.delete_topic("t")
    manager.close()  # before the delay: the directory stays
    assert [p for p in dirs[0].iterdir() if p.name.endswith("-delete")]
    manager = open_manager(dirs, clock, **{"log.segment.delete.delay.ms": "10"})
    try:
        assert manager.list_topics() == []
        assert len(manager.pending_deleted_dirs) == 1
        assert manager.run_maintenance(clock.now_ms + 10).deleted_dirs_removed == 1
        assert not [p for p in dirs[0].iterdir() if p.name.endswith("-delete")]
    finally:
        manager.close()


def test_deleted_dir_removal_is_bounded_per_pass(dirs: list[Path], clock: Clock) -> None:
    settings = {"log.segment.delete.delay.ms": "0", "log.delete.dirs.per.pass.max": "2"}
    with open_manager(dirs, clock, **settings) as manager:
        manager.create_topic("t", 5)
        manager.delete_topic("t")
        first = manager.run_maintenance()
        assert (first.deleted_dirs_removed, first.more_work) == (2, True)
        second = manager.run_maintenance()
        assert (second.deleted_dirs_removed, second.more_work) == (2, True)
        third = manager.run_maintenance()
        assert (third.deleted_dirs_removed, third.more_work) == (1, False)


def test_flush_ms_flushes_in_maintenance(dirs: list[Path], clock: Clock) -> None:
    with open_manager(dirs, clock) as manager:
        manager.create_topic("t", 1, {"flush.ms": "100"})
        manager.create_topic("never", 1)
        partition_log = manager.get_log("t", 0)
        partition_log.append(batch(b"a"))
        manager.get_log("never", 0).append(batch(b"b"))
        assert partition_log.recovery_point == 0
        clock.now_ms += 50
        assert manager.run_maintenance().flushed_logs == 0
        clock.now_ms += 50
        assert manager.run_maintenance().flushed_logs == 1
        assert partition_log.recovery_point == 1
        assert manager.get_log("never", 0).recovery_point == 0
        clock.now_ms += 1000
        assert manager.run_maintenance().flushed_logs == 0  # nothing new to flush


def test_checkpoints_are_written_on_their_intervals(dirs: list[Path], clock: Clock) -> None:
    settings = {
        "log.flush.offset.checkpoint.interval.ms": "100",
        "log.flush.start.offset.checkpoint.interval.ms": "200",
    }
    with open_manager(dirs, clock, **settings) as manager:
        manager.create_topic("t", 1, {"flush.messages": "1"})
        manager.get_log("t", 0).append(batch(b"a", b"b"))
        path = dirs[0] / RECOVERY_POINT_CHECKPOINT_FILE
        report = manager.run_maintenance(T0 + 99)
        assert report.recovery_point_checkpoints_written == 0
        assert OffsetCheckpointFile(path).read() == {}
        report = manager.run_maintenance(T0 + 100)
        assert report.recovery_point_checkpoints_written == 2  # one per log directory
        assert report.log_start_offset_checkpoints_written == 0
        assert OffsetCheckpointFile(path).read() == {("t", 0): 2}
        report = manager.run_maintenance(T0 + 200)
        assert report.recovery_point_checkpoints_written == 2
        assert report.log_start_offset_checkpoints_written == 2


def test_background_thread_runs_maintenance_and_stops_on_close(
    dirs: list[Path], clock: Clock
) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("t", 1, {"flush.ms": "0"})
    manager.get_log("t", 0).append(batch(b"a"))
    flushed = threading.Event()
    original = manager.run_maintenance

    def watching(now_ms: int | None = None):  # type: ignore[no-untyped-def]
        report = original(now_ms)
        if report.flushed_logs:
            flushed.set()
        return report

    manager.run_maintenance = watching  # type: ignore[method-assign]
    manager.start_background(interval_ms=1)
    with pytest.raises(StorageError, match="already running"):
        manager.start_background()
    assert flushed.wait(timeout=30)
    assert manager.get_log("t", 0).recovery_point == 1
    manager.close()
    assert manager._maintenance.background is None
