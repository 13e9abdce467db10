"""Batch header view: golden vectors from the reference, the Kafka-written fixtures, patches."""

from __future__ import annotations

import struct
import zlib

import pytest

from stratalog.records import batch
from stratalog.records.batch import (
    BatchHeader,
    Compression,
    TimestampType,
    iter_batch_headers,
    parse_header,
    rewrite_crc,
    set_base_offset,
    set_log_append_time,
    validate_batch,
)
from stratalog.records.crc import crc32c
from stratalog.records.errors import CorruptRecordError, InvalidRecordError

# docs/kafka-behaviours.md#records: key="hello", value="world", ts 1789469913300, CRC 0xeae98244.
HELLO_WORLD = bytes.fromhex(
    "0000000000000000000000420000000002eae98244000000000000000001a0a4b7f0d4000001a0a4b7f0d4"
    "ffffffffffffffffffffffffffff00000001200000000a68656c6c6f0a776f726c6400"
)
# Two records, base ts 1700000000000, max ts 1700000000005, CRC 0xd1f723ec.
TWO_RECORDS = bytes.fromhex(
    "00000000000000000000004a0000000002d1f723ec0000000000010000018bcfe568000000018bcfe56805"
    "ffffffffffffffffffffffffffff0000000216000000010a68656c6c6f0018000a02026b0a746865726500"
)


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283


def test_golden_header_fields():
    header = validate_batch(TWO_RECORDS)
    assert header.size_bytes == 86 == len(TWO_RECORDS)
    assert header.crc == 0xD1F723EC
    assert header.last_offset_delta == 1
    assert header.records_count == 2
    assert (header.base_timestamp, header.max_timestamp) == (1700000000000, 1700000000005)
    assert header.compression is Compression.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert validate_batch(HELLO_WORLD).crc == 0xEAE98244


def test_kafka_written_fixtures_have_valid_crcs(kafka_written_dir):
    expected = {
        "metadata-a-00000000000000000000.log": [(0, 1, 1726045943832), (1, 3, 1726045957397)],
        "metadata-b-00000000000000000001.log": [(1, 1, 1726045943832), (2, 2, 1726045957397)],
    }
    for name, batches in expected.items():
        data = (kafka_written_dir / name).read_bytes()
        headers = list(iter_batch_headers(data))
        assert [(h.base_offset, h.records_count, h.max_timestamp) for h in headers] == batches
        for h in headers:
            assert validate_batch(data, h.position) == h
        assert headers[-1].end_position == len(data)


def test_crc_mismatch_names_position_and_both_values():
    corrupt = bytearray(TWO_RECORDS)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=r"position 0 .*stored 0xd1f723ec"):
        validate_batch(bytes(corrupt))


@pytest.mark.parametrize("cut", [0, 1, 16, 60, 61, 85])
def test_truncated_batch_is_corrupt(cut):
    with pytest.raises(CorruptRecordError):
        validate_batch(TWO_RECORDS[:cut])


def test_bad_magic_is_invalid():
    bad = bytearray(TWO_RECORDS)
    bad[16] = 1
    with pytest.raises(InvalidRecordError, match="magic 1"):
        parse_header(bytes(bad))


def test_patches_keep_crc_valid():
    buf = bytearray(TWO_RECORDS)
    set_base_offset(buf, 0, 1234)
    assert validate_batch(buf).base_offset == 1234  # base offset is outside the CRC
    set_log_append_time(buf, 0, len(buf), 1800000000000)
    header = validate_batch(buf)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 1800000000000
    buf[30] ^= 1
    with pytest.raises(CorruptRecordError):
        validate_batch(buf)
    rewrite_crc(buf, 0, len(buf))
    validate_batch(buf)


# ---------------------------------------------------------------- the layout, written once


def test_field_offsets_are_kafkas():
    # DefaultRecordBatch: BASE_OFFSET_OFFSET 0, LENGTH 8, PARTITION_LEADER_EPOCH 12, MAGIC 16,
    # CRC 17, ATTRIBUTES 21, ..., MAX_TIMESTAMP 35, ..., RECORDS_COUNT 57, overhead 61.
    assert (
        batch.BASE_OFFSET_OFFSET, batch.LENGTH_OFFSET, batch.PARTITION_LEADER_EPOCH_OFFSET,
        batch.MAGIC_OFFSET, batch.CRC_OFFSET, batch.ATTRIBUTES_OFFSET,
        batch.MAX_TIMESTAMP_OFFSET, batch.RECORDS_COUNT_OFFSET, batch.RECORD_BATCH_OVERHEAD,
    ) == (0, 8, 12, 16, 17, 21, 35, 57, 61)
    assert (batch.LOG_OVERHEAD, batch.HEADER_SIZE_UP_TO_MAGIC, batch.MIN_SIZE_FIELD) == (12, 17, 14)
    assert batch.HEADER.size == 61
    assert BatchHeader._fields[:-1] == tuple(name for name, _ in batch._FIELDS)


def test_scan_fields_read_what_the_full_header_reads():
    header = validate_batch(TWO_RECORDS)
    scanned = dict(zip(batch.SCAN_FIELD_NAMES, batch.SCAN_FIELDS.unpack_from(TWO_RECORDS),
                       strict=True))
    assert scanned == {name: getattr(header, name) for name in batch.SCAN_FIELD_NAMES}
    assert batch.SCAN_FIELDS.size == 61
    assert batch.LENGTH_FIELD.unpack_from(TWO_RECORDS, batch.LENGTH_OFFSET) == (74,)
    assert batch.BASE_OFFSET_FIELD.unpack_from(TWO_RECORDS, 0) == (0,)


def test_header_struct_skips_the_fields_not_named():
    assert batch.header_struct("crc", "records_count").unpack_from(TWO_RECORDS) == (
        0xD1F723EC, 2
    )
    with pytest.raises(ValueError, match="not a field"):
        batch.header_struct("size")
    with pytest.raises(ValueError, match="layout order"):
        batch.header_struct("crc", "magic")


# ---------------------------------------------------------------- framing rules


def test_check_framing_whole_partial_and_each_error():
    assert batch.check_framing(TWO_RECORDS, 0, 86) is True
    assert batch.check_framing(TWO_RECORDS, 0, 85) is False  # runs past the end: partial
    two = HELLO_WORLD + TWO_RECORDS
    assert batch.check_framing(two, 78, 78 + 86) is True
    # A buffer holding the log from position 1000 on: positions are the log's.
    assert batch.check_framing(TWO_RECORDS, 1000, 1086, buf_start=1000) is True
    tiny = bytearray(TWO_RECORDS)
    tiny[8:12] = (13).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match=r"record size 13 at position 1000 of x\.log"):
        batch.check_framing(bytes(tiny), 1000, 1005, buf_start=1000, where="x.log")
    old = bytearray(TWO_RECORDS)
    old[16] = 1
    with pytest.raises(InvalidRecordError, match="position 0 has magic 1"):
        batch.check_framing(bytes(old), 0, 86)
    assert batch.check_framing(bytes(old), 0, 80) is False  # past the end comes first
    short = bytearray(TWO_RECORDS[:42])
    short[8:12] = (30).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="declares 42 bytes, less than the 61-byte"):
        batch.check_framing(bytes(short), 0, 42)


def test_parse_header_and_iteration_give_the_framing_rules_messages():
    old = bytearray(TWO_RECORDS)
    old[16] = 1
    with pytest.raises(InvalidRecordError) as parsed:
        parse_header(bytes(old))
    with pytest.raises(InvalidRecordError) as walked:
        list(iter_batch_headers(bytes(old)))
    assert str(parsed.value) == str(walked.value)


def test_iteration_stops_at_the_end_of_the_buffer_when_end_is_past_it():
    assert [h.position for h in iter_batch_headers(TWO_RECORDS, 0, 10_000)] == [0]


def test_legacy_messages_are_recognised_by_their_zlib_crc():
    body = struct.pack(">bbqii", 1, 0, 1700000000000, -1, 1) + b"x"
    legacy = struct.pack(">qiI", 6, 4 + len(body), zlib.crc32(body)) + body
    assert batch.is_intact_legacy_message(legacy)
    assert not batch.is_intact_legacy_message(legacy[:-1] + b"y")
    assert not batch.is_intact_legacy_message(TWO_RECORDS)  # magic 2
    assert not batch.is_intact_legacy_message(legacy[:17])


def test_set_max_timestamp_sets_the_type_bit_either_way():
    buf = bytearray(TWO_RECORDS)
    batch.set_max_timestamp(buf, 0, len(buf), TimestampType.LOG_APPEND_TIME, 1800000000000)
    assert validate_batch(buf).timestamp_type is TimestampType.LOG_APPEND_TIME
    batch.set_max_timestamp(buf, 0, len(buf), TimestampType.CREATE_TIME, 1700000000007)
    header = validate_batch(buf)
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.max_timestamp == 1700000000007
