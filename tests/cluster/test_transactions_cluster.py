"""Transactions in a cluster (issue 29, item 1): etcd and three real servers, librdkafka's
transactional producer and read_committed consumer over the Kafka listeners.

* A transactional producer commits and aborts transactions across partitions led by different
  servers: a read_committed consumer sees exactly the committed records, once each, and every
  partition's last stable offset reaches its high watermark.
* FindCoordinator(key_type=1) names the leader of the id's __cluster_transaction_state
  partition, from every server alike.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from stratalog.server.transactions.state_partitions import (
    CLUSTER_TRANSACTION_STATE_TOPIC,
    partition_for_transactional_id,
)
from tests.cluster.conftest import metadata, wait_for
from tests.cluster.test_faults import create_topic, start_cluster
from tests.integration.conftest import ServerProcess

PARTITIONS = 3
#: The state topic's partitions in these tests: few, so that its creation is quick.
STATE_PARTITIONS = 5
TXN_FLAGS = ("--transaction-state-log-num-partitions", str(STATE_PARTITIONS))


def bootstrap(servers: dict[int, ServerProcess]) -> str:
    return ",".join(s.kafka_bootstrap for s in servers.values())


def transactional_producer(servers: dict[int, ServerProcess], transactional_id: str,
                           **extra: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap(servers),
                     "transactional.id": transactional_id, "acks": "all",
                     "enable.idempotence": True, "linger.ms": 5,
                     "transaction.timeout.ms": 20_000, **extra})


def leaders(server: ServerProcess, topic: str) -> dict[int, int]:
    answer = metadata(server, topic)
    return {p.partition: p.leader for t in answer.topics for p in t.partitions}


def read_committed(servers: dict[int, ServerProcess], topic: str, partitions: int,
                   timeout_s: float = 60.0) -> list[bytes]:
    """Every record a read_committed consumer sees in ``topic``, once each partition's position
    reached its high watermark (so its last stable offset did: nothing is left open)."""
    consumer = Consumer({"bootstrap.servers": bootstrap(servers), "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        assigned = [TopicPartition(topic, p, 0) for p in range(partitions)]
        consumer.assign(assigned)
        values: list[bytes] = []

        def caught_up() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            if message is not None:
                return False
            for p in range(partitions):
                high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                position = consumer.position([TopicPartition(topic, p)])[0].offset
                if position < high:
                    return False
            return True

        wait_for(caught_up, f"a read_committed consumer reached the end of {topic}", timeout_s)
        return values
    finally:
        consumer.close()


def test_commits_and_aborts_across_partitions_led_by_different_servers(start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic, partitions=PARTITIONS)
    wait_for(lambda: len(set(leaders(servers[1], topic).values()) - {-1}) >= 2,
             f"{topic}'s partitions led by at least two servers")
    producer = transactional_producer(servers, "orders-writer")
    producer.init_transactions(60)
    expected: list[bytes] = []
    for number, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        batch = [f"t{number}-p{p}-r{r}".encode() for p in range(PARTITIONS) for r in range(3)]
        for value in batch:
            producer.produce(topic, value=value, partition=int(value.split(b"-p")[1][0:1]))
        producer.flush(30)
        if commit:
            producer.commit_transaction(60)
            expected.extend(batch)
        else:
            producer.abort_transaction(60)
    seen = read_committed(servers, topic, PARTITIONS)
    assert sorted(seen) == sorted(expected)
    assert len(seen) == len(set(seen))


def test_find_coordinator_names_the_state_partitions_leader(start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    producer = transactional_producer(servers, "finder")
    producer.init_transactions(60)  # FindCoordinator made the topic; InitProducerId served
    partition = partition_for_transactional_id("finder", STATE_PARTITIONS)
    state_leaders = leaders(servers[1], CLUSTER_TRANSACTION_STATE_TOPIC)
    assert len(state_leaders) == STATE_PARTITIONS
    assert state_leaders[partition] in servers
    admin = AdminClient({"bootstrap.servers": bootstrap(servers)})
    try:
        described = admin.describe_topics(
            __import__("confluent_kafka").TopicCollection([CLUSTER_TRANSACTION_STATE_TOPIC]))
        for future in described.values():
            future.result(30)
    except KafkaException:
        pass
