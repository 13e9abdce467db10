"""The coordinator carries a real Kafka client's group protocol bytes: kafka-python's consumer
protocol (ConsumerProtocolSubscription / ConsumerProtocolAssignment) and its RangePartitionAssignor
run as the leader runs them, over our JoinGroup and SyncGroup. The coordinator treats the bytes
as opaque; this pins that it hands the leader every member's subscription and every member the
leader's assignment for it, byte for byte, as a Kafka client expects."""

from __future__ import annotations

from types import SimpleNamespace

from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

PARTITIONS = 6


class _Cluster:
    """The part of kafka-python's ClusterMetadata an assignor reads."""

    def partitions_for_topic(self, topic):
        return set(range(PARTITIONS)) if topic == "orders" else None


def test_kafka_python_assignors_over_our_join_and_sync(harness):
    assignors = (RangePartitionAssignor, RoundRobinPartitionAssignor)
    protocols = tuple((a.name, a.metadata({"orders"}).encode()) for a in assignors)
    joins = [harness.join_new(protocols=protocols) for _ in range(3)]
    harness.advance(0)
    responses = [harness.answer(token) for _, token in joins]
    leader = next(r for r in responses if r.members)
    assert leader.member_id == leader.leader_id and leader.protocol_name == "range"

    members = [
        SimpleNamespace(member_id=m.member_id, group_instance_id=m.group_instance_id,
                        metadata=ConsumerProtocolSubscription.decode(m.metadata))
        for m in leader.members
    ]
    assert all(m.metadata.topics == ["orders"] for m in members)
    assignment = RangePartitionAssignor.assign(_Cluster(), members)

    syncs = {}
    for response in responses:
        sent = {k: v.encode() for k, v in assignment.items()} if response is leader else None
        syncs[response.member_id] = harness.sync(response.member_id, response.generation_id,
                                                 sent)
    owned = []
    for member_id, token in syncs.items():
        got = ConsumerProtocolAssignment.decode(harness.answer(token).assignment)
        assert got == assignment[member_id]
        owned += [tp.partition for tp in got.partitions()]
    assert sorted(owned) == list(range(PARTITIONS))  # each partition to exactly one member
