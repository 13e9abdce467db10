"""The ``range`` assignor: each topic's partitions cut into consecutive ranges, one per member.

For each topic, its partitions in number order and its subscribers in
:func:`~.assignor.member_sort_key` order (static members by ``group.instance.id``, then the rest
by member id): with ``P`` partitions and ``C`` subscribers, each subscriber gets ``P // C``
consecutive partitions and the first ``P % C`` one more. Two consumers, two topics of three
partitions: ``C0: t0p0 t0p1 t1p0 t1p1``, ``C1: t0p2 t1p2``. Topics with the same partition count
and the same subscribers are co-partitioned (partition ``i`` of each goes to the same member),
which is what a join of two keyed topics needs; the price is imbalance across topics (the first
members get the extra partition of every topic).

Kafka's RangeAssignor (``clients/src/main/java/org/apache/kafka/clients/consumer/RangeAssignor.java``)
also matches consumer racks to partition replica racks when both are known (KIP-881); the leader
here is given partition counts only, so that step never applies and the result is Kafka's
without racks. Eager only, as Kafka's.

Pure function of its input; safe from any task or thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stratalog.client.types import TopicPartition

from .assignor import Member, PartitionAssignor, member_sort_key, members_by_id

__all__ = ["RangeAssignor"]


class RangeAssignor(PartitionAssignor):
    """Consecutive ranges of each topic's partitions per member (see the module docstring)."""

    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[Member]
    ) -> dict[str, list[TopicPartition]]:
        ordered = sorted(members_by_id(members).values(), key=member_sort_key)
        assignment: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        for topic in sorted(partitions_per_topic):
            subscribers = [m.member_id for m in ordered if topic in m.subscription.topics]
            count = partitions_per_topic[topic]
            if not subscribers or count <= 0:
                continue
            per_member, extra = divmod(count, len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                size = per_member + (1 if i < extra else 0)
                assignment[member_id].extend(
                    TopicPartition(topic, p) for p in range(start, start + size)
                )
                start += size
        return assignment
