"""Command-line timestamps: milliseconds, ISO-8601 (UTC when no zone is given), relative times."""

from __future__ import annotations

import pytest

from stratalog.cli.timestamps import (
    describe_timestamp_ms,
    format_timestamp_ms,
    parse_timestamp_ms,
)

NOW_MS = 1_795_338_000_000  # 2026-11-22T09:00:00Z


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("1763800000000", 1763800000000),
        ("0", 0),
        ("2026-11-22T09:00:00Z", 1795338000000),
        ("2026-11-22T09:00:00+01:00", 1795334400000),
        ("2026-11-22 09:00:00.250+00:00", 1795338000250),
    ],
)
def test_parses_milliseconds_and_iso(text, millis):
    assert parse_timestamp_ms(text) == millis


@pytest.mark.parametrize("text", ["2026-11-22T09:00", "2026-11-22 09:00:00", "2026-11-22T09"])
def test_a_time_without_zone_is_utc_whatever_the_machines_zone(text, monkeypatch):
    # The issue: read as local time, printed as UTC with Z. Both are UTC now, on any machine.
    monkeypatch.setenv("TZ", "America/New_York")
    import time
    time.tzset()
    try:
        assert parse_timestamp_ms(text) == 1795338000000
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_date_alone_is_midnight_utc():
    assert parse_timestamp_ms("2026-11-22") == 1795305600000


@pytest.mark.parametrize(
    ("text", "ago_ms"),
    [("-1h", 3_600_000), ("1h", 3_600_000), ("30m", 1_800_000), ("-2d", 172_800_000),
     ("90s", 90_000), ("-500ms", 500), ("1w", 604_800_000), ("0s", 0)],
)
def test_relative_times_count_back_from_now(text, ago_ms):
    assert parse_timestamp_ms(text, now_ms=NOW_MS) == NOW_MS - ago_ms


def test_relative_times_default_to_the_wall_clock():
    import time
    before = time.time_ns() // 1_000_000
    parsed = parse_timestamp_ms("-1h")
    after = time.time_ns() // 1_000_000
    assert before - 3_600_000 <= parsed <= after - 3_600_000


@pytest.mark.parametrize(
    "text", ["yesterday", "-5", "12:00 tomorrow", "", "1969-12-31T00:00Z", "+1h", "1y", "-1.5h",
             "1 h", "99999999d"])
def test_rejects_what_it_cannot_read_with_the_accepted_forms(text):
    with pytest.raises(ValueError, match="timestamp"):
        parse_timestamp_ms(text, now_ms=NOW_MS)


def test_format_round_trips_and_shows_no_timestamp_as_dash():
    assert format_timestamp_ms(1795338000250) == "2026-11-22T09:00:00.250Z"
    assert parse_timestamp_ms(format_timestamp_ms(1795338000250)) == 1795338000250
    assert format_timestamp_ms(-1) == "-"


def test_what_was_printed_without_its_zone_is_read_back_as_the_same_instant():
    printed = format_timestamp_ms(1795338000250)
    assert parse_timestamp_ms(printed.removesuffix("Z")) == 1795338000250


def test_describe_names_the_instant_and_its_milliseconds():
    assert describe_timestamp_ms(1764151200000) == "2025-11-26T10:00:00.000Z (1764151200000 ms)"
