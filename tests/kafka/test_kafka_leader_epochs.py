"""OffsetForLeaderEpoch and ListOffsets' leader epoch on a single server (issue 28).

A single server writes every batch at leader epoch 0 (server/storage/log_writer.py's
LEADER_EPOCH): Metadata says epoch 0, ListOffsets answers it for the offsets it finds, and
OffsetForLeaderEpoch answers where epoch 0 ends (the log end) and (-1, -1) for an epoch the
cache does not know. librdkafka, which validates its positions with OffsetForLeaderEpoch once
it sees epochs (KIP-320), still reads every record.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.consumer import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import MetadataRequest

from tests.kafka.kafka_wire import KafkaWire, ask

_OffsetTopic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
_ListTopic = ListOffsetsRequest.ListOffsetsTopic


def _epoch_request(topic: str, leader_epoch: int, partition: int = 0,
                   current_leader_epoch: int = -1) -> OffsetForLeaderEpochRequest:
    return OffsetForLeaderEpochRequest(replica_id=-1, topics=[_OffsetTopic(topic=topic, partitions=[
        _OffsetTopic.OffsetForLeaderPartition(partition=partition, leader_epoch=leader_epoch,
                                              current_leader_epoch=current_leader_epoch)])])


def test_epochs_of_a_single_server(server):
    topic = f"ep-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap})
    for i in range(25):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    with KafkaWire(server.kafka_bootstrap) as sock:
        answer = ask(sock, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=topic, topic_id=None)], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), 12)
        assert [p.leader_epoch for p in answer.topics[0].partitions] == [0]
        for version in (2, 3, 4):
            ends = ask(sock, _epoch_request(topic, 0), version).topics[0].partitions
            assert [(p.error_code, p.leader_epoch, p.end_offset) for p in ends] == [(0, 0, 25)]
        unknown = ask(sock, _epoch_request(topic, 3), 4).topics[0].partitions
        assert [(p.error_code, p.leader_epoch, p.end_offset) for p in unknown] == [(0, -1, -1)]
        missing = ask(sock, _epoch_request(topic, 0, partition=9), 4).topics[0].partitions
        assert [p.error_code for p in missing] == [3]  # UNKNOWN_TOPIC_OR_PARTITION
        for target, offset in ((-1, 25), (-2, 0)):
            found = ask(sock, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                _ListTopic(name=topic, partitions=[_ListTopic.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=target)])]), 7)
            partition = found.topics[0].partitions[0]
            assert (partition.error_code, partition.offset, partition.leader_epoch) == (
                0, offset, 0)
    consumer = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    try:
        while len(values) < 25:
            message = consumer.poll(10)
            assert message is not None, f"no record after {len(values)}"
            assert message.error() is None, message.error()
            values.append(message.value())
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(25)]
