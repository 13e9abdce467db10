"""One call of every Broker RPC, for the authorization tests (test_server_acls.py and
test_server_acls_authenticated.py): in an order in which all succeed once the caller holds the
ACLs the tests grant, on a server that has the topic ``orders``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from stratalog.client.errors import StratalogError, from_rpc_error, from_session_error
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import CALL_TIMEOUT_S

__all__ = [
    "ACLS_FOR_EVERY_CALL",
    "group_acls_for_every_call",
    "list_services",
    "outcome",
    "rpc_calls",
    "session_answer",
]

#: ``stratalog acls add`` arguments granting what rpc_calls needs (each after
#: ``--allow-principal P``).
ACLS_FOR_EVERY_CALL = (
    ("--topic", "orders", "--operation", "Read", "--operation", "Write", "--operation",
     "Delete", "--operation", "AlterConfigs"),
    ("--topic", "orders2", "--operation", "Create", "--operation", "Delete", "--operation",
     "Alter"),
    ("--transactional-id", "app-1", "--operation", "Write", "--operation", "Describe"),
    ("--cluster", "--operation", "Alter", "--operation", "Describe"),
)


def group_acls_for_every_call(principal: str) -> list[Any]:
    """The group ACLs rpc_calls needs (READ and DELETE on group ``grp``), as client bindings
    (granted with the client's create_acls; ``stratalog acls add --group`` does the same)."""
    from stratalog.client import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    return [
        AclBinding(ResourceType.GROUP, "grp", PatternType.LITERAL, principal, "*", operation,
                   AclPermissionType.ALLOW)
        for operation in (AclOperation.READ, AclOperation.DELETE)
    ]


def outcome(call: Callable[[], Any]) -> StratalogError | Any:
    """The call's answer, or the error it failed with (as the client maps it)."""
    try:
        return call()
    except grpc.RpcError as err:
        return from_rpc_error(err)


def list_services(channel: grpc.Channel) -> list[str]:
    """The services server reflection lists."""
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    answers = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=CALL_TIMEOUT_S
    )
    return [s.name for a in answers for s in a.list_services_response.service]


def first_message(stub: broker_pb2_grpc.BrokerStub, request: pb.SubscribeRequest) -> Any:
    stream = stub.Subscribe(request, timeout=CALL_TIMEOUT_S)
    try:
        return next(stream)
    finally:
        stream.cancel()


def session_answer(stub: broker_pb2_grpc.BrokerStub, request: pb.SessionRequest) -> Any:
    """The answer to one request on a Session stream of its own: the unary response it
    carries, or its SessionError as the client maps it (a StratalogError, returned)."""
    answers = stub.Session(iter([request]), timeout=CALL_TIMEOUT_S)
    answer = next(answers)
    if answer.HasField("error"):
        return from_session_error(answer.error)
    return getattr(answer, answer.WhichOneof("response"))


# ------------------------------------------------------------------------ every RPC


class _Transaction:
    producer_id = 0
    producer_epoch = 0


class _Member:
    member_id = ""
    generation_id = -1


def rpc_calls(stub: broker_pb2_grpc.BrokerStub) -> list[tuple[str, Callable[[], Any]]]:
    """One call of every Broker RPC, in an order in which all succeed with
    :data:`ACLS_FOR_EVERY_CALL` (``stub`` may add call credentials to each call)."""
    txn = _Transaction()
    member = _Member()
    t = CALL_TIMEOUT_S

    def join_group() -> Any:
        # A static member: no MEMBER_ID_REQUIRED round trip.
        response = stub.JoinGroup(pb.JoinGroupRequest(
            group_id="grp", session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
            group_instance_id="grp-1", protocol_type="consumer",
            protocols=[pb.GroupProtocol(name="range")]), timeout=t)
        member.member_id, member.generation_id = response.member_id, response.generation_id
        return response

    def init_producer_id() -> Any:
        response = stub.InitProducerId(pb.InitProducerIdRequest(transactional_id="app-1"),
                                       timeout=t)
        txn.producer_id, txn.producer_epoch = response.producer_id, response.producer_epoch
        return response

    everything = pb.AclBindingFilter(resource_type=1, pattern_type=1, operation=1,
                                     permission_type=1)
    harmless = pb.AclBinding(resource_type=2, resource_name="zzz", pattern_type=3,
                             principal="User:nobody", host="*", operation=3, permission_type=3)
    return [
        ("WhoAmI", lambda: stub.WhoAmI(pb.WhoAmIRequest(), timeout=t)),
        ("Metadata", lambda: stub.Metadata(pb.MetadataRequest(topics=["orders"]), timeout=t)),
        ("ListTopics", lambda: stub.ListTopics(pb.ListTopicsRequest(), timeout=t)),
        ("DescribeTopic", lambda: stub.DescribeTopic(pb.DescribeTopicRequest(name="orders"),
                                                     timeout=t)),
        ("AlterTopicConfigs", lambda: stub.AlterTopicConfigs(
            pb.AlterTopicConfigsRequest(name="orders", set={"retention.ms": "86400000"}),
            timeout=t)),
        ("Produce", lambda: stub.Produce(
            pb.ProduceRequest(topic="orders", records=[pb.Record(value=b"v")]), timeout=t)),
        ("FetchByOffset", lambda: stub.FetchByOffset(
            pb.FetchByOffsetRequest(topic="orders", offset=0), timeout=t)),
        ("FetchByTimestamp", lambda: stub.FetchByTimestamp(
            pb.FetchByTimestampRequest(topic="orders", timestamp=0), timeout=t)),
        ("ListOffsets", lambda: stub.ListOffsets(
            pb.ListOffsetsRequest(topic="orders", timestamp=-1), timeout=t)),
        ("Subscribe", lambda: first_message(stub, pb.SubscribeRequest(topic="orders",
                                                                      offset=0))),
        # The stream is open to all; the fetch on it needs READ on the topic, as unary.
        ("Session", lambda: session_answer(stub, pb.SessionRequest(
            id=1, fetch_by_offset=pb.FetchByOffsetRequest(topic="orders", offset=0)))),
        ("DeleteRecords", lambda: stub.DeleteRecords(
            pb.DeleteRecordsRequest(topic="orders", before_offset=0), timeout=t)),
        ("InitProducerId", init_producer_id),
        ("AddPartitionsToTxn", lambda: stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
            transactional_id="app-1", producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            partitions=[pb.TopicPartition(topic="orders", partition=0)]), timeout=t)),
        ("DescribeTransaction", lambda: stub.DescribeTransaction(
            pb.DescribeTransactionRequest(transactional_id="app-1"), timeout=t)),
        ("EndTxn", lambda: stub.EndTxn(pb.EndTxnRequest(
            transactional_id="app-1", producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch, commit=False), timeout=t)),
        ("CreateAcls", lambda: stub.CreateAcls(pb.CreateAclsRequest(creations=[harmless]),
                                               timeout=t)),
        ("DescribeAcls", lambda: stub.DescribeAcls(pb.DescribeAclsRequest(filter=everything),
                                                   timeout=t)),
        ("DeleteAcls", lambda: stub.DeleteAcls(pb.DeleteAclsRequest(filters=[
            pb.AclBindingFilter(resource_type=2, resource_name="zzz", pattern_type=3,
                                operation=1, permission_type=1)]), timeout=t)),
        # orders2 is compacted, so that CleanPartition has something it may clean.
        ("CreateTopic", lambda: stub.CreateTopic(
            pb.CreateTopicRequest(name="orders2", partitions=1,
                                  configs={"cleanup.policy": "compact"}), timeout=t)),
        ("CleanPartition", lambda: stub.CleanPartition(
            pb.CleanPartitionRequest(topic="orders2"), timeout=t)),
        ("CreatePartitions", lambda: stub.CreatePartitions(
            pb.CreatePartitionsRequest(name="orders2", count=2), timeout=t)),
        ("DeleteTopic", lambda: stub.DeleteTopic(pb.DeleteTopicRequest(name="orders2"),
                                                 timeout=t)),
        # Consumer groups (issue 27): a static member's life in group "grp".
        ("FindCoordinator", lambda: stub.FindCoordinator(
            pb.FindCoordinatorRequest(key="grp"), timeout=t)),
        ("JoinGroup", join_group),
        ("SyncGroup", lambda: stub.SyncGroup(pb.SyncGroupRequest(
            group_id="grp", member_id=member.member_id, generation_id=member.generation_id,
            group_instance_id="grp-1"), timeout=t)),
        ("Heartbeat", lambda: stub.Heartbeat(pb.HeartbeatRequest(
            group_id="grp", member_id=member.member_id, generation_id=member.generation_id,
            group_instance_id="grp-1"), timeout=t)),
        ("OffsetCommit", lambda: stub.OffsetCommit(pb.OffsetCommitRequest(
            group_id="grp", member_id=member.member_id, generation_id=member.generation_id,
            group_instance_id="grp-1",
            offsets=[pb.CommittedOffset(topic="orders", partition=0, offset=0)]), timeout=t)),
        ("OffsetFetch", lambda: stub.OffsetFetch(pb.OffsetFetchRequest(group_id="grp"),
                                                 timeout=t)),
        ("ListGroups", lambda: stub.ListGroups(pb.ListGroupsRequest(), timeout=t)),
        ("DescribeGroups", lambda: stub.DescribeGroups(
            pb.DescribeGroupsRequest(group_ids=["grp"]), timeout=t)),
        ("LeaveGroup", lambda: stub.LeaveGroup(pb.LeaveGroupRequest(
            group_id="grp", members=[pb.LeavingMember(member_id=member.member_id,
                                                      group_instance_id="grp-1")]), timeout=t)),
        # The empty group's offsets in a transaction of app-1 (left open: it times out).
        ("AddOffsetsToTxn", lambda: stub.AddOffsetsToTxn(pb.AddOffsetsToTxnRequest(
            transactional_id="app-1", producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch, group_id="grp"), timeout=t)),
        ("TxnOffsetCommit", lambda: stub.TxnOffsetCommit(pb.TxnOffsetCommitRequest(
            transactional_id="app-1", producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch, group_id="grp", generation_id=-1,
            offsets=[pb.CommittedOffset(topic="orders", partition=0, offset=0)]), timeout=t)),
        # Before DeleteGroups: the group must exist.
        ("OffsetDelete", lambda: stub.OffsetDelete(pb.OffsetDeleteRequest(
            group_id="grp", partitions=[pb.TopicPartition(topic="orders", partition=0)]),
            timeout=t)),
        ("DeleteGroups", lambda: stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=["grp"]),
                                                   timeout=t)),
        # Cluster administration (issue 29): on a single server each is authorized first,
        # then answers that there is nothing to do (or, DrainBroker, refuses).
        ("ElectLeaders", lambda: stub.ElectLeaders(pb.ElectLeadersRequest(), timeout=t)),
        ("AlterPartitionReassignments", lambda: stub.AlterPartitionReassignments(
            pb.AlterPartitionReassignmentsRequest(partitions=[pb.PartitionReassignmentTarget(
                topic="orders", partition=0, replicas=[0])]), timeout=t)),
        ("ListPartitionReassignments", lambda: stub.ListPartitionReassignments(
            pb.ListPartitionReassignmentsRequest(), timeout=t)),
        ("DrainBroker", lambda: _single_server_refusal(
            lambda: stub.DrainBroker(pb.DrainBrokerRequest(node_id=0), timeout=t))),
    ]


def _single_server_refusal(call: Callable[[], Any]) -> Any:
    """``call``'s answer; a single server's refusal of what needs a cluster (which it gives
    only to a caller it authorized) as the refusal's message: authorized, nothing done."""
    try:
        return call()
    except grpc.RpcError as exc:
        error = from_rpc_error(exc)
        if "cluster mode only" in error.message and exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
            return error.message
        raise


