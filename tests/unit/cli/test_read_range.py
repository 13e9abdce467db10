"""``consume --from``/``-o``: every form of kcat's ``-o``, resolved to one start and a stop."""

from __future__ import annotations

import pytest

from stratalog.cli.read_range import ReadRange, read_range
from stratalog.cli.timestamps import parse_timestamp_ms


@pytest.mark.parametrize(
    ("wheres", "expected"),
    [
        (None, ReadRange(start="earliest")),
        (["beginning"], ReadRange(start="earliest")),
        (["EARLIEST"], ReadRange(start="earliest")),
        (["end"], ReadRange(start="latest")),
        (["latest"], ReadRange(start="latest")),
        (["42"], ReadRange(start=42)),
        (["-10"], ReadRange(start="latest", tail_records=10)),
        (["-0"], ReadRange(start="latest", tail_records=0)),
        (["s@1763800000000"], ReadRange(start_timestamp_ms=1763800000000)),
        (["e@1763800000000"], ReadRange(start="earliest", end_timestamp_ms=1763800000000)),
        # kcat's pair, in either order, and a stop with any start.
        (["s@1000", "e@2000"], ReadRange(start_timestamp_ms=1000, end_timestamp_ms=2000)),
        (["e@2000", "s@1000"], ReadRange(start_timestamp_ms=1000, end_timestamp_ms=2000)),
        (["-5", "e@2000"], ReadRange(start="latest", tail_records=5, end_timestamp_ms=2000)),
        (["s@2026-11-22T09:00Z"],
         ReadRange(start_timestamp_ms=parse_timestamp_ms("2026-11-22T09:00:00Z"))),
    ],
)
def test_each_form_of_kcats_o(wheres, expected):
    assert read_range(wheres, None) == expected


def test_from_timestamp_is_a_start_like_s_at():
    assert read_range(None, "1000") == read_range(["s@1000"], None)
    assert read_range(["e@5000"], "1000") == ReadRange(start_timestamp_ms=1000,
                                                       end_timestamp_ms=5000)


@pytest.mark.parametrize(
    ("wheres", "from_timestamp", "words"),
    [
        (["stored"], None, ["'stored'", "earliest|beginning", "-N"]),
        (["+5"], None, ["'+5'"]),
        (["-1h"], None, ["'-1h'"]),  # a duration belongs after s@
        (["s@"], None, ["s@"]),
        (["s@yesterday"], None, ["s@", "yesterday"]),
        (["e@1", "e@2"], None, ["two stop times"]),
        (["5", "earliest"], None, ["two places to start", "'5'", "'earliest'"]),
        (["-3"], "1000", ["two places to start", "--from-timestamp 1000"]),
    ],
)
def test_a_bad_or_doubled_value_names_itself(wheres, from_timestamp, words):
    with pytest.raises(ValueError) as caught:
        read_range(wheres, from_timestamp)
    for word in words:
        assert word in str(caught.value)
