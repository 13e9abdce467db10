"""Zig-zag varints: the reference examples, bounds, round trips, and malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records.errors import CorruptRecordError
from stratalog.records.varint import (
    read_unsigned_varint_within,
    read_varint,
    read_varlong,
    size_of_varint,
    size_of_varlong,
    unsigned_varint_bytes,
    varint_bytes,
    varlong_bytes,
    write_varint,
    write_varlong,
)
from stratalog.v1 import broker_pb2

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# docs/kafka-behaviours.md#records.
REFERENCE_EXAMPLES = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (300, "d804"),
]


@pytest.mark.parametrize(("value", "hex_bytes"), REFERENCE_EXAMPLES)
def test_reference_examples(value, hex_bytes):
    for write, read in ((write_varint, read_varint), (write_varlong, read_varlong)):
        out = bytearray()
        write(out, value)
        assert out.hex() == hex_bytes
        assert read(bytes.fromhex(hex_bytes), 0) == (value, len(out))


def test_extremes_take_the_maximum_sizes():
    assert varint_bytes(2**31 - 1).hex() == "feffffff0f"
    assert varint_bytes(-(2**31)).hex() == "ffffffff0f"
    assert size_of_varint(-(2**31)) == 5
    assert varlong_bytes(-(2**63)).hex() == "ffffffffffffffffff01"
    assert size_of_varlong(2**63 - 1) == 10
    assert read_varint(varint_bytes(-(2**31)), 0) == (-(2**31), 5)
    assert read_varlong(varlong_bytes(2**63 - 1), 0) == (2**63 - 1, 10)


def test_out_of_range_values_are_programmer_errors():
    with pytest.raises(ValueError, match="outside int32"):
        varint_bytes(2**31)
    with pytest.raises(ValueError, match="outside int64"):
        varlong_bytes(-(2**63) - 1)
    with pytest.raises(ValueError):
        size_of_varint(-(2**31) - 1)


@given(INT32)
def test_varint_round_trip(value):
    out = bytearray(b"\xaa")  # appending after existing bytes, reading at an offset
    write_varint(out, value)
    assert len(out) - 1 == size_of_varint(value)
    assert read_varint(bytes(out) + b"\xff", 1) == (value, len(out))


@given(INT64)
def test_varlong_round_trip(value):
    out = bytearray()
    write_varlong(out, value)
    assert len(out) == size_of_varlong(value)
    assert read_varlong(memoryview(bytes(out)), 0) == (value, len(out))


@given(INT64)
def test_varint_and_varlong_agree_on_int32(value):
    if -(2**31) <= value < 2**31:
        assert varint_bytes(value) == varlong_bytes(value)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_truncated_varint_names_the_position(data):
    with pytest.raises(CorruptRecordError, match="varint at position 0 is truncated"):
        read_varint(data, 0)


def test_read_past_the_end_is_truncation_not_index_error():
    with pytest.raises(CorruptRecordError, match="position 7"):
        read_varint(b"\x00", 7)
    with pytest.raises(CorruptRecordError, match="truncated"):
        read_varlong(b"\x80" * 9, 0)


def test_over_long_varints_are_rejected():
    with pytest.raises(CorruptRecordError, match="varint at position 1 is too long"):
        read_varint(b"\x00" + b"\x80" * 5 + b"\x00", 1)
    with pytest.raises(CorruptRecordError, match="varlong at position 0 is too long"):
        read_varlong(b"\x80" * 10 + b"\x00", 0)


def test_excess_bits_in_the_last_byte_are_dropped_as_java_does():
    # 5th byte 0x7f carries bits 28-34; Java's int keeps bits 28-31 only.
    assert read_varint(b"\xfe\xff\xff\xff\x7f", 0) == (2**31 - 1, 5)
    assert read_varlong(b"\xff" * 9 + b"\x7f", 0) == (-(2**63), 10)


@given(st.integers(0, 2**64 - 1))
def test_unsigned_varints_are_leb128_as_protobuf_writes_uint64(value: int) -> None:
    # A SessionRequest holding only its id is field 1's tag (08) and the id as a uint64.
    expected = broker_pb2.SessionRequest(id=value).SerializeToString()[1:] if value else b"\x00"
    assert unsigned_varint_bytes(value) == expected


def test_unsigned_varints_refuse_what_is_not_a_uint64() -> None:
    for value in (-1, 2**64):
        with pytest.raises(ValueError, match="out of range"):
            unsigned_varint_bytes(value)


@given(st.integers(0, 2**64 - 1), st.binary(max_size=3))
def test_an_unsigned_varint_within_a_bound_reads_what_was_written(value: int,
                                                                  after: bytes) -> None:
    encoded = unsigned_varint_bytes(value)
    data = b"\x01" + encoded + after
    assert read_unsigned_varint_within(data, 1, len(data)) == (value, 1 + len(encoded))
    # Cut by the bound (not by the buffer's end): truncated, so None, never an IndexError.
    assert read_unsigned_varint_within(data, 1, len(encoded)) is None


def test_an_unsigned_varint_over_ten_bytes_is_none() -> None:
    data = b"\xff" * 10 + b"\x01"
    assert read_unsigned_varint_within(data, 0, len(data)) is None
