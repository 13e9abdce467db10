"""The ``roundrobin`` assignor: all partitions dealt out to the members in turn.

Every partition of every subscribed topic, sorted by topic then number, is dealt to the members
in :func:`~.assignor.member_sort_key` order (static members by ``group.instance.id``, then the
rest by member id), cyclically; a member not subscribed to a partition's topic is passed over
for it. With identical subscriptions the counts differ by at most one; with different ones the
deal can be uneven (Kafka's own example: C1 on t1, C2 on t1 and t2, C3 on t1, with 3 and 2
partitions, gives ``C1: t1p0``, ``C2: t1p1 t2p0 t2p1``, ``C3: t1p2``).

Kafka's RoundRobinAssignor
(``clients/src/main/java/org/apache/kafka/clients/consumer/RoundRobinAssignor.java``), eager
only. Pure function of its input; safe from any task or thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stratalog.client.types import TopicPartition

from .assignor import Member, PartitionAssignor, all_partitions, member_sort_key, members_by_id

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(PartitionAssignor):
    """Partitions dealt to members in turn (see the module docstring)."""

    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[Member]
    ) -> dict[str, list[TopicPartition]]:
        ordered = sorted(members_by_id(members).values(), key=member_sort_key)
        assignment: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        topics = {topic for m in ordered for topic in m.subscription.topics}
        turn = 0  # the member whose turn it is, as Kafka's CircularIterator
        for tp in all_partitions(partitions_per_topic, topics):
            # Some member subscribes to tp.topic (it came from a subscription), so this ends
            # within one lap.
            while tp.topic not in ordered[turn % len(ordered)].subscription.topics:
                turn += 1
            assignment[ordered[turn % len(ordered)].member_id].append(tp)
            turn += 1
        return assignment
