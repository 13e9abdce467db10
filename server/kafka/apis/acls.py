"""CreateAcls (key 30), DescribeAcls (key 29) and DeleteAcls (key 31), versions 1 to 3: the
ACLs of the server's authorizer, the very bindings the gRPC RPCs of the same names manage
(server/rpc/security_rpcs.py), through the same Authorizer calls, as Kafka's
``KafkaApis.handleCreateAcls`` / ``handleDescribeAcls`` / ``handleDeleteAcls`` answer.

* Authorization: ALTER on the cluster to create or delete, DESCRIBE on the cluster to describe
  (Kafka's rules); otherwise every entry is answered CLUSTER_AUTHORIZATION_FAILED.
* Without an authorizer (``authorizer = "none"``) every entry is answered SECURITY_DISABLED,
  as Kafka answers without ``authorizer.class.name``.
* Kafka's numbers for resource types, pattern types (LITERAL, PREFIXED; MATCH and ANY in
  filters), operations and permission types are the model's own (server/security/acls.py
  takes them from broker.proto, which has Kafka's): they cross unchanged, and a number the
  model does not know (Kafka's DELEGATION_TOKEN and USER resources) is refused by its
  validation, INVALID_REQUEST with the field named.
* Each creation and each deletion filter is checked on its own (its own error, as Kafka's);
  the valid ones are stored in one update, all or none. A deletion filter's answer lists the
  bindings it matched among those deleted.
* Version 0 (no pattern types) is not served: every client tested sends 1 or later.
"""

from __future__ import annotations

import enum
from typing import Any

from kafka.protocol.admin import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from kafka.protocol.api_key import ApiKey

from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, code_of, message_of
from stratalog.server.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from stratalog.server.security.authorizer import Authorizer, managing_acls
from stratalog.server.security.errors import SecurityDisabledError

__all__ = ["create_acls", "delete_acls", "describe_acls"]

_CreationResult = CreateAclsResponse.AclCreationResult
_Resource = DescribeAclsResponse.DescribeAclsResource
_Description = _Resource.AclDescription
_FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
_Matching = _FilterResult.DeleteAclsMatchingAcl


def _enum(enum_type: type[enum.IntEnum], value: int) -> Any:
    # A number the model does not know stays an int: validated() refuses it by field name.
    return enum_type._value2member_map_.get(value, value)


def _authorizer(ctx: RequestContext, operation: AclOperation) -> Authorizer:
    """The authorizer, if the caller may do ``operation`` on the cluster.

    Raises:
        SecurityDisabledError: no authorizer.
        _Refused: the caller may not.
    """
    authorizer = managing_acls(ctx.services.authorizer)
    if not ctx.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        raise _Refused(f"{operation.name} on the cluster is needed to "
                       f"{'read' if operation == AclOperation.DESCRIBE else 'change'} ACLs")
    return authorizer


class _Refused(Exception):
    """The caller may not read or change ACLs: CLUSTER_AUTHORIZATION_FAILED."""


def _code(exc: Exception) -> int:
    return Code.CLUSTER_AUTHORIZATION_FAILED if isinstance(exc, _Refused) else code_of(exc)


def _message(exc: Exception) -> str:
    return str(exc) if isinstance(exc, _Refused) else message_of(exc)


@kafka_api(ApiKey.CreateAcls, versions=(1, 3))
async def create_acls(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    results: list[_CreationResult | None] = [None] * len(request.creations)
    try:
        authorizer = _authorizer(ctx, AclOperation.ALTER)
    except (SecurityDisabledError, _Refused) as exc:
        return CreateAclsResponse(throttle_time_ms=0, results=[
            _CreationResult(error_code=_code(exc), error_message=_message(exc))
            for _ in request.creations])
    valid: list[tuple[int, AclBinding]] = []
    for i, creation in enumerate(request.creations):
        binding = AclBinding(
            resource_type=_enum(ResourceType, creation.resource_type),
            resource_name=creation.resource_name,
            pattern_type=_enum(PatternType, creation.resource_pattern_type),
            principal=creation.principal, host=creation.host,
            operation=_enum(AclOperation, creation.operation),
            permission_type=_enum(AclPermissionType, creation.permission_type),
        )
        try:
            valid.append((i, binding.validated(f"creations[{i}]")))
        except Exception as exc:
            results[i] = _CreationResult(error_code=code_of(exc), error_message=message_of(exc))
    if valid:
        try:
            await authorizer.create_acls([binding for _, binding in valid])
            outcome = _CreationResult(error_code=Code.NONE, error_message=None)
        except Exception as exc:
            outcome = _CreationResult(error_code=code_of(exc), error_message=message_of(exc))
        for i, _ in valid:
            results[i] = outcome
    return CreateAclsResponse(throttle_time_ms=0, results=results)


@kafka_api(ApiKey.DescribeAcls, versions=(1, 3))
async def describe_acls(ctx: RequestContext,
                        request: DescribeAclsRequest) -> DescribeAclsResponse:
    acl_filter = AclBindingFilter(
        resource_type=_enum(ResourceType, request.resource_type_filter),
        resource_name=request.resource_name_filter,
        pattern_type=_enum(PatternType, request.pattern_type_filter),
        principal=request.principal_filter, host=request.host_filter,
        operation=_enum(AclOperation, request.operation),
        permission_type=_enum(AclPermissionType, request.permission_type),
    )
    try:
        bindings = _authorizer(ctx, AclOperation.DESCRIBE).describe_acls(acl_filter)
    except Exception as exc:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=_code(exc),
                                    error_message=_message(exc), resources=[])
    # Kafka's answer groups the entries by resource pattern, in the order first seen.
    grouped: dict[tuple[int, str, int], list[_Description]] = {}
    for b in bindings:
        key = (int(b.resource_type), b.resource_name, int(b.pattern_type))
        grouped.setdefault(key, []).append(_Description(
            principal=b.principal, host=b.host, operation=int(b.operation),
            permission_type=int(b.permission_type)))
    return DescribeAclsResponse(
        throttle_time_ms=0, error_code=Code.NONE, error_message=None,
        resources=[_Resource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
                   for (t, n, p), acls in grouped.items()])


@kafka_api(ApiKey.DeleteAcls, versions=(1, 3))
async def delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    results: list[_FilterResult | None] = [None] * len(request.filters)
    try:
        authorizer = _authorizer(ctx, AclOperation.ALTER)
    except (SecurityDisabledError, _Refused) as exc:
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            _FilterResult(error_code=_code(exc), error_message=_message(exc), matching_acls=[])
            for _ in request.filters])
    valid: list[tuple[int, AclBindingFilter]] = []
    for i, f in enumerate(request.filters):
        acl_filter = AclBindingFilter(
            resource_type=_enum(ResourceType, f.resource_type_filter),
            resource_name=f.resource_name_filter,
            pattern_type=_enum(PatternType, f.pattern_type_filter),
            principal=f.principal_filter, host=f.host_filter,
            operation=_enum(AclOperation, f.operation),
            permission_type=_enum(AclPermissionType, f.permission_type),
        )
        try:
            valid.append((i, acl_filter.validated(f"filters[{i}]")))
        except Exception as exc:
            results[i] = _FilterResult(error_code=code_of(exc), error_message=message_of(exc),
                                       matching_acls=[])
    if valid:
        try:
            deleted = await authorizer.delete_acls([f for _, f in valid])
        except Exception as exc:
            failed = _FilterResult(error_code=code_of(exc), error_message=message_of(exc),
                                   matching_acls=[])
            for i, _ in valid:
                results[i] = failed
        else:
            for i, acl_filter in valid:
                results[i] = _FilterResult(
                    error_code=Code.NONE, error_message=None,
                    matching_acls=[_matching(b) for b in deleted if acl_filter.matches(b)])
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)


def _matching(b: AclBinding) -> _Matching:
    return _Matching(error_code=Code.NONE, error_message=None,
                     resource_type=int(b.resource_type), resource_name=b.resource_name,
                     pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
                     operation=int(b.operation), permission_type=int(b.permission_type))
