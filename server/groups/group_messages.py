"""The group coordinator's requests, responses and effects: plain dataclasses in and out.

Field for field a subset of Kafka's JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
TxnOffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and OffsetDelete messages
(``clients/src/main/resources/common/message/*Request.json`` / ``*Response.json``), flattened
where Kafka nests by topic. A front end (gRPC, or a Kafka wire-protocol listener) translates its
messages to these and back; nothing here knows of protobuf or bytes on a socket.

Errors are carried, not raised: a response's ``error`` (or a partition's) is a
:class:`~.group_errors.GroupError` instance or None.

Effects (what the caller performs after each call, in this order):

* :class:`Append`: write ``records`` to the group's ``__consumer_offsets`` partition (as a
  transactional batch of ``producer_id``/``producer_epoch`` when ``producer_id >= 0``), then
  report ``append_completed(append_id, ...)`` or ``append_failed(append_id, ...)``.
* :class:`Reply`: answer the request that was submitted with ``reply_to``. JoinGroup and
  SyncGroup may be answered much later (a parked join completes when the rebalance does).
* ``Output.next_deadline_ms``: when to call ``poll(now_ms)`` next (the one timer the caller
  keeps; None means no timer is due).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from .group_errors import GroupError
from .group_records import GroupRecord

__all__ = [
    "Append",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "FetchedOffset",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "JoinedMember",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "LeavingMember",
    "LeftMember",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListedGroup",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetDeleteRequest",
    "OffsetDeleteResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "Output",
    "PartitionError",
    "PartitionOffset",
    "Reply",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TxnOffsetCommitRequest",
]

#: Kafka's UNKNOWN_MEMBER_ID: the empty member id of a first join or a simple commit.
UNKNOWN_MEMBER_ID = ""
#: Kafka's "no generation": a simple (standalone) commit, or a member before its first join.
NO_GENERATION = -1


# -- JoinGroup ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    """JoinGroup: ``protocols`` is the member's (name, metadata) list, most preferred first.

    ``require_known_member_id`` is KIP-394 (JoinGroup v4+): a dynamic member's first join is
    answered MEMBER_ID_REQUIRED with its new id. Every front end of ours sets it.
    """

    group_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """A member as the leader sees it in its JoinGroup response: the metadata to assign from."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    """JoinGroup's answer; ``members`` is filled for the leader only."""

    error: GroupError | None
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


# -- SyncGroup ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    """SyncGroup; the leader sends ``assignments`` (member id -> assignment bytes)."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    """SyncGroup's answer: this member's assignment of the generation."""

    error: GroupError | None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# -- Heartbeat, LeaveGroup ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A Heartbeat. ``max_wait_ms`` > 0 makes it a *held* heartbeat: the coordinator may hold
    the answer up to ``min(max_wait_ms, session timeout / 2)``, answering at once when the group
    starts a rebalance, the member is removed or fenced, or the coordinator unloads
    (docs/groups.md "Held heartbeats"); 0 is Kafka's Heartbeat, answered at once."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None
    max_wait_ms: int = 0


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: GroupError | None


@dataclass(frozen=True, slots=True)
class LeavingMember:
    """One member to remove; an admin removes a static member by instance id alone."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: GroupError | None


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error: GroupError | None
    members: tuple[LeftMember, ...] = ()


# -- Offsets -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    """One partition's offset to commit (the offset of the next record to consume)."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class PartitionError:
    topic: str
    partition: int
    error: GroupError | None


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """OffsetCommit. An empty ``member_id`` with generation -1 is a simple (standalone) commit.

    ``retention_ms`` is OffsetCommit v2-v4's retention_time (-1: the configured retention).
    """

    group_id: str
    offsets: tuple[PartitionOffset, ...]
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    group_instance_id: str | None = None
    retention_ms: int = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    """OffsetCommit's and TxnOffsetCommit's answer: one error (or None) per partition."""

    partitions: tuple[PartitionError, ...]


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """TxnOffsetCommit: offsets held by the producer's open transaction until its marker."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    offsets: tuple[PartitionOffset, ...]
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    """OffsetFetch; ``partitions`` None fetches every committed partition of the group."""

    group_id: str
    partitions: tuple[tuple[str, int], ...] | None = None
    require_stable: bool = False


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    """A committed offset, or offset -1 with metadata "" when the partition has none."""

    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: GroupError | None = None


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error: GroupError | None
    partitions: tuple[FetchedOffset, ...] = ()


# -- ListGroups, DescribeGroups, DeleteGroups --------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    """ListGroups; ``states_filter`` holds state names (Kafka's, any case); empty means all."""

    states_filter: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error: GroupError | None
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    """A member; ``metadata`` and ``assignment`` are filled only while the group is Stable."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes = b""
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: GroupError | None
    state: str = "Dead"
    protocol_type: str = ""
    protocol_name: str = ""
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    """One (group id, error or None) per requested group, in request order."""

    results: tuple[tuple[str, GroupError | None], ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    """OffsetDelete: the group's committed offsets of these (topic, partition)s."""

    group_id: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    """OffsetDelete's answer: an error of the whole request (the group), else one error (or
    None: deleted, or it had no offset) per requested partition, in request order."""

    error: GroupError | None
    partitions: tuple[PartitionError, ...] = ()


# -- Effects -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer the request submitted with ``reply_to`` (the caller's own token) with ``response``."""

    reply_to: Hashable
    response: object


@dataclass(frozen=True, slots=True)
class Append:
    """Write ``records`` to the group's ``__consumer_offsets`` partition, then report back.

    ``producer_id``/``producer_epoch`` are -1 for a plain write; set, the records belong to that
    producer's open transaction (TxnOffsetCommit) and the caller writes them in its batch.
    """

    append_id: int
    records: tuple[GroupRecord, ...]
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(slots=True)
class Output:
    """What one call to the coordinator asks of its caller (module docstring: the order)."""

    appends: list[Append] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    next_deadline_ms: int | None = None

    def reply_to(self, token: Hashable) -> object | None:
        """The response for ``token`` in this output, or None (a parked request)."""
        for reply in self.replies:
            if reply.reply_to == token:
                return reply.response
        return None
