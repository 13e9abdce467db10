"""client/groups/assignor.py: the contract check and the leader's step on bytes.

perform_assignment is checked end to end: the members' JoinGroup metadata written by
kafka-python (as a Python Kafka consumer would send it), the assignments read back by
kafka-python.
"""

from __future__ import annotations

import pytest
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as KafkaAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as KafkaSubscription,
)

from stratalog.client.groups.assignor import (
    JoinedMember,
    RebalanceProtocol,
    check_assignment,
    member_sort_key,
    perform_assignment,
)
from stratalog.client.groups.consumer_protocol import ConsumerProtocolError
from stratalog.client.groups.cooperative_sticky_assignor import CooperativeStickyAssignor
from stratalog.client.groups.range_assignor import RangeAssignor
from stratalog.client.types import TopicPartition as TP
from tests.unit.client.group_inputs import member, tps

MEMBERS = [member("c1", ["t"], tps(("t", 0))), member("c2", ["t", "u"])]


@pytest.mark.parametrize(
    ("assignment", "problem"),
    [
        ({"c1": []}, r"missing \['c2'\], extra \[\]"),
        ({"c1": [], "c2": [], "c3": []}, r"extra \['c3'\]"),
        ({"c1": tps(("t", 2)), "c2": []}, r"c1 is assigned TopicPartition\(topic='t', partition=2\), which does not exist"),
        ({"c1": tps(("u", 0)), "c2": []}, r"c1 is assigned .* but does not subscribe to 'u'"),
        ({"c1": tps(("t", 1)), "c2": tps(("t", 1))}, r"assigned to both c1 and c2"),
    ],
)
def test_check_assignment_names_what_is_wrong(assignment, problem):
    with pytest.raises(ValueError, match=problem):
        check_assignment({"t": 2, "u": 1}, MEMBERS, assignment)


def test_check_assignment_cooperative_refuses_a_partition_still_owned_elsewhere():
    assignment = {"c1": [], "c2": tps(("t", 0))}
    check_assignment({"t": 2, "u": 1}, MEMBERS, assignment)  # fine for EAGER
    with pytest.raises(ValueError, match="assigned to c2 while c1 still owns it"):
        check_assignment({"t": 2, "u": 1}, MEMBERS, assignment, RebalanceProtocol.COOPERATIVE)


def test_duplicate_member_ids_are_refused():
    with pytest.raises(ValueError, match="'c1' appears twice"):
        RangeAssignor().assign({"t": 1}, [member("c1", ["t"]), member("c1", ["t"])])


def test_member_sort_key_puts_static_members_first():
    ms = [member("a", []), member("z", [], instance="i2"), member("y", [], instance="i1")]
    assert [m.member_id for m in sorted(ms, key=member_sort_key)] == ["y", "z", "a"]


def kafka_metadata(topics, owned=(), generation=-1, version=3):
    return KafkaSubscription(
        version=version, topics=topics, user_data=None,
        owned_partitions=[KafkaSubscription.TopicPartition(topic=t, partitions=p) for t, p in owned],
        generation_id=generation, rack_id=None,
    ).encode()


def test_perform_assignment_from_kafka_metadata_to_kafka_readable_assignments():
    joined = [
        JoinedMember("m1", kafka_metadata(["t"], [("t", [0, 1, 2, 3])], generation=4)),
        JoinedMember("m2", kafka_metadata(["t", "gone"], version=0)),
    ]
    out = perform_assignment(
        CooperativeStickyAssignor(), {"t": 4, "unrelated": 9}, joined, RebalanceProtocol.COOPERATIVE
    )
    # Phase one of two: m1 keeps half, the half moving to m2 waits for m1 to revoke it.
    assert KafkaAssignment.decode(out["m1"]).partitions() == [TP("t", 0), TP("t", 1)]
    assert KafkaAssignment.decode(out["m2"]).partitions() == []
    joined[0] = JoinedMember("m1", kafka_metadata(["t"], [("t", [0, 1])], generation=5))
    out = perform_assignment(CooperativeStickyAssignor(), {"t": 4}, joined, RebalanceProtocol.COOPERATIVE)
    assert KafkaAssignment.decode(out["m2"]).partitions() == [TP("t", 2), TP("t", 3)]


def test_perform_assignment_refuses_undecodable_metadata():
    with pytest.raises(ConsumerProtocolError, match="ConsumerProtocolSubscription v0: topics"):
        perform_assignment(RangeAssignor(), {"t": 1}, [JoinedMember("m1", b"\x00\x00\x00")])
