"""Topic administration over Kafka's protocol: CreateTopics (key 19, versions 2 to 7),
DeleteTopics (20, 1 to 6), CreatePartitions (37, 0 to 3) and DeleteRecords (21, 0 to 2).

Each handler checks the request's shape, authorizes each topic as Kafka's ``KafkaApis`` and
``ControllerApis`` do (``core/src/main/scala/kafka/server/KafkaApis.scala``,
``core/src/main/scala/kafka/server/ControllerApis.scala``), and makes one call per topic to the
serving layer (:class:`~stratalog.server.broker.AdminManager`; DeleteRecords:
:meth:`~stratalog.server.broker.ReplicaManager.delete_records`), the same calls the gRPC front
end makes. Every topic gets its own error code (error_codes.py); none fails the request::

    CreateTopics      CREATE on the cluster, or on the topic     TOPIC_AUTHORIZATION_FAILED
                      (v5+ answers the configs only with DESCRIBE_CONFIGS on the topic, else
                      topic_config_error_code TOPIC_AUTHORIZATION_FAILED)
    DeleteTopics      DELETE on the topic                        TOPIC_AUTHORIZATION_FAILED
    CreatePartitions  ALTER on the topic                         TOPIC_AUTHORIZATION_FAILED
    DeleteRecords     DELETE on the topic                        TOPIC_AUTHORIZATION_FAILED

A topic named twice in one request is INVALID_REQUEST (Kafka's rule). ``num_partitions`` and
``replication_factor`` -1 stand for the server's defaults (``num_partitions``, and
``default_replication_factor``: 0 for the serving layer); a replication factor of 0 or below
-1 is INVALID_REPLICATION_FACTOR, with Kafka's message. Manual replica assignments are refused
(INVALID_REQUEST): the serving layer places replicas itself (docs/kafka-protocol.md). DeleteTopics
v6 names topics by id as well; this server names topics only, so an id without a name is
UNKNOWN_TOPIC_ID. ``timeout_ms`` is not waited on: each call returns once done (a cluster's
etcd writes are bounded by ``ADMIN_TIMEOUT_S``).

Concurrency: event-loop only.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import TYPE_CHECKING

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.api_key import ApiKey

from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.error_codes import Code, KafkaRequestError, code_of, message_of
from stratalog.server.security.acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from stratalog.server.broker import AdminManager
    from stratalog.server.kafka.context import RequestContext
    from stratalog.server.storage.log_manager import TopicDescription

__all__ = ["create_partitions", "create_topics", "delete_records", "delete_topics"]

_ZERO_UUID = uuid.UUID(int=0)
#: DeleteRecords' low watermark of a partition that failed (Kafka's INVALID_LOW_WATERMARK).
_INVALID_LOW_WATERMARK = -1
#: Kafka's "use the server's default" for a partition count or a replication factor.
_DEFAULT = -1

_TopicResult = CreateTopicsResponse.CreatableTopicResult
_TopicConfig = _TopicResult.CreatableTopicConfigs
_Deleted = DeleteTopicsResponse.DeletableTopicResult
_Grown = CreatePartitionsResponse.CreatePartitionsTopicResult
_RecordsTopic = DeleteRecordsResponse.DeleteRecordsTopicResult
_RecordsPartition = _RecordsTopic.DeleteRecordsPartitionResult


def _repeated(names: list[str]) -> frozenset[str]:
    return frozenset(name for name, count in Counter(names).items() if count > 1)


def _duplicate(what: str) -> KafkaRequestError:
    return KafkaRequestError(Code.INVALID_REQUEST, f"{what} is named more than once in the"
                                                   " request")


# ---------------------------------------------------------------------------- CreateTopics


@kafka_api(ApiKey.CreateTopics, versions=(2, 7))
async def create_topics(ctx: RequestContext, request: CreateTopicsRequest
                        ) -> CreateTopicsResponse:
    cluster_create = ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
    repeated = _repeated([topic.name for topic in request.topics])
    results: dict[str, _TopicResult] = {}
    for topic in request.topics:
        if topic.name in results:
            continue
        try:
            if topic.name in repeated:
                raise _duplicate(f"topic {topic.name}")
            if not cluster_create and not ctx.allowed(AclOperation.CREATE, ResourceType.TOPIC,
                                                      topic.name):
                raise KafkaRequestError(
                    Code.TOPIC_AUTHORIZATION_FAILED,
                    f"not authorized to create topic {topic.name}: CREATE on the cluster or"
                    " on the topic is needed")
            description = await _create_one(ctx.services.admin, topic,
                                            bool(request.validate_only))
        except Exception as exc:
            results[topic.name] = _TopicResult(
                name=topic.name, topic_id=_ZERO_UUID, error_code=code_of(exc),
                error_message=message_of(exc), topic_config_error_code=Code.NONE,
                num_partitions=_DEFAULT, replication_factor=_DEFAULT, configs=None)
            continue
        results[topic.name] = _created(ctx, description)
    return CreateTopicsResponse(throttle_time_ms=0, topics=list(results.values()))


async def _create_one(admin: AdminManager, topic: CreateTopicsRequest.CreatableTopic,
                      validate_only: bool) -> TopicDescription:
    """One topic of a CreateTopics request, its shape checked, created (or validated)."""
    if topic.assignments:
        raise KafkaRequestError(
            Code.INVALID_REQUEST,
            f"topic {topic.name}: manual replica assignments are not supported; give"
            " num_partitions and replication_factor (the server places the replicas)")
    factor = topic.replication_factor
    if factor == 0 or factor < _DEFAULT:
        raise KafkaRequestError(
            Code.INVALID_REPLICATION_FACTOR,
            f"topic {topic.name}: replication factor must be larger than 0, or -1 to use the"
            f" default value; got {factor}")
    configs: dict[str, str] = {}
    for config in topic.configs:
        if config.value is None:
            raise KafkaRequestError(Code.INVALID_CONFIG, f"topic {topic.name}: config"
                                                         f" {config.name} has a null value")
        if config.name in configs:
            raise _duplicate(f"config {config.name} of topic {topic.name}")
        configs[config.name] = config.value
    partitions = None if topic.num_partitions == _DEFAULT else topic.num_partitions
    return await admin.create_topic(topic.name, partitions, configs,
                                    0 if factor == _DEFAULT else factor,
                                    validate_only=validate_only)


def _created(ctx: RequestContext, description: TopicDescription) -> _TopicResult:
    """A created (or validated) topic's result: v5+ carries its partitions, replication factor
    and configs (these only for a caller who may DESCRIBE_CONFIGS it, as Kafka does)."""
    admin = ctx.services.admin
    name = description.name
    if ctx.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name):
        config_error = Code.NONE
        configs = [
            _TopicConfig(name=entry.name, value=None if entry.sensitive else entry.value,
                         read_only=entry.read_only, config_source=entry.source,
                         is_sensitive=entry.sensitive)
            for entry in admin.config_entries(description)
        ]
    else:
        config_error, configs = Code.TOPIC_AUTHORIZATION_FAILED, None
    return _TopicResult(
        name=name, topic_id=_ZERO_UUID, error_code=Code.NONE, error_message=None,
        topic_config_error_code=config_error, num_partitions=len(description.partitions),
        replication_factor=admin.replication_factor(name), configs=configs)


# ---------------------------------------------------------------------------- DeleteTopics


@kafka_api(ApiKey.DeleteTopics, versions=(1, 6))
async def delete_topics(ctx: RequestContext, request: DeleteTopicsRequest
                        ) -> DeleteTopicsResponse:
    if request.API_VERSION >= 6:
        named = [(state.name, state.topic_id) for state in request.topics]
    else:
        named = [(name, _ZERO_UUID) for name in request.topic_names]
    repeated = _repeated([name for name, _ in named if name is not None])
    results: list[_Deleted] = []
    done: set[str] = set()
    for name, topic_id in named:
        if name is not None and name in done:
            continue
        try:
            if name is None:
                raise KafkaRequestError(
                    Code.UNKNOWN_TOPIC_ID,
                    f"topic id {topic_id}: this server names topics by name only")
            done.add(name)
            if name in repeated:
                raise _duplicate(f"topic {name}")
            if not ctx.allowed(AclOperation.DELETE, ResourceType.TOPIC, name):
                raise KafkaRequestError(Code.TOPIC_AUTHORIZATION_FAILED,
                                        f"not authorized to delete topic {name}")
            await ctx.services.admin.delete_topic(name)
        except Exception as exc:
            results.append(_Deleted(name=name, topic_id=topic_id, error_code=code_of(exc),
                                    error_message=message_of(exc)))
            continue
        results.append(_Deleted(name=name, topic_id=topic_id, error_code=Code.NONE,
                                error_message=None))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


# ---------------------------------------------------------------------------- CreatePartitions


@kafka_api(ApiKey.CreatePartitions, versions=(0, 3))
async def create_partitions(ctx: RequestContext, request: CreatePartitionsRequest
                            ) -> CreatePartitionsResponse:
    repeated = _repeated([topic.name for topic in request.topics])
    results: dict[str, _Grown] = {}
    for topic in request.topics:
        if topic.name in results:
            continue
        try:
            if topic.name in repeated:
                raise _duplicate(f"topic {topic.name}")
            if not ctx.allowed(AclOperation.ALTER, ResourceType.TOPIC, topic.name):
                raise KafkaRequestError(Code.TOPIC_AUTHORIZATION_FAILED,
                                        f"not authorized to alter topic {topic.name}")
            if topic.assignments is not None:
                raise KafkaRequestError(
                    Code.INVALID_REQUEST,
                    f"topic {topic.name}: manual replica assignments are not supported; give"
                    " the count only (the server places the new partitions)")
            await ctx.services.admin.create_partitions(
                topic.name, topic.count, validate_only=bool(request.validate_only))
        except Exception as exc:
            results[topic.name] = _Grown(name=topic.name, error_code=code_of(exc),
                                         error_message=message_of(exc))
            continue
        results[topic.name] = _Grown(name=topic.name, error_code=Code.NONE, error_message=None)
    return CreatePartitionsResponse(throttle_time_ms=0, results=list(results.values()))


# ---------------------------------------------------------------------------- DeleteRecords


@kafka_api(ApiKey.DeleteRecords, versions=(0, 2))
async def delete_records(ctx: RequestContext, request: DeleteRecordsRequest
                         ) -> DeleteRecordsResponse:
    """Each partition's log start moved up to its ``offset`` (-1: the high watermark), on its
    leader; the answer's ``low_watermark`` is the new log start."""
    replicas = ctx.services.replicas
    topics: dict[str, list[_RecordsPartition]] = {}
    for topic in request.topics:
        allowed = ctx.allowed(AclOperation.DELETE, ResourceType.TOPIC, topic.name)
        answered = topics.setdefault(topic.name, [])
        for partition in topic.partitions:
            try:
                if not allowed:
                    raise KafkaRequestError(Code.TOPIC_AUTHORIZATION_FAILED,
                                            f"not authorized to delete records of {topic.name}")
                low_watermark = await replicas.delete_records(
                    topic.name, partition.partition_index, partition.offset)
                code = Code.NONE
            except Exception as exc:
                low_watermark, code = _INVALID_LOW_WATERMARK, code_of(exc)
            answered.append(_RecordsPartition(partition_index=partition.partition_index,
                                              low_watermark=low_watermark, error_code=code))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=[
        _RecordsTopic(name=name, partitions=partitions) for name, partitions in topics.items()])
