"""A consumer group over the Kafka listener in cluster mode: etcd and three real servers on
127.0.0.1, librdkafka (confluent-kafka) as the group's member.

The group's coordinator is the leader of its ``__consumer_offsets`` partition (docs/groups.md,
"Cluster mode"): Kafka's FindCoordinator from every server names that server at its Kafka
address; the commits a member made through it survive its kill -9, and a member that joins the
group afterwards starts from them at the new coordinator (tests/cluster/test_groups.py does the
same through gRPC).
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.metadata import FindCoordinatorRequest

from stratalog.records.group_partition import partition_for_group
from tests.cluster.conftest import metadata, wait_for
from tests.cluster.test_faults import FAILOVER_BOUND_S, MEMBER_FLAGS, create_topic
from tests.integration.conftest import ServerProcess
from tests.kafka.kafka_wire import KafkaWire, ask

OFFSETS_PARTITIONS = 3
GROUP_FLAGS = ("--group-initial-rebalance-delay-ms", "0",
               "--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS))
RECORDS_PER_PARTITION = 10
_WAIT_S = 60.0


def _find_coordinator(server: ServerProcess, group: str) -> tuple[int, int] | None:
    """(node id, Kafka port) that ``server`` names coordinator of ``group``; None while it
    answers an error (the offsets topic being made, or its partition without a leader)."""
    with KafkaWire(server.kafka_bootstrap) as wire:
        answer = ask(wire, FindCoordinatorRequest(key=group, key_type=0), 3)
    return (answer.node_id, answer.port) if answer.error_code == 0 else None


def _agreed_coordinator(servers: dict[int, ServerProcess], group: str,
                        not_node: int = -1) -> tuple[int, int]:
    seen: list[tuple[int, int]] = []

    def agree() -> bool:
        answers = {_find_coordinator(s, group) for s in servers.values()}
        seen[:] = [a for a in answers if a is not None]
        return None not in answers and len(answers) == 1 and seen[0][0] != not_node

    wait_for(agree, f"every server names one coordinator of {group}", FAILOVER_BOUND_S)
    return seen[0]


def _offsets_leader(server: ServerProcess, partition: int) -> int:
    for topic in metadata(server, "__consumer_offsets").topics:
        for found in topic.partitions:
            if found.partition == partition:
                return found.leader
    return -1


def _consumer(servers: dict[int, ServerProcess], group: str) -> Consumer:
    return Consumer({"bootstrap.servers": ",".join(s.kafka_bootstrap for s in servers.values()),
                     "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 10_000})


def _poll(consumer: Consumer, count: int) -> list[tuple[int, int, bytes]]:
    """``count`` records as (partition, offset, value), waiting at most _WAIT_S."""
    records: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + _WAIT_S
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records read"
        message = consumer.poll(1)
        if message is None or (message.error() is not None
                               and message.error().retriable()):
            continue
        assert message.error() is None, message.error()
        records.append((message.partition(), message.offset(), message.value()))
    return records


def test_a_confluent_group_resumes_from_its_commits_after_its_coordinator_is_killed(
        start_member) -> None:
    servers = {node: start_member(node, *MEMBER_FLAGS, *GROUP_FLAGS) for node in (1, 2, 3)}
    wait_for(lambda: all(len(metadata(s).brokers) == 3 for s in servers.values()),
             "three brokers seen by every server")
    topic = f"kg-{uuid.uuid4().hex[:8]}"
    group = f"group-{topic}"
    create_topic(servers[1], topic, partitions=2)
    producer = Producer({"bootstrap.servers": ",".join(s.kafka_bootstrap
                                                       for s in servers.values()),
                         "acks": "all"})
    for partition in (0, 1):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(topic, value=f"p{partition}-{i}".encode(), partition=partition)
    assert producer.flush(_WAIT_S) == 0

    # FindCoordinator from every server names the leader of the group's partition of
    # __consumer_offsets, at its Kafka listener.
    node, port = _agreed_coordinator(servers, group)
    assert port == servers[node].kafka_port
    partition = partition_for_group(group, OFFSETS_PARTITIONS)
    assert all(_offsets_leader(s, partition) == node for s in servers.values())

    # A member reads part of the records and commits where it is, through the coordinator.
    first = _consumer(servers, group)
    try:
        first.subscribe([topic])
        read = _poll(first, RECORDS_PER_PARTITION)
        first.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in first.committed(
            [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=_WAIT_S)}
    finally:
        first.close()
    read_offsets = {(p, o) for p, o, _ in read}
    assert committed == {p: max((o + 1 for q, o in read_offsets if q == p), default=-1001)
                         for p in (0, 1)}

    # kill -9 of the coordinator's server: the partition's new leader coordinates the group,
    # with the commits, and a new member starts where the first one committed.
    servers.pop(node).kill()
    moved, moved_port = _agreed_coordinator(servers, group, not_node=node)
    assert moved in servers and moved_port == servers[moved].kafka_port
    second = _consumer(servers, group)
    try:
        second.subscribe([topic])
        rest = _poll(second, 2 * RECORDS_PER_PARTITION - len(read))
        assert second.poll(1) is None  # nothing more: no record read twice
    finally:
        second.close()
    start = {p: committed[p] if committed[p] >= 0 else 0 for p in (0, 1)}
    assert sorted((p, o) for p, o, _ in rest) == [
        (p, o) for p in (0, 1) for o in range(start[p], RECORDS_PER_PARTITION)]
    assert {v for _, _, v in read} | {v for _, _, v in rest} == {
        f"p{p}-{i}".encode() for p in (0, 1) for i in range(RECORDS_PER_PARTITION)}
