"""Timestamps as users type them on the command line: milliseconds, ISO-8601 or relative.

Three forms are accepted wherever a command takes a timestamp:

* ``1763800000000``: milliseconds since the Unix epoch;
* an ISO-8601 date or date-time (``2026-11-22``, ``2026-11-22T09:00``,
  ``2026-11-22T09:00:00Z``, ``2026-11-22 09:00:00+01:00``). **A date-time without a zone is
  UTC**, the zone every timestamp is printed in (``2026-11-22T09:00:00.000Z``), so that a
  printed timestamp typed back in means the same instant on any machine. (Kafka's reset tools
  and ``date`` read such times in the local zone; on a machine whose zone is not UTC, add the
  offset: ``2026-11-22T09:00+01:00``.)
* a duration into the past, relative to now: ``-1h``, ``30m``, ``-2d``, ``90s``, ``500ms``,
  ``1w`` (the sign is optional: a start time is always in the past, as ``kcat -o s@`` and
  Kafka's ``--by-duration`` take it).

:func:`describe_timestamp_ms` says what was parsed, for the commands' stderr line.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Sequence

__all__ = [
    "TIMESTAMP_HELP",
    "TIMESTAMP_OPTIONS",
    "describe_timestamp_ms",
    "format_timestamp_ms",
    "join_relative_times",
    "parse_timestamp_ms",
]

#: The options that take a timestamp (see :func:`join_relative_times`).
TIMESTAMP_OPTIONS = frozenset({"--from-timestamp", "--time"})

#: The accepted forms, for the commands' ``--help``.
TIMESTAMP_HELP = (
    "ms since the epoch, ISO-8601 (a time without a zone is UTC, as printed), or a duration "
    "into the past: -1h, 30m, -2d, 90s"
)

# Milliseconds per unit of a relative time. No months or years: their lengths vary.
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_RELATIVE = re.compile(r"-?(\d+)(ms|s|m|h|d|w)", re.ASCII)


def join_relative_times(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--time -1h`` written ``--time=-1h``.

    argparse takes a value that starts with ``-`` and is not a plain negative number for an
    option, so ``--from-timestamp -1h`` would fail with "expected one argument"; joined to its
    option, the value is unambiguous. Only the options in :data:`TIMESTAMP_OPTIONS` followed by
    a relative time are joined; everything after ``--`` is left alone.
    """
    joined: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--":
            joined.extend(argv[index:])
            break
        following = argv[index + 1] if index + 1 < len(argv) else None
        if (token in TIMESTAMP_OPTIONS and following is not None
                and following.startswith("-") and _RELATIVE.fullmatch(following)):
            joined.append(f"{token}={following}")
            index += 2
            continue
        joined.append(token)
        index += 1
    return joined


def parse_timestamp_ms(text: str, *, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch for ``text`` (one of the module docstring's forms).

    ``now_ms`` is the instant relative times count back from (default: the wall clock).

    Raises:
        ValueError: none of the accepted forms, or an instant before 1970; the message says
            which forms are accepted.
    """
    text = text.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    relative = _RELATIVE.fullmatch(text)
    if relative is not None:
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        millis = now - int(relative.group(1)) * _UNIT_MS[relative.group(2)]
        if millis < 0:
            raise ValueError(f"timestamp {text!r} is before 1970-01-01T00:00:00Z")
        return millis
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"timestamp {text!r} is none of: milliseconds since the epoch, an ISO-8601 "
            "date-time, a duration into the past (e.g. 1763800000000, 2026-11-22T09:00:00Z, "
            "2026-11-22 09:00 (UTC), -1h, 30m, -2d, 90s)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)  # UTC, as format_timestamp_ms prints
    millis = (moment - _EPOCH) // dt.timedelta(milliseconds=1)
    if millis < 0:
        raise ValueError(f"timestamp {text!r} is before 1970-01-01T00:00:00Z")
    return millis


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def format_timestamp_ms(millis: int) -> str:
    """ISO-8601 in UTC with milliseconds, or ``-`` for Kafka's "no timestamp" (-1)."""
    if millis < 0:
        return "-"
    moment = _EPOCH + dt.timedelta(milliseconds=millis)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def describe_timestamp_ms(millis: int) -> str:
    """``2026-11-26T10:00:00.000Z (1764151200000 ms)``: the instant a timestamp was read as."""
    return f"{format_timestamp_ms(millis)} ({millis} ms)"
