"""The consumer-group RPCs of the Broker service: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups,
OffsetDelete, AddOffsetsToTxn and TxnOffsetCommit (issue 27; docs/groups.md, "Serving groups").

Each translates broker.proto's message to the group coordinator's dataclasses
(server/groups/group_messages.py), makes one call to the serving layer
(:class:`~stratalog.server.group_service.GroupService`) and translates the answer back. An error
of the whole request (the response's ``error``, or for OffsetCommit and OffsetFetch the first
partition's: broker.proto's OffsetCommit and OffsetDelete are all or nothing) is raised, and becomes its status in
status.py; requests about several groups or members answer an ErrorReason per item.

The member's client id is the call's ``x-client-id`` metadata ("" without one), its host the
call's peer, as Kafka's coordinator records them for DescribeGroups. A JoinGroup or SyncGroup
may wait for its group's rebalance, and a held Heartbeat (``max_wait_ms`` > 0, docs/groups.md
"Held heartbeats") until its group rebalances: each is admitted as a waiting RPC (the
per-connection, per-client and total limits of server/client_limits.py), as a long poll is.

Concurrency: event-loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from stratalog.server.client_limits import WaitingRpcKind, call_origin, host_of_peer
from stratalog.server.group_service import CLIENT_ID_CHARS_MAX, REQUEST_GROUP_IDS_MAX
from stratalog.server.groups import (
    CoordinatorNotAvailableError,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    GroupError,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeavingMember,
    ListGroupsRequest,
    MemberIdRequiredError,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    PartitionOffset,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from stratalog.server.metadata import SINGLE_SERVER_NODE_ID
from stratalog.server.rpc import status
from stratalog.server.rpc.requests import (
    RpcBase,
    producer_of,
    rpc_method,
    transactional_id_of,
)
from stratalog.server.rpc.translation import BadRequestError
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.group_service import GroupService

__all__ = ["CLIENT_ID_METADATA_KEY", "GroupRpcs"]

#: The call metadata a client names itself with (Kafka's client.id).
CLIENT_ID_METADATA_KEY = "x-client-id"


def _optional(message: Any, field: str) -> str | None:
    return getattr(message, field) if message.HasField(field) else None


def _raise(error: GroupError | None) -> None:
    if error is not None:
        raise error


def _reason(error: GroupError | None) -> tuple[int, str]:
    """The ErrorReason and message of a per-item error (unspecified and "" for none)."""
    if error is None:
        return broker_pb2.ERROR_REASON_UNSPECIFIED, ""
    return status.error_reason(error)


class GroupRpcs(RpcBase):
    """The consumer-group RPCs (module docstring)."""

    _groups: GroupService | None

    def _group_service(self) -> GroupService:
        if self._groups is None:
            raise CoordinatorNotAvailableError("this server serves no consumer groups")
        return self._groups

    @staticmethod
    def _client(context: grpc.aio.ServicerContext) -> tuple[str, str]:
        """The caller's client id (metadata ``x-client-id``) and host (the peer)."""
        client_id = ""
        for key, value in context.invocation_metadata() or ():
            if key == CLIENT_ID_METADATA_KEY and isinstance(value, str):
                client_id = value[:CLIENT_ID_CHARS_MAX]
        return client_id, host_of_peer(context.peer() or "")

    @staticmethod
    def _group_ids(ids: Any) -> tuple[str, ...]:
        if len(ids) > REQUEST_GROUP_IDS_MAX:
            raise BadRequestError("group_ids", f"{len(ids)} group ids: at most {REQUEST_GROUP_IDS_MAX}")
        return tuple(ids)

    # ---------------------------------------------------------------- FindCoordinator

    @rpc_method()
    async def FindCoordinator(
        self, request: broker_pb2.FindCoordinatorRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.FindCoordinatorResponse:
        if request.key_type == broker_pb2.COORDINATOR_TYPE_TRANSACTION:
            if not request.key:
                raise BadRequestError("key", "a transactional id must not be empty")
            if self._settings.cluster:
                # The leader of the id's state partition (server/transaction_service/).
                found = await self._coordinator.find_coordinator(request.key)
                return broker_pb2.FindCoordinatorResponse(
                    node_id=found.node_id, address=found.address, partition=found.partition)
            # One server's coordinator keeps every transactional id in one state log
            # (server/transactions): no partition to name.
            partition = 0
        elif request.key_type == broker_pb2.COORDINATOR_TYPE_GROUP:
            groups = self._group_service()
            _raise(groups.config.group_id_error(request.key))
            found = await groups.find_coordinator(request.key)
            if found.node_id is not None:  # a cluster: the partition's leader
                return broker_pb2.FindCoordinatorResponse(
                    node_id=found.node_id, address=found.address, partition=found.partition)
            partition = found.partition
        else:
            raise BadRequestError("key_type", f"unknown value {request.key_type}")
        return broker_pb2.FindCoordinatorResponse(
            node_id=SINGLE_SERVER_NODE_ID, address=self.advertised_address, partition=partition
        )

    # ---------------------------------------------------------------- membership

    @rpc_method()
    async def JoinGroup(
        self, request: broker_pb2.JoinGroupRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.JoinGroupResponse:
        groups = self._group_service()
        client_id, client_host = self._client(context)
        # JoinGroup v0's rule: no rebalance timeout means the session timeout.
        rebalance_timeout_ms = request.rebalance_timeout_ms or request.session_timeout_ms
        if request.session_timeout_ms < 0 or rebalance_timeout_ms < 0:
            raise BadRequestError("session_timeout_ms", "timeouts must be >= 0")
        join = JoinGroupRequest(
            group_id=request.group_id,
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, p.metadata) for p in request.protocols),
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            member_id=request.member_id,
            group_instance_id=_optional(request, "group_instance_id"),
            client_id=client_id,
            client_host=client_host,
            reason=request.reason or None,
        )
        with self._limits.admit(call_origin(context), WaitingRpcKind.GROUP_REBALANCE):
            response = await groups.join_group(join)
        if isinstance(response.error, MemberIdRequiredError):
            # The id to join again with travels in the ErrorInfo (status.py's "member_id").
            response.error.member_id = response.member_id  # type: ignore[attr-defined]
        _raise(response.error)
        return broker_pb2.JoinGroupResponse(
            generation_id=response.generation_id,
            protocol_type=response.protocol_type or "",
            protocol_name=response.protocol_name or "",
            leader_id=response.leader_id,
            member_id=response.member_id,
            skip_assignment=response.skip_assignment,
            members=[
                broker_pb2.JoinGroupMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id,
                    metadata=m.metadata,
                )
                for m in response.members
            ],
        )

    @rpc_method()
    async def SyncGroup(
        self, request: broker_pb2.SyncGroupRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.SyncGroupResponse:
        groups = self._group_service()
        sync = SyncGroupRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            generation_id=request.generation_id,
            group_instance_id=_optional(request, "group_instance_id"),
            protocol_type=request.protocol_type or None,
            protocol_name=request.protocol_name or None,
            assignments=tuple((a.member_id, a.assignment) for a in request.assignments),
        )
        with self._limits.admit(call_origin(context), WaitingRpcKind.GROUP_REBALANCE):
            response = await groups.sync_group(sync)
        _raise(response.error)
        return broker_pb2.SyncGroupResponse(
            protocol_type=response.protocol_type or "",
            protocol_name=response.protocol_name or "",
            assignment=response.assignment,
        )

    @rpc_method()
    async def Heartbeat(
        self, request: broker_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.HeartbeatResponse:
        if request.max_wait_ms < 0:
            raise BadRequestError("max_wait_ms", f"{request.max_wait_ms}: must be >= 0")
        heartbeat = HeartbeatRequest(
            request.group_id, request.member_id, request.generation_id,
            _optional(request, "group_instance_id"), request.max_wait_ms,
        )
        if request.max_wait_ms == 0:
            response = await self._group_service().heartbeat(heartbeat)
        else:
            with self._limits.admit(call_origin(context), WaitingRpcKind.HELD_HEARTBEAT):
                response = await self._group_service().heartbeat(heartbeat)
        _raise(response.error)
        return broker_pb2.HeartbeatResponse()

    @rpc_method()
    async def LeaveGroup(
        self, request: broker_pb2.LeaveGroupRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.LeaveGroupResponse:
        if not request.members:
            raise BadRequestError("members", "name at least one member to remove")
        response = await self._group_service().leave_group(LeaveGroupRequest(
            request.group_id,
            tuple(
                LeavingMember(m.member_id, _optional(m, "group_instance_id"), m.reason or None)
                for m in request.members
            ),
        ))
        _raise(response.error)
        answer = broker_pb2.LeaveGroupResponse()
        for left in response.members:
            reason, message = _reason(left.error)
            answer.members.add(member_id=left.member_id, group_instance_id=left.group_instance_id,
                               error=reason, error_message=message)
        return answer

    # ---------------------------------------------------------------- offsets

    def _offsets(self, offsets: Any) -> tuple[PartitionOffset, ...]:
        """broker.proto's CommittedOffsets, checked: topic names, partitions, offsets."""
        if not offsets:
            raise BadRequestError("offsets", "commit at least one partition's offset")
        checked = []
        for index, item in enumerate(offsets):
            topic = self._topic(item.topic, f"offsets[{index}].topic")
            if item.partition < 0:
                raise BadRequestError(f"offsets[{index}].partition",
                                      f"must be >= 0, got {item.partition}")
            if item.offset < 0:
                raise BadRequestError(f"offsets[{index}].offset",
                                      f"must be >= 0 (the next record to consume), got"
                                      f" {item.offset}")
            checked.append(PartitionOffset(topic, item.partition, item.offset,
                                           item.leader_epoch, item.metadata))
        return tuple(checked)

    @rpc_method()
    async def OffsetCommit(
        self, request: broker_pb2.OffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.OffsetCommitResponse:
        response = await self._group_service().commit_offsets(OffsetCommitRequest(
            group_id=request.group_id,
            offsets=self._offsets(request.offsets),
            member_id=request.member_id,
            generation_id=request.generation_id,
            group_instance_id=_optional(request, "group_instance_id"),
        ))
        for partition in response.partitions:
            _raise(partition.error)
        return broker_pb2.OffsetCommitResponse()

    @rpc_method()
    async def OffsetFetch(
        self, request: broker_pb2.OffsetFetchRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.OffsetFetchResponse:
        partitions = None
        if request.partitions:
            partitions = tuple(
                (self._topic(p.topic, f"partitions[{i}].topic"), p.partition)
                for i, p in enumerate(request.partitions)
            )
        response = await self._group_service().fetch_offsets(OffsetFetchRequest(
            request.group_id, partitions, request.require_stable,
        ))
        _raise(response.error)
        for fetched in response.partitions:
            _raise(fetched.error)
        return broker_pb2.OffsetFetchResponse(offsets=[
            broker_pb2.CommittedOffset(
                topic=f.topic, partition=f.partition, offset=f.offset,
                leader_epoch=f.leader_epoch, metadata=f.metadata,
            )
            for f in response.partitions
        ])

    # ---------------------------------------------------------------- groups

    @rpc_method()
    async def ListGroups(
        self, request: broker_pb2.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListGroupsResponse:
        response = await self._group_service().list_groups(
            ListGroupsRequest(frozenset(request.states_filter)))
        _raise(response.error)
        return broker_pb2.ListGroupsResponse(groups=[
            broker_pb2.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type,
                                   state=g.state)
            for g in response.groups
        ])

    @rpc_method()
    async def DescribeGroups(
        self, request: broker_pb2.DescribeGroupsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeGroupsResponse:
        response = await self._group_service().describe_groups(
            DescribeGroupsRequest(self._group_ids(request.group_ids)))
        answer = broker_pb2.DescribeGroupsResponse()
        for group in response.groups:
            reason, message = _reason(group.error)
            described = answer.groups.add(
                group_id=group.group_id, error=reason, error_message=message,
                state=group.state, protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
            )
            for m in group.members:
                described.members.add(
                    member_id=m.member_id, group_instance_id=m.group_instance_id,
                    client_id=m.client_id, client_host=m.client_host, metadata=m.metadata,
                    assignment=m.assignment,
                )
        return answer

    @rpc_method()
    async def DeleteGroups(
        self, request: broker_pb2.DeleteGroupsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteGroupsResponse:
        response = await self._group_service().delete_groups(
            DeleteGroupsRequest(self._group_ids(request.group_ids)))
        answer = broker_pb2.DeleteGroupsResponse()
        for group_id, error in response.results:
            reason, message = _reason(error)
            answer.groups.add(group_id=group_id, error=reason, error_message=message)
        return answer

    @rpc_method()
    async def OffsetDelete(
        self, request: broker_pb2.OffsetDeleteRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.OffsetDeleteResponse:
        if not request.partitions:
            raise BadRequestError("partitions", "name at least one partition whose committed"
                                  " offset to delete")
        partitions = []
        for index, item in enumerate(request.partitions):
            topic = self._topic(item.topic, f"partitions[{index}].topic")
            if item.partition < 0:
                raise BadRequestError(f"partitions[{index}].partition",
                                      f"must be >= 0, got {item.partition}")
            partitions.append((topic, item.partition))
        response = await self._group_service().delete_offsets(
            OffsetDeleteRequest(request.group_id, tuple(partitions)))
        _raise(response.error)
        for partition in response.partitions:
            _raise(partition.error)
        return broker_pb2.OffsetDeleteResponse()

    # ---------------------------------------------------------------- transactional offsets

    @rpc_method()
    async def AddOffsetsToTxn(
        self, request: broker_pb2.AddOffsetsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AddOffsetsToTxnResponse:
        transactional_id = transactional_id_of(request.transactional_id)
        producer_id, producer_epoch = producer_of(request.producer_id, request.producer_epoch)
        groups = self._group_service()
        _raise(groups.config.group_id_error(request.group_id))
        await groups.add_offsets_to_txn(transactional_id, producer_id, producer_epoch,
                                        request.group_id)
        return broker_pb2.AddOffsetsToTxnResponse()

    @rpc_method()
    async def TxnOffsetCommit(
        self, request: broker_pb2.TxnOffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.TxnOffsetCommitResponse:
        transactional_id = transactional_id_of(request.transactional_id)
        producer_id, producer_epoch = producer_of(request.producer_id, request.producer_epoch)
        response = await self._group_service().commit_transactional_offsets(
            TxnOffsetCommitRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                group_id=request.group_id,
                offsets=self._offsets(request.offsets),
                member_id=request.member_id,
                generation_id=request.generation_id,
                group_instance_id=_optional(request, "group_instance_id"),
            ))
        for partition in response.partitions:
            _raise(partition.error)
        return broker_pb2.TxnOffsetCommitResponse()
