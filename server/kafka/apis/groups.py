"""FindCoordinator (key 10, versions 0 to 4): where a group or a transactional id is
coordinated, through the group service (Kafka's ``KafkaApis.handleFindCoordinatorRequest``).

A STAND-IN, written on the transactions branch so that transactional producers can find their
coordinator: the consumer-groups part of issue 28 owns this module (FindCoordinator with the
group APIs) and replaces it whole at the merge.

* Key type 0 (GROUP): the group's ``__consumer_offsets`` partition's coordinator, this server on
  a single server (``GroupService.find_coordinator``, which creates the topic);
  COORDINATOR_NOT_AVAILABLE while it cannot. DESCRIBE on the group.
* Key type 1 (TRANSACTION): this server's transaction coordinator keeps every transactional id
  (server/transactions): always this server. DESCRIBE on the transactional id.
* Version 4 batches keys (``coordinator_keys``), one answer each.
"""

from __future__ import annotations

from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, code_of, message_of
from stratalog.server.security.acls import AclOperation, ResourceType

__all__ = ["find_coordinator"]

_Coordinator = FindCoordinatorResponse.Coordinator
_GROUP, _TRANSACTION = 0, 1


@kafka_api(ApiKey.FindCoordinator, versions=(0, 4))
async def find_coordinator(ctx: RequestContext,
                           request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    version = request.API_VERSION
    key_type = request.key_type if version >= 1 else _GROUP
    if version >= 4:
        keys = list(request.coordinator_keys)  # bounded by the request's size
        answers = [await _find(ctx, key_type, key) for key in keys]
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            _Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=code,
                         error_message=message)
            for key, (code, message, node_id, host, port) in zip(keys, answers, strict=True)])
    code, message, node_id, host, port = await _find(ctx, key_type, request.key)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                   node_id=node_id, host=host, port=port)


async def _find(ctx: RequestContext, key_type: int,
                key: str) -> tuple[int, str | None, int, str, int]:
    """(error code, message, node id, host, port) for one key."""
    if key_type == _TRANSACTION:
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1, "", -1
        if not key:
            return Code.INVALID_REQUEST, "a transactional id must not be empty", -1, "", -1
    elif key_type == _GROUP:
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return Code.GROUP_AUTHORIZATION_FAILED, None, -1, "", -1
        groups = ctx.services.groups
        try:
            invalid = groups.config.group_id_error(key)
            if invalid is not None:
                raise invalid
            found = await groups.find_coordinator(key)
        except Exception as exc:
            return code_of(exc), message_of(exc), -1, "", -1
        if found.node_id is not None:
            address = ctx.services.broker_addresses().get(found.node_id)
            if address is None:
                return Code.COORDINATOR_NOT_AVAILABLE, "the coordinator is not live", -1, "", -1
            return Code.NONE, None, found.node_id, address.host, address.port
    else:
        return Code.INVALID_REQUEST, f"unknown key type {key_type}", -1, "", -1
    node_id, address = min(ctx.services.broker_addresses().items())
    return Code.NONE, None, node_id, address.host, address.port
