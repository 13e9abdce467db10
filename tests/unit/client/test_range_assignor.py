"""client/groups/range_assignor.py: Kafka's RangeAssignorTest cases, then properties."""

from __future__ import annotations

from hypothesis import given

from stratalog.client.groups.assignor import check_assignment
from stratalog.client.groups.range_assignor import RangeAssignor
from tests.unit.client.group_inputs import every_partition, groups, member, owner_map, tps

assign = RangeAssignor().assign


def test_no_topic_or_a_nonexistent_one_gives_an_empty_assignment():
    assert assign({}, [member("c", [])]) == {"c": []}
    assert assign({}, [member("c", ["t"])]) == {"c": []}
    assert assign({"t": 0}, [member("c", ["t"])]) == {"c": []}


def test_one_consumer():
    assert assign({"t": 3}, [member("c", ["t"])]) == {"c": tps(("t", 0), ("t", 1), ("t", 2))}
    # only from subscribed topics
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


def test_two_consumers_two_topics_six_partitions_are_co_partitioned():
    ms = [member("consumer1", ["t1", "t2"]), member("consumer2", ["t1", "t2"])]
    assert assign({"t1": 3, "t2": 3}, ms) == {
        "consumer1": tps(("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)),
        "consumer2": tps(("t1", 2), ("t2", 2)),
    }


def test_static_members_are_ordered_by_instance_id_then_before_dynamic_ones():
    both = ["t1", "t2"]
    static = [member("consumer-b", both, instance="instance1"),
              member("consumer-a", both, instance="instance2")]
    expected = {
        "consumer-b": tps(("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)),
        "consumer-a": tps(("t1", 2), ("t2", 2)),
    }
    assert assign({"t1": 3, "t2": 3}, static) == expected
    mixed = [member("consumer-b", both, instance="instance1"), member("consumer-a", both)]
    assert assign({"t1": 3, "t2": 3}, mixed) == expected


def test_static_member_assignment_persists_when_a_dynamic_member_is_replaced():
    both = ["t1", "t2"]
    statics = [member(f"consumer{i}", both, instance=f"instance{i}") for i in (1, 2, 3)]
    expected = {
        "consumer1": tps(("t1", 0), ("t1", 1), ("t2", 0)),
        "consumer2": tps(("t1", 2), ("t2", 1)),
        "consumer3": tps(("t1", 3), ("t2", 2)),
    }
    first = assign({"t1": 5, "t2": 4}, [*statics, member("consumer4", both)])
    assert first == {**expected, "consumer4": tps(("t1", 4), ("t2", 3))}
    second = assign({"t1": 5, "t2": 4}, [*statics, member("consumer5", both)])
    assert second == {**expected, "consumer5": tps(("t1", 4), ("t2", 3))}


def test_static_members_keep_partitions_when_their_member_ids_change():
    both = ["t1", "t2"]
    before = assign({"t1": 5, "t2": 5}, [member(f"m{i}", both, instance=f"i{i}") for i in (1, 2, 3)])
    after = assign({"t1": 5, "t2": 5}, [member(f"new{4 - i}", both, instance=f"i{i}") for i in (1, 2, 3)])
    assert [before[f"m{i}"] for i in (1, 2, 3)] == [after[f"new{4 - i}"] for i in (1, 2, 3)]


@given(groups())
def test_properties(group):
    partitions_per_topic, ids, subscriptions = group
    members = [member(m, subscriptions[m]) for m in ids]
    assignment = assign(partitions_per_topic, members)
    check_assignment(partitions_per_topic, members, assignment)
    assert set(owner_map(assignment)) == every_partition(partitions_per_topic, members)
    # Per topic, subscribers' shares differ by at most one, and each share is consecutive.
    for topic, count in partitions_per_topic.items():
        shares = [[tp.partition for tp in parts if tp.topic == topic]
                  for m, parts in assignment.items() if topic in subscriptions[m]]
        if shares and count:
            assert max(map(len, shares)) - min(map(len, shares)) <= 1
            assert all(s == list(range(s[0], s[0] + len(s))) for s in shares if s)
    # Deterministic whatever order the members come in.
    assert assign(partitions_per_topic, members[::-1]) == assignment
