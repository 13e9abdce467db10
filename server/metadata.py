"""The Metadata RPC's answer: the brokers, the controller, the topics with their leaders.

Two sources, one answer (broker.proto's ``MetadataResponse``):

- *a single server* (no ``--cluster``): one broker, itself, node id 0 at its advertised address;
  it is the controller (epoch 0: there never was an election) and the leader, only replica and
  only in-sync replica of every partition it holds.
- *a cluster member*: the brokers and the controller as this server last read them from etcd
  (server/cluster/: a view refreshed every poll interval, kept while etcd is down). Partitions
  are still the ones this server holds, each led by this server alone: replica assignment and
  leader election are the next step of issue 17 (docs/cluster.md, "What is next").

A partition's ``leader_epoch`` is the latest epoch of its leader-epoch-checkpoint (0 when it has
none: nothing was appended with an epoch yet).

Blocking (reads the LogManager): run it in the executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.cluster import BrokerInfo, ControllerState
    from stratalog.server.storage.log_manager import LogManager

__all__ = ["SINGLE_SERVER_NODE_ID", "metadata_response"]

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
    response = broker_pb2.MetadataResponse(
        node_id=node_id,
        controller_id=controller.node_id,
        controller_epoch=controller.epoch,
        brokers=[broker_pb2.BrokerMetadata(node_id=b.node_id, address=b.address)
                 for b in sorted(brokers)],
    )
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
