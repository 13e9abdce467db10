"""Where a transactional id's state lives in a cluster: the replicated state topic, its
configs, and Kafka's ``partitionFor``.

On one server the coordinator keeps every id in its own log, ``__transaction_state-0``
(:mod:`.transaction_state_manager`). In a cluster the state must outlive a server, so it lives
in a replicated, compacted topic of ``transaction.state.log.num.partitions`` partitions, and the
coordinator of an id is the leader of its partition, as Kafka's
(``core/src/main/scala/kafka/coordinator/transaction/TransactionStateManager.scala``,
``partitionFor``)::

    partition = Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount

with Java's ``String.hashCode`` (:func:`stratalog.records.group_partition.java_string_hash`,
the one the group coordinator uses for ``__consumer_offsets``). The topic is named
:data:`CLUSTER_TRANSACTION_STATE_TOPIC`, not ``__transaction_state``: that name is this
server's own log's, which a cluster server keeps for its producer id blocks
(:mod:`.producer_ids`); docs/cluster.md, "Differences from Kafka".

Its records are :mod:`.transaction_log`'s (Kafka's ``TransactionLogKey``/``Value`` v0), written
by the partition's leader with acks=all. Pure functions and constants; no state.
"""

from __future__ import annotations

from stratalog.records.group_partition import java_abs, java_string_hash
from stratalog.server.storage.log_manager import CLUSTER_TRANSACTION_STATE_TOPIC

__all__ = [
    "CLUSTER_TRANSACTION_STATE_TOPIC",
    "STATE_SEGMENT_BYTES",
    "partition_for_transactional_id",
    "topic_configs",
]

#: Kafka's transaction.state.log.segment.bytes default (100 MiB): small, so that compaction
#: finds closed segments to clean.
STATE_SEGMENT_BYTES = 104_857_600


def partition_for_transactional_id(transactional_id: str, partitions: int) -> int:
    """The state topic's partition of ``transactional_id`` among ``partitions``.

    Raises:
        ValueError: ``partitions`` is not positive (a programmer error: the topic has one).
    """
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, not {partitions}")
    return java_abs(java_string_hash(transactional_id)) % partitions


def topic_configs(min_isr: int, replication_factor: int) -> dict[str, str]:
    """The state topic's config overrides, as Kafka's ``TransactionLog`` topic configs:
    compacted, min.insync.replicas = transaction.state.log.min.isr (at most the replication
    factor the topic is made with, else no write could ever be acknowledged)."""
    return {
        "cleanup.policy": "compact",
        "min.insync.replicas": str(max(1, min(min_isr, replication_factor))),
        "segment.bytes": str(STATE_SEGMENT_BYTES),
    }
