"""client/group_calls.py: the group member's values to broker.proto's messages and back, field
for field; per-item ErrorReasons as exceptions; the coordinator cache's bound. The RPCs
themselves run against a real server in tests/integration/test_client_group_consumer.py."""

from __future__ import annotations

import pytest

from stratalog.client import errors
from stratalog.client.client import Client
from stratalog.client.group_calls import COORDINATORS_MAX, request_message, response_value
from stratalog.client.groups import membership_messages as m
from stratalog.client.types import TopicPartition
from stratalog.v1 import broker_pb2 as pb


def test_requests_become_their_messages_field_for_field() -> None:
    join = m.JoinGroupRequest("g", 10_000, 60_000, "", "inst", "consumer",
                              (("cooperative-sticky", b"\x00\x03sub"), ("range", b"r")), "why")
    assert request_message(join) == pb.JoinGroupRequest(
        group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=60_000, member_id="",
        group_instance_id="inst", protocol_type="consumer", reason="why",
        protocols=[pb.GroupProtocol(name="cooperative-sticky", metadata=b"\x00\x03sub"),
                   pb.GroupProtocol(name="range", metadata=b"r")])
    # A dynamic member sends no group_instance_id at all (proto3 optional), not "".
    dynamic = request_message(m.HeartbeatRequest("g", 3, "m-1", None))
    assert not dynamic.HasField("group_instance_id")
    assert dynamic == pb.HeartbeatRequest(group_id="g", generation_id=3, member_id="m-1")
    held = request_message(m.HeartbeatRequest("g", 3, "m-1", None, 3_000))
    assert held == pb.HeartbeatRequest(group_id="g", generation_id=3, member_id="m-1",
                                       max_wait_ms=3_000)
    sync = m.SyncGroupRequest("g", 3, "m-1", None, "consumer", "range", (("m-1", b"a"),))
    assert request_message(sync) == pb.SyncGroupRequest(
        group_id="g", generation_id=3, member_id="m-1", protocol_type="consumer",
        protocol_name="range", assignments=[pb.SyncGroupAssignment(member_id="m-1",
                                                                   assignment=b"a")])
    leave = m.LeaveGroupRequest("g", (m.LeavingMember("m-1", None, "closing"),))
    assert request_message(leave) == pb.LeaveGroupRequest(
        group_id="g", members=[pb.LeavingMember(member_id="m-1", reason="closing")])
    commit = m.OffsetCommitRequest("g", 3, "m-1", None, (m.CommittedOffset("t", 2, 42, 5, "x"),))
    assert request_message(commit) == pb.OffsetCommitRequest(
        group_id="g", generation_id=3, member_id="m-1", offsets=[pb.CommittedOffset(
            topic="t", partition=2, offset=42, leader_epoch=5, metadata="x")])
    fetch = m.OffsetFetchRequest("g", (TopicPartition("t", 1),), True)
    assert request_message(fetch) == pb.OffsetFetchRequest(
        group_id="g", require_stable=True, partitions=[pb.TopicPartition(topic="t",
                                                                          partition=1)])
    assert request_message(m.FindCoordinatorRequest("g")) == pb.FindCoordinatorRequest(key="g")
    with pytest.raises(TypeError, match="not a group request"):
        request_message(object())


def test_responses_become_the_members_values() -> None:
    assert response_value(pb.FindCoordinatorResponse(
        node_id=1, address="h:1", partition=7)) == m.FindCoordinatorResponse(1, "h:1", 7)
    joined = response_value(pb.JoinGroupResponse(
        generation_id=2, protocol_type="consumer", protocol_name="range", leader_id="a",
        member_id="b", members=[pb.JoinGroupMember(member_id="a", metadata=b"s"),
                                pb.JoinGroupMember(member_id="b", group_instance_id="i",
                                                   metadata=b"t")]))
    assert joined == m.JoinGroupResponse(
        2, "consumer", "range", "a", "b", False,
        (m.JoinedMember("a", b"s", None), m.JoinedMember("b", b"t", "i")))
    assert response_value(pb.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=b"x"
    )) == m.SyncGroupResponse("consumer", "range", b"x")
    assert response_value(pb.HeartbeatResponse()) == m.HeartbeatResponse()
    assert response_value(pb.OffsetCommitResponse()) == m.OffsetCommitResponse()
    assert response_value(pb.OffsetFetchResponse(offsets=[pb.CommittedOffset(
        topic="t", partition=0, offset=-1, leader_epoch=-1)])) == m.OffsetFetchResponse(
        (m.CommittedOffset("t", 0, -1, -1, ""),))
    left = response_value(pb.LeaveGroupResponse(members=[
        pb.LeftMember(member_id="a"),
        pb.LeftMember(member_id="b", error=pb.UNKNOWN_MEMBER_ID, error_message="who?"),
    ]))
    assert isinstance(left, m.LeaveGroupResponse)
    assert left.members[0].error is None
    assert isinstance(left.members[1].error, errors.UnknownMemberIdError)
    assert left.members[1].error.message == "who?"


def test_per_item_error_reasons() -> None:
    assert errors.from_error_reason(pb.ERROR_REASON_UNSPECIFIED, "") is None
    gone = errors.from_error_reason(pb.NOT_COORDINATOR, "moved")
    assert isinstance(gone, errors.NotCoordinatorError) and gone.retriable
    assert gone.reason == "NOT_COORDINATOR" and gone.message == "moved"
    full = errors.from_error_reason(pb.NON_EMPTY_GROUP, "has members")
    assert isinstance(full, errors.NonEmptyGroupError) and not full.retriable
    newer = errors.from_error_reason(10_000, "from a newer server")
    assert type(newer) is errors.StratalogError and newer.reason == "10000"


async def test_remembered_coordinators_are_bounded() -> None:
    client = Client("127.0.0.1:1")
    try:
        for i in range(COORDINATORS_MAX + 5):
            client._remember_coordinator(f"g{i}", f"h{i}:1")
        assert len(client._group_coordinators) == COORDINATORS_MAX
        assert "g0" not in client._group_coordinators
        assert client._group_coordinators[f"g{COORDINATORS_MAX + 4}"] == (
            f"h{COORDINATORS_MAX + 4}:1")
        client.forget_coordinator("g10")
        assert "g10" not in client._group_coordinators
        with pytest.raises(ValueError, match="non-empty"):
            await client.find_coordinator("")
        with pytest.raises(TypeError, match="sequence of group id"):
            await client.describe_groups("g")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not a group request"):
            await client.group_request("JoinGroup")
    finally:
        await client.close()
