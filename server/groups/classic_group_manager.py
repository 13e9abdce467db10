"""The classic group protocol's membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, timers.

Kafka's ``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/
GroupMetadataManager.java``, its classic-group parts (classicGroupJoin, classicGroupSync,
classicGroupHeartbeat, classicGroupLeave, the rebalance, sync and heartbeat expirations).

A member joins (JoinGroup); a dynamic member's first join is answered MEMBER_ID_REQUIRED with its
id (KIP-394) and it joins again with it. A join starts a rebalance (Empty/Stable/
CompletingRebalance -> PreparingRebalance) and is parked until every known member has rejoined
or the rebalance timeout (the largest of the members') passes; members that did not rejoin are
removed (static members are kept). The first rebalance of an Empty group waits
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

A held heartbeat (``max_wait_ms`` > 0; ours, docs/groups.md "Held heartbeats") is parked like a
join and answered as soon as the group starts a rebalance, so members learn of it in one round
trip instead of at their next heartbeat interval.

Timers (keys of :class:`~.coordinator_effects.CoordinatorEffects`): ``("heartbeat", group,
member)`` per member or pending member id, ``("held-heartbeat", group, member)`` while a
member's heartbeat is held, ``("join", group)`` while PreparingRebalance (the initial delay or
the rebalance timeout), ``("sync", group)`` while SyncGroups are awaited.

Crash behaviour: memory only; what must survive is written through the effects' appends.
Concurrency: not thread-safe; the coordinator serialises every call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from .classic_group import ClassicGroup
from .coordinator_effects import CoordinatorEffects, TimerKey
from .group_config import GroupConfig
from .group_errors import (
    CoordinatorNotAvailableError,
    GroupError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from .group_member import GroupMember
from .group_messages import (
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinedMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from .group_state import GroupState

__all__ = ["ClassicGroupManager", "heartbeat_key"]

logger = logging.getLogger(__name__)


class ClassicGroupManager:
    """The membership protocol over ``groups`` (shared with the offsets and the coordinator).

    ``member_id_suffix`` makes the unique part of new member ids (``<client id or instance
    id>-<suffix>``, a UUID in production).
    """

    def __init__(
        self,
        config: GroupConfig,
        groups: dict[str, ClassicGroup],
        effects: CoordinatorEffects,
        member_id_suffix: Callable[[], str],
    ) -> None:
        self._config = config
        self._groups = groups
        self._effects = effects
        self._member_id_suffix = member_id_suffix

    # -- JoinGroup -------------------------------------------------------------------------------

    def join_group(self, request: JoinGroupRequest, reply_to: Hashable) -> None:
        """JoinGroup; the answer (a :class:`Reply` to ``reply_to``) may come in a later Output."""
        assert reply_to is not None, "reply_to None cannot be told apart from no parked request"
        error = self._config.group_id_error(request.group_id)
        if error is None and not (
            self._config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= self._config.max_session_timeout_ms
        ):
            error = InvalidSessionTimeoutError(
                f"session timeout {request.session_timeout_ms} ms is outside "
                f"[{self._config.min_session_timeout_ms}, {self._config.max_session_timeout_ms}]"
            )
        if error is not None:
            self._effects.reply(reply_to, JoinGroupResponse(error, request.member_id))
            return
        group = self._groups.get(request.group_id)
        is_unknown_member = request.member_id == UNKNOWN_MEMBER_ID
        if group is None:
            if not is_unknown_member:
                self._effects.reply(reply_to, JoinGroupResponse(
                    UnknownMemberIdError(f"group {request.group_id} does not exist"),
                    request.member_id,
                ))
                return
            group = self._groups[request.group_id] = ClassicGroup(request.group_id, self._effects.now_ms)
        if not self._accept_joining_member(group, request.member_id):
            self.drop_member(group, request.member_id, None)
            self._effects.reply(reply_to, JoinGroupResponse(
                GroupMaxSizeReachedError(
                    f"group {group.group_id} has reached group.max.size "
                    f"{self._config.group_max_size}"
                ),
                UNKNOWN_MEMBER_ID,
            ))
            if group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        elif is_unknown_member:
            self._join_new_member(group, request, reply_to)
        else:
            self._join_existing_member(group, request, reply_to)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """group.max.size: whether this member may join now (Kafka's acceptJoiningMember)."""
        size_max = self._config.group_max_size
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
            self._effects.reply(reply_to, JoinGroupResponse(
                CoordinatorNotAvailableError(f"group {group.group_id} is Dead"), UNKNOWN_MEMBER_ID
            ))
            return
        if not group.supports_protocols(request.protocol_type, _names(request.protocols)):
            self._effects.reply(reply_to, JoinGroupResponse(
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
            self._effects.schedule(heartbeat_key(group, new_member_id), request.session_timeout_ms,
                           lambda: self._expire_heartbeat(group.group_id, new_member_id))
            self._effects.reply(reply_to, JoinGroupResponse(
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
            self._effects.reply(reply_to, JoinGroupResponse(
                CoordinatorNotAvailableError(f"group {group.group_id} is Dead"), member_id
            ))
            return
        if not group.supports_protocols(request.protocol_type, _names(request.protocols)):
            self._effects.reply(reply_to, JoinGroupResponse(
                self._inconsistent_protocol(group, request), member_id
            ))
            return
        if group.is_pending_member(member_id) and request.group_instance_id is None:
            self._add_member(group, request, member_id, reply_to)
            return
        try:
            group.validate_member(member_id, request.group_instance_id)
        except GroupError as error:
            self._effects.reply(reply_to, JoinGroupResponse(error, member_id))
            return
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member(group, member, request, reply_to)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                # The member lost its JoinGroup response: answer it again for this generation.
                self._effects.reply(reply_to, self._join_response(group, member))
            else:
                self._update_member(group, member, request, reply_to)
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # A leader's join forces a rebalance: it may have seen metadata change (new
                # partitions) that the members' metadata does not show.
                self._update_member(group, member, request, reply_to)
            else:
                self._effects.reply(reply_to, self._join_response(group, member, with_members=False))
        else:  # Empty: the member was removed; it must start over
            self._effects.reply(reply_to, JoinGroupResponse(
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
        self._effects.schedule(heartbeat_key(group, member_id), self._config.new_member_join_timeout_ms,
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
            self._effects.add(group.complete_join(member, JoinGroupResponse(
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
        self._effects.replies(fenced)
        self._effects.cancel(heartbeat_key(group, old_member_id))
        self.reschedule_heartbeat(group, member)
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
                self._effects.add(group.complete_join(member, self._join_response(
                    group, member, with_members=is_leader, skip_assignment=is_leader
                )))

            def failed(error: GroupError) -> None:
                # Undo the replacement: the old member id stays the instance's.
                if group.static_member_id(instance_id) != new_member_id or \
                        group.generation_id != generation:
                    self._effects.add(group.complete_join(member, JoinGroupResponse(error, UNKNOWN_MEMBER_ID)))
                    return
                group.update_member(member, old_protocols, old_rebalance_timeout_ms,
                                    old_session_timeout_ms, None)
                old, _ = group.replace_static_member(instance_id, new_member_id, old_member_id)
                self._effects.cancel(heartbeat_key(group, new_member_id))
                self.reschedule_heartbeat(group, old)
                self._effects.reply(reply_to, JoinGroupResponse(
                    error, UNKNOWN_MEMBER_ID, group.generation_id, group.protocol_type,
                    group.protocol_name, current_leader or "",
                ))

            self._effects.append((group.to_record(),), written, failed)
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
        self._effects.cancel(sync_key(group))
        initial = group.is_in(GroupState.EMPTY)
        if initial:
            delay_ms = self._config.initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._effects.schedule(join_key(group), delay_ms,
                           lambda: self._try_complete_initial_rebalance(group, delay_ms, remaining_ms))
        group.transition_to(GroupState.PREPARING_REBALANCE, self._effects.now_ms)
        logger.info("group %s: preparing to rebalance from generation %d (%s)", group.group_id,
                    group.generation_id, reason)
        # Held heartbeats tell their members now, not at their next heartbeat: the point of
        # holding them (docs/groups.md "Held heartbeats").
        self._effects.replies(group.complete_heartbeats(HeartbeatResponse(
            RebalanceInProgressError(f"group {group.group_id} is rebalancing")
        )))
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group)
            else:
                self._effects.schedule(join_key(group), group.rebalance_timeout_ms(),
                               lambda: self._complete_join(group))

    def _try_complete_initial_rebalance(
        self, group: ClassicGroup, delay_ms: int, remaining_ms: int
    ) -> None:
        if self._groups.get(group.group_id) is not group:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            next_delay_ms = min(self._config.initial_rebalance_delay_ms, remaining_ms)
            next_remaining_ms = max(remaining_ms - delay_ms, 0)
            self._effects.schedule(
                join_key(group), next_delay_ms,
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
        if self._groups.get(group.group_id) is not group:
            return  # a timer of a group deleted since
        self._effects.cancel(join_key(group))
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self.drop_member(group, member.member_id, None)
        if group.is_in(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for them (or for their
            # session timeouts) another rebalance timeout.
            self._effects.schedule(join_key(group), group.rebalance_timeout_ms(),
                           lambda: self._complete_join(group))
            return
        group.init_next_generation(self._effects.now_ms)
        if group.is_in(GroupState.EMPTY):
            logger.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            # A failed write is harmless: the previous generation, if reloaded, times out.
            self._effects.append((group.to_record({}),), lambda _: None, lambda _: None)
            return
        logger.info("group %s: generation %d with %d members, protocol %s, leader %s",
                    group.group_id, group.generation_id, len(group.members),
                    group.protocol_name, group.leader_id)
        for member in list(group.members.values()):
            self._effects.add(group.complete_join(member, self._join_response(group, member)))
            self.reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        self._effects.schedule(sync_key(group), group.rebalance_timeout_ms(),
                       lambda: self._expire_pending_sync(group, generation))

    def _expire_pending_sync(self, group: ClassicGroup, generation: int) -> None:
        """The rebalance timeout passed with SyncGroups missing: drop those members, rebalance."""
        if self._groups.get(group.group_id) is not group or group.generation_id != generation:
            return
        if not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if group.pending_sync_members:
            missing = sorted(group.pending_sync_members)
            for member_id in missing:
                self.drop_member(group, member_id, None)
            logger.info("group %s: removed %s: no SyncGroup within the rebalance timeout",
                        group.group_id, missing)
            self._prepare_rebalance(group, f"no SyncGroup from {missing}")

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
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
        self.drop_member(group, member_id, UnknownMemberIdError(
            f"member {member_id} was removed from group {group.group_id}"
        ))
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    def drop_member(
        self, group: ClassicGroup, member_id: str, error: GroupError | None
    ) -> None:
        """Remove a member (or pending id): answer its parked requests, cancel its timer."""
        member = group.members.get(member_id)
        if member is not None:
            error = error or UnknownMemberIdError(
                f"member {member_id} was removed from group {group.group_id}"
            )
            self._effects.add(group.complete_join(member, JoinGroupResponse(error, UNKNOWN_MEMBER_ID)))
            self._effects.add(group.complete_sync(member, SyncGroupResponse(error)))
            self._effects.add(group.complete_heartbeat(member, HeartbeatResponse(error)))
        group.remove(member_id)
        self._effects.cancel(heartbeat_key(group, member_id))
        self._effects.cancel(held_heartbeat_key(group, member_id))

    # -- SyncGroup -------------------------------------------------------------------------------

    def sync_group(self, request: SyncGroupRequest, reply_to: Hashable) -> None:
        """SyncGroup; a follower's answer waits for the leader's assignment to be written."""
        assert reply_to is not None, "reply_to None cannot be told apart from no parked request"
        group = self._groups.get(request.group_id)
        if group is None or not group.members:
            error: GroupError | None = UnknownMemberIdError(
                f"group {request.group_id} has no members"
            )
        else:
            error = self._validate_sync(group, request)
        if error is None and group.is_in(GroupState.PREPARING_REBALANCE):
            error = RebalanceInProgressError(f"group {group.group_id} is rebalancing")
        if error is not None:
            self._effects.reply(reply_to, SyncGroupResponse(error))
            return
        member = group.members[request.member_id]
        if group.is_in(GroupState.STABLE):
            group.pending_sync_members.discard(member.member_id)
            self._effects.reply(reply_to, SyncGroupResponse(
                None, group.protocol_type, group.protocol_name, member.assignment
            ))
            return
        # CompletingRebalance: park until the leader's assignment is written.
        if member.is_awaiting_sync:
            self._effects.add(group.complete_sync(member, SyncGroupResponse(
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
                    group.transition_to(GroupState.STABLE, self._effects.now_ms)
                    logger.info("group %s: generation %d is Stable", group.group_id, generation)

            def failed(error: GroupError) -> None:
                if group.is_in(GroupState.COMPLETING_REBALANCE) and \
                        group.generation_id == generation:
                    self._reset_and_propagate_assignment(group, error)
                    self._maybe_prepare_rebalance_or_complete_join(group)

            self._effects.append((group.to_record(assignment),), written, failed)

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
                self._effects.add(reply)
                # A session that ran out while the member waited was passed over: restart it.
                self.reschedule_heartbeat(group, member)

    # -- Heartbeat, LeaveGroup -------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest, reply_to: Hashable) -> None:
        """Heartbeat: keeps the member's session; says whether a rebalance is under way.

        A held heartbeat (``max_wait_ms`` > 0) that would be answered OK is parked instead, for
        ``min(max_wait_ms, session timeout / 2)``: the half leaves the member the other half of
        its session to send the next one. It is answered REBALANCE_IN_PROGRESS when the group
        starts a rebalance (:meth:`_prepare_rebalance`), with the member's error when it is
        removed or fenced, NOT_COORDINATOR on unload, else OK when the wait ends. A member's
        second held heartbeat answers its first OK (the client gave up on it).
        """
        assert reply_to is not None, "reply_to None cannot be told apart from no parked request"
        error = self._heartbeat(request)
        if error is not None or request.max_wait_ms <= 0:
            self._effects.reply(reply_to, HeartbeatResponse(error))
            return
        group = self._groups[request.group_id]
        member = group.members[request.member_id]
        self._effects.add(group.complete_heartbeat(member, HeartbeatResponse(None)))
        member.heartbeat_reply_to = reply_to
        wait_ms = min(request.max_wait_ms, member.session_timeout_ms // 2)
        member_id = member.member_id
        self._effects.schedule(held_heartbeat_key(group, member_id), wait_ms,
                               lambda: self._end_held_heartbeat(group, member_id, reply_to))

    def _end_held_heartbeat(self, group: ClassicGroup, member_id: str, reply_to: Hashable) -> None:
        """A held heartbeat's wait ended with nothing to tell: answer it OK."""
        member = group.members.get(member_id)
        if member is not None and member.heartbeat_reply_to == reply_to:
            self._effects.add(group.complete_heartbeat(member, HeartbeatResponse(None)))

    def _heartbeat(self, request: HeartbeatRequest) -> GroupError | None:
        group = self._groups.get(request.group_id)
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
        self.reschedule_heartbeat(group, member)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return RebalanceInProgressError(f"group {group.group_id} is rebalancing")
        return None

    def leave_group(self, request: LeaveGroupRequest, reply_to: Hashable) -> None:
        """LeaveGroup: remove members (by member id, or an admin's instance id alone)."""
        group = self._groups.get(request.group_id)
        if group is None:
            self._effects.reply(reply_to, LeaveGroupResponse(
                UnknownMemberIdError(f"group {request.group_id} does not exist")
            ))
            return
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
                    self.drop_member(group, static_id, None)
            elif group.is_pending_member(leaving.member_id):
                self.drop_member(group, leaving.member_id, None)
            else:
                try:
                    group.validate_member(leaving.member_id, leaving.group_instance_id)
                    self.drop_member(group, leaving.member_id, None)
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
        self._effects.reply(reply_to, LeaveGroupResponse(None, tuple(left)))

    # -- helpers -------------------------------------------------------------------------------

    def reschedule_heartbeat(self, group: ClassicGroup, member: GroupMember) -> None:
        """Restart ``member``'s session timeout (a heartbeat, a commit, a completed round)."""
        member_id = member.member_id
        self._effects.schedule(heartbeat_key(group, member_id), member.session_timeout_ms,
                               lambda: self._expire_heartbeat(group.group_id, member_id))

    @staticmethod
    def _inconsistent_protocol(group: ClassicGroup, request: JoinGroupRequest) -> GroupError:
        return InconsistentGroupProtocolError(
            f"group {group.group_id} ({group.protocol_type}) supports none of "
            f"{request.protocol_type} {sorted(_names(request.protocols))}"
        )


def _names(protocols: tuple[tuple[str, bytes], ...]) -> frozenset[str]:
    return frozenset(name for name, _ in protocols)


def heartbeat_key(group: ClassicGroup, member_id: str) -> TimerKey:
    return ("heartbeat", group.group_id, member_id)


def held_heartbeat_key(group: ClassicGroup, member_id: str) -> TimerKey:
    return ("held-heartbeat", group.group_id, member_id)


def join_key(group: ClassicGroup) -> TimerKey:
    return ("join", group.group_id)


def sync_key(group: ClassicGroup) -> TimerKey:
    return ("sync", group.group_id)
