"""server.translation: records-form Produce to a batch, stored batches to proto Records within a
byte budget, topic descriptions to messages, timestamp types, and the request-shape error."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from google.rpc import error_details_pb2, status_pb2

from stratalog.records import build_batch
from stratalog.records.batch import Compression, TimestampType, validate_batch
from stratalog.records.control import ControlRecordType, encode_control_key
from stratalog.records.reader import decode_batch
from stratalog.server.rpc.translation import (
    PROTO_TIMESTAMP_TYPES,
    BadRequestError,
    DecodedRecords,
    ProducerFields,
    decode_records_into,
    encode_records,
    topic_message,
)
from stratalog.server.storage.cleaner_manager import CleanerPartitionStatus
from stratalog.server.storage.errors import StorageError
from stratalog.server.storage.log_manager import PartitionDescription, TopicDescription
from stratalog.server.storage.txn_index import AbortedTxn
from stratalog.v1 import broker_pb2


def _record(**fields: object) -> broker_pb2.Record:
    headers = fields.pop("headers", [])
    record = broker_pb2.Record(**fields)
    for key, value in headers:  # type: ignore[attr-defined]
        header = record.headers.add(key=key)
        if value is not None:
            header.value = value
    return record


# ------------------------------------------------------------------------ produce


@pytest.mark.parametrize("codec", list(Compression))
def test_encode_records_builds_a_valid_batch_kafka_reads(codec: Compression) -> None:
    records = [
        _record(timestamp=1_700_000_000_000, key=b"k0", value=b"v0"),
        _record(value=b"no key, server clock"),
        _record(timestamp=1_700_000_000_005, key=b"k2"),  # null value: a tombstone
        _record(timestamp=1_699_999_999_999, key=b"", value=b"",
                headers=[("h1", b"x"), ("h-null", None), ("ünï", b"")]),
    ]
    batch = encode_records(records, int(codec), now_ms=1_700_000_000_123)
    header = validate_batch(batch)
    assert header.base_offset == 0
    assert header.records_count == 4
    assert header.compression == codec
    assert header.timestamp_type == TimestampType.CREATE_TIME
    _, decoded = decode_batch(batch)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decoded] == [
        (0, 1_700_000_000_000, b"k0", b"v0"),
        (1, 1_700_000_000_123, None, b"no key, server clock"),
        (2, 1_700_000_000_005, b"k2", None),
        (3, 1_699_999_999_999, b"", b""),
    ]
    assert decoded[3].headers == (("h1", b"x"), ("h-null", None), ("ünï", b""))
    # An independent implementation (aiokafka's compiled reader) reads the same records.
    theirs = list(AioBatch(bytearray(batch)))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in theirs] == [
        (r.offset, r.timestamp, r.key, r.value) for r in decoded
    ]


@pytest.mark.parametrize("transactional", [False, True])
def test_encode_records_with_producer_fields_builds_a_producers_batch(transactional) -> None:
    producer = ProducerFields(producer_id=7, producer_epoch=3, base_sequence=41,
                              is_transactional=transactional)
    batch = encode_records([_record(value=b"a"), _record(value=b"b")], 0, now_ms=5,
                           producer=producer)
    header = validate_batch(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 41)
    assert header.is_transactional is transactional and not header.is_control
    theirs = AioBatch(bytearray(batch))
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence,
            theirs.is_transactional) == (7, 3, 41, transactional)
    plain = validate_batch(encode_records([_record(value=b"a")], 0, now_ms=5))
    assert (plain.producer_id, plain.producer_epoch, plain.base_sequence) == (-1, -1, -1)
    assert not plain.is_transactional


def test_producer_fields_of_a_request() -> None:
    assert ProducerFields.of_request(None, 0, 0, False) is None
    assert ProducerFields.of_request(0, 32767, 2**31 - 1, True) == (0, 32767, 2**31 - 1, True)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ((-1, 0, 0, False), "producer_id", "must be >= 0, got -1"),
        ((5, -1, 0, False), "producer_epoch", "0..32767"),
        ((5, 32768, 0, False), "producer_epoch", "got 32768"),
        ((5, 0, -3, False), "base_sequence", "must be >= 0, got -3"),
        ((None, 2, 0, False), "producer_epoch", "producer_id is not"),
        ((None, 0, 9, False), "base_sequence", "producer_id is not"),
        ((None, 0, 0, True), "transactional", "producer_id is not"),
    ],
)
def test_producer_fields_out_of_range_name_their_field(fields, field, words) -> None:
    with pytest.raises(BadRequestError) as caught:
        ProducerFields.of_request(*fields)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_encode_records_rejects_an_unknown_codec() -> None:
    with pytest.raises(BadRequestError) as caught:
        encode_records([_record(value=b"x")], 7, now_ms=0)
    assert caught.value.field == "compression"
    assert "unknown codec 7" in str(caught.value)


def test_encode_records_names_the_record_that_cannot_be_encoded() -> None:
    # The second timestamp's delta from the first does not fit in int64.
    records = [_record(timestamp=1, value=b"a"), _record(timestamp=-(2**63), value=b"b")]
    with pytest.raises(BadRequestError) as caught:
        encode_records(records, 0, now_ms=0)
    assert caught.value.field == "records[1]"
    assert caught.value.reason == "INVALID_RECORD"


def test_bad_request_status_names_the_field() -> None:
    status = BadRequestError("max_bytes", "must be >= 0, got -1").to_status()
    assert status.code is grpc.StatusCode.INVALID_ARGUMENT
    assert status.details == "max_bytes: must be >= 0, got -1"
    # The trailer holds a google.rpc.Status with one ErrorInfo.
    ((key, value),) = status.trailing_metadata
    assert key == "grpc-status-details-bin"
    info = error_details_pb2.ErrorInfo()
    status_pb2.Status.FromString(value).details[0].Unpack(info)
    assert info.reason == "INVALID_REQUEST"
    assert info.domain == "stratalog"
    assert dict(info.metadata) == {"field": "max_bytes"}


# ------------------------------------------------------------------------ decoded fetches


def _stored(first_offset: int, values: list[bytes | None], **builder: object) -> bytes:
    """A batch as a log stores it: base offset set (not covered by the CRC)."""
    batch = build_batch([(1_000 + i, None, v, ()) for i, v in enumerate(values)], **builder)
    return first_offset.to_bytes(8, "big", signed=True) + batch[8:]


def test_decode_skips_records_below_the_offset_and_control_batches() -> None:
    data = (
        _stored(0, [b"a", b"b", b"c"])
        + _stored(3, [encode_control_key(ControlRecordType.COMMIT)], is_control=True,
                  producer_id=7, producer_epoch=0, is_transactional=True)
        + _stored(4, [None, b"e"])
    )
    response = broker_pb2.FetchResponse()
    next_offset, added, used = decode_records_into(response.records, data, 1, 1 << 20)
    assert (next_offset, added, used) == (6, 4, len(data))
    assert [(r.offset, r.HasField("value"), r.value) for r in response.records] == [
        (1, True, b"b"), (2, True, b"c"), (4, False, b""), (5, True, b"e")]
    assert [r.timestamp for r in response.records] == [1_001, 1_002, 1_000, 1_001]
    assert {r.timestamp_type for r in response.records} == {broker_pb2.CREATE_TIME}


def test_decode_stops_after_the_batch_that_passes_max_bytes() -> None:
    batches = [_stored(i * 2, [bytes(100), bytes(100)]) for i in range(4)]
    data = b"".join(batches)
    response = broker_pb2.FetchResponse()
    # 200 bytes of values per batch: the first batch is whole even over the limit ...
    assert decode_records_into(response.records, data, 0, 10) == (2, 2, len(batches[0]))
    # ... and a batch that crosses the limit is the last one.
    response = broker_pb2.FetchResponse()
    assert decode_records_into(response.records, data, 0, 300) == (4, 4, 2 * len(batches[0]))


def test_decode_of_nothing_stays_at_the_offset() -> None:
    response = broker_pb2.FetchResponse()
    assert decode_records_into(response.records, b"", 42, 1 << 20) == DecodedRecords(42, 0, 0)
    assert not response.records


def test_decode_reports_log_append_time_and_null_headers() -> None:
    data = _stored(0, [b"x"], timestamp_type=TimestampType.LOG_APPEND_TIME)
    response = broker_pb2.FetchResponse()
    decode_records_into(response.records, data, 0, 1 << 20)
    (record,) = response.records
    assert record.timestamp_type == broker_pb2.LOG_APPEND_TIME
    assert not record.HasField("key") and not record.headers
    assert PROTO_TIMESTAMP_TYPES == {TimestampType.CREATE_TIME: broker_pb2.CREATE_TIME,
                                     TimestampType.LOG_APPEND_TIME: broker_pb2.LOG_APPEND_TIME}


@pytest.mark.parametrize(
    ("base", "delta", "kafka_reads"),
    [
        (-(2**63) + 1, -5, 2**63 - 4),  # below int64: Java's long wraps to the top
        (2**63 - 2, 5, -(2**63) + 3),  # above int64: wraps to the bottom
        (0, -5, -5),  # negative, but an int64: as it is
    ],
)
def test_a_stored_timestamp_outside_int64_decodes_as_kafkas_reader_wraps_it(
    batch_with_timestamp_delta, base: int, delta: int, kafka_reads: int
) -> None:
    # A log written before validation refused such records (issue 13, defect 5): each read in
    # the records format raised ValueError (INTERNAL) instead of answering.
    bad = batch_with_timestamp_delta(base, delta)
    data = _stored(0, [b"a"]) + (1).to_bytes(8, "big") + bad[8:] + _stored(2, [b"c"])
    response = broker_pb2.FetchResponse()
    assert decode_records_into(response.records, data, 0, 1 << 20)[:2] == (3, 3)
    assert [(r.offset, r.timestamp, r.value) for r in response.records] == [
        (0, 1_000, b"a"), (1, kafka_reads, b"v"), (2, 1_000, b"c")]


def test_a_stored_batch_that_does_not_decode_is_a_storage_error() -> None:
    batch = bytearray(_stored(0, [b"x" * 20]))
    batch[-5] ^= 0xFF  # damage covered by the CRC
    with pytest.raises(StorageError, match="stored batch at fetch position 0"):
        decode_records_into(broker_pb2.FetchResponse().records, bytes(batch), 0, 1 << 20)


def test_decode_from_the_positions_a_walk_found_is_the_same_as_walking() -> None:
    data = _stored(0, [b"a", b"b"]) + _stored(2, [b"c"]) + _stored(3, [b"d", b"e", b"f"])
    positions = [0, validate_batch(data).end_position]
    positions.append(validate_batch(data, positions[1]).end_position)
    for max_bytes in (0, 2, 1 << 20):
        walked, given = broker_pb2.FetchResponse(), broker_pb2.FetchResponse()
        result = decode_records_into(walked.records, data, 1, max_bytes)
        assert decode_records_into(given.records, data, 1, max_bytes,
                                   positions=positions) == result
        assert given == walked


# ------------------------------------------------------------------------ topics


def test_topic_message_carries_every_field_of_the_description() -> None:
    description = TopicDescription(
        name="orders",
        configs={"segment.bytes": "1048576", "cleanup.policy": "delete"},
        partitions=[
            PartitionDescription(0, 10, 250, 4096, 3, "/data/a", 1_700_000_000_000),
            PartitionDescription(1, 0, 0, 0, 1, "/data/b", -1),
        ],
        overridden_configs=("segment.bytes",),
    )
    message = topic_message(description, [Path("/data/b"), "/data/a"])
    assert message.name == "orders"
    assert dict(message.configs) == description.configs
    assert list(message.overridden_configs) == ["segment.bytes"]
    # The log directory by its index in the server's log_dirs, never its path (docs/api.md).
    assert [(p.partition, p.log_start_offset, p.log_end_offset, p.size_bytes, p.segment_count,
             p.log_dir, p.max_timestamp) for p in message.partitions] == [
        (0, 10, 250, 4096, 3, "1", 1_700_000_000_000),
        (1, 0, 0, 0, 1, "0", -1),
    ]
    # Not compacted: no cleaner position, and the optional field says so.
    assert not any(p.HasField("cleaned_offset") for p in message.partitions)


def test_topic_message_carries_the_cleaners_position_where_given() -> None:
    description = TopicDescription(
        name="changelog",
        configs={"cleanup.policy": "compact"},
        partitions=[
            PartitionDescription(0, 0, 250, 4096, 3, "/data/a", 1_700_000_000_000),
            PartitionDescription(1, 0, 9, 100, 1, "/data/a", 5),
        ],
    )
    position = CleanerPartitionStatus(cleaned_offset=200, dirty_ratio=0.2, dirty_bytes=800,
                                      cleanable_bytes=4000, last_clean_ms=1_700_000_000_001,
                                      in_progress=False)
    message = topic_message(description, ["/data/a"], {0: position})
    first, second = message.partitions
    assert first.HasField("cleaned_offset")
    assert (first.cleaned_offset, first.dirty_ratio, first.last_clean_ms) == (
        200, 0.2, 1_700_000_000_001)
    # A partition without a position (deleted while it was read) leaves the field unset.
    assert not second.HasField("cleaned_offset")


def _marker(offset: int, producer_id: int, control_type: ControlRecordType) -> bytes:
    batch = build_batch([(1_000, encode_control_key(control_type), b"\x00" * 6, ())],
                        is_control=True, producer_id=producer_id, producer_epoch=0,
                        is_transactional=True)
    return offset.to_bytes(8, "big", signed=True) + batch[8:]


def _txn(offset: int, producer_id: int, values: list[bytes]) -> bytes:
    return _stored(offset, values, producer_id=producer_id, producer_epoch=0, base_sequence=0,
                   is_transactional=True)


def test_decode_read_committed_drops_aborted_transactions_and_every_marker() -> None:
    data = (
        _txn(0, 7, [b"aborted-1", b"aborted-2"])     # 0-1: 7's aborted transaction
        + _txn(2, 8, [b"committed"])                # 2: 8's, committed
        + _stored(3, [b"plain"])                    # 3
        + _marker(4, 8, ControlRecordType.COMMIT)   # 4
        + _marker(5, 7, ControlRecordType.ABORT)    # 5
        + _txn(6, 7, [b"later"])                    # 6: 7 again, a new transaction
    )
    aborted = [AbortedTxn(7, 0, 5, 6)]
    committed = broker_pb2.FetchResponse()
    result = decode_records_into(committed.records, data, 1, 1 << 20, aborted)
    assert [(r.offset, r.value) for r in committed.records] == [
        (2, b"committed"), (3, b"plain"), (6, b"later")]
    assert result == (7, 3, len(data))
    # READ_UNCOMMITTED (no list): everything but the markers.
    uncommitted = broker_pb2.FetchResponse()
    decode_records_into(uncommitted.records, data, 1, 1 << 20)
    assert [r.offset for r in uncommitted.records] == [1, 2, 3, 6]
    # READ_COMMITTED with nothing aborted keeps the data and still drops the markers.
    none_aborted = broker_pb2.FetchResponse()
    decode_records_into(none_aborted.records, data, 0, 1 << 20, [])
    assert [r.offset for r in none_aborted.records] == [0, 1, 2, 3, 6]
