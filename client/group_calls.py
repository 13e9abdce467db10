"""The consumer-group RPCs as Client methods, routed to the group's coordinator.

Kafka's group requests go to the group's *coordinator*: the server leading the group's
``__consumer_offsets`` partition, which FindCoordinator names (node id and address; docs/groups.md).
:class:`GroupCalls` is the part of :class:`~stratalog.client.client.Client` that sends them:

* ``find_coordinator(key)`` asks any server (the Client's admin path) and remembers the answer
  per group id;
* JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups,
  DeleteGroups, OffsetDelete go to the coordinator: the address given (the group member's
  driver passes the one it found) or the remembered one, found first when there is none. A
  coordinator that answers NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, or cannot be reached,
  is forgotten, so the next call finds it again (the member core does its own retries; the
  admin calls here retry once after finding it again);
* ListGroups goes to every server known (each lists the groups it coordinates) and merges.

Requests and responses are the group member's values (:mod:`.groups.membership_messages`, field
for field broker.proto's messages); :func:`request_message` and :func:`response_value` convert
them, and the admin answers become :mod:`.types` values. JoinGroup and SyncGroup are answered
when the rebalance completes, so their deadline is the rebalance timeout plus the request
timeout (Kafka's ``AbstractCoordinator`` does the same). Errors are
:mod:`.errors`' classes: per-group and per-member errors in DescribeGroups, DeleteGroups and
LeaveGroup answers become exceptions in the values (:func:`.errors.from_error_reason`).

Event-loop only, as the Client. Bounded: one remembered address per group id the client asked
about, at most :data:`COORDINATORS_MAX` (the oldest forgotten first).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from stratalog.v1 import broker_pb2

from . import errors
from .groups import consumer_protocol
from .groups import membership_messages as m
from .types import (
    DeletedGroup,
    GroupDescription,
    GroupMemberDescription,
    ListedGroup,
    TopicPartition,
)

if TYPE_CHECKING:
    from .broker_connection import BrokerConnection

__all__ = ["COORDINATORS_MAX", "UNSET", "GroupCalls", "request_message", "response_value"]

logger = logging.getLogger(__name__)

#: The default of ``timeout_s``: the Client's default deadline (``None`` means none). The
#: Client's own sentinel, so that its methods and these read one value.
UNSET: Any = object()

#: Group coordinators remembered by one Client (a tool describing many groups stays bounded).
COORDINATORS_MAX = 1024

#: The errors after which the remembered coordinator of a group is forgotten.
_COORDINATOR_GONE = (
    errors.NotCoordinatorError,
    errors.CoordinatorNotAvailableError,
    errors.BrokerUnavailableError,
    errors.ShuttingDownError,
)

#: RPC name of each request value.
_RPC_NAMES: dict[type, str] = {
    m.FindCoordinatorRequest: "FindCoordinator",
    m.JoinGroupRequest: "JoinGroup",
    m.SyncGroupRequest: "SyncGroup",
    m.HeartbeatRequest: "Heartbeat",
    m.LeaveGroupRequest: "LeaveGroup",
    m.OffsetCommitRequest: "OffsetCommit",
    m.OffsetFetchRequest: "OffsetFetch",
}


def _committed(offsets: Iterable[m.CommittedOffset]) -> list[broker_pb2.CommittedOffset]:
    return [
        broker_pb2.CommittedOffset(topic=o.topic, partition=o.partition, offset=o.offset,
                                   leader_epoch=o.leader_epoch, metadata=o.metadata)
        for o in offsets
    ]


def request_message(request: object) -> Any:
    """The broker.proto message of a group member's request value (same fields)."""
    if isinstance(request, m.FindCoordinatorRequest):
        return broker_pb2.FindCoordinatorRequest(key=request.key, key_type=request.key_type)
    if isinstance(request, m.JoinGroupRequest):
        return broker_pb2.JoinGroupRequest(
            group_id=request.group_id, session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms, member_id=request.member_id,
            group_instance_id=request.group_instance_id, protocol_type=request.protocol_type,
            protocols=[broker_pb2.GroupProtocol(name=n, metadata=d) for n, d in request.protocols],
            reason=request.reason,
        )
    if isinstance(request, m.SyncGroupRequest):
        return broker_pb2.SyncGroupRequest(
            group_id=request.group_id, generation_id=request.generation_id,
            member_id=request.member_id, group_instance_id=request.group_instance_id,
            protocol_type=request.protocol_type, protocol_name=request.protocol_name,
            assignments=[broker_pb2.SyncGroupAssignment(member_id=i, assignment=a)
                         for i, a in request.assignments],
        )
    if isinstance(request, m.HeartbeatRequest):
        return broker_pb2.HeartbeatRequest(
            group_id=request.group_id, generation_id=request.generation_id,
            member_id=request.member_id, group_instance_id=request.group_instance_id,
            max_wait_ms=request.max_wait_ms,
        )
    if isinstance(request, m.LeaveGroupRequest):
        return broker_pb2.LeaveGroupRequest(group_id=request.group_id, members=[
            broker_pb2.LeavingMember(member_id=x.member_id, group_instance_id=x.group_instance_id,
                                     reason=x.reason)
            for x in request.members
        ])
    if isinstance(request, m.OffsetCommitRequest):
        return broker_pb2.OffsetCommitRequest(
            group_id=request.group_id, generation_id=request.generation_id,
            member_id=request.member_id, group_instance_id=request.group_instance_id,
            offsets=_committed(request.offsets),
        )
    if isinstance(request, m.OffsetFetchRequest):
        return broker_pb2.OffsetFetchRequest(
            group_id=request.group_id, require_stable=request.require_stable,
            partitions=[broker_pb2.TopicPartition(topic=t, partition=p)
                        for t, p in request.partitions],
        )
    raise TypeError(f"not a group request: {request!r}")


def _optional(message: Any, name: str) -> str | None:
    return getattr(message, name) if message.HasField(name) else None


def response_value(response: Any) -> object:
    """The group member's value of a broker.proto group response (same fields)."""
    if isinstance(response, broker_pb2.FindCoordinatorResponse):
        return m.FindCoordinatorResponse(response.node_id, response.address, response.partition)
    if isinstance(response, broker_pb2.JoinGroupResponse):
        return m.JoinGroupResponse(
            generation_id=response.generation_id, protocol_type=response.protocol_type,
            protocol_name=response.protocol_name, leader_id=response.leader_id,
            member_id=response.member_id, skip_assignment=response.skip_assignment,
            members=tuple(m.JoinedMember(member_id=x.member_id, metadata=bytes(x.metadata),
                                         group_instance_id=_optional(x, "group_instance_id"))
                          for x in response.members),
        )
    if isinstance(response, broker_pb2.SyncGroupResponse):
        return m.SyncGroupResponse(response.protocol_type, response.protocol_name,
                                   bytes(response.assignment))
    if isinstance(response, broker_pb2.HeartbeatResponse):
        return m.HeartbeatResponse()
    if isinstance(response, broker_pb2.LeaveGroupResponse):
        return m.LeaveGroupResponse(tuple(
            m.LeftMember(x.member_id, _optional(x, "group_instance_id"),
                         errors.from_error_reason(x.error, x.error_message))
            for x in response.members
        ))
    if isinstance(response, broker_pb2.OffsetCommitResponse):
        return m.OffsetCommitResponse()
    if isinstance(response, broker_pb2.OffsetFetchResponse):
        return m.OffsetFetchResponse(tuple(
            m.CommittedOffset(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata)
            for o in response.offsets
        ))
    raise TypeError(f"not a group response: {type(response).__name__}")


def _member_description(member: Any) -> GroupMemberDescription:
    assignment: tuple[TopicPartition, ...] = ()
    if member.assignment:
        try:
            assignment = consumer_protocol.decode_assignment(member.assignment).partitions
        except consumer_protocol.ConsumerProtocolError:
            assignment = ()  # another protocol type's bytes: kept raw below
    return GroupMemberDescription(
        member_id=member.member_id,
        group_instance_id=_optional(member, "group_instance_id"),
        client_id=member.client_id,
        client_host=member.client_host,
        assignment=assignment,
        metadata=bytes(member.metadata),
        assignment_bytes=bytes(member.assignment),
    )


class GroupCalls:
    """The group RPCs of :class:`~stratalog.client.client.Client` (module docstring); a mixin
    over the Client's connections and admin path, not usable alone. Event-loop only."""

    # Provided by the Client.
    _group_coordinators: dict[str, str]
    _routing: Any

    def _connection(self, address: str) -> BrokerConnection:  # pragma: no cover - the Client's
        raise NotImplementedError

    async def _call(self, name: str, request: Any, timeout: float | None) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _deadline(self, timeout_s: Any, extra_ms: int = 0) -> float | None:  # pragma: no cover
        raise NotImplementedError

    # -- the coordinator -----------------------------------------------------------------------

    async def find_coordinator(
        self, key: str, *, key_type: int = m.COORDINATOR_TYPE_GROUP, timeout_s: Any = UNSET,
    ) -> m.FindCoordinatorResponse:
        """Where the coordinator of group ``key`` (or, with COORDINATOR_TYPE_TRANSACTION, of a
        transactional id) is: node id, address, and the partition holding the key. Asked of
        any server; a group's answer is remembered for the calls below.

        Raises InvalidGroupIdError (empty or over-long group id), CoordinatorNotAvailableError
        (retriable: the partition has no leader now).
        """
        if not isinstance(key, str) or not key:
            raise ValueError(f"the coordinator key must be a non-empty string, got {key!r}")
        response = await self._call(
            "FindCoordinator", broker_pb2.FindCoordinatorRequest(key=key, key_type=key_type),
            self._deadline(timeout_s))
        found = response_value(response)
        assert isinstance(found, m.FindCoordinatorResponse)
        if key_type == m.COORDINATOR_TYPE_GROUP and found.address:
            self._remember_coordinator(key, found.address)
        return found

    def _remember_coordinator(self, group_id: str, address: str) -> None:
        coordinators = self._group_coordinators
        coordinators.pop(group_id, None)
        coordinators[group_id] = address
        while len(coordinators) > COORDINATORS_MAX:
            del coordinators[next(iter(coordinators))]

    def forget_coordinator(self, group_id: str) -> None:
        """Forget where ``group_id``'s coordinator is: the next call finds it again."""
        self._group_coordinators.pop(group_id, None)

    async def _coordinator_address(self, group_id: str, deadline_s: Any) -> str:
        address = self._group_coordinators.get(group_id)
        if address is None:
            found = await self.find_coordinator(group_id, timeout_s=deadline_s)
            if not found.address:
                raise errors.CoordinatorNotAvailableError(
                    f"FindCoordinator named no address for group {group_id!r}")
            address = found.address
        return address

    async def _to_coordinator(
        self, group_id: str, name: str, message: Any, timeout_s: Any, *,
        address: str | None = None, extra_ms: int = 0, retry: bool = False,
    ) -> Any:
        """``message`` as RPC ``name`` to ``address``, else to the group's coordinator (found
        first if unknown); with ``retry``, once more after finding it again when it moved."""
        timeout_s = timeout_s
        for attempt in range(2 if retry and address is None else 1):
            target = address or await self._coordinator_address(group_id, timeout_s)
            connection = self._connection(target)
            try:
                return await connection.call(getattr(connection.stub, name), message,
                                             self._deadline(timeout_s, extra_ms))
            except _COORDINATOR_GONE as err:
                if self._group_coordinators.get(group_id) == target:
                    self.forget_coordinator(group_id)
                if attempt == 1 or not retry or address is not None:
                    raise
                logger.debug("%s of group %s to %s: %s; finding the coordinator again",
                             name, group_id, target, err)
        raise AssertionError("unreachable")

    # -- membership (the group member's requests) -----------------------------------------------

    async def group_request(
        self, request: object, address: str | None = None, *, timeout_s: Any = UNSET,
        rebalance_timeout_ms: int = 0,
    ) -> object:
        """Send a group member's request value (:mod:`.groups.membership_messages`) and return
        its response value: FindCoordinator to any server (``address`` None), the others to
        ``address`` or the group's coordinator. JoinGroup's deadline is its rebalance timeout
        plus the request timeout; SyncGroup's ``rebalance_timeout_ms`` plus it; a held
        Heartbeat's its ``max_wait_ms`` plus it.

        Raises the call's StratalogError (errors.py; a lost connection or deadline included).
        """
        name = _RPC_NAMES.get(type(request))
        if name is None:
            raise TypeError(f"not a group request: {request!r}")
        if isinstance(request, m.FindCoordinatorRequest) and address is None:
            return await self.find_coordinator(request.key, key_type=request.key_type,
                                               timeout_s=timeout_s)
        if isinstance(request, m.JoinGroupRequest):
            rebalance_timeout_ms = max(rebalance_timeout_ms, request.rebalance_timeout_ms)
        extra_ms = rebalance_timeout_ms if name in ("JoinGroup", "SyncGroup") else 0
        if isinstance(request, m.HeartbeatRequest):
            extra_ms = request.max_wait_ms  # a held heartbeat may be answered that late
        group_id = getattr(request, "group_id", None) or getattr(request, "key", "")
        response = await self._to_coordinator(
            group_id, name, request_message(request), timeout_s, address=address,
            extra_ms=extra_ms)
        return response_value(response)

    async def join_group(self, request: m.JoinGroupRequest, *, address: str | None = None,
                         timeout_s: Any = UNSET) -> m.JoinGroupResponse:
        """JoinGroup (answered when the rebalance completes). Raises MemberIdRequiredError
        (``.member_id``: join again with it), RebalanceInProgressError, the group errors."""
        return await self.group_request(request, address, timeout_s=timeout_s)  # type: ignore[return-value]

    async def sync_group(self, request: m.SyncGroupRequest, *, address: str | None = None,
                         timeout_s: Any = UNSET,
                         rebalance_timeout_ms: int = 300_000) -> m.SyncGroupResponse:
        """SyncGroup: the leader sends the assignments, every member gets its own."""
        return await self.group_request(  # type: ignore[return-value]
            request, address, timeout_s=timeout_s, rebalance_timeout_ms=rebalance_timeout_ms)

    async def heartbeat(self, request: m.HeartbeatRequest, *, address: str | None = None,
                        timeout_s: Any = UNSET) -> None:
        """Heartbeat. Raises RebalanceInProgressError (join again), UnknownMemberIdError,
        IllegalGenerationError, FencedInstanceIdError."""
        await self.group_request(request, address, timeout_s=timeout_s)

    async def leave_group(self, request: m.LeaveGroupRequest, *, address: str | None = None,
                          timeout_s: Any = UNSET) -> m.LeaveGroupResponse:
        """LeaveGroup; each member's outcome in the answer (``LeftMember.error``)."""
        return await self.group_request(request, address, timeout_s=timeout_s)  # type: ignore[return-value]

    async def offset_commit(self, request: m.OffsetCommitRequest, *, address: str | None = None,
                            timeout_s: Any = UNSET) -> None:
        """OffsetCommit, all or nothing. A simple commit (no members in the group) has
        ``generation_id`` -1 and an empty ``member_id``."""
        await self.group_request(request, address, timeout_s=timeout_s)

    async def offset_fetch(
        self, group_id: str, partitions: Sequence[TopicPartition | tuple[str, int]] = (), *,
        require_stable: bool = False, timeout_s: Any = UNSET,
    ) -> dict[TopicPartition, m.CommittedOffset]:
        """The committed offsets of ``group_id`` for ``partitions`` (default: every partition
        with one), by partition; a partition with none is absent. ``require_stable``: answer
        UnstableOffsetCommitError (retriable) while a transaction holds offsets of them."""
        request = m.OffsetFetchRequest(group_id, tuple(TopicPartition(*tp) for tp in partitions),
                                       require_stable)
        response = await self._to_coordinator(
            group_id, "OffsetFetch", request_message(request), timeout_s, retry=True)
        value = response_value(response)
        assert isinstance(value, m.OffsetFetchResponse)
        return {TopicPartition(o.topic, o.partition): o for o in value.offsets if o.offset >= 0}

    async def txn_offset_commit(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        group: m.GroupMetadata, offsets: dict[TopicPartition, int], *,
        timeout_s: Any = UNSET,
    ) -> None:
        """Commit ``offsets`` for ``group`` inside the producer's transaction (after
        ``add_offsets_to_txn``), to the group's coordinator: visible when the transaction
        commits, dropped if it aborts. The group metadata fences a zombie member (KIP-447).
        Raises UnknownMemberIdError, IllegalGenerationError, FencedInstanceIdError,
        ProducerFencedError, the coordinator errors."""
        request = broker_pb2.TxnOffsetCommitRequest(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, group_id=group.group_id,
            generation_id=group.generation_id, member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            offsets=_committed(m.CommittedOffset(tp.topic, tp.partition, offset)
                               for tp, offset in sorted(offsets.items())),
        )
        await self._to_coordinator(group.group_id, "TxnOffsetCommit", request, timeout_s,
                                   retry=True)

    # -- administration -------------------------------------------------------------------------

    async def list_groups(self, states: Iterable[str] = (), *,
                          timeout_s: Any = UNSET) -> list[ListedGroup]:
        """The groups the server this Client asks coordinates (every state, or those named:
        Kafka's names, any case), sorted by group id. In a cluster each server lists only its
        own groups: ask every broker for them all (``stratalog groups list`` does). Needs
        DESCRIBE on each group listed."""
        request = broker_pb2.ListGroupsRequest(states_filter=list(states))
        response = await self._call("ListGroups", request, self._deadline(timeout_s))
        return sorted(
            (ListedGroup(g.group_id, g.protocol_type, g.state) for g in response.groups),
            key=lambda g: g.group_id,
        )

    async def describe_groups(self, group_ids: Sequence[str], *,
                              timeout_s: Any = UNSET) -> list[GroupDescription]:
        """Each group's state, protocol and members (with their assignment while Stable), in
        the order asked; a group's own error (e.g. NOT_AUTHORIZED) is in its ``error``."""
        return [await self._describe_group(g, timeout_s) for g in _group_ids(group_ids)]

    async def _describe_group(self, group_id: str, timeout_s: Any) -> GroupDescription:
        response = await self._to_coordinator(
            group_id, "DescribeGroups", broker_pb2.DescribeGroupsRequest(group_ids=[group_id]),
            timeout_s, retry=True)
        (g,) = response.groups
        return GroupDescription(
            group_id=g.group_id, state=g.state, protocol_type=g.protocol_type,
            protocol_name=g.protocol_name,
            members=tuple(_member_description(x) for x in g.members),
            error=errors.from_error_reason(g.error, g.error_message),
        )

    async def delete_groups(self, group_ids: Sequence[str], *,
                            timeout_s: Any = UNSET) -> list[DeletedGroup]:
        """Delete empty groups and their offsets; each group's outcome in the order asked
        (``error``: NonEmptyGroupError, GroupIdNotFoundError, NotAuthorizedError, or None)."""
        results = []
        for group_id in _group_ids(group_ids):
            response = await self._to_coordinator(
                group_id, "DeleteGroups", broker_pb2.DeleteGroupsRequest(group_ids=[group_id]),
                timeout_s, retry=True)
            (g,) = response.groups
            results.append(DeletedGroup(g.group_id,
                                        errors.from_error_reason(g.error, g.error_message)))
        return results

    async def offset_delete(self, group_id: str,
                            partitions: Sequence[TopicPartition | tuple[str, int]], *,
                            timeout_s: Any = UNSET) -> None:
        """Delete ``group_id``'s committed offsets of ``partitions`` (topics it does not
        subscribe to). Raises GroupSubscribedToTopicError, GroupIdNotFoundError."""
        request = broker_pb2.OffsetDeleteRequest(group_id=group_id, partitions=[
            broker_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions])
        await self._to_coordinator(group_id, "OffsetDelete", request, timeout_s, retry=True)


def _group_ids(group_ids: Sequence[str]) -> list[str]:
    if isinstance(group_ids, str) or not isinstance(group_ids, Sequence):
        raise TypeError("group_ids must be a sequence of group id strings")
    for group_id in group_ids:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError(f"a group id must be a non-empty string, got {group_id!r}")
    return list(group_ids)


