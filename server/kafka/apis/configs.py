"""Configs over Kafka's protocol: DescribeConfigs (key 32, versions 1 to 4), AlterConfigs (33,
0 to 2) and IncrementalAlterConfigs (44, 0 to 1).

Two resource types, as Kafka's ``ConfigResource.Type`` numbers them: TOPIC (2) and BROKER (4).
A topic's configs are the serving layer's (:class:`~stratalog.server.broker.AdminManager`:
``describe_topic_configs``, ``replace_topic_configs`` for AlterConfigs, which replaces every
override, and ``incremental_alter_topic_configs`` for SET / DELETE / APPEND / SUBTRACT).
A broker's configs are described read-only (its ``log.*`` defaults and Kafka-named settings);
altering them is refused with INVALID_REQUEST, as Kafka refuses a static broker config:
stratalog's settings live in its config file (docs/configuration.md). BROKER_LOGGER and the
other types are INVALID_REQUEST ("unsupported resource type"), as Kafka answers a type it does
not know (docs/kafka-protocol.md).

Authorization as Kafka's ``KafkaApis`` (``handleDescribeConfigsRequest``,
``handleAlterConfigsRequest``, ``handleIncrementalAlterConfigsRequest`` in
``core/src/main/scala/kafka/server/KafkaApis.scala``)::

    DescribeConfigs   TOPIC: DESCRIBE_CONFIGS on it     else TOPIC_AUTHORIZATION_FAILED
                      BROKER: DESCRIBE_CONFIGS on the cluster   else CLUSTER_AUTHORIZATION_FAILED
    AlterConfigs,     TOPIC: ALTER_CONFIGS on it        else TOPIC_AUTHORIZATION_FAILED
    Incremental...    BROKER: ALTER_CONFIGS on the cluster      else CLUSTER_AUTHORIZATION_FAILED

A BROKER resource is named by the broker's node id; an empty name is the cluster-wide dynamic
defaults, of which stratalog has none (an empty list). Another broker's id is INVALID_REQUEST.
A resource named twice in one alteration, or a config named twice in one resource, is
INVALID_REQUEST. Each resource gets its own error code (error_codes.py).

Concurrency: event-loop only.
"""

from __future__ import annotations

import enum
from collections import Counter
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.api_key import ApiKey

from stratalog.server.broker import ConfigOp
from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.error_codes import Code, KafkaRequestError, code_of, message_of
from stratalog.server.security.acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from stratalog.server.broker.config_descriptions import ConfigEntry
    from stratalog.server.kafka.context import RequestContext

__all__ = ["alter_configs", "describe_configs", "incremental_alter_configs"]

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = _Result.DescribeConfigsResourceResult
_Synonym = _Entry.DescribeConfigsSynonym
_Altered = AlterConfigsResponse.AlterConfigsResourceResponse
_IncrementallyAltered = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` (the values on the wire)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


def _resource_type(value: int) -> ConfigResourceType:
    """The two types served; any other is INVALID_REQUEST."""
    if value not in (ConfigResourceType.TOPIC, ConfigResourceType.BROKER):
        known = {t.value: t.name for t in ConfigResourceType}
        raise KafkaRequestError(
            Code.INVALID_REQUEST,
            f"unsupported resource type {known.get(value, value)}: this server has configs for"
            " TOPIC and BROKER resources only")
    return ConfigResourceType(value)


def _check_broker(ctx: RequestContext, name: str, operation: AclOperation) -> None:
    """A BROKER resource: the caller may ``operation`` on the cluster, and it names this
    broker (or is empty: the cluster-wide defaults)."""
    if not ctx.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        raise KafkaRequestError(Code.CLUSTER_AUTHORIZATION_FAILED,
                                f"not authorized to {operation.name} on the cluster")
    node_id = ctx.services.admin.node_id
    if name not in ("", str(node_id)):
        raise KafkaRequestError(
            Code.INVALID_REQUEST,
            f"unexpected broker id {name!r}: this broker is {node_id} (or use the empty name"
            " for the cluster-wide defaults)")


def _check_topic(ctx: RequestContext, name: str, operation: AclOperation) -> None:
    if not ctx.allowed(operation, ResourceType.TOPIC, name):
        raise KafkaRequestError(Code.TOPIC_AUTHORIZATION_FAILED,
                                f"not authorized to {operation.name} on topic {name}")


def _refuse_broker_change(name: str) -> KafkaRequestError:
    return KafkaRequestError(
        Code.INVALID_REQUEST,
        f"broker {name or '(cluster-wide defaults)'}: this server's configs cannot be changed"
        " through the Kafka protocol; they are settings in its config file, environment or"
        " flags (docs/configuration.md), read at start")


def _repeated_resources(resources: list[tuple[int, str]]) -> frozenset[tuple[int, str]]:
    return frozenset(key for key, count in Counter(resources).items() if count > 1)


def _refuse_if_repeated(resource: Any, repeated: frozenset[tuple[int, str]]) -> None:
    """An alteration may name a resource once (Kafka answers INVALID_REQUEST for each repeat)."""
    if (resource.resource_type, resource.resource_name) in repeated:
        raise KafkaRequestError(Code.INVALID_REQUEST, f"resource {resource.resource_name!r} is"
                                " named more than once in the request")


# ---------------------------------------------------------------------------- describe


@kafka_api(ApiKey.DescribeConfigs, versions=(1, 4))
async def describe_configs(ctx: RequestContext, request: DescribeConfigsRequest
                           ) -> DescribeConfigsResponse:
    results = []
    for resource in request.resources:
        try:
            entries = await _described(ctx, resource)
        except Exception as exc:
            results.append(_Result(error_code=code_of(exc), error_message=message_of(exc),
                                   resource_type=resource.resource_type,
                                   resource_name=resource.resource_name, configs=[]))
            continue
        keys = resource.configuration_keys
        if keys is not None:
            wanted = frozenset(keys)
            entries = [entry for entry in entries if entry.name in wanted]
        results.append(_Result(
            error_code=Code.NONE, error_message=None, resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=[_entry(entry, bool(request.include_synonyms)) for entry in entries]))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


async def _described(ctx: RequestContext,
                     resource: DescribeConfigsRequest.DescribeConfigsResource
                     ) -> list[ConfigEntry]:
    admin = ctx.services.admin
    name = resource.resource_name
    if _resource_type(resource.resource_type) == ConfigResourceType.BROKER:
        _check_broker(ctx, name, AclOperation.DESCRIBE_CONFIGS)
        return admin.describe_broker_configs() if name else []
    _check_topic(ctx, name, AclOperation.DESCRIBE_CONFIGS)
    return await admin.describe_topic_configs(name)


def _entry(entry: ConfigEntry, include_synonyms: bool) -> _Entry:
    hidden = entry.sensitive  # a sensitive value is never sent (Kafka sends null)
    return _Entry(
        name=entry.name, value=None if hidden else entry.value, read_only=entry.read_only,
        is_default=entry.is_default, config_source=entry.source, is_sensitive=entry.sensitive,
        synonyms=[
            _Synonym(name=synonym.name, value=None if hidden else synonym.value,
                     source=synonym.source)
            for synonym in entry.synonyms
        ] if include_synonyms else [],
        config_type=entry.type,
        documentation=None,
    )


# ---------------------------------------------------------------------------- alter


@kafka_api(ApiKey.AlterConfigs, versions=(0, 2))
async def alter_configs(ctx: RequestContext, request: AlterConfigsRequest
                        ) -> AlterConfigsResponse:
    """Kafka's AlterConfigs: each resource's configs replaced whole (overrides not given go
    back to the server default)."""
    repeated = _repeated_resources([(r.resource_type, r.resource_name)
                                    for r in request.resources])
    responses = []
    for resource in request.resources:
        try:
            _refuse_if_repeated(resource, repeated)
            configs = _configs(resource.resource_name,
                               [(config.name, config.value) for config in resource.configs])
            _check_alteration(ctx, resource.resource_type, resource.resource_name)
            nulls = sorted(name for name, value in configs.items() if value is None)
            if nulls:
                raise KafkaRequestError(
                    Code.INVALID_CONFIG,
                    f"topic {resource.resource_name}: null values are not supported ({nulls})")
            await ctx.services.admin.replace_topic_configs(
                resource.resource_name, configs, validate_only=bool(request.validate_only))
            code, message = Code.NONE, None
        except Exception as exc:
            code, message = code_of(exc), message_of(exc)
        responses.append(_Altered(error_code=code, error_message=message,
                                  resource_type=resource.resource_type,
                                  resource_name=resource.resource_name))
    return AlterConfigsResponse(throttle_time_ms=0, responses=responses)


@kafka_api(ApiKey.IncrementalAlterConfigs, versions=(0, 1))
async def incremental_alter_configs(ctx: RequestContext,
                                    request: IncrementalAlterConfigsRequest
                                    ) -> IncrementalAlterConfigsResponse:
    """Kafka's IncrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT on each config named."""
    repeated = _repeated_resources([(r.resource_type, r.resource_name)
                                    for r in request.resources])
    responses = []
    for resource in request.resources:
        try:
            _refuse_if_repeated(resource, repeated)
            _configs(resource.resource_name,
                     [(config.name, config.value) for config in resource.configs])
            operations = [(_operation(config.config_operation, config.name), config.name,
                           config.value) for config in resource.configs]
            _check_alteration(ctx, resource.resource_type, resource.resource_name)
            await ctx.services.admin.incremental_alter_topic_configs(
                resource.resource_name, operations, validate_only=bool(request.validate_only))
            code, message = Code.NONE, None
        except Exception as exc:
            code, message = code_of(exc), message_of(exc)
        responses.append(_IncrementallyAltered(error_code=code, error_message=message,
                                               resource_type=resource.resource_type,
                                               resource_name=resource.resource_name))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)


def _check_alteration(ctx: RequestContext, resource_type: int, name: str) -> None:
    """An alteration goes on only for a topic the caller may ALTER_CONFIGS; a broker's is
    refused, after its authorization (Kafka checks who asks first)."""
    if _resource_type(resource_type) == ConfigResourceType.BROKER:
        _check_broker(ctx, name, AclOperation.ALTER_CONFIGS)
        raise _refuse_broker_change(name)
    _check_topic(ctx, name, AclOperation.ALTER_CONFIGS)


def _configs(resource_name: str, pairs: list[tuple[str, str | None]]) -> dict[str, str | None]:
    """A resource's configs by name; a name given twice is INVALID_REQUEST."""
    configs: dict[str, str | None] = {}
    for name, value in pairs:
        if name in configs:
            raise KafkaRequestError(Code.INVALID_REQUEST,
                                    f"config {name} of {resource_name!r} is named more than"
                                    " once")
        configs[name] = value
    return configs


def _operation(value: int, name: str) -> ConfigOp:
    try:
        return ConfigOp(value)
    except ValueError:
        raise KafkaRequestError(
            Code.INVALID_REQUEST,
            f"config {name}: unknown operation {value} (SET 0, DELETE 1, APPEND 2,"
            " SUBTRACT 3)") from None
