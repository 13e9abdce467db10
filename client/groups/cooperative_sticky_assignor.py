"""The ``cooperative-sticky`` assignor: sticky and balanced, in the cooperative protocol's two phases.

The default assignor of a stratalog consumer, as of Kafka's since 3.0 (with range). It computes
the sticky assignment (:mod:`.sticky_assignment`) and then applies the cooperative rule (KIP-429):
**a partition that moves is first revoked by its owner**. Any partition the sticky assignment
gives to a member while another member still reports owning it is left out of this rebalance's
assignment altogether. The owner, finding it missing from its new assignment, revokes it (stops
fetching, commits, calls its revoked callback) and rejoins; in that follow-up rebalance nobody
claims it and the sticky assignment gives it to its new owner. Every other partition stays
where it is throughout, so members keep consuming what the rebalance does not move.

Example: A owns t0-t5 (6 partitions, generation 3); B joins. Rebalance 1: the sticky assignment
is A: t0-t2, B: t3-t5, but A still owns t3-t5, so B gets nothing yet and A keeps t0-t2. A revokes
t3-t5 and rejoins. Rebalance 2: A owns t0-t2, nobody claims t3-t5: B gets them.

The generation of a member's ``owned_partitions`` comes from its subscription (version 2+);
a member writing version 0 or 1 puts it in the user data instead, as a 4-byte int32
(:meth:`CooperativeStickyAssignor.subscription_user_data`, Kafka's
COOPERATIVE_STICKY_ASSIGNOR_USER_DATA_V0), which this assignor reads back when the field is
absent. Kafka's ``clients/src/main/java/org/apache/kafka/clients/consumer/CooperativeStickyAssignor.java``.

Holds one piece of state, the generation of the last assignment this member received; not
thread-safe (a consumer calls it from one task).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

from stratalog.client.types import TopicPartition

from .assignor import Member, PartitionAssignor, RebalanceProtocol
from .consumer_protocol import Assignment, Subscription
from .sticky_assignment import sticky_assignment

__all__ = ["CooperativeStickyAssignor"]

# The user data's one field: the generation, int32 (Kafka's "generation" Field of Type.INT32).
_GENERATION = struct.Struct(">i")
_NO_GENERATION = -1


class CooperativeStickyAssignor(PartitionAssignor):
    """Sticky, balanced, and cooperative (see the module docstring)."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def __init__(self) -> None:
        # The generation of the last assignment this member received; -1 before the first.
        self.generation = _NO_GENERATION

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        """The generation this member's owned partitions are from, for leaders reading v0/v1."""
        return _GENERATION.pack(self.generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self.generation = generation_id

    @staticmethod
    def member_generation(subscription: Subscription) -> int | None:
        """The generation of ``subscription.owned_partitions``: its field, else its user data.

        (Kafka's CooperativeStickyAssignor.memberData.) User data that is not a 4-byte int32
        counts as no generation (-1), as Kafka's does on a parse failure; none at all, as
        unknown (``None``). Both rank below any real generation.
        """
        if subscription.generation_id is not None:
            return subscription.generation_id
        if subscription.user_data is None:
            return None
        if len(subscription.user_data) < _GENERATION.size:
            return _NO_GENERATION
        return _GENERATION.unpack_from(subscription.user_data, 0)[0]

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[Member]
    ) -> dict[str, list[TopicPartition]]:
        generations = {m.member_id: self.member_generation(m.subscription) for m in members}
        assignment = sticky_assignment(partitions_per_topic, members, generations)
        # The cooperative rule: a partition some other member still reports owning waits for
        # the follow-up rebalance (Kafka's adjustAssignment). Claims are taken as reported, of
        # any generation: a member with a stale claim may still be fetching the partition.
        claimants: dict[TopicPartition, set[str]] = {}
        for member in members:
            for tp in member.subscription.owned_partitions:
                claimants.setdefault(tp, set()).add(member.member_id)
        return {
            member_id: [tp for tp in parts if not claimants.get(tp, set()) - {member_id}]
            for member_id, parts in assignment.items()
        }
