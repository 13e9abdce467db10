"""What the group coordinator asks its caller to write to ``__consumer_offsets``: record values.

These are descriptions, not bytes: one frozen dataclass per record kind of Kafka's
``__consumer_offsets``, field for field the key and value schemas Kafka writes
(``group-coordinator/src/main/resources/common/message/OffsetCommitKey.json``,
``OffsetCommitValue.json``, ``GroupMetadataKey.json``, ``GroupMetadataValue.json``). The byte
codec (key version 1 / value version 3 or 4 for offsets, key version 2 / value version 4 for
group metadata) lives in ``records/`` and encodes exactly these fields; a tombstone is the key
with a null value. The coordinator consumes the same dataclasses when it is rebuilt by replay
(:meth:`GroupCoordinator.replay`), so "what is written" and "what is loaded" are one type.

    OffsetCommitRecord       key (group, topic, partition); value (offset, leaderEpoch,
                             metadata, commitTimestamp, expireTimestamp: version 1 only)
    OffsetCommitTombstone    key (group, topic, partition); null value: offset deleted/expired
    GroupMetadataRecord      key (group); value (protocolType, generation, protocol, leader,
                             currentStateTimestamp, members[MemberMetadata])
    GroupMetadataTombstone   key (group); null value: group deleted

Invariant: a tombstone's key equals the key of the record it deletes, so compaction of the
partition keeps only the newest value (or nothing) per key.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GroupMetadataRecord",
    "GroupMetadataTombstone",
    "GroupRecord",
    "MemberMetadata",
    "OffsetCommitRecord",
    "OffsetCommitTombstone",
]


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    """A committed offset (Kafka's OffsetCommitKey + OffsetCommitValue).

    ``leader_epoch`` is -1 when unknown; ``expire_timestamp_ms`` is -1 unless the commit asked
    for its own retention (OffsetCommit v2-v4's retention_time; written only at value version 1).
    """

    group_id: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitTombstone:
    """The deletion of one committed offset (OffsetCommitKey, null value)."""

    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member as GroupMetadataValue's MemberMetadata stores it.

    ``subscription`` is the member's metadata for the group's chosen protocol (for consumers, the
    ConsumerProtocolSubscription bytes); ``assignment`` its assignment bytes from the leader.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """A group's generation and members (GroupMetadataKey + GroupMetadataValue).

    Written when a generation's assignment is stored (the leader's SyncGroup), when a rebalance
    leaves the group Empty, and when a static member is replaced in a Stable group.
    ``protocol`` and ``leader`` are None for an Empty group; ``current_state_timestamp_ms`` is
    when the group entered its state (the offset expiry of an Empty group counts from it).
    """

    group_id: str
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupMetadataTombstone:
    """The deletion of a group (GroupMetadataKey, null value)."""

    group_id: str


#: Every record the coordinator writes or replays.
GroupRecord = OffsetCommitRecord | OffsetCommitTombstone | GroupMetadataRecord | GroupMetadataTombstone
