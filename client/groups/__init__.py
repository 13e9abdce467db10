"""stratalog.client.groups: what a consumer does inside Kafka's classic group protocol, sans-IO.

The pieces a group consumer needs besides the RPCs themselves (issue 27, docs/groups.md,
"Assignors and the consumer protocol"):

* :mod:`.consumer_protocol` -- the bytes members exchange through the coordinator: the
  ConsumerProtocolSubscription a member sends in JoinGroup and the ConsumerProtocolAssignment
  the leader returns in SyncGroup, versions 0-3, as Kafka's clients write them.
* :mod:`.assignor` -- the assignor contract (:class:`PartitionAssignor`), its check, and the
  leader's step from JoinGroup metadata to SyncGroup assignments (:func:`perform_assignment`).
* The assignors, Kafka's three: :class:`RangeAssignor` (``range``),
  :class:`RoundRobinAssignor` (``roundrobin``) and :class:`CooperativeStickyAssignor`
  (``cooperative-sticky``, the default), the last over :mod:`.sticky_assignment`.
* :mod:`.assignment_change` -- what a member revokes, loses and adds around a rebalance, and
  whether it must rejoin.
* :mod:`.group_membership` -- the consumer's member of a group (:class:`GroupMembership`,
  Kafka's AbstractCoordinator + ConsumerCoordinator): events in, actions out
  (:mod:`.membership_messages`), over :mod:`.member_offsets` (commits and start positions),
  :mod:`.consumed_positions` (what the reader was handed), :mod:`.member_state` and
  :mod:`.membership_config`.

Nothing here does I/O, awaits or holds a lock: bytes and values in, values out. The Consumer
(client/consumer.py) drives these from its group-membership task (docs/client.md, "Consumer
groups (the membership core)").
"""

from __future__ import annotations

from .assignment_change import AssignmentChange, JoinPreparation, after_sync, before_join
from .assignor import (
    JoinedMember,
    Member,
    PartitionAssignor,
    RebalanceProtocol,
    check_assignment,
    perform_assignment,
)
from .consumer_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from .cooperative_sticky_assignor import CooperativeStickyAssignor
from .group_membership import GroupMembership
from .member_state import MemberState
from .membership_config import MembershipConfig
from .membership_messages import GroupMetadata, Output
from .range_assignor import RangeAssignor
from .round_robin_assignor import RoundRobinAssignor

#: The assignors by the protocol name members advertise, the default first (Kafka's
#: ``partition.assignment.strategy`` default since 3.0 is range then cooperative-sticky; ours
#: puts cooperative-sticky first, as issue 27 asks).
ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
}

__all__ = [
    "ASSIGNORS",
    "PROTOCOL_TYPE",
    "Assignment",
    "AssignmentChange",
    "ConsumerProtocolError",
    "CooperativeStickyAssignor",
    "GroupMembership",
    "GroupMetadata",
    "JoinPreparation",
    "JoinedMember",
    "Member",
    "MemberState",
    "MembershipConfig",
    "Output",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "Subscription",
    "after_sync",
    "before_join",
    "check_assignment",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "perform_assignment",
]
