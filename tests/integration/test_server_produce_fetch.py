"""Produce, FetchByOffset, FetchByTimestamp, ListOffsets and DeleteRecords against a real server.

Includes logs of many segments (topics created with a small segment.bytes), every malformed
request the contract lists, and batches encoded by independent Kafka implementations, fetched
back as Kafka would store them.
"""

from __future__ import annotations

import bisect
import random
import struct
import time

import grpc
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from stratalog.records import build_batch
from stratalog.records.batch import iter_batch_headers, validate_batch
from stratalog.records.reader import iter_batches
from stratalog.v1 import broker_pb2 as pb

T0 = 1_700_000_000_000
TIMEOUT = 30


def _create(stub, name: str, partitions: int = 1, **configs: str) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(name=name, partitions=partitions, configs=configs),
                     timeout=TIMEOUT)


def _produce(stub, topic: str, batches: bytes, partition: int = 0, **kw) -> pb.ProduceResponse:
    return stub.Produce(
        pb.ProduceRequest(topic=topic, partition=partition, record_batches=batches, **kw),
        timeout=TIMEOUT,
    )


def _fetch(stub, topic: str, offset: int, **kw) -> pb.FetchResponse:
    return stub.FetchByOffset(pb.FetchByOffsetRequest(topic=topic, offset=offset, **kw),
                              timeout=TIMEOUT)


def _fetch_all(stub, topic: str, start: int = 0) -> list[pb.Record]:
    records: list[pb.Record] = []
    offset = start
    while True:
        response = _fetch(stub, topic, offset)
        records.extend(response.records)
        if response.next_offset == offset:
            assert offset == response.high_watermark
            return records
        offset = response.next_offset


# ------------------------------------------------------------------------ produce and fetch


def test_produce_records_form_and_fetch_them_back(stub) -> None:
    _create(stub, "pf-records")
    request = pb.ProduceRequest(topic="pf-records", compression=pb.COMPRESSION_ZSTD)
    request.records.add(timestamp=T0, key=b"k0", value=b"v0")
    r1 = request.records.add(timestamp=T0 + 1, value=b"v1")
    r1.headers.add(key="trace", value=b"abc")
    r1.headers.add(key="null-header")
    request.records.add(timestamp=T0 + 2, key=b"k2")  # null value: a tombstone
    before_ms = time.time_ns() // 1_000_000
    request.records.add(value=b"server clock")
    response = stub.Produce(request, timeout=TIMEOUT)
    after_ms = time.time_ns() // 1_000_000
    assert (response.base_offset, response.last_offset, response.record_count) == (0, 3, 4)
    assert (response.log_append_time, response.log_start_offset) == (-1, 0)

    fetched = _fetch(stub, "pf-records", 0)
    assert (fetched.topic, fetched.partition) == ("pf-records", 0)
    assert (fetched.next_offset, fetched.high_watermark, fetched.log_start_offset) == (4, 4, 0)
    assert (fetched.matched_offset, fetched.matched_timestamp) == (-1, -1)
    records = list(fetched.records)
    assert [r.offset for r in records] == [0, 1, 2, 3]
    assert [r.timestamp_type for r in records] == [pb.CREATE_TIME] * 4
    assert records[0].key == b"k0" and records[0].value == b"v0"
    assert not records[1].HasField("key") and records[1].value == b"v1"
    assert [(h.key, h.HasField("value"), h.value) for h in records[1].headers] == [
        ("trace", True, b"abc"), ("null-header", False, b"")]
    assert records[2].key == b"k2" and not records[2].HasField("value")
    assert [r.timestamp for r in records[:3]] == [T0, T0 + 1, T0 + 2]
    assert before_ms <= records[3].timestamp <= after_ms
    # The batch as stored carries the codec the request asked for.
    raw = _fetch(stub, "pf-records", 0, format=pb.FETCH_FORMAT_RECORD_BATCHES)
    (header,) = iter_batch_headers(raw.record_batches)
    assert header.compression == pb.COMPRESSION_ZSTD
    assert raw.next_offset == 4 and not raw.records


def test_a_single_server_takes_every_acks_kafka_has_and_refuses_others(stub, rpc_error) -> None:
    # Issue 17's acks: on a single server the leader is the only replica, so 0, 1 and -1
    # (all, the default) all answer after the append, with offsets as ever.
    _create(stub, "pf-acks")
    for expected, acks in enumerate((0, 1, -1)):
        request = pb.ProduceRequest(topic="pf-acks", acks=acks, records=[pb.Record(value=b"v")])
        assert stub.Produce(request, timeout=TIMEOUT).base_offset == expected
    for acks in (2, -2):
        error = rpc_error(stub.Produce, pb.ProduceRequest(
            topic="pf-acks", acks=acks, records=[pb.Record(value=b"v")]))
        assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
        assert error.metadata["field"] == "acks" and f"got {acks}" in str(error)
    assert _fetch(stub, "pf-acks", 0).next_offset == 3  # nothing written by the refusals


def test_several_batches_in_one_request_get_consecutive_offsets(stub) -> None:
    _create(stub, "pf-multi")
    batches = b"".join(
        build_batch([(T0 + i * 10 + j, None, f"{i}-{j}".encode(), ()) for j in range(i + 1)])
        for i in range(4)
    )
    response = _produce(stub, "pf-multi", batches)
    assert (response.base_offset, response.last_offset, response.record_count) == (0, 9, 10)
    response = _produce(stub, "pf-multi", build_batch([(T0, None, b"next", ())]))
    assert (response.base_offset, response.last_offset) == (10, 10)
    values = [r.value for r in _fetch_all(stub, "pf-multi")]
    assert values == [f"{i}-{j}".encode() for i in range(4) for j in range(i + 1)] + [b"next"]


def _wire_field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field: tag (field < 16), varint length, value."""
    length, size = bytearray(), len(value)
    while size > 0x7F:
        length.append(size & 0x7F | 0x80)
        size >>= 7
    length.append(size)
    return bytes([number << 3 | 2]) + bytes(length) + value


def test_produce_requests_in_any_wire_order_store_what_protobuf_parses(
    channel, stub, rpc_error
) -> None:
    # The server parses Produce without copying the batches (server/rpc/decoding.py): a
    # request whose fields come out of order, with the batches field twice (the last one
    # wins, as in protobuf) and an unknown field, must store exactly what protobuf would read.
    _create(stub, "pf-wire")
    raw = channel.unary_unary(
        "/stratalog.v1.Broker/Produce",
        request_serializer=lambda data: data,
        response_deserializer=pb.ProduceResponse.FromString,
    )
    first = build_batch([(T0, None, b"ignored", ())])
    second = build_batch([(T0 + 1, None, b"stored", ()), (T0 + 2, None, b"too", ())])
    request = (_wire_field(4, first) + _wire_field(15, b"unknown")
               + _wire_field(1, b"pf-wire") + _wire_field(4, second))
    assert pb.ProduceRequest.FromString(request).record_batches == second
    response = raw(request, timeout=TIMEOUT)
    assert (response.base_offset, response.last_offset, response.record_count) == (0, 1, 2)
    assert [r.value for r in _fetch_all(stub, "pf-wire")] == [b"stored", b"too"]
    # Bytes that are no ProduceRequest at all: INVALID_ARGUMENT naming the message type (not
    # gRPC's UNKNOWN for a deserializer's exception), and the server serves on.
    error = rpc_error(raw, b"\x22\xff\xff\xff\xff\x0f" + b"x" * 10)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert "not a valid stratalog.v1.ProduceRequest" in str(error)
    assert _produce(stub, "pf-wire", build_batch([(T0, None, b"after", ())])).base_offset == 2
    # Every RPC: a FetchByOffset whose bytes end inside a field, and a Subscribe stream.
    for path, response_type, streaming in (
        ("FetchByOffset", pb.FetchResponse, False), ("Subscribe", pb.FetchResponse, True),
    ):
        call = (channel.unary_stream if streaming else channel.unary_unary)(
            f"/stratalog.v1.Broker/{path}", request_serializer=lambda data: data,
            response_deserializer=response_type.FromString,
        )
        error = rpc_error(call, b"\x0a\x05pf")
        assert (error.code, error.reason) == (
            grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST"), path


def test_fetch_from_inside_a_batch(stub) -> None:
    _create(stub, "pf-inside")
    _produce(stub, "pf-inside", build_batch([(T0 + i, None, b"%d" % i, ()) for i in range(10)]))
    records = _fetch(stub, "pf-inside", 6).records
    assert [r.offset for r in records] == [6, 7, 8, 9]  # records below 6 are skipped
    raw = _fetch(stub, "pf-inside", 6, format=pb.FETCH_FORMAT_RECORD_BATCHES)
    (header,) = iter_batch_headers(raw.record_batches)
    assert header.base_offset == 0  # the whole batch, as stored; the client skips
    assert raw.next_offset == 10


def test_max_bytes_returns_whole_batches_and_the_first_even_if_larger(stub) -> None:
    _create(stub, "pf-maxbytes")
    batches = [build_batch([(T0 + i, None, bytes(500), ())]) for i in range(5)]
    for batch in batches:
        _produce(stub, "pf-maxbytes", batch)
    size = len(batches[0])
    for max_bytes, expected in ((1, 1), (size, 1), (2 * size - 1, 1), (2 * size, 2),
                                (3 * size + 10, 3), (0, 5)):
        response = _fetch(stub, "pf-maxbytes", 0, max_bytes=max_bytes,
                          format=pb.FETCH_FORMAT_RECORD_BATCHES)
        assert len(response.record_batches) == expected * size, max_bytes
        assert response.next_offset == expected
        records = _fetch(stub, "pf-maxbytes", 0, max_bytes=max_bytes).records
        assert len(records) == expected


def test_fetch_at_and_past_the_end(stub, rpc_error, server) -> None:
    _create(stub, "pf-end")
    _produce(stub, "pf-end", build_batch([(T0, None, b"a", ()), (T0, None, b"b", ())]))
    at_end = _fetch(stub, "pf-end", 2)
    assert (list(at_end.records), at_end.next_offset, at_end.high_watermark) == ([], 2, 2)
    for offset in (3, 1000, -1):
        error = rpc_error(stub.FetchByOffset, pb.FetchByOffsetRequest(topic="pf-end",
                                                                      offset=offset))
        assert (error.code, error.reason) == (grpc.StatusCode.OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE")
        assert (error.log_start_offset, error.log_end_offset) == (0, 2)
        # A client-caused error describes the request, not the server's disk (docs/api.md).
        assert str(server.data_dir) not in error.message


def test_log_append_time_topic(stub) -> None:
    _create(stub, "pf-appendtime", **{"message.timestamp.type": "LogAppendTime"})
    before_ms = time.time_ns() // 1_000_000
    response = _produce(stub, "pf-appendtime",
                        build_batch([(1, None, b"a", ()), (2, None, b"b", ())]))
    after_ms = time.time_ns() // 1_000_000
    assert before_ms <= response.log_append_time <= after_ms
    records = _fetch(stub, "pf-appendtime", 0).records
    assert [r.timestamp for r in records] == [response.log_append_time] * 2
    assert [r.timestamp_type for r in records] == [pb.LOG_APPEND_TIME] * 2


def test_produce_with_flush(stub) -> None:
    _create(stub, "pf-flush")
    response = _produce(stub, "pf-flush", build_batch([(T0, None, b"durable", ())]), flush=True)
    assert response.last_offset == 0
    assert [r.value for r in _fetch(stub, "pf-flush", 0).records] == [b"durable"]


def test_partitions_are_independent_logs(stub) -> None:
    _create(stub, "pf-parts", partitions=3)
    for partition in (2, 0, 2):
        response = _produce(stub, "pf-parts", build_batch([(T0, None, b"p%d" % partition, ())]),
                            partition=partition)
    assert response.base_offset == 1  # the second append to partition 2
    assert [r.value for r in _fetch(stub, "pf-parts", 0, partition=2).records] == [b"p2", b"p2"]
    assert [r.value for r in _fetch(stub, "pf-parts", 0, partition=0).records] == [b"p0"]
    assert list(_fetch(stub, "pf-parts", 0, partition=1).records) == []


# ------------------------------------------------------------------------ many segments


@pytest.fixture(scope="module")
def rolled(stub) -> list[tuple[int, int, bytes]]:
    """A topic of many segments: (offset, timestamp, value) of every record produced.

    Timestamps increase by 10 ms per record with a few repeats, so lookups by timestamp have
    exact hits, misses between records and ties.
    """
    _create(stub, "pf-rolled", **{"segment.bytes": "4096", "index.interval.bytes": "512"})
    rng = random.Random(7)
    expected: list[tuple[int, int, bytes]] = []
    timestamp = T0
    for batch_number in range(150):
        rows = []
        for _ in range(rng.randint(1, 12)):
            timestamp += rng.choice((0, 10, 10, 10))
            rows.append((timestamp, None, b"%06d-" % len(expected) + bytes(rng.randint(0, 200)),
                         ()))
            expected.append((len(expected), timestamp, rows[-1][2]))
        response = _produce(stub, "pf-rolled", build_batch(rows, compression=batch_number % 3))
        assert response.last_offset == len(expected) - 1
    return expected


def test_rolled_log_has_many_segments_and_reads_back_in_order(stub, rolled) -> None:
    partition = stub.DescribeTopic(pb.DescribeTopicRequest(name="pf-rolled"),
                                   timeout=TIMEOUT).topic.partitions[0]
    assert partition.segment_count >= 8
    assert partition.log_end_offset == len(rolled)
    assert partition.max_timestamp == rolled[-1][1]
    records = _fetch_all(stub, "pf-rolled")
    assert [(r.offset, r.timestamp, r.value) for r in records] == rolled


def test_random_fetch_by_offset_across_segments(stub, rolled) -> None:
    rng = random.Random(11)
    for offset in [*rng.sample(range(len(rolled)), 60), 0, len(rolled) - 1]:
        response = _fetch(stub, "pf-rolled", offset, max_bytes=1)
        assert response.records[0].offset == offset
        assert response.records[0].value == rolled[offset][2]
        raw = _fetch(stub, "pf-rolled", offset, max_bytes=1,
                     format=pb.FETCH_FORMAT_RECORD_BATCHES)
        (header,) = iter_batch_headers(raw.record_batches)
        assert header.base_offset <= offset <= header.last_offset
        assert raw.next_offset == header.last_offset + 1


def test_fetch_and_list_offsets_by_timestamp_across_segments(stub, rolled) -> None:
    timestamps = [t for _, t, _ in rolled]
    targets = sorted({t for t in timestamps[::7]} | {t + 5 for t in timestamps[::11]}
                     | {T0 - 1000, timestamps[0], timestamps[-1]})
    for target in targets:
        index = bisect.bisect_left(timestamps, target)
        expected_offset, expected_timestamp, _ = rolled[index]
        response = stub.FetchByTimestamp(
            pb.FetchByTimestampRequest(topic="pf-rolled", timestamp=target, max_bytes=1),
            timeout=TIMEOUT)
        assert (response.matched_offset, response.matched_timestamp) == (
            expected_offset, expected_timestamp), target
        assert response.records[0].offset == expected_offset
        assert response.records[0].timestamp == expected_timestamp
        listed = stub.ListOffsets(pb.ListOffsetsRequest(topic="pf-rolled", timestamp=target),
                                  timeout=TIMEOUT)
        assert (listed.offset, listed.timestamp) == (expected_offset, expected_timestamp)


def test_timestamp_after_every_record(stub, rolled) -> None:
    after = rolled[-1][1] + 1
    response = stub.FetchByTimestamp(
        pb.FetchByTimestampRequest(topic="pf-rolled", timestamp=after), timeout=TIMEOUT)
    assert (response.matched_offset, response.matched_timestamp) == (-1, -1)
    assert list(response.records) == [] and response.record_batches == b""
    assert response.next_offset == response.high_watermark == len(rolled)
    listed = stub.ListOffsets(pb.ListOffsetsRequest(topic="pf-rolled", timestamp=after),
                              timeout=TIMEOUT)
    assert (listed.offset, listed.timestamp) == (-1, -1)


def test_list_offsets_special_targets(stub, rolled) -> None:
    def listed(target: int) -> tuple[int, int]:
        response = stub.ListOffsets(pb.ListOffsetsRequest(topic="pf-rolled", timestamp=target),
                                    timeout=TIMEOUT)
        return response.offset, response.timestamp

    assert listed(-2) == (0, -1)
    assert listed(-1) == (len(rolled), -1)
    max_timestamp = max(t for _, t, _ in rolled)
    first_max = next(o for o, t, _ in rolled if t == max_timestamp)
    assert listed(-3) == (first_max, max_timestamp)


def test_fetch_by_timestamp_raw_batches(stub, rolled) -> None:
    target = rolled[len(rolled) // 2][1]
    response = stub.FetchByTimestamp(
        pb.FetchByTimestampRequest(topic="pf-rolled", timestamp=target,
                                   format=pb.FETCH_FORMAT_RECORD_BATCHES), timeout=TIMEOUT)
    batches = list(iter_batches(response.record_batches))
    assert batches[0][0].base_offset <= response.matched_offset <= batches[0][0].last_offset
    assert response.next_offset == batches[-1][0].last_offset + 1


# ------------------------------------------------------------------------ delete records


def test_delete_records(stub, rpc_error) -> None:
    _create(stub, "pf-delete", **{"segment.bytes": "4096"})
    for i in range(40):
        _produce(stub, "pf-delete", build_batch([(T0 + i, None, bytes(200), ())]))
    response = stub.DeleteRecords(pb.DeleteRecordsRequest(topic="pf-delete", before_offset=25),
                                  timeout=TIMEOUT)
    assert response.log_start_offset == 25
    listed = stub.ListOffsets(pb.ListOffsetsRequest(topic="pf-delete", timestamp=-2),
                              timeout=TIMEOUT)
    assert listed.offset == 25
    error = rpc_error(stub.FetchByOffset, pb.FetchByOffsetRequest(topic="pf-delete", offset=24))
    assert (error.code, error.reason) == (grpc.StatusCode.OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE")
    assert (error.log_start_offset, error.log_end_offset) == (25, 40)
    fetched = _fetch(stub, "pf-delete", 25)
    assert fetched.log_start_offset == 25 and fetched.records[0].offset == 25
    # Whole segments below the new start are gone (after file.delete.delay.ms, from the listing
    # at once): fewer segments than the 40 appends needed.
    described = stub.DescribeTopic(pb.DescribeTopicRequest(name="pf-delete"),
                                   timeout=TIMEOUT).topic.partitions[0]
    assert described.log_start_offset == 25
    error = rpc_error(stub.DeleteRecords, pb.DeleteRecordsRequest(topic="pf-delete",
                                                                  before_offset=41))
    assert (error.code, error.reason) == (grpc.StatusCode.OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE")
    response = stub.DeleteRecords(pb.DeleteRecordsRequest(topic="pf-delete", before_offset=-1),
                                  timeout=TIMEOUT)
    assert response.log_start_offset == 40
    at_end = _fetch(stub, "pf-delete", 40)
    assert (list(at_end.records), at_end.log_start_offset, at_end.high_watermark) == ([], 40, 40)
    # Appends go on at the log end.
    assert _produce(stub, "pf-delete", build_batch([(T0, None, b"x", ())])).base_offset == 40


# ------------------------------------------------------------------------ malformed requests


def _crc_broken(batch: bytes) -> bytes:
    broken = bytearray(batch)
    broken[-1] ^= 0xFF  # a record byte: covered by the CRC
    return bytes(broken)


def _with_base_offset(batch: bytes, base_offset: int) -> bytes:
    # Base offset is not covered by the CRC: the batch stays valid but claims an offset.
    return struct.pack(">q", base_offset) + batch[8:]


@pytest.fixture(scope="module")
def strict(stub) -> bytes:
    """A topic for refused requests; returns the one batch it holds, to check it is intact."""
    _create(stub, "pf-strict", partitions=2, **{"max.message.bytes": "2000"})
    batch = build_batch([(T0, b"k", b"the one good record", ())])
    _produce(stub, "pf-strict", batch)
    return batch


GOOD = build_batch([(T0, None, b"v", ())])


@pytest.mark.parametrize(
    ("request_fields", "code", "reason", "field"),
    [
        ({}, "INVALID_ARGUMENT", "INVALID_REQUEST", "records"),
        ({"record_batches": GOOD, "records": [pb.Record(value=b"x")]},
         "INVALID_ARGUMENT", "INVALID_REQUEST", "records"),
        ({"partition": -1, "record_batches": GOOD}, "INVALID_ARGUMENT", "INVALID_REQUEST",
         "partition"),
        ({"partition": 2, "record_batches": GOOD}, "NOT_FOUND", "UNKNOWN_TOPIC_OR_PARTITION",
         None),
        ({"topic": "pf-nope", "record_batches": GOOD}, "NOT_FOUND",
         "UNKNOWN_TOPIC_OR_PARTITION", None),
        ({"record_batches": _crc_broken(GOOD)}, "INVALID_ARGUMENT", "CORRUPT_RECORD", None),
        ({"record_batches": GOOD[:-3]}, "INVALID_ARGUMENT", "CORRUPT_RECORD", None),
        ({"record_batches": GOOD[:30]}, "INVALID_ARGUMENT", "CORRUPT_RECORD", None),
        ({"record_batches": GOOD + GOOD[:20]}, "INVALID_ARGUMENT", "CORRUPT_RECORD", None),
        ({"record_batches": b"\x00" * 100}, "INVALID_ARGUMENT", "CORRUPT_RECORD", None),
        ({"record_batches": b"garbage"}, "INVALID_ARGUMENT", "CORRUPT_RECORD", None),
        ({"record_batches": _with_base_offset(GOOD, 5)}, "INVALID_ARGUMENT", "INVALID_RECORD",
         None),
        ({"record_batches": build_batch([(T0, None, bytes(3000), ())])}, "INVALID_ARGUMENT",
         "RECORD_TOO_LARGE", None),
        ({"records": [pb.Record(value=b"x")], "compression": 9}, "INVALID_ARGUMENT",
         "INVALID_REQUEST", "compression"),
        ({"records": [pb.Record(value=bytes(3000))]}, "INVALID_ARGUMENT", "RECORD_TOO_LARGE",
         None),
    ],
    ids=["neither", "both", "negative-partition", "unknown-partition", "unknown-topic",
         "crc-mismatch", "truncated", "truncated-header", "partial-second-batch", "zeros",
         "garbage", "nonzero-base-offset", "over-max-message-bytes", "unknown-codec",
         "records-over-max-message-bytes"],
)
def test_malformed_produce(stub, rpc_error, strict, request_fields, code, reason, field) -> None:
    fields = {"topic": "pf-strict", **request_fields}
    error = rpc_error(stub.Produce, pb.ProduceRequest(**fields))
    assert (error.code.name, error.reason) == (code, reason), error.message
    assert error.message
    if field is not None:
        assert error.metadata["field"] == field
        assert error.message.startswith(field)
    # Nothing was appended: the log holds exactly the one good batch.
    raw = _fetch(stub, "pf-strict", 0, format=pb.FETCH_FORMAT_RECORD_BATCHES)
    assert raw.high_watermark == 1
    assert raw.record_batches[8:12] == strict[8:12]
    assert raw.record_batches[16:] == strict[16:]


@pytest.mark.parametrize(
    ("method", "request_message", "field"),
    [
        ("FetchByOffset", pb.FetchByOffsetRequest(topic="pf-strict", max_bytes=-1), "max_bytes"),
        ("FetchByOffset", pb.FetchByOffsetRequest(topic="pf-strict", max_wait_ms=-1),
         "max_wait_ms"),
        ("FetchByOffset", pb.FetchByOffsetRequest(topic="pf-strict", min_bytes=-1), "min_bytes"),
        ("FetchByOffset", pb.FetchByOffsetRequest(topic="pf-strict", format=7), "format"),
        ("FetchByOffset", pb.FetchByOffsetRequest(topic="pf-strict", isolation_level=3),
         "isolation_level"),
        ("FetchByOffset", pb.FetchByOffsetRequest(topic="pf-strict", partition=-2), "partition"),
        ("FetchByTimestamp", pb.FetchByTimestampRequest(topic="pf-strict", max_bytes=-5),
         "max_bytes"),
        ("FetchByTimestamp", pb.FetchByTimestampRequest(topic="pf-strict", timestamp=-1),
         "timestamp"),
        ("ListOffsets", pb.ListOffsetsRequest(topic="pf-strict", timestamp=-4), "timestamp"),
        ("ListOffsets", pb.ListOffsetsRequest(topic="pf-strict", partition=-1), "partition"),
        ("Subscribe", pb.SubscribeRequest(topic="pf-strict"), "start"),
        ("Subscribe", pb.SubscribeRequest(topic="pf-strict", offset=0, max_bytes=-1),
         "max_bytes"),
        ("Subscribe", pb.SubscribeRequest(topic="pf-strict", timestamp=-7), "timestamp"),
        ("DeleteRecords", pb.DeleteRecordsRequest(topic="pf-strict", before_offset=-2),
         "before_offset"),
    ],
)
def test_malformed_reads(stub, rpc_error, strict, method, request_message, field) -> None:
    error = rpc_error(getattr(stub, method), request_message)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert error.metadata["field"] == field
    assert error.message.startswith(f"{field}: ")


def test_unknown_partition_on_every_partition_rpc(stub, rpc_error, strict) -> None:
    for method, request in (
        (stub.FetchByOffset, pb.FetchByOffsetRequest(topic="pf-strict", partition=9)),
        (stub.FetchByTimestamp, pb.FetchByTimestampRequest(topic="pf-strict", partition=9)),
        (stub.ListOffsets, pb.ListOffsetsRequest(topic="pf-strict", partition=9)),
        (stub.Subscribe, pb.SubscribeRequest(topic="pf-strict", partition=9, offset=0)),
        (stub.DeleteRecords, pb.DeleteRecordsRequest(topic="pf-strict", partition=9)),
    ):
        error = rpc_error(method, request)
        assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND,
                                              "UNKNOWN_TOPIC_OR_PARTITION")


# ------------------------------------------------------------------------ independent encoders


def _kafka_python_batch(codec: int, count: int, seed: int) -> bytes:
    builder = KafkaPythonBuilder(magic=2, compression_type=codec, is_transactional=False,
                                 producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                 batch_size=1 << 20)
    rng = random.Random(seed)
    for i in range(count):
        key = None if i % 3 == 0 else b"key-%d" % i
        value = None if i % 7 == 6 else bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
        headers = [("h", b"%d" % i)] if i % 2 else []
        builder.append(i, timestamp=T0 + i * 3, key=key, value=value, headers=headers)
    return bytes(builder.build())


def _aiokafka_batch(codec: int, count: int) -> bytes:
    builder = AioBuilder(magic=2, compression_type=codec, is_transactional=False,
                         producer_id=-1, producer_epoch=-1, base_sequence=-1,
                         batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=T0 + i, key=b"k%d" % i, value=b"value %d" % i, headers=[])
    return bytes(builder.build())


def _as_kafka_stores_it(batch: bytes, base_offset: int, fetched: bytes) -> bytes:
    """What a Kafka leader stores for a client's v2 CreateTime batch: the client's bytes with the
    base offset and the partition leader epoch set (neither is covered by the CRC); the rest,
    CRC included, untouched. The epoch is the leader's (the fetched batch tells which)."""
    epoch = fetched[12:16]
    return struct.pack(">q", base_offset) + batch[8:12] + epoch + batch[16:]


@pytest.mark.parametrize(
    ("codec", "encoder"),
    [(0, "kafka-python"), (1, "kafka-python"), (3, "kafka-python"), (4, "kafka-python"),
     (2, "aiokafka"), (3, "aiokafka")],
)
def test_batches_from_independent_encoders_round_trip(stub, codec, encoder) -> None:
    topic = f"pf-foreign-{encoder}-{codec}"
    _create(stub, topic)
    if encoder == "kafka-python":
        # kafka-python's snappy needs python-snappy (not installed): aiokafka covers snappy.
        batches = [_kafka_python_batch(codec, n, seed=n) for n in (1, 17, 50)]
    else:
        batches = [_aiokafka_batch(codec, n) for n in (1, 40)]
    offsets = []
    for batch in batches:
        validate_batch(batch)
        offsets.append(_produce(stub, topic, batch).base_offset)
    fetched = _fetch(stub, topic, 0, format=pb.FETCH_FORMAT_RECORD_BATCHES).record_batches
    position = 0
    for batch, base_offset in zip(batches, offsets, strict=True):
        stored = fetched[position:position + len(batch)]
        assert stored == _as_kafka_stores_it(batch, base_offset, stored)
        validate_batch(stored)  # the CRC the client computed still holds
        position += len(batch)
    assert position == len(fetched)
    # Decoded, the records are the encoder's.
    records = _fetch_all(stub, topic)
    assert len(records) == sum(validate_batch(b).records_count for b in batches)
    assert [r.offset for r in records] == list(range(len(records)))


def test_random_damage_is_refused_cleanly_and_never_corrupts_the_log(stub, rpc_error) -> None:
    """Nothing a client sends may crash the server or corrupt a log: 300 damaged copies of
    valid requests (bit flips, cuts, overwritten length fields, appended junk) are either
    accepted whole (damage to bytes outside the CRC, such as the leader epoch) or refused with
    INVALID_ARGUMENT; never INTERNAL. The log then holds only valid batches, in order."""
    _create(stub, "pf-damage", **{"max.message.bytes": "100000"})
    rng = random.Random(2024)
    originals = [
        build_batch([(T0 + i, b"k%d" % i, bytes(rng.randint(0, 300)), ()) for i in range(n)],
                    compression=codec)
        for n, codec in ((1, 0), (7, 1), (30, 2), (12, 3), (50, 4))
    ]
    accepted = refused = 0
    for _ in range(300):
        damaged = bytearray(rng.choice(originals))
        kind = rng.randrange(4)
        if kind == 0:
            for _ in range(rng.randint(1, 3)):
                damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        elif kind == 1:
            del damaged[rng.randrange(1, len(damaged)):]
        elif kind == 2:
            struct.pack_into(">i", damaged, 8, rng.choice((-1, 0, 13, 61, 2**31 - 1,
                                                           len(damaged) + 5)))
        else:
            damaged += bytes(rng.randrange(256) for _ in range(rng.randint(1, 80)))
        try:
            _produce(stub, "pf-damage", bytes(damaged))
            accepted += 1
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, (kind, exc.details())
            refused += 1
    assert refused > 200
    offset = 0
    while True:
        response = _fetch(stub, "pf-damage", offset, format=pb.FETCH_FORMAT_RECORD_BATCHES)
        for header, _ in iter_batches(response.record_batches):
            assert header.base_offset == offset
            offset = header.last_offset + 1
        if not response.record_batches:
            break
    assert response.high_watermark == offset
    assert _produce(stub, "pf-damage", originals[0]).base_offset == offset


def test_decoded_records_are_bounded_by_max_bytes(stub) -> None:
    """Compressed batches that decode to far more than they store: a RECORDS fetch stops after
    the batch that passed max_bytes of keys and values, and next_offset says where to go on."""
    _create(stub, "pf-bomb")
    for i in range(4):  # each ~1 MB decoded, a few KB stored
        _produce(stub, "pf-bomb", build_batch(
            [(T0 + i, None, bytes(10_000), ()) for _ in range(100)], compression=4))
    raw = _fetch(stub, "pf-bomb", 0, max_bytes=50_000, format=pb.FETCH_FORMAT_RECORD_BATCHES)
    assert raw.next_offset == 400  # all four stored batches fit in 50 KB
    decoded = _fetch(stub, "pf-bomb", 0, max_bytes=50_000)
    assert [r.offset for r in decoded.records] == list(range(100))  # the first batch, whole
    assert decoded.next_offset == 100
    decoded = _fetch(stub, "pf-bomb", 150, max_bytes=1_000_000)  # 500 KB, then 1.5 MB: stop
    assert [r.offset for r in decoded.records] == list(range(150, 300))
    assert decoded.next_offset == 300
    assert len(_fetch_all(stub, "pf-bomb")) == 400
