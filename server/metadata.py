"""The Metadata RPC's answer: the brokers, the controller, the topics with their leaders.

Two sources, one answer (broker.proto's ``MetadataResponse``):

- *a single server* (no ``--cluster``): one broker, itself, node id 0 at its advertised address;
  it is the controller (epoch 0: there never was an election) and the leader, only replica and
  only in-sync replica of every partition it holds.
- *a cluster member* (:func:`cluster_metadata_response`): the brokers, the controller and the
  replicated topics as this server last read them from etcd (server/cluster/: views refreshed
  every poll interval, kept while etcd is down): each partition's replicas from its topic's
  assignment, its leader, leader epoch and ISR from its partition state. Topics this server
  holds that the cluster does not know (created before it joined one) are left out: no broker
  leads them for clients. :func:`cluster_topic_view` is that reading, protocol-neutral: the
  Kafka front end's Metadata translates the same view (server/kafka/apis/metadata.py).

A single server's ``leader_epoch`` is the latest epoch of the partition's leader-epoch-checkpoint
(0 when it has none: nothing was appended with an epoch yet).

:func:`metadata_response` is blocking (reads the LogManager): run it in the executor.
:func:`cluster_metadata_response` and :func:`cluster_topic_view` only read their arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.cluster import BrokerInfo, ControllerState
    from stratalog.server.cluster.cluster_view import PartitionKey, VersionedState
    from stratalog.server.cluster.partition_state import TopicAssignment
    from stratalog.server.storage.log_manager import LogManager

__all__ = [
    "SINGLE_SERVER_NODE_ID",
    "PartitionView",
    "cluster_metadata_response",
    "cluster_topic_view",
    "metadata_response",
]

#: The node id of a server without --cluster.
SINGLE_SERVER_NODE_ID = 0


def metadata_response(
    log_manager: LogManager,
    node_id: int,
    brokers: Sequence[BrokerInfo],
    controller: ControllerState,
    topics: Sequence[str],
) -> broker_pb2.MetadataResponse:
    """The answer for ``topics`` (empty: every topic), this server being ``node_id``.

    Raises:
        UnknownTopicOrPartitionError: a topic named does not exist.
    """
    if topics:
        descriptions = [log_manager.describe_topic(name) for name in dict.fromkeys(topics)]
    else:
        descriptions = log_manager.list_topics()
    response = _header(node_id, brokers, controller)
    for description in sorted(descriptions, key=lambda d: d.name):
        topic = response.topics.add(name=description.name)
        for partition in sorted(description.partitions, key=lambda p: p.partition):
            epoch = log_manager.get_log(description.name, partition.partition).latest_epoch
            topic.partitions.add(
                partition=partition.partition, leader=node_id,
                leader_epoch=epoch if epoch is not None else 0,
                replicas=[node_id], isr=[node_id],
            )
    return response


class PartitionView(NamedTuple):
    """One replicated partition as the cluster view has it, before any protocol's shape:
    ``leader`` -1 and ``leader_epoch`` 0 with an empty ``isr`` while its state is not (yet)
    in the view."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def cluster_topic_view(
    assignments: Mapping[str, TopicAssignment],
    states: Mapping[PartitionKey, VersionedState],
    name: str,
) -> list[PartitionView] | None:
    """The partitions of replicated topic ``name`` by partition number, from a cluster
    member's views of etcd; None when the cluster does not know the topic. The one reading of
    the views that both front ends translate (the gRPC Metadata RPC below, the Kafka
    protocol's Metadata: server/kafka/apis/metadata.py)."""
    assignment = assignments.get(name)
    if assignment is None:
        return None
    partitions = []
    for partition, replicas in sorted(assignment.replicas.items()):
        versioned = states.get((name, partition))
        if versioned is None:
            partitions.append(PartitionView(partition, -1, 0, tuple(replicas), ()))
        else:
            state = versioned.state
            partitions.append(PartitionView(partition, state.leader, state.leader_epoch,
                                            tuple(replicas), tuple(state.isr)))
    return partitions


def cluster_metadata_response(
    node_id: int,
    brokers: Sequence[BrokerInfo],
    controller: ControllerState,
    assignments: Mapping[str, TopicAssignment],
    states: Mapping[PartitionKey, VersionedState],
    topics: Sequence[str],
) -> broker_pb2.MetadataResponse:
    """The answer of cluster member ``node_id`` for ``topics`` (empty: every topic), from its
    views of etcd (:func:`cluster_topic_view`).

    Raises:
        UnknownTopicOrPartitionError: a topic named is not in the cluster view.
    """
    from stratalog.server.storage.errors import UnknownTopicOrPartitionError

    names = list(dict.fromkeys(topics)) if topics else sorted(assignments)
    views = {}
    for name in names:
        view = cluster_topic_view(assignments, states, name)
        if view is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        views[name] = view
    response = _header(node_id, brokers, controller)
    for name in sorted(names):
        topic = response.topics.add(name=name)
        for p in views[name]:
            topic.partitions.add(partition=p.partition, replicas=p.replicas, leader=p.leader,
                                 leader_epoch=p.leader_epoch, isr=p.isr)
    return response


def _header(node_id: int, brokers: Sequence[BrokerInfo],
            controller: ControllerState) -> broker_pb2.MetadataResponse:
    return broker_pb2.MetadataResponse(
        node_id=node_id,
        controller_id=controller.node_id,
        controller_epoch=controller.epoch,
        brokers=[broker_pb2.BrokerMetadata(node_id=b.node_id, address=b.address)
                 for b in sorted(brokers)],
    )
