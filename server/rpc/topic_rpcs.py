"""The topic RPCs of the Broker service: CreateTopic, DeleteTopic, ListTopics, DescribeTopic,
AlterTopicConfigs, CreatePartitions, and Metadata (with Kafka's ``auto.create.topics.enable``).

A single server's topics are the LogManager's, changed one admin call at a time (the serving
layer's admin lock); in cluster mode, topics are created and deleted in etcd
(server/cluster/topic_admin.py) and every replica applies them. Deleting a topic's local logs is
the serving layer's (``ReplicaManager.delete_partitions``: appends in flight finish first).

Concurrency: event-loop only.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from stratalog.server.cluster.controller import NO_CONTROLLER, ControllerState
from stratalog.server.cluster.errors import (
    CoordinationUnavailableError,
    InvalidReplicationFactorError,
)
from stratalog.server.cluster.membership import BrokerInfo
from stratalog.server.metadata import (
    SINGLE_SERVER_NODE_ID,
    cluster_metadata_response,
    metadata_response,
)
from stratalog.server.rpc.requests import RpcBase, rpc_method
from stratalog.server.rpc.translation import BadRequestError, CleanerPositions, topic_message
from stratalog.server.security.principal import current_identity
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.cluster.topic_admin import TopicAdmin
    from stratalog.server.storage.log_manager import LogManager, TopicDescription

__all__ = ["TopicRpcs", "cleaner_positions"]

logger = logging.getLogger(__name__)


def cleaner_positions(
    log_manager: LogManager, description: TopicDescription
) -> CleanerPositions:
    """Blocking: the cleaner's position in each partition of a compacted topic (empty for
    any other topic; a partition deleted meanwhile is left out)."""
    if not LogConfig.from_mapping(description.configs).is_compacted:
        return {}
    positions = {}
    for p in description.partitions:
        with contextlib.suppress(UnknownTopicOrPartitionError):
            positions[p.partition] = log_manager.cleaner_status(description.name, p.partition)
    return positions


def _single_server_replication_factor(replication_factor: int) -> None:
    """A server without --cluster holds one copy: CreateTopic's 0 (the default) and 1 only."""
    if replication_factor not in (0, 1):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor}: a single server (no --cluster) holds one"
            " copy of each partition; use 0 (the default) or 1"
        )


class TopicRpcs(RpcBase):
    """The topic RPCs (module docstring)."""

    def _topic_admin(self) -> TopicAdmin | None:
        """Cluster mode: the topic administration that writes etcd (server/cluster/
        topic_admin.py), made on first use; None for a single server.

        Raises:
            CoordinationUnavailableError: cluster mode, but this server has not joined yet.
        """
        if not self._settings.cluster:
            return None
        node = self._replicas.cluster_node
        if node is None:
            raise CoordinationUnavailableError(
                "this server has not joined its cluster yet (it registers in etcd right after"
                " it starts listening): retry in a moment"
            )
        if self._cluster_topic_admin is None:
            from stratalog.server.cluster.topic_admin import TopicAdmin

            self._cluster_topic_admin = TopicAdmin(
                node, self._log_manager, self._settings.default_replication_factor,
                self._settings.unclean_leader_election_enable,
            )
        return self._cluster_topic_admin

    def _topic_message(
        self, description: TopicDescription, cleaner: CleanerPositions | None = None
    ) -> broker_pb2.TopicDescription:
        # Log directories by their index in log_dirs: clients never learn the server's paths.
        return topic_message(description, self._log_manager.log_dirs, cleaner)

    def _described(self, name: str) -> tuple[TopicDescription, CleanerPositions]:
        """Blocking: a topic and, if it is compacted, its cleaner's position per partition."""
        description = self._log_manager.describe_topic(name)
        return description, cleaner_positions(self._log_manager, description)

    def _listed(self) -> list[tuple[TopicDescription, CleanerPositions]]:
        """Blocking: every topic, each with its cleaner's positions (as :meth:`_described`)."""
        return [
            (description, cleaner_positions(self._log_manager, description))
            for description in self._log_manager.list_topics()
        ]

    def _check_partition_count(self, field: str, count: int, reason: str) -> None:
        """A topic's partition count from a request: 1..topic_partitions_max, else
        INVALID_ARGUMENT naming ``field`` with ``reason``."""
        if not 1 <= count <= self._settings.topic_partitions_max:
            raise BadRequestError(
                field, f"must be in 1..{self._settings.topic_partitions_max}, got {count}",
                reason,
            )

    @rpc_method()
    async def CreateTopic(
        self, request: broker_pb2.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CreateTopicResponse:
        name = self._topic(request.name, "name")
        self._check_partition_count("partitions", request.partitions, "INVALID_TOPIC")
        description = await self._create_topic(
            name, request.partitions, dict(request.configs), request.replication_factor
        )
        return broker_pb2.CreateTopicResponse(topic=self._topic_message(description))

    async def _create_topic(self, name: str, partitions: int, configs: dict[str, str],
                            replication_factor: int) -> TopicDescription:
        """A new topic, through etcd in cluster mode, else in the LogManager."""
        topic_admin = self._topic_admin()
        if topic_admin is None:
            _single_server_replication_factor(replication_factor)
            return await self.admin(self._log_manager.create_topic, name, partitions, configs)
        return await topic_admin.create_topic(name, partitions, configs, replication_factor)

    async def _maybe_create_topics(self, names: list[str]) -> None:
        """Kafka's ``auto.create.topics.enable`` for a Metadata request that allows it: create
        each topic named that does not exist, with ``num_partitions`` partitions and the
        default replication factor, if the caller may CREATE it (with an authorizer on). A
        topic it may not create is left unknown: the answer then says so, as without the
        setting. Two callers creating one topic at once: the second finds it there."""
        from stratalog.server.security.authorizer import may_create_topic

        node = self._replicas.cluster_node
        for name in dict.fromkeys(names):
            if node is not None:
                exists = name in node.view.topics
            else:
                exists = self._log_manager.has_topic(name)
            if exists:
                continue
            if self._authorizer is not None:
                identity = current_identity.get(None)
                if identity is None or not may_create_topic(self._authorizer, identity, name):
                    continue
            try:
                await self._create_topic(name, self._settings.num_partitions, {}, 0)
            except TopicAlreadyExistsError:
                continue  # created meanwhile by another request
            logger.info("created topic %s automatically (auto_create_topics_enable): %d "
                        "partition(s)", name, self._settings.num_partitions)

    @rpc_method()
    async def DeleteTopic(
        self, request: broker_pb2.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteTopicResponse:
        name = self._topic(request.name, "name")
        self._replicas.refuse_client_change(name, "DeleteTopic")
        topic_admin = self._topic_admin()
        if topic_admin is not None and await topic_admin.delete_topic(name):
            return broker_pb2.DeleteTopicResponse()  # each replica deletes its local log
        await self._replicas.delete_partitions(name)
        return broker_pb2.DeleteTopicResponse()

    @rpc_method()
    async def ListTopics(
        self, request: broker_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListTopicsResponse:
        topics = await self.admin(self._listed)
        topic_admin = self._topic_admin()
        if topic_admin is not None:
            cleaners = {description.name: cleaner for description, cleaner in topics}
            topics = [
                (description, cleaners.get(description.name, {}))
                for description in topic_admin.listed([d for d, _ in topics])
            ]
        return broker_pb2.ListTopicsResponse(
            topics=[self._topic_message(t, cleaner) for t, cleaner in topics]
        )

    @rpc_method()
    async def DescribeTopic(
        self, request: broker_pb2.DescribeTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeTopicResponse:
        name = self._topic(request.name, "name")
        topic_admin = self._topic_admin()
        if topic_admin is not None and topic_admin.knows(name):
            try:
                local, cleaner = await self.admin(self._described, name)
            except UnknownTopicOrPartitionError:  # this server does not hold it (yet)
                local, cleaner = None, {}
            description = topic_admin.describe(name, local)
        else:
            description, cleaner = await self.admin(self._described, name)
        return broker_pb2.DescribeTopicResponse(topic=self._topic_message(description, cleaner))

    @rpc_method()
    async def AlterTopicConfigs(
        self, request: broker_pb2.AlterTopicConfigsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AlterTopicConfigsResponse:
        name = self._topic(request.name, "name")
        self._replicas.refuse_client_change(name, "AlterTopicConfigs")
        both = set(request.set) & set(request.delete)
        if both:
            raise BadRequestError(
                "delete", f"configs both set and deleted: {sorted(both)}", "INVALID_CONFIG"
            )
        description = await self.admin(
            self._log_manager.alter_topic_configs, name, dict(request.set), list(request.delete)
        )
        return broker_pb2.AlterTopicConfigsResponse(topic=self._topic_message(description))

    @rpc_method()
    async def CreatePartitions(
        self, request: broker_pb2.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CreatePartitionsResponse:
        name = self._topic(request.name, "name")
        self._replicas.refuse_client_change(name, "CreatePartitions")
        self._check_partition_count("count", request.count, "INVALID_PARTITIONS")
        if self._settings.cluster:
            # The controller would have to assign the new partitions' replicas and write their
            # first states to etcd (topic_admin.py); not built yet: refused, not half done.
            raise BadRequestError(
                "name",
                "CreatePartitions is not supported in cluster mode yet: create a topic with the "
                "partitions it needs (docs/cluster.md)",
            )
        description = await self.admin(self._log_manager.create_partitions, name, request.count)
        return broker_pb2.CreatePartitionsResponse(topic=self._topic_message(description))

    @rpc_method()
    async def Metadata(
        self, request: broker_pb2.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.MetadataResponse:
        topics = [self._topic(name, "topics") for name in request.topics]
        if request.allow_auto_topic_creation and topics and self._settings.auto_create_topics_enable:
            await self._maybe_create_topics(topics)
        node = self._replicas.cluster_node
        if node is not None:
            return cluster_metadata_response(node.node_id, node.brokers, node.controller,
                                             node.view.topics, node.view.partitions, topics)
        if self._settings.cluster:
            # Between the bind and the registration (app.py): nothing known of the cluster yet.
            node_id, brokers, controller = self._settings.node_id, [], NO_CONTROLLER
        else:
            node_id = SINGLE_SERVER_NODE_ID
            brokers = [BrokerInfo(node_id, self.advertised_address)]
            controller = ControllerState(node_id, 0)
        return await self._blocking(
            metadata_response, self._log_manager, node_id, brokers, controller, topics
        )
