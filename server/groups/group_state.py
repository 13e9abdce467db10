"""The five states of a classic group and which transitions Kafka allows between them.

As Kafka's ``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/classic/
ClassicGroupState.java``::

    Empty ──join──▶ PreparingRebalance ──all joined / rebalance timeout──▶ CompletingRebalance
      ▲                 ▲      │  ▲                                          │        │
      │                 │      │  └──── a member joins, leaves or fails ─────┘        │
      └── last member ──┘      │                                          leader's SyncGroup
          left or failed       │                                          written    │
                               └──◀── a member joins, leaves or fails ── Stable ◀───┘
    any state ──▶ Dead (group deleted, or its offsets all expired while Empty)

* **Empty**: no members; the group exists for its committed offsets (or was just created).
* **PreparingRebalance**: members are (re)joining; JoinGroup requests are parked until every
  known member has rejoined or the rebalance timeout passes.
* **CompletingRebalance**: the generation is chosen; waiting for the leader's SyncGroup with
  the assignment. Followers' SyncGroups are parked.
* **Stable**: every member has its assignment; heartbeats keep the members in.
* **Dead**: the group is gone from this coordinator; every request is refused with
  COORDINATOR_NOT_AVAILABLE (the client finds the coordinator again).
"""

from __future__ import annotations

import enum

__all__ = ["GroupState"]


class GroupState(enum.Enum):
    """A classic group's state; ``value`` is Kafka's name (ListGroups and DescribeGroups show it)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def valid_previous_states(self) -> frozenset[GroupState]:
        """The states from which a group may move to this one."""
        return _VALID_PREVIOUS[self]

    def can_transition_to(self, target: GroupState) -> bool:
        """Whether ``self -> target`` is one of Kafka's allowed transitions."""
        return self in _VALID_PREVIOUS[target]


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}
