"""A classic group: members, generation, protocol, leader, state, pending and static members.

As Kafka's ``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/classic/
ClassicGroup.java``: the data and its local rules (who may join, which protocol wins the vote,
which transitions are allowed, what a commit must carry); the protocol's flow across members and
time (rebalances, timers, writes) is :mod:`.group_coordinator`'s.

Invariants (:meth:`ClassicGroup.check` asserts them; the tests call it after every step):

* the leader is a member, and there is one iff the group has members;
* ``static_members`` maps each static member's instance id to its member id, and only those;
* ``awaiting_join_count`` equals the number of members with a parked JoinGroup;
* a pending (KIP-394) member id is not a member; pending-sync ids are members;
* ``protocol_type`` is set while the group has members, and every member shares it;
* in CompletingRebalance and Stable the group has members and a chosen protocol every member
  supports; in Empty it has none;
* in PreparingRebalance no member holds a heartbeat (the move there answered them).

Crash behaviour: all of this is memory. What survives is the last :class:`GroupMetadataRecord`
written for the group (:meth:`to_record`), from which :meth:`from_record` rebuilds an Empty or
Stable group; parked requests (held heartbeats included) and pending members are lost with the connections that sent them.

Not thread-safe; the coordinator serialises every call.
"""

from __future__ import annotations

from collections.abc import Hashable

from .group_errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from .group_member import GroupMember
from .group_messages import HeartbeatResponse, JoinGroupResponse, Reply, SyncGroupResponse
from .group_records import GroupMetadataRecord, MemberMetadata
from .group_state import GroupState

__all__ = ["ClassicGroup"]


class ClassicGroup:
    """One classic group (see the module docstring for its invariants)."""

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.previous_state = GroupState.EMPTY
        #: When the group entered ``state`` (an Empty group's offsets expire counting from it).
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        # Insertion-ordered: a departed leader is replaced by the oldest member, as Kafka's
        # LinkedHashMap iteration does.
        self.members: dict[str, GroupMember] = {}
        self.static_members: dict[str, str] = {}
        #: KIP-394: member ids handed out with MEMBER_ID_REQUIRED, not yet rejoined.
        self.pending_join_members: set[str] = set()
        #: Members of the new generation whose SyncGroup has not arrived yet.
        self.pending_sync_members: set[str] = set()
        self.awaiting_join_count = 0
        #: During an initial rebalance (from Empty): a member joined since the delay was set.
        self.new_member_added = False
        self._supported_protocols: dict[str, int] = {}

    # -- queries -------------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def has_all_members_joined(self) -> bool:
        """Every member has a parked JoinGroup and no KIP-394 member is still on its way."""
        return len(self.members) == self.awaiting_join_count and not self.pending_join_members

    def not_yet_rejoined(self) -> list[GroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the members: how long a rebalance may wait."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        """Whether a rebalance may start now (Empty, CompletingRebalance or Stable)."""
        return self.state.can_transition_to(GroupState.PREPARING_REBALANCE)

    def supports_protocols(self, protocol_type: str, names: frozenset[str]) -> bool:
        """Whether a member with this type and protocol names may join (Kafka's rule).

        An Empty group takes any non-empty type and list; otherwise the type must be the group's
        and one name must be supported by every current member.
        """
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and any(
            self._supported_protocols.get(name, 0) == len(self.members) for name in names
        )

    def select_protocol(self) -> str:
        """The protocol of the next generation: every member votes for its most preferred one
        among those all members support; the most votes wins (ties: the first counted)."""
        assert self.members, f"group {self.group_id}: no protocol to select without members"
        candidates = frozenset(
            name for name, count in self._supported_protocols.items() if count == len(self.members)
        )
        votes: dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def validate_member(self, member_id: str, group_instance_id: str | None) -> None:
        """Raise UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID unless ``member_id`` is a current member
        (and, for a static member, the one holding its instance id)."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                raise UnknownMemberIdError(
                    f"group {self.group_id}: no static member with instance id {group_instance_id}"
                )
            if existing != member_id:
                raise FencedInstanceIdError(
                    f"group {self.group_id}: instance id {group_instance_id} is held by member "
                    f"{existing}, not {member_id}"
                )
        if member_id not in self.members:
            raise UnknownMemberIdError(f"group {self.group_id}: no member {member_id!r}")

    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        *,
        transactional: bool,
    ) -> None:
        """Raise unless a commit with this identity may be written (ClassicGroup.java's rules).

        * a Dead group: COORDINATOR_NOT_AVAILABLE;
        * generation < 0 on an Empty group: a simple commit (admin, or a consumer without group
          management), always allowed;
        * a member id, instance id or generation given: it must be a current member of the
          current generation (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / ILLEGAL_GENERATION);
        * neither given, the group not Empty: UNKNOWN_MEMBER_ID (plain commits only; an old
          TxnOffsetCommit carries no member);
        * a plain commit while CompletingRebalance: REBALANCE_IN_PROGRESS (the member has its
          generation but not yet its assignment).
        """
        if self.state is GroupState.DEAD:
            raise CoordinatorNotAvailableError(f"group {self.group_id} is Dead")
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return
        if generation_id >= 0 or member_id or group_instance_id is not None:
            self.validate_member(member_id, group_instance_id)
            if generation_id != self.generation_id:
                raise IllegalGenerationError(
                    f"group {self.group_id}: generation {generation_id} is not the group's "
                    f"{self.generation_id}"
                )
        elif not transactional and self.state is not GroupState.EMPTY:
            raise UnknownMemberIdError(
                f"group {self.group_id} is {self.state.value}: a commit without a member id "
                "is accepted only while it has no members"
            )
        if not transactional and self.state is GroupState.COMPLETING_REBALANCE:
            raise RebalanceInProgressError(
                f"group {self.group_id} is completing the rebalance to generation "
                f"{self.generation_id}"
            )

    # -- membership ----------------------------------------------------------------------------

    def add(self, member: GroupMember, join_reply_to: Hashable | None = None) -> None:
        """Add a member (its JoinGroup parked under ``join_reply_to`` when given)."""
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self.static_members, (
                f"group {self.group_id}: instance id {member.group_instance_id} already a member"
            )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        assert member.protocol_type == self.protocol_type, "member and group protocol types differ"
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, +1)
        member.join_reply_to = join_reply_to
        if member.is_awaiting_join:
            self.awaiting_join_count += 1
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        """Remove a member or a pending member id (the leader passes to the oldest member)."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            if member.is_awaiting_join:
                self.awaiting_join_count -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def add_pending_member(self, member_id: str) -> None:
        assert member_id not in self.members, f"pending member {member_id} is already a member"
        self.pending_join_members.add(member_id)

    def update_member(
        self,
        member: GroupMember,
        protocols: tuple[tuple[str, bytes], ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_reply_to: Hashable | None,
    ) -> None:
        """Take a rejoining member's new protocols and timeouts; park (or unpark) its join."""
        self._count_protocols(member, -1)
        member.protocols = tuple(protocols)
        self._count_protocols(member, +1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if join_reply_to is not None and not member.is_awaiting_join:
            self.awaiting_join_count += 1
        elif join_reply_to is None and member.is_awaiting_join:
            self.awaiting_join_count -= 1
        member.join_reply_to = join_reply_to

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> tuple[GroupMember, list[Reply]]:
        """Give ``group_instance_id`` a new member id (a static member restarted).

        The old id's parked join, sync or held heartbeat is answered FENCED_INSTANCE_ID at once (it is
        a duplicate or a zombie). The new member keeps the old one's protocols, timeouts and
        assignment, and the leadership if the old one led. Returns it and the fencing replies.
        """
        old = self.members.pop(old_member_id)
        replies: list[Reply] = []
        fenced = FencedInstanceIdError(
            f"group {self.group_id}: instance id {group_instance_id} rejoined as {new_member_id}"
        )
        if old.is_awaiting_join:
            replies.append(Reply(old.join_reply_to, JoinGroupResponse(fenced, old_member_id)))
            old.join_reply_to = None
            self.awaiting_join_count -= 1
        if old.is_awaiting_sync:
            replies.append(Reply(old.sync_reply_to, SyncGroupResponse(fenced)))
            old.sync_reply_to = None
        if old.is_holding_heartbeat:
            replies.append(Reply(old.heartbeat_reply_to, HeartbeatResponse(fenced)))
            old.heartbeat_reply_to = None
        new = GroupMember(
            member_id=new_member_id,
            group_instance_id=group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        self.pending_sync_members.discard(old_member_id)
        return new, replies

    def maybe_elect_new_joined_leader(self) -> bool:
        """Make a member that rejoined the leader if the current one did not rejoin.

        Returns False when no member rejoined at all (the rebalance cannot complete), or when
        the group has no leader (no members).
        """
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- state ---------------------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        """Move to ``target``; a transition Kafka does not allow is a programmer error."""
        assert self.state.can_transition_to(target), (
            f"group {self.group_id}: {self.state.value} -> {target.value} is not allowed "
            f"(only from {sorted(s.value for s in target.valid_previous_states)})"
        )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def init_next_generation(self, now_ms: int) -> None:
        """Start the next generation: CompletingRebalance with a chosen protocol, or Empty."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def complete_join(self, member: GroupMember, response: object) -> Reply | None:
        """Answer ``member``'s parked JoinGroup, if it has one."""
        if not member.is_awaiting_join:
            return None
        reply = Reply(member.join_reply_to, response)
        member.join_reply_to = None
        self.awaiting_join_count -= 1
        return reply

    def complete_heartbeat(self, member: GroupMember, response: object) -> Reply | None:
        """Answer ``member``'s held heartbeat, if it has one."""
        if not member.is_holding_heartbeat:
            return None
        reply = Reply(member.heartbeat_reply_to, response)
        member.heartbeat_reply_to = None
        return reply

    def complete_heartbeats(self, response: object) -> list[Reply]:
        """Answer every member's held heartbeat with ``response``."""
        replies = []
        for member in self.members.values():
            reply = self.complete_heartbeat(member, response)
            if reply is not None:
                replies.append(reply)
        return replies

    def complete_sync(self, member: GroupMember, response: object) -> Reply | None:
        """Answer ``member``'s parked SyncGroup, if it has one."""
        if not member.is_awaiting_sync:
            return None
        reply = Reply(member.sync_reply_to, response)
        member.sync_reply_to = None
        return reply

    # -- persistence ---------------------------------------------------------------------------

    def to_record(self, assignments: dict[str, bytes] | None = None) -> GroupMetadataRecord:
        """The group as a GroupMetadataValue, with ``assignments`` (else each member's own)."""
        return GroupMetadataRecord(
            group_id=self.group_id,
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata(self.protocol_name),
                    assignment=m.assignment if assignments is None else assignments[m.member_id],
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def from_record(cls, record: GroupMetadataRecord, now_ms: int) -> ClassicGroup:
        """Rebuild a group from its last record: Stable with its members, or Empty."""
        stamp = record.current_state_timestamp_ms
        group = cls(record.group_id, stamp if stamp >= 0 else now_ms)
        group.generation_id = record.generation
        group.protocol_type = record.protocol_type or None
        group.protocol_name = record.protocol
        for meta in record.members:
            group.add(
                GroupMember(
                    member_id=meta.member_id,
                    group_instance_id=meta.group_instance_id,
                    client_id=meta.client_id,
                    client_host=meta.client_host,
                    rebalance_timeout_ms=meta.rebalance_timeout_ms,
                    session_timeout_ms=meta.session_timeout_ms,
                    protocol_type=record.protocol_type,
                    protocols=((record.protocol or "", meta.subscription),),
                    assignment=meta.assignment,
                )
            )
        group.leader_id = record.leader if record.leader in group.members else group.leader_id
        if group.members:
            group.state = GroupState.STABLE
        return group

    # -- invariants ----------------------------------------------------------------------------

    def _count_protocols(self, member: GroupMember, delta: int) -> None:
        for name in member.protocol_names:
            self._supported_protocols[name] = self._supported_protocols.get(name, 0) + delta
            if self._supported_protocols[name] == 0:
                del self._supported_protocols[name]

    def check(self) -> None:
        """Assert the invariants of the module docstring (for tests; O(members))."""
        assert (self.leader_id is None) == (not self.members), (self.leader_id, list(self.members))
        assert self.leader_id is None or self.leader_id in self.members
        assert self.static_members == {
            m.group_instance_id: m.member_id for m in self.members.values() if m.is_static
        }
        assert self.awaiting_join_count == sum(m.is_awaiting_join for m in self.members.values())
        assert not (self.pending_join_members & self.members.keys())
        assert self.pending_sync_members <= self.members.keys()
        for member in self.members.values():
            assert member.protocol_type == self.protocol_type
        if self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            assert self.members, f"{self.state.value} group without members"
            assert self.protocol_name is not None
            for member in self.members.values():
                assert self.protocol_name in member.protocol_names
        if self.state is GroupState.PREPARING_REBALANCE:
            # Moving here answered every held heartbeat, and none is held while here.
            assert not any(m.is_holding_heartbeat for m in self.members.values())
        if self.state is GroupState.EMPTY:
            assert not self.members
