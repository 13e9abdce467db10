"""The etcd records of replicated topics and partitions: encoding, strict decoding, keys, and
the round-robin assignment."""

from __future__ import annotations

import json

import pytest

from stratalog.server.cluster.layout import ClusterKeys
from stratalog.server.cluster.partition_state import NO_LEADER, PartitionState, TopicAssignment


def test_a_partition_state_survives_encoding() -> None:
    state = PartitionState(leader=2, leader_epoch=7, isr=(2, 3), controller_epoch=4)
    assert PartitionState.decode(state.encode()) == state
    assert json.loads(state.encode()) == {
        "leader": 2, "leader_epoch": 7, "isr": [2, 3], "controller_epoch": 4,
    }


def test_a_partition_without_a_leader() -> None:
    state = PartitionState(NO_LEADER, 3, ())
    assert not state.has_leader
    assert PartitionState.decode(state.encode()) == state


@pytest.mark.parametrize("value", [
    b"not json", b"[]", b'{"leader": 1}', b'{"leader": "1", "leader_epoch": 0, "isr": []}',
    b'{"leader": 1, "leader_epoch": -1, "isr": [1]}',
    b'{"leader": 1, "leader_epoch": 0, "isr": [1, "2"]}',
    b'{"leader": -2, "leader_epoch": 0, "isr": [1]}',
    b'{"leader": true, "leader_epoch": 0, "isr": [1]}',
])
def test_a_partition_state_that_is_not_ours_decodes_to_none(value: bytes) -> None:
    assert PartitionState.decode(value) is None


def test_a_topic_assignment_survives_encoding() -> None:
    assignment = TopicAssignment({0: (1, 2), 1: (2, 1)}, {"segment.bytes": "1024"})
    assert TopicAssignment.decode(assignment.encode()) == assignment
    assert assignment.partition_count == 2
    assert assignment.replication_factor == 2


@pytest.mark.parametrize("value", [
    b'{"partitions": {"0": [1], "2": [1]}}',       # partition 1 missing
    b'{"partitions": {"0": []}}',                  # no replicas
    b'{"partitions": {"x": [1]}}',
    b'{"partitions": {"0": [1]}, "configs": {"a": 1}}',
    b'{"partitions": []}',
])
def test_a_topic_assignment_that_is_not_ours_decodes_to_none(value: bytes) -> None:
    assert TopicAssignment.decode(value) is None


def test_partition_keys_parse_back_and_others_do_not() -> None:
    keys = ClusterKeys("/stratalog")
    assert keys.parse_partition_key(keys.partition("orders-eu", 12)) == ("orders-eu", 12)
    assert keys.parse_partition_key(keys.topic("orders")) is None
    assert keys.parse_partition_key(b"/stratalog/partitions/orders/x") is None
    assert keys.topic_partitions_prefix("t") == b"/stratalog/partitions/t/"
