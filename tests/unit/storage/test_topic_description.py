"""topic_description: what describe reports of a partition, its largest timestamp read without
opening the time index of an inactive segment (moved from test_log_manager.py with the code)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.storage.log_manager import LogManager

T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def batch(*values: bytes, timestamp: int = T0) -> bytes:
    return build_batch([(timestamp, None, value, ()) for value in values])


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "d0", tmp_path / "d1"]


def open_manager(dirs: list[Path], clock: Clock, **defaults: str) -> LogManager:
    return LogManager.open(dirs, defaults=defaults or None, time_ms=clock)


def test_describe_reads_max_timestamps_without_opening_indexes(
    dirs: list[Path], clock: Clock
) -> None:
    manager = open_manager(dirs, clock)
    manager.create_topic("t", 1, {"segment.bytes": str(len(batch(b"x")))})
    partition_log = manager.get_log("t", 0)
    for timestamp in (T0 + 5, T0 + 50, T0 + 7):  # one batch per segment; the largest in the middle
        partition_log.append(batch(b"x", timestamp=timestamp))
    manager.close()
    manager = open_manager(dirs, clock)
    try:
        description = manager.describe_topic("t").partitions[0]
        assert (description.segment_count, description.max_timestamp) == (3, T0 + 50)
        segments = list(manager.get_log("t", 0).segments)
        assert [s.indexes_loaded for s in segments[:-1]] == [(False, False)] * 2
    finally:
        manager.close()
