"""Timestamps as users type them on the command line: milliseconds or ISO-8601.

``1763800000000`` is taken as milliseconds since the Unix epoch; anything else must be an
ISO-8601 date or date-time (``2026-11-22``, ``2026-11-22T09:00``, ``2026-11-22T09:00:00Z``,
``2026-11-22 09:00:00+01:00``). A date-time without a zone is local time, as ``date`` prints it.
"""

from __future__ import annotations

import datetime as dt

__all__ = ["format_timestamp_ms", "parse_timestamp_ms"]


def parse_timestamp_ms(text: str) -> int:
    """Milliseconds since the epoch for ``text``.

    Raises:
        ValueError: neither a non-negative integer nor an ISO-8601 date-time; the message says
            which forms are accepted.
    """
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"timestamp {text!r} is neither milliseconds since the epoch nor an ISO-8601 "
            "date-time (e.g. 1763800000000, 2026-11-22T09:00:00Z, 2026-11-22 09:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as the user's clock shows it
    millis = int(moment.timestamp() * 1000)
    if millis < 0:
        raise ValueError(f"timestamp {text!r} is before 1970-01-01T00:00:00Z")
    return millis


def format_timestamp_ms(millis: int) -> str:
    """ISO-8601 in UTC with milliseconds, or ``-`` for Kafka's "no timestamp" (-1)."""
    if millis < 0:
        return "-"
    moment = dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
