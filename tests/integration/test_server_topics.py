"""Topic admin RPCs against a real server: create, list, describe, alter, delete, and bad input."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest

from stratalog.records import build_batch
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc


def _listing(data_dir: Path) -> list[str]:
    """What a refused request must not change: the entries beside the data directory and the
    partition directories in it (files in it change with checkpoints)."""
    beside = [p.name for p in data_dir.parent.iterdir()]
    inside = [f"data/{p.name}" for p in data_dir.iterdir() if p.is_dir()]
    return sorted(beside + inside)


def _names(stub) -> set[str]:
    return {t.name for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=30).topics}


def test_create_describe_list_alter_delete(stub, rpc_error) -> None:
    created = stub.CreateTopic(
        pb.CreateTopicRequest(name="t-admin", partitions=3, configs={"segment.bytes": "1048576"}),
        timeout=30,
    ).topic
    assert created.name == "t-admin"
    assert [p.partition for p in created.partitions] == [0, 1, 2]
    for p in created.partitions:
        assert (p.log_start_offset, p.log_end_offset, p.max_timestamp) == (0, 0, -1)
        assert p.segment_count == 1
        assert p.log_dir
    # Every effective config, the defaults included.
    assert created.configs["segment.bytes"] == "1048576"
    assert created.configs["retention.ms"] == "604800000"
    assert created.configs["cleanup.policy"] == "delete"

    assert "t-admin" in _names(stub)
    described = stub.DescribeTopic(pb.DescribeTopicRequest(name="t-admin"), timeout=30).topic
    assert described == created

    altered = stub.AlterTopicConfigs(
        pb.AlterTopicConfigsRequest(name="t-admin", set={"retention.ms": "1000"}), timeout=30
    ).topic
    assert altered.configs["retention.ms"] == "1000"
    assert altered.configs["segment.bytes"] == "1048576"
    back = stub.AlterTopicConfigs(
        pb.AlterTopicConfigsRequest(name="t-admin", delete=["retention.ms", "segment.bytes"]),
        timeout=30,
    ).topic
    assert back.configs["retention.ms"] == "604800000"
    assert back.configs["segment.bytes"] == "1073741824"  # Kafka's default

    stub.DeleteTopic(pb.DeleteTopicRequest(name="t-admin"), timeout=30)
    assert "t-admin" not in _names(stub)
    error = rpc_error(stub.DescribeTopic, pb.DescribeTopicRequest(name="t-admin"))
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOPIC_OR_PARTITION")


def test_describe_shows_what_was_produced(stub) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(name="t-described", partitions=2), timeout=30)
    batch = build_batch([(1_700_000_000_000 + i, None, b"v", ()) for i in range(5)])
    stub.Produce(pb.ProduceRequest(topic="t-described", partition=1, record_batches=batch),
                 timeout=30)
    topic = stub.DescribeTopic(pb.DescribeTopicRequest(name="t-described"), timeout=30).topic
    p0, p1 = topic.partitions
    assert (p0.log_end_offset, p0.size_bytes, p0.max_timestamp) == (0, 0, -1)
    assert (p1.log_start_offset, p1.log_end_offset) == (0, 5)
    assert p1.size_bytes == len(batch)
    assert p1.max_timestamp == 1_700_000_000_004


def test_recreated_topic_starts_empty(stub) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(name="t-again", partitions=1), timeout=30)
    batch = build_batch([(1, None, b"old", ())])
    stub.Produce(pb.ProduceRequest(topic="t-again", record_batches=batch), timeout=30)
    stub.DeleteTopic(pb.DeleteTopicRequest(name="t-again"), timeout=30)
    topic = stub.CreateTopic(pb.CreateTopicRequest(name="t-again", partitions=1), timeout=30).topic
    assert topic.partitions[0].log_end_offset == 0
    fetched = stub.FetchByOffset(pb.FetchByOffsetRequest(topic="t-again", offset=0), timeout=30)
    assert list(fetched.records) == []


@pytest.mark.parametrize(
    "name", ["", "../x", "a/b", "x" * 250, ".", "..", "bad name", "nul\0", "ünï", "..\\x"]
)
def test_invalid_topic_names_are_refused_and_touch_no_file(stub, rpc_error, server, name) -> None:
    before = _listing(server.data_dir)
    error = rpc_error(stub.CreateTopic, pb.CreateTopicRequest(name=name, partitions=1))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_TOPIC")
    assert error.metadata["field"] == "name"
    assert _listing(server.data_dir) == before
    for method, request in (
        (stub.DescribeTopic, pb.DescribeTopicRequest(name=name)),
        (stub.DeleteTopic, pb.DeleteTopicRequest(name=name)),
        (stub.AlterTopicConfigs, pb.AlterTopicConfigsRequest(name=name)),
        (stub.Produce, pb.ProduceRequest(topic=name, record_batches=b"x")),
        (stub.FetchByOffset, pb.FetchByOffsetRequest(topic=name)),
        (stub.FetchByTimestamp, pb.FetchByTimestampRequest(topic=name)),
        (stub.ListOffsets, pb.ListOffsetsRequest(topic=name)),
        (stub.Subscribe, pb.SubscribeRequest(topic=name, offset=0)),
        (stub.DeleteRecords, pb.DeleteRecordsRequest(topic=name)),
    ):
        error = rpc_error(method, request)
        assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_TOPIC")


@pytest.mark.parametrize("partitions", [0, -1, 10_001])
def test_bad_partition_counts(stub, rpc_error, partitions) -> None:
    error = rpc_error(stub.CreateTopic, pb.CreateTopicRequest(name="t-count", partitions=partitions))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_TOPIC")
    assert error.metadata["field"] == "partitions"
    assert str(partitions) in error.message
    assert "t-count" not in _names(stub)


@pytest.mark.parametrize("replication_factor", [2, 3, -1])
def test_a_single_server_holds_one_copy(stub, rpc_error, replication_factor) -> None:
    request = pb.CreateTopicRequest(name="t-rf", partitions=1,
                                    replication_factor=replication_factor)
    error = rpc_error(stub.CreateTopic, request)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT,
                                          "INVALID_REPLICATION_FACTOR")
    assert f"replication factor {replication_factor}" in error.message
    assert "single server" in error.message
    assert "t-rf" not in _names(stub)



@pytest.mark.parametrize("replication_factor", [0, 1])
def test_a_single_server_takes_replication_factor_0_and_1(stub, replication_factor) -> None:
    request = pb.CreateTopicRequest(name=f"t-rf{replication_factor}", partitions=1,
                                    replication_factor=replication_factor)
    assert stub.CreateTopic(request, timeout=30).topic.name == f"t-rf{replication_factor}"


def test_duplicate_topic(stub, rpc_error) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(name="t-dup", partitions=1), timeout=30)
    error = rpc_error(stub.CreateTopic, pb.CreateTopicRequest(name="t-dup", partitions=2))
    assert (error.code, error.reason) == (grpc.StatusCode.ALREADY_EXISTS, "TOPIC_ALREADY_EXISTS")
    topic = stub.DescribeTopic(pb.DescribeTopicRequest(name="t-dup"), timeout=30).topic
    assert len(topic.partitions) == 1


@pytest.mark.parametrize(
    ("configs", "word"),
    [
        ({"segment.byte": "1048576"}, "segment.byte"),
        ({"segment.bytes": "lots"}, "segment.bytes"),
        ({"retention.ms": "-5"}, "retention.ms"),
        ({"message.timestamp.type": "WallClock"}, "message.timestamp.type"),
    ],
)
def test_invalid_configs(stub, rpc_error, configs, word) -> None:
    error = rpc_error(stub.CreateTopic,
                      pb.CreateTopicRequest(name="t-badconf", partitions=1, configs=configs))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CONFIG")
    assert word in error.message
    assert "t-badconf" not in _names(stub)


def test_alter_errors(stub, rpc_error) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(name="t-alter", partitions=1), timeout=30)
    error = rpc_error(stub.AlterTopicConfigs,
                      pb.AlterTopicConfigsRequest(name="t-alter", set={"nope.ms": "1"}))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CONFIG")
    error = rpc_error(stub.AlterTopicConfigs, pb.AlterTopicConfigsRequest(
        name="t-alter", set={"retention.ms": "1"}, delete=["retention.ms"]))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CONFIG")
    assert error.metadata["field"] == "delete"
    error = rpc_error(stub.AlterTopicConfigs,
                      pb.AlterTopicConfigsRequest(name="t-missing", set={"retention.ms": "1"}))
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOPIC_OR_PARTITION")
    configs = stub.DescribeTopic(pb.DescribeTopicRequest(name="t-alter"), timeout=30).topic.configs
    assert configs["retention.ms"] == "604800000"


def test_delete_unknown_topic(stub, rpc_error) -> None:
    error = rpc_error(stub.DeleteTopic, pb.DeleteTopicRequest(name="t-never"))
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOPIC_OR_PARTITION")


def test_delete_a_topic_while_it_is_produced_to(server, stub) -> None:
    """Producers racing a DeleteTopic get offsets or NOT_FOUND (the append lock orders them),
    never an internal error, and the name can be reused at once."""
    stub.CreateTopic(pb.CreateTopicRequest(name="t-race", partitions=2), timeout=30)
    outcomes: list[str] = []
    stop = threading.Event()

    def produce(partition: int) -> None:
        with grpc.insecure_channel(server.target) as channel:
            own = broker_pb2_grpc.BrokerStub(channel)
            batch = build_batch([(1, None, b"x" * 100, ())] * 5)
            while not stop.is_set():
                try:
                    own.Produce(pb.ProduceRequest(topic="t-race", partition=partition,
                                                  record_batches=batch), timeout=30)
                    outcomes.append("ok")
                except grpc.RpcError as exc:
                    outcomes.append(exc.code().name)

    threads = [threading.Thread(target=produce, args=(p % 2,)) for p in range(4)]
    for thread in threads:
        thread.start()
    while outcomes.count("ok") < 50:
        stop.wait(0.01)
    stub.DeleteTopic(pb.DeleteTopicRequest(name="t-race"), timeout=30)
    while "NOT_FOUND" not in outcomes:
        stop.wait(0.01)
    stub.CreateTopic(pb.CreateTopicRequest(name="t-race", partitions=1), timeout=30)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert set(outcomes) <= {"ok", "NOT_FOUND"}, set(outcomes)
