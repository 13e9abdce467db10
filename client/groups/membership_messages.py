"""What the group member asks its driver to do, and what the driver reports back: plain values.

The group member (:mod:`.group_membership`) does no I/O. Each of its calls returns an
:class:`Output` whose ``actions`` the driver (the Consumer, or the sync client's consumer)
carries out **in order**:

* :class:`Send`: send ``request`` (one of the ``*Request`` dataclasses below, field for field
  the message of the same name in ``proto/stratalog/v1/broker.proto``) to ``address`` (``None``:
  any server, for FindCoordinator), then report ``on_response(request_id, response, now_ms)``
  with the ``*Response`` dataclass, or ``on_error(request_id, error, now_ms)`` with the
  :class:`~stratalog.client.errors.StratalogError` the call failed with
  (``errors.from_rpc_error``; a lost connection or a deadline is one too). Every Send is
  reported exactly once.
* :class:`PartitionsRevoked`, :class:`PartitionsLost`, :class:`PartitionsAssigned`: call the
  application's rebalance callback (Kafka's ConsumerRebalanceListener) and stop or start
  fetching those partitions. A commit the callback makes goes through the member (its Sends
  are carried out before the next action of this Output).
* :class:`StartPositions`: where each newly assigned partition starts: its committed offset,
  or ``auto_offset_reset`` ("earliest"/"latest": the driver looks the offset up with
  ListOffsets, then calls ``seek``).
* :class:`NeedPartitionCounts`: the member leads a rebalance and lacks the partition counts
  of these topics: the driver asks the server (Metadata/DescribeTopic) and calls
  ``partition_counts`` (0 for a topic that does not exist).
* :class:`CommitDone`: a commit asked for with ``commit(..., token=...)`` ended; ``error`` is
  ``None`` or the exception the Consumer raises (``CommitFailedError`` for a stale generation).
* :class:`Failed`: the member cannot go on (FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, ...,
  ``NoOffsetForPartitionError``); the Consumer raises ``error`` at the reader's next poll.
* :class:`Closed`: ``close`` finished (committed, revoked, left): the driver may stop.

``Output.next_deadline_ms``: call ``tick(now_ms)`` at that time at the latest (``None``: no
timer is due; any event may arm one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stratalog.client.errors import StratalogError
from stratalog.client.types import TopicPartition

from .assignor import JoinedMember

__all__ = [
    "COORDINATOR_TYPE_GROUP",
    "Action",
    "Closed",
    "CommitDone",
    "CommittedOffset",
    "Coordinator",
    "Failed",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "GroupMetadata",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "JoinedMember",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "LeavingMember",
    "LeftMember",
    "NeedPartitionCounts",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "Output",
    "PartitionsAssigned",
    "PartitionsLost",
    "PartitionsRevoked",
    "Send",
    "StartPositions",
    "SyncGroupRequest",
    "SyncGroupResponse",
]

#: broker.proto's CoordinatorType COORDINATOR_TYPE_GROUP.
COORDINATOR_TYPE_GROUP = 0


# -- Requests and responses: broker.proto's messages of the same names -------------------------


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    key: str
    key_type: int = COORDINATOR_TYPE_GROUP


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    node_id: int
    address: str
    partition: int = -1


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    """``protocols``: (assignor name, ConsumerProtocolSubscription bytes), most preferred first."""

    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    """``members`` (the leader's only) are :class:`~.assignor.JoinedMember`, broker.proto's
    JoinGroupMember."""

    generation_id: int
    protocol_type: str
    protocol_name: str
    leader_id: str
    member_id: str
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    """``assignments``: (member id, ConsumerProtocolAssignment bytes); the leader's only."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocol_name: str
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    protocol_type: str
    protocol_name: str
    assignment: bytes


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """``max_wait_ms`` > 0: a held heartbeat, answered when the group rebalances or the wait
    ends (docs/groups.md "Held heartbeats"); its deadline is max_wait_ms + the request timeout."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    max_wait_ms: int = 0


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    pass


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None = None
    error: StratalogError | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    members: tuple[LeftMember, ...] = ()


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """An offset to commit, or a committed one (offset -1 in an answer: none committed)."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    offsets: tuple[CommittedOffset, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    pass


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[TopicPartition, ...]
    require_stable: bool = False


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    offsets: tuple[CommittedOffset, ...]


# -- Actions -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Coordinator:
    """Where the group's coordinator is (FindCoordinator's answer)."""

    node_id: int
    address: str


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``request`` to ``address`` (``None``: any server), then report by ``request_id``."""

    request_id: int
    request: object
    address: str | None


@dataclass(frozen=True, slots=True)
class PartitionsRevoked:
    """Call the revoked callback, then stop fetching these (their offsets were committed first
    when auto-commit is on)."""

    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class PartitionsLost:
    """Call the lost callback and stop fetching these: another member may own them already, so
    nothing was committed for them."""

    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class PartitionsAssigned:
    """Call the assigned callback (``added``: the partitions new to this member; ``assignment``:
    all it owns now). Fetching them waits for their :class:`StartPositions`."""

    added: frozenset[TopicPartition]
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class StartPositions:
    """``committed``: start these at their committed offset (and leader epoch). ``reset``: none
    committed; look up "earliest" or "latest" (``auto_offset_reset``) and ``seek`` there.
    ``error``: a NoOffsetForPartitionError for the partitions whose policy is "none", to raise
    at the reader's polls until it seeks them (Kafka's NoOffsetForPartitionException)."""

    committed: dict[TopicPartition, tuple[int, int]]
    reset: dict[TopicPartition, str]
    error: StratalogError | None = None


@dataclass(frozen=True, slots=True)
class NeedPartitionCounts:
    """The leader needs the partition counts of ``topics``: call ``partition_counts``."""

    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class CommitDone:
    """The commit asked for with ``token`` ended: ``error`` is None, or what to raise."""

    token: object
    offsets: dict[TopicPartition, int]
    error: StratalogError | None


@dataclass(frozen=True, slots=True)
class Failed:
    """The member stopped for good; the Consumer raises ``error`` to the reader."""

    error: StratalogError


@dataclass(frozen=True, slots=True)
class Closed:
    """``close`` is done."""


Action = (
    Send | PartitionsRevoked | PartitionsLost | PartitionsAssigned | StartPositions
    | NeedPartitionCounts | CommitDone | Failed | Closed
)


@dataclass(slots=True)
class Output:
    """The actions of one call, to be carried out in order, and when to call ``tick`` next."""

    actions: list[Action] = field(default_factory=list)
    next_deadline_ms: int | None = None

    def sends(self) -> list[Send]:
        """The Sends among the actions, in order."""
        return [a for a in self.actions if isinstance(a, Send)]


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """The consumer's group metadata for ``Producer.send_offsets_to_transaction`` (Kafka's
    ConsumerGroupMetadata): the TxnOffsetCommit carries it so that the coordinator fences a
    zombie of a past generation (KIP-447)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
