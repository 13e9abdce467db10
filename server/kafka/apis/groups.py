"""The consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
ListGroups, DescribeGroups and DeleteGroups, on the same group coordinators as the gRPC
front end (server/group_service/ GroupService; docs/groups.md), as Kafka's
``core/src/main/scala/kafka/server/KafkaApis.scala`` answers them.

Each handler checks the request's shape, authorizes as KafkaApis does, makes the same one call
to :class:`~stratalog.server.group_service.GroupService` as server/rpc/group_rpcs.py and builds
Kafka's response; the coordinator's errors carry Kafka's codes already
(server/groups/group_errors.py), anything else is mapped by error_codes.py.

**Versions** (kafka-python 3.0.12's classes know them all):

=================  ========  ===================================================================
API                served    why
=================  ========  ===================================================================
FindCoordinator    0 to 4    v4 batches keys (kafka-python's admin uses it); v5 only adds
                             TRANSACTION_ABORTABLE, v6 share groups (KIP-932), neither served
JoinGroup          0 to 9    every version: librdkafka 2.16 asks up to 5, kafka-python 7,
                             aiokafka 5; v4+ is KIP-394 (MEMBER_ID_REQUIRED), v5+ static
                             membership, v9 KIP-814's skip_assignment; kafka-python reads
                             JoinGroup 9 as a 3.2+ broker
SyncGroup          0 to 5    every version (v5: protocol type and name, checked)
Heartbeat          0 to 4    every version
LeaveGroup         0 to 5    every version (v3+: several members at once, KIP-345)
ListGroups         0 to 4    v4 filters by state (KIP-518); v5's type filter is KIP-848's
                             (this server has classic groups only)
DescribeGroups     0 to 5    every version Kafka 3.x serves
DeleteGroups       0 to 2    every version
=================  ========  ===================================================================

**Kafka's semantics kept.** A Heartbeat is answered at once (the gRPC side's held heartbeats
are ours: over Kafka ``max_wait`` is 0, the client's schedule is Kafka's). A JoinGroup or
SyncGroup may park until its group's rebalance completes: it is admitted as a waiting request
(client_limits.py, as for gRPC) for as long as it waits, and a connection serves nothing else
meanwhile (as Kafka's broker, which reads a connection's next request after answering one).
JoinGroup v4+ asks a new dynamic member to rejoin with the id it is given (KIP-394); versions
0 to 3 admit it at once. JoinGroup v0 has no rebalance timeout: the session timeout is used.

**Authorization** (``ctx.allowed``; always allowed without an authorizer): DESCRIBE on the
GROUP for FindCoordinator (DESCRIBE on the TRANSACTIONAL_ID for a transaction key), READ on the
GROUP for JoinGroup, SyncGroup, Heartbeat and LeaveGroup, DESCRIBE on the CLUSTER for
ListGroups (else only the groups the caller may DESCRIBE are listed), DESCRIBE on each GROUP for
DescribeGroups, DELETE on each GROUP for DeleteGroups.

**Bounds.** A request naming more than :data:`GROUP_IDS_MAX` groups (DescribeGroups,
DeleteGroups, FindCoordinator v4 keys) answers every one INVALID_REQUEST, as the gRPC side
refuses more; other lists are bounded by the request's size (``kafka_request_bytes_max``).

Concurrency: event-loop only.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from stratalog.server import groups as group_core
from stratalog.server.client_limits import WaitingRpcKind
from stratalog.server.group_service import CLIENT_ID_CHARS_MAX, REQUEST_GROUP_IDS_MAX
from stratalog.server.groups import (
    GroupIdNotFoundError,
    InconsistentGroupProtocolError,
    LeavingMember,
)
from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, code_of, message_of
from stratalog.server.metadata import SINGLE_SERVER_NODE_ID
from stratalog.server.security.acls import CLUSTER_NAME, AclOperation, ResourceType

__all__ = [
    "GROUP_IDS_MAX",
    "delete_groups",
    "describe_groups",
    "failure_code",
    "find_coordinator",
    "group_error_code",
    "heartbeat",
    "join_group",
    "leave_group",
    "list_groups",
    "sync_group",
]

#: Most groups (or coordinator keys) one request may name: the serving layer's bound, both
#: front ends'.
GROUP_IDS_MAX = REQUEST_GROUP_IDS_MAX
#: FindCoordinator's key types (Kafka's ``CoordinatorType``).
_KEY_TYPE_GROUP = 0
_KEY_TYPE_TRANSACTION = 1
#: Kafka's ``Node.noNode()``: what an error answer names as the coordinator.
_NO_NODE = (-1, "", -1)
#: The operations a GROUP's authorized_operations may hold (Kafka's
#: ``AclEntry.supportedOperations(GROUP)``).
_GROUP_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE)

_Coordinator = FindCoordinatorResponse.Coordinator
_JoinedMember = JoinGroupResponse.JoinGroupResponseMember
_LeftMember = LeaveGroupResponse.MemberResponse
_ListedGroup = ListGroupsResponse.ListedGroup
_DescribedGroup = DescribeGroupsResponse.DescribedGroup
_DescribedMember = _DescribedGroup.DescribedGroupMember
_DeletedGroup = DeleteGroupsResponse.DeletableGroupResult


def failure_code(exc: BaseException) -> int:
    """Kafka's code for a failed call to the coordinators, for a response without an
    ``error_message`` field: message_of is called for its logging of the server's own
    trouble (an unexpected error is never dropped silently)."""
    message_of(exc)
    return code_of(exc)


def group_error_code(error: group_core.GroupError | None) -> int:
    """The code of the coordinator's answer (its error carries Kafka's code; None: NONE)."""
    return Code.NONE if error is None else error.code


# ---------------------------------------------------------------- FindCoordinator


@kafka_api(ApiKey.FindCoordinator, versions=(0, 4))
async def find_coordinator(ctx: RequestContext,
                           request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    version = request.API_VERSION
    key_type = request.key_type if version >= 1 else _KEY_TYPE_GROUP
    if version < 4:
        code, message, (node_id, host, port) = await _coordinator(ctx, key_type, request.key)
        return FindCoordinatorResponse(
            throttle_time_ms=0, error_code=code, error_message=message, node_id=node_id,
            host=host, port=port)
    keys = list(request.coordinator_keys)
    too_many = len(keys) > GROUP_IDS_MAX
    answers = []
    for key in keys:
        if too_many:
            code, message, node = (Code.INVALID_REQUEST, f"{len(keys)} coordinator keys: at"
                                   f" most {GROUP_IDS_MAX}", _NO_NODE)
        else:
            code, message, node = await _coordinator(ctx, key_type, key)
        answers.append(_Coordinator(key=key, node_id=node[0], host=node[1], port=node[2],
                                    error_code=code, error_message=message))
    return FindCoordinatorResponse(throttle_time_ms=0, coordinators=answers)


async def _coordinator(ctx: RequestContext, key_type: int,
                       key: str) -> tuple[int, str | None, tuple[int, str, int]]:
    """(error code, error message or None, (node id, host, port)) of one key."""
    services = ctx.services
    if key_type == _KEY_TYPE_TRANSACTION:
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, _NO_NODE
        if not key:
            return Code.INVALID_REQUEST, "a transactional id must not be empty", _NO_NODE
        if not services.settings.cluster:
            # One server keeps every transactional id in its one state log
            # (server/transactions): it is their coordinator.
            return _node(ctx, SINGLE_SERVER_NODE_ID)
        # A cluster: the leader of the id's state partition (server/transaction_service/).
        try:
            found = await services.transactions.find_coordinator(key)
        except Exception as exc:  # the topic cannot be made now, no leader, shutting down
            return code_of(exc), message_of(exc), _NO_NODE
        assert found.node_id is not None
        return _node(ctx, found.node_id)
    if key_type != _KEY_TYPE_GROUP:
        return Code.INVALID_REQUEST, f"unknown coordinator key type {key_type}", _NO_NODE
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return Code.GROUP_AUTHORIZATION_FAILED, None, _NO_NODE
    groups = services.groups
    invalid = groups.config.group_id_error(key)
    if invalid is not None:
        return invalid.code, str(invalid), _NO_NODE
    try:
        found = await groups.find_coordinator(key)
    except Exception as exc:  # the topic cannot be made now, or shutting down
        return code_of(exc), message_of(exc), _NO_NODE
    if found.node_id is not None:  # a cluster: the partition's leader
        return _node(ctx, found.node_id)
    if groups.is_loading(found.partition):
        # Not named until it can serve the group: the client asks again after its backoff
        # (Kafka names it, and its requests answer COORDINATOR_LOAD_IN_PROGRESS meanwhile;
        # docs/kafka-protocol.md, "Differences from Kafka (consumer groups)").
        return (Code.COORDINATOR_NOT_AVAILABLE, "__consumer_offsets is loading on this server",
                _NO_NODE)
    return _node(ctx, SINGLE_SERVER_NODE_ID)


def _node(ctx: RequestContext, node_id: int) -> tuple[int, str | None, tuple[int, str, int]]:
    """The answer naming ``node_id``'s Kafka listener (COORDINATOR_NOT_AVAILABLE when that
    server is not live or has none)."""
    address = ctx.services.broker_addresses().get(node_id)
    if address is None:
        return (Code.COORDINATOR_NOT_AVAILABLE,
                f"node {node_id} has no live Kafka listener", _NO_NODE)
    return Code.NONE, None, (node_id, address.host, address.port)


# ---------------------------------------------------------------- membership


@kafka_api(ApiKey.JoinGroup, versions=(0, 9))
async def join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    version = request.API_VERSION
    group_id = request.group_id
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, group_id):
        return _join_error(Code.GROUP_AUTHORIZATION_FAILED)
    session_timeout_ms = request.session_timeout_ms
    # JoinGroup v0's rule: its rebalance timeout is the session timeout.
    rebalance_timeout_ms = request.rebalance_timeout_ms if version >= 1 else session_timeout_ms
    if rebalance_timeout_ms <= 0:
        rebalance_timeout_ms = session_timeout_ms
    join = group_core.JoinGroupRequest(
        group_id=group_id,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if version >= 5 else None,
        client_id=ctx.client_id[:CLIENT_ID_CHARS_MAX],
        client_host=ctx.connection.host,
        # KIP-394: only a v4+ client knows to rejoin with the id MEMBER_ID_REQUIRED gives.
        require_known_member_id=version >= 4,
        reason=request.reason if version >= 8 else None,
    )
    try:
        # A join parks until the rebalance completes: a waiting request, as over gRPC.
        with ctx.services.limits.admit(ctx.origin(), WaitingRpcKind.GROUP_REBALANCE):
            response = await ctx.services.groups.join_group(join)
    except Exception as exc:
        return _join_error(failure_code(exc), request.member_id)
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=group_error_code(response.error),
        generation_id=response.generation_id,
        protocol_type=response.protocol_type,
        # Kafka's JoinGroupResponse: "" before v7, null for none from v7.
        protocol_name=response.protocol_name or ("" if version < 7 else None),
        leader=response.leader_id,
        skip_assignment=response.skip_assignment,
        member_id=response.member_id,
        members=[_JoinedMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                               metadata=m.metadata) for m in response.members],
    )


def _join_error(code: int, member_id: str = "") -> JoinGroupResponse:
    """Kafka's ``JoinGroupRequest.getErrorResponse``: no generation, leader or members."""
    return JoinGroupResponse(throttle_time_ms=0, error_code=code, generation_id=-1,
                             protocol_name="", leader="", member_id=member_id, members=[])


@kafka_api(ApiKey.SyncGroup, versions=(0, 5))
async def sync_group(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    version = request.API_VERSION
    protocol_type = request.protocol_type if version >= 5 else None
    protocol_name = request.protocol_name if version >= 5 else None
    if version >= 5 and (protocol_type is None or protocol_name is None):
        # Kafka's SyncGroupRequest.areMandatoryProtocolTypeAndNamePresent.
        return SyncGroupResponse(error_code=InconsistentGroupProtocolError.code, assignment=b"")
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return SyncGroupResponse(error_code=Code.GROUP_AUTHORIZATION_FAILED, assignment=b"")
    sync = group_core.SyncGroupRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        generation_id=request.generation_id,
        group_instance_id=request.group_instance_id if version >= 3 else None,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in request.assignments),
    )
    try:
        # A follower's SyncGroup parks until the leader's arrives.
        with ctx.services.limits.admit(ctx.origin(), WaitingRpcKind.GROUP_REBALANCE):
            response = await ctx.services.groups.sync_group(sync)
    except Exception as exc:
        return SyncGroupResponse(error_code=failure_code(exc), assignment=b"")
    return SyncGroupResponse(
        throttle_time_ms=0, error_code=group_error_code(response.error),
        protocol_type=response.protocol_type, protocol_name=response.protocol_name,
        assignment=response.assignment,
    )


@kafka_api(ApiKey.Heartbeat, versions=(0, 4))
async def heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return HeartbeatResponse(throttle_time_ms=0, error_code=Code.GROUP_AUTHORIZATION_FAILED)
    beat = group_core.HeartbeatRequest(
        request.group_id, request.member_id, request.generation_id,
        request.group_instance_id if request.API_VERSION >= 3 else None,
        0,  # answered at once: Kafka's heartbeat (never held)
    )
    try:
        response = await ctx.services.groups.heartbeat(beat)
    except Exception as exc:
        return HeartbeatResponse(throttle_time_ms=0, error_code=failure_code(exc))
    return HeartbeatResponse(throttle_time_ms=0, error_code=group_error_code(response.error))


@kafka_api(ApiKey.LeaveGroup, versions=(0, 5))
async def leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    version = request.API_VERSION
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return LeaveGroupResponse(error_code=Code.GROUP_AUTHORIZATION_FAILED, members=[])
    if version < 3:
        # Kafka's LeaveGroupRequest.normalizedData: the one member of v0 to v2.
        leaving: tuple[LeavingMember, ...] = (LeavingMember(request.member_id),)
    else:
        leaving = tuple(
            LeavingMember(m.member_id, m.group_instance_id,
                          m.reason if version >= 5 else None)
            for m in request.members)
        if not leaving:
            return LeaveGroupResponse(error_code=Code.INVALID_REQUEST, members=[])
    try:
        response = await ctx.services.groups.leave_group(
            group_core.LeaveGroupRequest(request.group_id, leaving))
    except Exception as exc:
        return LeaveGroupResponse(error_code=failure_code(exc), members=[])
    code = group_error_code(response.error)
    if version < 3:
        # Kafka's LeaveGroupResponse before v3: the group's error, else the one member's.
        if code == Code.NONE and response.members:
            code = group_error_code(response.members[0].error)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code)
    return LeaveGroupResponse(
        throttle_time_ms=0, error_code=code,
        members=[_LeftMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                             error_code=group_error_code(m.error))
                 for m in response.members],
    )


# ---------------------------------------------------------------- groups


@kafka_api(ApiKey.ListGroups, versions=(0, 4))
async def list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    states = frozenset(request.states_filter or ()) if request.API_VERSION >= 4 else frozenset()
    try:
        response = await ctx.services.groups.list_groups(group_core.ListGroupsRequest(states))
    except Exception as exc:
        return ListGroupsResponse(throttle_time_ms=0, error_code=failure_code(exc), groups=[])
    if response.error is not None:
        return ListGroupsResponse(throttle_time_ms=0, error_code=response.error.code, groups=[])
    # KafkaApis.handleListGroupsRequest: DESCRIBE on the cluster lists every group, else the
    # groups the caller may DESCRIBE.
    every = ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    return ListGroupsResponse(throttle_time_ms=0, error_code=Code.NONE, groups=[
        _ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state)
        for g in response.groups
        if every or ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)
    ])


@kafka_api(ApiKey.DescribeGroups, versions=(0, 5))
async def describe_groups(ctx: RequestContext,
                          request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    group_ids = list(request.groups)
    with_operations = request.API_VERSION >= 3 and bool(request.include_authorized_operations)
    refused: dict[str, int] = {}
    if len(group_ids) > GROUP_IDS_MAX:
        refused = dict.fromkeys(group_ids, Code.INVALID_REQUEST)
    for group_id in group_ids:
        if group_id not in refused and not ctx.allowed(AclOperation.DESCRIBE,
                                                       ResourceType.GROUP, group_id):
            refused[group_id] = Code.GROUP_AUTHORIZATION_FAILED
    allowed = tuple(dict.fromkeys(g for g in group_ids if g not in refused))
    described: dict[str, Any] = {}
    if allowed:
        try:
            response = await ctx.services.groups.describe_groups(
                group_core.DescribeGroupsRequest(allowed))
        except Exception as exc:
            code = failure_code(exc)
            refused.update(dict.fromkeys(allowed, code))
        else:
            described = {g.group_id: g for g in response.groups}
    answers = []
    for group_id in group_ids:
        group = described.get(group_id)
        if group is None:
            answers.append(_DescribedGroup(
                error_code=refused.get(group_id, Code.NONE), group_id=group_id, group_state="",
                protocol_type="", protocol_data="", members=[],
                authorized_operations=None))
            continue
        code = group_error_code(group.error)
        if isinstance(group.error, GroupIdNotFoundError):
            # Kafka's GroupMetadataManager.describeGroups: a group that does not exist is
            # Dead with no error before v6 (which this server does not serve).
            code = Code.NONE
        answers.append(_DescribedGroup(
            error_code=code, group_id=group_id, group_state=group.state,
            protocol_type=group.protocol_type, protocol_data=group.protocol_name,
            members=[_DescribedMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                member_assignment=m.assignment) for m in group.members],
            # None: not asked (the codec writes Kafka's -2^31).
            authorized_operations=(_authorized_operations(ctx, group_id)
                                   if with_operations and code == Code.NONE else None),
        ))
    return DescribeGroupsResponse(throttle_time_ms=0, groups=answers)


def _authorized_operations(ctx: RequestContext, group_id: str) -> set[int]:
    """The codes of the operations the caller may do on the group (the codec writes Kafka's
    bit field: bit = the operation's code)."""
    return {int(operation) for operation in _GROUP_OPERATIONS
            if ctx.allowed(operation, ResourceType.GROUP, group_id)}


@kafka_api(ApiKey.DeleteGroups, versions=(0, 2))
async def delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    group_ids = list(dict.fromkeys(request.groups_names))
    codes: dict[str, int] = {}
    if len(group_ids) > GROUP_IDS_MAX:
        codes = dict.fromkeys(group_ids, Code.INVALID_REQUEST)
    allowed = []
    for group_id in group_ids:
        if group_id in codes:
            continue
        if ctx.allowed(AclOperation.DELETE, ResourceType.GROUP, group_id):
            allowed.append(group_id)
        else:
            codes[group_id] = Code.GROUP_AUTHORIZATION_FAILED
    if allowed:
        try:
            response = await ctx.services.groups.delete_groups(
                group_core.DeleteGroupsRequest(tuple(allowed)))
        except Exception as exc:
            codes.update(dict.fromkeys(allowed, failure_code(exc)))
        else:
            codes.update((g, group_error_code(e)) for g, e in response.results)
    return DeleteGroupsResponse(throttle_time_ms=0, results=[
        _DeletedGroup(group_id=g, error_code=codes[g]) for g in group_ids])

