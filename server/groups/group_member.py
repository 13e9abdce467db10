"""One member of a classic group: its identity, timeouts, protocols, assignment and parked requests.

As Kafka's ``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/classic/
ClassicGroupMember.java``, with the parked JoinGroup/SyncGroup "futures" replaced by the
caller's reply tokens (``join_reply_to``, ``sync_reply_to``): a member is *awaiting join* while
its JoinGroup is parked and *awaiting sync* while its SyncGroup is. ``heartbeat_reply_to`` is a
held heartbeat (ours, not Kafka's: docs/groups.md "Held heartbeats"). Completing one means emitting
a :class:`~.group_messages.Reply` for the token and clearing it; :class:`~.classic_group.
ClassicGroup` does both, so its count of members awaiting join stays exact.

Not thread-safe; the coordinator serialises every call (one group partition, one caller).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["GroupMember"]


@dataclass(slots=True, eq=False)
class GroupMember:
    """A member. ``protocols`` is its (name, metadata) list, most preferred first.

    ``is_new`` is True from the member's first join until its first generation completes: a new
    member's heartbeat deadline is ``new_member_join_timeout_ms`` and a parked join does not
    count as a heartbeat for it (a client that gave up must not stay in the group forever).
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_reply_to: Hashable | None = None
    sync_reply_to: Hashable | None = None
    #: The member's held heartbeat (at most one), answered when the group rebalances, the
    #: member goes, or its wait ends.
    heartbeat_reply_to: Hashable | None = None
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_reply_to is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_reply_to is not None

    @property
    def is_holding_heartbeat(self) -> bool:
        return self.heartbeat_reply_to is not None

    @property
    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)

    def has_satisfied_heartbeat(self) -> bool:
        """Whether a heartbeat expiry may pass over this member (Kafka's hasSatisfiedHeartbeat).

        An existing member parked in JoinGroup or SyncGroup is waiting on the group, not dead;
        a new member is not given that grace.
        """
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Whether ``protocols`` equals the member's own (same names, metadata and order)."""
        return tuple(protocols) == self.protocols

    def vote(self, candidates: frozenset[str]) -> str:
        """The member's most preferred protocol among ``candidates`` (one must be supported)."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def metadata(self, protocol_name: str | None) -> bytes:
        """The member's metadata for ``protocol_name`` (b"" when it has none for it)."""
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""
