"""The wall clock of the storage engine and the server: milliseconds since the Unix epoch.

Kafka keeps time as Java's ``System.currentTimeMillis()``: integer milliseconds since
1970-01-01T00:00:00Z. Record timestamps, LogAppendTime, time index entries, ``retention.ms``,
``segment.ms`` and the ``message.timestamp.*`` windows all compare against that clock, so every
component that stamps or judges a record reads this one.

``time.time_ns() // 1_000_000`` rather than ``int(time.time() * 1000)``: a float of seconds near
today's epoch has a resolution of about 0.24 µs and most milliseconds are not exact in binary, so
the float product often lands just below the whole millisecond and truncates to the one before
(the instant 1700001774709 ms reads back as 1700001774.7089999 s, then 1700001774708 ms; about
one millisecond value in eight does this). Integer nanoseconds truncate exactly, as Java does.

This is a wall clock: it may jump backwards or forwards with the system time (NTP, an operator).
What measures an interval or a deadline uses ``time.monotonic()`` instead. Components take the
clock as a ``time_ms`` argument that defaults to this function, so tests can pass a fake one.

Thread-safe and non-blocking (one system call).
"""

from __future__ import annotations

import time

__all__ = ["wall_clock_ms"]


def wall_clock_ms() -> int:
    """The current wall-clock time in integer milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000
