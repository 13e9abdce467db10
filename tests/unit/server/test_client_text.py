"""server/client_text.py: client strings escaped and cut in logs, cut to bytes in statuses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stratalog.server.client_text import LOGGED_CHARS_MAX, clip_utf8, loggable


def test_a_newline_cannot_start_a_log_line_of_its_own() -> None:
    shown = loggable("orders\n2026-01-01 INFO fake line\x1b[2J")
    assert "\n" not in shown and "\x1b" not in shown
    assert shown == repr("orders\n2026-01-01 INFO fake line\x1b[2J")


def test_a_long_string_is_cut_and_its_length_said() -> None:
    shown = loggable("x" * (256 * 1024))
    assert len(shown) < LOGGED_CHARS_MAX + 30
    assert shown.endswith("…(262144 chars)")
    assert loggable("short") == "'short'"


@given(st.text(max_size=3000), st.integers(min_value=8, max_value=2000))
def test_loggable_is_bounded_and_one_line(text: str, chars_max: int) -> None:
    shown = loggable(text, chars_max)
    assert len(shown) <= chars_max + 30
    assert "\n" not in shown and "\r" not in shown


@given(st.text(max_size=3000), st.integers(min_value=3, max_value=2000))
def test_clip_utf8_fits_and_keeps_whole_characters(text: str, bytes_max: int) -> None:
    clipped = clip_utf8(text, bytes_max)
    assert len(clipped.encode()) <= bytes_max
    if len(text.encode()) <= bytes_max:
        assert clipped == text
    else:
        assert clipped.endswith("…") and text.startswith(clipped[:-1])
