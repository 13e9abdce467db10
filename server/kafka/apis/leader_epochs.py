"""OffsetForLeaderEpoch (key 23, versions 2 to 4): where a leader epoch ended, per partition,
as Kafka's ``KafkaApis.handleOffsetForLeaderEpochRequest`` -> ``Partition.lastOffsetForLeaderEpoch``.

A consumer asks it after a leader change (KIP-320) to find whether the log it read was
truncated: for ``leader_epoch`` the answer is the greatest epoch at or below it that the
partition's leader-epoch cache knows, and the offset where that epoch ended (the log end for
the current epoch; server/storage/leader_epoch_cache.py's ``end_offset_for``, Kafka's
``UnifiedLog.endOffsetForEpoch``); epoch -1 and end offset -1 when the cache cannot say
(an epoch above every known one, or an empty cache). The leader answers (the serving layer's
``end_offset_for_epoch``: NOT_LEADER_OR_FOLLOWER elsewhere), after checking the request's
``current_leader_epoch`` (-1: none): FENCED_LEADER_EPOCH when older than the leader's,
UNKNOWN_LEADER_EPOCH when newer.

* Versions 0 and 1 (no current_leader_epoch, no throttle time) are not served: every client
  that uses the API for KIP-320 sends v2 or later.
* ``replica_id`` (v3+) of a follower (>= 0): replication has its own protocol here, so every
  partition is answered NOT_LEADER_OR_FOLLOWER, as Fetch answers a follower's fetch.
* Authorization: CLUSTER_ACTION on the cluster, else DESCRIBE on each topic
  (TOPIC_AUTHORIZATION_FAILED), as Kafka's.
"""

from __future__ import annotations

from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, code_of
from stratalog.server.security.acls import CLUSTER_NAME, AclOperation, ResourceType

__all__ = ["offset_for_leader_epoch"]

_TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_EpochEndOffset = _TopicResult.EpochEndOffset
#: Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET: "the cache cannot say".
_UNDEFINED = -1


@kafka_api(ApiKey.OffsetForLeaderEpoch, versions=(2, 4))
async def offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    replicas = ctx.services.replicas
    follower = request.API_VERSION >= 3 and request.replica_id >= 0
    cluster_action = ctx.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                 CLUSTER_NAME)
    topics = []
    for topic in request.topics:
        name = topic.topic
        allowed = cluster_action or ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        partitions = []
        for partition in topic.partitions:
            index = partition.partition
            if not allowed:
                partitions.append(_answer(index, Code.TOPIC_AUTHORIZATION_FAILED))
                continue
            if follower:
                partitions.append(_answer(index, Code.NOT_LEADER_OR_FOLLOWER))
                continue
            try:
                epoch, end_offset = replicas.end_offset_for_epoch(
                    name, index, partition.leader_epoch, partition.current_leader_epoch)
            except Exception as exc:
                partitions.append(_answer(index, code_of(exc)))
                continue
            partitions.append(_answer(index, Code.NONE, epoch, end_offset))
        topics.append(_TopicResult(topic=name, partitions=partitions))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


def _answer(index: int, code: int, epoch: int = _UNDEFINED,
            end_offset: int = _UNDEFINED) -> _EpochEndOffset:
    return _EpochEndOffset(error_code=code, partition=index, leader_epoch=epoch,
                           end_offset=end_offset)
