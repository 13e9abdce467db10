"""``__consumer_offsets`` in a cluster: the topic in etcd, its partitions' leaders, and the
coordinators of the partitions this server leads (docs/groups.md, "Cluster mode").

As Kafka's, the coordinator of a group is the leader of its partition
(``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/
GroupCoordinatorService.java``: ``onElection`` / ``onResignation``, called from
``core/src/main/scala/kafka/server/ReplicaManager.scala``'s ``applyDelta``):

* **The topic** (:meth:`ClusterPartitions.ensure_topic`) is written to etcd through the
  cluster's topic administration (server/cluster/topic_admin.py, ``internal=True``) by the
  first request on any server that needs it, with offsets.topic.num.partitions partitions,
  compacted, and min(offsets.topic.replication.factor, live brokers) replicas; a server that
  loses the race reads the winner's. Its partition count is the cluster view's.
* **Leadership** (the replica roles' ``LeadershipListener``, server/cluster/replica.py):
  :meth:`~ClusterPartitions.became_leader` makes the partition's
  :class:`~.partition_coordinator.PartitionCoordinator` (loading: requests answer
  COORDINATOR_LOAD_IN_PROGRESS) and loads it once the partition's high watermark reached the
  log end this server took the leadership with. A new leader may hold records the old one
  acknowledged (acks=all: every in-sync replica had them) above its own high watermark, which
  moves only with its followers' next fetches; it never truncates its own log, so once they
  fetched, every acknowledged record is below the high watermark and is replayed. The same
  epoch again (a lease renewed) keeps the coordinator.
  :meth:`~ClusterPartitions.stopped_leading` unloads it (parked requests NOT_COORDINATOR) and
  closes it in the background; a new coordinator of the partition loads only after the old
  one's writer stopped.
* **Where a group is** (:meth:`~ClusterPartitions.leader_of`): the partition's leader in the
  cluster view, with its registered address; COORDINATOR_NOT_AVAILABLE while it has none or
  its leader is not live.

Crash behaviour: nothing here is durable; the roles and the topic come back from etcd, the
groups from the partitions' logs. Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import Executor
from typing import TYPE_CHECKING, NamedTuple

from stratalog.server.cluster import errors as cluster_errors
from stratalog.server.groups import CoordinatorNotAvailableError, GroupConfig
from stratalog.server.storage.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

from .offsets_topic import GROUP_METADATA_TOPIC, topic_configs
from .partition_coordinator import PartitionCoordinator

if TYPE_CHECKING:
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.cluster.node import ClusterNode
    from stratalog.server.cluster.topic_admin import TopicAdmin
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.settings import Settings

__all__ = ["HIGH_WATERMARK_RECHECK_S", "ClusterPartitions", "CoordinatorLocation"]

logger = logging.getLogger(__name__)

#: A new leader's wait for its high watermark wakes at least this often to look again (the
#: serving layer's signal wakes it at every move; the timeout only bounds a missed one).
HIGH_WATERMARK_RECHECK_S = 1.0


class CoordinatorLocation(NamedTuple):
    """FindCoordinator's answer: the group's ``__consumer_offsets`` partition and its leader
    (``node_id`` None: this single server, at the front end's advertised address)."""

    partition: int
    node_id: int | None = None
    address: str = ""


class ClusterPartitions:
    """The topic and this server's coordinators of it in a cluster (module docstring).

    Holds ``partitions`` (shared with the GroupService: partition -> the coordinator of a
    partition led here), the leader epoch each was made at, each one's load task, the closes of
    those unloaded, and the topic administration once it was needed. Invariant: a partition is
    in ``partitions`` exactly while this server leads it (as last told) and the service runs.
    """

    def __init__(
        self,
        replica_manager: ReplicaManager,
        settings: Settings,
        executor: Executor,
        config: GroupConfig,
        partitions: dict[int, PartitionCoordinator],
        *,
        metrics: ServerMetrics | None = None,
    ) -> None:
        self._replicas = replica_manager
        self._settings = settings
        self._executor = executor
        self._config = config
        self._metrics = metrics
        self.partitions = partitions
        self._epochs: dict[int, int] = {}
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._closing: dict[int, asyncio.Task[None]] = {}
        self._creating = asyncio.Lock()
        self._topic_admin: TopicAdmin | None = None
        self._closed = False

    # ---------------------------------------------------------------- the topic

    def _node(self) -> ClusterNode:
        node = self._replicas.cluster_node
        if node is None:
            raise CoordinatorNotAvailableError(
                "this server has not joined its cluster yet (it registers in etcd right after"
                " it starts listening): retry")
        return node

    def partition_count(self) -> int:
        """The topic's partitions in the cluster view (0: none yet, or not joined)."""
        node = self._replicas.cluster_node
        assignment = node.view.topics.get(GROUP_METADATA_TOPIC) if node is not None else None
        return assignment.partition_count if assignment is not None else 0

    async def ensure_topic(self) -> int:
        """The topic's partition count, the topic written to etcd first if the cluster has
        none (module docstring).

        Raises:
            CoordinatorNotAvailableError: not joined yet, or etcd cannot make it now.
        """
        node = self._node()
        count = self.partition_count()
        if count:
            return count
        async with self._creating:
            count = self.partition_count()
            if count:
                return count
            settings = self._settings
            if self._topic_admin is None:
                from stratalog.server.cluster.topic_admin import TopicAdmin

                self._topic_admin = TopicAdmin(
                    node, self._replicas.log_manager, settings.default_replication_factor,
                    settings.unclean_leader_election_enable)
            live = len(node.membership.brokers)
            factor = max(1, min(settings.offsets_topic_replication_factor, live))
            try:
                await self._topic_admin.create_topic(
                    GROUP_METADATA_TOPIC, settings.offsets_topic_num_partitions,
                    topic_configs(settings.offsets_topic_segment_bytes), factor, internal=True)
            except TopicAlreadyExistsError:
                pass  # another server made it first: the view shows it
            except (cluster_errors.CoordinationUnavailableError,
                    cluster_errors.InvalidReplicationFactorError) as exc:
                raise CoordinatorNotAvailableError(
                    f"cannot create {GROUP_METADATA_TOPIC} now: {exc}") from exc
            else:
                logger.info("created the internal topic %s in the cluster: %d partitions,"
                            " replication factor %d (offsets_topic_replication_factor %d,"
                            " %d live brokers), compacted", GROUP_METADATA_TOPIC,
                            settings.offsets_topic_num_partitions, factor,
                            settings.offsets_topic_replication_factor, live)
            with contextlib.suppress(Exception):  # etcd down: the next poll shows it
                await node.view.refresh()
            count = self.partition_count()
            if not count:
                raise CoordinatorNotAvailableError(
                    f"{GROUP_METADATA_TOPIC} is being created: retry")
            return count

    def leader_of(self, group_id: str, partition: int) -> CoordinatorLocation:
        """Where ``group_id`` (of ``partition``) is coordinated: the partition's leader.

        Raises:
            CoordinatorNotAvailableError: the partition has no leader, or its leader is not
                live.
        """
        node = self._node()
        versioned = node.view.state(GROUP_METADATA_TOPIC, partition)
        where = f"{GROUP_METADATA_TOPIC}-{partition}, the partition of group {group_id!r},"
        if versioned is None or not versioned.state.has_leader:
            raise CoordinatorNotAvailableError(f"{where} has no leader now: retry")
        leader = versioned.state.leader
        broker = node.membership.brokers.get(leader)
        if broker is None:
            raise CoordinatorNotAvailableError(
                f"{where} is led by node {leader}, which is not live: retry once another"
                " replica is elected")
        return CoordinatorLocation(partition, leader, broker.address)

    # ---------------------------------------------------------------- leadership

    def became_leader(self, topic: str, partition: int, leader_epoch: int) -> None:
        """``LeadershipListener``: this server leads ``topic``-``partition`` at
        ``leader_epoch``: for a partition of ``__consumer_offsets``, its coordinator is made
        and loads (module docstring). The same epoch again (a lease renewed): kept."""
        if topic != GROUP_METADATA_TOPIC or self._closed:
            return
        if partition in self.partitions and self._epochs.get(partition) == leader_epoch:
            return
        previous = self._resign(partition)
        coordinator = PartitionCoordinator(
            partition, self._config, self._replicas, self._executor, metrics=self._metrics)
        self.partitions[partition] = coordinator
        self._epochs[partition] = leader_epoch
        self._loads[partition] = asyncio.get_running_loop().create_task(
            self._load_as_leader(coordinator, previous),
            name=f"stratalog-group-load-{partition}")
        logger.info("%s: leader at epoch %d: its group coordinator loads", coordinator.name,
                    leader_epoch)

    def stopped_leading(self, topic: str, partition: int) -> None:
        """``LeadershipListener``: this server no longer leads ``topic``-``partition``: its
        coordinator, if any, is unloaded (parked requests NOT_COORDINATOR) and closed."""
        if topic == GROUP_METADATA_TOPIC and self._resign(partition) is not None:
            logger.info("%s-%d: no longer leader: its group coordinator unloaded",
                        GROUP_METADATA_TOPIC, partition)

    def _resign(self, partition: int) -> asyncio.Task[None] | None:
        """Unload ``partition``'s coordinator now and close it in the background; the task
        that closes it (None: there was none)."""
        coordinator = self.partitions.pop(partition, None)
        self._epochs.pop(partition, None)
        load = self._loads.pop(partition, None)
        if load is not None:
            load.cancel()
        if coordinator is None:
            return None
        coordinator.unload()
        closing = asyncio.get_running_loop().create_task(
            _close_after(coordinator, load), name=f"stratalog-group-close-{partition}")
        self._closing[partition] = closing
        closing.add_done_callback(
            lambda task: self._closing.pop(partition, None) if self._closing.get(partition)
            is task else None)
        return closing

    async def _load_as_leader(self, coordinator: PartitionCoordinator,
                              previous: asyncio.Task[None] | None) -> None:
        """A new leader's load: after the previous coordinator of the partition closed (its
        writes are over), wait until the high watermark reached the log end this leader took
        over with (module docstring), then load up to it."""
        if previous is not None:
            await asyncio.wait({previous})  # not cancelled with this task: it ends by itself
        try:
            log, state = self._replicas.get_partition(GROUP_METADATA_TOPIC,
                                                      coordinator.partition)
        except UnknownTopicOrPartitionError as exc:  # deleted meanwhile: nothing to load
            logger.warning("%s: not loaded: %s", coordinator.name, exc)
            return
        target = log.log_end_offset
        if log.high_watermark < target:
            logger.info("%s: loading once the high watermark %d reaches %d (the followers"
                        " fetch)", coordinator.name, log.high_watermark, target)
        while log.high_watermark < target and not state.closed:
            signal = state.signal()
            if log.high_watermark >= target:
                break
            await state.wait(signal, HIGH_WATERMARK_RECHECK_S)
        await coordinator.load()

    # ---------------------------------------------------------------- the end

    def begin_shutdown(self) -> None:
        """Leadership changes are ignored from now on (the service unloads its coordinators)."""
        self._closed = True

    async def close(self) -> None:
        """Stop the loads and wait for the closes under way (the service closes the
        coordinators still in ``partitions``)."""
        self._closed = True
        loads = list(self._loads.values())
        for task in loads:
            task.cancel()
        for task in [*loads, *self._closing.values()]:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _close_after(coordinator: PartitionCoordinator,
                       load: asyncio.Task[None] | None) -> None:
    """Close ``coordinator`` once its (cancelled) load task ended."""
    if load is not None:
        with contextlib.suppress(asyncio.CancelledError):
            await load
    await coordinator.close()
