"""A Metadata answer, whichever front end asked: the brokers, the controller, the topics with
their leaders.

Two sources, one answer (:class:`ClusterMetadata`; the gRPC front end turns it into
broker.proto's ``MetadataResponse``, the Kafka front end into Kafka's ``MetadataResponse``):

- *a single server* (no ``--cluster``): one broker, itself, node id 0 at the address the
  caller's front end advertises; it is the controller (epoch 0: there never was an election)
  and the leader, only replica and only in-sync replica of every partition it holds.
- *a cluster member* (:func:`cluster_metadata`): the brokers, the controller and the
  replicated topics as this server last read them from etcd (server/cluster/: views refreshed
  every poll interval, kept while etcd is down): each partition's replicas from its topic's
  assignment, its leader, leader epoch and ISR from its partition state. Topics this server
  holds that the cluster does not know (created before it joined one) are left out: no broker
  leads them for clients.

A single server's ``leader_epoch`` is the latest epoch of the partition's leader-epoch-checkpoint
(0 when it has none: nothing was appended with an epoch yet).

A topic named that does not exist is not an error here: it is listed in ``unknown_topics``,
for each front end to answer as its protocol does (gRPC: the whole call fails with
UNKNOWN_TOPIC_OR_PARTITION; Kafka: that topic's entry carries the error code).

:func:`single_server_metadata` is blocking (reads the LogManager): run it in the executor.
:func:`cluster_metadata` only reads its arguments. The values are immutable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stratalog.server.storage.errors import UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from stratalog.server.cluster import BrokerInfo, ControllerState
    from stratalog.server.cluster.cluster_view import PartitionKey, VersionedState
    from stratalog.server.cluster.partition_state import TopicAssignment
    from stratalog.server.storage.log_manager import LogManager

__all__ = [
    "SINGLE_SERVER_NODE_ID",
    "ClusterMetadata",
    "PartitionMetadata",
    "TopicMetadata",
    "cluster_metadata",
    "single_server_metadata",
]

#: The node id of a server without --cluster.
SINGLE_SERVER_NODE_ID = 0


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition: its leader (-1: none known), the leader's epoch, its replicas and ISR."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic and its partitions, by partition number."""

    name: str
    partitions: tuple[PartitionMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """The answer: which node answers (``node_id``), the brokers by node id, the controller,
    the topics found (by name) and the names asked for that do not exist (in the order
    asked)."""

    node_id: int
    brokers: tuple[BrokerInfo, ...]
    controller: ControllerState
    topics: tuple[TopicMetadata, ...]
    unknown_topics: tuple[str, ...] = ()

    def raise_for_unknown(self) -> None:
        """For a front end whose whole call fails on an unknown topic.

        Raises:
            UnknownTopicOrPartitionError: naming the first topic asked for that does not exist.
        """
        if self.unknown_topics:
            raise UnknownTopicOrPartitionError(f"unknown topic {self.unknown_topics[0]!r}")


def single_server_metadata(
    log_manager: LogManager,
    node_id: int,
    brokers: Sequence[BrokerInfo],
    controller: ControllerState,
    topics: Sequence[str],
) -> ClusterMetadata:
    """Blocking: the answer for ``topics`` (empty: every topic), this server being ``node_id``
    and leading everything it holds."""
    unknown = []
    if topics:
        descriptions = []
        for name in dict.fromkeys(topics):
            try:
                descriptions.append(log_manager.describe_topic(name))
            except UnknownTopicOrPartitionError:
                unknown.append(name)
    else:
        descriptions = log_manager.list_topics()
    answer = []
    for description in sorted(descriptions, key=lambda d: d.name):
        partitions = []
        for partition in sorted(description.partitions, key=lambda p: p.partition):
            try:
                epoch = log_manager.get_log(description.name, partition.partition).latest_epoch
            except UnknownTopicOrPartitionError:
                continue  # deleted since it was described
            partitions.append(PartitionMetadata(
                partition.partition, node_id, epoch if epoch is not None else 0,
                (node_id,), (node_id,),
            ))
        answer.append(TopicMetadata(description.name, tuple(partitions)))
    return ClusterMetadata(node_id, tuple(sorted(brokers)), controller, tuple(answer),
                           tuple(unknown))


def cluster_metadata(
    node_id: int,
    brokers: Sequence[BrokerInfo],
    controller: ControllerState,
    assignments: Mapping[str, TopicAssignment],
    states: Mapping[PartitionKey, VersionedState],
    topics: Sequence[str],
) -> ClusterMetadata:
    """The answer of cluster member ``node_id`` for ``topics`` (empty: every topic), from its
    views of etcd. A partition whose state is not (yet) in the view has leader -1, epoch 0
    and an empty ISR."""
    names = list(dict.fromkeys(topics)) if topics else sorted(assignments)
    unknown = tuple(name for name in names if name not in assignments)
    answer = []
    for name in sorted(set(names) - set(unknown)):
        partitions = []
        for partition, replicas in sorted(assignments[name].replicas.items()):
            versioned = states.get((name, partition))
            if versioned is None:
                partitions.append(PartitionMetadata(partition, -1, 0, tuple(replicas), ()))
                continue
            state = versioned.state
            partitions.append(PartitionMetadata(
                partition, state.leader, state.leader_epoch, tuple(replicas), tuple(state.isr)
            ))
        answer.append(TopicMetadata(name, tuple(partitions)))
    return ClusterMetadata(node_id, tuple(sorted(brokers)), controller, tuple(answer), unknown)
