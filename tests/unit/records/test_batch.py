"""Batch header view: golden vectors from the reference, the Kafka-written fixtures, patches."""

from __future__ import annotations

import pytest

from stratalog.records.batch import (
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

# kafka-storage-reference.md §1.4: key="hello", value="world", ts 1789469913300, CRC 0xeae98244.
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


def test_iteration_stops_at_partial_tail_and_rejects_tiny_size():
    two = TWO_RECORDS + HELLO_WORLD
    assert [h.position for h in iter_batch_headers(two + HELLO_WORLD[:40])] == [0, 86]
    assert [h.position for h in iter_batch_headers(two + b"\x00" * 17)] == [0, 86]
    tiny = bytearray(HELLO_WORLD)
    tiny[8:12] = (13).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="record size 13"):
        list(iter_batch_headers(two + bytes(tiny)))


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
