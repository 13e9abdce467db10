"""The topic RPCs of the Broker service: CreateTopic, DeleteTopic, ListTopics, DescribeTopic,
AlterTopicConfigs, CreatePartitions, ElectLeaders, and Metadata (with Kafka's ``auto.create.topics.enable``).

Each checks its request's shape, makes one call to the serving layer's topic administration
(:class:`~stratalog.server.broker.AdminManager`: where topics live, single server or etcd, the
partition-count and replication-factor rules, auto-creation and its authorization) and builds
the response message; the Kafka front end's admin APIs make the same calls.

Concurrency: event-loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
import grpc.aio

from stratalog.server.cluster.preferred_leader import ElectionType
from stratalog.server.rpc.requests import RpcBase, rpc_method
from stratalog.server.rpc.status import error_reason
from stratalog.server.rpc.translation import (
    BadRequestError,
    CleanerPositions,
    metadata_message,
    topic_message,
)
from stratalog.server.security.principal import current_identity
from stratalog.server.storage.errors import InvalidPartitionsError
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.storage.log_manager import TopicDescription

__all__ = ["TopicRpcs"]


class TopicRpcs(RpcBase):
    """The topic RPCs (module docstring)."""

    def _topic_message(
        self, description: TopicDescription, cleaner: CleanerPositions | None = None
    ) -> broker_pb2.TopicDescription:
        # Log directories by their index in log_dirs: clients never learn the server's paths.
        return topic_message(description, self._log_manager.log_dirs, cleaner)

    def _partition_count(self, field: str, count: int, reason: str) -> int:
        """``count`` if the serving layer takes it as a partition count, else INVALID_ARGUMENT
        naming ``field`` with ``reason`` and the serving layer's description of the fault."""
        try:
            self._admin.check_partition_count(count)
        except InvalidPartitionsError as exc:
            raise BadRequestError(field, str(exc), reason) from None
        return count

    @rpc_method()
    async def CreateTopic(
        self, request: broker_pb2.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CreateTopicResponse:
        name = self._topic(request.name, "name")
        partitions = self._partition_count("partitions", request.partitions, "INVALID_TOPIC")
        description = await self._admin.create_topic(
            name, partitions, dict(request.configs), request.replication_factor
        )
        return broker_pb2.CreateTopicResponse(topic=self._topic_message(description))

    @rpc_method()
    async def DeleteTopic(
        self, request: broker_pb2.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteTopicResponse:
        await self._admin.delete_topic(self._topic(request.name, "name"))
        return broker_pb2.DeleteTopicResponse()

    @rpc_method()
    async def ListTopics(
        self, request: broker_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListTopicsResponse:
        topics = await self._admin.list_topics()
        return broker_pb2.ListTopicsResponse(
            topics=[self._topic_message(t.description, t.cleaner) for t in topics]
        )

    @rpc_method()
    async def DescribeTopic(
        self, request: broker_pb2.DescribeTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeTopicResponse:
        described = await self._admin.describe_topic(self._topic(request.name, "name"))
        return broker_pb2.DescribeTopicResponse(
            topic=self._topic_message(described.description, described.cleaner))

    @rpc_method()
    async def AlterTopicConfigs(
        self, request: broker_pb2.AlterTopicConfigsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AlterTopicConfigsResponse:
        name = self._topic(request.name, "name")
        both = set(request.set) & set(request.delete)
        if both:
            raise BadRequestError(
                "delete", f"configs both set and deleted: {sorted(both)}", "INVALID_CONFIG"
            )
        description = await self._admin.alter_topic_configs(
            name, dict(request.set), list(request.delete))
        return broker_pb2.AlterTopicConfigsResponse(topic=self._topic_message(description))

    @rpc_method()
    async def CreatePartitions(
        self, request: broker_pb2.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CreatePartitionsResponse:
        name = self._topic(request.name, "name")
        count = self._partition_count("count", request.count, "INVALID_PARTITIONS")
        description = await self._admin.create_partitions(name, count)
        return broker_pb2.CreatePartitionsResponse(topic=self._topic_message(description))

    @rpc_method()
    async def ElectLeaders(
        self, request: broker_pb2.ElectLeadersRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ElectLeadersResponse:
        if request.election_type not in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
            raise BadRequestError(
                "election_type", f"{request.election_type} is not ELECTION_TYPE_PREFERRED (0)"
                " or ELECTION_TYPE_UNCLEAN (1)")
        requested: dict[str, list[int]] | None = None
        if request.partitions:
            requested = {}
            for named in request.partitions:
                requested.setdefault(self._topic(named.topic, "partitions"), []).append(
                    named.partition)
        outcomes = await self._admin.elect_leaders(requested,
                                                   ElectionType(request.election_type))
        results = []
        for (topic, partition), error in sorted(outcomes.items()):
            reason, message = (error_reason(error) if error is not None
                               else (broker_pb2.ERROR_REASON_UNSPECIFIED, ""))
            results.append(broker_pb2.ElectLeadersResult(topic=topic, partition=partition,
                                                         reason=reason, message=message))
        return broker_pb2.ElectLeadersResponse(results=results)

    @rpc_method()
    async def Metadata(
        self, request: broker_pb2.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.MetadataResponse:
        topics = [self._topic(name, "topics") for name in request.topics]
        metadata = await self._admin.metadata(
            topics, advertised_address=self.advertised_address,
            allow_auto_create=request.allow_auto_topic_creation,
            identity=current_identity.get(None),
        )
        metadata.raise_for_unknown()  # broker.proto: the whole call fails on an unknown topic
        return metadata_message(metadata)
