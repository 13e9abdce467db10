"""server/group_service/offsets_topic.py: the coordinator's records to Kafka's bytes and back, one
Append as one batch, and what a load replays (markers included, undecodable records skipped with
their offset named). The bytes themselves are records/consumer_offsets.py's, tested against
kafka-python there; one worked example here ties the two."""

from __future__ import annotations

import logging

import pytest

from stratalog.records import build_batch
from stratalog.records.batch import NO_PRODUCER_ID
from stratalog.records.control import ControlRecordType, EndTransactionMarker
from stratalog.records.reader import iter_batches
from stratalog.server.group_service.offsets_topic import (
    ReplayItem,
    append_batch,
    decode_group_record,
    encode_group_record,
    replay_items,
    topic_configs,
)
from stratalog.server.groups import (
    Append,
    GroupMetadataRecord,
    GroupMetadataTombstone,
    MemberMetadata,
    OffsetCommitRecord,
    OffsetCommitTombstone,
)


def flat(items: list[ReplayItem]) -> list[tuple[int | None, object, int, bool]]:
    """The items with each run of commit rows spelled out as the records they are:
    ``(offset, record, producer_id, committed)``, a tombstone row's offset None (a row
    keeps the offset of a commit only, which is all the store needs)."""
    out: list[tuple[int | None, object, int, bool]] = []
    for item in items:
        if item.rows is None:
            out.append((item.offset, item.record, item.producer_id, item.committed))
            continue
        assert item.record is None and item.rows
        for group_id, (topic, partition), value in item.rows:
            if value is None:
                out.append((None, OffsetCommitTombstone(group_id, topic, partition),
                            item.producer_id, False))
            else:
                out.append((value.record_offset, OffsetCommitRecord(
                    group_id, topic, partition, value.offset, value.leader_epoch,
                    value.metadata, value.commit_timestamp_ms, value.expire_timestamp_ms),
                    item.producer_id, False))
    return out


RECORDS = [
    OffsetCommitRecord("g", "t", 3, 100, 5, "meta", 1_700_000_000_000),
    OffsetCommitRecord("g", "t", 4, 7, -1, "", 1_700_000_000_001, expire_timestamp_ms=9),
    OffsetCommitTombstone("g", "t", 3),
    GroupMetadataRecord("g", "consumer", 4, "range", "m-1", 1_700_000_000_002, (
        MemberMetadata("m-1", "i-1", "client", "10.0.0.1", 60_000, 10_000, b"sub", b"asg"),
        MemberMetadata("m-2", None, "client", "10.0.0.2", 60_000, 10_000, b"s2", b""),
    )),
    GroupMetadataRecord("e", "", 0, None, None, 5),
    GroupMetadataTombstone("g"),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips(record: object) -> None:
    key, value = encode_group_record(record)  # type: ignore[arg-type]
    assert (value is None) == isinstance(record, OffsetCommitTombstone | GroupMetadataTombstone)
    assert decode_group_record(key, value) == record


def test_an_offset_commit_is_written_as_kafka_writes_it() -> None:
    # records/consumer_offsets.py's worked example (Kafka's OffsetCommitKey type 1 and
    # OffsetCommitValue version 3): group "g", topic "t", partition 0, offset 100.
    key, value = encode_group_record(OffsetCommitRecord("g", "t", 0, 100, -1, "", 1700000000000))
    assert key == bytes.fromhex("0001 0001 67 0001 74 00000000")
    assert value == bytes.fromhex("0003 0000000000000064 ffffffff 0000 0000018bcfe56800")


def test_one_append_is_one_batch_in_order() -> None:
    batch = append_batch(Append(0, tuple(RECORDS)), 1234)
    [(header, records)] = list(iter_batches(batch))
    assert (header.producer_id, header.is_transactional, header.is_control) == (
        NO_PRODUCER_ID, False, False)
    assert [r.timestamp for r in records] == [1234] * len(RECORDS)
    assert [decode_group_record(r.key, r.value) for r in records] == RECORDS


def test_a_load_replays_records_and_markers_and_skips_what_does_not_decode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = append_batch(Append(0, tuple(RECORDS[:2])), 1)
    # A second batch at offset 2: a key of an unknown record type, then a good record.
    bad = build_batch([(1, b"\x00\x63garbage", b"x", ()),
                       (1, *encode_group_record(RECORDS[2]), ())], base_offset=2)
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 0)
    control = build_batch([(1, marker.encode_key(), marker.encode_value(), ())], base_offset=4,
                          producer_id=7, producer_epoch=0, is_transactional=True,
                          is_control=True)
    with caplog.at_level(logging.WARNING):
        items = list(replay_items(good + bad + control, "__consumer_offsets-0"))
    assert flat(items) == [
        (0, RECORDS[0], NO_PRODUCER_ID, False),
        (1, RECORDS[1], NO_PRODUCER_ID, False),
        (None, RECORDS[2], NO_PRODUCER_ID, False),
        (4, None, 7, True),
    ]
    # One item per run of commits: the good batch's two, the tombstone after the bad record.
    assert [(i.offset, len(i.rows or ())) for i in items] == [(0, 2), (3, 1), (4, 0)]
    assert "__consumer_offsets-0: skipping the record at offset 2" in caplog.text


def test_a_load_stops_before_the_end_offset_inside_a_batch() -> None:
    batch = append_batch(Append(0, tuple(RECORDS[:3])), 1)
    second = build_batch([(1, *encode_group_record(RECORDS[3]), ())], base_offset=3)
    items = list(replay_items(batch + second, "__consumer_offsets-0", end_offset=2))
    assert flat(items) == [(0, RECORDS[0], NO_PRODUCER_ID, False),
                           (1, RECORDS[1], NO_PRODUCER_ID, False)]
    items = list(replay_items(batch + second, "__consumer_offsets-0", end_offset=3))
    assert len(flat(items)) == 3
    assert flat(list(replay_items(batch + second, "__consumer_offsets-0", end_offset=0))) == []


def test_a_load_skips_a_batch_failing_its_crc_and_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = append_batch(Append(0, (RECORDS[0],)), 1)
    damaged = bytearray(build_batch(
        [(1, *encode_group_record(RECORDS[1]), ()), (1, *encode_group_record(RECORDS[2]), ())],
        base_offset=1))
    damaged[-1] ^= 0xFF  # the last byte of the last record's value: the CRC fails
    last = build_batch([(1, *encode_group_record(RECORDS[3]), ())], base_offset=3)
    with caplog.at_level(logging.WARNING):
        items = list(replay_items(first + bytes(damaged) + last, "__consumer_offsets-0"))
    assert flat(items) == [(0, RECORDS[0], NO_PRODUCER_ID, False),
                           (3, RECORDS[3], NO_PRODUCER_ID, False)]
    assert ("__consumer_offsets-0: skipping the batch at offsets 1-2, which does not decode"
            in caplog.text)
    assert "CRC" in caplog.text


def test_the_topic_is_compacted_with_its_segment_bytes() -> None:
    assert topic_configs(1 << 20) == {"cleanup.policy": "compact", "segment.bytes": "1048576"}


def test_a_transactional_append_is_a_transactional_batch_of_its_producer() -> None:
    append = Append(3, tuple(RECORDS[:2]), producer_id=42, producer_epoch=7)
    [(header, _)] = list(iter_batches(append_batch(append, 1, base_sequence=5)))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 7, 5)
    assert header.is_transactional and not header.is_control
    items = list(replay_items(append_batch(append, 1, base_sequence=5), "__consumer_offsets-0"))
    assert [(record, producer_id) for _, record, producer_id, _ in flat(items)] == [
        (r, 42) for r in RECORDS[:2]]


def test_a_load_decodes_every_record_type_as_decode_group_record_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # replay_items reads offset commits as rows (offset_commit_rows), everything else through
    # decode_group_record: the two must agree on every kind of record, tombstones and value
    # version 1 (an expiry timestamp) included; a commit whose value is cut short, and a
    # record without a key, are skipped, named by offset.
    key, value = encode_group_record(RECORDS[0])
    assert value is not None
    batch = build_batch([(1, *encode_group_record(r), ()) for r in RECORDS]
                        + [(1, key, value[:-3], ()), (1, None, b"v", ())], base_offset=10)
    with caplog.at_level(logging.WARNING):
        items = list(replay_items(batch, "__consumer_offsets-3"))
    assert [record for _, record, _, _ in flat(items)] == RECORDS
    assert [type(record) for _, record, _, _ in flat(items)] == [type(r) for r in RECORDS]
    assert [offset for offset, _, _, _ in flat(items)] == [10, 11, None, 13, 14, 15]
    for offset in (10 + len(RECORDS), 11 + len(RECORDS)):
        assert f"__consumer_offsets-3: skipping the record at offset {offset}" in caplog.text
