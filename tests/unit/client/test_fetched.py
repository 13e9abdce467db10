"""Client-side decoding of fetched batches (stratalog.client.fetched.decode_fetched).

Every test runs twice: with the Record-based decoder (decode_batch) and with the column path
that the compiled codec enables; for the latter a column decoder made of the pure-Python
``decode_records`` stands in when the compiled one is not built, so the client's plumbing
around it (CRC, decompression, skips, filters) is tested either way.
"""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from stratalog.client import ConsumedBatch, ConsumerRecord, decode_fetched
from stratalog.client import fetched as fetched_module
from stratalog.client.types import AbortedTransaction
from stratalog.records import (
    BatchBuilder,
    Compression,
    ControlRecordType,
    CorruptRecordError,
    EndTransactionMarker,
    Record,
    TimestampType,
)

TS = 1_700_000_000_000


@pytest.fixture(autouse=True, params=["records", "columns"])
def decoder(request, monkeypatch) -> str:
    # Both decode paths of decode_fetched, whichever the codec build would pick: Record objects,
    # and columns (records.reader.decode_batch_columns, C or its pure-Python reference).
    monkeypatch.setattr(fetched_module, "_COLUMNAR", request.param == "columns")
    return request.param


def batch(base_offset: int, count: int, **kwargs: object) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, **kwargs)  # type: ignore[arg-type]
    for i in range(count):
        builder.append(TS + base_offset + i, b"k%d" % (base_offset + i), b"v%d" % (base_offset + i))
    return builder.build()


def marker(offset: int, producer_id: int, kind: ControlRecordType) -> bytes:
    builder = BatchBuilder(
        base_offset=offset, producer_id=producer_id, producer_epoch=0,
        is_transactional=True, is_control=True,
    )
    m = EndTransactionMarker(kind, 0)
    builder.append(TS, m.encode_key(), m.encode_value())
    return builder.build()


def offsets(batches: list[ConsumedBatch]) -> list[int]:
    return [o for b in batches for o in b.offsets]


def test_decodes_every_record_and_next_offset() -> None:
    data = batch(0, 3) + batch(3, 2, compression=Compression.ZSTD) + batch(5, 4)
    batches = decode_fetched("t", 2, data, 0, 9)
    assert offsets(batches) == list(range(9))
    assert [b.next_offset for b in batches] == [3, 5, 9]
    assert all(b.topic == "t" and b.partition == 2 and b.high_watermark == 9 for b in batches)
    first = batches[0]
    assert first.values == [b"v0", b"v1", b"v2"]
    assert first.keys == [b"k0", b"k1", b"k2"]
    assert first.timestamps == [TS, TS + 1, TS + 2]
    assert first.consumer_records()[1] == ConsumerRecord(
        "t", 2, 1, TS + 1, TimestampType.CREATE_TIME, b"k1", b"v1", ()
    )


def test_skips_records_below_the_requested_offset() -> None:
    data = batch(10, 5) + batch(15, 5)
    batches = decode_fetched("t", 0, data, 13, 20)
    assert offsets(batches) == [13, 14, *range(15, 20)]


def test_batches_from_kafka_python_decode() -> None:
    # An independent Kafka implementation's encoder: the same records come back.
    builder = DefaultRecordBatchBuilder(2, 1, False, -1, -1, -1, 1 << 20)  # gzip
    for i in range(4):
        builder.append(i, TS + i, b"key", b"value-%d" % i, [("h", b"x")])
    data = bytes(builder.build())
    (only,) = decode_fetched("t", 0, data, 0, 4)
    assert only.values == [b"value-%d" % i for i in range(4)]
    assert only.headers == [(("h", b"x"),)] * 4


def test_control_batches_are_skipped_but_move_the_position() -> None:
    data = batch(0, 2) + marker(2, 7, ControlRecordType.COMMIT)
    batches = decode_fetched("t", 0, data, 0, 3)
    assert offsets(batches) == [0, 1]
    assert batches[-1].next_offset == 3  # the reader continues after the marker


def test_only_skipped_batches_still_report_next_offset() -> None:
    batches = decode_fetched("t", 0, batch(0, 5), 5, 5)
    assert batches == [] or (len(batches) == 1 and not batches[0].records)
    assert batches[-1].next_offset == 5


def test_read_committed_drops_aborted_transactions() -> None:
    aborted_pid, committed_pid = 11, 22
    data = (
        batch(0, 2, producer_id=aborted_pid, producer_epoch=0, is_transactional=True)
        + batch(2, 2, producer_id=committed_pid, producer_epoch=0, is_transactional=True)
        + marker(4, aborted_pid, ControlRecordType.ABORT)
        + marker(5, committed_pid, ControlRecordType.COMMIT)
        + batch(6, 2, producer_id=aborted_pid, producer_epoch=0, is_transactional=True)
    )
    aborted = [AbortedTransaction(aborted_pid, 0)]
    committed = decode_fetched("t", 0, data, 0, 8, aborted_transactions=aborted,
                               read_committed=True)
    # The aborted producer's first transaction is gone; after its ABORT marker its next
    # (not aborted) transaction is visible again.
    assert offsets(committed) == [2, 3, 6, 7]
    uncommitted = decode_fetched("t", 0, data, 0, 8, aborted_transactions=aborted)
    assert offsets(uncommitted) == [0, 1, 2, 3, 6, 7]


def test_crc_mismatch_raises() -> None:
    data = bytearray(batch(0, 3))
    data[-2] ^= 0x01  # the last value's final byte: b"v2" becomes b"v3"
    with pytest.raises(CorruptRecordError, match=r"(?i)crc"):
        decode_fetched("t", 0, bytes(data), 0, 3)
    # Without the check the flipped value byte is simply read back.
    (only,) = decode_fetched("t", 0, bytes(data), 0, 3, verify_crc=False)
    assert only.values[-1] == b"v3"


def test_partial_tail_is_ignored() -> None:
    whole = batch(0, 3)
    data = whole + batch(3, 3)[:40]
    assert offsets(decode_fetched("t", 0, data, 0, 6)) == [0, 1, 2]


def test_negative_length_is_corrupt() -> None:
    data = bytearray(batch(0, 1))
    data[8:12] = (-5).to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptRecordError, match="t-0: found record size -5"):
        decode_fetched("t", 0, bytes(data), 0, 1)


def test_batch_views_agree() -> None:
    (only,) = decode_fetched("t", 3, batch(0, 4), 0, 4)
    assert len(only) == 4
    assert only.records == [
        Record(i, TS + i, b"k%d" % i, b"v%d" % i, ()) for i in range(4)
    ]
    assert list(only) == only.records
    assert [r.value for r in only.consumer_records()] == only.values
    assert list(only.iter_consumer_records()) == only.consumer_records()
    # From columns (C codec) or from Record values (pure Python): the same ConsumerRecords.
    expected = [
        ConsumerRecord("t", 3, i, TS + i, only.timestamp_type, b"k%d" % i, b"v%d" % i, ())
        for i in range(4)
    ]
    from_records = ConsumedBatch(
        "t", 3, only.timestamp_type, only.next_offset, only.high_watermark, only.records
    )
    for consumed in (only, from_records):
        produced = list(consumed.iter_consumer_records())
        assert produced == expected
        assert all(type(record) is ConsumerRecord for record in produced)
    assert only.headers == [()] * 4
    assert "4 records" in repr(only)


def test_log_append_time_batches_read_the_batch_time() -> None:
    from stratalog.records import set_log_append_time

    data = bytearray(batch(0, 3))
    set_log_append_time(data, 0, len(data), TS + 777)
    (only,) = decode_fetched("t", 0, bytes(data), 0, 3)
    assert only.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert only.timestamps == [TS + 777] * 3
