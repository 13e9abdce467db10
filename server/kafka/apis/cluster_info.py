"""DescribeCluster (key 60, versions 0 to 1): the cluster's id, its controller and its brokers,
as Kafka's ``KafkaApis.handleDescribeCluster`` and ``AuthHelper.computeDescribeClusterResponse``
answer (``core/src/main/scala/kafka/server/KafkaApis.scala``,
``core/src/main/scala/kafka/server/AuthHelper.scala``).

No ACL is needed to ask (Kafka's rule); the cluster's authorized operations, when asked for,
are answered only to a caller with DESCRIBE on the cluster (else the schema's "not given",
Int.MinValue), as a bitfield of the cluster operations it may do. v1's endpoint type must be
BROKER (1): CONTROLLER is MISMATCHED_ENDPOINT_TYPE (this server is not a KRaft controller),
any other UNSUPPORTED_ENDPOINT_TYPE. The brokers are every live server's Kafka listener, as
Metadata answers them (``KafkaServices.broker_addresses``); the controller is the serving
layer's (:attr:`~stratalog.server.broker.AdminManager.controller_id`); the cluster id is
Metadata's (``KafkaServices.current_cluster_id``: etcd's in a cluster, "" before this server
joined).

Concurrency: event-loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.api_key import ApiKey

from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.error_codes import Code
from stratalog.server.security.acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from stratalog.server.kafka.context import RequestContext

__all__ = ["describe_cluster"]

_Broker = DescribeClusterResponse.DescribeClusterBroker
#: Kafka's ``EndpointType``: the listener a request may be sent to.
_BROKER_ENDPOINT, _CONTROLLER_ENDPOINT = 1, 2
#: The operations Kafka's authorizer knows on the cluster (``supportedOperations`` in
#: ``server/src/main/java/org/apache/kafka/security/authorizer/AclEntry.java``).
_CLUSTER_OPERATIONS = (
    AclOperation.ALTER, AclOperation.ALTER_CONFIGS, AclOperation.CLUSTER_ACTION,
    AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
)


@kafka_api(ApiKey.DescribeCluster, versions=(0, 1))
async def describe_cluster(ctx: RequestContext, request: DescribeClusterRequest
                           ) -> DescribeClusterResponse:
    services = ctx.services
    endpoint = request.endpoint_type if request.API_VERSION >= 1 else _BROKER_ENDPOINT
    if endpoint != _BROKER_ENDPOINT:
        code = (Code.MISMATCHED_ENDPOINT_TYPE if endpoint == _CONTROLLER_ENDPOINT
                else Code.UNSUPPORTED_ENDPOINT_TYPE)
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=code,
            error_message=f"endpoint type {endpoint}: this server answers as a broker"
                          f" (endpoint type {_BROKER_ENDPOINT}) only",
            endpoint_type=endpoint, cluster_id="", controller_id=-1, brokers=[],
            authorized_operations=None)
    operations = None  # the schema's default, Int.MinValue: not asked for, or not allowed
    if request.include_cluster_authorized_operations and ctx.allowed(
            AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        operations = {int(op) for op in _CLUSTER_OPERATIONS
                      if ctx.allowed(op, ResourceType.CLUSTER, CLUSTER_NAME)}
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=Code.NONE, error_message=None,
        endpoint_type=_BROKER_ENDPOINT, cluster_id=services.current_cluster_id() or "",
        controller_id=services.admin.controller_id,
        brokers=[_Broker(broker_id=node_id, host=address.host, port=address.port,
                          rack=services.broker_rack(node_id))
                 for node_id, address in sorted(services.broker_addresses().items())],
        authorized_operations=operations)
