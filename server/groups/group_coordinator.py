"""The classic group protocol, sans-IO: requests and the clock in, responses and effects out.

Kafka's ``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/
GroupMetadataManager.java`` (its classicGroupJoin, classicGroupSync, classicGroupHeartbeat,
classicGroupLeave and their timers) and ``OffsetMetadataManager.java`` (commit validation,
transactional offsets, OffsetFetch, expiry), for the groups of one ``__consumer_offsets``
partition. No asyncio, no files, no sockets: every call takes ``now_ms`` and returns an
:class:`~.group_messages.Output` the caller carries out::

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

**The protocol.** A member joins (JoinGroup); a dynamic member's first join is answered
MEMBER_ID_REQUIRED with its id (KIP-394) and it joins again with it. A join starts a rebalance
(Empty/Stable/CompletingRebalance -> PreparingRebalance) and is parked until every known member
has rejoined or the rebalance timeout (the largest of the members') passes; members that did not
rejoin are removed (static members are kept). The first rebalance of an Empty group waits
``initial_rebalance_delay_ms`` more, extended while members keep arriving, up to the rebalance
timeout. The join then completes: the generation increments, the protocol is chosen by vote,
every parked join is answered (the leader's with every member's metadata) and the group waits in
CompletingRebalance for the leader's SyncGroup with the assignment; followers' SyncGroups are
parked. The leader's assignment is written (a GroupMetadataRecord), then every member's parked
SyncGroup is answered with its own assignment and the group is Stable. Members that sent no
SyncGroup within the rebalance timeout are removed and the group rebalances again. A member whose
heartbeat (or commit) does not arrive within its session timeout is removed and the group
rebalances; heartbeats answer REBALANCE_IN_PROGRESS while one is under way. A static member
(``group_instance_id``) that rejoins with an unknown member id replaces its old id without a
rebalance when the group is Stable and its protocols still select the same protocol (the old id
is FENCED_INSTANCE_ID from then on).

**Offsets.** OffsetCommit is validated against the group (:meth:`ClassicGroup.
validate_offset_commit`), written, and applied when the caller reports the write; the table is
exactly what replaying the partition yields (:mod:`.offset_store`). TxnOffsetCommit's offsets
stay pending until :meth:`GroupCoordinator.replay_end_transaction` (the COMMIT or ABORT marker on
the partition). Every ``offsets_retention_check_interval_ms`` the expiry pass writes tombstones
for offsets past retention (an Empty group's counted from when it became Empty, a simple
group's from their commit) and deletes an Empty group whose offsets are all gone.

**Writes.** State that must survive (a generation's assignment, commits, deletions) changes only
when the caller reports its :class:`Append` written (``append_completed``, with the offset of its
first record); a failed write (``append_failed``) answers the requests waiting on it with the
error and, for an assignment, sends the group back to rebalancing. Appends must be reported in
the order they were issued (they are one partition's writes), so tombstones and commits apply in
log order.

Crash behaviour: all state is memory; it is rebuilt by :meth:`replay` of the partition. A crash
between a write and its report loses nothing acknowledged: requests are answered only after it.

Concurrency: not thread-safe and never blocks; one caller (the partition's event loop task)
makes every call in order.
"""

from __future__ import annotations

import heapq
import logging
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from .classic_group import ClassicGroup
from .group_config import GroupConfig
from .group_errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
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
    UnstableOffsetCommitError,
)
from .group_member import GroupMember
from .group_messages import (
    UNKNOWN_MEMBER_ID,
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
    LeftMember,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
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
    OffsetCommitRecord,
    OffsetCommitTombstone,
)
from .group_state import GroupState
from .offset_store import OffsetStore

__all__ = ["GroupCoordinator"]

logger = logging.getLogger(__name__)

_EXPIRY_TIMER = ("expire-offsets",)
#: Timers fired by one poll(): a bound on the work of one call (the rest fire on the next).
_TIMERS_PER_POLL_MAX = 10_000


@dataclass(slots=True)
class _PendingAppend:
    """A write the caller is carrying out, and what to do when it reports back."""

    records: tuple[GroupRecord, ...]
    producer_id: int
    on_written: Callable[[int], None]
    on_failed: Callable[[GroupError], None]


class GroupCoordinator:
    """The classic groups of one ``__consumer_offsets`` partition (module docstring).

    ``member_id_suffix`` makes the unique part of new member ids (a UUID by default; tests pass
    a counter). ``loading`` starts the coordinator replaying: every request is answered
    COORDINATOR_LOAD_IN_PROGRESS until :meth:`complete_load`.
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
        self._member_id_suffix = member_id_suffix or (lambda: str(uuid.uuid4()))
        # Timers: key -> (deadline, sequence, callback); the heap holds (deadline, sequence,
        # key) and an entry whose sequence is no longer the key's is a cancelled one.
        self._timers: dict[tuple, tuple[int, int, Callable[[], None]]] = {}
        self._timer_heap: list[tuple[int, int, tuple]] = []
        self._timer_sequence = 0
        self._appends: dict[int, _PendingAppend] = {}
        self._next_append_id = 0
        self._now_ms = now_ms
        self._out = Output()
        if not loading:
            self._schedule(_EXPIRY_TIMER, self.config.offsets_retention_check_interval_ms,
                           self._expire_offsets)

    # == driving =================================================================================

    def poll(self, now_ms: int) -> Output:
        """Fire every timer due at ``now_ms`` (heartbeat and sync expiry, rebalance timeouts)."""
        self._begin(now_ms)
        for _ in range(_TIMERS_PER_POLL_MAX):
            self._drop_stale_timers()
            if not self._timer_heap or self._timer_heap[0][0] > self._now_ms:
                break
            _, _, key = heapq.heappop(self._timer_heap)
            _, _, callback = self._timers.pop(key)
            callback()
        return self._end()

    def next_deadline_ms(self) -> int | None:
        """When the next timer is due (None: none is set)."""
        self._drop_stale_timers()
        return self._timer_heap[0][0] if self._timer_heap else None

    def _drop_stale_timers(self) -> None:
        """Pop heap entries of cancelled or rescheduled timers off the top (amortised O(log n))."""
        heap = self._timer_heap
        while heap and self._timers.get(heap[0][2], (0, -1))[1] != heap[0][1]:
            heapq.heappop(heap)

    def append_completed(self, append_id: int, first_offset: int, now_ms: int) -> Output:
        """The caller wrote append ``append_id``; its first record is at ``first_offset``."""
        self._begin(now_ms)
        pending = self._appends.pop(append_id, None)
        if pending is None:
            assert self.closed, f"append {append_id} was never issued"
            return self._end()  # a write that completed after unload(): already answered
        pending.on_written(first_offset)
        return self._end()

    def append_failed(self, append_id: int, error: GroupError, now_ms: int) -> Output:
        """The caller could not write append ``append_id`` (``error`` is what to answer)."""
        self._begin(now_ms)
        pending = self._appends.pop(append_id, None)
        if pending is None:
            assert self.closed, f"append {append_id} was never issued"
            return self._end()
        logger.warning("write %d to __consumer_offsets failed: %s", append_id, error)
        pending.on_failed(error)
        return self._end()

    # == loading =================================================================================

    def replay(
        self, record_offset: int, record: GroupRecord, producer_id: int = -1, now_ms: int = 0
    ) -> None:
        """Apply one record of the partition (loading), as it was written at ``record_offset``.

        Records must come in partition order; a record the caller could not decode is skipped
        by the caller (with a log line naming its offset), not passed here.
        """
        assert self.loading, "replay() rebuilds a loading coordinator; live writes apply themselves"
        self._now_ms = max(self._now_ms, now_ms)
        if isinstance(record, OffsetCommitRecord):
            self._apply_offset_commit(record_offset, record, producer_id)
        elif isinstance(record, OffsetCommitTombstone):
            self.offsets.replay_tombstone(record.group_id, record.topic, record.partition)
        elif isinstance(record, GroupMetadataRecord):
            self.groups[record.group_id] = ClassicGroup.from_record(record, now_ms)
        elif isinstance(record, GroupMetadataTombstone):
            self.groups.pop(record.group_id, None)
        else:  # pragma: no cover - the GroupRecord union is closed
            raise AssertionError(f"not a group record: {record!r}")

    def replay_end_transaction(self, producer_id: int, committed: bool) -> None:
        """Apply a COMMIT or ABORT marker of ``producer_id`` (while loading and afterwards)."""
        self.offsets.replay_end_transaction(producer_id, committed)

    def complete_load(self, now_ms: int) -> Output:
        """End loading: members of loaded groups must heartbeat within their session timeout."""
        self._begin(now_ms)
        self.loading = False
        for group in self.groups.values():
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)
        self._schedule(_EXPIRY_TIMER, self.config.offsets_retention_check_interval_ms,
                       self._expire_offsets)
        logger.info("loaded %d groups", len(self.groups))
        return self._end()

    def unload(self, now_ms: int) -> Output:
        """The partition moved away: answer parked requests NOT_COORDINATOR, forget everything."""
        self._begin(now_ms)
        error = NotCoordinatorError("this coordinator no longer owns the group's partition")
        for group in self.groups.values():
            for member in group.members.values():
                self._add(group.complete_join(member, JoinGroupResponse(error, member.member_id)))
                self._add(group.complete_sync(member, SyncGroupResponse(error)))
        for pending in list(self._appends.values()):
            pending.on_failed(error)
        self._appends.clear()
        # Whatever those failures would write next is not ours to write any more.
        self._out.appends.clear()
        self.groups.clear()
        self.offsets = OffsetStore()
        self._timers.clear()
        self._timer_heap.clear()
        self.closed = True
        return self._end()

    # == JoinGroup ===============================================================================

    def join_group(self, request: JoinGroupRequest, reply_to: Hashable, now_ms: int) -> Output:
        """JoinGroup; the answer (a :class:`Reply` to ``reply_to``) may come in a later Output."""
        assert reply_to is not None, "reply_to None cannot be told apart from no parked request"
        self._begin(now_ms)
        error = self._unavailable() or self._invalid_group_id(request.group_id)
        if error is None and not (
            self.config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            error = InvalidSessionTimeoutError(
                f"session timeout {request.session_timeout_ms} ms is outside "
                f"[{self.config.min_session_timeout_ms}, {self.config.max_session_timeout_ms}]"
            )
        if error is not None:
            self._reply(reply_to, JoinGroupResponse(error, request.member_id))
            return self._end()
        group = self.groups.get(request.group_id)
        is_unknown_member = request.member_id == UNKNOWN_MEMBER_ID
        if group is None:
            if not is_unknown_member:
                self._reply(reply_to, JoinGroupResponse(
                    UnknownMemberIdError(f"group {request.group_id} does not exist"),
                    request.member_id,
                ))
                return self._end()
            group = self.groups[request.group_id] = ClassicGroup(request.group_id, now_ms)
        if not self._accept_joining_member(group, request.member_id):
            self._drop_member(group, request.member_id, None)
            self._reply(reply_to, JoinGroupResponse(
                GroupMaxSizeReachedError(
                    f"group {group.group_id} has reached group.max.size "
                    f"{self.config.group_max_size}"
                ),
                UNKNOWN_MEMBER_ID,
            ))
            if group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        elif is_unknown_member:
            self._join_new_member(group, request, reply_to)
        else:
            self._join_existing_member(group, request, reply_to)
        return self._end()

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """group.max.size: whether this member may join now (Kafka's acceptJoiningMember)."""
        size_max = self.config.group_max_size
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            # Counting members that have rejoined (not all members) lets a lowered bound shed
            # the last members to rejoin.
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or \
                group.awaiting_join_count < size_max
        return group.has_member(member_id) or len(group.members) < size_max

    def _join_new_member(
        self, group: ClassicGroup, request: JoinGroupRequest, reply_to: Hashable
    ) -> None:
        if group.is_in(GroupState.DEAD):
            self._reply(reply_to, JoinGroupResponse(
                CoordinatorNotAvailableError(f"group {group.group_id} is Dead"), UNKNOWN_MEMBER_ID
            ))
            return
        if not group.supports_protocols(request.protocol_type, _names(request.protocols)):
            self._reply(reply_to, JoinGroupResponse(
                self._inconsistent_protocol(group, request), UNKNOWN_MEMBER_ID
            ))
            return
        prefix = request.group_instance_id if request.group_instance_id is not None \
            else request.client_id
        new_member_id = f"{prefix}-{self._member_id_suffix()}"
        if request.group_instance_id is not None:
            existing = group.static_member_id(request.group_instance_id)
            if existing is not None:
                self._update_static_member(group, request, existing, new_member_id, reply_to)
            else:
                self._add_member(group, request, new_member_id, reply_to)
        elif request.require_known_member_id:
            # KIP-394: hand out the id and wait for the member to come back with it; a member
            # that never does is dropped after its session timeout.
            group.add_pending_member(new_member_id)
            self._schedule(_heartbeat_key(group, new_member_id), request.session_timeout_ms,
                           lambda: self._expire_heartbeat(group.group_id, new_member_id))
            self._reply(reply_to, JoinGroupResponse(
                MemberIdRequiredError(f"rejoin group {group.group_id} as {new_member_id}"),
                new_member_id,
            ))
        else:
            self._add_member(group, request, new_member_id, reply_to)

    def _join_existing_member(
        self, group: ClassicGroup, request: JoinGroupRequest, reply_to: Hashable
    ) -> None:
        member_id = request.member_id
        if group.is_in(GroupState.DEAD):
            self._reply(reply_to, JoinGroupResponse(
                CoordinatorNotAvailableError(f"group {group.group_id} is Dead"), member_id
            ))
            return
        if not group.supports_protocols(request.protocol_type, _names(request.protocols)):
            self._reply(reply_to, JoinGroupResponse(
                self._inconsistent_protocol(group, request), member_id
            ))
            return
        if group.is_pending_member(member_id) and request.group_instance_id is None:
            self._add_member(group, request, member_id, reply_to)
            return
        try:
            group.validate_member(member_id, request.group_instance_id)
        except GroupError as error:
            self._reply(reply_to, JoinGroupResponse(error, member_id))
            return
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member(group, member, request, reply_to)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                # The member lost its JoinGroup response: answer it again for this generation.
                self._reply(reply_to, self._join_response(group, member))
            else:
                self._update_member(group, member, request, reply_to)
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # A leader's join forces a rebalance: it may have seen metadata change (new
                # partitions) that the members' metadata does not show.
                self._update_member(group, member, request, reply_to)
            else:
                self._reply(reply_to, self._join_response(group, member, with_members=False))
        else:  # Empty: the member was removed; it must start over
            self._reply(reply_to, JoinGroupResponse(
                UnknownMemberIdError(f"group {group.group_id} is Empty"), member_id
            ))

    def _add_member(
        self, group: ClassicGroup, request: JoinGroupRequest, member_id: str, reply_to: Hashable
    ) -> None:
        member = GroupMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple(request.protocols),
            is_new=True,
        )
        if group.is_in(GroupState.PREPARING_REBALANCE) and \
                group.previous_state is GroupState.EMPTY:
            group.new_member_added = True  # extends the initial rebalance delay
        group.add(member, reply_to)
        # A parked join cannot heartbeat; a client that gave up on it must not stay forever.
        self._schedule(_heartbeat_key(group, member_id), self.config.new_member_join_timeout_ms,
                       lambda: self._expire_heartbeat(group.group_id, member_id))
        logger.info("group %s: member %s (instance %s) joins in %s", group.group_id, member_id,
                    request.group_instance_id, group.state.value)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_member(
        self, group: ClassicGroup, member: GroupMember, request: JoinGroupRequest,
        reply_to: Hashable,
    ) -> None:
        if member.is_awaiting_join and member.join_reply_to != reply_to:
            # A second JoinGroup from the same member replaces the first: answer the first.
            self._add(group.complete_join(member, JoinGroupResponse(
                RebalanceInProgressError("superseded by a newer JoinGroup"), member.member_id
            )))
        group.update_member(member, request.protocols, request.rebalance_timeout_ms,
                            request.session_timeout_ms, reply_to)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_static_member(
        self,
        group: ClassicGroup,
        request: JoinGroupRequest,
        old_member_id: str,
        new_member_id: str,
        reply_to: Hashable,
    ) -> None:
        """A static member rejoined with an unknown member id: it takes over its instance id."""
        instance_id = request.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id
        member, fenced = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._replies(fenced)
        self._cancel(_heartbeat_key(group, old_member_id))
        self._reschedule_heartbeat(group, member)
        old_protocols = member.protocols
        old_rebalance_timeout_ms = member.rebalance_timeout_ms
        old_session_timeout_ms = member.session_timeout_ms
        group.update_member(member, request.protocols, request.rebalance_timeout_ms,
                            request.session_timeout_ms, reply_to)
        if group.is_in(GroupState.STABLE):
            if group.protocol_name != group.select_protocol():
                self._maybe_prepare_rebalance_or_complete_join(group)
                return
            # Same protocol: no rebalance. Store the new member id, then answer; the leader is
            # told to skip the assignment (it has it), as JoinGroup v9+.
            generation = group.generation_id

            def written(_first_offset: int) -> None:
                is_leader = group.is_leader(new_member_id)
                self._add(group.complete_join(member, self._join_response(
                    group, member, with_members=is_leader, skip_assignment=is_leader
                )))

            def failed(error: GroupError) -> None:
                # Undo the replacement: the old member id stays the instance's.
                if group.static_member_id(instance_id) != new_member_id or \
                        group.generation_id != generation:
                    self._add(group.complete_join(member, JoinGroupResponse(error, UNKNOWN_MEMBER_ID)))
                    return
                group.update_member(member, old_protocols, old_rebalance_timeout_ms,
                                    old_session_timeout_ms, None)
                old, _ = group.replace_static_member(instance_id, new_member_id, old_member_id)
                self._cancel(_heartbeat_key(group, new_member_id))
                self._reschedule_heartbeat(group, old)
                self._reply(reply_to, JoinGroupResponse(
                    error, UNKNOWN_MEMBER_ID, group.generation_id, group.protocol_type,
                    group.protocol_name, current_leader or "",
                ))

            self._append((group.to_record(),), written, failed)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may be computing an assignment naming the old member id: start over.
            self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        else:
            self._maybe_complete_join_phase(group)

    def _join_response(
        self, group: ClassicGroup, member: GroupMember, *, with_members: bool | None = None,
        skip_assignment: bool = False,
    ) -> JoinGroupResponse:
        """The current generation as ``member`` sees it (the leader sees every member)."""
        if with_members is None:
            with_members = group.is_leader(member.member_id)
        members = tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
            for m in group.members.values()
        ) if with_members else ()
        return JoinGroupResponse(
            error=None,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=members,
            skip_assignment=skip_assignment,
        )

    # -- the rebalance ---------------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, "membership changed")
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # Members waiting on the old generation's assignment must rejoin.
            self._reset_and_propagate_assignment(
                group, RebalanceInProgressError(f"group {group.group_id} is rebalancing")
            )
        group.pending_sync_members.clear()
        self._cancel(_sync_key(group))
        initial = group.is_in(GroupState.EMPTY)
        if initial:
            delay_ms = self.config.initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._schedule(_join_key(group), delay_ms,
                           lambda: self._try_complete_initial_rebalance(group, delay_ms, remaining_ms))
        group.transition_to(GroupState.PREPARING_REBALANCE, self._now_ms)
        logger.info("group %s: preparing to rebalance from generation %d (%s)", group.group_id,
                    group.generation_id, reason)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group)
            else:
                self._schedule(_join_key(group), group.rebalance_timeout_ms(),
                               lambda: self._complete_join(group))

    def _try_complete_initial_rebalance(
        self, group: ClassicGroup, delay_ms: int, remaining_ms: int
    ) -> None:
        if self.groups.get(group.group_id) is not group:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            next_delay_ms = min(self.config.initial_rebalance_delay_ms, remaining_ms)
            next_remaining_ms = max(remaining_ms - delay_ms, 0)
            self._schedule(
                _join_key(group), next_delay_ms,
                lambda: self._try_complete_initial_rebalance(group, next_delay_ms, next_remaining_ms),
            )
        else:
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.previous_state is GroupState.EMPTY:
            return  # the initial rebalance's delay decides when it completes
        if group.has_all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """End the join phase: drop who did not rejoin, start the generation, answer the joins."""
        if self.groups.get(group.group_id) is not group:
            return  # a timer of a group deleted since
        self._cancel(_join_key(group))
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self._drop_member(group, member.member_id, None)
        if group.is_in(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for them (or for their
            # session timeouts) another rebalance timeout.
            self._schedule(_join_key(group), group.rebalance_timeout_ms(),
                           lambda: self._complete_join(group))
            return
        group.init_next_generation(self._now_ms)
        if group.is_in(GroupState.EMPTY):
            logger.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            # A failed write is harmless: the previous generation, if reloaded, times out.
            self._append((group.to_record({}),), lambda _: None, lambda _: None)
            return
        logger.info("group %s: generation %d with %d members, protocol %s, leader %s",
                    group.group_id, group.generation_id, len(group.members),
                    group.protocol_name, group.leader_id)
        for member in list(group.members.values()):
            self._add(group.complete_join(member, self._join_response(group, member)))
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        self._schedule(_sync_key(group), group.rebalance_timeout_ms(),
                       lambda: self._expire_pending_sync(group, generation))

    def _expire_pending_sync(self, group: ClassicGroup, generation: int) -> None:
        """The rebalance timeout passed with SyncGroups missing: drop those members, rebalance."""
        if self.groups.get(group.group_id) is not group or group.generation_id != generation:
            return
        if not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if group.pending_sync_members:
            missing = sorted(group.pending_sync_members)
            for member_id in missing:
                self._drop_member(group, member_id, None)
            logger.info("group %s: removed %s: no SyncGroup within the rebalance timeout",
                        group.group_id, missing)
            self._prepare_rebalance(group, f"no SyncGroup from {missing}")

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return
        if group.is_pending_member(member_id):
            group.remove(member_id)
            if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        logger.info("group %s: member %s missed its session timeout", group_id, member_id)
        self._remove_member_and_rebalance(group, member_id)

    def _remove_member_and_rebalance(self, group: ClassicGroup, member_id: str) -> None:
        self._drop_member(group, member_id, UnknownMemberIdError(
            f"member {member_id} was removed from group {group.group_id}"
        ))
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    def _drop_member(
        self, group: ClassicGroup, member_id: str, error: GroupError | None
    ) -> None:
        """Remove a member (or pending id): answer its parked requests, cancel its timer."""
        member = group.members.get(member_id)
        if member is not None:
            error = error or UnknownMemberIdError(
                f"member {member_id} was removed from group {group.group_id}"
            )
            self._add(group.complete_join(member, JoinGroupResponse(error, UNKNOWN_MEMBER_ID)))
            self._add(group.complete_sync(member, SyncGroupResponse(error)))
        group.remove(member_id)
        self._cancel(_heartbeat_key(group, member_id))

    # == SyncGroup ===============================================================================

    def sync_group(self, request: SyncGroupRequest, reply_to: Hashable, now_ms: int) -> Output:
        """SyncGroup; a follower's answer waits for the leader's assignment to be written."""
        assert reply_to is not None, "reply_to None cannot be told apart from no parked request"
        self._begin(now_ms)
        error = self._unavailable()
        group = self.groups.get(request.group_id)
        if error is None and (group is None or not group.members):
            error = UnknownMemberIdError(f"group {request.group_id} has no members")
        if error is None:
            assert group is not None
            error = self._validate_sync(group, request)
        if error is None and group.is_in(GroupState.PREPARING_REBALANCE):
            error = RebalanceInProgressError(f"group {group.group_id} is rebalancing")
        if error is not None:
            self._reply(reply_to, SyncGroupResponse(error))
            return self._end()
        member = group.members[request.member_id]
        if group.is_in(GroupState.STABLE):
            group.pending_sync_members.discard(member.member_id)
            self._reply(reply_to, SyncGroupResponse(
                None, group.protocol_type, group.protocol_name, member.assignment
            ))
            return self._end()
        # CompletingRebalance: park until the leader's assignment is written.
        if member.is_awaiting_sync:
            self._add(group.complete_sync(member, SyncGroupResponse(
                RebalanceInProgressError("superseded by a newer SyncGroup")
            )))
        member.sync_reply_to = reply_to
        group.pending_sync_members.discard(member.member_id)
        if group.is_leader(member.member_id):
            assignment = dict(request.assignments)
            assignment = {m: assignment.get(m, b"") for m in group.members}
            generation = group.generation_id

            def written(_first_offset: int) -> None:
                # Another member may have joined meanwhile: only this generation's store counts.
                if group.is_in(GroupState.COMPLETING_REBALANCE) and \
                        group.generation_id == generation:
                    for m in group.members.values():
                        m.assignment = assignment.get(m.member_id, b"")
                    self._propagate_assignment(group, None)
                    group.transition_to(GroupState.STABLE, self._now_ms)
                    logger.info("group %s: generation %d is Stable", group.group_id, generation)

            def failed(error: GroupError) -> None:
                if group.is_in(GroupState.COMPLETING_REBALANCE) and \
                        group.generation_id == generation:
                    self._reset_and_propagate_assignment(group, error)
                    self._maybe_prepare_rebalance_or_complete_join(group)

            self._append((group.to_record(assignment),), written, failed)
        return self._end()

    def _validate_sync(self, group: ClassicGroup, request: SyncGroupRequest) -> GroupError | None:
        if group.is_in(GroupState.DEAD):
            return CoordinatorNotAvailableError(f"group {group.group_id} is Dead")
        try:
            group.validate_member(request.member_id, request.group_instance_id)
        except GroupError as error:
            return error
        if request.generation_id != group.generation_id:
            return IllegalGenerationError(
                f"group {group.group_id}: generation {request.generation_id} is not the "
                f"group's {group.generation_id}"
            )
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) \
                or (request.protocol_name is not None
                    and request.protocol_name != group.protocol_name):
            return InconsistentGroupProtocolError(
                f"group {group.group_id} uses {group.protocol_type}/{group.protocol_name}, not "
                f"{request.protocol_type}/{request.protocol_name}"
            )
        return None

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: GroupError) -> None:
        assert group.is_in(GroupState.COMPLETING_REBALANCE), group.state
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: GroupError | None) -> None:
        for member in group.members.values():
            response = SyncGroupResponse(error) if error is not None else SyncGroupResponse(
                None, group.protocol_type, group.protocol_name, member.assignment
            )
            reply = group.complete_sync(member, response)
            if reply is not None:
                self._add(reply)
                # A session that ran out while the member waited was passed over: restart it.
                self._reschedule_heartbeat(group, member)

    # == Heartbeat, LeaveGroup ===================================================================

    def heartbeat(self, request: HeartbeatRequest, reply_to: Hashable, now_ms: int) -> Output:
        """Heartbeat: keeps the member's session; says whether a rebalance is under way."""
        self._begin(now_ms)
        self._reply(reply_to, HeartbeatResponse(self._heartbeat(request)))
        return self._end()

    def _heartbeat(self, request: HeartbeatRequest) -> GroupError | None:
        error = self._unavailable()
        if error is not None:
            return error
        group = self.groups.get(request.group_id)
        if group is None:
            return UnknownMemberIdError(f"group {request.group_id} does not exist")
        if group.is_in(GroupState.DEAD):
            return CoordinatorNotAvailableError(f"group {group.group_id} is Dead")
        try:
            group.validate_member(request.member_id, request.group_instance_id)
        except GroupError as error:
            return error
        if request.generation_id != group.generation_id:
            return IllegalGenerationError(
                f"group {group.group_id}: generation {request.generation_id} is not the "
                f"group's {group.generation_id}"
            )
        member = group.members[request.member_id]
        self._reschedule_heartbeat(group, member)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return RebalanceInProgressError(f"group {group.group_id} is rebalancing")
        return None

    def leave_group(self, request: LeaveGroupRequest, reply_to: Hashable, now_ms: int) -> Output:
        """LeaveGroup: remove members (by member id, or an admin's instance id alone)."""
        self._begin(now_ms)
        error = self._unavailable()
        group = self.groups.get(request.group_id)
        if error is None and group is None:
            error = UnknownMemberIdError(f"group {request.group_id} does not exist")
        if error is None and group.is_in(GroupState.DEAD):
            error = CoordinatorNotAvailableError(f"group {request.group_id} is Dead")
        if error is not None:
            self._reply(reply_to, LeaveGroupResponse(error))
            return self._end()
        assert group is not None
        left: list[LeftMember] = []
        for leaving in request.members:
            member_error: GroupError | None = None
            if leaving.member_id == UNKNOWN_MEMBER_ID:
                static_id = None if leaving.group_instance_id is None else \
                    group.static_member_id(leaving.group_instance_id)
                if static_id is None:
                    member_error = UnknownMemberIdError(
                        f"group {group.group_id}: no static member {leaving.group_instance_id}"
                    )
                else:
                    self._drop_member(group, static_id, None)
            elif group.is_pending_member(leaving.member_id):
                self._drop_member(group, leaving.member_id, None)
            else:
                try:
                    group.validate_member(leaving.member_id, leaving.group_instance_id)
                    self._drop_member(group, leaving.member_id, None)
                except GroupError as error:
                    member_error = error
            left.append(LeftMember(leaving.member_id, leaving.group_instance_id, member_error))
        if any(m.error is None for m in left):
            logger.info("group %s: %s left", group.group_id,
                        [m.member_id or m.group_instance_id for m in left if m.error is None])
            if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group)
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        self._reply(reply_to, LeaveGroupResponse(None, tuple(left)))
        return self._end()

    # == Offsets =================================================================================

    def commit_offsets(self, request: OffsetCommitRequest, reply_to: Hashable, now_ms: int) -> Output:
        """OffsetCommit: validated, written, then applied and answered (``append_completed``)."""
        self._begin(now_ms)
        error = self._unavailable() or self._invalid_group_id(request.group_id)
        group = self.groups.get(request.group_id)
        if error is None and group is None and request.generation_id >= 0:
            error = GroupIdNotFoundError(f"group {request.group_id} does not exist")
        if error is None:
            if group is None:
                # A simple group: offsets stored for a consumer without group management.
                group = self.groups[request.group_id] = ClassicGroup(request.group_id, now_ms)
            try:
                group.validate_offset_commit(request.member_id, request.group_instance_id,
                                             request.generation_id, transactional=False)
            except GroupError as validation_error:
                error = validation_error
        if error is not None:
            self._reply(reply_to, _commit_errors(request.offsets, error))
            return self._end()
        assert group is not None
        member = group.members.get(request.member_id)
        if member is not None and group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            self._reschedule_heartbeat(group, member)  # a commit keeps the session, as Kafka's
        expire_ms = -1 if request.retention_ms < 0 else now_ms + request.retention_ms
        self._commit(request.group_id, request.offsets, reply_to, -1, -1, expire_ms)
        return self._end()

    def commit_transactional_offsets(
        self, request: TxnOffsetCommitRequest, reply_to: Hashable, now_ms: int
    ) -> Output:
        """TxnOffsetCommit: written in the producer's transaction; visible after its COMMIT."""
        assert request.producer_id >= 0, "a transactional commit needs the producer's id"
        self._begin(now_ms)
        error = self._unavailable() or self._invalid_group_id(request.group_id)
        group = self.groups.get(request.group_id)
        if error is None and group is None and request.generation_id >= 0:
            error = IllegalGenerationError(f"group {request.group_id} does not exist")
        if error is None:
            if group is None:
                group = self.groups[request.group_id] = ClassicGroup(request.group_id, now_ms)
            try:
                # The generation and member id fence a zombie producer of an old member (KIP-447).
                group.validate_offset_commit(request.member_id, request.group_instance_id,
                                             request.generation_id, transactional=True)
            except GroupError as validation_error:
                error = validation_error
        if error is not None:
            self._reply(reply_to, _commit_errors(request.offsets, error))
            return self._end()
        self._commit(request.group_id, request.offsets, reply_to, request.producer_id,
                     request.producer_epoch, -1)
        return self._end()

    def _commit(
        self, group_id: str, offsets: tuple[PartitionOffset, ...], reply_to: Hashable,
        producer_id: int, producer_epoch: int, expire_ms: int,
    ) -> None:
        results: list[PartitionError] = []
        records: list[OffsetCommitRecord] = []
        for p in offsets:
            if len(p.metadata.encode()) > self.config.offset_metadata_max_bytes:
                results.append(PartitionError(p.topic, p.partition, OffsetMetadataTooLargeError(
                    f"metadata of {p.topic}-{p.partition} is over "
                    f"{self.config.offset_metadata_max_bytes} bytes"
                )))
                continue
            results.append(PartitionError(p.topic, p.partition, None))
            records.append(OffsetCommitRecord(
                group_id, p.topic, p.partition, p.offset, p.leader_epoch, p.metadata,
                self._now_ms, expire_ms,
            ))
        if not records:
            self._reply(reply_to, OffsetCommitResponse(tuple(results)))
            return

        def written(first_offset: int) -> None:
            for i, record in enumerate(records):
                self._apply_offset_commit(first_offset + i, record, producer_id)
            self._reply(reply_to, OffsetCommitResponse(tuple(results)))

        def failed(error: GroupError) -> None:
            self._reply(reply_to, OffsetCommitResponse(tuple(
                r if r.error is not None else PartitionError(r.topic, r.partition, error)
                for r in results
            )))

        self._append(tuple(records), written, failed, producer_id, producer_epoch)

    def _apply_offset_commit(
        self, record_offset: int, record: OffsetCommitRecord, producer_id: int
    ) -> None:
        if record.group_id not in self.groups:
            # Offsets without a group record: a simple group (or one deleted meanwhile).
            self.groups[record.group_id] = ClassicGroup(record.group_id, self._now_ms)
        self.offsets.replay_commit(record_offset, producer_id, record)

    def fetch_offsets(self, request: OffsetFetchRequest, reply_to: Hashable, now_ms: int) -> Output:
        """OffsetFetch: committed offsets (-1 where none); pending ones are not shown, and under
        ``require_stable`` their partitions answer UNSTABLE_OFFSET_COMMIT (KIP-447)."""
        self._begin(now_ms)
        error = self._unavailable() or self._invalid_group_id(request.group_id)
        if error is not None:
            self._reply(reply_to, OffsetFetchResponse(error))
            return self._end()
        group_id = request.group_id
        committed = self.offsets.group_offsets(group_id)
        wanted = sorted(committed) if request.partitions is None else list(request.partitions)
        fetched: list[FetchedOffset] = []
        for topic, partition in wanted:
            if request.require_stable and self.offsets.has_pending(group_id, topic, partition):
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
        self._reply(reply_to, OffsetFetchResponse(None, tuple(fetched)))
        return self._end()

    def _expire_offsets(self) -> None:
        """The periodic expiry pass: tombstones for expired offsets, then for emptied groups."""
        self._schedule(_EXPIRY_TIMER, self.config.offsets_retention_check_interval_ms,
                       self._expire_offsets)
        records: list[GroupRecord] = []
        deleted_groups: list[str] = []
        for group_id, group in self.groups.items():
            if group.protocol_type is not None and not group.is_in(GroupState.EMPTY):
                continue  # a group with members keeps its offsets (see docs/groups.md)
            all_expired = True
            for (topic, partition), value in self.offsets.group_offsets(group_id).items():
                if value.expire_timestamp_ms >= 0:
                    expired = self._now_ms >= value.expire_timestamp_ms
                else:
                    base_ms = group.state_timestamp_ms if group.protocol_type is not None \
                        else value.commit_timestamp_ms
                    expired = self._now_ms - base_ms >= self.config.offsets_retention_ms
                if expired and not self.offsets.has_pending(group_id, topic, partition):
                    records.append(OffsetCommitTombstone(group_id, topic, partition))
                else:
                    all_expired = False
            if all_expired and not self.offsets.has_open_transactions(group_id) and \
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
                    self.offsets.replay_tombstone(record.group_id, record.topic, record.partition)
            for group_id in deleted_groups:
                group = self.groups.get(group_id)
                # Only if nothing came back meanwhile (a member, a commit).
                if group is not None and group.is_in(GroupState.EMPTY) and not group.members \
                        and not group.pending_join_members \
                        and not self.offsets.group_offsets(group_id) \
                        and not self.offsets.has_open_transactions(group_id):
                    group.transition_to(GroupState.DEAD, self._now_ms)
                    del self.groups[group_id]

        self._append(tuple(records), written, lambda _: None)

    # == ListGroups, DescribeGroups, DeleteGroups ================================================

    def list_groups(self, request: ListGroupsRequest, reply_to: Hashable, now_ms: int) -> Output:
        self._begin(now_ms)
        error = self._unavailable()
        if error is not None:
            self._reply(reply_to, ListGroupsResponse(error))
            return self._end()
        wanted = {state.lower() for state in request.states_filter}
        self._reply(reply_to, ListGroupsResponse(None, tuple(
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not wanted or g.state.value.lower() in wanted
        )))
        return self._end()

    def describe_groups(
        self, request: DescribeGroupsRequest, reply_to: Hashable, now_ms: int
    ) -> Output:
        """DescribeGroups; members' metadata and assignments are shown while Stable only."""
        self._begin(now_ms)
        described: list[DescribedGroup] = []
        for group_id in request.group_ids:
            error = self._unavailable() or self._invalid_group_id(group_id)
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
        self._reply(reply_to, DescribeGroupsResponse(tuple(described)))
        return self._end()

    def delete_groups(self, request: DeleteGroupsRequest, reply_to: Hashable, now_ms: int) -> Output:
        """DeleteGroups: only groups without members; their offsets and records are tombstoned."""
        self._begin(now_ms)
        results: dict[str, GroupError | None] = {}
        records: list[GroupRecord] = []
        for group_id in request.group_ids:
            error = self._unavailable() or self._invalid_group_id(group_id)
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
            self._reply(reply_to, DeleteGroupsResponse(tuple(
                (g, results[g]) for g in request.group_ids
            )))

        if not deleting:
            answer()
            return self._end()

        def written(_first_offset: int) -> None:
            for record in records:
                if isinstance(record, OffsetCommitTombstone):
                    self.offsets.replay_tombstone(record.group_id, record.topic, record.partition)
            for group_id in deleting:
                group = self.groups.pop(group_id, None)
                if group is not None:
                    self._cancel(_join_key(group))
                    self._cancel(_sync_key(group))
                    for member_id in list(group.members):  # joined while the write was on
                        self._drop_member(group, member_id, CoordinatorNotAvailableError(
                            f"group {group_id} was deleted"
                        ))
                    group.transition_to(GroupState.DEAD, self._now_ms)
            logger.info("deleted groups %s", deleting)
            answer()

        def failed(error: GroupError) -> None:
            for group_id in deleting:
                results[group_id] = error
            answer()

        self._append(tuple(records), written, failed)
        return self._end()

    # == helpers =================================================================================

    def check(self) -> None:
        """Assert every group's and the offset store's invariants (for tests)."""
        for group_id, group in self.groups.items():
            assert group.group_id == group_id
            assert not group.is_in(GroupState.DEAD), group_id
            group.check()
            for member in group.members.values():
                # A member parked in JoinGroup/SyncGroup may have outlived its timer (it waits
                # on the group, not the other way round); the rebalance restarts it.
                assert self.loading or _heartbeat_key(group, member.member_id) in self._timers \
                    or member.is_awaiting_join or member.is_awaiting_sync, member.member_id
        self.offsets.check()

    def _begin(self, now_ms: int) -> None:
        # A clock that steps back (NTP) must not fire timers early or move deadlines back.
        self._now_ms = max(self._now_ms, now_ms)
        self._out = Output()

    def _end(self) -> Output:
        out = self._out
        out.next_deadline_ms = self.next_deadline_ms()
        self._out = Output()
        return out

    def _reply(self, reply_to: Hashable, response: object) -> None:
        self._out.replies.append(Reply(reply_to, response))

    def _add(self, reply: Reply | None) -> None:
        if reply is not None:
            self._out.replies.append(reply)

    def _replies(self, replies: list[Reply]) -> None:
        self._out.replies.extend(replies)

    def _append(
        self,
        records: tuple[GroupRecord, ...],
        on_written: Callable[[int], None],
        on_failed: Callable[[GroupError], None],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        append_id = self._next_append_id
        self._next_append_id += 1
        self._appends[append_id] = _PendingAppend(records, producer_id, on_written, on_failed)
        self._out.appends.append(Append(append_id, records, producer_id, producer_epoch))

    def _schedule(self, key: tuple, delay_ms: int, callback: Callable[[], None]) -> None:
        """Set (or replace) timer ``key`` to fire ``delay_ms`` from now."""
        self._timer_sequence += 1
        deadline_ms = self._now_ms + delay_ms
        self._timers[key] = (deadline_ms, self._timer_sequence, callback)
        heapq.heappush(self._timer_heap, (deadline_ms, self._timer_sequence, key))

    def _cancel(self, key: tuple) -> None:
        self._timers.pop(key, None)

    def _reschedule_heartbeat(self, group: ClassicGroup, member: GroupMember) -> None:
        member_id = member.member_id
        self._schedule(_heartbeat_key(group, member_id), member.session_timeout_ms,
                       lambda: self._expire_heartbeat(group.group_id, member_id))

    def _unavailable(self) -> GroupError | None:
        if self.closed:
            return NotCoordinatorError("this coordinator no longer owns the group's partition")
        if self.loading:
            return CoordinatorLoadInProgressError("the group coordinator is loading its partition")
        return None

    def _invalid_group_id(self, group_id: str) -> GroupError | None:
        if not group_id or len(group_id) > self.config.group_id_max_length:
            return InvalidGroupIdError(
                f"group id of {len(group_id)} characters: it must have 1 to "
                f"{self.config.group_id_max_length}"
            )
        return None

    @staticmethod
    def _inconsistent_protocol(group: ClassicGroup, request: JoinGroupRequest) -> GroupError:
        return InconsistentGroupProtocolError(
            f"group {group.group_id} ({group.protocol_type}) supports none of "
            f"{request.protocol_type} {sorted(_names(request.protocols))}"
        )


def _names(protocols: tuple[tuple[str, bytes], ...]) -> frozenset[str]:
    return frozenset(name for name, _ in protocols)


def _commit_errors(offsets: tuple[PartitionOffset, ...], error: GroupError) -> OffsetCommitResponse:
    return OffsetCommitResponse(tuple(PartitionError(p.topic, p.partition, error) for p in offsets))


def _heartbeat_key(group: ClassicGroup, member_id: str) -> tuple:
    return ("heartbeat", group.group_id, member_id)


def _join_key(group: ClassicGroup) -> tuple:
    return ("join", group.group_id)


def _sync_key(group: ClassicGroup) -> tuple:
    return ("sync", group.group_id)
