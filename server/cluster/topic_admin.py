"""Topic administration in cluster mode: CreateTopic and DeleteTopic write etcd, the topic
listings read the cluster view.

CreateTopic, on whichever server receives it (no forwarding to the controller: the etcd
transaction is the serialisation point, as ZooKeeper-era Kafka's ``AdminZkClient`` wrote
``/brokers/topics/<t>`` from any broker)::

    check name, partition count, configs    what the single-server path checks (LogManager
                                            .check_new_topic): both refuse the same requests
    replication factor < 0                  -> InvalidReplicationFactorError
    read the live brokers from etcd
    replication factor 0                    -> default_replication_factor, or when that is 0
                                            (its default): min(3, live brokers)
    replication factor > live brokers       -> InvalidReplicationFactorError
    replicas: replica_placement.py          rack-unaware round robin from a random broker, or
                                            rack-aware when the brokers have racks (Kafka's
                                            AdminUtils.assignReplicasToBrokers)
    one txn  if   create_revision(<prefix>/topics/<t>) == 0     else TopicAlreadyExistsError
             then put <prefix>/topics/<t>                TopicAssignment
                  put <prefix>/partitions/<t>/<p>        PartitionState(first replica, 0,
                                                         every replica, 0) for each p

Each replica creates its local log when its cluster view shows the topic (the replica
manager); the answer is built from the assignment: partitions this server does not hold yet
are described empty, with ``log_dir`` "". etcd limits a transaction to 128 operations
(``--max-txn-ops``): a topic of more partitions writes the other states in further
transactions, each conditional on the topic key still being the one written; if this server
dies in between, the controller writes the missing first states (leader_election.py).

CreatePartitions (``topics alter --partitions N``, Kafka's CreatePartitions), on any server::

    read the live brokers and <prefix>/topics/<t> (its value and mod revision R)
    not in etcd                             -> None: a topic this server holds alone grows
                                            locally, as on a single server
    count <= the topic's                    -> InvalidPartitionsError
    replicas of the new partitions          replica_placement.py, continuing the topic's
                                            assignment (partition 0's factor and start)
    one txn  if   mod_revision(<prefix>/topics/<t>) == R      else CoordinationUnavailable
             then put <prefix>/topics/<t>              the grown TopicAssignment
                  put <prefix>/partitions/<t>/<p>      first states of the new partitions

The comparison fences it as CreateTopic's ``create_revision == 0`` fences a creation: a
concurrent CreatePartitions, deletion or re-creation in between makes it write nothing. Each
replica grows its local topic when its view shows the new count (the replica manager), and
Metadata lists the new partitions from then on, so producers and consumers that refresh their
metadata use them.

DeleteTopic: one transaction deletes the topic key and its partition prefix; each replica
deletes its local log when the topic leaves its view. A topic that etcd does not know but this
server holds (created before it joined a cluster) is deleted locally, as a single server does.

Bounded waits: every etcd exchange of one request shares :data:`ADMIN_TIMEOUT_S`; when etcd does
not answer the request fails with :class:`CoordinationUnavailableError`, saying whether
anything may have been written.

Concurrency: event-loop only; nothing here blocks (the LogManager calls it makes are checks
without I/O).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import aetcd

from stratalog.server.storage.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.storage.log_manager import (
    SERVER_WRITTEN_TOPICS,
    PartitionDescription,
    TopicDescription,
)
from stratalog.server.storage.topic_names import topic_collision_key

from .errors import CoordinationUnavailableError, InvalidReplicationFactorError
from .partition_state import PartitionState, TopicAssignment
from .replica_placement import assign_replicas, start_index_of
from .topic_configs import alter_overrides

if TYPE_CHECKING:
    from stratalog.server.storage.log_manager import LogManager

    from .node import ClusterNode

__all__ = [
    "ADMIN_TIMEOUT_S",
    "DEFAULT_REPLICATION_FACTOR_MAX",
    "ETCD_TXN_OPS_MAX",
    "UNCLEAN_CONFIG",
    "TopicAdmin",
]

logger = logging.getLogger(__name__)

#: The longest a CreateTopic or DeleteTopic waits for etcd, all its calls together (seconds).
ADMIN_TIMEOUT_S = 5.0
#: etcd's default ``--max-txn-ops``: the most operations one transaction may hold.
ETCD_TXN_OPS_MAX = 128
#: The replication factor of a topic created with 0 while ``default_replication_factor`` is 0
#: (its default), when at least this many brokers live: three copies survive one broker down
#: for maintenance and another failing (min.insync.replicas 2 with acks=all), the usual
#: production choice; fewer live brokers give fewer copies, so that a two-server cluster, or a
#: lone member, can still create topics.
DEFAULT_REPLICATION_FACTOR_MAX = 3
#: The topic config (and server setting) that lets the controller elect outside the ISR.
UNCLEAN_CONFIG = "unclean.leader.election.enable"

# What the etcd client raises when etcd does not answer in time (aetcd wraps gRPC's errors).
_ETCD_DOWN = (TimeoutError, aetcd.ClientError, OSError)


class TopicAdmin:
    """CreateTopic, DeleteTopic and the topic listings of one cluster member."""

    def __init__(self, node: ClusterNode, log_manager: LogManager,
                 default_replication_factor: int, unclean_leader_election_enable: bool) -> None:
        self._node = node
        self._log_manager = log_manager
        self._default_replication_factor = default_replication_factor
        self._unclean_default = unclean_leader_election_enable

    # ---------------------------------------------------------------- create

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str],
                           replication_factor: int, *, internal: bool = False,
                           validate_only: bool = False) -> TopicDescription:
        """Write topic ``name`` to etcd (module docstring); its description. ``internal``:
        the server creates ``__consumer_offsets`` for itself (the group service; its name is
        refused otherwise, as a single server's ``LogManager.create_topic`` refuses it).
        ``validate_only``: every check (etcd read), nothing written; the description of the
        topic as it would be.

        Raises:
            InvalidTopicError, InvalidConfigError: as a single server's CreateTopic.
            InvalidReplicationFactorError: below 1, or above the live brokers.
            TopicAlreadyExistsError: etcd has the topic.
            CoordinationUnavailableError: etcd did not answer within :data:`ADMIN_TIMEOUT_S`.
        """
        overrides = self._log_manager.check_new_topic(name, partitions, configs,
                                                      internal=internal)
        if replication_factor < 0:
            raise InvalidReplicationFactorError(
                f"replication factor must be at least 1 (0 = the server's default, "
                f"{self._default_description()}), got {replication_factor}"
            )
        with self._etcd_errors("CreateTopic", "nothing was written"):
            async with asyncio.timeout(ADMIN_TIMEOUT_S):
                await self._node.membership.refresh()
                await self._node.view.refresh()
        racks = self._live_racks()
        factor = replication_factor or self.default_replication_factor(len(racks))
        self._check_collisions(name)
        count = max(1, len(racks))
        assignment = TopicAssignment(
            assign_replicas(0, partitions, factor, racks, random.randrange(count),
                            random.randrange(count)),
            overrides,
        )
        if validate_only:
            return self.describe(name, None, assignment)
        with self._etcd_errors("CreateTopic", "the topic may or may not have been written:"
                               " describe it to find out"):
            async with asyncio.timeout(ADMIN_TIMEOUT_S):
                await self._write_topic(name, assignment)
        logger.info("created topic %s: %d partition(s), replicas %s, configs %s", name,
                    partitions, dict(assignment.replicas), overrides)
        with contextlib.suppress(Exception):  # seen at the next poll otherwise
            await self._node.view.refresh()
        return self.describe(name, None, assignment)

    def default_replication_factor(self, live_brokers: int) -> int:
        """The replication factor of a topic created with 0: the setting, or when that is 0,
        :data:`DEFAULT_REPLICATION_FACTOR_MAX` copies, fewer when fewer brokers live (but at
        least 1, so that a lone member's topic is refused for no live broker below, not for a
        factor of 0)."""
        if self._default_replication_factor:
            return self._default_replication_factor
        return max(1, min(DEFAULT_REPLICATION_FACTOR_MAX, live_brokers))

    def _default_description(self) -> str:
        if self._default_replication_factor:
            return str(self._default_replication_factor)
        return f"{DEFAULT_REPLICATION_FACTOR_MAX}, or the live brokers when fewer"

    def _check_collisions(self, name: str) -> None:
        """The checks :meth:`LogManager.create_topic` makes against existing topics, against
        the topics of the cluster (as just read)."""
        if name in self._node.view.topics:
            raise TopicAlreadyExistsError(f"topic {name} already exists")
        key = topic_collision_key(name)
        for existing in self._node.view.topics:
            if topic_collision_key(existing) == key:
                raise InvalidTopicError(
                    f"topic {name} collides with existing topic {existing}: names that "
                    "differ only in '.' versus '_' are not allowed together"
                )

    async def _write_topic(self, name: str, assignment: TopicAssignment) -> None:
        client, keys = self._node.session.client, self._node.keys
        puts = [
            client.transactions.put(
                keys.partition(name, partition),
                PartitionState(replicas[0], 0, replicas, 0).encode(),
            )
            for partition, replicas in sorted(assignment.replicas.items())
        ]
        topic_key = keys.topic(name)
        first = ETCD_TXN_OPS_MAX - 1
        succeeded, _ = await client.transaction(
            compare=[client.transactions.create(topic_key) == 0],
            success=[client.transactions.put(topic_key, assignment.encode()), *puts[:first]],
            failure=[],
        )
        if not succeeded:
            raise TopicAlreadyExistsError(f"topic {name} already exists")
        if len(puts) <= first:
            return
        written = await client.get(topic_key)
        if written is None:
            return  # deleted already: its states would be orphans
        for start in range(first, len(puts), ETCD_TXN_OPS_MAX):
            succeeded, _ = await client.transaction(
                compare=[client.transactions.create(topic_key) == written.create_revision],
                success=puts[start:start + ETCD_TXN_OPS_MAX],
                failure=[],
            )
            if not succeeded:
                return  # deleted (or deleted and created again) meanwhile: stop here

    def _live_racks(self) -> dict[int, str]:
        """The live brokers (as last read) and their racks ("" for none)."""
        return {node_id: broker.rack
                for node_id, broker in sorted(self._node.membership.brokers.items())}

    # ---------------------------------------------------------------- grow

    async def create_partitions(self, name: str, count: int, *,
                                validate_only: bool = False) -> TopicDescription | None:
        """Grow topic ``name`` to ``count`` partitions in etcd (module docstring); its
        description, or None when the cluster does not know the topic (one this server holds
        alone: the caller grows it locally). ``validate_only``: every check, nothing written;
        the topic as it would be.

        Raises:
            InvalidPartitionsError: ``count`` not above the topic's partition count.
            InvalidTopicError: ``count`` above ``topic_partitions_max``.
            InvalidReplicationFactorError: fewer live brokers than the topic's replication
                factor, or racks on some brokers only.
            CoordinationUnavailableError: etcd did not answer within :data:`ADMIN_TIMEOUT_S`;
                or the topic changed in etcd meanwhile (retriable).
        """
        client = self._node.session.client
        with self._etcd_errors("CreatePartitions", "nothing was written"):
            async with asyncio.timeout(ADMIN_TIMEOUT_S):
                await self._node.membership.refresh()
                stored = await client.get(self._node.keys.topic(name))
        existing = TopicAssignment.decode(stored.value) if stored is not None else None
        if existing is None:
            return None
        current = existing.partition_count
        if count <= current:
            raise InvalidPartitionsError(
                f"topic {name} has {current} partitions and cannot have {count}: "
                f"partitions can only be added (ask for more than {current})"
            )
        # The count bound and the longest partition directory name, as a new topic's.
        self._log_manager.check_new_topic(name, count, existing.configs,
                                          internal=name in SERVER_WRITTEN_TOPICS)
        racks = self._live_racks()
        added = assign_replicas(current, count - current, existing.replication_factor, racks,
                                start_index_of(existing.replicas, racks),
                                start_index_of(existing.replicas, racks))
        grown = TopicAssignment({**existing.replicas, **added}, dict(existing.configs),
                                dict(existing.reassigning))
        if validate_only:
            return self.describe(name, None, grown)
        with self._etcd_errors("CreatePartitions", "the partitions may or may not have been"
                               " added: describe the topic to find out"):
            async with asyncio.timeout(ADMIN_TIMEOUT_S):
                await self._write_partitions(name, grown, added, stored.mod_revision)
        logger.info("topic %s: partitions %d..%d added, replicas %s", name, current, count - 1,
                    added)
        with contextlib.suppress(Exception):  # seen at the next poll otherwise
            await self._node.view.refresh()
        return self.describe(name, None, grown)

    async def _write_partitions(self, name: str, grown: TopicAssignment,
                                added: dict[int, tuple[int, ...]], mod_revision: int) -> None:
        """One transaction, conditional on the topic key still being at ``mod_revision``: the
        grown assignment and the new partitions' first states (more in further transactions,
        as :meth:`_write_topic`; the controller writes any a crash left missing)."""
        client, keys = self._node.session.client, self._node.keys
        topic_key = keys.topic(name)
        puts = [
            client.transactions.put(keys.partition(name, partition),
                                    PartitionState(replicas[0], 0, replicas, 0).encode())
            for partition, replicas in sorted(added.items())
        ]
        first = ETCD_TXN_OPS_MAX - 1
        succeeded, _ = await client.transaction(
            compare=[client.transactions.mod(topic_key) == mod_revision],
            success=[client.transactions.put(topic_key, grown.encode()), *puts[:first]],
            failure=[],
        )
        if not succeeded:
            raise CoordinationUnavailableError(
                f"topic {name} changed in etcd while its partitions were being added (another"
                " CreatePartitions, or its deletion): nothing was written; retry"
            )
        written = await client.get(topic_key)
        for start in range(first, len(puts), ETCD_TXN_OPS_MAX):
            if written is None:
                return
            succeeded, _ = await client.transaction(
                compare=[client.transactions.mod(topic_key) == written.mod_revision],
                success=puts[start:start + ETCD_TXN_OPS_MAX],
                failure=[],
            )
            if not succeeded:
                return  # changed meanwhile: the controller writes what is missing

    # ---------------------------------------------------------------- delete

    async def delete_topic(self, name: str) -> bool:
        """Delete topic ``name`` from etcd; False if etcd does not have it.

        Raises:
            CoordinationUnavailableError: etcd did not answer within :data:`ADMIN_TIMEOUT_S`.
        """
        client, keys = self._node.session.client, self._node.keys
        topic_key, prefix = keys.topic(name), keys.topic_partitions_prefix(name)
        with self._etcd_errors("DeleteTopic", "the topic may or may not have been deleted:"
                               " list the topics to find out"):
            async with asyncio.timeout(ADMIN_TIMEOUT_S):
                succeeded, _ = await client.transaction(
                    compare=[client.transactions.create(topic_key) != 0],
                    success=[
                        client.transactions.delete(topic_key),
                        client.transactions.delete(
                            prefix, range_end=aetcd.utils.prefix_range_end(prefix)),
                    ],
                    failure=[],
                )
        if succeeded:
            logger.info("deleted topic %s", name)
            with contextlib.suppress(Exception):
                await self._node.view.refresh()
        return bool(succeeded)

    # ---------------------------------------------------------------- configs

    async def alter_configs(self, name: str, set: Mapping[str, str], delete: Iterable[str],
                            *, validate_only: bool = False) -> TopicDescription:
        """Set and delete config overrides of topic ``name`` in etcd (topic_configs.py); the
        topic as the cluster has it now (or would, ``validate_only``). Every server holding
        the topic applies them when its view shows them; this one before it answers.

        Raises:
            UnknownTopicOrPartitionError: etcd has no such topic.
            InvalidConfigError: as a single server's alteration.
            CoordinationUnavailableError: etcd did not answer within :data:`ADMIN_TIMEOUT_S`.
        """
        with self._etcd_errors("AlterConfigs", "the configs may or may not have been altered:"
                               " describe the topic to find out"):
            async with asyncio.timeout(ADMIN_TIMEOUT_S):
                assignment = await alter_overrides(self._node, self._log_manager, name, set,
                                                   delete, validate_only=validate_only)
        if not validate_only:
            with contextlib.suppress(Exception):  # seen at the next poll otherwise
                await self._node.view.refresh()
        return self.describe(name, None, assignment)

    # ---------------------------------------------------------------- descriptions

    def knows(self, name: str) -> bool:
        """Whether the cluster view has topic ``name``."""
        return name in self._node.view.topics

    def describe(self, name: str, local: TopicDescription | None,
                 assignment: TopicAssignment | None = None) -> TopicDescription:
        """Topic ``name`` as the cluster has it: its configs from the assignment, each
        partition as this server holds it (``local``), or empty with ``log_dir`` "" where it
        does not (yet).

        Raises:
            UnknownTopicOrPartitionError: the cluster view has no such topic.
        """
        if assignment is None:
            assignment = self._node.view.topics.get(name)
            if assignment is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        configs = self._log_manager.effective_configs(assignment.configs)
        if UNCLEAN_CONFIG not in assignment.configs:
            configs[UNCLEAN_CONFIG] = "true" if self._unclean_default else "false"
        held = {p.partition: p for p in local.partitions} if local is not None else {}
        partitions = [
            held.get(number) or PartitionDescription(number, 0, 0, 0, 0, "", -1)
            for number in sorted(assignment.replicas)
        ]
        return TopicDescription(name, configs, partitions, tuple(sorted(assignment.configs)))

    def listed(self, local: list[TopicDescription]) -> Iterator[TopicDescription]:
        """Every topic of the cluster view (described as :meth:`describe`), then the topics
        this server holds that the cluster does not know (created before it joined one), by
        name."""
        topics = self._node.view.topics
        held = {description.name: description for description in local}
        for name in sorted(topics.keys() | held.keys()):
            if name in topics:
                yield self.describe(name, held.get(name), topics[name])
            else:
                yield held[name]

    # ---------------------------------------------------------------- etcd errors

    @contextlib.contextmanager
    def _etcd_errors(self, operation: str, outcome: str) -> Iterator[None]:
        try:
            yield
        except _ETCD_DOWN as exc:
            raise CoordinationUnavailableError(
                f"{operation} needs etcd, which did not answer within {ADMIN_TIMEOUT_S:g} s"
                f" ({self._node.session.endpoint}: {exc or type(exc).__name__}); {outcome}"
            ) from exc
