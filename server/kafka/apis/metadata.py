"""Metadata (key 3, versions 0 to 12): the brokers, the controller and the topics' partitions
with their leaders, as Kafka's ``KafkaApis.handleTopicMetadataRequest`` answers.

The reading is the serving layer's, the same as the gRPC Metadata RPC's: ``AdminManager.metadata``
gives server/metadata.py's protocol-neutral ``ClusterMetadata`` (a single server: itself,
leading everything it holds; a cluster member: the replicated topics of its view of etcd, each
partition's leader, leader epoch, replicas and ISR), which this module translates.

* Which topics: v0's empty list and v1+'s null mean every topic the caller may DESCRIBE (the
  others are left out); named topics are answered each with its own error
  (UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED). In
  cluster mode a topic the cluster does not know is unknown, also when this server holds a
  local topic of that name; before the server joined, every named topic is
  LEADER_NOT_AVAILABLE.
* Auto-creation: a named topic that does not exist is created when the request allows it
  (v4+'s ``allow_auto_topic_creation``; always before v4), the server's
  ``auto_create_topics_enable`` is on and the caller may CREATE it (on the cluster or the
  topic; AdminManager creates it, in cluster mode through etcd); the answer then says
  LEADER_NOT_AVAILABLE for it, as Kafka's does (the client asks again). A caller that may not
  create it is answered TOPIC_AUTHORIZATION_FAILED, as Kafka's ``handleTopicMetadataRequest``
  answers it. The topics the server writes itself (``__consumer_offsets``,
  ``__transaction_state``) never are, as Kafka's Metadata does not create internal topics.
* Brokers: every live server's Kafka listener (``KafkaServices.broker_addresses``: this one
  alone without a cluster). A partition whose leader is unknown, not live or without a Kafka
  listener is LEADER_NOT_AVAILABLE with leader -1, as Kafka's for a leader without an endpoint
  on the listener (``core/src/main/scala/kafka/server/metadata/KRaftMetadataCache.scala``,
  ``getPartitionMetadata``); ``offline_replicas`` are the replicas without one.
* The cluster id (v2+): a cluster's, from etcd (server/cluster/cluster_id.py), the same from
  every server, null before this server joined; a single server's meta.properties cluster.id
  (``KafkaServices.current_cluster_id``).
* Topic ids (v10+) are the zero UUID: this server names topics only, and serves the versions
  of Fetch and Produce that name them (docs/kafka-protocol.md).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code
from stratalog.server.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from stratalog.server.storage.log_manager import SERVER_WRITTEN_TOPICS
from stratalog.server.storage.topic_names import validate_topic_name

if TYPE_CHECKING:
    from stratalog.server.metadata import ClusterMetadata, TopicMetadata
    from stratalog.server.settings import Address

__all__ = ["metadata"]

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition
_ZERO_UUID = uuid.UUID(int=0)


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
    # Each named topic's own error, before anything is read: (name, code) in the order asked.
    refused: dict[str, int] = {}
    for name in names or ():
        try:
            validate_topic_name(name)
        except Exception:
            refused[name] = Code.INVALID_TOPIC_EXCEPTION
            continue
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            refused[name] = Code.TOPIC_AUTHORIZATION_FAILED
    wanted = [name for name in names or () if name not in refused]
    # Asked for every answer, topics or not: librdkafka's admin client waits for a controller.
    controller_id = services.admin.controller_id
    topics: list[_Topic] = []
    if services.settings.cluster and services.replicas.cluster_node is None:
        # Between the listener's bind and the registration (app.py): nothing known yet.
        refused.update(dict.fromkeys(wanted, Code.LEADER_NOT_AVAILABLE))
    elif names is None or wanted:
        answer, missing = await _read(ctx, wanted, allow_create)
        found = {topic.name: topic for topic in answer.topics}
        if names is None:
            topics = [_topic(topic, brokers) for name, topic in sorted(found.items())
                      if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name)]
        refused.update(missing)
        topics += [_topic(found[name], brokers) for name in wanted if name in found]
    topics += [_error_topic(name, code) for name, code in refused.items()]
    if names is not None:
        order = {name: n for n, name in enumerate(names)}
        topics.sort(key=lambda topic: order[topic.name])
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[_Broker(node_id=node_id, host=address.host, port=address.port,
                          rack=services.broker_rack(node_id))
                 for node_id, address in sorted(brokers.items())],
        cluster_id=services.current_cluster_id(),
        controller_id=controller_id,
        topics=topics,
    )


async def _read(ctx: RequestContext, wanted: list[str],
                allow_create: bool) -> tuple[ClusterMetadata, dict[str, int]]:
    """The serving layer's answer for ``wanted`` (empty: every topic), and the error code of
    each topic it does not have: UNKNOWN_TOPIC_OR_PARTITION, or when the request allows
    creation (module docstring) LEADER_NOT_AVAILABLE for a topic created now and
    TOPIC_AUTHORIZATION_FAILED for one the caller may not create."""
    services = ctx.services
    advertised = str(services.advertised())
    answer = await services.admin.metadata(wanted, advertised_address=advertised)
    codes = dict.fromkeys(answer.unknown_topics, Code.UNKNOWN_TOPIC_OR_PARTITION)
    if not (allow_create and services.settings.auto_create_topics_enable):
        return answer, codes
    creatable = []
    for name in answer.unknown_topics:
        if name in SERVER_WRITTEN_TOPICS:
            continue
        if (ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
                or ctx.allowed(AclOperation.CREATE, ResourceType.TOPIC, name)):
            creatable.append(name)
        else:
            codes[name] = Code.TOPIC_AUTHORIZATION_FAILED
    if creatable:
        after = await services.admin.metadata(creatable, advertised_address=advertised,
                                              allow_auto_create=True, identity=ctx.identity)
        codes.update(dict.fromkeys((topic.name for topic in after.topics),
                                   Code.LEADER_NOT_AVAILABLE))
    return answer, codes


def _topic(topic: TopicMetadata, brokers: dict[int, Address]) -> _Topic:
    partitions = []
    for p in topic.partitions:
        # A leader Kafka clients cannot reach is no leader to them: they ask again.
        reachable = p.leader >= 0 and p.leader in brokers
        partitions.append(_Partition(
            error_code=Code.NONE if reachable else Code.LEADER_NOT_AVAILABLE,
            partition_index=p.partition, leader_id=p.leader if reachable else -1,
            leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
            isr_nodes=list(p.isr),
            offline_replicas=[r for r in p.replicas if r not in brokers],
        ))
    return _Topic(error_code=Code.NONE, name=topic.name, topic_id=_ZERO_UUID,
                  is_internal=topic.name in SERVER_WRITTEN_TOPICS, partitions=partitions)


def _error_topic(name: str, code: int) -> _Topic:
    return _Topic(error_code=code, name=name, topic_id=_ZERO_UUID, is_internal=False,
                  partitions=[])
