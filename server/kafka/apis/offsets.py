"""A group's committed offsets: OffsetCommit, OffsetFetch and OffsetDelete, on the same group
coordinators as the gRPC front end (server/group_service/ GroupService; docs/groups.md), as
Kafka's ``core/src/main/scala/kafka/server/KafkaApis.scala`` answers them.

**Versions** (kafka-python 3.0.12's classes know them all):

=============  ========  =======================================================================
API            served    why
=============  ========  =======================================================================
OffsetCommit   2 to 8    v0 stored offsets in ZooKeeper and v1 carried a commit timestamp
                         (Kafka 4 serves neither; aiokafka's classes go to v3, kafka-python's
                         to 8, librdkafka's to 9); v9+ is KIP-848's consumer protocol
                         (member epochs), v10 names topics by id
OffsetFetch    1 to 8    v0 read ZooKeeper; v8 asks about several groups at once (kafka-python's
                         admin); v9+ is KIP-848's, v10 names topics by id
OffsetDelete   0         its one version
=============  ========  =======================================================================

**OffsetCommit** answers each partition on its own, as Kafka does: READ on the GROUP (every
partition GROUP_AUTHORIZATION_FAILED otherwise), READ on each TOPIC (its partitions
TOPIC_AUTHORIZATION_FAILED), then the serving layer's own check of each partition
(``GroupService.check_commit``: UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE beyond the log
end, OFFSET_METADATA_TOO_LARGE); the partitions that pass are committed in one call, whose
errors are the coordinator's (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, ...).
A negative offset is INVALID_REQUEST (the gRPC side refuses it too). Versions 2 to 4's
retention time is passed on (``retention_ms``).

**OffsetFetch** (DESCRIBE on the GROUP; named topics the caller may not DESCRIBE answer
TOPIC_AUTHORIZATION_FAILED, and a fetch of every topic leaves them out). Before v2 a group's
error is each partition's (v1 has no top-level error); v8 answers each group on its own.

**OffsetDelete** (DELETE on the GROUP; READ on each TOPIC): the coordinator refuses a group
with members subscribed to the topic (GROUP_SUBSCRIBED_TO_TOPIC) or that does not exist.

Concurrency: event-loop only.
"""

from __future__ import annotations

from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer.group import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

from stratalog.server import groups as group_core
from stratalog.server.kafka.apis.groups import GROUP_IDS_MAX, failure_code, group_error_code
from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, code_of
from stratalog.server.security.acls import AclOperation, ResourceType

__all__ = ["offset_commit", "offset_delete", "offset_fetch"]

_CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
_CommitPartition = _CommitTopic.OffsetCommitResponsePartition
_FetchTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_FetchPartition = _FetchTopic.OffsetFetchResponsePartition
_FetchGroup = OffsetFetchResponse.OffsetFetchResponseGroup
_FetchGroupTopic = _FetchGroup.OffsetFetchResponseTopics
_FetchGroupPartition = _FetchGroupTopic.OffsetFetchResponsePartitions
_DeleteTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_DeletePartition = _DeleteTopic.OffsetDeleteResponsePartition

#: Kafka's "no committed offset" (OffsetFetchResponse.INVALID_OFFSET).
_NO_OFFSET = -1


# ---------------------------------------------------------------- OffsetCommit


@kafka_api(ApiKey.OffsetCommit, versions=(2, 8))
async def offset_commit(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    version = request.API_VERSION
    group_id = request.group_id
    # (topic, partition, code) in request order; code None: committed below.
    codes: list[tuple[str, int, int | None]] = []
    to_commit: list[group_core.PartitionOffset] = []
    group_allowed = ctx.allowed(AclOperation.READ, ResourceType.GROUP, group_id)
    groups = ctx.services.groups
    for topic in request.topics:
        name = topic.name
        topic_allowed = group_allowed and ctx.allowed(AclOperation.READ, ResourceType.TOPIC,
                                                      name)
        for partition in topic.partitions:
            index = partition.partition_index
            if not group_allowed:
                codes.append((name, index, Code.GROUP_AUTHORIZATION_FAILED))
                continue
            if not topic_allowed:
                codes.append((name, index, Code.TOPIC_AUTHORIZATION_FAILED))
                continue
            if partition.committed_offset < 0:
                codes.append((name, index, Code.INVALID_REQUEST))
                continue
            item = group_core.PartitionOffset(
                name, index, partition.committed_offset,
                partition.committed_leader_epoch if version >= 6 else -1,
                partition.committed_metadata or "",
            )
            try:
                # The serving layer's check, one partition at a time: Kafka answers each.
                groups.check_commit((item,))
            except Exception as exc:
                codes.append((name, index, failure_code(exc)))
                continue
            codes.append((name, index, None))
            to_commit.append(item)
    committed: dict[tuple[str, int], int] = {}
    if to_commit:
        commit = group_core.OffsetCommitRequest(
            group_id=group_id,
            offsets=tuple(to_commit),
            member_id=request.member_id,
            generation_id=request.generation_id_or_member_epoch,
            group_instance_id=request.group_instance_id if version >= 7 else None,
            retention_ms=request.retention_time_ms if version <= 4 else -1,
        )
        try:
            response = await groups.commit_offsets(commit)
        except Exception as exc:
            code = failure_code(exc)
            committed = {(p.topic, p.partition): code for p in to_commit}
        else:
            committed = {(p.topic, p.partition): group_error_code(p.error)
                         for p in response.partitions}
    topics: dict[str, list[_CommitPartition]] = {}
    for name, index, code in codes:
        if code is None:
            code = committed.get((name, index), Code.UNKNOWN_SERVER_ERROR)
        topics.setdefault(name, []).append(_CommitPartition(partition_index=index,
                                                            error_code=code))
    return OffsetCommitResponse(throttle_time_ms=0, topics=[
        _CommitTopic(name=name, partitions=partitions) for name, partitions in topics.items()])


# ---------------------------------------------------------------- OffsetFetch


class _GroupOffsets:
    """One group's answer: its error, and (topic, partition, offset, leader epoch, metadata,
    error code) per partition, in the order answered."""

    __slots__ = ("code", "partitions")

    def __init__(self, code: int,
                 partitions: list[tuple[str, int, int, int, str | None, int]]) -> None:
        self.code = code
        self.partitions = partitions


@kafka_api(ApiKey.OffsetFetch, versions=(1, 8))
async def offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    version = request.API_VERSION
    require_stable = bool(request.require_stable) if version >= 7 else False
    if version >= 8:
        asked = list(request.groups)
        answers = []
        for group in asked:
            if len(asked) > GROUP_IDS_MAX:
                offsets = _GroupOffsets(Code.INVALID_REQUEST, [])
            else:
                topics = None if group.topics is None else [
                    (t.name, list(t.partition_indexes)) for t in group.topics]
                offsets = await _group_offsets(ctx, group.group_id, topics, require_stable)
            answers.append(_FetchGroup(
                group_id=group.group_id, error_code=offsets.code, topics=[
                    _FetchGroupTopic(name=name, partitions=[
                        _FetchGroupPartition(
                            partition_index=index, committed_offset=offset,
                            committed_leader_epoch=epoch, metadata=metadata, error_code=code)
                        for index, offset, epoch, metadata, code in partitions])
                    for name, partitions in _by_topic(offsets).items()]))
        return OffsetFetchResponse(throttle_time_ms=0, groups=answers)
    # v1's topics are never null; from v2 null asks for every committed partition.
    topics = None if request.topics is None else [
        (t.name, list(t.partition_indexes)) for t in request.topics]
    offsets = await _group_offsets(ctx, request.group_id, topics, require_stable)
    if version < 2 and offsets.code != Code.NONE:
        # Kafka's OffsetFetchRequest.getErrorResponse before v2: each partition's error.
        offsets = _GroupOffsets(offsets.code, [
            (name, index, _NO_OFFSET, -1, "", offsets.code)
            for name, indexes in topics or () for index in indexes])
    return OffsetFetchResponse(
        throttle_time_ms=0, error_code=offsets.code if version >= 2 else Code.NONE, topics=[
            _FetchTopic(name=name, partitions=[
                _FetchPartition(partition_index=index, committed_offset=offset,
                                committed_leader_epoch=epoch, metadata=metadata,
                                error_code=code)
                for index, offset, epoch, metadata, code in partitions])
            for name, partitions in _by_topic(offsets).items()])


def _by_topic(offsets: _GroupOffsets) -> dict[str, list[tuple[int, int, int, str | None, int]]]:
    topics: dict[str, list[tuple[int, int, int, str | None, int]]] = {}
    for name, index, offset, epoch, metadata, code in offsets.partitions:
        topics.setdefault(name, []).append((index, offset, epoch, metadata, code))
    return topics


async def _group_offsets(ctx: RequestContext, group_id: str,
                         topics: list[tuple[str, list[int]]] | None,
                         require_stable: bool) -> _GroupOffsets:
    """One group's committed offsets of ``topics`` (None: every committed partition), as
    KafkaApis' fetchOffsetsForGroup and fetchAllOffsetsForGroup answer them."""
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return _GroupOffsets(Code.GROUP_AUTHORIZATION_FAILED, [])
    refused: list[tuple[str, int, int, int, str | None, int]] = []
    partitions: tuple[tuple[str, int], ...] | None = None
    if topics is not None:
        asked = []
        for name, indexes in topics:
            if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                asked.extend((name, index) for index in indexes)
            else:
                refused.extend((name, index, _NO_OFFSET, -1, "",
                                Code.TOPIC_AUTHORIZATION_FAILED) for index in indexes)
        partitions = tuple(asked)
    try:
        response = await ctx.services.groups.fetch_offsets(
            group_core.OffsetFetchRequest(group_id, partitions, require_stable))
    except Exception as exc:
        return _GroupOffsets(failure_code(exc), [])
    if response.error is not None:
        return _GroupOffsets(response.error.code, [])
    found = [
        (f.topic, f.partition, f.offset, f.leader_epoch, f.metadata,
         group_error_code(f.error))
        for f in response.partitions
        # Every topic: those the caller may not DESCRIBE are left out, as Kafka's.
        if topics is not None or ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                             f.topic)
    ]
    return _GroupOffsets(Code.NONE, found + refused)


# ---------------------------------------------------------------- OffsetDelete


@kafka_api(ApiKey.OffsetDelete, versions=(0, 0))
async def offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    group_id = request.group_id
    if not ctx.allowed(AclOperation.DELETE, ResourceType.GROUP, group_id):
        return OffsetDeleteResponse(error_code=Code.GROUP_AUTHORIZATION_FAILED, topics=[])
    codes: list[tuple[str, int, int | None]] = []
    asked: list[tuple[str, int]] = []
    for topic in request.topics:
        allowed = ctx.allowed(AclOperation.READ, ResourceType.TOPIC, topic.name)
        for partition in topic.partitions:
            if allowed:
                codes.append((topic.name, partition.partition_index, None))
                asked.append((topic.name, partition.partition_index))
            else:
                codes.append((topic.name, partition.partition_index,
                              Code.TOPIC_AUTHORIZATION_FAILED))
    deleted: dict[tuple[str, int], int] = {}
    if asked:
        try:
            response = await ctx.services.groups.delete_offsets(
                group_core.OffsetDeleteRequest(group_id, tuple(asked)))
        except Exception as exc:
            return OffsetDeleteResponse(error_code=failure_code(exc), topics=[])
        if response.error is not None:
            return OffsetDeleteResponse(error_code=code_of(response.error), topics=[])
        deleted = {(p.topic, p.partition): group_error_code(p.error)
                   for p in response.partitions}
    topics: dict[str, list[_DeletePartition]] = {}
    for name, index, code in codes:
        if code is None:
            code = deleted.get((name, index), Code.NONE)
        topics.setdefault(name, []).append(_DeletePartition(partition_index=index,
                                                            error_code=code))
    return OffsetDeleteResponse(error_code=Code.NONE, throttle_time_ms=0, topics=[
        _DeleteTopic(name=name, partitions=partitions) for name, partitions in topics.items()])
