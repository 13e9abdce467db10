"""The group coordinator of one ``__consumer_offsets`` partition, sans-IO: requests and the clock
in, responses and effects out.

Kafka's ``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/
GroupCoordinatorShard.java`` for classic groups: one object per partition that routes each
request to the membership protocol (:mod:`.classic_group_manager`, Kafka's GroupMetadataManager)
or the offsets (:mod:`.offset_manager`, Kafka's OffsetMetadataManager), answers every request
COORDINATOR_LOAD_IN_PROGRESS while it loads and NOT_COORDINATOR once unloaded, and is rebuilt by
replaying the partition. No asyncio, no files, no sockets: every call takes ``now_ms`` and
returns an :class:`~.group_messages.Output` the caller carries out::

    coordinator = GroupCoordinator(GroupConfig(), loading=True)
    for offset, record, producer_id in partition:          # the caller's reader and codec
        coordinator.replay(offset, record, producer_id, now_ms)
    out = coordinator.complete_load(now_ms)
    out = coordinator.join_group(JoinGroupRequest(...), reply_to=request_id, now_ms=now)
    for append in out.appends:      # write, then append_completed / append_failed
        ...
    for reply in out.replies:       # answer the requests (a JoinGroup may be answered later)
        ...
    arm one timer at out.next_deadline_ms; when it fires: out = coordinator.poll(now_ms)

**Writes.** State that must survive (a generation's assignment, commits, deletions) changes only
when the caller reports its :class:`Append` written (``append_completed``, with the offset of its
first record); a failed write (``append_failed``) answers the requests waiting on it with the
error and, for an assignment, sends the group back to rebalancing. Appends must be reported in
the order they were issued (they are one partition's writes), so tombstones and commits apply in
log order.

Crash behaviour: all state is memory; it is rebuilt by :meth:`GroupCoordinator.replay` of the
partition. A crash between a write and its report loses nothing acknowledged: requests are
answered only after it.

Concurrency: not thread-safe and never blocks; one caller (the partition's event-loop task)
makes every call in order.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Hashable

from .classic_group import ClassicGroup
from .classic_group_manager import ClassicGroupManager, heartbeat_key, join_key, sync_key
from .coordinator_effects import CoordinatorEffects
from .group_config import GroupConfig
from .group_errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupError,
    GroupIdNotFoundError,
    NonEmptyGroupError,
    NotCoordinatorError,
)
from .group_messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
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
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
)
from .group_records import (
    GroupMetadataRecord,
    GroupMetadataTombstone,
    GroupRecord,
    OffsetCommitRecord,
    OffsetCommitTombstone,
)
from .group_state import GroupState
from .offset_manager import OffsetManager
from .offset_store import CommitRow, OffsetStore

__all__ = ["GroupCoordinator"]

logger = logging.getLogger(__name__)

#: Timers fired by one poll(): a bound on the work of one call (the rest fire on the next).
_TIMERS_PER_POLL_MAX = 10_000


class GroupCoordinator:
    """The classic groups and committed offsets of one ``__consumer_offsets`` partition.

    ``member_id_suffix`` makes the unique part of new member ids (a UUID by default; tests pass
    a counter). ``loading`` starts the coordinator replaying: every request is answered
    COORDINATOR_LOAD_IN_PROGRESS until :meth:`complete_load`. ``groups`` and ``offsets`` are
    shared with the two managers; read them, do not change them.
    """

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        loading: bool = False,
        now_ms: int = 0,
        member_id_suffix: Callable[[], str] | None = None,
    ) -> None:
        self.config = config or GroupConfig()
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets = OffsetStore()
        self.loading = loading
        #: Set by :meth:`unload`: the partition moved away; requests answer NOT_COORDINATOR.
        self.closed = False
        self._effects = CoordinatorEffects(now_ms)
        self._membership = ClassicGroupManager(
            self.config, self.groups, self._effects,
            member_id_suffix or (lambda: str(uuid.uuid4())),
        )
        self._offset_manager = OffsetManager(
            self.config, self.groups, self.offsets, self._effects,
            self._membership.reschedule_heartbeat,
        )
        if not loading:
            self._offset_manager.schedule_expiry()

    # -- driving -------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> Output:
        """Fire every timer due at ``now_ms`` (session, join, sync expiry; the expiry pass)."""
        self._effects.begin(now_ms)
        for _ in range(_TIMERS_PER_POLL_MAX):
            callback = self._effects.pop_due_timer()
            if callback is None:
                break
            callback()
        return self._effects.end()

    def next_deadline_ms(self) -> int | None:
        """When the next timer is due (None: none is set)."""
        return self._effects.next_deadline_ms()

    def append_completed(self, append_id: int, first_offset: int, now_ms: int) -> Output:
        """The caller wrote append ``append_id``; its first record is at ``first_offset``."""
        self._effects.begin(now_ms)
        pending = self._effects.take_append(append_id)
        if pending is None:
            assert self.closed, f"append {append_id} was never issued"
        else:
            pending.on_written(first_offset)
        return self._effects.end()  # (after unload(): already answered)

    def append_failed(self, append_id: int, error: GroupError, now_ms: int) -> Output:
        """The caller could not write append ``append_id`` (``error`` is what to answer)."""
        self._effects.begin(now_ms)
        pending = self._effects.take_append(append_id)
        if pending is None:
            assert self.closed, f"append {append_id} was never issued"
        else:
            logger.warning("write %d to __consumer_offsets failed: %s", append_id, error)
            pending.on_failed(error)
        return self._effects.end()

    # -- loading -------------------------------------------------------------------------------

    def replay(
        self, record_offset: int, record: GroupRecord, producer_id: int = -1, now_ms: int = 0
    ) -> None:
        """Apply one record of the partition (loading), as it was written at ``record_offset``.

        Records must come in partition order; a record the caller could not decode is skipped
        by the caller (with a log line naming its offset), not passed here.
        """
        assert self.loading, "replay() rebuilds a loading coordinator; live writes apply themselves"
        # Only the clock (a group made here is stamped with it): a replay answers nothing and
        # writes nothing, so it needs no Output, and a load replays every record.
        self._effects.advance_clock(now_ms)
        if isinstance(record, OffsetCommitRecord):
            self._offset_manager.apply_commit(record_offset, record, producer_id)
        elif isinstance(record, OffsetCommitTombstone):
            self.offsets.replay_tombstone(record.group_id, record.topic, record.partition)
        elif isinstance(record, GroupMetadataRecord):
            self.groups[record.group_id] = ClassicGroup.from_record(record, self._effects.now_ms)
        elif isinstance(record, GroupMetadataTombstone):
            self.groups.pop(record.group_id, None)
        else:  # pragma: no cover - the GroupRecord union is closed
            raise AssertionError(f"not a group record: {record!r}")

    def replay_offset_commits(
        self, rows: list[CommitRow], producer_id: int = -1, now_ms: int = 0
    ) -> None:
        """Apply consecutive OffsetCommit records (commits and tombstones) of the partition,
        read as rows (records/consumer_offsets.py's ``offset_commit_rows``: ``(group_id,
        (topic, partition), CommittedOffset or None)``, the value's ``record_offset`` where it
        was written), all of ``producer_id``'s (-1: plain): the same state as :meth:`replay`
        of each as an ``OffsetCommitRecord`` or ``OffsetCommitTombstone``, in order (the last
        commit of a key wins, a tombstone deletes, a transactional commit is pending until its
        marker), without a record object per commit. A load's fast path: one call per batch.
        """
        assert self.loading, "replay() rebuilds a loading coordinator; live writes apply themselves"
        self._effects.advance_clock(now_ms)
        self._offset_manager.replay_commits(rows, producer_id)

    def replay_end_transaction(self, producer_id: int, committed: bool) -> None:
        """Apply a COMMIT or ABORT marker of ``producer_id`` (while loading and afterwards)."""
        self.offsets.replay_end_transaction(producer_id, committed)

    def complete_load(self, now_ms: int) -> Output:
        """End loading: members of loaded groups must heartbeat within their session timeout."""
        self._effects.begin(now_ms)
        self.loading = False
        for group in self.groups.values():
            for member in group.members.values():
                self._membership.reschedule_heartbeat(group, member)
        self._offset_manager.schedule_expiry()
        logger.info("loaded %d groups", len(self.groups))
        return self._effects.end()

    def unload(self, now_ms: int) -> Output:
        """The partition moved away: answer parked requests NOT_COORDINATOR, forget everything."""
        self._effects.begin(now_ms)
        error = NotCoordinatorError("this coordinator no longer owns the group's partition")
        for group in self.groups.values():
            for member in group.members.values():
                self._effects.add(group.complete_join(member, JoinGroupResponse(error,
                                                                                member.member_id)))
                self._effects.add(group.complete_sync(member, SyncGroupResponse(error)))
                self._effects.add(group.complete_heartbeat(member, HeartbeatResponse(error)))
        self._effects.fail_all_appends(error)
        self.groups.clear()
        self.offsets.clear()
        self._effects.clear_timers()
        self.closed = True
        return self._effects.end()

    # -- requests ------------------------------------------------------------------------------

    def join_group(self, request: JoinGroupRequest, reply_to: Hashable, now_ms: int) -> Output:
        """JoinGroup; the answer (a Reply to ``reply_to``) may come in a later Output."""
        assert reply_to is not None, "reply_to None cannot be told apart from no parked request"
        return self._serve(now_ms, reply_to, lambda e: JoinGroupResponse(e, request.member_id),
                           lambda: self._membership.join_group(request, reply_to))

    def sync_group(self, request: SyncGroupRequest, reply_to: Hashable, now_ms: int) -> Output:
        """SyncGroup; a follower's answer waits for the leader's assignment to be written."""
        assert reply_to is not None, "reply_to None cannot be told apart from no parked request"
        return self._serve(now_ms, reply_to, SyncGroupResponse,
                           lambda: self._membership.sync_group(request, reply_to))

    def heartbeat(self, request: HeartbeatRequest, reply_to: Hashable, now_ms: int) -> Output:
        """Heartbeat: keeps the member's session; says whether a rebalance is under way."""
        return self._serve(now_ms, reply_to, HeartbeatResponse,
                           lambda: self._membership.heartbeat(request, reply_to))

    def leave_group(self, request: LeaveGroupRequest, reply_to: Hashable, now_ms: int) -> Output:
        """LeaveGroup: remove members (by member id, or an admin's instance id alone)."""
        return self._serve(now_ms, reply_to, LeaveGroupResponse,
                           lambda: self._membership.leave_group(request, reply_to))

    def commit_offsets(
        self, request: OffsetCommitRequest, reply_to: Hashable, now_ms: int
    ) -> Output:
        """OffsetCommit: validated, written, then applied and answered."""
        return self._serve(
            now_ms, reply_to,
            lambda e: OffsetCommitResponse(tuple(
                PartitionError(p.topic, p.partition, e) for p in request.offsets
            )),
            lambda: self._offset_manager.commit_offsets(request, reply_to),
        )

    def commit_transactional_offsets(
        self, request: TxnOffsetCommitRequest, reply_to: Hashable, now_ms: int
    ) -> Output:
        """TxnOffsetCommit: written in the producer's transaction; visible after its COMMIT."""
        return self._serve(
            now_ms, reply_to,
            lambda e: OffsetCommitResponse(tuple(
                PartitionError(p.topic, p.partition, e) for p in request.offsets
            )),
            lambda: self._offset_manager.commit_transactional_offsets(request, reply_to),
        )

    def fetch_offsets(self, request: OffsetFetchRequest, reply_to: Hashable, now_ms: int) -> Output:
        """OffsetFetch: committed offsets (-1 where none); pending ones are not shown, and under
        ``require_stable`` their partitions answer UNSTABLE_OFFSET_COMMIT (KIP-447)."""
        return self._serve(now_ms, reply_to, OffsetFetchResponse,
                           lambda: self._offset_manager.fetch_offsets(request, reply_to))

    def delete_offsets(
        self, request: OffsetDeleteRequest, reply_to: Hashable, now_ms: int
    ) -> Output:
        """OffsetDelete: tombstones for the partitions named, unless the group uses one of
        their topics (GROUP_SUBSCRIBED_TO_TOPIC, nothing written)."""
        return self._serve(now_ms, reply_to, OffsetDeleteResponse,
                           lambda: self._offset_manager.delete_offsets(request, reply_to))

    def list_groups(self, request: ListGroupsRequest, reply_to: Hashable, now_ms: int) -> Output:
        """ListGroups, filtered by state names when ``states_filter`` is not empty."""
        return self._serve(now_ms, reply_to, ListGroupsResponse,
                           lambda: self._list_groups(request, reply_to))

    def describe_groups(
        self, request: DescribeGroupsRequest, reply_to: Hashable, now_ms: int
    ) -> Output:
        """DescribeGroups; members' metadata and assignments are shown while Stable only."""
        return self._serve(
            now_ms, reply_to,
            lambda e: DescribeGroupsResponse(tuple(DescribedGroup(g, e) for g in request.group_ids)),
            lambda: self._describe_groups(request, reply_to),
        )

    def delete_groups(self, request: DeleteGroupsRequest, reply_to: Hashable, now_ms: int) -> Output:
        """DeleteGroups: only groups without members; their offsets and records are tombstoned."""
        return self._serve(
            now_ms, reply_to,
            lambda e: DeleteGroupsResponse(tuple((g, e) for g in request.group_ids)),
            lambda: self._delete_groups(request, reply_to),
        )

    def _serve(
        self,
        now_ms: int,
        reply_to: Hashable,
        refusal: Callable[[GroupError], object],
        handler: Callable[[], None],
    ) -> Output:
        """Run ``handler`` unless the coordinator is loading or unloaded (then answer
        ``refusal(error)``)."""
        self._effects.begin(now_ms)
        if self.closed:
            self._effects.reply(reply_to, refusal(NotCoordinatorError(
                "this coordinator no longer owns the group's partition"
            )))
        elif self.loading:
            self._effects.reply(reply_to, refusal(CoordinatorLoadInProgressError(
                "the group coordinator is loading its partition"
            )))
        else:
            handler()
        return self._effects.end()

    # -- ListGroups, DescribeGroups, DeleteGroups ----------------------------------------------

    def _list_groups(self, request: ListGroupsRequest, reply_to: Hashable) -> None:
        wanted = {state.lower() for state in request.states_filter}
        self._effects.reply(reply_to, ListGroupsResponse(None, tuple(
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not wanted or g.state.value.lower() in wanted
        )))

    def _describe_groups(self, request: DescribeGroupsRequest, reply_to: Hashable) -> None:
        described: list[DescribedGroup] = []
        for group_id in request.group_ids:
            error = self.config.group_id_error(group_id)
            group = self.groups.get(group_id)
            if error is None and group is None:
                error = GroupIdNotFoundError(f"group {group_id} does not exist")
            if error is not None:
                described.append(DescribedGroup(group_id, error))
                continue
            assert group is not None
            stable = group.is_in(GroupState.STABLE)
            described.append(DescribedGroup(
                group_id=group_id,
                error=None,
                state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_name=(group.protocol_name or "") if stable else "",
                members=tuple(
                    DescribedMember(
                        m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        m.metadata(group.protocol_name) if stable else b"",
                        m.assignment if stable else b"",
                    )
                    for m in group.members.values()
                ),
            ))
        self._effects.reply(reply_to, DescribeGroupsResponse(tuple(described)))

    def _delete_groups(self, request: DeleteGroupsRequest, reply_to: Hashable) -> None:
        results: dict[str, GroupError | None] = {}
        records: list[GroupRecord] = []
        for group_id in request.group_ids:
            error = self.config.group_id_error(group_id)
            group = self.groups.get(group_id)
            if error is None and (group is None or group.is_in(GroupState.DEAD)):
                error = GroupIdNotFoundError(f"group {group_id} does not exist")
            if error is None and group.members:
                error = NonEmptyGroupError(
                    f"group {group_id} has {len(group.members)} members ({group.state.value})"
                )
            results[group_id] = error
            if error is None:
                records.extend(
                    OffsetCommitTombstone(group_id, topic, partition)
                    for topic, partition in sorted(self.offsets.delete_group(group_id))
                )
                records.append(GroupMetadataTombstone(group_id))
        deleting = [g for g, e in results.items() if e is None]

        def answer() -> None:
            self._effects.reply(reply_to, DeleteGroupsResponse(tuple(
                (g, results[g]) for g in request.group_ids
            )))

        if not deleting:
            answer()
            return

        def written(_first_offset: int) -> None:
            for record in records:
                if isinstance(record, OffsetCommitTombstone):
                    self.offsets.replay_tombstone(record.group_id, record.topic, record.partition)
            for group_id in deleting:
                group = self.groups.pop(group_id, None)
                if group is not None:
                    self._effects.cancel(join_key(group))
                    self._effects.cancel(sync_key(group))
                    for member_id in list(group.members):  # joined while the write was on
                        self._membership.drop_member(group, member_id, CoordinatorNotAvailableError(
                            f"group {group_id} was deleted"
                        ))
                    group.transition_to(GroupState.DEAD, self._effects.now_ms)
            logger.info("deleted groups %s", deleting)
            answer()

        def failed(error: GroupError) -> None:
            for group_id in deleting:
                results[group_id] = error
            answer()

        self._effects.append(tuple(records), written, failed)

    # -- invariants ----------------------------------------------------------------------------

    def check(self) -> None:
        """Assert every group's and the offset store's invariants (for tests)."""
        for group_id, group in self.groups.items():
            assert group.group_id == group_id
            assert not group.is_in(GroupState.DEAD), group_id
            group.check()
            for member in group.members.values():
                # A member parked in JoinGroup/SyncGroup may have outlived its timer (it waits
                # on the group, not the other way round); the rebalance restarts it.
                assert self.loading or self._effects.has_timer(
                    heartbeat_key(group, member.member_id)
                ) or member.is_awaiting_join or member.is_awaiting_sync, member.member_id
        self.offsets.check()
