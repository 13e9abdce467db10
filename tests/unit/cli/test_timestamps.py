"""Command-line timestamps: milliseconds or ISO-8601, local time when no zone is given."""

from __future__ import annotations

import datetime as dt

import pytest

from stratalog.cli.timestamps import format_timestamp_ms, parse_timestamp_ms


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


def test_a_time_without_zone_is_local_time():
    local = dt.datetime(2026, 11, 22, 9, 0).astimezone()
    assert parse_timestamp_ms("2026-11-22T09:00") == int(local.timestamp() * 1000)


@pytest.mark.parametrize("text", ["yesterday", "-5", "12:00 tomorrow", "", "1969-12-31T00:00Z"])
def test_rejects_what_it_cannot_read_with_the_accepted_forms(text):
    with pytest.raises(ValueError, match="timestamp"):
        parse_timestamp_ms(text)


def test_format_round_trips_and_shows_no_timestamp_as_dash():
    assert format_timestamp_ms(1795338000250) == "2026-11-22T09:00:00.250Z"
    assert parse_timestamp_ms(format_timestamp_ms(1795338000250)) == 1795338000250
    assert format_timestamp_ms(-1) == "-"
