"""The record-level encoder and decoder on their own: sizes, nulls, headers, positions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records import CorruptRecordError, Record
from stratalog.records.record import (
    decode_records,
    encode_record,
    encoded_record_size,
    walk_records,
)

FIELDS = st.one_of(st.none(), st.binary(max_size=20_000))
HEADERS = st.lists(
    st.tuples(
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
        st.one_of(st.none(), st.binary(max_size=300)),
    ),
    max_size=5,
).map(tuple)


@given(
    offset_delta=st.integers(0, 2**31 - 1),
    timestamp_delta=st.integers(-(2**63), 2**63 - 1),
    key=FIELDS,
    value=FIELDS,
    headers=HEADERS,
)
def test_encode_size_and_decode_agree(offset_delta, timestamp_delta, key, value, headers):
    out = bytearray(b"prefix")
    written = encode_record(out, offset_delta, timestamp_delta, key, value, headers)
    assert written == len(out) - 6
    assert encoded_record_size(offset_delta, timestamp_delta, key, value, headers) == written
    data = bytes(out[6:])
    assert decode_records(data, 1, 100, 1000) == [
        Record(100 + offset_delta, 1000 + timestamp_delta, key, value, headers)
    ]
    walk = walk_records(data, 1)
    assert (walk.count, walk.first_offset_delta, walk.last_offset_delta) == (
        1,
        offset_delta,
        offset_delta,
    )
    assert walk.min_timestamp_delta == walk.max_timestamp_delta == timestamp_delta
    assert walk.has_null_key == (key is None)
    assert walk.offset_deltas_contiguous == (offset_delta == 0)


def test_timestamp_override_replaces_every_timestamp():
    out = bytearray()
    encode_record(out, 0, 5, None, b"a")
    encode_record(out, 1, -5, None, b"b")
    records = decode_records(bytes(out), 2, 0, 100, timestamp_override=7)
    assert [r.timestamp for r in records] == [7, 7]


def test_records_are_immutable_and_hashable():
    record = Record(1, 2, b"k", None, (("h", b"v"),))
    with pytest.raises(AttributeError):
        record.offset = 5  # type: ignore[misc]
    assert hash(record) == hash(Record(1, 2, b"k", None, (("h", b"v"),)))
    decoded = decode_records(_encoded(b"k"), 1, 1, 2)[0]
    assert decoded == Record(1, 2, b"k", b"v") and hash(decoded) == hash(Record(1, 2, b"k", b"v"))
    with pytest.raises(AttributeError):
        decoded.value = b"other"  # type: ignore[misc]


def _encoded(key: bytes | None) -> bytes:
    out = bytearray()
    encode_record(out, 0, 0, key, b"v")
    return bytes(out)


def test_invalid_utf8_header_key_decodes_with_replacement_as_java_does():
    out = bytearray()
    encode_record(out, 0, 0, None, None, (("k", b"v"),))
    data = bytearray(out)
    data[data.index(b"k")] = 0xFF  # not UTF-8
    assert decode_records(bytes(data), 1, 0, 0)[0].headers == (("\ufffd", b"v"),)


def test_lone_surrogate_header_key_is_refused_when_encoding():
    with pytest.raises(UnicodeEncodeError):
        encode_record(bytearray(), 0, 0, None, None, (("\ud800", None),))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("00 00 00 01 01 02", "invalid header count 1 with 0 bytes left"),  # count past the end
        ("00 00 00 01 01 02 01 00", "invalid header key length -1"),  # null header key
        ("00 00 00 01 01 02 00 03 00", "invalid header value length -2"),
        ("00 00 00 01 01 02 00 04 00", "header value length 2 runs past"),
        ("00 00 00 01 05", "invalid value length -3"),
        ("00 00 00 40 01 00", "key length 32 runs past"),
    ],
)
def test_malformed_records_name_the_problem(body, message):
    raw = bytes.fromhex(body)
    region = bytes([len(raw) * 2]) + raw  # one-byte varint length
    for decode in (lambda: decode_records(region, 1, 0, 0), lambda: walk_records(region, 1)):
        with pytest.raises(CorruptRecordError, match=message):
            decode()


def test_missing_and_truncated_records_are_told_apart():
    one = _encoded(None)
    with pytest.raises(CorruptRecordError, match=r"record 1 .*missing: the batch declares 2"):
        decode_records(one, 2, 0, 0)
    with pytest.raises(CorruptRecordError, match=r"record 1 .*missing"):
        walk_records(one, 2)
    with pytest.raises(CorruptRecordError, match=r"record 0 \(at records position 0\)"):
        decode_records(one[:-1], 1, 0, 0)
