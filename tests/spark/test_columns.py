"""Stored batches to Arrow columns (what every read task runs), without Spark or a server."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from stratalog.records import (
    BatchBuilder,
    Compression,
    ControlRecordType,
    CorruptRecordError,
    TimestampType,
    iter_batches,
)
from stratalog.records.accel import decode_columns_reference as _decode_columns_reference
from stratalog.records.control import encode_control_key
from stratalog.spark import arrow_schema, read_schema
from stratalog.spark.columns import RecordColumns, decode_columns

TS = 1_700_000_000_000


def batch(base_offset: int, count: int, *, compression=Compression.NONE,
          timestamp_type=TimestampType.CREATE_TIME, headers=()) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, compression=compression,
                           timestamp_type=timestamp_type)
    for i in range(count):
        offset = base_offset + i
        builder.append(TS + offset, None if offset % 3 == 0 else f"k{offset}".encode(),
                       None if offset == 7 else f"value-{offset}".encode() * 3, headers)
    return builder.build()


def control_batch(base_offset: int) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, is_control=True, is_transactional=True,
                           producer_id=1, producer_epoch=0)
    builder.append(TS, encode_control_key(ControlRecordType.COMMIT), b"\x00\x00\x00\x00\x00\x00")
    return builder.build()


LOG = b"".join([
    batch(0, 5),
    control_batch(5),
    batch(6, 4, compression=Compression.GZIP, headers=[("h", b"1"), ("n", None)]),
    batch(10, 2, compression=Compression.ZSTD, timestamp_type=TimestampType.LOG_APPEND_TIME),
    batch(12, 2, compression=Compression.SNAPPY),
    batch(14, 2, compression=Compression.LZ4),
])


def expected_rows(from_offset=0, until_offset=None):
    rows = []
    for header, records in iter_batches(LOG):
        if header.is_control:
            continue
        for r in records:
            if r.offset >= from_offset and (until_offset is None or r.offset < until_offset):
                rows.append((r.key, r.value, r.offset, r.timestamp * 1000,
                             int(header.timestamp_type), [{"key": k, "value": v}
                                                          for k, v in r.headers]))
    return rows


def arrow_rows(table: pa.RecordBatch) -> list[tuple]:
    data = table.to_pydict()
    timestamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    return [
        (data["key"][i], data["value"][i], data["offset"][i], timestamps[i],
         data["timestampType"][i], data["headers"][i])
        for i in range(table.num_rows)
    ]


def test_every_codec_control_batches_skipped_and_log_append_time():
    columns = RecordColumns("t", 3, include_headers=True)
    walk = columns.append_batches(LOG, 0, 0, None, source="test")
    assert (walk.position, walk.next_offset, walk.done, walk.end) == (len(LOG), 16, False, True)
    result = columns.to_arrow()
    assert len(columns) == 0  # emptied
    assert result.schema.equals(arrow_schema(True))
    assert result.schema.equals(to_arrow_schema(read_schema(True), timezone="UTC"))
    assert arrow_rows(result) == expected_rows()
    assert set(result.column("topic").to_pylist()) == {"t"}
    assert set(result.column("partition").to_pylist()) == {3}
    assert result.column("offset").to_pylist() == [0, 1, 2, 3, 4, *range(6, 16)]
    # LogAppendTime records carry the batch's max timestamp and type 1.
    types = dict(zip(result.column("offset").to_pylist(),
                     result.column("timestampType").to_pylist(), strict=True))
    assert types[10] == types[11] == 1 and types[9] == types[12] == 0


def test_offset_range_is_trimmed_and_the_walk_stops_at_its_end():
    columns = RecordColumns("t", 0, include_headers=False)
    walk = columns.append_batches(LOG, 0, 3, 11, source="test")
    assert walk.done and walk.next_offset == 12
    result = columns.to_arrow()
    assert result.schema.equals(arrow_schema(False))
    assert result.column("offset").to_pylist() == [3, 4, 6, 7, 8, 9, 10]
    assert [r[:5] for r in arrow_rows_no_headers(result)] == [
        r[:5] for r in expected_rows(3, 11)]


def arrow_rows_no_headers(table: pa.RecordBatch) -> list[tuple]:
    data = table.to_pydict()
    timestamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    return [(data["key"][i], data["value"][i], data["offset"][i], timestamps[i],
             data["timestampType"][i]) for i in range(table.num_rows)]


def test_records_max_and_resuming():
    columns = RecordColumns("t", 0, include_headers=False)
    walk = columns.append_batches(LOG, 0, 0, None, source="test", records_max=5)
    assert len(columns) == 5 and not walk.done and not walk.end
    first = columns.to_arrow()
    rest_walk = columns.append_batches(LOG, walk.position, walk.next_offset, None, source="t")
    rest = columns.to_arrow()
    assert rest_walk.end
    assert first.column("offset").to_pylist() + rest.column("offset").to_pylist() == [
        0, 1, 2, 3, 4, *range(6, 16)]


def test_partial_tail_and_corruption_name_the_source():
    torn = LOG + batch(16, 3)[:40]
    columns = RecordColumns("t", 0, include_headers=False)
    walk = columns.append_batches(torn, 0, 0, None, source="seg.log")
    assert walk.end and walk.position == len(LOG) and len(columns) == 15
    with pytest.raises(CorruptRecordError, match=f"seg.log: partial record batch at position "
                                                 f"{len(LOG)}"):
        RecordColumns("t", 0, False).append_batches(torn, 0, 0, None, source="seg.log",
                                                     partial_tail_ok=False)
    broken = bytearray(LOG)
    broken[80] ^= 0x01
    with pytest.raises(CorruptRecordError, match=r"fetch X: record batch at position 0 .*CRC"):
        RecordColumns("t", 0, False).append_batches(bytes(broken), 0, 0, None, source="fetch X")
    # Batches wholly before the range are skipped unchecked (the scan to a task's start).
    columns = RecordColumns("t", 0, False)
    columns.append_batches(bytes(broken), 0, 5, None, source="fetch X")
    assert columns.to_arrow().column("offset").to_pylist()[0] == 6


def at_offset(batch_bytes: bytes, base_offset: int) -> bytes:
    """``batch_bytes`` (one batch) moved to ``base_offset`` (outside the CRC)."""
    moved = bytearray(batch_bytes)
    struct.pack_into(">q", moved, 0, base_offset)
    return bytes(moved)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@pytest.mark.parametrize("decoder", ["arrow buffers", "python lists"])
def test_timestamps_past_int64_are_wrapped_and_those_spark_cannot_hold_are_null(
    monkeypatch, batch_with_timestamp_delta, decoder
):
    # The probe's records of issue 13 (base + delta leaves int64), which Kafka's reader wraps
    # to 64 bits, and a record Spark's microseconds cannot hold though int64 can: each gets a
    # null timestamp, and the read goes on. It used to fail with CorruptRecordError.
    from stratalog.records import accel
    from stratalog.spark import columns as module

    monkeypatch.setattr(module, "_decode_arrow",
                        accel.decode_arrow if decoder == "arrow buffers" else None)
    huge = BatchBuilder(base_offset=3)
    huge.append(2**62, None, b"huge")
    log = b"".join([
        batch(0, 1),
        at_offset(batch_with_timestamp_delta(INT64_MIN + 1, -5), 1),  # wraps to 2^63 - 4
        at_offset(batch_with_timestamp_delta(INT64_MAX - 1, 5), 2),  # wraps to -2^63 + 3
        huge.build(),
        batch(4, 1),
    ])
    columns = RecordColumns("t", 0, False)
    columns.append_batches(log, 0, 0, None, source="test")
    table = columns.to_arrow()
    table.validate(full=True)
    assert table.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("value").to_pylist()[1:4] == [b"v", b"v", b"huge"]
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [
        TS * 1000, None, None, None, (TS + 4) * 1000]


def test_reference_decoder_equals_the_codec_decoder():
    for header, _ in iter_batches(LOG):
        if header.compression != Compression.NONE:
            continue
        region = LOG[header.position + 61 : header.end_position]
        args = (region, header.records_count, header.base_offset, header.base_timestamp, None)
        assert tuple(_decode_columns_reference(*args)) == tuple(decode_columns(*args))


@pytest.mark.parametrize("include_headers", [True, False])
@pytest.mark.parametrize("bounds", [(0, None), (3, 11), (7, 8), (13, 100)])
def test_arrow_buffers_and_python_lists_give_the_same_batch(monkeypatch, include_headers, bounds):
    # With the C codec the records go straight into Arrow buffers; without it, into lists that
    # pyarrow converts. Both must give equal batches (nulls, every codec, ranges, headers).
    from stratalog.records import accel
    from stratalog.spark import columns as module

    assert module._decode_arrow is (accel.decode_arrow if accel.ACCELERATED else None)

    def read() -> pa.RecordBatch:
        columns = RecordColumns("t", 1, include_headers=include_headers)
        columns.append_batches(LOG, 0, bounds[0], bounds[1], source="test")
        return columns.to_arrow()

    monkeypatch.setattr(module, "_decode_arrow", accel.decode_arrow)
    from_buffers = read()
    monkeypatch.setattr(module, "_decode_arrow", None)
    from_lists = read()
    from_buffers.validate(full=True)
    assert from_buffers.equals(from_lists)
    assert from_buffers.num_rows == len([
        o for o in [0, 1, 2, 3, 4, *range(6, 16)]
        if o >= bounds[0] and (bounds[1] is None or o < bounds[1])
    ])
