"""The group coordinator: Kafka's classic consumer-group protocol and committed offsets, sans-IO.

A core that a gRPC front end and a Kafka wire-protocol front end both translate to (issue 27;
docs/groups.md, "The group coordinator")::

    coordinator = GroupCoordinator(GroupConfig(), loading=True)
    coordinator.replay(offset, record, producer_id, now_ms)      # per __consumer_offsets record
    out = coordinator.complete_load(now_ms)
    out = coordinator.join_group(JoinGroupRequest(...), reply_to=token, now_ms=now_ms)
    # out.appends: records to write, then append_completed / append_failed
    # out.replies: responses to send; out.next_deadline_ms: when to poll(now_ms) again

* :mod:`.group_coordinator`: one partition's coordinator: routes requests, loads, unloads.
* :mod:`.classic_group_manager`: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.
* :mod:`.offset_manager`: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, offset
  expiry. :mod:`.subscribed_topics`: the topics a consumer group's members subscribe to.
* :mod:`.coordinator_effects`: the replies, writes and timers one call produces.
* :mod:`.classic_group`: one group (members, generation, protocol, leader, state).
* :mod:`.group_member`: one member. :mod:`.group_state`: the states and their transitions.
* :mod:`.offset_store`: committed and pending transactional offsets.
* :mod:`.group_records`: the ``__consumer_offsets`` records to write (their codec: records/).
* :mod:`.group_messages`: requests, responses and effects. :mod:`.group_config`: settings.
* :mod:`.group_errors`: the error tree, with Kafka's codes and retriable flags.

No asyncio, files, grpc or proto here (an import-linter contract in pyproject.toml holds it).
"""

from __future__ import annotations

from .classic_group import ClassicGroup
from .group_config import GroupConfig
from .group_coordinator import GroupCoordinator
from .group_errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnknownServerError,
    UnstableOffsetCommitError,
)
from .group_member import GroupMember
from .group_messages import (
    Append,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchedOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinedMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    LeftMember,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Output,
    PartitionError,
    PartitionOffset,
    Reply,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
)
from .group_records import (
    GroupMetadataRecord,
    GroupMetadataTombstone,
    GroupRecord,
    MemberMetadata,
    OffsetCommitRecord,
    OffsetCommitTombstone,
)
from .group_state import GroupState
from .offset_store import CommitRow, CommittedOffset, OffsetStore

__all__ = [
    "Append",
    "ClassicGroup",
    "CommitRow",
    "CommittedOffset",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "FencedInstanceIdError",
    "FetchedOffset",
    "GroupConfig",
    "GroupCoordinator",
    "GroupError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "GroupMember",
    "GroupMetadataRecord",
    "GroupMetadataTombstone",
    "GroupRecord",
    "GroupState",
    "GroupSubscribedToTopicError",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "IllegalGenerationError",
    "InconsistentGroupProtocolError",
    "InvalidGroupIdError",
    "InvalidSessionTimeoutError",
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
    "MemberIdRequiredError",
    "MemberMetadata",
    "NonEmptyGroupError",
    "NotCoordinatorError",
    "OffsetCommitRecord",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetCommitTombstone",
    "OffsetDeleteRequest",
    "OffsetDeleteResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetMetadataTooLargeError",
    "OffsetStore",
    "Output",
    "PartitionError",
    "PartitionOffset",
    "RebalanceInProgressError",
    "Reply",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TxnOffsetCommitRequest",
    "UnknownMemberIdError",
    "UnknownServerError",
    "UnstableOffsetCommitError",
]
