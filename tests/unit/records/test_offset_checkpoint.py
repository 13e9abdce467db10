"""records.offset_checkpoint: the offset checkpoint text, both ways, as Kafka reads and writes it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records import offset_checkpoint, partition_dirs
from stratalog.records.errors import (
    CorruptOffsetCheckpointError,
    InvalidTopicNameError,
)

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
int64s = st.integers(-(2**63), LONG_MAX)
LEGAL = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
valid_topics = st.text(
    alphabet=LEGAL, min_size=1, max_size=partition_dirs.TOPIC_NAME_LENGTH_MAX
).filter(lambda name: name not in (".", ".."))


# Kafka's example (docs/kafka-behaviours.md#checkpoint-files), byte for byte as Kafka writes it.
KAFKA_EXAMPLE = b"0\n2\norders 0 1234\norders 1 0\n"


def test_file_names_and_version_are_kafkas() -> None:
    assert offset_checkpoint.RECOVERY_POINT_CHECKPOINT_FILE == "recovery-point-offset-checkpoint"
    assert offset_checkpoint.LOG_START_OFFSET_CHECKPOINT_FILE == "log-start-offset-checkpoint"
    assert offset_checkpoint.OFFSET_CHECKPOINT_VERSION == 0


def test_kafkas_example_both_ways() -> None:
    entries = {("orders", 0): 1234, ("orders", 1): 0}
    assert offset_checkpoint.parse_offset_checkpoint(KAFKA_EXAMPLE) == entries
    # Given out of order: lines come out sorted by (topic, partition).
    assert offset_checkpoint.format_offset_checkpoint({("orders", 1): 0, ("orders", 0): 1234}) == KAFKA_EXAMPLE


def test_format_sorts_by_topic_then_partition_numerically() -> None:
    text = offset_checkpoint.format_offset_checkpoint({("b", 10): 1, ("b", 9): 2, ("a", 100): 3})
    assert text == b"0\n3\na 100 3\nb 9 2\nb 10 1\n"
    assert offset_checkpoint.format_offset_checkpoint({}) == b"0\n0\n"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", {}),  # empty file
        (b"0", {}),  # only the version line, no newline
        (b"0\n", {}),  # only the version line
        (b"0\n0\n", {}),
        (b"0\n0", {}),  # no final newline
        (b"0\n1\nt 0 5", {("t", 0): 5}),  # last entry without a newline
        (b"0\r\n1\r\nt 0 5\r\n", {("t", 0): 5}),  # CRLF, as readLine accepts
        (b"0\r1\rt 0 5\r", {("t", 0): 5}),  # lone CR
        (b"0\n1\nt\t0   5\n", {("t", 0): 5}),  # any whitespace run separates fields
        (b"0\n1\nt 0 5  \n", {("t", 0): 5}),  # trailing whitespace (Java drops trailing "")
        (b"+0\n+1\nt +3 -7\n", {("t", 3): -7}),  # parseInt/parseLong accept signs
        (b"0\n2\nt 0 5\nt 0 9\n", {("t", 0): 9}),  # a repeated partition: the last line wins
        (b"0\n1\nt 2147483647 9223372036854775807\n", {("t", 2147483647): 2**63 - 1}),
        (b"0\n1\nt 0 -9223372036854775808\n", {("t", 0): -(2**63)}),
        (b"0\n1\nt 0 0000000000000000000000001\n", {("t", 0): 1}),  # leading zeros parse
        ("0\n1\nt\u00e9 0 1\n".encode(), {("t\u00e9", 0): 1}),  # UTF-8, not validated on read
    ],
)
def test_parses_what_kafka_reads(content: bytes, expected: dict) -> None:
    assert offset_checkpoint.parse_offset_checkpoint(content) == expected
    assert offset_checkpoint.parse_offset_checkpoint(memoryview(content)) == expected


@pytest.mark.parametrize(
    ("content", "line_number", "fragment"),
    [
        (b"1\n0\n", 1, "Unrecognised version 1"),  # version mismatch
        (b"-1\n", 1, "Unrecognised version -1"),
        (b"x\n0\n", 1, "'x' is not a decimal integer"),  # version not an int
        (b"\n0\n", 1, "'' is not a decimal integer"),  # empty first line
        (b" 0\n0\n", 1, "' 0' is not a decimal integer"),  # parseInt takes no spaces
        (b"0\nx\n", 2, "'x' is not a decimal integer"),  # count not an int
        (b"0\n\n", 2, "'' is not a decimal integer"),
        (b"0\n1_0\n", 2, "'1_0' is not a decimal integer"),  # Python's int() would take it
        ("0\n\u0661\n".encode(), 2, "is not a decimal integer"),  # Arabic-Indic one
        (b"0\n-1\n", 2, "the entry count is negative"),
        (b"0\n2147483648\n", 2, "outside"),  # count over a Java int
        (b"0\n1\norders 0\n", 3, "found 2 fields"),  # too few fields
        (b"0\n1\norders 0 1 2\n", 3, "found 4 fields"),  # too many
        (b"0\n1\n orders 0 1\n", 3, "found 4 fields"),  # leading space: Java keeps a leading ""
        (b"0\n1\n\n", 3, "found 1 fields"),  # empty entry line
        (b"0\n1\norders x 1\n", 3, "'x' is not a decimal integer"),  # partition not an int
        (b"0\n1\norders 0 x\n", 3, "'x' is not a decimal integer"),  # offset not a long
        (b"0\n1\norders 2147483648 1\n", 3, "outside"),  # partition over a Java int
        (b"0\n1\norders 0 9223372036854775808\n", 3, "outside"),  # offset over a Java long
        (b"0\n1\norders 0 " + b"9" * 5000 + b"\n", 3, "far too large"),  # no int() blow-up
        (b"0\n2\na 0 1\nb 0 2\nc\n", 5, "found 1 fields"),  # the error names the bad line
    ],
)
def test_malformed_text_names_the_line(content: bytes, line_number: int, fragment: str) -> None:
    with pytest.raises(CorruptOffsetCheckpointError) as info:
        offset_checkpoint.parse_offset_checkpoint(content)
    error = info.value
    assert fragment in str(error)
    assert error.line_number == line_number
    if line_number > 1:
        assert f"line {line_number}" in str(error)
    assert len(str(error)) < 400  # a 5000-digit line is quoted cut short


@pytest.mark.parametrize(
    ("content", "expected", "found"),
    [
        (b"0\n3\na 0 1\nb 0 2\n", 3, 2),  # fewer entries than the count
        (b"0\n1\na 0 1\nb 0 2\n", 1, 2),  # more entries than the count
        (b"0\n1\n", 1, 0),
    ],
)
def test_entry_count_mismatch(content: bytes, expected: int, found: int) -> None:
    with pytest.raises(CorruptOffsetCheckpointError) as info:
        offset_checkpoint.parse_offset_checkpoint(content)
    assert str(info.value) == f"Expected [{expected}] entries, but found [{found}]"
    assert info.value.line_number is None


def test_bytes_that_are_not_utf8() -> None:
    with pytest.raises(CorruptOffsetCheckpointError) as info:
        offset_checkpoint.parse_offset_checkpoint(b"0\n1\nt\xff 0 1\n")
    assert str(info.value) == "not UTF-8 text: byte 5 of 11 is 0xff"
    assert info.value.line_number is None


def test_format_refuses_what_could_not_be_read_back() -> None:
    bad_entries = [
        ({("has space", 0): 1}, InvalidTopicNameError),
        ({("new\nline", 0): 1}, InvalidTopicNameError),
        ({("", 0): 1}, InvalidTopicNameError),
        ({("t", -1): 1}, ValueError),
        ({("t", 2**31): 1}, ValueError),
        ({("t", True): 1}, ValueError),
        ({("t", 0): 2**63}, ValueError),
        ({("t", 0): 1.5}, ValueError),
    ]
    for entries, error in bad_entries:
        with pytest.raises(error):
            offset_checkpoint.format_offset_checkpoint(entries)


@given(
    entries=st.dictionaries(
        st.tuples(valid_topics, st.integers(0, INT_MAX)), int64s, max_size=30
    )
)
def test_checkpoint_text_round_trip(entries: dict) -> None:
    data = offset_checkpoint.format_offset_checkpoint(entries)
    assert offset_checkpoint.parse_offset_checkpoint(data) == entries
    lines = data.decode("utf-8").split("\n")
    # Kafka's layout: version, count, one "<topic> <partition> <offset>" line each, final "\n".
    assert lines[0] == "0"
    assert lines[1] == str(len(entries))
    assert lines[-1] == ""
    assert len(lines) == len(entries) + 3


@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_give_entries_or_a_corrupt_checkpoint_error(data: bytes) -> None:
    try:
        result = offset_checkpoint.parse_offset_checkpoint(data)
    except CorruptOffsetCheckpointError as error:
        assert error.line_number is None or error.line_number >= 1
    else:
        assert isinstance(result, dict)
