"""Segments written by a real Kafka broker decode completely, and agree with kafka-python."""

from __future__ import annotations

import pytest
from kafka.record.memory_records import MemoryRecords

from stratalog.records import BatchBuilder, iter_batches, summarize_records

# From the fixtures' README: (base offset, records, max timestamp) per batch.
EXPECTED = {
    "metadata-a-00000000000000000000.log": [(0, 1, 1726045943832), (1, 3, 1726045957397)],
    "metadata-b-00000000000000000001.log": [(1, 1, 1726045943832), (2, 2, 1726045957397)],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_kafka_written_segments_decode(kafka_written_dir, name):
    data = (kafka_written_dir / name).read_bytes()
    decoded = list(iter_batches(data))  # CRCs verified, no partial tail allowed
    assert [(h.base_offset, h.records_count, h.max_timestamp) for h, _ in decoded] == (
        EXPECTED[name]
    )
    for header, records in decoded:
        assert [r.offset for r in records] == list(range(header.base_offset, header.next_offset))
        assert all(r.timestamp == header.max_timestamp for r in records)
        # KRaft metadata records: null keys, values starting with frame version 1.
        assert all(r.key is None and r.value[:1] == b"\x01" for r in records)
        summary = summarize_records(data, header.position)
        assert (summary.count, summary.max_timestamp) == (
            header.records_count,
            header.max_timestamp,
        )
    assert decoded[-1][0].end_position == len(data)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_kafka_written_segments_agree_with_kafka_python(kafka_written_dir, name):
    data = (kafka_written_dir / name).read_bytes()
    theirs = MemoryRecords(data)
    expected = []
    while theirs.has_next():
        batch = theirs.next_batch()
        assert batch.validate_crc()
        expected.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)
    ours = [(r.offset, r.timestamp, r.key, r.value) for _, rs in iter_batches(data) for r in rs]
    assert ours == expected


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rebuilding_kafka_written_batches_gives_the_same_bytes(kafka_written_dir, name):
    # Uncompressed v2 leaves no freedom in the encoding: re-encoding Kafka's records with the
    # same header fields must reproduce Kafka's bytes exactly, CRC included.
    data = (kafka_written_dir / name).read_bytes()
    rebuilt = bytearray()
    for header, records in iter_batches(data):
        builder = BatchBuilder(
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
        )
        for record in records:
            builder.append(record.timestamp, record.key, record.value, record.headers)
        rebuilt += builder.build()
    assert bytes(rebuilt) == data
