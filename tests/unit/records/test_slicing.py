"""slice_batch and find_records: a part of a batch as a batch of its own.

The slice of every (from offset, max records, max bytes) of random batches, plain and
compressed, with producer fields and flags, is read back by kafka-python's reader (the
independent oracle) and compared with the stored batch's records that a reader from that
offset would take; find_records in C and its Python reference agree on valid, random, truncated
and corrupted regions, errors included.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from stratalog.records import (
    BatchBuilder,
    Compression,
    CorruptRecordError,
    TimestampType,
    accel,
    decode_batch,
    parse_header,
    set_log_append_time,
)
from stratalog.records import record as reference
from stratalog.records.batch import CRC_OFFSET, RECORD_BATCH_OVERHEAD
from stratalog.records.slicing import slice_batch

try:
    from stratalog.records import _speedups as c_impl
except ImportError:  # test_accel.py reports a missing extension
    c_impl = None

MAX_DECOMPRESSED = 1 << 26
T0 = 1_700_000_000_000

RECORD = st.tuples(
    st.integers(-5_000, 5_000),  # timestamp offset from T0: deltas may be negative
    st.one_of(st.none(), st.binary(max_size=12)),
    st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=130, max_size=300)),
    st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=6))),
             max_size=2),
)
BATCH = st.fixed_dictionaries({
    "records": st.lists(RECORD, min_size=1, max_size=30),
    "compression": st.sampled_from(list(Compression)),
    "timestamp_type": st.sampled_from(list(TimestampType)),
    "producer": st.one_of(st.none(), st.tuples(st.integers(0, 10**12), st.integers(0, 32767),
                                               st.integers(0, 10**6), st.booleans())),
    "base_offset": st.integers(0, 10**12),
})


def _build(spec: dict) -> bytes:
    kwargs: dict = {"compression": spec["compression"], "timestamp_type": spec["timestamp_type"]}
    if spec["producer"] is not None:
        pid, epoch, sequence, transactional = spec["producer"]
        kwargs.update(producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                      is_transactional=transactional)
    builder = BatchBuilder(**kwargs)
    for ts, key, value, headers in spec["records"]:
        builder.append(T0 + ts, key, value, headers)
    batch = bytearray(builder.build())
    batch[0:8] = spec["base_offset"].to_bytes(8, "big")  # outside the CRC, as the log does
    return bytes(batch)


def _read(data: bytes) -> tuple[DefaultRecordBatch, list[tuple]]:
    """kafka-python's view of a batch; the records of a compressed one (whose codec it may
    lack here) by our reader, which tests/unit/records/test_oracle.py holds to it."""
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    if batch.compression_type:
        records = [(r.offset, r.timestamp, r.key, r.value, list(r.headers))
                   for r in decode_batch(data)[1]]
    else:
        records = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    return batch, records


@settings(max_examples=300, deadline=None)
@given(BATCH, st.integers(0, 40), st.integers(1, 40), st.integers(0, 2_000))
def test_a_slice_is_the_records_a_reader_takes_in_a_valid_batch(spec, skip, max_records,
                                                                 max_bytes):
    stored = _build(spec)
    header = parse_header(stored)
    original, records = _read(stored)
    from_offset = header.base_offset + skip
    sliced = slice_batch(stored, header, from_offset, max_records, max_bytes, MAX_DECOMPRESSED)
    wanted = [r for r in records if r[0] >= from_offset]
    if not wanted:
        assert sliced is None
        return
    batch, got = _read(sliced.data)
    assert 1 <= len(got) <= max_records
    assert got == wanted[:len(got)]
    assert sliced.records_count == len(got)
    if len(got) < min(max_records, len(wanted)):  # stopped by the bytes: past them after one
        assert len(sliced.data) > RECORD_BATCH_OVERHEAD and len(got) >= 1
    if len(got) == len(wanted):
        assert sliced.next_offset == header.next_offset
    else:
        assert sliced.next_offset == got[-1][0] + 1
    # What a READ_COMMITTED reader and an idempotent producer's bookkeeping read: kept.
    for field in ("base_offset", "producer_id", "producer_epoch", "base_sequence",
                  "is_transactional", "is_control_batch", "timestamp_type"):
        assert getattr(batch, field) == getattr(original, field), field
    assert batch.last_offset_delta == got[-1][0] - header.base_offset
    assert batch.max_timestamp == max(r[1] for r in got)
    if len(got) == len(records):
        assert sliced.data == stored  # every record: the stored batch as it is
    else:
        assert batch.compression_type == 0


def test_a_point_read_in_the_middle_of_a_large_batch():
    builder = BatchBuilder(compression=Compression.LZ4)
    for i in range(10_000):
        builder.append(T0 + i, None, b"%08d" % i, [])
    stored = builder.build()
    sliced = slice_batch(stored, parse_header(stored), 6789, 1, 1 << 20, MAX_DECOMPRESSED)
    assert _read(sliced.data)[1] == [(6789, T0 + 6789, None, b"00006789", [])]
    assert len(sliced.data) == RECORD_BATCH_OVERHEAD + 17  # its record alone: 17 bytes
    assert sliced.next_offset == 6790


def test_log_append_time_keeps_the_append_time():
    builder = BatchBuilder()
    for i in range(5):
        builder.append(T0 + i, None, b"v", [])
    stored = bytearray(builder.build())
    set_log_append_time(stored, 0, len(stored), T0 + 999)  # as the log stamps it
    sliced = slice_batch(bytes(stored), parse_header(stored), 2, 2, 100, MAX_DECOMPRESSED)
    batch, records = _read(sliced.data)
    assert [(r[0], r[1]) for r in records] == [(2, T0 + 999), (3, T0 + 999)]
    assert batch.timestamp_type == 1


def test_a_damaged_batch_is_refused_not_re_framed_with_a_fresh_crc():
    builder = BatchBuilder()
    for i in range(5):
        builder.append(T0 + i, None, b"value", [])
    damaged = bytearray(builder.build())
    damaged[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        slice_batch(bytes(damaged), parse_header(damaged), 2, 1, 100, MAX_DECOMPRESSED)
    damaged = bytearray(builder.build())
    damaged[CRC_OFFSET] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        slice_batch(bytes(damaged), parse_header(damaged), 2, 1, 100, MAX_DECOMPRESSED)


# ------------------------------------------------------------------------------------------------
# find_records: C and the Python reference.


def _outcome(function, *args):
    try:
        return ("returned", function(*args))
    except Exception as exc:  # compared, not swallowed
        return ("raised", type(exc), str(exc))


def _region(fields: list[tuple]) -> bytes:
    out = bytearray()
    for offset_delta, timestamp_delta, value in fields:
        reference.encode_record(out, offset_delta, timestamp_delta, None, value, ())
    return bytes(out)


def _assert_same(data: bytes, count: int, args: tuple) -> tuple:
    expected = _outcome(reference.find_records, data, count, *args)
    for buffer in (data, bytearray(data), memoryview(data)):
        assert _outcome(c_impl.find_records, buffer, count, *args) == expected
    if expected[0] == "raised":
        assert expected[1] in (CorruptRecordError, ValueError)
    return expected


FIND_ARGS = st.tuples(st.integers(-3, 40), st.integers(0, 8), st.integers(-1, 600),
                      st.one_of(st.integers(-120, 120), st.integers(-(2**63), 2**63 - 1)))
FIELDS = st.tuples(
    st.one_of(st.integers(0, 100), st.integers(-(2**31), 2**31 - 1)),
    st.one_of(st.integers(-100, 100), st.integers(-(2**63), 2**63 - 1)),
    st.one_of(st.binary(max_size=20), st.binary(min_size=100, max_size=300)),
)


@pytest.mark.skipif(c_impl is None, reason="the C extension is not built")
@settings(max_examples=400, deadline=None)
@given(st.lists(FIELDS, max_size=10), FIND_ARGS)
def test_find_records_agrees_on_valid_regions(fields, args):
    outcome = _assert_same(_region(fields), len(fields), args)
    if outcome[0] == "returned" and outcome[1].count:
        span = outcome[1]
        first = next(f for f in fields if f[0] >= args[0] and f[1] >= args[3])
        assert (span.first_offset_delta, span.max_timestamp_delta >= first[1]) == (first[0], True)


@pytest.mark.skipif(c_impl is None, reason="the C extension is not built")
@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=100), st.integers(-1, 8), FIND_ARGS)
def test_find_records_agrees_on_random_bytes(data, count, args):
    _assert_same(data, count, args)


@pytest.mark.skipif(c_impl is None, reason="the C extension is not built")
@settings(max_examples=100, deadline=None)
@given(st.lists(FIELDS, min_size=1, max_size=4), st.integers(0, 5), st.integers(0, 255))
def test_find_records_agrees_on_every_prefix_and_damage(fields, args_seed, byte):
    data = _region(fields)
    args = (args_seed, 1 + args_seed, 50 * args_seed, args_seed - 2)
    for cut in range(len(data)):
        _assert_same(data[:cut], len(fields), args)
        damaged = bytearray(data)
        damaged[cut] = byte
        _assert_same(bytes(damaged), len(fields), args)


def test_find_records_is_the_accelerated_one_when_built():
    assert accel.find_records is (c_impl.find_records if c_impl and accel.ACCELERATED
                                  else reference.find_records)
