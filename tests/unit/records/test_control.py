"""Control records: the reference golden record, marker batches, and malformed keys/values."""

from __future__ import annotations

import pytest
from aiokafka.record.control_record import ControlRecord as AioControlRecord

from stratalog.records import (
    BatchBuilder,
    ControlRecordType,
    CorruptRecordError,
    EndTransactionMarker,
    InvalidRecordError,
    decode_batch,
    decode_control_key,
)
from stratalog.records.control import encode_control_key
from stratalog.records.record import encode_record

# docs/kafka-behaviours.md#record-batch: COMMIT with coordinator epoch 100, offset/timestamp
# delta 0.
GOLDEN_COMMIT_RECORD = bytes.fromhex("2000000008000000010c00000000006400")


def test_golden_commit_record():
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 100)
    assert marker.encode_key() == bytes.fromhex("00000001")
    assert marker.encode_value() == bytes.fromhex("000000000064")
    out = bytearray()
    encode_record(out, 0, 0, marker.encode_key(), marker.encode_value())
    assert bytes(out) == GOLDEN_COMMIT_RECORD


def test_marker_batch_round_trip():
    marker = EndTransactionMarker(ControlRecordType.ABORT, 7)
    builder = BatchBuilder(
        base_offset=40, producer_id=1234, producer_epoch=5, is_transactional=True, is_control=True
    )
    builder.append(1700000000000, marker.encode_key(), marker.encode_value())
    batch = builder.build()
    header, records = decode_batch(batch)
    assert header.attributes == 0x30 and header.is_control and header.is_transactional
    assert decode_control_key(records[0].key) == (0, ControlRecordType.ABORT)
    assert EndTransactionMarker.decode(records[0].key, records[0].value) == marker
    # aiokafka's control record parser agrees on the key.
    parsed = AioControlRecord.parse(records[0].key)
    assert (parsed.version, parsed.type_) == (0, ControlRecordType.ABORT)


@pytest.mark.parametrize("control_type", list(ControlRecordType))
def test_every_control_key(control_type):
    assert decode_control_key(encode_control_key(control_type)) == (0, control_type)


def test_newer_versions_and_unknown_types_are_read_like_kafka():
    # Kafka reads the fields it knows and ignores bytes a newer version appends.
    assert decode_control_key(bytes.fromhex("0001000100ff")) == (1, ControlRecordType.COMMIT)
    assert decode_control_key(bytes.fromhex("00000063")) == (0, 99)
    marker = EndTransactionMarker.decode(bytes.fromhex("00000000"), bytes.fromhex("000100000009aa"))
    assert marker == EndTransactionMarker(ControlRecordType.ABORT, 9)


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00"])
def test_short_keys_are_corrupt(key):
    with pytest.raises(CorruptRecordError, match="control record key"):
        decode_control_key(key)


def test_bad_marker_values_and_types():
    key = encode_control_key(ControlRecordType.COMMIT)
    with pytest.raises(CorruptRecordError, match="value is null"):
        EndTransactionMarker.decode(key, None)
    with pytest.raises(CorruptRecordError, match="5 bytes"):
        EndTransactionMarker.decode(key, b"\x00" * 5)
    with pytest.raises(InvalidRecordError, match="not an end transaction marker"):
        EndTransactionMarker.decode(
            encode_control_key(ControlRecordType.LEADER_CHANGE), b"\x00" * 6
        )
    with pytest.raises(InvalidRecordError, match="version -1"):
        decode_control_key(b"\xff\xff\x00\x01")
    with pytest.raises(InvalidRecordError, match="marker version -2"):
        EndTransactionMarker.decode(key, b"\xff\xfe\x00\x00\x00\x01")
    with pytest.raises(ValueError):
        EndTransactionMarker(ControlRecordType.SNAPSHOT_HEADER, 1)
