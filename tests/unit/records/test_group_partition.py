"""partition_for_group: Java's String.hashCode and Kafka's Utils.abs, bit for bit."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records.group_partition import java_abs, java_string_hash, partition_for_group


def reference_hash(text: str) -> int:
    """String.hashCode as its Javadoc defines it, s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code
    units, summed exactly and cut to a signed int32 at the end (the module folds per step)."""
    units = struct.unpack(f">{len(text.encode('utf-16-be', 'surrogatepass')) // 2}H",
                          text.encode("utf-16-be", "surrogatepass"))
    total = sum(unit * 31 ** (len(units) - 1 - i) for i, unit in enumerate(units))
    return struct.unpack(">i", struct.pack(">I", total % 2**32))[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("foo", 101574),  # GroupCoordinatorServiceTest.testPartitionFor's group
        ("hello", 99162322),
        ("Aa", 2112),  # the classic collision: "Aa" and "BB" hash alike
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # outside the BMP: two UTF-16 surrogates
    ],
)
def test_java_string_hash_of_known_strings(text, expected):
    assert java_string_hash(text) == expected
    assert reference_hash(text) == expected


@given(st.text(max_size=64))
def test_java_string_hash_matches_the_reference(text):
    assert java_string_hash(text) == reference_hash(text)


def test_utils_abs_maps_integer_min_value_to_zero():
    assert java_abs(-(2**31)) == 0
    assert java_abs(-5) == 5
    assert java_abs(2**31 - 1) == 2**31 - 1


def test_partition_for_group_as_kafka():
    # Utils.abs("foo".hashCode()) % 10, the expression of Kafka's test.
    assert partition_for_group("foo", 10) == 101574 % 10
    assert partition_for_group("foo", 50) == 101574 % 50
    assert partition_for_group("polygenelubricants", 50) == 0  # not -(2**31) % 50
    # A negative hash: Math.abs first, then %, so the partition is never negative.
    negative = "my-group"
    assert java_string_hash(negative) < 0
    assert partition_for_group(negative, 50) == -java_string_hash(negative) % 50


@given(st.text(max_size=32), st.integers(min_value=1, max_value=1000))
def test_partition_is_in_range(group_id, partitions):
    assert 0 <= partition_for_group(group_id, partitions) < partitions


def test_partitions_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        partition_for_group("g", 0)
