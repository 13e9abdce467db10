"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete and the expiry
pass.

Kafka's ``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/
OffsetMetadataManager.java``, over the classic groups. OffsetCommit is validated against the
group (:meth:`ClassicGroup.validate_offset_commit`), written, and applied when the caller reports
the write; the table is exactly what replaying the partition yields (:mod:`.offset_store`).
TxnOffsetCommit's offsets stay pending until the transaction's COMMIT or ABORT marker on the
partition. OffsetDelete writes tombstones for the partitions named, unless the group's members
subscribe to one of their topics (then nothing is written). Every
``offsets_retention_check_interval_ms`` the expiry pass writes tombstones for
offsets past retention (an Empty group's counted from when it became Empty, a simple group's
from their commit, a commit's own retention if it set one) and deletes an Empty group whose
offsets are all gone.

Crash behaviour: memory only; rebuilt by replaying the partition. Concurrency: not thread-safe;
the coordinator serialises every call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from .classic_group import ClassicGroup
from .coordinator_effects import CoordinatorEffects
from .group_config import GroupConfig
from .group_errors import (
    GroupError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    UnstableOffsetCommitError,
)
from .group_member import GroupMember
from .group_messages import (
    FetchedOffset,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionError,
    PartitionOffset,
    TxnOffsetCommitRequest,
)
from .group_records import (
    GroupMetadataTombstone,
    GroupRecord,
    OffsetCommitRecord,
    OffsetCommitTombstone,
)
from .group_state import GroupState
from .offset_store import CommitRow, OffsetStore
from .subscribed_topics import CONSUMER_PROTOCOL_TYPE, is_subscribed_to_topic

__all__ = ["OffsetManager"]

logger = logging.getLogger(__name__)

EXPIRY_TIMER = ("expire-offsets",)


class OffsetManager:
    """Offsets of ``groups`` (shared with the membership protocol and the coordinator).

    ``reschedule_heartbeat`` restarts a member's session (a commit keeps it, as in Kafka).
    """

    def __init__(
        self,
        config: GroupConfig,
        groups: dict[str, ClassicGroup],
        offsets: OffsetStore,
        effects: CoordinatorEffects,
        reschedule_heartbeat: Callable[[ClassicGroup, GroupMember], None],
    ) -> None:
        self._config = config
        self._groups = groups
        self._offsets = offsets
        self._effects = effects
        self._reschedule_heartbeat = reschedule_heartbeat

    def schedule_expiry(self) -> None:
        """Run :meth:`expire_offsets` one check interval from now."""
        self._effects.schedule(EXPIRY_TIMER, self._config.offsets_retention_check_interval_ms,
                               self.expire_offsets)

    def commit_offsets(self, request: OffsetCommitRequest, reply_to: Hashable) -> None:
        """OffsetCommit: validated, written, then applied and answered (``append_completed``)."""
        error = self._config.group_id_error(request.group_id)
        group = self._groups.get(request.group_id)
        if error is None and group is None and request.generation_id >= 0:
            error = GroupIdNotFoundError(f"group {request.group_id} does not exist")
        if error is None:
            if group is None:
                # A simple group: offsets stored for a consumer without group management.
                group = self._groups[request.group_id] = ClassicGroup(request.group_id, self._effects.now_ms)
            try:
                group.validate_offset_commit(request.member_id, request.group_instance_id,
                                             request.generation_id, transactional=False)
            except GroupError as validation_error:
                error = validation_error
        if error is not None:
            self._effects.reply(reply_to, _commit_errors(request.offsets, error))
            return
        assert group is not None
        member = group.members.get(request.member_id)
        if member is not None and group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            self._reschedule_heartbeat(group, member)  # a commit keeps the session, as Kafka's
        expire_ms = -1 if request.retention_ms < 0 else self._effects.now_ms + request.retention_ms
        self._commit(request.group_id, request.offsets, reply_to, -1, -1, expire_ms)

    def commit_transactional_offsets(
        self, request: TxnOffsetCommitRequest, reply_to: Hashable
    ) -> None:
        """TxnOffsetCommit: written in the producer's transaction; visible after its COMMIT."""
        assert request.producer_id >= 0, "a transactional commit needs the producer's id"
        error = self._config.group_id_error(request.group_id)
        group = self._groups.get(request.group_id)
        if error is None and group is None and request.generation_id >= 0:
            error = IllegalGenerationError(f"group {request.group_id} does not exist")
        if error is None:
            if group is None:
                group = self._groups[request.group_id] = ClassicGroup(request.group_id, self._effects.now_ms)
            try:
                # The generation and member id fence a zombie producer of an old member (KIP-447).
                group.validate_offset_commit(request.member_id, request.group_instance_id,
                                             request.generation_id, transactional=True)
            except GroupError as validation_error:
                error = validation_error
        if error is not None:
            self._effects.reply(reply_to, _commit_errors(request.offsets, error))
            return
        self._commit(request.group_id, request.offsets, reply_to, request.producer_id,
                     request.producer_epoch, -1)

    def _commit(
        self, group_id: str, offsets: tuple[PartitionOffset, ...], reply_to: Hashable,
        producer_id: int, producer_epoch: int, expire_ms: int,
    ) -> None:
        results: list[PartitionError] = []
        records: list[OffsetCommitRecord] = []
        for p in offsets:
            if len(p.metadata.encode()) > self._config.offset_metadata_max_bytes:
                results.append(PartitionError(p.topic, p.partition, OffsetMetadataTooLargeError(
                    f"metadata of {p.topic}-{p.partition} is over "
                    f"{self._config.offset_metadata_max_bytes} bytes"
                )))
                continue
            results.append(PartitionError(p.topic, p.partition, None))
            records.append(OffsetCommitRecord(
                group_id, p.topic, p.partition, p.offset, p.leader_epoch, p.metadata,
                self._effects.now_ms, expire_ms,
            ))
        if not records:
            self._effects.reply(reply_to, OffsetCommitResponse(tuple(results)))
            return

        def written(first_offset: int) -> None:
            for i, record in enumerate(records):
                self.apply_commit(first_offset + i, record, producer_id)
            self._effects.reply(reply_to, OffsetCommitResponse(tuple(results)))

        def failed(error: GroupError) -> None:
            self._effects.reply(reply_to, OffsetCommitResponse(tuple(
                r if r.error is not None else PartitionError(r.topic, r.partition, error)
                for r in results
            )))

        self._effects.append(tuple(records), written, failed, producer_id, producer_epoch)

    def apply_commit(
        self, record_offset: int, record: OffsetCommitRecord, producer_id: int
    ) -> None:
        if record.group_id not in self._groups:
            # Offsets without a group record: a simple group (or one deleted meanwhile).
            self._groups[record.group_id] = ClassicGroup(record.group_id, self._effects.now_ms)
        self._offsets.replay_commit(record_offset, producer_id, record)

    def replay_commits(self, rows: list[CommitRow], producer_id: int) -> None:
        """:meth:`apply_commit` for consecutive OffsetCommit records of a load, read as rows
        (:meth:`OffsetStore.replay_commits`)."""
        for group_id in self._offsets.replay_commits(rows, producer_id):
            if group_id not in self._groups:
                self._groups[group_id] = ClassicGroup(group_id, self._effects.now_ms)

    def fetch_offsets(self, request: OffsetFetchRequest, reply_to: Hashable) -> None:
        """OffsetFetch: committed offsets (-1 where none); pending ones are not shown, and under
        ``require_stable`` their partitions answer UNSTABLE_OFFSET_COMMIT (KIP-447)."""
        error = self._config.group_id_error(request.group_id)
        if error is not None:
            self._effects.reply(reply_to, OffsetFetchResponse(error))
            return
        group_id = request.group_id
        committed = self._offsets.group_offsets(group_id)
        wanted = sorted(committed) if request.partitions is None else list(request.partitions)
        fetched: list[FetchedOffset] = []
        for topic, partition in wanted:
            if request.require_stable and self._offsets.has_pending(group_id, topic, partition):
                fetched.append(FetchedOffset(topic, partition, error=UnstableOffsetCommitError(
                    f"a transaction holds an offset of {topic}-{partition} for group {group_id}"
                )))
                continue
            value = committed.get((topic, partition))
            if value is None:
                fetched.append(FetchedOffset(topic, partition))
            else:
                fetched.append(FetchedOffset(topic, partition, value.offset, value.leader_epoch,
                                             value.metadata))
        self._effects.reply(reply_to, OffsetFetchResponse(None, tuple(fetched)))

    def delete_offsets(self, request: OffsetDeleteRequest, reply_to: Hashable) -> None:
        """OffsetDelete, as Kafka's ``OffsetMetadataManager.deleteOffsets``: tombstones for the
        partitions named that have an offset (committed or pending), applied once written.

        Refused, nothing written: GROUP_ID_NOT_FOUND for no group; NON_EMPTY_GROUP for a group
        with members whose protocol type is not ``"consumer"`` (their topics cannot be read:
        ``ClassicGroup.validateOffsetDelete``); GROUP_SUBSCRIBED_TO_TOPIC, per partition, for a
        topic the members subscribe to (subscribed_topics.py), and then no partition is deleted
        (Kafka deletes the others: docs/groups.md, "Differences"). A partition without an
        offset is answered without an error and writes nothing.
        """
        group_id = request.group_id
        error = self._config.group_id_error(group_id)
        group = self._groups.get(group_id)
        if error is None and (group is None or group.is_in(GroupState.DEAD)):
            error = GroupIdNotFoundError(f"group {group_id} does not exist")
        if error is None and group is not None and group.members \
                and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            error = NonEmptyGroupError(
                f"group {group_id} has {len(group.members)} members of protocol type"
                f" {group.protocol_type!r}, not {CONSUMER_PROTOCOL_TYPE!r}: their topics are"
                " unknown, so no offset of it is deleted while it has members")
        if error is not None:
            self._effects.reply(reply_to, OffsetDeleteResponse(error))
            return
        assert group is not None
        partitions = tuple(dict.fromkeys(request.partitions))
        results: list[PartitionError] = []
        records: list[GroupRecord] = []
        refused = False
        for topic, partition in partitions:
            if is_subscribed_to_topic(group, topic):
                refused = True
                results.append(PartitionError(topic, partition, GroupSubscribedToTopicError(
                    f"group {group_id} is subscribed to topic {topic}: its offset of"
                    f" {topic}-{partition} is in use")))
                continue
            results.append(PartitionError(topic, partition, None))
            if self._offsets.get(group_id, topic, partition) is not None \
                    or self._offsets.has_pending(group_id, topic, partition):
                records.append(OffsetCommitTombstone(group_id, topic, partition))
        if refused or not records:
            self._effects.reply(reply_to, OffsetDeleteResponse(None, tuple(results)))
            return

        def written(_first_offset: int) -> None:
            for record in records:
                assert isinstance(record, OffsetCommitTombstone)
                self._offsets.replay_tombstone(record.group_id, record.topic, record.partition)
            logger.info("group %s: deleted the offsets of %d partitions", group_id, len(records))
            self._effects.reply(reply_to, OffsetDeleteResponse(None, tuple(results)))

        def failed(write_error: GroupError) -> None:
            self._effects.reply(reply_to, OffsetDeleteResponse(write_error))

        self._effects.append(tuple(records), written, failed)

    def expire_offsets(self) -> None:
        """The periodic expiry pass: tombstones for expired offsets, then for emptied groups."""
        self.schedule_expiry()
        records: list[GroupRecord] = []
        deleted_groups: list[str] = []
        for group_id, group in self._groups.items():
            if group.protocol_type is not None and not group.is_in(GroupState.EMPTY):
                continue  # a group with members keeps its offsets (see docs/groups.md)
            all_expired = True
            for (topic, partition), value in self._offsets.group_offsets(group_id).items():
                if value.expire_timestamp_ms >= 0:
                    expired = self._effects.now_ms >= value.expire_timestamp_ms
                else:
                    base_ms = group.state_timestamp_ms if group.protocol_type is not None \
                        else value.commit_timestamp_ms
                    expired = self._effects.now_ms - base_ms >= self._config.offsets_retention_ms
                if expired and not self._offsets.has_pending(group_id, topic, partition):
                    records.append(OffsetCommitTombstone(group_id, topic, partition))
                else:
                    all_expired = False
            if all_expired and not self._offsets.has_open_transactions(group_id) and \
                    group.is_in(GroupState.EMPTY) and not group.members and \
                    not group.pending_join_members:
                records.append(GroupMetadataTombstone(group_id))
                deleted_groups.append(group_id)
        if not records:
            return
        logger.info("expiring %d offsets, deleting groups %s",
                    len(records) - len(deleted_groups), deleted_groups)

        def written(_first_offset: int) -> None:
            for record in records:
                if isinstance(record, OffsetCommitTombstone):
                    self._offsets.replay_tombstone(record.group_id, record.topic, record.partition)
            for group_id in deleted_groups:
                group = self._groups.get(group_id)
                # Only if nothing came back meanwhile (a member, a commit).
                if group is not None and group.is_in(GroupState.EMPTY) and not group.members \
                        and not group.pending_join_members \
                        and not self._offsets.group_offsets(group_id) \
                        and not self._offsets.has_open_transactions(group_id):
                    group.transition_to(GroupState.DEAD, self._effects.now_ms)
                    del self._groups[group_id]

        self._effects.append(tuple(records), written, lambda _: None)


def _commit_errors(offsets: tuple[PartitionOffset, ...], error: GroupError) -> OffsetCommitResponse:
    return OffsetCommitResponse(tuple(PartitionError(p.topic, p.partition, error) for p in offsets))
