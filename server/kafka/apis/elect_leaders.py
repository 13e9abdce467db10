"""ElectLeaders (key 43, versions 0 to 2): preferred (and unclean) leader elections, as Kafka's
``KafkaApis.handleElectLeaders`` answers them (``core/src/main/scala/kafka/server/KafkaApis.scala``)
and KRaft's ``ReplicationControlManager.electLeaders`` decides them
(``metadata/src/main/java/org/apache/kafka/controller/ReplicationControlManager.java``).

Needs ALTER on the cluster: without it the answer's error code (v1+) and every partition named
are CLUSTER_AUTHORIZATION_FAILED, nothing elected. ``topic_partitions`` null asks for every
partition of the cluster, and the partitions whose election was not needed are left out of the
answer (Kafka's rule); a partition named is answered with NONE (elected), ELECTION_NOT_NEEDED,
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION.
v0 has no ``election_type`` (preferred); a type other than 0 and 1 is INVALID_REQUEST for the
whole request. The elections are made by the serving layer
(:meth:`~stratalog.server.broker.AdminManager.elect_leaders`, server/cluster/preferred_leader.py);
``timeout_ms`` is not waited on: the answer comes once each new leader is written to etcd, and
clients see it in Metadata within a poll (docs/kafka-protocol.md).

Concurrency: event-loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse
from kafka.protocol.api_key import ApiKey

from stratalog.server.cluster.preferred_leader import ElectionType
from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.error_codes import Code, code_of, message_of
from stratalog.server.security.acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from stratalog.server.kafka.context import RequestContext

__all__ = ["elect_leaders"]

_TopicResult = ElectLeadersResponse.ReplicaElectionResult
_PartitionResult = _TopicResult.PartitionResult


def _answer(results: dict[str, list[_PartitionResult]], error: int = Code.NONE
            ) -> ElectLeadersResponse:
    return ElectLeadersResponse(
        throttle_time_ms=0, error_code=error,
        replica_election_results=[_TopicResult(topic=topic, partition_result=partitions)
                                  for topic, partitions in results.items()])


@kafka_api(ApiKey.ElectLeaders, versions=(0, 2))
async def elect_leaders(ctx: RequestContext, request: ElectLeadersRequest
                        ) -> ElectLeadersResponse:
    named = request.topic_partitions
    requested: dict[str, list[int]] | None = None
    if named is not None:
        requested = {}
        for topic in named:
            requested.setdefault(topic.topic, []).extend(topic.partitions)
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        denied = Code.CLUSTER_AUTHORIZATION_FAILED
        return _answer({topic: [_PartitionResult(partition_id=number, error_code=denied,
                                                 error_message=None)
                                for number in dict.fromkeys(numbers)]
                        for topic, numbers in (requested or {}).items()}, denied)
    election_type = request.election_type if request.API_VERSION >= 1 else 0
    if election_type not in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        return _answer({}, Code.INVALID_REQUEST)
    outcomes = await ctx.services.admin.elect_leaders(requested, ElectionType(election_type))
    results: dict[str, list[_PartitionResult]] = {topic: [] for topic in requested or {}}
    for (topic, number), error in sorted(outcomes.items()):
        results.setdefault(topic, []).append(_PartitionResult(
            partition_id=number,
            error_code=Code.NONE if error is None else code_of(error),
            error_message=None if error is None else message_of(error)))
    return _answer(results)
