"""AlterPartitionReassignments (key 45) and ListPartitionReassignments (key 46), version 0:
moving partitions' replicas, as Kafka's ``KafkaApis`` forwards them to its controller
(``core/src/main/scala/kafka/server/KafkaApis.scala``; KRaft's
``ReplicationControlManager.alterPartitionReassignments`` /
``listPartitionReassignments``, ``metadata/src/main/java/org/apache/kafka/controller/
ReplicationControlManager.java``, decides them).

Alter needs ALTER on the cluster, List DESCRIBE: without it the answer's error code is
CLUSTER_AUTHORIZATION_FAILED and nothing is done (Kafka's answer for both). Alter answers each
partition named: NONE (recorded in etcd; the controller carries it out), INVALID_REPLICA_ASSIGNMENT
(a target replica twice, or not live), NO_REASSIGNMENT_IN_PROGRESS (null replicas: a
cancellation of nothing), UNKNOWN_TOPIC_OR_PARTITION, or what etcd's absence maps to; an empty
replica list is INVALID_REPLICA_ASSIGNMENT as in Kafka (null cancels). List answers the
partitions being reassigned among those named (null: all) with their replicas, adding and
removing replicas. Both are the serving layer's
(:meth:`~stratalog.server.broker.AdminManager.alter_partition_reassignments`, server/cluster/
reassignment.py); ``timeout_ms`` is not waited on: Alter answers once the reassignments are
recorded (docs/kafka-protocol.md).

Concurrency: event-loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kafka.protocol.api_key import ApiKey

from stratalog.server.cluster.errors import InvalidReplicaAssignmentError
from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.error_codes import Code, code_of, message_of
from stratalog.server.security.acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from stratalog.server.kafka.context import RequestContext

__all__ = ["alter_partition_reassignments", "list_partition_reassignments"]

_AlterTopic = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
_AlterPartition = _AlterTopic.ReassignablePartitionResponse
_ListTopic = ListPartitionReassignmentsResponse.OngoingTopicReassignment
_ListPartition = _ListTopic.OngoingPartitionReassignment


@kafka_api(ApiKey.AlterPartitionReassignments, versions=(0, 0))
async def alter_partition_reassignments(ctx: RequestContext,
                                        request: AlterPartitionReassignmentsRequest
                                        ) -> AlterPartitionReassignmentsResponse:
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        denied = Code.CLUSTER_AUTHORIZATION_FAILED
        return AlterPartitionReassignmentsResponse(
            throttle_time_ms=0, error_code=denied, error_message=None, responses=[
                _AlterTopic(name=topic.name, partitions=[
                    _AlterPartition(partition_index=p.partition_index, error_code=denied,
                                    error_message=None) for p in topic.partitions])
                for topic in request.topics])
    requested: dict[tuple[str, int], tuple[int, ...] | None] = {}
    refused: dict[tuple[str, int], Exception] = {}
    for topic in request.topics:
        for partition in topic.partitions:
            key = (topic.name, partition.partition_index)
            if partition.replicas is not None and not partition.replicas:
                refused[key] = InvalidReplicaAssignmentError(
                    "the target replica list is empty (null cancels a reassignment)")
            else:
                requested[key] = (tuple(partition.replicas) if partition.replicas is not None
                                  else None)
    outcomes: dict[tuple[str, int], Exception | None] = dict(refused)
    if requested:
        outcomes.update(await ctx.services.admin.alter_partition_reassignments(requested))
    by_topic: dict[str, list[_AlterPartition]] = {}
    for (name, number), error in sorted(outcomes.items()):
        by_topic.setdefault(name, []).append(_AlterPartition(
            partition_index=number,
            error_code=Code.NONE if error is None else code_of(error),
            error_message=None if error is None else message_of(error)))
    return AlterPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=Code.NONE, error_message=None,
        responses=[_AlterTopic(name=name, partitions=partitions)
                   for name, partitions in by_topic.items()])


@kafka_api(ApiKey.ListPartitionReassignments, versions=(0, 0))
async def list_partition_reassignments(ctx: RequestContext,
                                       request: ListPartitionReassignmentsRequest
                                       ) -> ListPartitionReassignmentsResponse:
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return ListPartitionReassignmentsResponse(
            throttle_time_ms=0, error_code=Code.CLUSTER_AUTHORIZATION_FAILED,
            error_message=None, topics=[])
    requested = None
    if request.topics is not None:
        requested = [(topic.name, number) for topic in request.topics
                     for number in topic.partition_indexes]
    listed = await ctx.services.admin.list_partition_reassignments(requested)
    by_topic: dict[str, list[_ListPartition]] = {}
    for ongoing in listed:
        by_topic.setdefault(ongoing.topic, []).append(_ListPartition(
            partition_index=ongoing.partition, replicas=list(ongoing.replicas),
            adding_replicas=list(ongoing.adding), removing_replicas=list(ongoing.removing)))
    return ListPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=Code.NONE, error_message=None,
        topics=[_ListTopic(name=name, partitions=partitions)
                for name, partitions in by_topic.items()])
