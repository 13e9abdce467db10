"""ListOffsets (key 2, versions 1 to 7): the offset of a timestamp, or of the log's start, end
or largest timestamp, per partition, through the serving layer (the leader answers).

Targets, as Kafka's ``UnifiedLog.fetchOffsetByTimestamp``: -2 earliest (the log start), -1
latest (the high watermark, or for READ_COMMITTED (v2+) the LSO), -3 (v7+) the record with the
largest timestamp, a timestamp >= 0: the first record at or after it (offset -1 and timestamp -1
when there is none). Other negative targets are answered UNSUPPORTED_VERSION, as Kafka does for
a target the request's version does not know. The leader epoch (v4+) is the epoch of the offset
found (for latest, the leader's current epoch), from the partition's leader-epoch cache, -1
when it does not know (clients then skip the validation it allows, KIP-320); the request's
``current_leader_epoch`` (v4+, -1: none) is checked against the leader's in cluster mode
(FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH). Authorization: DESCRIBE on the topic.
"""

from __future__ import annotations

from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, code_of
from stratalog.server.security.acls import AclOperation, ResourceType
from stratalog.server.storage.partition_log import IsolationLevel

__all__ = ["list_offsets"]

_TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
_PartitionResponse = _TopicResponse.ListOffsetsPartitionResponse
_EARLIEST, _LATEST, _MAX_TIMESTAMP = -2, -1, -3


@kafka_api(ApiKey.ListOffsets, versions=(1, 7))
async def list_offsets(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    replicas = ctx.services.replicas
    isolation = (IsolationLevel.READ_COMMITTED if request.isolation_level == 1
                 else IsolationLevel.READ_UNCOMMITTED)
    lowest_target = _MAX_TIMESTAMP if request.API_VERSION >= 7 else _EARLIEST
    topics = []
    for topic in request.topics:
        name = topic.name
        allowed = ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        partitions = []
        for partition in topic.partitions:
            index, target = partition.partition_index, partition.timestamp
            if not allowed:
                partitions.append(_answer(index, Code.TOPIC_AUTHORIZATION_FAILED))
                continue
            if target < lowest_target:
                partitions.append(_answer(index, Code.UNSUPPORTED_VERSION))
                continue
            current_epoch = (partition.current_leader_epoch if request.API_VERSION >= 4
                             else -1)
            try:
                found, epoch = replicas.offset_and_epoch_for_timestamp(
                    name, index, target, isolation, current_epoch)
            except Exception as exc:
                partitions.append(_answer(index, code_of(exc)))
                continue
            if found is None:
                partitions.append(_answer(index, Code.NONE))
            else:
                partitions.append(_answer(index, Code.NONE, found.offset, found.timestamp,
                                          epoch))
        topics.append(_TopicResponse(name=name, partitions=partitions))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _answer(index: int, code: int, offset: int = -1, timestamp: int = -1,
            leader_epoch: int = -1) -> _PartitionResponse:
    return _PartitionResponse(partition_index=index, error_code=code, timestamp=timestamp,
                              offset=offset, leader_epoch=leader_epoch)
