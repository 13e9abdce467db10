"""Argument checks and proto translation shared by Client and SyncClient (stratalog.client.wire)."""

from __future__ import annotations

import pytest

from stratalog.client import (
    FetchFormat,
    IsolationLevel,
    ProducerIdAndEpoch,
    ProducerRecord,
    TopicPartition,
    TransactionDescription,
    wire,
)
from stratalog.records import Compression, TimestampType
from stratalog.v1 import broker_pb2 as pb


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: wire.produce_request("t", -1, [b"v"], None, "none", False), ValueError,
         "partition"),
        (lambda: wire.produce_request("t", True, [b"v"], None, "none", False), TypeError,
         "partition"),
        (lambda: wire.produce_request("t", 2**31, [b"v"], None, "none", False), ValueError,
         "partition"),
        (lambda: wire.produce_request("", 0, [b"v"], None, "none", False), ValueError, "topic"),
        (lambda: wire.produce_request(b"t", 0, [b"v"], None, "none", False), TypeError, "topic"),
        (lambda: wire.produce_request("t", 0, ["text"], None, "none", False), TypeError,
         r"records\[0\]"),
        (lambda: wire.produce_request("t", 0, [ProducerRecord("text")], None, "none", False),
         TypeError, r"records\[0\]\.value"),
        (lambda: wire.produce_request("t", 0, [ProducerRecord(b"v", key=1)], None, "none",
                                      False), TypeError, r"records\[0\]\.key"),
        (lambda: wire.produce_request("t", 0, [ProducerRecord(b"v", headers=[("h", "x")])],
                                      None, "none", False), TypeError, "headers"),
        (lambda: wire.produce_request("t", 0, [ProducerRecord(b"v", timestamp_ms=-1)], None,
                                      "none", False), ValueError, "timestamp_ms"),
        (lambda: wire.produce_request("t", 0, [b"v"], b"x", "none", False), ValueError,
         "exactly one"),
        (lambda: wire.produce_request("t", 0, None, None, "none", False), ValueError,
         "exactly one"),
        (lambda: wire.produce_request("t", 0, [], None, "none", False), ValueError, "empty"),
        (lambda: wire.produce_request("t", 0, None, b"", "none", False), ValueError, "empty"),
        (lambda: wire.produce_request("t", 0, [b"v"], None, "brotli", False), ValueError,
         "compression"),
        (lambda: wire.produce_request("t", 0, [b"v"], None, 7, False), ValueError,
         "compression"),
        (lambda: wire.produce_request("t", 0, [b"v"], None, "none", 1), TypeError, "flush"),
        (lambda: wire.fetch_by_offset_request("t", 0, -1, 0, 0, 0, 0, 0), ValueError, "offset"),
        (lambda: wire.fetch_by_offset_request("t", 0, 0, -1, 0, 0, 0, 0), ValueError,
         "max_bytes"),
        (lambda: wire.fetch_by_offset_request("t", 0, 0, 0, -5, 0, 0, 0), ValueError,
         "max_wait_ms"),
        (lambda: wire.fetch_by_offset_request("t", 0, 0, 0, 0, 0, 9, 0), ValueError,
         "fetch_format"),
        (lambda: wire.fetch_by_offset_request("t", 0, 0, 0, 0, 0, 0, 3), ValueError,
         "isolation_level"),
        (lambda: wire.fetch_by_offset_request("t", 0, 1.5, 0, 0, 0, 0, 0), TypeError, "offset"),
        (lambda: wire.fetch_by_timestamp_request("t", 0, -1, 0, 0, 0), ValueError,
         "timestamp_ms"),
        (lambda: wire.list_offsets_request("t", 0, -4, 0), ValueError, "timestamp_ms"),
        (lambda: wire.subscribe_request("t", 0, None, None, 0, 0, 0), ValueError, "exactly one"),
        (lambda: wire.subscribe_request("t", 0, 1, 2, 0, 0, 0), ValueError, "exactly one"),
        (lambda: wire.delete_records_request("t", 0, -2), ValueError, "before_offset"),
        (lambda: wire.create_topic_request("t", 0, None), ValueError, "partitions"),
        (lambda: wire.create_topic_request("t", 1, {"segment.bytes": 5}), TypeError, "configs"),
        (lambda: wire.create_topic_request("t", 1, [("a", "b")]), TypeError, "configs"),
        (lambda: wire.alter_topic_configs_request("t", None, "retention.ms"), TypeError,
         "delete"),
        # Exactly-once: producer fields of a produce, and the transaction RPCs.
        (lambda: wire.produce_request("t", 0, [b"v"], None, "none", False, -1), ValueError,
         "producer_id"),
        (lambda: wire.produce_request("t", 0, [b"v"], None, "none", False, 1, 2**15),
         ValueError, "producer_epoch"),
        (lambda: wire.produce_request("t", 0, [b"v"], None, "none", False, 1, 0, -1),
         ValueError, "base_sequence"),
        (lambda: wire.produce_request("t", 0, [b"v"], None, "none", False, 1, 0, 2**31),
         ValueError, "base_sequence"),
        (lambda: wire.produce_request("t", 0, [b"v"], None, "none", False, None, 0, 5),
         ValueError, "need a producer_id"),
        (lambda: wire.produce_request("t", 0, [b"v"], None, "none", False, None, 0, 0, True),
         ValueError, "need a producer_id"),
        (lambda: wire.produce_request("t", 0, [b"v"], None, "none", False, 1, 0, 0, 1),
         TypeError, "transactional"),
        (lambda: wire.produce_request("t", 0, None, b"x", "none", False, 1), ValueError,
         "record_batches carry them"),
        (lambda: wire.init_producer_id_request("", 0), ValueError, "transactional_id"),
        (lambda: wire.init_producer_id_request(b"t", 0), TypeError, "transactional_id"),
        (lambda: wire.init_producer_id_request("t", -1), ValueError, "transaction_timeout_ms"),
        (lambda: wire.init_producer_id_request(None, 1000), ValueError,
         "transaction_timeout_ms applies to a transactional_id"),
        (lambda: wire.add_partitions_to_txn_request("t", 1, 0, []), ValueError,
         "partitions must not be empty"),
        (lambda: wire.add_partitions_to_txn_request("t", 1, 0, "topic"), TypeError,
         "partitions"),
        (lambda: wire.add_partitions_to_txn_request("t", 1, 0, [("a", 0, 1)]), TypeError,
         r"partitions\[0\]"),
        (lambda: wire.add_partitions_to_txn_request("t", 1, 0, [("a", -1)]), ValueError,
         r"partitions\[0\] partition"),
        (lambda: wire.add_partitions_to_txn_request("t", 1, 0, [("", 0)]), ValueError,
         r"partitions\[0\] topic"),
        (lambda: wire.add_partitions_to_txn_request("t", -1, 0, [("a", 0)]), ValueError,
         "producer_id"),
        (lambda: wire.end_txn_request("t", 1, -1, True), ValueError, "producer_epoch"),
        (lambda: wire.end_txn_request("t", 1, 0, "yes"), TypeError, "commit"),
        (lambda: wire.end_txn_request(None, 1, 0, True), TypeError, "transactional_id"),
        (lambda: wire.describe_transaction_request(""), ValueError, "transactional_id"),
    ],
)
def test_bad_arguments_are_named(call, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_produce_request_records_form() -> None:
    request = wire.produce_request(
        "events",
        3,
        [
            b"plain",
            ProducerRecord(None, key=b"", timestamp_ms=5, headers=[("a", None), ("b", b"x")]),
        ],
        None,
        "zstd",
        True,
    )
    assert request.topic == "events" and request.partition == 3 and request.flush
    assert request.compression == pb.COMPRESSION_ZSTD
    plain, tombstone = request.records
    assert plain.value == b"plain" and not plain.HasField("key")
    assert not plain.HasField("timestamp")  # unset: the server's clock
    assert not tombstone.HasField("value") and tombstone.HasField("key") and tombstone.key == b""
    assert tombstone.timestamp == 5
    assert [(h.key, h.HasField("value")) for h in tombstone.headers] == [("a", False), ("b", True)]


def test_produce_request_producer_fields() -> None:
    plain = wire.produce_request("t", 0, [b"v"], None, "none", False)
    assert not plain.HasField("producer_id")  # unset: a plain produce
    request = wire.produce_request("t", 0, [b"v"], None, "none", False, 0, 7, 2**31 - 1, True)
    assert request.HasField("producer_id") and request.producer_id == 0  # id 0 is an id
    assert (request.producer_epoch, request.base_sequence, request.transactional) == (
        7, 2**31 - 1, True)


def test_transaction_requests_and_results() -> None:
    assert not wire.init_producer_id_request(None, 0).HasField("transactional_id")
    init = wire.init_producer_id_request("app", 5000)
    assert (init.transactional_id, init.transaction_timeout_ms) == ("app", 5000)
    add = wire.add_partitions_to_txn_request(
        "app", 9, 2, [TopicPartition("a", 1), ("b", 0), ("a", 1)])
    assert (add.transactional_id, add.producer_id, add.producer_epoch) == ("app", 9, 2)
    assert [(tp.topic, tp.partition) for tp in add.partitions] == [("a", 1), ("b", 0)]
    end = wire.end_txn_request("app", 9, 2, False)
    assert not end.commit and end.producer_id == 9
    assert wire.producer_id_and_epoch(
        pb.InitProducerIdResponse(producer_id=9, producer_epoch=3)) == ProducerIdAndEpoch(9, 3)
    described = wire.transaction_description(pb.DescribeTransactionResponse(
        transactional_id="app", producer_id=9, producer_epoch=3, state="Ongoing",
        transaction_timeout_ms=60000, transaction_start_time_ms=5, last_update_time_ms=6,
        partitions=[pb.TopicPartition(topic="a", partition=1)]))
    assert described == TransactionDescription(
        "app", 9, 3, "Ongoing", 60000, 5, 6, (TopicPartition("a", 1),))
    assert wire.produce_result(pb.ProduceResponse(base_offset=4, duplicate=True)).duplicate


def test_produce_request_batches_form_accepts_bytes_like() -> None:
    request = wire.produce_request("t", 0, None, bytearray(b"abc"), Compression.NONE, False)
    assert request.record_batches == b"abc" and not request.records


def test_parse_compression_names_and_ids() -> None:
    assert wire.parse_compression("LZ4") is Compression.LZ4
    assert wire.parse_compression(2) is Compression.SNAPPY
    assert wire.parse_compression(Compression.GZIP) is Compression.GZIP


def test_subscribe_request_oneof() -> None:
    by_offset = wire.subscribe_request("t", 1, 0, None, 10, FetchFormat.RECORD_BATCHES, 0)
    assert by_offset.WhichOneof("start") == "offset" and by_offset.offset == 0
    by_time = wire.subscribe_request("t", 1, None, 0, 0, 0, IsolationLevel.READ_COMMITTED)
    assert by_time.WhichOneof("start") == "timestamp"
    assert by_time.isolation_level == pb.READ_COMMITTED


def test_fetch_result_translation() -> None:
    response = pb.FetchResponse(
        topic="t", partition=4, high_watermark=10, log_start_offset=2, next_offset=9,
        records=[
            pb.Record(offset=7, timestamp=100, key=b"k", value=b"v",
                      timestamp_type=pb.LOG_APPEND_TIME,
                      headers=[pb.Header(key="h"), pb.Header(key="i", value=b"")]),
            pb.Record(offset=8, timestamp=101),
        ],
        matched_offset=0, matched_timestamp=0,
        aborted_transactions=[pb.AbortedTransaction(producer_id=3, first_offset=1)],
        last_stable_offset=8,
    )
    by_offset = wire.fetch_result(response, by_timestamp=False)
    assert (by_offset.high_watermark, by_offset.log_start_offset, by_offset.next_offset) == (
        10, 2, 9)
    # proto3 sends 0 for "not set"; only fetches by timestamp report a match.
    assert (by_offset.matched_offset, by_offset.matched_timestamp) == (-1, -1)
    first, second = by_offset.records
    assert first.topic == "t" and first.partition == 4 and first.offset == 7
    assert first.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert first.headers == (("h", None), ("i", b""))
    assert second.key is None and second.value is None
    assert second.timestamp_type is TimestampType.CREATE_TIME
    assert by_offset.aborted_transactions[0].producer_id == 3
    assert by_offset.last_stable_offset == 8
    by_time = wire.fetch_result(response, by_timestamp=True)
    assert (by_time.matched_offset, by_time.matched_timestamp) == (0, 0)


def test_topic_info_sorts_partitions() -> None:
    description = pb.TopicDescription(
        name="t", configs={"segment.bytes": "1024", "retention.ms": "1"},
        partitions=[pb.PartitionDescription(partition=1, log_end_offset=5),
                    pb.PartitionDescription(partition=0, max_timestamp=-1)],
        overridden_configs=["segment.bytes"],
    )
    info = wire.topic_info(description)
    assert info.overridden_configs == {"segment.bytes"}
    assert info.num_partitions == 2
    assert [p.partition for p in info.partitions] == [0, 1]
    assert info.partitions[1].log_end_offset == 5
    assert info.configs == {"segment.bytes": "1024", "retention.ms": "1"}
    # Not a compacted topic's: no cleaner position.
    assert info.partitions[0].cleaned_offset is None
    assert info.partitions[0].dirty_ratio is None and info.partitions[0].last_clean_ms is None


def test_topic_info_takes_the_cleaners_position_where_the_server_set_it() -> None:
    description = pb.TopicDescription(
        name="t", configs={"cleanup.policy": "compact"},
        partitions=[pb.PartitionDescription(partition=0, cleaned_offset=0, dirty_ratio=0.0,
                                            last_clean_ms=-1),
                    pb.PartitionDescription(partition=1, cleaned_offset=70, dirty_ratio=0.5,
                                            last_clean_ms=1_700_000_000_000)],
    )
    first, second = wire.topic_info(description).partitions
    # Cleaned offset 0 (never cleaned) is a position, not "none": proto3 optional tells them apart.
    assert (first.cleaned_offset, first.dirty_ratio, first.last_clean_ms) == (0, 0.0, -1)
    assert (second.cleaned_offset, second.dirty_ratio, second.last_clean_ms) == (
        70, 0.5, 1_700_000_000_000)


def test_clean_partition_request_checks_its_arguments() -> None:
    assert wire.clean_partition_request("t", 3) == pb.CleanPartitionRequest(topic="t",
                                                                            partition=3)
    with pytest.raises(ValueError, match="partition"):
        wire.clean_partition_request("t", -1)
    result = wire.cleaning_result("t", 3, pb.CleanPartitionResponse(
        first_dirty_offset_before=5, end_offset=90, bytes_read=2000, bytes_written=500,
        records_read=85, records_kept=20, segments_before=4, segments_after=1, duration_ms=7))
    assert (result.topic, result.partition, result.end_offset, result.records_removed) == (
        "t", 3, 90, 65)
