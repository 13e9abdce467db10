"""What etcd stores about each replicated topic and partition, and how it is encoded.

Two kinds of record (keys in layout.py), JSON so that ``etcdctl get --prefix`` is readable::

    <prefix>/topics/<topic>     {"partitions": {"0": [1, 2, 3], "1": [2, 3, 4, 1]},
                                 "configs": {"segment.bytes": "1048576"},
                                 "reassigning": {"1": {"adding": [4], "removing": [1]}}}
        TopicAssignment: the replicas of each partition, the preferred leader first, and the
        topic's configs. Written when the topic is created (a transaction that fails if the
        key exists), when partitions are added, and when a reassignment starts, is cancelled
        or completes (transactions that fail if the key moved since it was read;
        topic_admin.py, reassignment.py); deleted with the topic. replica_placement.py assigns
        the replicas of new partitions.
        ``reassigning`` (absent when empty): the partitions being reassigned, Kafka's
        ``addingReplicas`` / ``removingReplicas`` (ZooKeeper-era Kafka kept them in the same
        topic znode, ``adding_replicas`` / ``removing_replicas``). While a partition is being
        reassigned its replicas are the target followed by the replicas being removed, so
        every replica of either list is a replica: the target is the replicas without
        ``removing``, the original replicas are the replicas without ``adding``.

    <prefix>/partitions/<topic>/<n>   {"leader": 1, "leader_epoch": 4, "isr": [1, 2],
                                       "controller_epoch": 7}
        PartitionState: Kafka's LeaderAndIsr, as ZooKeeper-era Kafka kept it in
        /brokers/topics/<t>/partitions/<n>/state. ``leader`` is -1 while the partition has none.

Who writes a PartitionState, always with a transaction that compares the key's mod revision
with the one it read (a lost race re-reads; nothing is overwritten blind):

* CreateTopic writes the first one of each partition: leader = the first replica, epoch 0,
  ISR = every replica.
* The controller elects leaders (leader epoch + 1 on every change of leader) and removes dead
  brokers from ISRs, stamping its controller epoch; its transaction also compares the
  controller epoch key, so that a deposed controller's writes fail.
* The leader shrinks and expands its ISR (Kafka's AlterPartition; ZooKeeper-era Kafka's
  leaders wrote the ISR themselves the same way), keeping leader and leader epoch; its
  transaction fails if anyone changed the state since it read it, and a leader that finds a
  newer epoch there stops leading.

Decoding is strict: a value that is not one of these (a key someone else wrote, a field of the
wrong type) decodes to None and is ignored by readers, never half-read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .layout import decode_json

__all__ = ["NO_LEADER", "PartitionReassignment", "PartitionState", "TopicAssignment"]

#: ``leader`` of a partition that has none.
NO_LEADER = -1


def _node_ids(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value
    ):
        return None
    return tuple(value)


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """The replicas a partition being reassigned adds and removes (Kafka's
    ``PartitionRegistration.addingReplicas`` / ``removingReplicas``). Invariant: disjoint, and
    not both empty; both subsets of the partition's replicas (checked on decode)."""

    adding: tuple[int, ...]
    removing: tuple[int, ...]

    def target(self, replicas: tuple[int, ...]) -> tuple[int, ...]:
        """The replicas the partition ends with: ``replicas`` without the ones removed."""
        return tuple(r for r in replicas if r not in self.removing)

    def original(self, replicas: tuple[int, ...]) -> tuple[int, ...]:
        """The replicas it had before: ``replicas`` without the ones added."""
        return tuple(r for r in replicas if r not in self.adding)

    def encode_json(self) -> dict[str, list[int]]:
        return {"adding": list(self.adding), "removing": list(self.removing)}

    @classmethod
    def decode_json(cls, value: object, replicas: tuple[int, ...]
                    ) -> PartitionReassignment | None:
        if not isinstance(value, dict):
            return None
        adding, removing = _node_ids(value.get("adding")), _node_ids(value.get("removing"))
        if adding is None or removing is None or not (adding or removing):
            return None
        if set(adding) & set(removing) or not set(adding + removing) <= set(replicas):
            return None
        if not [r for r in replicas if r not in removing]:
            return None  # a target with no replica
        return cls(adding, removing)


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic's replicas per partition (partition number -> node ids, preferred leader first),
    its configs (Kafka topic config names -> values), and the partitions being reassigned."""

    replicas: dict[int, tuple[int, ...]]
    configs: dict[str, str] = field(default_factory=dict)
    reassigning: dict[int, PartitionReassignment] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    @property
    def replication_factor(self) -> int:
        """Partition 0's, as its target has it (a reassignment in progress lists more)."""
        return len(self.target(0)) if self.replicas else 0

    def target(self, partition: int) -> tuple[int, ...]:
        """The replicas ``partition`` has once its reassignment (if any) is done."""
        replicas = self.replicas[partition]
        reassignment = self.reassigning.get(partition)
        return reassignment.target(replicas) if reassignment is not None else replicas

    def encode(self) -> bytes:
        encoded: dict[str, object] = {
            "partitions": {str(number): list(nodes) for number, nodes in sorted(self.replicas.items())},
            "configs": dict(sorted(self.configs.items())),
        }
        if self.reassigning:
            encoded["reassigning"] = {str(number): reassignment.encode_json()
                                      for number, reassignment in sorted(self.reassigning.items())}
        return json.dumps(encoded).encode()

    @classmethod
    def decode(cls, value: bytes) -> TopicAssignment | None:
        decoded = decode_json(value)
        partitions, configs = decoded.get("partitions"), decoded.get("configs", {})
        if not isinstance(partitions, dict) or not isinstance(configs, dict):
            return None
        replicas: dict[int, tuple[int, ...]] = {}
        for number, nodes in partitions.items():
            ids = _node_ids(nodes)
            if not isinstance(number, str) or not number.isdigit() or not ids:
                return None
            replicas[int(number)] = ids
        if sorted(replicas) != list(range(len(replicas))):
            return None  # partitions are 0..n-1, none missing
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
            return None
        reassigning_json = decoded.get("reassigning", {})
        if not isinstance(reassigning_json, dict):
            return None
        reassigning: dict[int, PartitionReassignment] = {}
        for number, value in reassigning_json.items():
            if not isinstance(number, str) or not number.isdigit() or int(number) not in replicas:
                return None
            reassignment = PartitionReassignment.decode_json(value, replicas[int(number)])
            if reassignment is None:
                return None
            reassigning[int(number)] = reassignment
        return cls(replicas, dict(configs), reassigning)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition's leader, leader epoch and in-sync replicas (Kafka's LeaderAndIsr), and
    the controller epoch of whoever wrote it last (0: CreateTopic or a leader's ISR change
    before any controller acted)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def encode(self) -> bytes:
        return json.dumps({
            "leader": self.leader, "leader_epoch": self.leader_epoch, "isr": list(self.isr),
            "controller_epoch": self.controller_epoch,
        }).encode()

    @classmethod
    def decode(cls, value: bytes) -> PartitionState | None:
        decoded = decode_json(value)
        leader, epoch = decoded.get("leader"), decoded.get("leader_epoch")
        isr, controller_epoch = _node_ids(decoded.get("isr")), decoded.get("controller_epoch", 0)
        if (not isinstance(leader, int) or isinstance(leader, bool) or leader < NO_LEADER
                or not isinstance(epoch, int) or epoch < 0 or isr is None
                or not isinstance(controller_epoch, int) or controller_epoch < 0):
            return None
        return cls(leader, epoch, isr, controller_epoch)
