"""The cleaner's I/O throttle (Kafka's Throttler), on a fake clock: sleeps counted, not timed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.storage import PartitionLog
from stratalog.server.storage.cleaner import Cleaner, cleanable_range
from stratalog.server.storage.errors import InvalidConfigError
from stratalog.server.storage.log_defaults import parse_server_defaults
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.offset_map import OffsetMap
from stratalog.server.storage.throttler import UNLIMITED, Throttler

MS = 1_000_000  # ns
T0 = 1_700_000_000_000


class FakeTime:
    """A monotonic clock that a sleep advances; each reading may also advance it (the work)."""

    def __init__(self, step_ns: int = 0) -> None:
        self.now_ns = 0
        self.step_ns = step_ns
        self.sleeps: list[float] = []

    def monotonic_ns(self) -> int:
        self.now_ns += self.step_ns
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_ns += round(seconds * 1e9)


def throttler(rate: float, clock: FakeTime, interval_ms: int = 100) -> Throttler:
    return Throttler(rate, check_interval_ms=interval_ms, monotonic_ns=clock.monotonic_ns,
                     sleep_s=clock.sleep)


def test_no_sleep_within_a_check_interval() -> None:
    clock = FakeTime()
    limit = throttler(1000, clock)
    clock.now_ns = 50 * MS
    limit.maybe_throttle(1_000_000)  # far above the rate, but the interval is not over
    assert clock.sleeps == []


def test_sleeps_what_the_period_needs_at_the_limit() -> None:
    clock = FakeTime()
    limit = throttler(1_000_000, clock)  # 1 MB/s
    clock.now_ns = 200 * MS
    limit.maybe_throttle(500_000)  # 0.5 MB in 200 ms: 2.5 MB/s, needs 500 ms
    assert clock.sleeps == [0.3]
    assert (limit.sleeps, limit.slept_ms) == (1, 300)


def test_under_the_limit_no_sleep_and_a_new_period() -> None:
    clock = FakeTime()
    limit = throttler(1_000_000, clock)
    clock.now_ns = 200 * MS
    limit.maybe_throttle(100_000)  # 0.5 MB/s
    clock.now_ns += 150 * MS
    limit.maybe_throttle(100_000)  # a new period: 100 KB in 150 ms, 0.67 MB/s
    assert clock.sleeps == []


@pytest.mark.parametrize("rate", [50_000.0, 1_000_000.0, 30_000_000.0])
def test_the_rate_over_a_long_run_is_bounded(rate: float) -> None:
    # Work runs at 100 MB/s (64 KiB every 0.65 ms): the throttle brings the average down to
    # the limit, give or take one check interval's worth of bytes.
    clock = FakeTime(step_ns=655_360)
    limit = throttler(rate, clock)
    total = 0
    for _ in range(20_000):
        limit.maybe_throttle(65_536)
        total += 65_536
    elapsed_s = clock.now_ns / 1e9
    assert total / elapsed_s <= rate * 1.01 + 65_536 / 0.1
    assert total / elapsed_s >= rate * 0.9
    assert limit.sleeps > 0


def test_unlimited_never_sleeps() -> None:
    clock = FakeTime(step_ns=1)
    limit = throttler(UNLIMITED, clock)
    for _ in range(1000):
        limit.maybe_throttle(1 << 30)
    assert clock.sleeps == [] and limit.unlimited


def test_bad_rates_are_refused() -> None:
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="above 0"):
            Throttler(bad)


def test_the_setting_has_kafkas_name_and_default() -> None:
    assert parse_server_defaults({})[1].cleaner_io_max_bytes_per_second == UNLIMITED
    settings = parse_server_defaults({"log.cleaner.io.max.bytes.per.second": "1048576"})[1]
    assert settings.cleaner_io_max_bytes_per_second == 1048576.0
    for bad in ("0", "-5", "fast"):
        with pytest.raises(InvalidConfigError, match=r"log\.cleaner\.io\.max\.bytes"):
            parse_server_defaults({"log.cleaner.io.max.bytes.per.second": bad})


def test_a_cleaning_reports_what_it_reads_and_writes(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", {"cleanup.policy": "compact",
                                                "segment.bytes": 4096}, time_ms=lambda: T0)
    try:
        for index in range(200):
            log.append(build_batch([(T0, b"key-%d" % (index % 10), b"v" * 100, ())]))
        log.roll()
        observed: list[float] = []

        class Recording(Throttler):
            def maybe_throttle(self, count: float) -> None:
                observed.append(count)
                super().maybe_throttle(count)

        clock = FakeTime(step_ns=10 * MS)  # every report looks like 10 ms of work
        recording = Recording(1000.0, monotonic_ns=clock.monotonic_ns, sleep_s=clock.sleep)
        cleanable = cleanable_range(log, None, T0)
        result = Cleaner(OffsetMap(1 << 16), throttler=recording).clean(
            log, cleanable.first_dirty_offset, cleanable.first_uncleanable_offset
        )
        # Both passes read the dirty section (the map, then the rewrite), and the writes are
        # reported: everything the cleaning moved went through the throttle.
        assert sum(observed) == 2 * result.bytes_read + result.bytes_written
        assert recording.sleeps > 0 and clock.sleeps
        assert sum(clock.sleeps) == pytest.approx(recording.slept_ms / 1000)
    finally:
        log.close()


def test_the_cleaners_throttle_is_the_settings_and_its_sleeps_end_at_shutdown(
    tmp_path: Path,
) -> None:
    manager = LogManager.open([tmp_path], defaults={
        "log.cleaner.io.max.bytes.per.second": "1000",
    })
    throttler = manager.cleaner.throttler
    assert throttler.rate_per_s == 1000.0
    manager.close()
    # A limit this low asks for long sleeps; after shutdown one returns at once (a thread and a
    # join, not a timing assertion: a sleep that did not end would hold the join for an hour).
    ended = threading.Event()
    sleeper = threading.Thread(target=lambda: (throttler._sleep_s(3600), ended.set()))
    sleeper.start()
    sleeper.join(60)
    assert ended.is_set()
