"""Which brokers hold a new partition's replicas: Kafka's replica assignment, rack-unaware and
rack-aware, for a new topic (CreateTopic) and for partitions added to one (CreatePartitions).

Kafka's ``AdminUtils.assignReplicasToBrokers`` (``server-common/src/main/java/org/apache/kafka/
admin/AdminUtils.java``, tested by ``core/src/test/scala/unit/kafka/admin/AdminRackAwareTest.scala``),
which ZooKeeper-era Kafka and ``kafka-topics`` used and KRaft's ``StripedReplicaPlacer``
(``metadata/src/main/java/org/apache/kafka/metadata/placement/StripedReplicaPlacer.java``)
follows in spirit. Two rules, both spreading leaders (the first replica) evenly:

* **No broker has a rack** (``broker_rack`` empty everywhere): rack-unaware round robin.
  Partition p's replicas are ``replication_factor`` consecutive brokers (by node id) from
  position ``start + p``, so leaders rotate over the brokers. This is stratalog's assignment
  since issue 17, kept exactly (a cluster without racks assigns as before); Kafka's
  rack-unaware variant also shifts the followers by a random amount per pass over the
  brokers, which we do not.
* **Every broker has a rack**: Kafka's ``assignReplicasToBrokersRackAware``. The brokers are
  first arranged rack-alternated (racks sorted, one broker of each in turn: racks a: [1, 2],
  b: [3], c: [4] give 1, 3, 4, 2); partition p's leader is the broker at position
  ``(start + p) % n`` of that list, and each further replica is the next broker, walking with a
  shift, that is on a rack holding no replica of p yet (unless every rack has one) and is not a
  replica of p yet. So a partition's replicas are on ``min(replication_factor, racks)``
  distinct racks.
* **Some brokers have a rack, others not**: refused (Kafka's ``RackAwareMode.Enforced``, what
  its CreateTopics uses): the operator sets ``broker_rack`` on every server or on none.

**Adding partitions** continues the topic's assignment, as Kafka's ``createPartitions``: the
replication factor is partition 0's, and the start position is where partition 0's leader is
among the brokers, so that partition ``current + k`` gets what a topic created with more
partitions would have given it (with the same brokers).

Pure functions; no I/O. Complexity: O(partitions * replication_factor * brokers) at worst
(the rack-aware walk skips at most every broker once per replica).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .errors import InvalidReplicationFactorError

__all__ = ["assign_replicas", "rack_alternated", "rack_aware", "rack_unaware", "replacement_broker",
           "start_index_of"]


def rack_unaware(first_partition: int, partitions: int, replication_factor: int,
                 brokers: Sequence[int], start: int) -> dict[int, tuple[int, ...]]:
    """Partitions ``first_partition .. first_partition + partitions - 1``: partition p's
    replicas are ``replication_factor`` consecutive brokers (by node id) from position
    ``start + p`` (module docstring). ``brokers`` hold at least ``replication_factor`` ids."""
    ordered = sorted(brokers)
    count = len(ordered)
    assert 1 <= replication_factor <= count, (replication_factor, ordered)
    return {
        p: tuple(ordered[(start + p + r) % count] for r in range(replication_factor))
        for p in range(first_partition, first_partition + partitions)
    }


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """The brokers one rack at a time (racks by name, each rack's brokers by node id): Kafka's
    ``getRackAlternatedBrokerList``. ``{1: "a", 2: "a", 3: "b", 4: "c"}`` -> ``[1, 3, 4, 2]``."""
    by_rack: dict[str, list[int]] = {}
    for node_id in sorted(racks):
        by_rack.setdefault(racks[node_id], []).append(node_id)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    arranged: list[int] = []
    depth = 0
    while len(arranged) < len(racks):
        arranged.extend(queue[depth] for queue in queues if depth < len(queue))
        depth += 1
    return arranged


def _replica_index(first: int, shift: int, k: int, count: int) -> int:
    """Kafka's ``AdminUtils.replicaIndex``: the k-th follower candidate after ``first``."""
    if count == 1:
        return first
    return (first + 1 + (shift + k) % (count - 1)) % count


def rack_aware(first_partition: int, partitions: int, replication_factor: int,
               racks: Mapping[int, str], start: int, shift: int) -> dict[int, tuple[int, ...]]:
    """Kafka's ``assignReplicasToBrokersRackAware`` (module docstring) for partitions
    ``first_partition ..``; ``racks``: every broker's rack; ``start``, ``shift``: positions in
    the rack-alternated list (Kafka picks them at random for a new topic)."""
    arranged = rack_alternated(racks)
    count = len(arranged)
    rack_count = len(set(racks.values()))
    assert 1 <= replication_factor <= count, (replication_factor, arranged)
    assigned: dict[int, tuple[int, ...]] = {}
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % count == 0:
            shift += 1
        first = (p + start) % count
        leader = arranged[first]
        replicas = [leader]
        racks_used, brokers_used = {racks[leader]}, {leader}
        k = 0
        while len(replicas) < replication_factor:
            broker = arranged[_replica_index(first, shift * rack_count, k, count)]
            rack = racks[broker]
            # Kafka's two skips: a rack that has a replica while another rack has none, and a
            # broker that has one while another broker has none.
            if ((rack not in racks_used or len(racks_used) == rack_count)
                    and (broker not in brokers_used or len(brokers_used) == count)):
                replicas.append(broker)
                racks_used.add(rack)
                brokers_used.add(broker)
            k += 1
            assert k <= count * replication_factor + count, "the rack-aware walk must end"
        assigned[p] = tuple(replicas)
    return assigned


def start_index_of(existing: Mapping[int, tuple[int, ...]], racks: Mapping[int, str]) -> int:
    """Where partition 0's leader stands among the brokers (rack-alternated when there are
    racks), the start position that continues a topic's assignment; 0 when it is gone
    (Kafka: ``max(0, allBrokers.indexWhere(_.id >= existingAssignmentPartition0.head))``)."""
    leader = existing[0][0]
    if racks and all(racks.values()):
        arranged = rack_alternated(racks)
        return arranged.index(leader) if leader in arranged else 0
    return next((index for index, node_id in enumerate(sorted(racks)) if node_id >= leader), 0)


def assign_replicas(first_partition: int, partitions: int, replication_factor: int,
                    racks: Mapping[int, str], start: int, shift: int = 0
                    ) -> dict[int, tuple[int, ...]]:
    """The replicas of partitions ``first_partition ..`` over the brokers ``racks`` (node id ->
    rack, "" for none): rack-aware when every broker has a rack, rack-unaware when none has
    (module docstring).

    Raises:
        InvalidReplicationFactorError: ``replication_factor`` above the brokers, or some
            brokers have a rack and others not.
    """
    brokers = sorted(racks)
    if not 1 <= replication_factor <= len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {len(brokers)} live"
            f" broker(s) (node ids {brokers}): a partition's replicas must be on distinct"
            " brokers"
        )
    with_rack = [node_id for node_id in brokers if racks[node_id]]
    if not with_rack:
        return rack_unaware(first_partition, partitions, replication_factor, brokers, start)
    if len(with_rack) != len(brokers):
        without = [node_id for node_id in brokers if not racks[node_id]]
        raise InvalidReplicationFactorError(
            f"brokers {with_rack} have a rack (broker_rack) and brokers {without} have none:"
            " rack-aware assignment needs a rack on every live broker (set broker_rack on"
            " every server, or on none)"
        )
    return rack_aware(first_partition, partitions, replication_factor, racks, start, shift)


def replacement_broker(leaving: int, kept: Sequence[int], racks: Mapping[int, str],
                       load: Mapping[int, int]) -> int | None:
    """The broker that takes a drained replica (reassignment.py's drain): a live broker
    (``racks``: node id -> rack, "" for none) other than ``leaving`` and the partition's
    ``kept`` replicas; with racks, one on a rack none of ``kept`` is on when there is one
    (so the partition keeps its spread over racks); the least loaded (``load``: replicas per
    broker), then the lowest node id. None when no broker can take it."""
    candidates = [b for b in racks if b != leaving and b not in kept]
    if not candidates:
        return None
    used_racks = {racks.get(b, "") for b in kept}
    return min(candidates, key=lambda b: (bool(racks[b]) and racks[b] in used_racks,
                                          load.get(b, 0), b))
