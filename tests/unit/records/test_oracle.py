"""Independent oracles: kafka-python's and aiokafka's record codecs read our batches and we
read theirs, for every codec.

kafka-python (pure Python) uses python-lz4 and zstandard for lz4/zstd, and python-snappy for
snappy, which is not installed; for snappy its own xerial framing code runs over raw snappy
blocks from cramjam (`_cramjam_as_python_snappy`), so the framing under test is still theirs.
aiokafka (compiled) uses cramjam for every codec, including its own lz4 frame writer.
"""

from __future__ import annotations

import types

import cramjam
import pytest
from aiokafka.record.default_records import (
    DefaultRecordBatch as AioBatch,
)
from aiokafka.record.default_records import (
    DefaultRecordBatchBuilder as AioBuilder,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafka.record.memory_records import MemoryRecords

from stratalog.records import (
    BatchBuilder,
    Compression,
    Record,
    build_batch,
    decode_batch,
    iter_batches,
    summarize_records,
)


@pytest.fixture(autouse=True)
def _cramjam_as_python_snappy(monkeypatch):
    """Give kafka-python's codec module the two raw-block functions it takes from python-snappy."""
    if not kafka_codec.has_snappy():
        shim = types.SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
        )
        monkeypatch.setattr(kafka_codec, "snappy", shim)
    assert kafka_codec.has_snappy() and kafka_codec.has_lz4() and kafka_codec.has_zstd()


KEYS_VALUES = st.one_of(st.none(), st.binary(max_size=200))
HEADERS = st.lists(
    st.tuples(
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=10),
        st.one_of(st.none(), st.binary(max_size=20)),
    ),
    max_size=3,
)
RECORDS = st.lists(
    st.tuples(st.integers(0, 2**42), KEYS_VALUES, KEYS_VALUES, HEADERS), min_size=1, max_size=30
)
CODECS = st.sampled_from(list(Compression))
# Both Python libraries send a batch uncompressed when compression does not shrink it; a
# compressible record keeps their batches on the compressed path we want to read.
COMPRESSIBLE = (0, b"filler", b"abc" * 200, [])
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _as_tuples(kafka_records) -> list[tuple]:
    return [
        (r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers])
        for r in kafka_records
    ]


def _ours_as_tuples(records: list[Record]) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


@SETTINGS
@given(records=RECORDS, codec=CODECS, base_offset=st.integers(0, 2**40))
def test_kafka_python_reads_our_batches(records, codec, base_offset):
    batch = build_batch(
        records,
        compression=codec,
        base_offset=base_offset,
        producer_id=7,
        producer_epoch=1,
        base_sequence=3,
    )
    theirs = KpBatch(bytearray(batch))
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert (theirs.base_offset, theirs.producer_id, theirs.base_sequence) == (base_offset, 7, 3)
    assert theirs.max_timestamp == max(r[0] for r in records)
    assert _as_tuples(theirs) == [
        (base_offset + i, ts, key, value, list(headers))
        for i, (ts, key, value, headers) in enumerate(records)
    ]


@SETTINGS
@given(records=RECORDS, codec=CODECS)
def test_we_read_kafka_python_batches(records, codec):
    records = [*records, COMPRESSIBLE]
    builder = KpBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**30,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    batch = bytes(builder.build())
    header, ours = decode_batch(batch)
    assert header.compression is codec
    assert _ours_as_tuples(ours) == [
        (i, ts, key, value, list(headers)) for i, (ts, key, value, headers) in enumerate(records)
    ]
    assert summarize_records(batch).count == len(records)


@SETTINGS
@given(records=RECORDS, codec=CODECS)
def test_aiokafka_reads_our_batches(records, codec):
    batch = build_batch(records, compression=codec)
    theirs = AioBatch(bytearray(batch))
    assert theirs.validate_crc()
    assert _as_tuples(theirs) == [
        (i, ts, key, value, list(headers)) for i, (ts, key, value, headers) in enumerate(records)
    ]


@SETTINGS
@given(records=RECORDS, codec=CODECS)
def test_we_read_aiokafka_batches(records, codec):
    records = [*records, COMPRESSIBLE]
    builder = AioBuilder(2, codec, 0, -1, -1, -1, 2**30)
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    batch = bytes(builder.build())
    header, ours = decode_batch(batch)
    assert header.compression is codec
    assert _ours_as_tuples(ours) == [
        (i, ts, key, value, list(headers)) for i, (ts, key, value, headers) in enumerate(records)
    ]


def test_uncompressed_bytes_equal_kafka_python_bytes():
    # Without compression the format leaves no freedom: the same records give the same bytes.
    records = [(1700000000000 + i, b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(50)]
    builder = KpBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**30,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    theirs = bytes(builder.build())
    # kafka-python writes partition leader epoch 0 where a fresh batch has none (-1).
    assert build_batch(records, partition_leader_epoch=0) == theirs


def test_memory_records_iterates_our_concatenated_batches():
    batches = [
        build_batch([(i, None, b"v%d" % i, ())], base_offset=i, compression=codec)
        for i, codec in enumerate(Compression)
    ]
    theirs = MemoryRecords(b"".join(batches))
    seen = []
    while theirs.has_next():
        batch = theirs.next_batch()
        seen.extend((r.offset, r.value) for r in batch)
    assert seen == [(i, b"v%d" % i) for i in range(5)]
    assert [h.base_offset for h, _ in iter_batches(b"".join(batches))] == [0, 1, 2, 3, 4]


def test_transactional_control_batch_is_seen_as_control_by_kafka_python():
    builder = BatchBuilder(is_transactional=True, is_control=True, producer_id=5, producer_epoch=2)
    builder.append(123, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x64")
    theirs = KpBatch(bytearray(builder.build()))
    assert theirs.is_control_batch and theirs.is_transactional
    assert theirs.validate_crc()
