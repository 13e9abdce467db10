"""Metadata (key 3, versions 0 to 12): the brokers, the controller and the topics' partitions
with their leaders, as Kafka's ``KafkaApis.handleTopicMetadataRequest`` answers.

* Which topics: v0's empty list and v1+'s null mean every topic the caller may DESCRIBE (the
  others are left out); named topics are answered each with its own error
  (UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED).
* Auto-creation: a named topic that does not exist is created when the request allows it
  (v4+'s ``allow_auto_topic_creation``; always before v4), the server's
  ``auto_create_topics_enable`` is on and the caller may CREATE it; the answer then says
  LEADER_NOT_AVAILABLE for it, as Kafka's does (the client asks again).
* Cluster mode (``--cluster``; docs/kafka-protocol.md "Cluster mode"): the brokers are the live
  servers that registered a Kafka listener, the controller is the cluster's, and the topics are
  the replicated topics of the cluster view (server/metadata.py's ``cluster_topic_view``, the
  reading the gRPC Metadata RPC translates too): each partition's leader, leader epoch,
  replicas and ISR as etcd has them; a partition whose leader is unknown or has no Kafka
  listener is LEADER_NOT_AVAILABLE (leader -1), as Kafka's for a leader without an endpoint on
  the listener. Topics the cluster does not know are UNKNOWN_TOPIC_OR_PARTITION (LEADER_NOT_
  AVAILABLE before the server joined), and are not created automatically: a cluster's topics
  are created through its controller (the gRPC CreateTopic) until the topic administration
  serves both front ends.
* Topic ids (v10+) are the zero UUID: this server names topics only, and serves the versions
  of Fetch and Produce that name them (docs/kafka-protocol.md).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, code_of
from stratalog.server.metadata import PartitionView, cluster_topic_view
from stratalog.server.security.acls import AclOperation, ResourceType
from stratalog.server.storage.errors import TopicAlreadyExistsError
from stratalog.server.storage.log_manager import SERVER_WRITTEN_TOPICS
from stratalog.server.storage.topic_names import validate_topic_name

if TYPE_CHECKING:
    from stratalog.server.settings import Address

__all__ = ["metadata"]

logger = logging.getLogger(__name__)

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition
_ZERO_UUID = uuid.UUID(int=0)
#: The node id of a server without --cluster (server/metadata.py's).
_SINGLE_NODE_ID = 0


@kafka_api(ApiKey.Metadata, versions=(0, 12))
async def metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    services = ctx.services
    version = request.API_VERSION
    if request.topics is None or (version == 0 and not request.topics):
        names = None
    else:
        names = list(dict.fromkeys(t.name for t in request.topics if t.name is not None))
    allow_create = version < 4 or bool(request.allow_auto_topic_creation)
    brokers = services.broker_addresses()
    if services.settings.cluster:
        return _cluster_metadata(ctx, names, brokers)
    topics: list[_Topic] = []
    if names is None:
        descriptions = await services.replicas.admin(services.log_manager.list_topics)
        for description in descriptions:
            if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, description.name):
                topics.append(_topic_entry(ctx, description))
    else:
        for name in names:
            topics.append(await _named_topic(ctx, name, allow_create))
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[_Broker(node_id=node_id, host=address.host, port=address.port, rack=None)
                 for node_id, address in sorted(brokers.items())],
        cluster_id=services.cluster_id,
        controller_id=_SINGLE_NODE_ID,
        topics=topics,
    )


def _cluster_metadata(ctx: RequestContext, names: list[str] | None,
                      brokers: dict[int, Address]) -> MetadataResponse:
    """The answer of a cluster member, from its views of etcd (module docstring)."""
    node = ctx.services.replicas.cluster_node
    controller_id = -1
    topics: list[_Topic] = []
    if node is None:
        # Between the listener's bind and the registration (app.py): nothing known yet.
        topics = [_error_topic(name, Code.LEADER_NOT_AVAILABLE) for name in names or ()]
    else:
        controller_id = node.controller.node_id
        assignments, states = node.view.topics, node.view.partitions
        if names is None:
            for name in sorted(assignments):
                view = cluster_topic_view(assignments, states, name)
                if view is not None and ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                                    name):
                    topics.append(_cluster_topic(name, view, brokers))
        for name in names or ():
            try:
                validate_topic_name(name)
            except Exception:
                topics.append(_error_topic(name, Code.INVALID_TOPIC_EXCEPTION))
                continue
            if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(_error_topic(name, Code.TOPIC_AUTHORIZATION_FAILED))
                continue
            view = cluster_topic_view(assignments, states, name)
            if view is None:
                topics.append(_error_topic(name, Code.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                topics.append(_cluster_topic(name, view, brokers))
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[_Broker(node_id=node_id, host=address.host, port=address.port, rack=None)
                 for node_id, address in sorted(brokers.items())],
        cluster_id=ctx.services.cluster_id,
        controller_id=controller_id,
        topics=topics,
    )


def _cluster_topic(name: str, view: list[PartitionView],
                   brokers: dict[int, Address]) -> _Topic:
    partitions = []
    for p in view:
        # A leader Kafka clients cannot reach (not live, or without a Kafka listener) is no
        # leader to them: they ask again (Kafka's
        # core/src/main/scala/kafka/server/metadata/KRaftMetadataCache.scala, getPartitionMetadata).
        reachable = p.leader >= 0 and p.leader in brokers
        partitions.append(_Partition(
            error_code=Code.NONE if reachable else Code.LEADER_NOT_AVAILABLE,
            partition_index=p.partition, leader_id=p.leader if reachable else -1,
            leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
            isr_nodes=list(p.isr),
            offline_replicas=[r for r in p.replicas if r not in brokers],
        ))
    return _Topic(error_code=Code.NONE, name=name, topic_id=_ZERO_UUID,
                  is_internal=name in SERVER_WRITTEN_TOPICS, partitions=partitions)


async def _named_topic(ctx: RequestContext, name: str, allow_create: bool) -> _Topic:
    services = ctx.services
    try:
        validate_topic_name(name)
    except Exception:
        return _error_topic(name, Code.INVALID_TOPIC_EXCEPTION)
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
        return _error_topic(name, Code.TOPIC_AUTHORIZATION_FAILED)
    log_manager = services.log_manager
    if not log_manager.has_topic(name):
        if (allow_create and services.settings.auto_create_topics_enable
                and name not in SERVER_WRITTEN_TOPICS
                and (ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER, "kafka-cluster")
                     or ctx.allowed(AclOperation.CREATE, ResourceType.TOPIC, name))):
            try:
                await services.replicas.admin(log_manager.create_topic, name,
                                              services.settings.num_partitions, {})
                logger.info("created topic %s automatically (auto_create_topics_enable, a"
                            " Kafka Metadata request): %d partition(s)", name,
                            services.settings.num_partitions)
            except TopicAlreadyExistsError:
                pass  # created meanwhile
            except Exception as exc:
                return _error_topic(name, code_of(exc))
            return _error_topic(name, Code.LEADER_NOT_AVAILABLE)
        return _error_topic(name, Code.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        description = await services.replicas.admin(log_manager.describe_topic, name)
    except Exception as exc:
        return _error_topic(name, code_of(exc))
    return _topic_entry(ctx, description)


def _topic_entry(ctx: RequestContext, description: object) -> _Topic:
    log_manager = ctx.services.log_manager
    name = description.name  # type: ignore[attr-defined]
    partitions = []
    for p in sorted(description.partitions, key=lambda p: p.partition):  # type: ignore[attr-defined]
        try:
            epoch = log_manager.get_log(name, p.partition).latest_epoch
        except Exception:
            epoch = None
        partitions.append(_Partition(
            error_code=Code.NONE, partition_index=p.partition, leader_id=_SINGLE_NODE_ID,
            leader_epoch=epoch if epoch is not None else 0,
            replica_nodes=[_SINGLE_NODE_ID], isr_nodes=[_SINGLE_NODE_ID], offline_replicas=[],
        ))
    return _Topic(error_code=Code.NONE, name=name, topic_id=_ZERO_UUID,
                  is_internal=name in SERVER_WRITTEN_TOPICS, partitions=partitions)


def _error_topic(name: str, code: int) -> _Topic:
    return _Topic(error_code=code, name=name, topic_id=_ZERO_UUID, is_internal=False,
                  partitions=[])
