"""A rate limit by sleeping: the log cleaner's I/O throttle (``log.cleaner.io.max.bytes.per.second``).

Kafka's ``Throttler`` (``org.apache.kafka.storage.internals.utils.Throttler``), which its
cleaner calls with the bytes it has just read or written. The throttler adds them up; once a
check interval has passed since the period started, it computes the period's rate,
and if that is above the limit sleeps for as long as the period would have needed at the limit
minus what it took::

    sleep_ms = round(observed / (limit / 1000) - elapsed_ms)      (when > 0)

then starts a new period. So over any long stretch the rate stays at or under the limit, give
or take one period's worth of bytes, and a caller is never put to sleep more than once per
interval. The first period after an idle stretch measures a low rate (the idle time counts) and
never sleeps: a cleaning runs unthrottled for its first interval, as in Kafka.

The interval: Kafka's LogCleaner checks every 300 ms; stratalog's cleaner every 100 ms (the
Throttler's own default), a deliberate difference: at full speed the cleaner takes a core, so
the shorter its unthrottled bursts, the fewer requests meet one (docs/performance.md, "Issue
16: latency while the cleaner runs"). The limit is read at each check (a setting changed at run time would apply at the next
period, as Kafka's dynamic config). A limit of ``sys.float_info.max`` (Kafka's default,
``Double.MAX_VALUE``) never sleeps.

The clock and the sleep are injected (``monotonic_ns``, ``sleep_s``), so that tests count the
sleeps asked for against a fake clock without timing anything. Thread-safe: the cleaner threads
share one throttler, as Kafka's, so that the limit is of all of them together; a sleep happens
under its lock (the other threads wait their turn, as in Kafka's ``synchronized`` block).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["UNLIMITED", "Throttler"]

UNLIMITED = 1.7976931348623157e308  # Kafka's Double.MAX_VALUE: no throttling
_NS_PER_S = 1_000_000_000
_NS_PER_MS = 1_000_000


class Throttler:
    """Sleeps its callers so that the bytes they report stay under ``rate_per_s`` a second.

    Holds the limit, the check interval, the start of the current period and the bytes observed
    in it, and counters of the sleeps (``sleeps``, ``slept_ms``: for metrics and tests).
    """

    def __init__(
        self,
        rate_per_s: float = UNLIMITED,
        *,
        check_interval_ms: int = 100,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
        sleep_s: Callable[[float], object] = time.sleep,
    ) -> None:
        """Raises ValueError for a rate that is not above 0 or a negative interval."""
        if not rate_per_s > 0:
            raise ValueError(f"a throttler's rate must be above 0, got {rate_per_s}")
        if check_interval_ms < 0:
            raise ValueError(f"check_interval_ms must not be negative, got {check_interval_ms}")
        self.rate_per_s = rate_per_s
        self._check_interval_ns = check_interval_ms * _NS_PER_MS
        self._monotonic_ns = monotonic_ns
        self._sleep_s = sleep_s
        self._lock = threading.Lock()
        self._period_start_ns = monotonic_ns()
        self._observed = 0.0
        self.sleeps = 0
        self.slept_ms = 0

    @property
    def unlimited(self) -> bool:
        return self.rate_per_s >= UNLIMITED

    def maybe_throttle(self, observed: float) -> None:
        """Count ``observed`` bytes; at the end of a check interval, sleep if the period's rate
        was above the limit (Kafka's ``maybeThrottle``)."""
        if self.unlimited:
            return  # Kafka computes and never sleeps; nothing to count here
        with self._lock:
            self._observed += observed
            now_ns = self._monotonic_ns()
            elapsed_ns = now_ns - self._period_start_ns
            if elapsed_ns <= self._check_interval_ns or self._observed <= 0:
                return
            rate_per_s = self._observed * _NS_PER_S / elapsed_ns
            if rate_per_s > self.rate_per_s:
                # What the period's bytes take at the limit, less what they took.
                sleep_ms = round(self._observed / (self.rate_per_s / 1000)
                                 - elapsed_ns // _NS_PER_MS)
                if sleep_ms > 0:
                    self.sleeps += 1
                    self.slept_ms += sleep_ms
                    self._sleep_s(sleep_ms / 1000)
            self._period_start_ns = self._monotonic_ns()
            self._observed = 0.0
