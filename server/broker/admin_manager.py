"""Topic administration, whichever front end asked: create, delete and grow topics, alter and
describe their configs, list and describe them, and answer Metadata.

Kafka's ``ZkAdminManager`` / ``ControllerApis`` counterpart
(``core/src/main/scala/kafka/server/ZkAdminManager.scala``,
``core/src/main/scala/kafka/server/ControllerApis.scala``) with
``ConfigHelper.describeConfigs`` (config_descriptions.py). A front end (the gRPC servicer's
topic_rpcs.py; the Kafka listener's admin APIs) checks a request's shape, makes one call here
and translates the answer; the rules are here, once:

* **where a topic lives**: a single server's topics are the LogManager's, changed one admin call
  at a time (the serving layer's admin lock, :meth:`ReplicaManager.admin`); in cluster mode
  topics are created and deleted in etcd (server/cluster/topic_admin.py) and every replica
  applies them; deleting a topic's local logs is :meth:`ReplicaManager.delete_partitions`
  (appends in flight finish first);
* **partition counts**: 1..``topic_partitions_max`` (:meth:`check_partition_count`); a
  count not given is ``num_partitions`` (Kafka's ``num.partitions``);
* **replication factor**: 0 is the default; a single server holds one copy, so 0 and 1
  only; a cluster member: 1..the live brokers (topic_admin.py);
* **topics the server writes itself** (``__consumer_offsets``): clients' deletions, config
  changes and partition growth are refused (:meth:`ReplicaManager.refuse_client_change`);
* **CreatePartitions in cluster mode** writes the grown assignment to etcd
  (server/cluster/topic_admin.py); each replica grows its local topic when it sees it;
* **reassignments** (AlterPartitionReassignments, ListPartitionReassignments, a drain) are
  server/cluster/reassignment.py's in cluster mode; a single server has nothing to reassign;
* **config alterations** in three forms: set + delete (broker.proto's AlterTopicConfigs),
  replace every override (Kafka's AlterConfigs), and Kafka's incremental SET / DELETE /
  APPEND / SUBTRACT (IncrementalAlterConfigs); each may only validate;
* **Metadata** with Kafka's ``auto.create.topics.enable``: a topic named that does not exist
  is created if the request allows it, the setting is on and the caller may CREATE it (with
  an authorizer: CREATE on the cluster or the topic, ``may_create_topic``); a topic it may
  not create stays unknown, as without the setting.

Errors are the domain's (storage/errors.py, cluster/errors.py); each front end maps them to its
protocol's codes in its one table.

Concurrency: event-loop only. LogManager admin calls run in the executor under the serving
layer's admin lock (one at a time); descriptions and Metadata read in the executor without it
(the LogManager's own lock makes each read consistent).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from stratalog.server.cluster.controller import NO_CONTROLLER, ControllerState
from stratalog.server.cluster.errors import (
    CoordinationUnavailableError,
    ElectionNotNeededError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)
from stratalog.server.cluster.membership import BrokerInfo
from stratalog.server.cluster.preferred_leader import ElectionType
from stratalog.server.cluster.reassignment import OngoingReassignment
from stratalog.server.metadata import (
    SINGLE_SERVER_NODE_ID,
    ClusterMetadata,
    cluster_metadata,
    single_server_metadata,
)
from stratalog.server.storage.config import TOPIC_CONFIG_KINDS, LogConfig
from stratalog.server.storage.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from .config_descriptions import ConfigEntry, describe_broker_configs, describe_topic_configs

if TYPE_CHECKING:
    from stratalog.server.cluster.reassignment import Reassignments
    from stratalog.server.cluster.topic_admin import TopicAdmin
    from stratalog.server.security.authorizer import Authorizer
    from stratalog.server.security.principal import CallIdentity
    from stratalog.server.settings import Settings
    from stratalog.server.storage.cleaner_manager import CleanerPartitionStatus
    from stratalog.server.storage.log_manager import LogManager, TopicDescription

    from .replica_manager import ReplicaManager

__all__ = ["AdminManager", "ConfigOp", "DescribedTopic", "cleaner_positions"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Topic configs whose value is a comma-separated list: the only ones Kafka's APPEND and
#: SUBTRACT apply to (its ``ConfigDef.Type.LIST``).
_LIST_CONFIGS = frozenset(name for name, kind in TOPIC_CONFIG_KINDS.items() if kind == "list")


class ConfigOp(enum.IntEnum):
    """Kafka's ``AlterConfigOp.OpType`` (the values on the wire of IncrementalAlterConfigs;
    ``clients/src/main/java/org/apache/kafka/clients/admin/AlterConfigOp.java``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class DescribedTopic(NamedTuple):
    """A topic's description and, if it is compacted, the cleaner's position in each of its
    partitions (empty otherwise)."""

    description: TopicDescription
    cleaner: Mapping[int, CleanerPartitionStatus]


def cleaner_positions(
    log_manager: LogManager, description: TopicDescription
) -> dict[int, CleanerPartitionStatus]:
    """Blocking: the cleaner's position in each partition of a compacted topic (empty for
    any other topic; a partition deleted meanwhile is left out)."""
    if not LogConfig.from_mapping(description.configs).is_compacted:
        return {}
    positions = {}
    for p in description.partitions:
        with contextlib.suppress(UnknownTopicOrPartitionError):
            positions[p.partition] = log_manager.cleaner_status(description.name, p.partition)
    return positions


class AdminManager:
    """The topic administration of one server (module docstring). Holds the serving layer,
    the settings, the executor for blocking reads and the authorizer (None: authorization is
    off); in cluster mode, the etcd topic administration, made on first use. Event-loop only."""

    def __init__(self, replica_manager: ReplicaManager, settings: Settings, executor: Executor,
                 *, authorizer: Authorizer | None = None) -> None:
        self._replicas = replica_manager
        self._log_manager = replica_manager.log_manager
        self._settings = settings
        self._executor = executor
        self._authorizer = authorizer
        self._cluster_topic_admin: TopicAdmin | None = None

    # ---------------------------------------------------------------- plumbing

    @property
    def node_id(self) -> int:
        """This server's node id as Kafka clients see it: ``node_id`` in cluster mode, 0 for a
        single server."""
        return self._settings.node_id if self._settings.cluster else SINGLE_SERVER_NODE_ID

    @property
    def partitions_max(self) -> int:
        """The most partitions a topic may have (``topic_partitions_max``)."""
        return self._settings.topic_partitions_max

    @property
    def controller_id(self) -> int:
        """The controller's node id as this server knows it: itself for a single server; in
        cluster mode the elected one (-1: none known, or not joined yet)."""
        if not self._settings.cluster:
            return SINGLE_SERVER_NODE_ID
        node = self._replicas.cluster_node
        return node.controller.node_id if node is not None else NO_CONTROLLER.node_id

    def replication_factor(self, name: str) -> int:
        """How many copies topic ``name`` has: 1 on a single server; in cluster mode its
        assignment's (-1 while this server's view of etcd does not show the topic yet)."""
        node = self._replicas.cluster_node
        if not self._settings.cluster:
            return 1
        assignment = node.view.topics.get(name) if node is not None else None
        return assignment.replication_factor if assignment is not None else -1

    async def _blocking(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs))

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

    # ---------------------------------------------------------------- create, delete, grow

    def check_partition_count(self, count: int) -> None:
        """A topic's partition count from a request: 1..:attr:`partitions_max`.

        Raises:
            InvalidPartitionsError: outside it (the message names the bound and the count).
        """
        if not 1 <= count <= self.partitions_max:
            raise InvalidPartitionsError(
                f"a topic's partition count must be in 1..{self.partitions_max}"
                f" (topic_partitions_max), got {count}"
            )

    async def create_topic(
        self, name: str, partitions: int | None = None, configs: Mapping[str, str] | None = None,
        replication_factor: int = 0, *, validate_only: bool = False,
    ) -> TopicDescription:
        """Create topic ``name`` (through etcd in cluster mode) and describe it.

        ``partitions`` None: ``num_partitions``. ``replication_factor`` 0: the default.
        ``validate_only``: every check, nothing created; the topic as it would be.

        Raises:
            InvalidPartitionsError: a partition count outside 1..``topic_partitions_max``.
            InvalidReplicationFactorError: a factor a single server (0 or 1 only) or the
                cluster's live brokers cannot hold.
            InvalidTopicError, InvalidConfigError, TopicAlreadyExistsError,
            ResourceLimitExceededError, InsufficientSpaceError, StorageIOError: as
                ``LogManager.create_topic``. CoordinationUnavailableError: etcd did not answer.
        """
        count = self._settings.num_partitions if partitions is None else partitions
        self.check_partition_count(count)
        topic_admin = self._topic_admin()
        if topic_admin is not None:
            return await topic_admin.create_topic(name, count, dict(configs or {}),
                                                  replication_factor,
                                                  validate_only=validate_only)
        if replication_factor not in (0, 1):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor}: a single server (no --cluster) holds"
                " one copy of each partition; use 0 (the default) or 1"
            )
        return await self._replicas.admin(functools.partial(
            self._log_manager.create_topic, name, count, dict(configs or {}),
            validate_only=validate_only))

    async def delete_topic(self, name: str) -> None:
        """Delete topic ``name``: from etcd in cluster mode (each replica then deletes its
        local log), else (or for a topic the cluster does not know) its local logs.

        Raises:
            InvalidTopicError: a topic the server writes itself.
            UnknownTopicOrPartitionError: no such topic.
            CoordinationUnavailableError: etcd did not answer.
        """
        self._replicas.refuse_client_change(name, "DeleteTopic")
        topic_admin = self._topic_admin()
        if topic_admin is not None and await topic_admin.delete_topic(name):
            return
        await self._replicas.delete_partitions(name)

    async def create_partitions(self, name: str, count: int, *,
                                validate_only: bool = False) -> TopicDescription:
        """Grow topic ``name`` to ``count`` partitions; its description.

        Raises:
            InvalidTopicError: a topic the server writes itself.
            InvalidPartitionsError: ``count`` outside 1..``topic_partitions_max``, or not above
                the topic's.
            InvalidReplicationFactorError: cluster mode, fewer live brokers than the topic's
                replication factor (or racks on some brokers only).
            CoordinationUnavailableError: cluster mode, etcd did not answer.
            UnknownTopicOrPartitionError, ResourceLimitExceededError, StorageIOError: as
                ``LogManager.create_partitions``.
        """
        self._replicas.refuse_client_change(name, "CreatePartitions")
        self.check_partition_count(count)
        topic_admin = self._topic_admin()
        if topic_admin is not None:
            grown = await topic_admin.create_partitions(name, count, validate_only=validate_only)
            if grown is not None:
                return grown
            # Not in etcd: a topic this server holds alone grows as on a single server.
        return await self._replicas.admin(functools.partial(
            self._log_manager.create_partitions, name, count, validate_only=validate_only))

    # ---------------------------------------------------------------- leaders

    async def elect_leaders(
        self, requested: Mapping[str, Sequence[int]] | None,
        election_type: ElectionType = ElectionType.PREFERRED,
    ) -> dict[tuple[str, int], Exception | None]:
        """Kafka's ElectLeaders: move each partition of ``requested`` (topic -> partition
        numbers; None: every partition) to its preferred replica (PREFERRED), or elect a live
        replica for one without a live leader (UNCLEAN). Each partition's outcome: None
        (elected) or the error saying why not (server/cluster/preferred_leader.py). A single
        server leads every partition itself, its only (so preferred) replica: every partition
        named is ElectionNotNeededError, or UnknownTopicOrPartitionError.

        Raises:
            CoordinationUnavailableError: cluster mode, etcd did not answer (or not joined).
        """
        node = self._replicas.cluster_node
        if node is not None and node.preferred is not None:
            return await node.preferred.elect(requested, election_type)
        if self._settings.cluster:
            self._topic_admin()  # not joined yet: CoordinationUnavailableError
        outcomes: dict[tuple[str, int], Exception | None] = {}
        for topic, numbers in (requested or {}).items():
            count = 0
            with contextlib.suppress(UnknownTopicOrPartitionError):
                described = await self._blocking(self._log_manager.describe_topic, topic)
                count = len(described.partitions)
            for number in numbers:
                outcomes[(topic, number)] = (
                    ElectionNotNeededError("a single server leads each of its partitions, its"
                                           " only replica")
                    if 0 <= number < count
                    else UnknownTopicOrPartitionError(f"{topic}-{number} does not exist"))
        return outcomes

    # ---------------------------------------------------------------- reassignments

    def _reassignments(self) -> Reassignments | None:
        """Cluster mode: the node's reassignments (CoordinationUnavailableError before it
        joined); None for a single server."""
        if not self._settings.cluster:
            return None
        self._topic_admin()  # not joined yet: CoordinationUnavailableError
        node = self._replicas.cluster_node
        return node.reassignments if node is not None else None

    async def alter_partition_reassignments(
        self, requested: Mapping[tuple[str, int], tuple[int, ...] | None],
    ) -> dict[tuple[str, int], Exception | None]:
        """Kafka's AlterPartitionReassignments: reassign each partition to its target replicas,
        or cancel its reassignment (None); each partition's outcome: None (recorded in etcd)
        or the error saying why not (server/cluster/reassignment.py). A single server holds
        the only replica of each partition: every partition is InvalidReplicaAssignmentError.

        Raises:
            CoordinationUnavailableError: cluster mode, etcd did not answer (or not joined).
        """
        reassignments = self._reassignments()
        if reassignments is not None:
            return await reassignments.alter(requested)
        return dict.fromkeys(requested, InvalidReplicaAssignmentError(
            "a single server holds the only replica of each of its partitions: there is"
            " nothing to reassign (cluster mode only)"))

    async def list_partition_reassignments(
        self, requested: Iterable[tuple[str, int]] | None = None,
    ) -> list[OngoingReassignment]:
        """Kafka's ListPartitionReassignments: the partitions being reassigned (of
        ``requested``, or all), by topic and partition, with the progress this server knows
        as the leader of each (reassignment.py's OngoingReassignment). Empty on a single
        server.

        Raises:
            CoordinationUnavailableError: cluster mode, etcd did not answer (or not joined).
        """
        reassignments = self._reassignments()
        if reassignments is None:
            return []
        await reassignments.refresh()
        node, roles = self._replicas.cluster_node, self._replicas.replica_roles
        listed = []
        wanted = set(requested) if requested is not None else None
        for (topic, number), (replicas, reassignment) in reassignments.listed(wanted).items():
            versioned = node.view.state(topic, number) if node is not None else None
            leader = versioned.state.leader if versioned is not None else -1
            replica = roles.partitions.get((topic, number)) if roles is not None else None
            leader_end, progress = -1, {}
            if replica is not None and replica.is_leader():
                leader_end = replica.log.log_end_offset
                progress = {r: (replica.followers[r].log_end_offset
                                if r in replica.followers else -1)
                            for r in replicas if r != replica.node_id}
            listed.append(OngoingReassignment(topic, number, replicas, reassignment.adding,
                                              reassignment.removing, leader, leader_end,
                                              progress))
        return listed

    async def drain_broker(self, node_id: int) -> dict[tuple[str, int], tuple[int, ...] | Exception]:
        """Reassign every partition with ``node_id`` among its replicas to replicas without it
        (reassignment.py's drain); each partition's new replicas, or the error saying why it
        could not be moved.

        Raises:
            InvalidReplicaAssignmentError: a single server (nothing to drain to).
            CoordinationUnavailableError: cluster mode, etcd did not answer (or not joined).
        """
        reassignments = self._reassignments()
        if reassignments is None:
            raise InvalidReplicaAssignmentError(
                "a single server has no other server to move its partitions to (cluster mode"
                " only)")
        return await reassignments.drain(node_id)

    # ---------------------------------------------------------------- configs

    async def alter_topic_configs(
        self, name: str, set: Mapping[str, str], delete: Iterable[str] = (), *,
        validate_only: bool = False,
    ) -> TopicDescription:
        """Set and delete (back to the server default) config overrides of ``name``; the
        topic as it is now (or would be, ``validate_only``).

        Raises:
            InvalidTopicError: a topic the server writes itself.
            UnknownTopicOrPartitionError: no such topic.
            InvalidConfigError: an unknown name, a bad value, or a name both set and deleted.
        """
        self._replicas.refuse_client_change(name, "a config change")
        topic_admin = self._topic_admin()
        if topic_admin is not None and topic_admin.knows(name):
            # The cluster's topic: its overrides live in etcd, every replica applies them.
            altered = await topic_admin.alter_configs(name, set, delete,
                                                      validate_only=validate_only)
            if validate_only:
                return altered
            return (await self.describe_topic(name)).description
        return await self._replicas.admin(functools.partial(
            self._log_manager.alter_topic_configs, name, dict(set), list(delete),
            validate_only=validate_only))

    async def replace_topic_configs(self, name: str, configs: Mapping[str, str], *,
                                    validate_only: bool = False) -> TopicDescription:
        """Kafka's AlterConfigs: ``configs`` become the topic's overrides, every other
        override is deleted (back to the server default).

        Raises:
            as :meth:`alter_topic_configs`.
        """
        described = (await self.describe_topic(name)).description
        stale = [key for key in described.overridden_configs if key not in configs]
        return await self.alter_topic_configs(name, configs, stale, validate_only=validate_only)

    async def incremental_alter_topic_configs(
        self, name: str, operations: Sequence[tuple[ConfigOp, str, str | None]], *,
        validate_only: bool = False,
    ) -> TopicDescription:
        """Kafka's IncrementalAlterConfigs on a topic: each ``(op, config, value)`` applied to
        the topic's current configs. SET sets the value; DELETE removes the override; APPEND
        adds the comma-separated values not yet in a list config's current value, SUBTRACT
        removes them (Kafka's ``prepareIncrementalConfigs`` in
        ``core/src/main/scala/kafka/server/ConfigAdminManager.scala``; the current value is the
        effective one, the server default when the topic sets none).

        Raises:
            InvalidConfigError: a config named twice, APPEND or SUBTRACT on a config that is
                not a list, a SET or APPEND without a value; and as :meth:`alter_topic_configs`.
        """
        names = [config for _, config, _ in operations]
        repeated = sorted({config for config in names if names.count(config) > 1})
        if repeated:
            raise InvalidConfigError(
                f"configs of topic {name} named more than once in one request: {repeated}")
        current = (await self.describe_topic(name)).description.configs
        set_configs: dict[str, str] = {}
        delete_names: list[str] = []
        for op, config, value in operations:
            if op == ConfigOp.DELETE:
                delete_names.append(config)
                continue
            if value is None:
                raise InvalidConfigError(
                    f"config {config!r} of topic {name}: {op.name} needs a value")
            if op == ConfigOp.SET:
                set_configs[config] = value
                continue
            if config not in _LIST_CONFIGS:
                raise InvalidConfigError(
                    f"config {config!r} of topic {name} is not a list: {op.name} applies to"
                    f" list configs only ({', '.join(sorted(_LIST_CONFIGS))}); use SET")
            items = [item for item in current.get(config, "").split(",") if item]
            given = [item.strip() for item in value.split(",") if item.strip()]
            if op == ConfigOp.APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            set_configs[config] = ",".join(items)
        return await self.alter_topic_configs(name, set_configs, delete_names,
                                              validate_only=validate_only)

    async def describe_topic_configs(self, name: str) -> list[ConfigEntry]:
        """Every config of topic ``name``: value, source, synonyms (config_descriptions.py).

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        return self.config_entries((await self.describe_topic(name)).description)

    def config_entries(self, description: TopicDescription) -> list[ConfigEntry]:
        """The configs of a topic already described (CreateTopics' answer), as
        :meth:`describe_topic_configs` lists them."""
        return describe_topic_configs(description, self._settings.log_defaults)

    def describe_broker_configs(self) -> list[ConfigEntry]:
        """Every config of this broker, read-only (config_descriptions.py)."""
        return describe_broker_configs(self._settings, self._log_manager.default_config,
                                       self._log_manager.settings)

    # ---------------------------------------------------------------- descriptions

    def _described(self, name: str) -> DescribedTopic:
        """Blocking: a topic and, if it is compacted, its cleaner's position per partition."""
        description = self._log_manager.describe_topic(name)
        return DescribedTopic(description, cleaner_positions(self._log_manager, description))

    def _listed(self) -> list[DescribedTopic]:
        """Blocking: every topic, each with its cleaner's positions (as :meth:`_described`)."""
        return [
            DescribedTopic(description, cleaner_positions(self._log_manager, description))
            for description in self._log_manager.list_topics()
        ]

    async def describe_topic(self, name: str) -> DescribedTopic:
        """Topic ``name`` as this server serves it: in cluster mode its configs and partitions
        from the cluster, each partition as this server holds it (empty where it does not).

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            CoordinationUnavailableError: cluster mode, not joined yet.
        """
        topic_admin = self._topic_admin()
        if topic_admin is not None and topic_admin.knows(name):
            try:
                local = await self._replicas.admin(self._described, name)
            except UnknownTopicOrPartitionError:  # this server does not hold it (yet)
                return DescribedTopic(topic_admin.describe(name, None), {})
            return DescribedTopic(topic_admin.describe(name, local.description), local.cleaner)
        return await self._replicas.admin(self._described, name)

    async def list_topics(self) -> list[DescribedTopic]:
        """Every topic, by name (in cluster mode: the cluster's, then the ones only this server
        holds)."""
        topics = await self._replicas.admin(self._listed)
        topic_admin = self._topic_admin()
        if topic_admin is None:
            return topics
        cleaners = {described.description.name: described.cleaner for described in topics}
        return [
            DescribedTopic(description, cleaners.get(description.name, {}))
            for description in topic_admin.listed([d.description for d in topics])
        ]

    # ---------------------------------------------------------------- metadata

    async def metadata(
        self, topics: Sequence[str], *, advertised_address: str,
        allow_auto_create: bool = False, identity: CallIdentity | None = None,
    ) -> ClusterMetadata:
        """The brokers, the controller and ``topics`` (empty: every topic) with their leaders
        (server/metadata.py); topics named that do not exist in ``unknown_topics``.

        ``advertised_address``: where a single server is reached through the front end that
        asks (each front end advertises its own listener). ``allow_auto_create``: the
        request allows topics to be created (auto.create.topics.enable, module docstring),
        for ``identity`` (None: an anonymous caller).
        """
        if allow_auto_create and topics and self._settings.auto_create_topics_enable:
            await self._maybe_create_topics(topics, identity)
        node = self._replicas.cluster_node
        if node is not None:
            return cluster_metadata(node.node_id, node.brokers, node.controller,
                                    node.view.topics, node.view.partitions, topics)
        if self._settings.cluster:
            # Between the bind and the registration (app.py): nothing known of the cluster yet.
            node_id, brokers, controller = self._settings.node_id, [], NO_CONTROLLER
        else:
            node_id = SINGLE_SERVER_NODE_ID
            brokers = [BrokerInfo(node_id, advertised_address)]
            controller = ControllerState(node_id, 0)
        return await self._blocking(
            single_server_metadata, self._log_manager, node_id, brokers, controller, topics)

    async def _maybe_create_topics(self, names: Sequence[str],
                                   identity: CallIdentity | None) -> None:
        """Kafka's ``auto.create.topics.enable`` (module docstring): create each topic named
        that does not exist, with ``num_partitions`` partitions and the default replication
        factor, if the caller may CREATE it. Two callers creating one topic at once: the
        second finds it there."""
        from stratalog.server.security.authorizer import may_create_topic

        node = self._replicas.cluster_node
        for name in dict.fromkeys(names):
            if node is not None:
                exists = name in node.view.topics
            else:
                exists = self._log_manager.has_topic(name)
            if exists:
                continue
            if self._authorizer is not None and (
                identity is None or not may_create_topic(self._authorizer, identity, name)
            ):
                continue
            try:
                await self.create_topic(name)
            except TopicAlreadyExistsError:
                continue  # created meanwhile by another request
            logger.info("created topic %s automatically (auto_create_topics_enable): %d "
                        "partition(s)", name, self._settings.num_partitions)
