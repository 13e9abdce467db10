"""Consumer groups served by a real server process (issue 27; docs/groups.md, "Serving groups"),
spoken to with broker.proto's raw stubs: joining, syncing, heartbeats, rebalances, session
expiry, static membership, commits and their refusals, describe/list/delete, the internal topic
__consumer_offsets, a kill -9 after acknowledged commits, `stratalog dump-log --offsets-decoder`
and the group ACLs.

The servers run with ``group.initial.rebalance.delay.ms`` 0 (a first join completes at once) and
a small ``group.min.session.timeout.ms``, so that a session can expire within a test; every wait
is on a condition (the group's described state, a parked call reaching the server), never a
sleep.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from stratalog.client.groups.consumer_protocol import Subscription, encode_subscription
from stratalog.records.group_partition import partition_for_group
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import CALL_TIMEOUT_S, ServerProcess, launch_server, wait_until

OFFSETS_PARTITIONS = 3
GROUP_FLAGS = (
    "--group-initial-rebalance-delay-ms", "0",
    "--group-min-session-timeout-ms", "100",
    "--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS),
)
SESSION_MS = 10_000
T = CALL_TIMEOUT_S


# ------------------------------------------------------------------------ helpers


class Refused:
    """A failed call: its status code, ErrorInfo reason and metadata, and message."""

    def __init__(self, error: grpc.RpcError) -> None:
        self.code = error.code()  # type: ignore[attr-defined]
        self.message = error.details()  # type: ignore[attr-defined]
        self.reason: str | None = None
        self.metadata: dict[str, str] = {}
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
        for detail in status.details if status is not None else ():
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                self.reason, self.metadata = info.reason, dict(info.metadata)

    def __repr__(self) -> str:
        return f"Refused({self.code}, {self.reason}, {self.message!r})"


def refused(call: Any, request: Any) -> Refused:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=T)
    return Refused(caught.value)


def join_request(group: str, member_id: str = "", instance: str | None = None,
                 session_ms: int = SESSION_MS, metadata: bytes = b"sub") -> pb.JoinGroupRequest:
    request = pb.JoinGroupRequest(
        group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=SESSION_MS,
        member_id=member_id, protocol_type="consumer",
        protocols=[pb.GroupProtocol(name="range", metadata=metadata)],
    )
    if instance is not None:
        request.group_instance_id = instance
    return request


def first_join(stub: broker_pb2_grpc.BrokerStub, group: str, **options: Any) -> str:
    """A dynamic member's first JoinGroup: MEMBER_ID_REQUIRED with the id to use (KIP-394)."""
    refusal = refused(stub.JoinGroup, join_request(group, **options))
    assert refusal.code == grpc.StatusCode.FAILED_PRECONDITION, refusal
    assert refusal.reason == "MEMBER_ID_REQUIRED", refusal
    return refusal.metadata["member_id"]


def join_and_sync(stub: broker_pb2_grpc.BrokerStub, group: str,
                  **options: Any) -> tuple[str, int]:
    """A lone member joins (leader), assigns itself b"all" and is Stable: (member id,
    generation). A static member (``instance``) skips MEMBER_ID_REQUIRED."""
    static = options.get("instance") is not None
    member_id = "" if static else first_join(stub, group, **options)
    joined = stub.JoinGroup(join_request(group, member_id, **options), timeout=T)
    member_id = joined.member_id
    assert joined.leader_id == member_id
    synced = stub.SyncGroup(pb.SyncGroupRequest(
        group_id=group, generation_id=joined.generation_id, member_id=member_id,
        group_instance_id=options.get("instance"),
        assignments=[pb.SyncGroupAssignment(member_id=member_id, assignment=b"all")],
    ), timeout=T)
    assert synced.assignment == b"all"
    return member_id, joined.generation_id


def commit(stub: broker_pb2_grpc.BrokerStub, group: str, offsets: dict[tuple[str, int], int],
           member_id: str = "", generation: int = -1, metadata: str = "") -> Any:
    return stub.OffsetCommit(pb.OffsetCommitRequest(
        group_id=group, member_id=member_id, generation_id=generation,
        offsets=[pb.CommittedOffset(topic=t, partition=p, offset=o, metadata=metadata)
                 for (t, p), o in offsets.items()],
    ), timeout=T)


def fetched(stub: broker_pb2_grpc.BrokerStub, group: str) -> dict[tuple[str, int], int]:
    answer = stub.OffsetFetch(pb.OffsetFetchRequest(group_id=group), timeout=T)
    return {(o.topic, o.partition): o.offset for o in answer.offsets}


def described(stub: broker_pb2_grpc.BrokerStub, group: str) -> Any:
    return stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[group]), timeout=T).groups[0]


def offsets_log_end(stub: broker_pb2_grpc.BrokerStub, group: str) -> int:
    """The log end of the group's __consumer_offsets partition."""
    partition = partition_for_group(group, OFFSETS_PARTITIONS)
    return stub.ListOffsets(pb.ListOffsetsRequest(
        topic="__consumer_offsets", partition=partition, timestamp=-1), timeout=T).offset


def produce(stub: broker_pb2_grpc.BrokerStub, topic: str, count: int, partition: int = 0) -> None:
    stub.Produce(pb.ProduceRequest(topic=topic, partition=partition, records=[
        pb.Record(value=b"v%d" % i) for i in range(count)]), timeout=T)


@pytest.fixture(scope="module")
def groups_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("groups") / "data"
    process = launch_server(data_dir, *GROUP_FLAGS)
    yield process
    code = process.stop()
    assert code == 0, f"server exited {code}; log:\n{process.log_text()[-4000:]}"


@pytest.fixture(scope="module")
def stub(groups_server: ServerProcess) -> Iterator[broker_pb2_grpc.BrokerStub]:
    with grpc.insecure_channel(groups_server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        stub.CreateTopic(pb.CreateTopicRequest(name="events", partitions=2), timeout=T)
        produce(stub, "events", 10, 0)
        produce(stub, "events", 10, 1)
        yield stub


# ------------------------------------------------------------------------ membership


def test_one_member_joins_syncs_heartbeats_commits_and_fetches(stub, groups_server):
    coordinator = stub.FindCoordinator(pb.FindCoordinatorRequest(key="solo"), timeout=T)
    assert coordinator.address == groups_server.target
    assert coordinator.partition == partition_for_group("solo", OFFSETS_PARTITIONS)

    member_id, generation = join_and_sync(stub, "solo")
    assert generation == 1
    stub.Heartbeat(pb.HeartbeatRequest(group_id="solo", member_id=member_id,
                                       generation_id=generation), timeout=T)
    commit(stub, "solo", {("events", 0): 7, ("events", 1): 0}, member_id, generation, "m")
    answer = stub.OffsetFetch(pb.OffsetFetchRequest(group_id="solo"), timeout=T)
    assert sorted((o.topic, o.partition, o.offset, o.metadata) for o in answer.offsets) == [
        ("events", 0, 7, "m"), ("events", 1, 0, "m")]
    # A partition with nothing committed: -1.
    none = stub.OffsetFetch(pb.OffsetFetchRequest(
        group_id="solo", partitions=[pb.TopicPartition(topic="events", partition=5)]), timeout=T)
    assert [(o.partition, o.offset) for o in none.offsets] == [(5, -1)]

    group = described(stub, "solo")
    assert (group.state, group.protocol_type, group.protocol_name) == (
        "Stable", "consumer", "range")
    assert [(m.member_id, m.client_host, m.assignment) for m in group.members] == [
        (member_id, "127.0.0.1", b"all")]
    listed = stub.ListGroups(pb.ListGroupsRequest(states_filter=["stable"]), timeout=T)
    assert ("solo", "Stable") in {(g.group_id, g.state) for g in listed.groups}
    assert groups_server.metric('stratalog_groups{state="Stable"}') >= 1
    assert groups_server.metric("stratalog_offset_commits_total") >= 2
    assert groups_server.metric("stratalog_group_rebalances_total") >= 1

    stub.LeaveGroup(pb.LeaveGroupRequest(group_id="solo", members=[
        pb.LeavingMember(member_id=member_id)]), timeout=T)
    assert described(stub, "solo").state == "Empty"
    assert fetched(stub, "solo") == {("events", 0): 7, ("events", 1): 0}


def test_a_second_member_makes_the_first_rejoin_with_a_new_generation(stub, groups_server):
    first, generation = join_and_sync(stub, "pair")
    second = first_join(stub, "pair")
    parked: Future[Any] = stub.JoinGroup.future(join_request("pair", second), timeout=T)
    # The second join waits for the first member to rejoin; its heartbeat says so.
    wait_until(lambda: described(stub, "pair").state == "PreparingRebalance",
               "the group to start rebalancing")
    refusal = refused(stub.Heartbeat, pb.HeartbeatRequest(
        group_id="pair", member_id=first, generation_id=generation))
    assert (refusal.code, refusal.reason) == (grpc.StatusCode.ABORTED, "REBALANCE_IN_PROGRESS")
    assert not parked.done()
    rejoined = stub.JoinGroup(join_request("pair", first), timeout=T)
    joined = parked.result(timeout=T)
    assert rejoined.generation_id == joined.generation_id == generation + 1
    assert rejoined.leader_id == first and joined.leader_id == first
    assert sorted(m.member_id for m in rejoined.members) == sorted([first, second])
    assert list(joined.members) == []  # only the leader learns the members
    # The follower's SyncGroup waits for the leader's assignment.
    follower = stub.SyncGroup.future(pb.SyncGroupRequest(
        group_id="pair", member_id=second, generation_id=joined.generation_id), timeout=T)
    leader = stub.SyncGroup(pb.SyncGroupRequest(
        group_id="pair", member_id=first, generation_id=rejoined.generation_id,
        assignments=[pb.SyncGroupAssignment(member_id=first, assignment=b"p0"),
                     pb.SyncGroupAssignment(member_id=second, assignment=b"p1")]), timeout=T)
    assert leader.assignment == b"p0"
    assert follower.result(timeout=T).assignment == b"p1"
    assert described(stub, "pair").state == "Stable"
    # The old generation's commit is refused, nothing written.
    end = offsets_log_end(stub, "pair")
    refusal = refused(stub.OffsetCommit, pb.OffsetCommitRequest(
        group_id="pair", member_id=first, generation_id=generation,
        offsets=[pb.CommittedOffset(topic="events", partition=0, offset=1)]))
    assert (refusal.code, refusal.reason) == (grpc.StatusCode.FAILED_PRECONDITION,
                                              "ILLEGAL_GENERATION")
    assert offsets_log_end(stub, "pair") == end
    assert fetched(stub, "pair") == {}


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout(stub):
    member_id, generation = join_and_sync(stub, "silent", session_ms=500)
    assert described(stub, "silent").state == "Stable"
    wait_until(lambda: described(stub, "silent").state == "Empty",
               "the silent member's session to expire", timeout_s=60)
    assert list(described(stub, "silent").members) == []
    refusal = refused(stub.Heartbeat, pb.HeartbeatRequest(
        group_id="silent", member_id=member_id, generation_id=generation))
    assert refusal.reason in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION"), refusal


def test_a_static_member_that_restarts_keeps_its_generation_and_assignment(stub):
    old_id, generation = join_and_sync(stub, "static", instance="host-1")
    # The restarted process joins with an empty member id and the same instance id: no
    # MEMBER_ID_REQUIRED, no rebalance, a new member id; the old one is fenced.
    again = stub.JoinGroup(join_request("static", "", instance="host-1"), timeout=T)
    assert again.generation_id == generation
    assert again.member_id != old_id
    synced = stub.SyncGroup(pb.SyncGroupRequest(
        group_id="static", member_id=again.member_id, generation_id=again.generation_id,
        group_instance_id="host-1"), timeout=T)
    assert synced.assignment == b"all"
    assert described(stub, "static").state == "Stable"
    refusal = refused(stub.Heartbeat, pb.HeartbeatRequest(
        group_id="static", member_id=old_id, generation_id=generation,
        group_instance_id="host-1"))
    assert refusal.reason == "FENCED_INSTANCE_ID", refusal


def test_commits_of_unknown_members_are_refused_and_nothing_is_written(stub):
    _, generation = join_and_sync(stub, "strict")
    end = offsets_log_end(stub, "strict")
    refusal = refused(stub.OffsetCommit, pb.OffsetCommitRequest(
        group_id="strict", member_id="nobody", generation_id=generation,
        offsets=[pb.CommittedOffset(topic="events", partition=0, offset=1)]))
    assert (refusal.code, refusal.reason) == (grpc.StatusCode.FAILED_PRECONDITION,
                                              "UNKNOWN_MEMBER_ID")
    # A simple commit while the group has members is refused too (Kafka's rule).
    refusal = refused(stub.OffsetCommit, pb.OffsetCommitRequest(
        group_id="strict", generation_id=-1,
        offsets=[pb.CommittedOffset(topic="events", partition=0, offset=1)]))
    assert refusal.reason is not None, refusal
    assert offsets_log_end(stub, "strict") == end
    assert fetched(stub, "strict") == {}


def test_simple_commits_describe_list_and_delete(stub):
    commit(stub, "simple", {("events", 1): 3})
    assert fetched(stub, "simple") == {("events", 1): 3}
    group = described(stub, "simple")
    assert (group.state, list(group.members)) == ("Empty", [])
    assert "simple" in {g.group_id for g in stub.ListGroups(pb.ListGroupsRequest(),
                                                            timeout=T).groups}
    # A group with members cannot be deleted; an empty one can, with its offsets.
    join_and_sync(stub, "busy")
    answer = stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=["simple", "busy", "ghost"]),
                               timeout=T)
    errors = {g.group_id: pb.ErrorReason.Name(g.error) for g in answer.groups}
    assert errors == {"simple": "ERROR_REASON_UNSPECIFIED", "busy": "NON_EMPTY_GROUP",
                      "ghost": "GROUP_ID_NOT_FOUND"}
    assert fetched(stub, "simple") == {}
    gone = described(stub, "simple")
    assert (gone.state, pb.ErrorReason.Name(gone.error)) == ("Dead", "GROUP_ID_NOT_FOUND")


# ------------------------------------------------------------------------ bad input


def test_bad_group_requests_get_clear_errors_and_write_nothing(stub):
    good = {("events", 0): 1}
    cases = [
        (pb.OffsetCommitRequest(group_id="", offsets=[pb.CommittedOffset(topic="events")]),
         grpc.StatusCode.INVALID_ARGUMENT, "INVALID_GROUP_ID", "1 to 255"),
        (pb.OffsetCommitRequest(group_id="g" * 300, offsets=[pb.CommittedOffset(topic="events")]),
         grpc.StatusCode.INVALID_ARGUMENT, "INVALID_GROUP_ID", "300 characters"),
        (pb.OffsetCommitRequest(group_id="bad", offsets=[
            pb.CommittedOffset(topic="nosuch", partition=0, offset=0)]),
         grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOPIC_OR_PARTITION", "nosuch-0"),
        (pb.OffsetCommitRequest(group_id="bad", offsets=[
            pb.CommittedOffset(topic="events", partition=9, offset=0)]),
         grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOPIC_OR_PARTITION", "events-9"),
        (pb.OffsetCommitRequest(group_id="bad", offsets=[
            pb.CommittedOffset(topic="events", partition=0, offset=11)]),
         grpc.StatusCode.OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE", "beyond its log end offset 10"),
        (pb.OffsetCommitRequest(group_id="bad", offsets=[
            pb.CommittedOffset(topic="events", partition=0, offset=1, metadata="x" * 5000)]),
         grpc.StatusCode.INVALID_ARGUMENT, "OFFSET_METADATA_TOO_LARGE", "5000 bytes"),
        (pb.OffsetCommitRequest(group_id="bad", offsets=[
            pb.CommittedOffset(topic="events", partition=0, offset=-4)]),
         grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST", "offsets[0].offset"),
        (pb.OffsetCommitRequest(group_id="bad"),
         grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST", "at least one"),
    ]
    commit(stub, "bad", good)  # creates the topic: the log end below is the group's partition's
    end = offsets_log_end(stub, "bad")
    for request, code, reason, words in cases:
        refusal = refused(stub.OffsetCommit, request)
        assert (refusal.code, refusal.reason) == (code, reason), (request, refusal)
        assert words in refusal.message, refusal
    assert offsets_log_end(stub, "bad") == end
    assert fetched(stub, "bad") == good
    # A session timeout outside the server's bounds; an empty group id to join.
    refusal = refused(stub.JoinGroup, join_request("bad-join", session_ms=10))
    assert refusal.reason == "INVALID_SESSION_TIMEOUT", refusal
    refusal = refused(stub.JoinGroup, join_request(""))
    assert refusal.reason == "INVALID_GROUP_ID", refusal


def test_consumer_offsets_is_internal_readable_and_refused_to_client_changes(stub):
    commit(stub, "internal", {("events", 0): 2})
    partition = partition_for_group("internal", OFFSETS_PARTITIONS)
    topic = stub.DescribeTopic(pb.DescribeTopicRequest(name="__consumer_offsets"),
                               timeout=T).topic
    assert len(topic.partitions) == OFFSETS_PARTITIONS
    assert topic.configs["cleanup.policy"] == "compact"
    assert topic.configs["segment.bytes"] == "104857600"
    read = stub.FetchByOffset(pb.FetchByOffsetRequest(
        topic="__consumer_offsets", partition=partition, offset=0), timeout=T)
    assert read.records, "a client may read the topic"
    attempts = [
        (stub.Produce, pb.ProduceRequest(topic="__consumer_offsets", partition=partition,
                                         records=[pb.Record(value=b"x")]), "Produce"),
        (stub.DeleteRecords, pb.DeleteRecordsRequest(topic="__consumer_offsets",
                                                     partition=partition, before_offset=-1),
         "DeleteRecords"),
        (stub.DeleteTopic, pb.DeleteTopicRequest(name="__consumer_offsets"), "DeleteTopic"),
        (stub.CreatePartitions, pb.CreatePartitionsRequest(name="__consumer_offsets", count=9),
         "CreatePartitions"),
        (stub.AlterTopicConfigs, pb.AlterTopicConfigsRequest(
            name="__consumer_offsets", set={"retention.ms": "1"}), "a config change"),
    ]
    for call, request, operation in attempts:
        refusal = refused(call, request)
        assert (refusal.code, refusal.reason) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                  "INVALID_TOPIC"), (operation, refusal)
        assert "__consumer_offsets" in refusal.message and operation in refusal.message
    refusal = refused(stub.CreateTopic, pb.CreateTopicRequest(name="__consumer_offsets",
                                                              partitions=1))
    assert refusal.reason == "INVALID_TOPIC" and "reserved" in refusal.message, refusal
    assert fetched(stub, "internal") == {("events", 0): 2}


def _offset_delete(group: str, *partitions: tuple[str, int]) -> pb.OffsetDeleteRequest:
    return pb.OffsetDeleteRequest(group_id=group, partitions=[
        pb.TopicPartition(topic=t, partition=p) for t, p in partitions])


def test_offset_delete_refuses_subscribed_topics_and_tombstones_the_others(stub):
    stub.CreateTopic(pb.CreateTopicRequest(name="retired", partitions=1), timeout=T)
    produce(stub, "retired", 5)
    # A consumer member subscribed to "events" (the consumer protocol's subscription).
    subscription = encode_subscription(Subscription(topics=("events",)))
    member_id, generation = join_and_sync(stub, "od", metadata=subscription)
    commit(stub, "od", {("events", 0): 4, ("retired", 0): 5}, member_id, generation)
    log_end = offsets_log_end(stub, "od")

    refusal = refused(stub.OffsetDelete, _offset_delete("od", ("retired", 0), ("events", 0)))
    assert refusal.code == grpc.StatusCode.FAILED_PRECONDITION, refusal
    assert refusal.reason == "GROUP_SUBSCRIBED_TO_TOPIC" and "events" in refusal.message
    # All or nothing: the other partition's offset stays, nothing was written.
    assert fetched(stub, "od") == {("events", 0): 4, ("retired", 0): 5}
    assert offsets_log_end(stub, "od") == log_end

    stub.OffsetDelete(_offset_delete("od", ("retired", 0), ("retired", 3)), timeout=T)
    assert fetched(stub, "od") == {("events", 0): 4}
    assert offsets_log_end(stub, "od") == log_end + 1  # one tombstone: retired-0 had an offset

    refusal = refused(stub.OffsetDelete, _offset_delete("nobody", ("events", 0)))
    assert (refusal.code, refusal.reason) == (grpc.StatusCode.NOT_FOUND, "GROUP_ID_NOT_FOUND")
    refusal = refused(stub.OffsetDelete, _offset_delete("od"))
    assert refusal.code == grpc.StatusCode.INVALID_ARGUMENT and "partitions" in refusal.message
    refusal = refused(stub.OffsetDelete, _offset_delete("od", ("events", -1)))
    assert refusal.code == grpc.StatusCode.INVALID_ARGUMENT, refusal


# ------------------------------------------------------------------------ transactions


def _transactional_producer(stub: broker_pb2_grpc.BrokerStub, transactional_id: str
                            ) -> tuple[int, int]:
    answer = stub.InitProducerId(pb.InitProducerIdRequest(transactional_id=transactional_id),
                                 timeout=T)
    return answer.producer_id, answer.producer_epoch


def _txn_commit(stub: broker_pb2_grpc.BrokerStub, transactional_id: str, producer: tuple[int, int],
                group: str, offset: int, **fields: Any) -> None:
    producer_id, epoch = producer
    stub.AddOffsetsToTxn(pb.AddOffsetsToTxnRequest(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch,
        group_id=group), timeout=T)
    stub.TxnOffsetCommit(pb.TxnOffsetCommitRequest(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch,
        group_id=group, generation_id=fields.pop("generation_id", -1),
        offsets=[pb.CommittedOffset(topic="events", partition=0, offset=offset)], **fields),
        timeout=T)


def _end(stub: broker_pb2_grpc.BrokerStub, transactional_id: str, producer: tuple[int, int],
         commit: bool) -> None:
    stub.EndTxn(pb.EndTxnRequest(transactional_id=transactional_id, producer_id=producer[0],
                                 producer_epoch=producer[1], commit=commit), timeout=T)


def test_transactional_offsets_show_on_commit_and_vanish_on_abort(stub):
    commit(stub, "txn-group", {("events", 0): 1})
    producer = _transactional_producer(stub, "txn-app")
    _txn_commit(stub, "txn-app", producer, "txn-group", 5)
    # Held by the open transaction: not visible, and unstable to a require_stable fetch.
    assert fetched(stub, "txn-group") == {("events", 0): 1}
    refusal = refused(stub.OffsetFetch, pb.OffsetFetchRequest(group_id="txn-group",
                                                              require_stable=True))
    assert (refusal.code, refusal.reason) == (grpc.StatusCode.UNAVAILABLE,
                                              "UNSTABLE_OFFSET_COMMIT")
    _end(stub, "txn-app", producer, commit=True)
    assert fetched(stub, "txn-group") == {("events", 0): 5}
    stable = stub.OffsetFetch(pb.OffsetFetchRequest(group_id="txn-group", require_stable=True),
                              timeout=T)
    assert [o.offset for o in stable.offsets] == [5]
    # The next transaction, aborted: its offsets are dropped.
    _txn_commit(stub, "txn-app", producer, "txn-group", 8)
    _end(stub, "txn-app", producer, commit=False)
    assert fetched(stub, "txn-group") == {("events", 0): 5}


def test_a_txn_offset_commit_outside_the_transaction_is_refused(stub):
    producer = _transactional_producer(stub, "txn-stray")
    # No AddOffsetsToTxn first: the group's partition is not in the transaction.
    refusal = refused(stub.TxnOffsetCommit, pb.TxnOffsetCommitRequest(
        transactional_id="txn-stray", producer_id=producer[0], producer_epoch=producer[1],
        group_id="stray", generation_id=-1,
        offsets=[pb.CommittedOffset(topic="events", partition=0, offset=1)]))
    assert refusal.reason == "INVALID_TXN_STATE", refusal
    # A zombie of an old generation is fenced (KIP-447).
    member_id, generation = join_and_sync(stub, "fenced")
    stub.AddOffsetsToTxn(pb.AddOffsetsToTxnRequest(
        transactional_id="txn-stray", producer_id=producer[0], producer_epoch=producer[1],
        group_id="fenced"), timeout=T)
    refusal = refused(stub.TxnOffsetCommit, pb.TxnOffsetCommitRequest(
        transactional_id="txn-stray", producer_id=producer[0], producer_epoch=producer[1],
        group_id="fenced", member_id=member_id, generation_id=generation - 1,
        offsets=[pb.CommittedOffset(topic="events", partition=0, offset=1)]))
    assert refusal.reason == "ILLEGAL_GENERATION", refusal
    _end(stub, "txn-stray", producer, commit=False)


# ------------------------------------------------------------------------ restarts


def test_acknowledged_commits_survive_kill_9_and_the_group_loads(start_server, tmp_path):
    data = tmp_path / "data"
    server = start_server(data, *GROUP_FLAGS)
    acknowledged: dict[str, dict[tuple[str, int], int]] = {}
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        stub.CreateTopic(pb.CreateTopicRequest(name="in", partitions=3), timeout=T)
        for partition in range(3):
            produce(stub, "in", 50, partition)
        member_id, generation = join_and_sync(stub, "kept")
        for offset in range(1, 41):
            offsets = {("in", p): offset + p for p in range(3)}
            commit(stub, "kept", offsets, member_id, generation)
            acknowledged["kept"] = offsets
        for index in range(20):
            group = f"simple-{index}"
            commit(stub, group, {("in", index % 3): index})
            acknowledged[group] = {("in", index % 3): index}
        # A committed transaction's offsets are kept, an open one's are not (its transaction
        # is aborted after the restart, when it times out).
        producer = _transactional_producer(stub, "restart-app")
        for offset, commit_it in ((9, True), (12, False)):
            stub.AddOffsetsToTxn(pb.AddOffsetsToTxnRequest(
                transactional_id="restart-app", producer_id=producer[0],
                producer_epoch=producer[1], group_id="txn-kept"), timeout=T)
            stub.TxnOffsetCommit(pb.TxnOffsetCommitRequest(
                transactional_id="restart-app", producer_id=producer[0],
                producer_epoch=producer[1], group_id="txn-kept", generation_id=-1,
                offsets=[pb.CommittedOffset(topic="in", partition=0, offset=offset)]),
                timeout=T)
            if commit_it:
                _end(stub, "restart-app", producer, commit=True)
        acknowledged["txn-kept"] = {("in", 0): 9}
    server.kill()

    server = start_server(data, *GROUP_FLAGS)
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)

        def loaded() -> bool:
            try:
                return described(stub, "kept").state == "Stable"
            except grpc.RpcError as error:  # COORDINATOR_LOAD_IN_PROGRESS: not yet
                assert Refused(error).reason == "COORDINATOR_LOAD_IN_PROGRESS", error
                return False

        wait_until(loaded, "the group to load")
        for group, offsets in acknowledged.items():
            assert fetched(stub, group) == offsets, group
        group = described(stub, "kept")
        assert [m.member_id for m in group.members] == [member_id]
        # The member carries on in its generation.
        stub.Heartbeat(pb.HeartbeatRequest(group_id="kept", member_id=member_id,
                                           generation_id=generation), timeout=T)
    assert server.metric("stratalog_group_coordinator_load_seconds_count") == OFFSETS_PARTITIONS
    assert server.stop() == 0


def test_dump_log_decodes_the_consumer_offsets_segment(start_server, tmp_path):
    data = tmp_path / "data"
    server = start_server(data, *GROUP_FLAGS)
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        stub.CreateTopic(pb.CreateTopicRequest(name="dumped", partitions=1), timeout=T)
        produce(stub, "dumped", 5)
        join_and_sync(stub, "dump-me")
        commit(stub, "dump-me-too", {("dumped", 0): 4}, metadata="hello")
    assert server.stop() == 0
    partition = partition_for_group("dump-me-too", OFFSETS_PARTITIONS)
    segment = data / f"__consumer_offsets-{partition}" / "00000000000000000000.log"
    result = subprocess.run(
        [sys.executable, "-m", "stratalog.cli", "dump-log", "--offsets-decoder", "--files",
         str(segment)],
        capture_output=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")})
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert '"group":"dump-me-too","topic":"dumped","partition":0' in out, out
    assert '"offset":4' in out and '"metadata":"hello"' in out, out
    if partition_for_group("dump-me", OFFSETS_PARTITIONS) == partition:
        assert '"protocolType":"consumer"' in out, out


# ------------------------------------------------------------------------ ACLs


def _grant(stub: broker_pb2_grpc.BrokerStub, resource_type: int, name: str,
           *operations: int) -> None:
    stub.CreateAcls(pb.CreateAclsRequest(creations=[
        pb.AclBinding(resource_type=resource_type, resource_name=name,
                      pattern_type=pb.PATTERN_TYPE_LITERAL, principal="User:ANONYMOUS",
                      host="*", operation=operation, permission_type=pb.ACL_PERMISSION_TYPE_ALLOW)
        for operation in operations]), timeout=T)


def test_group_acls_as_kafkas(start_server, tmp_path):
    data = tmp_path / "data"
    server = start_server(data, *GROUP_FLAGS, "--authorizer", "acl", "--super-users",
                          "User:ANONYMOUS")
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        stub.CreateTopic(pb.CreateTopicRequest(name="orders", partitions=1), timeout=T)
        produce(stub, "orders", 3)
        commit(stub, "mine", {("orders", 0): 1})
        commit(stub, "theirs", {("orders", 0): 2})
        _grant(stub, pb.RESOURCE_TYPE_GROUP, "mine", pb.ACL_OPERATION_READ)
        _grant(stub, pb.RESOURCE_TYPE_TOPIC, "orders", pb.ACL_OPERATION_DESCRIBE)
    assert server.stop() == 0

    server = start_server(data, *GROUP_FLAGS, "--authorizer", "acl")
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        # READ on the group, DESCRIBE (not READ) on the topic: fetch yes, commit no.
        assert fetched(stub, "mine") == {("orders", 0): 1}
        refusal = refused(stub.OffsetCommit, pb.OffsetCommitRequest(
            group_id="mine", offsets=[pb.CommittedOffset(topic="orders", offset=2)]))
        assert (refusal.code, refusal.reason) == (grpc.StatusCode.PERMISSION_DENIED,
                                                  "NOT_AUTHORIZED")
        assert "READ Topic:orders" in refusal.message, refusal
        for call, request in [
            (stub.OffsetFetch, pb.OffsetFetchRequest(group_id="theirs")),
            (stub.JoinGroup, join_request("theirs")),
            (stub.FindCoordinator, pb.FindCoordinatorRequest(key="theirs")),
            (stub.DeleteGroups, pb.DeleteGroupsRequest(group_ids=["mine"])),
        ]:
            refusal = refused(call, request)
            assert refusal.reason == "NOT_AUTHORIZED", (request, refusal)
            assert "Group:" in refusal.message, refusal
        listed = stub.ListGroups(pb.ListGroupsRequest(), timeout=T)
        assert [g.group_id for g in listed.groups] == ["mine"]
    assert server.stop() == 0
