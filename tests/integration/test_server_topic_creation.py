"""Topics made by use, and topics grown (issue 25), against real server processes.

Automatic creation (Kafka's ``auto.create.topics.enable``, on by default): a Metadata request
with ``allow_auto_topic_creation`` creates a topic it names, as a producer's first lookup does;
with an authorizer, only for a caller who may CREATE it. CreatePartitions (Kafka's): a topic
grows, never shrinks; what it held stays where it was; a restart keeps the new count.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from stratalog.client import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Client,
    PatternType,
    Producer,
    ResourceType,
    SyncClient,
)
from stratalog.client.errors import InvalidPartitionsError, UnknownTopicOrPartitionError
from stratalog.v1 import broker_pb2 as pb

from .conftest import CALL_TIMEOUT_S, ServerProcess

CLI = [sys.executable, "-m", "stratalog.cli"]
ANONYMOUS = "User:ANONYMOUS"


def _cli(target: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
    return subprocess.run([*CLI, *args, "--target", target], input=stdin, capture_output=True,
                          timeout=120, env=env)


def _partitions(client: SyncClient, topic: str) -> int:
    return client.describe_topic(topic).num_partitions


# ------------------------------------------------------------------------ automatic creation


def test_metadata_that_allows_it_creates_a_topic_and_the_producer_asks_for_it(
        server: ServerProcess, stub, rpc_error) -> None:
    # Without the request's consent nothing is created (an admin's lookup, a consumer's).
    error = rpc_error(stub.Metadata, pb.MetadataRequest(topics=["ac-plain"]))
    assert error.reason == "UNKNOWN_TOPIC_OR_PARTITION"
    answer = stub.Metadata(pb.MetadataRequest(topics=["ac-meta"], allow_auto_topic_creation=True),
                           timeout=CALL_TIMEOUT_S)
    assert [(t.name, len(t.partitions)) for t in answer.topics] == [("ac-meta", 1)]
    with SyncClient(server.target) as client:
        assert _partitions(client, "ac-meta") == 1  # num_partitions' default
        with pytest.raises(UnknownTopicOrPartitionError):
            client.describe_topic("ac-plain")

    # What a Kafka user does on day one: produce to a topic no one created.
    result = _cli(server.target, "produce", "ac-cli", stdin=b"first\nsecond\n")
    assert result.returncode == 0, result.stderr.decode()
    with SyncClient(server.target) as client:
        assert [r.value for r in client.fetch_by_offset("ac-cli", 0, 0).records] == [
            b"first", b"second"]


async def test_the_client_producer_creates_its_topic(server: ServerProcess) -> None:
    async with Client(server.target) as client:
        async with Producer(client) as producer:
            metadata = await (await producer.send("ac-producer", b"v", key=b"k"))
        assert metadata.offset == 0
        assert (await client.describe_topic("ac-producer")).num_partitions == 1
        # The Spark sink's producer opts out: a row's unknown topic stays an error.
        async with Producer(client, allow_auto_topic_creation=False) as producer:
            with pytest.raises(UnknownTopicOrPartitionError):
                await producer.send("ac-not-wanted", b"v")
        with pytest.raises(UnknownTopicOrPartitionError):
            await client.describe_topic("ac-not-wanted")


def test_num_partitions_and_turning_it_off(start_server, tmp_path: Path, rpc_error) -> None:
    server = start_server(tmp_path / "three", "--num-partitions", "3")
    with SyncClient(server.target) as client:
        client.metadata(["ac-three"], allow_auto_topic_creation=True)
        assert _partitions(client, "ac-three") == 3
    assert server.stop() == 0

    off = start_server(tmp_path / "off", "--set", "auto.create.topics.enable=false")
    with SyncClient(off.target) as client:
        with pytest.raises(UnknownTopicOrPartitionError):
            client.metadata(["ac-off"], allow_auto_topic_creation=True)
        result = _cli(off.target, "produce", "ac-off", stdin=b"x\n")
        assert result.returncode != 0 and b"UNKNOWN_TOPIC_OR_PARTITION" in result.stderr
        assert [t.name for t in client.list_topics()] == []
    assert off.stop() == 0


def test_with_an_authorizer_only_a_caller_who_may_create_creates(start_server,
                                                                  tmp_path: Path) -> None:
    data = tmp_path / "data"
    admin = start_server(data, "--authorizer", "acl", "--super-users", ANONYMOUS)
    with SyncClient(admin.target) as client:
        # May describe and write any topic named ac-acl-*, but create none.
        client.create_acls([
            AclBinding(ResourceType.TOPIC, "ac-acl-", PatternType.PREFIXED, ANONYMOUS, "*",
                       operation, AclPermissionType.ALLOW)
            for operation in (AclOperation.DESCRIBE, AclOperation.WRITE)
        ])
    assert admin.stop() == 0
    server = start_server(data, "--authorizer", "acl")
    result = _cli(server.target, "produce", "ac-acl-1", stdin=b"x\n")
    assert result.returncode != 0
    assert b"UNKNOWN_TOPIC_OR_PARTITION" in result.stderr, result.stderr.decode()
    assert not (data / "ac-acl-1-0").exists()
    assert server.stop() == 0

    admin = start_server(data, "--authorizer", "acl", "--super-users", ANONYMOUS)
    with SyncClient(admin.target) as client:
        client.create_acls([AclBinding(ResourceType.TOPIC, "ac-acl-1", PatternType.LITERAL,
                                       ANONYMOUS, "*", AclOperation.CREATE,
                                       AclPermissionType.ALLOW)])
    assert admin.stop() == 0
    server = start_server(data, "--authorizer", "acl")
    result = _cli(server.target, "produce", "ac-acl-1", stdin=b"x\n")
    assert result.returncode == 0, result.stderr.decode()
    assert (data / "ac-acl-1-0").is_dir()
    assert server.stop() == 0


# ------------------------------------------------------------------------ CreatePartitions


def test_create_partitions_grows_a_topic_and_refuses_a_decrease(
        start_server, tmp_path: Path, rpc_error) -> None:
    data = tmp_path / "data"
    server = start_server(data)
    with SyncClient(server.target) as client:
        client.create_topic("grow", 2, {"retention.ms": "86400000"})
        client.produce("grow", 0, [b"p0"])
        client.produce("grow", 1, [b"p1"])
        grown = client.create_partitions("grow", 4)
        assert grown.num_partitions == 4
        assert grown.configs["retention.ms"] == "86400000"  # the topic's configs, kept
        assert [p.log_end_offset for p in grown.partitions] == [1, 1, 0, 0]
        assert client.produce("grow", 3, [b"p3"]).base_offset == 0
        assert [r.value for r in client.fetch_by_offset("grow", 0, 0).records] == [b"p0"]
        for count in (4, 3, 1):  # the same count, or fewer: partitions are never removed
            with pytest.raises(InvalidPartitionsError, match="can only be added"):
                client.create_partitions("grow", count)
        with pytest.raises(UnknownTopicOrPartitionError):
            client.create_partitions("no-such-topic", 2)
    with grpc.insecure_channel(server.target) as channel:
        from stratalog.v1 import broker_pb2_grpc

        stub = broker_pb2_grpc.BrokerStub(channel)
        error = rpc_error(stub.CreatePartitions, pb.CreatePartitionsRequest(name="grow"))
        assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT,
                                              "INVALID_PARTITIONS")
        assert error.metadata["field"] == "count"

    # The command a Kafka user types (kafka-topics --alter --partitions).
    result = _cli(server.target, "topics", "alter", "grow", "--partitions", "5")
    assert result.returncode == 0, result.stderr.decode()
    refused = _cli(server.target, "topics", "alter", "grow", "--partitions", "2")
    assert refused.returncode != 0 and b"INVALID_PARTITIONS" in refused.stderr
    assert server.stop(signal.SIGTERM) == 0

    again = start_server(data)
    with SyncClient(again.target) as client:
        topic = client.describe_topic("grow")
        assert topic.num_partitions == 5
        assert [p.log_end_offset for p in topic.partitions] == [1, 1, 0, 1, 0]
    assert again.stop(signal.SIGTERM) == 0


def test_create_partitions_within_the_open_files_limit(start_server, tmp_path: Path) -> None:
    """The new partitions' descriptors are counted as a new topic's: past the limit, refused
    before anything is written."""
    import resource

    server = start_server(tmp_path / "data", rlimits={resource.RLIMIT_NOFILE: (1024, 1024)})
    with SyncClient(server.target) as client:
        client.create_topic("fd", 79)
        from stratalog.client.errors import ResourceLimitExceededError

        with pytest.raises(ResourceLimitExceededError, match="RLIMIT_NOFILE"):
            client.create_partitions("fd", 81)  # room for 80 partitions in all
        assert _partitions(client, "fd") == 79
        assert client.create_partitions("fd", 80).num_partitions == 80
    assert not (tmp_path / "data" / "fd-80").exists()
    assert server.stop() == 0
