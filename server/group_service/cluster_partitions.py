"""``__consumer_offsets`` in a cluster: the topic in etcd, its partitions' leaders, and the
coordinators of the partitions this server leads (docs/groups.md, "Cluster mode").

As Kafka's, the coordinator of a group is the leader of its partition
(``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/
GroupCoordinatorService.java``: ``onElection`` / ``onResignation``, called from
``core/src/main/scala/kafka/server/ReplicaManager.scala``'s ``applyDelta``). The placement is
shared with the transaction coordinators (server/coordinator_placement.py: the topic made in
etcd, a partition's leader, the wait for the high watermark); what is the groups' own:

* **The topic**: offsets.topic.num.partitions partitions, compacted, and
  min(offsets.topic.replication.factor, live brokers) replicas.
* **Leadership** (the replica roles' ``LeadershipListener``, server/cluster/replica.py):
  :meth:`~ClusterPartitions.became_leader` makes the partition's
  :class:`~.partition_coordinator.PartitionCoordinator` (loading: requests answer
  COORDINATOR_LOAD_IN_PROGRESS) and loads it once the partition's high watermark reached the
  log end this server took the leadership with
  (:func:`~stratalog.server.coordinator_placement.wait_until_caught_up`). The same
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
from typing import TYPE_CHECKING

from stratalog.server.coordinator_placement import (
    CoordinatorLocation,
    InternalTopicPlacement,
    wait_until_caught_up,
)
from stratalog.server.groups import CoordinatorNotAvailableError, GroupConfig

from .offsets_topic import GROUP_METADATA_TOPIC, topic_configs
from .partition_coordinator import PartitionCoordinator

if TYPE_CHECKING:
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.settings import Settings

__all__ = ["ClusterPartitions", "CoordinatorLocation"]

logger = logging.getLogger(__name__)


class ClusterPartitions:
    """The topic and this server's coordinators of it in a cluster (module docstring).

    Holds ``partitions`` (shared with the GroupService: partition -> the coordinator of a
    partition led here), the leader epoch each was made at, each one's load task, the closes of
    those unloaded, and the topic's placement (server/coordinator_placement.py). Invariant: a partition is
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
        self._placement = InternalTopicPlacement(
            replica_manager, settings, GROUP_METADATA_TOPIC,
            partitions=settings.offsets_topic_num_partitions,
            replication_factor=settings.offsets_topic_replication_factor,
            configs=lambda _factor: topic_configs(settings.offsets_topic_segment_bytes),
            unavailable=CoordinatorNotAvailableError, key_name="group")
        self._closed = False

    # ---------------------------------------------------------------- the topic

    def partition_count(self) -> int:
        """The topic's partitions in the cluster view (0: none yet, or not joined)."""
        return self._placement.partition_count()

    async def ensure_topic(self) -> int:
        """The topic's partition count, the topic written to etcd first if the cluster has
        none (server/coordinator_placement.py).

        Raises:
            CoordinatorNotAvailableError: not joined yet, or etcd cannot make it now.
        """
        return await self._placement.ensure_topic()

    def leader_of(self, group_id: str, partition: int) -> CoordinatorLocation:
        """Where ``group_id`` (of ``partition``) is coordinated: the partition's leader.

        Raises:
            CoordinatorNotAvailableError: the partition has no leader, or its leader is not
                live.
        """
        return self._placement.leader_of(group_id, partition)

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
        if await wait_until_caught_up(self._replicas, GROUP_METADATA_TOPIC,
                                      coordinator.partition, coordinator.name) is not None:
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
