"""The etcd keys of one cluster, under its prefix (``cluster_prefix``, ``/stratalog``)::

    <prefix>/brokers/<node_id>     JSON {"node_id": 1, "address": "10.0.0.1:50051"} (and
                                   "principal", "kafka_address": membership.py)
                                   under the broker's lease: gone when the broker is
    <prefix>/controller            JSON {"node_id": 1, "epoch": 7}
                                   under the controller's lease: gone when the controller is
    <prefix>/controller_epoch      decimal: the epoch of the last election (no lease; grows by
                                   one per election, never reset: the fencing token)
    <prefix>/topics/<topic>        JSON TopicAssignment: replicas per partition and the topic's
                                   configs, and the partitions being reassigned; written by
                                   CreateTopic, CreatePartitions, AlterConfigs and
                                   reassignment.py (no lease)
    <prefix>/partitions/<topic>/<partition>
                                   JSON PartitionState: leader, leader epoch, ISR, the controller
                                   epoch of the last writer (no lease; partition_state.py)
    <prefix>/acls                  the cluster's ACLs: an acls.json document (no lease;
                                   server/security/acl_store.py has the format,
                                   cluster_acls.py the updates)
    <prefix>/cluster_id            the cluster's id, Kafka's Uuid as text; written once by the
                                   first server, never changed (no lease; cluster_id.py)

Node ids are written in decimal without padding, so ``brokers/10`` sorts before ``brokers/2``
in etcd; readers sort by the number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["ClusterKeys", "decode_json"]


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    """The keys of the cluster under ``prefix`` (``/stratalog``: no trailing slash)."""

    prefix: str

    @property
    def brokers_prefix(self) -> bytes:
        return f"{self.prefix}/brokers/".encode()

    def broker(self, node_id: int) -> bytes:
        return f"{self.prefix}/brokers/{node_id}".encode()

    @property
    def controller(self) -> bytes:
        return f"{self.prefix}/controller".encode()

    @property
    def controller_epoch(self) -> bytes:
        return f"{self.prefix}/controller_epoch".encode()

    @property
    def cluster_id(self) -> bytes:
        return f"{self.prefix}/cluster_id".encode()

    @property
    def acls(self) -> bytes:
        return f"{self.prefix}/acls".encode()

    @property
    def topics_prefix(self) -> bytes:
        return f"{self.prefix}/topics/".encode()

    def topic(self, name: str) -> bytes:
        return f"{self.prefix}/topics/{name}".encode()

    @property
    def partitions_prefix(self) -> bytes:
        return f"{self.prefix}/partitions/".encode()

    def topic_partitions_prefix(self, topic: str) -> bytes:
        """Every partition state key of ``topic`` (the trailing slash keeps ``t`` from
        matching ``t2``'s keys)."""
        return f"{self.prefix}/partitions/{topic}/".encode()

    def partition(self, topic: str, partition: int) -> bytes:
        return f"{self.prefix}/partitions/{topic}/{partition}".encode()

    def parse_partition_key(self, key: bytes) -> tuple[str, int] | None:
        """(topic, partition) of a partition state key; None for any other key. Topic names
        hold no '/' (the engine's rule), so the last '/' splits them."""
        text = key.decode(errors="replace")
        head = f"{self.prefix}/partitions/"
        if not text.startswith(head):
            return None
        topic, _, number = text[len(head):].rpartition("/")
        if not topic or not number.isdigit():
            return None
        return topic, int(number)


def decode_json(value: bytes) -> dict[str, object]:
    """A value of ours; ``{}`` for one that is not a JSON object (a key someone else wrote)."""
    try:
        decoded = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return {}
    return decoded if isinstance(decoded, dict) else {}
