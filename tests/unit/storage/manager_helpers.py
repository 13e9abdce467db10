"""What the LogManager's tests share (test_log_manager.py and the tests of the modules split out
of it: test_log_maintenance.py, test_topic_description.py): a settable clock, a batch of values,
a manager over two directories. The fixtures ``clock`` and ``dirs`` are in this folder's
conftest.py."""

from __future__ import annotations

from pathlib import Path

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


def open_manager(dirs: list[Path], clock: Clock, **defaults: str) -> LogManager:
    return LogManager.open(dirs, defaults=defaults or None, time_ms=clock)
