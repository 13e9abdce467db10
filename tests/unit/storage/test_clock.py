"""wall_clock_ms: integer milliseconds since the epoch, exact where a float product is not."""

from __future__ import annotations

import time

import pytest

from stratalog.server.storage import clock, log_manager


def test_wall_clock_is_integer_milliseconds_since_the_epoch() -> None:
    before = time.time_ns() // 1_000_000
    now = clock.wall_clock_ms()
    after = time.time_ns() // 1_000_000
    assert isinstance(now, int)
    assert before <= now <= after


def test_milliseconds_are_truncated_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    # This instant, as float seconds, is 1700001774.7089999: int(time.time() * 1000) would give
    # 1700001774708, a millisecond early.
    instant_ns = 1_700_001_774_709_000_000
    monkeypatch.setattr(time, "time_ns", lambda: instant_ns)
    assert int(instant_ns / 1e9 * 1000) == 1_700_001_774_708
    assert clock.wall_clock_ms() == 1_700_001_774_709


def test_the_log_manager_reads_this_clock() -> None:
    assert log_manager.wall_clock_ms is clock.wall_clock_ms
