"""Consumer groups in a cluster (issue 27): etcd and three real servers on 127.0.0.1.

The coordinator of a group is the leader of its ``__consumer_offsets`` partition
(docs/groups.md, "Cluster mode"): FindCoordinator from every server names it, the others answer
NOT_COORDINATOR, and after kill -9 of its server the partition's new leader loads the partition
and coordinates the group with every acknowledged commit. Raw gRPC stubs: the requests a
group-aware client makes, retried on the retriable group errors as it retries them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from stratalog.records.group_partition import partition_for_group
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.integration.conftest import CALL_TIMEOUT_S, ServerProcess
from tests.integration.test_server_groups import Refused, join_request, refused

from .conftest import metadata, wait_for
from .test_faults import FAILOVER_BOUND_S, MEMBER_FLAGS, create_topic

OFFSETS_PARTITIONS = 3
GROUP_FLAGS = (
    "--group-initial-rebalance-delay-ms", "0",
    "--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS),
)
GROUP = "cluster-group"
PARTITION = partition_for_group(GROUP, OFFSETS_PARTITIONS)
#: The group errors a client retries (after finding the coordinator again).
RETRIED = {"COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"}
#: Bounds each retried call: it only turns a hang into a failure.
RETRY_TIMEOUT_S = 60.0
T = CALL_TIMEOUT_S


def broker(server: ServerProcess | str) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    target = server if isinstance(server, str) else server.target
    channel = grpc.insecure_channel(target)
    return channel, broker_pb2_grpc.BrokerStub(channel)


def retried(call: Callable[..., Any], request: Any) -> Any:
    """``call(request)`` until it answers something else than a retriable group error."""
    deadline = time.monotonic() + RETRY_TIMEOUT_S
    while True:
        try:
            return call(request, timeout=T)
        except grpc.RpcError as exc:
            refusal = Refused(exc)
            if refusal.reason not in RETRIED or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def find_coordinator(server: ServerProcess) -> pb.FindCoordinatorResponse | None:
    """The server's FindCoordinator answer for :data:`GROUP`; None while it has none."""
    channel, stub = broker(server)
    with channel:
        try:
            return stub.FindCoordinator(pb.FindCoordinatorRequest(
                key=GROUP, key_type=pb.COORDINATOR_TYPE_GROUP), timeout=T)
        except grpc.RpcError as exc:
            refusal = Refused(exc)
            assert refusal.reason in RETRIED, refusal
            return None


def agreed_coordinator(servers: dict[int, ServerProcess], not_node: int = -1
                       ) -> pb.FindCoordinatorResponse:
    """The coordinator every server names (other than ``not_node``), waiting for them to
    agree."""
    seen: list[pb.FindCoordinatorResponse] = []

    def agree() -> bool:
        answers = [find_coordinator(s) for s in servers.values()]
        if any(a is None for a in answers):
            return False
        named = {(a.node_id, a.address, a.partition) for a in answers}
        seen[:] = answers
        return len(named) == 1 and answers[0].node_id != not_node
    wait_for(agree, f"every server names one coordinator of {GROUP}", FAILOVER_BOUND_S)
    return seen[0]


def offsets_leader(server: ServerProcess) -> int:
    for topic in metadata(server, "__consumer_offsets").topics:
        for found in topic.partitions:
            if found.partition == PARTITION:
                return found.leader
    return -1


def join(stub: broker_pb2_grpc.BrokerStub, member_id: str) -> tuple[str, int]:
    """A lone member (re)joins and syncs, assigning itself b"all": (member id, generation)."""
    if not member_id:
        member_id = refused(stub.JoinGroup, join_request(GROUP)).metadata["member_id"]
    joined = retried(stub.JoinGroup, join_request(GROUP, member_id))
    synced = retried(stub.SyncGroup, pb.SyncGroupRequest(
        group_id=GROUP, generation_id=joined.generation_id, member_id=joined.member_id,
        assignments=[pb.SyncGroupAssignment(member_id=joined.member_id, assignment=b"all")]))
    assert synced.assignment == b"all"
    return joined.member_id, joined.generation_id


def commit(stub: broker_pb2_grpc.BrokerStub, member_id: str, generation: int,
           offset: int) -> None:
    stub.OffsetCommit(pb.OffsetCommitRequest(
        group_id=GROUP, member_id=member_id, generation_id=generation,
        offsets=[pb.CommittedOffset(topic="events", partition=p, offset=offset + p)
                 for p in (0, 1)]), timeout=T)


def test_the_coordinator_is_the_partitions_leader_and_a_failover_keeps_every_commit(
        start_member) -> None:
    servers = {node: start_member(node, *MEMBER_FLAGS, *GROUP_FLAGS) for node in (1, 2, 3)}
    wait_for(lambda: all(len(metadata(s).brokers) == 3 for s in servers.values()),
             "three brokers seen by every server")
    create_topic(servers[1], "events", partitions=2)

    # The first FindCoordinator (on any server) creates __consumer_offsets in the cluster,
    # replicated on the three, compacted; every server names the same coordinator: the
    # leader of the group's partition, at its advertised address.
    found = agreed_coordinator(servers)
    node = found.node_id
    assert found.partition == PARTITION
    assert found.address == servers[node].target
    assert all(offsets_leader(s) == node for s in servers.values())
    offsets_topic = metadata(servers[1], "__consumer_offsets").topics[0]
    assert len(offsets_topic.partitions) == OFFSETS_PARTITIONS
    assert all(sorted(p.replicas) == [1, 2, 3] for p in offsets_topic.partitions)
    channel, stub = broker(servers[1])
    with channel:
        described = stub.DescribeTopic(pb.DescribeTopicRequest(name="__consumer_offsets"),
                                       timeout=T)
    assert described.topic.configs["cleanup.policy"] == "compact"

    # Another server is not the coordinator.
    other = next(s for n, s in servers.items() if n != node)
    channel, stub = broker(other)
    with channel:
        refusal = refused(stub.JoinGroup, join_request(GROUP))
        assert refusal.code == grpc.StatusCode.UNAVAILABLE, refusal
        assert refusal.reason == "NOT_COORDINATOR", refusal

    # A transactional offset commit needs the producer's transaction: AddOffsetsToTxn for an
    # id that never called InitProducerId is refused by its transaction coordinator, clearly.
    channel, stub = broker(found.address)
    with channel:
        refusal = refused(stub.AddOffsetsToTxn, pb.AddOffsetsToTxnRequest(
            transactional_id="tx", producer_id=1, producer_epoch=0, group_id=GROUP))
        assert refusal.reason in {"TRANSACTIONAL_ID_NOT_FOUND", "NOT_COORDINATOR",
                                  "COORDINATOR_LOAD_IN_PROGRESS"}, refusal

    # A member joins and commits through the coordinator; every commit is acknowledged.
    channel, stub = broker(found.address)
    with channel:
        member_id, generation = join(stub, "")
        for offset in range(1, 21):
            commit(stub, member_id, generation, offset)
    acknowledged = {("events", 0): 20, ("events", 1): 21}
    # Elsewhere: DescribeGroups answers NOT_COORDINATOR for the group, ListGroups lists the
    # groups each server coordinates (Kafka's admin client asks every broker).
    channel, stub = broker(other)
    with channel:
        group = stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[GROUP]), timeout=T)
        assert pb.ErrorReason.Name(group.groups[0].error) == "NOT_COORDINATOR"
        listed = retried(stub.ListGroups, pb.ListGroupsRequest())
        assert GROUP not in {g.group_id for g in listed.groups}
    channel, stub = broker(found.address)
    with channel:
        listed = retried(stub.ListGroups, pb.ListGroupsRequest())
        assert GROUP in {g.group_id for g in listed.groups}

    # kill -9 of the coordinator's server: the new leader of the partition coordinates.
    servers.pop(node).kill()
    moved = agreed_coordinator(servers, not_node=node)
    assert moved.partition == PARTITION and moved.node_id in servers
    assert moved.address == servers[moved.node_id].target
    channel, stub = broker(moved.address)
    with channel:
        answer = retried(stub.OffsetFetch, pb.OffsetFetchRequest(group_id=GROUP))
        assert {(o.topic, o.partition): o.offset for o in answer.offsets} == acknowledged
        # The loaded group knows its member, which rejoins: a new generation, and commits.
        group = retried(stub.DescribeGroups, pb.DescribeGroupsRequest(group_ids=[GROUP]))
        assert [m.member_id for m in group.groups[0].members] == [member_id]
        member_id, new_generation = join(stub, member_id)
        assert new_generation > generation
        commit(stub, member_id, new_generation, 30)
        answer = stub.OffsetFetch(pb.OffsetFetchRequest(group_id=GROUP), timeout=T)
        assert {(o.topic, o.partition): o.offset for o in answer.offsets} == {
            ("events", 0): 30, ("events", 1): 31}


def test_a_lone_member_creates_the_offsets_topic_with_the_replicas_it_has(start_member) -> None:
    """min(offsets_topic_replication_factor, live brokers) replicas (docs/groups.md): one live
    broker, one replica, and groups are served; the name stays refused to clients."""
    server = start_member(1, *MEMBER_FLAGS, *GROUP_FLAGS)
    wait_for(lambda: len(metadata(server).brokers) == 1, "the member registered")
    channel, stub = broker(server)
    with channel:
        refusal = refused(stub.CreateTopic, pb.CreateTopicRequest(
            name="__consumer_offsets", partitions=1))
        assert refusal.reason == "INVALID_TOPIC" and "reserved" in refusal.message, refusal
        found = retried(stub.FindCoordinator, pb.FindCoordinatorRequest(
            key=GROUP, key_type=pb.COORDINATOR_TYPE_GROUP))
        assert (found.node_id, found.address) == (1, server.target)
        offsets_topic = metadata(server, "__consumer_offsets").topics[0]
        assert [list(p.replicas) for p in offsets_topic.partitions] == [[1]] * OFFSETS_PARTITIONS
        stub.CreateTopic(pb.CreateTopicRequest(name="events", partitions=2), timeout=T)
        member_id, generation = join(stub, "")
        commit(stub, member_id, generation, 3)
        answer = stub.OffsetFetch(pb.OffsetFetchRequest(group_id=GROUP), timeout=T)
        assert {(o.topic, o.partition): o.offset for o in answer.offsets} == {
            ("events", 0): 3, ("events", 1): 4}
