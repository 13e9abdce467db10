"""client/groups/round_robin_assignor.py: Kafka's RoundRobinAssignorTest cases, then properties,
and kafka-python's RoundRobinPartitionAssignor (the same algorithm, written independently) as an
oracle for groups of dynamic members with identical subscriptions. (kafka-python 3.0.12 cannot
serve for differing ones: its loop that passes over a non-subscriber reads the next member as a
tuple and raises KeyError.)"""

from __future__ import annotations

from hypothesis import given
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from stratalog.client.groups.assignor import check_assignment
from stratalog.client.groups.round_robin_assignor import RoundRobinAssignor
from tests.unit.client.group_inputs import counts, every_partition, groups, member, owner_map, tps

assign = RoundRobinAssignor().assign


def test_no_topic_or_a_nonexistent_one_gives_an_empty_assignment():
    assert assign({}, [member("c", [])]) == {"c": []}
    assert assign({}, [member("c", ["t"])]) == {"c": []}


def test_one_consumer():
    assert assign({"t": 3, "other": 3}, [member("c", ["t"])]) == {"c": tps(("t", 0), ("t", 1), ("t", 2))}
    assert assign({"t1": 1, "t2": 2}, [member("c", ["t1", "t2"])]) == {
        "c": tps(("t1", 0), ("t2", 0), ("t2", 1))
    }


def test_two_consumers_one_topic():
    ms = [member("c1", ["t"]), member("c2", ["t"])]
    assert assign({"t": 1}, ms) == {"c1": tps(("t", 0)), "c2": []}
    assert assign({"t": 2}, ms) == {"c1": tps(("t", 0)), "c2": tps(("t", 1))}


def test_multiple_consumers_mixed_topics():
    ms = [member("consumer1", ["t1"]), member("consumer2", ["t1", "t2"]), member("consumer3", ["t1"])]
    assert assign({"t1": 3, "t2": 2}, ms) == {
        "consumer1": tps(("t1", 0)),
        "consumer2": tps(("t1", 1), ("t2", 0), ("t2", 1)),
        "consumer3": tps(("t1", 2)),
    }


def test_two_consumers_two_topics_six_partitions():
    both = ["t1", "t2"]
    expected = {
        "consumer1": tps(("t1", 0), ("t1", 2), ("t2", 1)),
        "consumer2": tps(("t1", 1), ("t2", 0), ("t2", 2)),
    }
    assert assign({"t1": 3, "t2": 3}, [member("consumer1", both), member("consumer2", both)]) == expected
    # Static: the instance ids decide the order, not the member ids.
    static = [member("consumer-b", both, instance="instance1"),
              member("consumer-a", both, instance="instance2")]
    assert assign({"t1": 3, "t2": 3}, static) == {
        "consumer-b": expected["consumer1"], "consumer-a": expected["consumer2"]
    }
    mixed = [member("consumer-b", both, instance="instance1"), member("consumer-a", both)]
    assert assign({"t1": 3, "t2": 3}, mixed) == {
        "consumer-b": expected["consumer1"], "consumer-a": expected["consumer2"]
    }


def test_static_member_assignment_persists_when_a_dynamic_member_is_replaced():
    both = ["t1", "t2"]
    statics = [member(f"consumer{i}", both, instance=f"instance{i}") for i in (1, 2, 3)]
    expected = {
        "consumer1": tps(("t1", 0), ("t2", 1)),
        "consumer2": tps(("t1", 1), ("t2", 2)),
        "consumer3": tps(("t1", 2)),
    }
    assert assign({"t1": 3, "t2": 3}, [*statics, member("consumer4", both)]) == {
        **expected, "consumer4": tps(("t2", 0))
    }
    assert assign({"t1": 3, "t2": 3}, [*statics, member("consumer5", both)]) == {
        **expected, "consumer5": tps(("t2", 0))
    }


class _Cluster:
    """The two calls kafka-python's assignor makes on its cluster metadata."""

    def __init__(self, partitions_per_topic):
        self._partitions = partitions_per_topic

    def partitions_for_topic(self, topic):
        count = self._partitions.get(topic, 0)
        return set(range(count)) if count else None

    def available_partitions_for_topic(self, topic):
        return self.partitions_for_topic(topic)


class _Joined:
    def __init__(self, member_id, topics):
        self.member_id = member_id
        self.group_instance_id = None
        self.metadata = ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=b"")


@given(groups())
def test_properties_and_kafka_python_agrees(group):
    partitions_per_topic, ids, subscriptions = group
    members = [member(m, subscriptions[m]) for m in ids]
    assignment = assign(partitions_per_topic, members)
    check_assignment(partitions_per_topic, members, assignment)
    assert set(owner_map(assignment)) == every_partition(partitions_per_topic, members)
    assert assign(partitions_per_topic, members[::-1]) == assignment
    if len(set(subscriptions.values())) > 1:
        return
    assert max(counts(assignment)) - min(counts(assignment)) <= 1

    theirs = RoundRobinPartitionAssignor.assign(
        _Cluster(partitions_per_topic), [_Joined(m, subscriptions[m]) for m in ids]
    )
    for m in ids:
        assert sorted(theirs[m].partitions()) == sorted(assignment[m]), m
