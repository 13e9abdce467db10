"""The Kafka listener in cluster mode: etcd and three real servers on 127.0.0.1 (issue 28).

* Metadata from any server lists the three servers' Kafka listeners, the controller and each
  partition's leader, leader epoch, replicas and ISR exactly as the gRPC Metadata RPC does
  (one reading of the cluster view, two translations); a topic the cluster does not know is
  UNKNOWN_TOPIC_OR_PARTITION.
* A follower answers Produce and Fetch NOT_LEADER_OR_FOLLOWER with KIP-951's hints (the
  leader and its epoch; Produce's node_endpoints with its Kafka address); the leader answers a
  newer ``current_leader_epoch`` UNKNOWN_LEADER_EPOCH, and after a failover the new leader
  answers the old epoch FENCED_LEADER_EPOCH.
* OffsetForLeaderEpoch and ListOffsets answer the real epochs.
* Metadata and DescribeCluster answer one cluster id from every server: etcd's
  ``<prefix>/cluster_id``.
* Metadata's auto-creation goes through the controller: a topic created through a follower is
  replicated on every server.
* A leader killed (SIGKILL) under a librdkafka producer (acks=all, idempotent) and consumer:
  both follow the failover, and every acknowledged record is read back afterwards, once each,
  in the order sent.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka.protocol.admin import DescribeClusterRequest
from kafka.protocol.consumer import (
    FetchRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
)
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from tests.cluster.conftest import metadata, wait_for
from tests.cluster.test_faults import FAILOVER_BOUND_S, create_topic, leader_of, start_cluster
from tests.integration.conftest import ServerProcess
from tests.kafka.kafka_wire import KafkaWire, ask

NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PARTITION = 3
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
LEADER_NOT_AVAILABLE = 5
_FETCH_MAX_BYTES = 1 << 20


def _topic() -> str:
    return f"kc-{uuid.uuid4().hex[:8]}"


def _bootstrap(servers: dict[int, ServerProcess]) -> str:
    return ",".join(s.kafka_bootstrap for s in servers.values())


def _kafka_metadata(server: ServerProcess, *topics: str, version: int = 12):
    with KafkaWire(server.kafka_bootstrap) as sock:
        return ask(sock, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t, topic_id=None) for t in topics],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        ), version)


def _auto_create(server: ServerProcess, topic: str):
    with KafkaWire(server.kafka_bootstrap) as sock:
        return ask(sock, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=None)],
            allow_auto_topic_creation=True, include_topic_authorized_operations=False,
        ), 12).topics[0]


def _fetch(topic: str, offset: int, current_leader_epoch: int = -1) -> FetchRequest:
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=current_leader_epoch, fetch_offset=offset,
        last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=_FETCH_MAX_BYTES)
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=_FETCH_MAX_BYTES,
                        isolation_level=0, session_id=0, session_epoch=-1,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[partition])],
                        forgotten_topics_data=[], rack_id="")


def _produce(topic: str, records: bytes) -> ProduceRequest:
    data = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        data(name=topic, partition_data=[data.PartitionProduceData(index=0, records=records)])])


def _one_batch() -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    builder.append(0, timestamp=1_700_000_000_000, key=None, value=b"v", headers=[])
    return bytes(builder.build())


def _produce_with_librdkafka(servers: dict[int, ServerProcess], topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": _bootstrap(servers), "acks": "all",
                         "enable.idempotence": False})
    for i in range(count):
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
    assert producer.flush(60) == 0


def test_metadata_hints_and_epochs_from_every_server(start_member, etcd):
    servers = start_cluster(start_member)
    topic = _topic()
    create_topic(servers[1], topic)
    leader = leader_of(servers, topic)
    followers = [n for n in servers if n != leader]
    wait_for(lambda: all(len(_kafka_metadata(s).brokers) == 3 for s in servers.values()),
             "three Kafka listeners registered and seen by every server")

    # Metadata: the same brokers, controller and partitions as the gRPC RPC, from every server.
    for node_id, server in servers.items():
        grpc_answer = metadata(server, topic)
        answer = _kafka_metadata(server, topic, "no-such-topic")
        assert {(b.node_id, b.host, b.port) for b in answer.brokers} == {
            (n, "127.0.0.1", s.kafka_port) for n, s in servers.items()}, node_id
        assert answer.controller_id == grpc_answer.controller_id
        found = {t.name: t for t in answer.topics}
        assert found["no-such-topic"].error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert found[topic].error_code == 0
        expected = [(p.partition, p.leader, p.leader_epoch, sorted(p.replicas), sorted(p.isr))
                    for p in grpc_answer.topics[0].partitions]
        assert [(p.partition_index, p.leader_id, p.leader_epoch, sorted(p.replica_nodes),
                 sorted(p.isr_nodes)) for p in found[topic].partitions] == expected
        assert [p.error_code for p in found[topic].partitions] == [0]
    epoch = metadata(servers[leader], topic).topics[0].partitions[0].leader_epoch

    # One cluster id, etcd's, from every server (each one's meta.properties has its own).
    cluster_id = etcd.etcdctl("get", "/stratalog/cluster_id", "--print-value-only").strip()
    assert len(cluster_id) == 22  # a Kafka Uuid
    for server in servers.values():
        assert _kafka_metadata(server).cluster_id == cluster_id
        with KafkaWire(server.kafka_bootstrap) as sock:
            described = ask(sock, DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=1), 1)
        assert described.cluster_id == cluster_id

    # Auto-creation goes through the controller: the topic is replicated on every server.
    created = f"{topic}-auto"
    assert _auto_create(servers[followers[1]], created).error_code == LEADER_NOT_AVAILABLE

    def replicated() -> bool:
        found = _auto_create(servers[followers[0]], created)
        return found.error_code == 0 and all(
            p.error_code == 0 and len(p.isr_nodes) == 3 for p in found.partitions)

    wait_for(replicated, "the topic auto-created through a follower led and replicated three times")

    # A follower: NOT_LEADER_OR_FOLLOWER with the leader named, and its Kafka address.
    with KafkaWire(servers[followers[0]].kafka_bootstrap) as sock:
        produced = ask(sock, _produce(topic, _one_batch()), 11)
        partition = produced.responses[0].partition_responses[0]
        assert partition.error_code == NOT_LEADER_OR_FOLLOWER
        assert (partition.current_leader.leader_id,
                partition.current_leader.leader_epoch) == (leader, epoch)
        assert [(e.node_id, e.port) for e in produced.node_endpoints] == [
            (leader, servers[leader].kafka_port)]
        fetched = ask(sock, _fetch(topic, 0), 12).responses[0].partitions[0]
        assert fetched.error_code == NOT_LEADER_OR_FOLLOWER
        assert (fetched.current_leader.leader_id,
                fetched.current_leader.leader_epoch) == (leader, epoch)

    # The leader: records in, epochs out.
    with KafkaWire(servers[leader].kafka_bootstrap) as sock:
        for _ in range(3):
            answer = ask(sock, _produce(topic, _one_batch()), 11)
            assert answer.responses[0].partition_responses[0].error_code == 0
        fetched = ask(sock, _fetch(topic, 0, current_leader_epoch=epoch), 12)
        assert fetched.responses[0].partitions[0].error_code == 0
        assert fetched.responses[0].partitions[0].high_watermark == 3
        ahead = ask(sock, _fetch(topic, 0, current_leader_epoch=epoch + 1), 12)
        assert ahead.responses[0].partitions[0].error_code == UNKNOWN_LEADER_EPOCH
        offsets = ask(sock, _offset_for_leader_epoch(topic, epoch, epoch), 4)
        assert [(p.error_code, p.leader_epoch, p.end_offset)
                for p in offsets.topics[0].partitions] == [(0, epoch, 3)]
        unknown = ask(sock, _offset_for_leader_epoch(topic, epoch + 7, epoch), 4)
        assert [(p.error_code, p.leader_epoch, p.end_offset)
                for p in unknown.topics[0].partitions] == [(0, -1, -1)]
        latest = ask(sock, _list_offsets(topic, -1, epoch), 7).topics[0].partitions[0]
        earliest = ask(sock, _list_offsets(topic, -2, epoch), 7).topics[0].partitions[0]
        assert (latest.error_code, latest.offset, latest.leader_epoch) == (0, 3, epoch)
        assert (earliest.error_code, earliest.offset, earliest.leader_epoch) == (0, 0, epoch)


def _offset_for_leader_epoch(topic: str, leader_epoch: int,
                             current_leader_epoch: int) -> OffsetForLeaderEpochRequest:
    topic_class = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    return OffsetForLeaderEpochRequest(replica_id=-1, topics=[topic_class(topic=topic, partitions=[
        topic_class.OffsetForLeaderPartition(partition=0, current_leader_epoch=current_leader_epoch,
                                             leader_epoch=leader_epoch)])])


def _list_offsets(topic: str, target: int, current_leader_epoch: int) -> ListOffsetsRequest:
    topic_class = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[topic_class(
        name=topic, partitions=[topic_class.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=current_leader_epoch, timestamp=target)])])


@pytest.mark.serial
def test_a_killed_leader_under_librdkafka_loses_no_acknowledged_record(start_member):
    servers = start_cluster(start_member)
    topic = _topic()
    create_topic(servers[1], topic)
    leader = leader_of(servers, topic)
    old_epoch = metadata(servers[leader], topic).topics[0].partitions[0].leader_epoch
    wait_for(lambda: all(len(_kafka_metadata(s).brokers) == 3 for s in servers.values()),
             "three Kafka listeners registered and seen by every server")
    bootstrap = _bootstrap(servers)
    acked: list[bytes] = []
    failed: list[str] = []

    def delivered(error, message) -> None:
        if error is None:
            acked.append(message.value())
        else:
            failed.append(str(error))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 60_000, "retries": 1_000_000,
                         "topic.metadata.refresh.interval.ms": 1_000})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "topic.metadata.refresh.interval.ms": 1_000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read: list[bytes] = []

    def consume(seconds: float) -> None:
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            message = consumer.poll(0.05)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().retriable() or message.error().code() in (
                    KafkaError._PARTITION_EOF, KafkaError._TRANSPORT), message.error()
                continue
            read.append(message.value())

    try:
        sent = 0

        def send(count: int) -> None:
            nonlocal sent
            for _ in range(count):
                producer.produce(topic, value=f"r{sent}".encode(), partition=0,
                                 on_delivery=delivered)
                sent += 1
                producer.poll(0)
            consume(0.05)

        send(200)
        wait_for(lambda: producer.poll(0.1) >= 0 and len(acked) == 200,
                 f"the first 200 records acknowledged ({len(acked)}, failed: {failed[:3]})")
        servers[leader].process.send_signal(signal.SIGKILL)
        servers[leader].process.wait()
        killed_at = time.monotonic()
        survivors = {n: s for n, s in servers.items() if n != leader}
        new_leader = leader_of(survivors, topic, not_node=leader)
        for _ in range(20):
            send(20)
        assert producer.flush(FAILOVER_BOUND_S * 3) == 0, "records left unacknowledged"
        assert not failed, failed[:3]
        assert len(acked) == sent
        wait_for(lambda: (consume(0.2), set(acked) <= set(read))[1],
                 "every acknowledged record read by the consumer", FAILOVER_BOUND_S * 3)
        assert time.monotonic() - killed_at < FAILOVER_BOUND_S * 6
    finally:
        producer.flush(1)
        consumer.close()

    # Every acknowledged record is in the new leader's log.
    reader = Consumer({"bootstrap.servers": survivors[new_leader].kafka_bootstrap,
                       "group.id": f"r-{topic}", "enable.auto.commit": False})
    reader.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while set(acked) - set(values) and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        reader.close()
    # Exactly once and in order: the idempotent producer's sequence numbers survive the
    # failover (the new leader rebuilt the producer state from the replicated batches).
    assert values[:len(acked)] == acked
    assert len(values) == len(set(values)) == sent

    # The old epoch is fenced at the new leader; the log holds each record once.
    with KafkaWire(survivors[new_leader].kafka_bootstrap) as sock:
        end = ask(sock, _list_offsets(topic, -1, -1), 7).topics[0].partitions[0]
        assert (end.error_code, end.offset) == (0, sent)
        fenced = ask(sock, _fetch(topic, 0, current_leader_epoch=old_epoch), 12)
        partition = fenced.responses[0].partitions[0]
        assert partition.error_code == FENCED_LEADER_EPOCH
        new_epoch = metadata(survivors[new_leader], topic).topics[0].partitions[0].leader_epoch
        assert new_epoch > old_epoch
        assert (partition.current_leader.leader_id,
                partition.current_leader.leader_epoch) == (new_leader, new_epoch)
