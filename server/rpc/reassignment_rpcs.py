"""The reassignment RPCs of the Broker service: AlterPartitionReassignments,
ListPartitionReassignments and DrainBroker (issue 29; docs/cluster.md, "Reassigning
partitions").

Each checks its request's shape, makes one call to the serving layer's administration
(:class:`~stratalog.server.broker.AdminManager`, which hands it to
server/cluster/reassignment.py in cluster mode) and translates the answer: one result per
partition, its error as an ErrorReason (server/rpc/status.py's one table). Authorization
(ALTER, or DESCRIBE for the listing, on the cluster) is the interceptor's, before the call.

Concurrency: event-loop only.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import grpc.aio

from stratalog.server.rpc.requests import RpcBase, rpc_method
from stratalog.server.rpc.status import error_reason
from stratalog.server.rpc.translation import BadRequestError
from stratalog.v1 import broker_pb2

__all__ = ["ReassignmentRpcs"]

#: The most partitions one request may name (each is an etcd write or read).
PARTITIONS_PER_REQUEST_MAX = 10_000


def _result(topic: str, partition: int, error: Exception | None,
            replicas: Sequence[int] = ()) -> broker_pb2.ReassignmentResult:
    reason, message = (error_reason(error) if error is not None
                       else (broker_pb2.ERROR_REASON_UNSPECIFIED, ""))
    return broker_pb2.ReassignmentResult(topic=topic, partition=partition, reason=reason,
                                         message=message, replicas=list(replicas))


class ReassignmentRpcs(RpcBase):
    """The reassignment RPCs (module docstring)."""

    def _check_count(self, count: int) -> None:
        if count > PARTITIONS_PER_REQUEST_MAX:
            raise BadRequestError("partitions", f"{count} partitions named; at most"
                                  f" {PARTITIONS_PER_REQUEST_MAX} per request")

    @rpc_method()
    async def AlterPartitionReassignments(
        self, request: broker_pb2.AlterPartitionReassignmentsRequest,
        context: grpc.aio.ServicerContext,
    ) -> broker_pb2.AlterPartitionReassignmentsResponse:
        self._check_count(len(request.partitions))
        requested: dict[tuple[str, int], tuple[int, ...] | None] = {}
        for named in request.partitions:
            topic = self._topic(named.topic, "partitions.topic")
            if named.partition < 0:
                raise BadRequestError("partitions.partition",
                                      f"partition {named.partition} of {topic} is negative")
            if (topic, named.partition) in requested:
                raise BadRequestError("partitions", f"{topic}-{named.partition} is named twice")
            if any(node < 0 for node in named.replicas):
                raise BadRequestError("partitions.replicas",
                                      f"{list(named.replicas)} holds a negative node id")
            requested[(topic, named.partition)] = tuple(named.replicas) or None
        outcomes = await self._admin.alter_partition_reassignments(requested)
        return broker_pb2.AlterPartitionReassignmentsResponse(
            results=[_result(topic, partition, error)
                     for (topic, partition), error in sorted(outcomes.items())])

    @rpc_method()
    async def ListPartitionReassignments(
        self, request: broker_pb2.ListPartitionReassignmentsRequest,
        context: grpc.aio.ServicerContext,
    ) -> broker_pb2.ListPartitionReassignmentsResponse:
        self._check_count(len(request.partitions))
        requested = [(self._topic(named.topic, "partitions.topic"), named.partition)
                     for named in request.partitions] or None
        listed = await self._admin.list_partition_reassignments(requested)
        return broker_pb2.ListPartitionReassignmentsResponse(reassignments=[
            broker_pb2.OngoingReassignment(
                topic=ongoing.topic, partition=ongoing.partition,
                replicas=list(ongoing.replicas), adding_replicas=list(ongoing.adding),
                removing_replicas=list(ongoing.removing), leader=ongoing.leader,
                leader_log_end_offset=ongoing.leader_log_end_offset,
                progress=[broker_pb2.ReplicaProgress(node_id=node, log_end_offset=end)
                          for node, end in sorted(ongoing.progress.items())])
            for ongoing in listed])

    @rpc_method()
    async def DrainBroker(
        self, request: broker_pb2.DrainBrokerRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DrainBrokerResponse:
        if request.node_id < 0:
            raise BadRequestError("node_id", f"node id {request.node_id} is negative")
        planned = await self._admin.drain_broker(request.node_id)
        return broker_pb2.DrainBrokerResponse(results=[
            _result(topic, partition, outcome, ()) if isinstance(outcome, Exception)
            else _result(topic, partition, None, outcome)
            for (topic, partition), outcome in sorted(planned.items())])
