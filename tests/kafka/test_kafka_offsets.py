"""Committed offsets over the Kafka protocol (issue 28; server/kafka/apis/offsets.py and the
admin side of groups.py): the same offsets from both front ends, real clients' admin calls,
and Kafka's per-partition answers.

* a commit by confluent-kafka is what the gRPC client's ``offset_fetch`` and ``stratalog
  groups describe`` read; a commit by the gRPC client is what confluent's ``committed()`` reads;
* confluent's AdminClient lists, describes and deletes groups, lists and alters their offsets
  (OffsetCommit), refuses to delete a group with members (NON_EMPTY_GROUP); kafka-python's
  admin fetches several groups' offsets in one OffsetFetch v8 and deletes offsets
  (OffsetDelete);
* an OffsetCommit answers each partition on its own: an unknown partition, an offset beyond
  the log end, a negative offset, next to one that commits.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.error import KafkaError, KafkaException
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest
from kafka.structs import OffsetAndMetadata

from stratalog.client import Client, SyncClient
from stratalog.client.groups import membership_messages
from tests.integration.conftest import ServerProcess, launch_server, wait_until
from tests.kafka.kafka_wire import KafkaWire, ask

GROUP_FLAGS = (
    "--group-initial-rebalance-delay-ms", "0",
    "--group-min-session-timeout-ms", "100",
    "--offsets-topic-num-partitions", "3",
)
BOUND_S = 60.0
CLI = [sys.executable, "-m", "stratalog.cli"]


@pytest.fixture(scope="module")
def group_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = launch_server(tmp_path_factory.mktemp("kafka-offsets") / "data", *GROUP_FLAGS)
    yield process
    assert process.stop(signal.SIGTERM) == 0, process.log_text()[-4000:]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic(server: ServerProcess, partitions: int, records: int) -> str:
    """A topic with ``records`` records in each partition."""
    topic = _name("offsets")
    with SyncClient(server.target) as client:
        client.create_topic(topic, partitions)
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap})
    for p in range(partitions):
        for i in range(records):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0
    return topic


def _consumer(server: ServerProcess, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})


def _grpc_offsets(server: ServerProcess, group: str) -> dict[tuple[str, int], int]:
    async def fetch() -> dict[tuple[str, int], int]:
        async with Client(server.target) as client:
            found = await client.offset_fetch(group)
        return {(tp.topic, tp.partition): committed.offset for tp, committed in found.items()}

    return asyncio.run(fetch())


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
    return subprocess.run([*CLI, *args, "--target", server.target], capture_output=True,
                          timeout=BOUND_S, env=env)


def test_a_confluent_commit_is_what_the_grpc_client_and_the_cli_read(group_server):
    topic, group = _topic(group_server, 2, 10), _name("g-both")
    consumer = _consumer(group_server, group)
    consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    consumer.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 3)],
                    asynchronous=False)
    consumer.close()
    assert _grpc_offsets(group_server, group) == {(topic, 0): 7, (topic, 1): 3}
    described = _cli(group_server, "groups", "describe", group, "--format", "json")
    assert described.returncode == 0, described.stderr
    committed = {r["partition"]: r["committed_offset"]
                 for r in json.loads(described.stdout)["partitions"] if r["topic"] == topic}
    assert committed == {0: 7, 1: 3}


def test_a_grpc_commit_is_what_confluent_reads(group_server):
    topic, group = _topic(group_server, 2, 10), _name("g-grpc")

    async def commit() -> None:
        async with Client(group_server.target) as client:
            await client.offset_commit(membership_messages.OffsetCommitRequest(
                group_id=group, generation_id=-1, member_id="", group_instance_id=None,
                offsets=(membership_messages.CommittedOffset(topic, 0, 4, metadata="m"),
                         membership_messages.CommittedOffset(topic, 1, 9))))

    asyncio.run(commit())
    consumer = _consumer(group_server, group)
    try:
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                       timeout=BOUND_S)
    finally:
        consumer.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 4), (1, 9)]
    # The metadata as kafka-python reads it (confluent-kafka 2.16 reads a committed offset's
    # metadata past its end: "m\x7f").
    admin = KafkaAdminClient(bootstrap_servers=group_server.kafka_bootstrap)
    try:
        (found,) = admin.list_group_offsets({group: None}).values()
    finally:
        admin.close()
    assert {tp.partition: (o.offset, o.metadata) for tp, o in found.items()} == {
        0: (4, "m"), 1: (9, "")}
    # A consumer of the group starts where the gRPC client committed.
    consumer = _consumer(group_server, group)
    consumer.subscribe([topic])
    first: dict[int, int] = {}
    try:
        wait_until(lambda: _first_offsets(consumer, first) and len(first) == 2,
                   "the consumer read both partitions", timeout_s=BOUND_S)
    finally:
        consumer.close()
    assert first == {0: 4, 1: 9}


def _first_offsets(consumer: Consumer, first: dict[int, int]) -> bool:
    message = consumer.poll(0.2)
    if message is not None and message.error() is None:
        first.setdefault(message.partition(), message.offset())
    return True


def test_admin_lists_describes_alters_and_deletes_groups(group_server):
    topic, group = _topic(group_server, 2, 10), _name("g-admin")
    admin = AdminClient({"bootstrap.servers": group_server.kafka_bootstrap})
    member = _consumer(group_server, group)
    member.subscribe([topic])
    try:
        wait_until(lambda: member.poll(0.2) is not None and bool(member.assignment()),
                   "the member joined and read", timeout_s=BOUND_S)
        listed = admin.list_consumer_groups().result(BOUND_S)
        states = {g.group_id: g.state.name for g in listed.valid}
        assert states.get(group) == "STABLE"
        # ListGroups v4's states filter.
        empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(BOUND_S)
        assert group not in {g.group_id for g in empty.valid}
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(BOUND_S)
        assert group in {g.group_id for g in stable.valid}
        described = admin.describe_consumer_groups([group])[group].result(BOUND_S)
        assert described.state.name == "STABLE" and described.partition_assignor == "range"
        (only,) = described.members
        assert (only.client_id, only.host) == ("rdkafka", "127.0.0.1")  # the request header's
        assert sorted(tp.partition for tp in only.assignment.topic_partitions) == [0, 1]
        # A group with a member cannot be deleted.
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([group])[group].result(BOUND_S)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()
    # Offsets of the (now empty) group: altered with OffsetCommit, listed with OffsetFetch.
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 6)])])[group].result(
        BOUND_S)
    listed_offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(BOUND_S)
    assert sorted((tp.partition, tp.offset) for tp in listed_offsets.topic_partitions) == [
        (0, 5), (1, 6)]
    assert _grpc_offsets(group_server, group) == {(topic, 0): 5, (topic, 1): 6}
    admin.delete_consumer_groups([group])[group].result(BOUND_S)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(BOUND_S).valid}
    assert _grpc_offsets(group_server, group) == {}


def test_kafka_python_admin_fetches_several_groups_and_deletes_offsets(group_server):
    topic = _topic(group_server, 2, 10)
    groups = [_name("g-many") for _ in range(3)]
    admin = KafkaAdminClient(bootstrap_servers=group_server.kafka_bootstrap)
    try:
        for offset, group in enumerate(groups, start=1):
            admin.alter_group_offsets(group, {KafkaTopicPartition(topic, 0): OffsetAndMetadata(offset, "", None)})
        # One OffsetFetch v8 for the three groups (kafka-python sends v8 when served).
        fetched = admin.list_group_offsets(dict.fromkeys(groups))
        assert {g: {tp.partition: o.offset for tp, o in found.items()}
                for g, found in fetched.items()} == {g: {0: i} for i, g in
                                                     enumerate(groups, start=1)}
        errors = admin.delete_group_offsets(groups[0], [KafkaTopicPartition(topic, 0)])
        assert [e.errno for e in errors.values()] == [0]
    finally:
        admin.close()
    assert _grpc_offsets(group_server, groups[0]) == {}
    assert _grpc_offsets(group_server, groups[1]) == {(topic, 0): 2}


def test_an_offset_commit_answers_each_partition(group_server):
    topic, group = _topic(group_server, 1, 10), _name("g-each")
    _Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    _Partition = _Topic.OffsetCommitRequestPartition
    with KafkaWire(group_server.kafka_bootstrap) as wire:
        response = ask(wire, OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
                _Topic(name=topic, partitions=[
                    _Partition(partition_index=0, committed_offset=10,
                               committed_metadata="kept"),
                    _Partition(partition_index=1, committed_offset=1),
                ]),
                _Topic(name=_name("missing"), partitions=[
                    _Partition(partition_index=0, committed_offset=1)]),
            ]), version=8)
        codes = {(t.name, p.partition_index): p.error_code for t in response.topics
                 for p in t.partitions}
        assert codes == {(topic, 0): 0, (topic, 1): 3, (next(iter(
            t.name for t in response.topics if t.name != topic)), 0): 3}
        beyond = ask(wire, OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
                _Topic(name=topic, partitions=[
                    _Partition(partition_index=0, committed_offset=11),
                    _Partition(partition_index=0, committed_offset=-5)])]), version=2)
        # OFFSET_OUT_OF_RANGE beyond the log end (10), INVALID_REQUEST for a negative offset.
        assert [p.error_code for p in beyond.topics[0].partitions] == [1, 42]
        fetched = ask(wire, OffsetFetchRequest(group_id=group, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])]),
            version=1)
        assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
                for p in fetched.topics[0].partitions] == [(0, 10, "kept", 0),
                                                           (1, -1, "", 0)]
