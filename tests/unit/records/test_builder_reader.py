"""BatchBuilder and the reader: golden vectors, round trips, summaries and Kafka's rejections."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stratalog.records import (
    BatchBuilder,
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    TimestampType,
    build_batch,
    decode_batch,
    iter_batches,
    iter_records,
    summarize_records,
    validate_batch,
)
from stratalog.records.batch import (
    rewrite_crc,
    set_base_offset,
    set_log_append_time,
    set_producer_state,
)
from stratalog.records.record import encode_record
from stratalog.records.varint import varint_bytes

# docs/kafka-behaviours.md#records golden vectors (all with partition leader epoch 0).
TEST_VALUE = bytes.fromhex(
    "00000000000000000000003c0000000002ce68b28d0000000000000000018bcfe568000000018bcfe568"
    "00ffffffffffffffffffffffffffff000000011400000001087465737400"
)
HELLO_WORLD = bytes.fromhex(
    "0000000000000000000000420000000002eae98244000000000000000001a0a4b7f0d4000001a0a4b7f0d4"
    "ffffffffffffffffffffffffffff00000001200000000a68656c6c6f0a776f726c6400"
)
TWO_RECORDS = bytes.fromhex(
    "00000000000000000000004a0000000002d1f723ec0000000000010000018bcfe568000000018bcfe56805"
    "ffffffffffffffffffffffffffff0000000216000000010a68656c6c6f0018000a02026b0a746865726500"
)


def test_golden_vectors_build_byte_for_byte():
    assert build_batch([(1700000000000, None, b"test", ())], partition_leader_epoch=0) == (
        TEST_VALUE
    )
    builder = BatchBuilder(partition_leader_epoch=0)
    assert builder.append(1789469913300, b"hello", b"world") == 0
    assert builder.build() == HELLO_WORLD
    two = BatchBuilder(partition_leader_epoch=0)
    assert two.append(1700000000000, None, b"hello") == 0
    assert two.append(1700000000005, b"k", b"there") == 1
    assert two.records_count == 2
    assert two.build() == TWO_RECORDS


def test_golden_vectors_decode():
    header, records = decode_batch(TWO_RECORDS)
    assert header.crc == 0xD1F723EC
    assert records == [
        Record(0, 1700000000000, None, b"hello"),
        Record(1, 1700000000005, b"k", b"there"),
    ]
    assert list(iter_records(HELLO_WORLD)) == [Record(0, 1789469913300, b"hello", b"world")]
    assert decode_batch(TEST_VALUE)[1] == [Record(0, 1700000000000, None, b"test")]


@pytest.mark.parametrize(
    ("value", "size"), [(b"a", 69), (b"42", 70), (b"test", 72), (b"hello", 73)]
)
def test_single_record_batch_sizes_match_the_reference(value, size):
    batch = build_batch([(0, None, value, ())])
    assert len(batch) == size
    assert BatchBuilder().estimated_size_bytes == 61
    builder = BatchBuilder()
    builder.append(0, None, value)
    assert builder.estimated_size_bytes == size  # exact when uncompressed


def test_header_fields_from_builder_arguments():
    batch = build_batch(
        [(10, b"a", b"1", ()), (5, b"b", b"2", ()), (30, b"c", b"3", ())],
        base_offset=1000,
        partition_leader_epoch=7,
        producer_id=42,
        producer_epoch=3,
        base_sequence=99,
        is_transactional=True,
        compression=Compression.GZIP,
    )
    header, records = decode_batch(batch)
    assert header.base_offset == 1000 and header.partition_leader_epoch == 7
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 99)
    assert header.is_transactional and not header.is_control
    assert header.compression is Compression.GZIP
    assert (header.base_timestamp, header.max_timestamp) == (10, 30)  # first, max
    assert (header.last_offset_delta, header.records_count) == (2, 3)
    assert [(r.offset, r.timestamp) for r in records] == [(1000, 10), (1001, 5), (1002, 30)]


def test_producer_state_set_after_the_records_equals_it_given_up_front():
    # What an idempotent producer does: append first, learn the base sequence when draining.
    records = [(10, b"a", b"1", ()), (30, None, b"2", ())]
    expected = build_batch(records, producer_id=42, producer_epoch=3, base_sequence=99,
                           is_transactional=True, compression=Compression.LZ4)
    builder = BatchBuilder(is_transactional=True, compression=Compression.LZ4)
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, headers)
    builder.set_producer_state(42, 3, 99)
    built = builder.build()
    assert built == expected
    # Restamped in place (a resend under a new producer id, sequences from 0): CRC still valid.
    patched = bytearray(built)
    set_producer_state(patched, 0, len(patched), 7, 0, 2**31 - 1)
    header, decoded = decode_batch(bytes(patched))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 0, 2**31 - 1)
    assert header.is_transactional and decoded == decode_batch(built)[1]
    assert patched[61:] == built[61:]


def test_empty_builder_refuses_to_build():
    with pytest.raises(ValueError, match="empty record batch"):
        BatchBuilder().build()
    with pytest.raises(ValueError):
        build_batch([])


def test_timestamp_delta_outside_int64_is_a_programmer_error():
    builder = BatchBuilder()
    builder.append(-(2**62), None, None)
    with pytest.raises(ValueError, match="outside int64"):
        builder.append(2**62, None, None)
    header, records = decode_batch(builder.build())  # the failed append left no trace
    assert header.max_timestamp == -(2**62) and len(records) == 1
    with pytest.raises(ValueError, match="outside int64"):
        BatchBuilder().append(2**63, None, None)


def test_build_is_repeatable_and_appending_continues():
    builder = BatchBuilder()
    builder.append(1, b"k", b"v")
    first = builder.build()
    assert builder.build() == first
    builder.append(2, None, None)
    header, records = decode_batch(builder.build())
    assert header.records_count == 2 and records[1] == Record(1, 2, None, None)


def test_log_append_time_gives_every_record_the_max_timestamp():
    batch = bytearray(build_batch([(100, None, b"a", ()), (200, None, b"b", ())]))
    set_base_offset(batch, 0, 50)
    set_log_append_time(batch, 0, len(batch), 999)
    header, records = decode_batch(batch)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [(r.offset, r.timestamp) for r in records] == [(50, 999), (51, 999)]
    summary = summarize_records(batch)
    assert (summary.min_timestamp, summary.max_timestamp) == (999, 999)
    assert summary.offset_of_max_timestamp == 50
    built = build_batch([(5, None, b"x", ())], timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert decode_batch(built)[0].timestamp_type is TimestampType.LOG_APPEND_TIME


def test_headers_and_nulls_round_trip():
    headers = (("", b""), ("ключ", None), ("dup", b"1"), ("dup", b"2"))
    batch = build_batch([(-5, b"", None, headers), (2**40, None, b"", ())])
    records = decode_batch(batch)[1]
    assert records[0] == Record(0, -5, b"", None, headers)
    assert records[1] == Record(1, 2**40, None, b"")


def test_summary_of_a_client_batch():
    builder = BatchBuilder(compression=Compression.LZ4)
    builder.append(50, b"a", b"1")
    builder.append(70, None, b"2", (("h", b"v"),))
    builder.append(60, b"c", b"3")
    summary = summarize_records(builder.build())
    assert summary.count == 3
    assert (summary.min_timestamp, summary.max_timestamp) == (50, 70)
    assert summary.offset_of_max_timestamp == 1
    assert summary.last_offset == 2
    assert summary.has_null_key
    assert summary.offset_deltas_contiguous
    assert summary.records_size_bytes == builder.uncompressed_records_bytes


def _batch_with_records(
    region: bytes, count: int, *, last_offset_delta: int | None = None
) -> bytearray:
    """A batch around a hand-made records region, with a valid CRC."""
    template = bytearray(build_batch([(0, None, b"x", ())]))
    batch = template[:61] + region
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    batch[57:61] = count.to_bytes(4, "big", signed=True)
    if last_offset_delta is not None:
        batch[23:27] = last_offset_delta.to_bytes(4, "big", signed=True)
    rewrite_crc(batch, 0, len(batch))
    return batch


def _record(offset_delta: int, value: bytes = b"v") -> bytes:
    out = bytearray()
    encode_record(out, offset_delta, 0, None, value)
    return bytes(out)


def test_bytes_left_over_after_the_declared_records_are_corrupt():
    batch = _batch_with_records(_record(0) + _record(1), count=1)
    with pytest.raises(CorruptRecordError, match="remain after the 1 declared records"):
        decode_batch(batch)
    with pytest.raises(CorruptRecordError, match="remain after"):
        summarize_records(batch)


def test_fewer_records_than_declared_are_corrupt():
    batch = _batch_with_records(_record(0), count=3, last_offset_delta=2)
    with pytest.raises(CorruptRecordError, match="declares 3 records"):
        decode_batch(batch)
    with pytest.raises(CorruptRecordError, match="declares 3 records"):
        summarize_records(batch)


def test_record_length_not_consumed_exactly_is_corrupt():
    good = _record(0, b"abc")
    longer = varint_bytes(len(good) - 1 + 1) + good[1:] + b"\x00"  # length says one more byte
    with pytest.raises(CorruptRecordError, match="consumed"):
        decode_batch(_batch_with_records(longer, count=1))
    shorter = varint_bytes(len(good) - 2) + good[1:]  # length one short of the fields
    with pytest.raises(CorruptRecordError):
        decode_batch(_batch_with_records(shorter, count=1))


def test_negative_header_count_is_corrupt():
    body = b"\x00" + b"\x00" + b"\x00" + b"\x01" + b"\x02v" + varint_bytes(-1)
    region = varint_bytes(len(body)) + body
    with pytest.raises(CorruptRecordError, match="invalid header count -1"):
        decode_batch(_batch_with_records(region, count=1))
    with pytest.raises(CorruptRecordError, match="invalid header count -1"):
        summarize_records(_batch_with_records(region, count=1))


@pytest.mark.parametrize("field_length", [-2, -100])
def test_negative_key_length_other_than_null_is_corrupt(field_length):
    body = b"\x00\x00\x00" + varint_bytes(field_length) + b"\x02v\x00"
    region = varint_bytes(len(body)) + body
    with pytest.raises(CorruptRecordError, match="invalid key length"):
        decode_batch(_batch_with_records(region, count=1))


def test_negative_records_count_is_corrupt():
    with pytest.raises(CorruptRecordError, match="-1 records"):
        decode_batch(_batch_with_records(b"", count=-1))


def test_empty_batch_after_compaction_decodes_to_nothing():
    batch = _batch_with_records(b"", count=0, last_offset_delta=4)
    assert decode_batch(batch)[1] == []
    summary = summarize_records(batch, require_contiguous_offsets=False)
    assert (summary.count, summary.min_timestamp, summary.last_offset) == (0, -1, -1)


def test_summary_requires_contiguous_offsets_for_client_batches():
    gappy = _batch_with_records(_record(0) + _record(2), count=2, last_offset_delta=2)
    with pytest.raises(InvalidRecordError, match=r"not 0\.\.1 in order"):
        summarize_records(gappy)
    summary = summarize_records(gappy, require_contiguous_offsets=False)
    assert not summary.offset_deltas_contiguous and summary.last_offset == 2
    # A compacted batch like this one still decodes: gaps are legal in a log.
    assert [r.offset for r in decode_batch(gappy)[1]] == [0, 2]
    mismatched = _batch_with_records(_record(0) + _record(1), count=2, last_offset_delta=5)
    with pytest.raises(InvalidRecordError, match="last_offset_delta 5"):
        summarize_records(mismatched)


def test_crc_is_verified_unless_disabled():
    batch = bytearray(TWO_RECORDS)
    batch[-2] ^= 0x01  # inside the last value: still structurally valid
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batch(batch)
    with pytest.raises(CorruptRecordError, match="CRC"):
        summarize_records(batch)
    records = decode_batch(batch, verify_crc=False)[1]
    assert records[1].value != b"there"


def test_decompression_limit_is_enforced():
    batch = build_batch([(0, None, b"\x00" * 100_000, ())], compression=Compression.ZSTD)
    assert len(batch) < 200
    with pytest.raises(CorruptRecordError, match=r"position 0: zstd .* more than 1000 bytes"):
        decode_batch(batch, max_decompressed_bytes=1000)
    with pytest.raises(CorruptRecordError, match="decompression limit"):
        summarize_records(batch, max_decompressed_bytes=1000)
    assert decode_batch(batch, max_decompressed_bytes=100_100)[1][0].value == b"\x00" * 100_000


def test_iter_batches_over_a_concatenation():
    batches = [
        build_batch([(i, b"k", b"v%d" % i, ())], base_offset=i, compression=codec)
        for i, codec in enumerate(Compression)
    ]
    buf = b"".join(batches)
    decoded = list(iter_batches(buf))
    assert [h.base_offset for h, _ in decoded] == [0, 1, 2, 3, 4]
    assert [h.compression for h, _ in decoded] == list(Compression)
    assert [rs[0].value for _, rs in decoded] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert [h.position for h, _ in decoded] == [sum(map(len, batches[:i])) for i in range(5)]
    assert list(iter_batches(b"")) == []


@pytest.mark.parametrize("tail", [1, 11, 12, 17, 60, 61, 70])
def test_iter_batches_partial_tail(tail):
    buf = TWO_RECORDS + HELLO_WORLD[:tail]
    with pytest.raises(CorruptRecordError, match="partial record batch at position 86"):
        list(iter_batches(buf))
    decoded = list(iter_batches(buf, allow_partial_tail=True))
    assert [h.position for h, _ in decoded] == [0]


def test_iter_batches_tail_rules_follow_kafka():
    # 17 bytes or fewer are a partial tail whatever their length field says ...
    tiny = (0).to_bytes(8, "big") + (5).to_bytes(4, "big") + b"\x00" * 5
    assert [h.position for h, _ in iter_batches(TWO_RECORDS + tiny, allow_partial_tail=True)] == [0]
    # ... but a whole "batch" of 18 bytes is too small to be one, and corrupt.
    small = (0).to_bytes(8, "big") + (6).to_bytes(4, "big") + b"\x00\x00\x00\x00\x02\x00"
    with pytest.raises(CorruptRecordError, match="position 86"):
        list(iter_batches(TWO_RECORDS + small, allow_partial_tail=True))


def test_iter_batches_rejects_corruption_after_good_batches():
    bad = bytearray(HELLO_WORLD)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="position 86"):
        list(iter_batches(TWO_RECORDS + bytes(bad), allow_partial_tail=True))


def test_reading_at_a_position_inside_a_larger_buffer():
    buf = b"\xee" * 5 + HELLO_WORLD + b"\xee" * 3
    header, records = decode_batch(memoryview(buf), 5)
    assert header.position == 5 and records[0].value == b"world"
    assert summarize_records(bytearray(buf), 5).count == 1


# --- Hypothesis round trips --------------------------------------------------------------------

KEYS_VALUES = st.one_of(st.none(), st.binary(max_size=300))
HEADERS = st.lists(
    st.tuples(
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),  # no lone surrogates
        st.one_of(st.none(), st.binary(max_size=40)),
    ),
    max_size=4,
).map(tuple)
TIMESTAMPS = st.integers(-(2**40), 2**45) | st.sampled_from(
    [-1, 0, 2**61, -(2**61)]
)  # deltas fit int64
RECORDS = st.lists(
    st.tuples(TIMESTAMPS, KEYS_VALUES, KEYS_VALUES, HEADERS), min_size=1, max_size=40
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=RECORDS,
    codec=st.sampled_from(list(Compression)),
    timestamp_type=st.sampled_from(list(TimestampType)),
    base_offset=st.integers(0, 2**62),
)
def test_round_trip_every_codec_and_timestamp_type(records, codec, timestamp_type, base_offset):
    batch = build_batch(
        records, compression=codec, timestamp_type=timestamp_type, base_offset=base_offset
    )
    header, decoded = decode_batch(batch)
    assert validate_batch(batch) == header
    assert header.compression is codec and header.timestamp_type is timestamp_type
    assert header.records_count == len(records) == header.last_offset_delta + 1
    assert header.base_timestamp == records[0][0]
    assert header.max_timestamp == max(r[0] for r in records)
    expected_timestamps = [
        header.max_timestamp if timestamp_type is TimestampType.LOG_APPEND_TIME else r[0]
        for r in records
    ]
    assert decoded == [
        Record(base_offset + i, ts, key, value, tuple(headers))
        for i, ((_, key, value, headers), ts) in enumerate(
            zip(records, expected_timestamps, strict=True)
        )
    ]
    summary = summarize_records(batch)
    assert summary.count == len(records)
    assert summary.min_timestamp == min(expected_timestamps)
    assert summary.max_timestamp == max(expected_timestamps)
    assert summary.has_null_key == any(r[1] is None for r in records)
    first_max = expected_timestamps.index(max(expected_timestamps))
    assert summary.offset_of_max_timestamp == base_offset + first_max


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_long_varints_take_the_slow_paths(codec):
    # 3-byte lengths (values over 8 KiB), offset deltas past 8191 and timestamp deltas of every
    # size: the decoders' inline fast paths cover 1 and 2 bytes only.
    builder = BatchBuilder(compression=codec)
    big = bytes(range(256)) * 80  # 20 KiB
    timestamps = [0, -1, 8191, -8193, 2**20, -(2**35), 2**50]
    for i in range(9000):
        key = big if i == 8500 else None
        value = big if i in (0, 8999) else b"%d" % i
        builder.append(timestamps[i % len(timestamps)], key, value)
    header, records = decode_batch(builder.build())
    assert header.last_offset_delta == 8999
    assert len(records) == 9000 and records[-1].offset == 8999
    assert records[0].value == big and records[8999].value == big and records[8500].key == big
    assert [r.timestamp for r in records[:7]] == timestamps
    assert records[8200].value == b"8200"
    summary = summarize_records(builder.build())
    assert (summary.min_timestamp, summary.max_timestamp) == (-(2**35), 2**50)
    assert summary.offset_of_max_timestamp == 6


@pytest.mark.parametrize("codec", list(Compression))
def test_estimated_size_is_an_upper_bound(codec):
    builder = BatchBuilder(compression=codec)
    for i in range(200):
        builder.append(i, os.urandom(8), os.urandom(i * 10), (("h", os.urandom(5)),))
        if i % 37 == 0:
            assert len(builder.build()) <= builder.estimated_size_bytes
    assert len(builder.build()) <= builder.estimated_size_bytes
