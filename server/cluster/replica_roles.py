"""This server's replicas, made leaders and followers as etcd says.

Kafka's ``ReplicaManager.becomeLeaderOrFollower`` / ``applyDelta`` with its
``ReplicaFetcherManager`` (``core/src/main/scala/kafka/server/ReplicaManager.scala``), fed by
the cluster view instead of a controller's requests. What serves a partition (appends, reads,
their waits) is the partition-serving layer's (server/broker/replica_manager.py); this module
only decides each replica's role, runs its fetcher and writes its ISR, and tells the serving
layer through :class:`~.replica.ReplicaEvents` what changed.

A listener of the cluster view (cluster_view.py). For every partition whose assignment names
this node among its replicas (partition_state.py's TopicAssignment):

1. **The log exists.** The topic is created locally (``LogManager.create_topic``) with the
   assignment's partition count and configs, all of its partitions, and grown
   (``LogManager.create_partitions``) when partitions were added in etcd: the storage engine
   creates topics whole (``__consumer_offsets`` as the internal topic it is: its name is reserved). A
   partition this node does not replicate is then held locally but never served: clients get
   NotLeaderOrFollowerError for it (the leader hint from the view), and it stays empty.
2. **The role** follows the partition's state (its PartitionState, read with its mod revision):

   * leader = this node, at an epoch newer than the replica's: stop fetching, assign the
     epoch in the leader epoch cache at the log end offset (Kafka's ``makeLeader``), track
     the high watermark from ``replication-offset-checkpoint`` (or the one it tracked as a
     follower), reset the followers' states; from now on appends are stamped with the epoch;
   * the same leader and epoch: only the ISR, or the replicas (a reassignment:
     reassignment.py), changed, applied;
   * another leader (or none): follow it (replica_fetcher.py), acks=all producers waiting
     here fail with NotLeaderOrFollowerError;
   * an epoch older than the replica's: a stale read, ignored.

   Each beginning and end of leadership is told to the :class:`~.replica.LeadershipListener`
   (the group service: the coordinator of a ``__consumer_offsets`` partition is its leader),
   after the role changed.
3. **Gone**: a topic that leaves the view (it was deleted) is deleted locally (by the serving
   layer, which lets its appends in flight finish first); a topic that
   was deleted while this server was down stays on its disk (nothing says it was replicated).

A topic that exists locally but is not in the view (created on a single server before it
joined a cluster) is served as before, unreplicated.

**The ISR** (isr.py decides, this module writes): every ``replica_lag_time_max_ms / 2`` each
partition led here removes the followers that lagged longer than ``replica_lag_time_max_ms``,
and after each follower fetch a follower that caught up joins. A change is one etcd
transaction that compares the partition key's mod revision with the one the leader read
(ZooKeeper-era Kafka leaders wrote their ISR the same way); a failed transaction re-reads the
view, whose listener applies what someone else wrote (a new leader: this one steps down).

**The lease**: a leader leads only under the lease it began under (partition.py). When the
session replaced an expired lease (checked every view poll interval), the view is read again
and every partition re-applied, so a server frozen past its session timeout leads again only
if etcd still names it.

Crash behaviour: nothing is kept here; a restart rebuilds it from etcd and the logs.

Concurrency: event-loop only; view changes are applied one at a time (a lock), storage calls
go to the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from stratalog.server.storage.config import TOPIC_CONFIG_NAMES
from stratalog.server.storage.errors import (
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.storage.log_manager import SERVER_WRITTEN_TOPICS

from .errors import LeaderNotAvailableError, NotLeaderOrFollowerError
from .node import POLL_INTERVALS_PER_SESSION
from .replica import LeadershipListener, Replica, ReplicaEvents, Role
from .replica_fetcher import FetchSettings, ReplicaFetcher
from .replication_throttle import ReplicationThrottle
from .topic_configs import apply_overrides

if TYPE_CHECKING:
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.settings import Settings
    from stratalog.server.storage.log_manager import LogManager

    from .cluster_view import PartitionKey
    from .membership import BrokerInfo
    from .node import ClusterNode
    from .partition_state import PartitionState
    from .peer_channels import PeerChannels, ReplicationPeer

__all__ = ["ReplicaRoles"]

logger = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class ReplicaRoles:
    """This server's replicated partitions (module docstring); :meth:`start`, then
    :meth:`close`.

    ``events`` (the serving layer) hears of every change a partition's readers or acks=all
    producers may wait for, and deletes a topic that left the cluster. ``leadership`` (the
    group service) hears when this server begins and stops leading each partition. ``peers``
    (peer_channels.py) reach the leaders, and are closed with the roles.
    """

    def __init__(self, node: ClusterNode, log_manager: LogManager, settings: Settings,
                 executor: Executor, events: ReplicaEvents, peers: PeerChannels,
                 metrics: ServerMetrics | None = None,
                 leadership: LeadershipListener | None = None) -> None:
        self._node = node
        self._leadership = leadership
        self.peers = peers
        self._metrics = metrics
        self._log_manager = log_manager
        self._executor = executor
        self._events = events
        self.lag_time_max_ms = settings.replica_lag_time_max_ms
        self._fetch_settings = FetchSettings(
            settings.replica_fetch_wait_max_ms, settings.replica_fetch_max_bytes,
            settings.replica_fetch_backoff_ms, settings.replica_fetch_response_max_bytes,
            inline_max_bytes=settings.append_in_executor_min_bytes,
        )
        self.partitions: dict[PartitionKey, Replica] = {}
        #: One fetcher (one fetch session) per leader this server follows partitions of.
        self._fetchers: dict[int, ReplicaFetcher] = {}
        #: The leader each followed partition is fetched from.
        self._fetched_from: dict[PartitionKey, int] = {}
        #: One bucket for every partition this server is being added to (Kafka's follower
        #: throttle is per broker); rate 0: off.
        self._throttle = ReplicationThrottle(settings.replica_reassignment_throttled_rate,
                                             time.monotonic())
        #: The leader's side of the same throttle (Kafka's leader.replication.throttled.rate,
        #: which ``kafka-reassign-partitions --throttle`` sets to the same value): one bucket
        #: for the bytes this server sends to every replica being added to a partition it
        #: leads (fetch_session.py), so that a drain's many new replicas fetching from one
        #: leader share one rate there.
        self.leader_throttle = ReplicationThrottle(settings.replica_reassignment_throttled_rate,
                                                   time.monotonic())
        self._applying = asyncio.Lock()
        self._isr_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._lease_seen = 0
        #: How often the lease is checked for a replacement (the view's poll interval).
        self._tick_s = node.session.ttl_s / POLL_INTERVALS_PER_SESSION

    @property
    def node_id(self) -> int:
        return self._node.node_id

    def leader_count(self) -> int:
        """Partitions this server leads now (a metric's gauge; any thread)."""
        return sum(1 for p in list(self.partitions.values()) if p.is_leader())

    def under_replicated_count(self) -> int:
        """Partitions led here whose ISR is smaller than their replicas (any thread)."""
        return sum(1 for p in list(self.partitions.values())
                   if p.is_leader() and len(p.isr) < len(p.replicas))

    async def start(self) -> None:
        """Apply the view as it is, then follow its changes; start the ISR checks."""
        if self._metrics is not None:
            self._metrics.leader_partitions.set_function(self.leader_count)
            self._metrics.under_replicated_partitions.set_function(self.under_replicated_count)
        view = self._node.view
        view.add_listener(self._on_view_change)
        self._lease_seen = self._node.session.lease_id
        await self._on_view_change(set(view.topics), set(view.partitions))
        self._isr_task = asyncio.create_task(self._check_forever(),
                                             name="stratalog-replica-checks")

    def begin_shutdown(self) -> None:
        """The server stops: the view is applied no more (the serving layer answers the
        acks=all producers waiting here: ReplicaManager.begin_shutdown)."""
        self._closed = True

    async def close(self) -> None:
        """Stop the fetchers and the ISR checks, fail the waiting producers, close channels."""
        self._closed = True
        if self._isr_task is not None:
            self._isr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._isr_task
        for task in list(self._background):
            task.cancel()
        for fetcher in list(self._fetchers.values()):
            await fetcher.stop()
        self._fetchers.clear()
        self._fetched_from.clear()
        for partition in self.partitions.values():
            partition.stop()
        await self.peers.close()

    # ---------------------------------------------------------------- the service's questions

    @property
    def brokers(self) -> Mapping[int, BrokerInfo]:
        """The live servers' registrations by node id (the membership's last read)."""
        return self._node.membership.brokers

    def leader_address(self, node_id: int) -> str:
        broker = self._node.membership.brokers.get(node_id)
        return broker.address if broker is not None else ""

    def leader_partition(self, topic: str, partition: int) -> Replica | None:
        """The partition if this server leads it now; None if the topic is not replicated
        (a local topic, served as on a single server).

        Raises:
            NotLeaderOrFollowerError: another node leads it, or this one is not sure of its
                lease (the leader this server knows of is the hint).
            LeaderNotAvailableError: no leader is known.
        """
        view = self._node.view
        assignment = view.topics.get(topic)
        if assignment is None:
            return None
        if partition not in assignment.replicas:
            # Not a partition of the replicated topic: as a local lookup of a missing one.
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        replica = self.partitions.get((topic, partition))
        if replica is not None and replica.is_leader():
            return replica
        versioned = view.state(topic, partition)
        if versioned is None or not versioned.state.has_leader:
            raise LeaderNotAvailableError(topic, partition, "the partition has no leader now; "
                                          "retry after a metadata refresh")
        state = versioned.state
        leader = state.leader if state.leader != self.node_id else -1
        raise NotLeaderOrFollowerError(topic, partition, leader, state.leader_epoch,
                                       self.leader_address(leader) if leader >= 0 else "")

    # ---------------------------------------------------------------- applying the view

    async def _on_new_lease(self) -> None:
        """The lease expired and was replaced: re-read the view, re-apply every partition
        (a leader under the old lease leads again only if etcd still names it)."""
        view = self._node.view
        try:
            await view.refresh()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # etcd down again: the next tick tries again
            logger.info("view not re-read after a new lease: %s", exc)
            return
        self._lease_seen = self._node.session.lease_id
        await self._apply(set(view.topics), set(view.partitions) | set(self.partitions))

    async def _on_view_change(self, changed_topics: set[str],
                              changed_partitions: set[PartitionKey]) -> None:
        await self._apply(changed_topics, changed_partitions)

    async def _apply(self, changed_topics: set[str],
                     changed_partitions: set[PartitionKey]) -> None:
        if self._closed:
            return
        async with self._applying:
            view = self._node.view
            keys = set(changed_partitions)
            for topic in sorted(changed_topics):
                assignment = view.topics.get(topic)
                if assignment is None:
                    await self._remove_topic(topic)
                    continue
                if any(self.node_id in nodes for nodes in assignment.replicas.values()):
                    try:
                        await self._ensure_topic(topic, assignment.partition_count,
                                                 assignment.configs)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        logger.exception("topic %s: could not create its local log", topic)
                        continue
                keys.update((topic, p) for p in assignment.replicas)
                keys.update(key for key in self.partitions if key[0] == topic)
            for key in sorted(keys):
                try:
                    await self._apply_partition(key)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("%s-%d: could not apply the cluster view", *key)

    async def _ensure_topic(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        # The log's own configs: the assignment may carry others the storage does not know
        # (the controller's, e.g. unclean.leader.election.enable), which are not the log's.
        log_configs = {name: value for name, value in configs.items()
                       if name in TOPIC_CONFIG_NAMES}

        def create() -> None:
            try:
                # __consumer_offsets: its name is reserved, made only for the server itself.
                self._log_manager.create_topic(topic, partitions, log_configs,
                                               internal=topic in SERVER_WRITTEN_TOPICS)
            except TopicAlreadyExistsError:
                # Exists already (created before a restart, or by this server's CreateTopic);
                # partitions were added in etcd (CreatePartitions): grow it to the count.
                held = len(self._log_manager.describe_topic(topic).partitions)
                if held < partitions:
                    self._log_manager.create_partitions(topic, partitions)
                    logger.info("topic %s: grown locally from %d to %d partitions (the"
                                " cluster's count)", topic, held, partitions)

        await self._blocking(create)
        # Held before (a restart, or an alteration since): the cluster's overrides win.
        await self._blocking(apply_overrides, self._log_manager, topic, log_configs)

    async def _remove_topic(self, topic: str) -> None:
        keys = [key for key in self.partitions if key[0] == topic]
        if not keys:
            return  # never replicated here (since this start): not ours to delete
        for key in keys:
            await self._stop_fetcher(key)
            self.partitions.pop(key).stop()
            self._stopped_leading(key)
        logger.info("topic %s left the cluster: deleting it locally", topic)
        with contextlib.suppress(UnknownTopicOrPartitionError):
            await self._events.delete_partitions(topic)

    async def _apply_partition(self, key: PartitionKey) -> None:
        topic, number = key
        view = self._node.view
        assignment = view.topics.get(topic)
        replicas = assignment.replicas.get(number, ()) if assignment is not None else ()
        replica = self.partitions.get(key)
        if self.node_id not in replicas:
            if replica is not None:
                await self._stop_fetcher(key)
                self.partitions.pop(key).stop()
                self._stopped_leading(key)
            return
        versioned = view.state(topic, number)
        if versioned is None:
            return  # the topic is written, its states not yet
        state, revision = versioned
        if replica is None:
            log = self._log_manager.get_log(topic, number)
            replica = self.partitions[key] = Replica(
                topic, number, self.node_id, log, self._node.session, self._events
            )
        if state.leader_epoch < replica.leader_epoch:
            return  # an older state than the one acted on: a stale read
        if state.leader == self.node_id:
            if (replica.role is Role.LEADER and replica.leader_epoch == state.leader_epoch
                    and replica.leads_under_current_lease):
                self._reassigned(replica, replicas)
                replica.update_isr(state, revision)
            else:
                await self._make_leader(replica, state, revision, replicas)
        elif (replica.role is Role.FOLLOWER and replica.leader_epoch == state.leader_epoch
              and replica.leader_id == state.leader):
            replica.isr, replica.mod_revision = state.isr, revision
            replica.replicas = replicas
        else:
            await self._make_follower(replica, state, revision, replicas)

    @staticmethod
    def _reassigned(replica: Replica, replicas: tuple[int, ...]) -> None:
        """The leader's replicas changed at the same epoch (a reassignment, reassignment.py,
        added or removed some): the added ones may fetch and join the ISR from now on; what it
        knew of the removed ones is forgotten (they count for nothing, and fetch no more)."""
        if replicas == replica.replicas:
            return
        logger.info("%s-%d: replicas %s -> %s (reassignment)", replica.topic, replica.partition,
                    list(replica.replicas), list(replicas))
        replica.replicas = replicas
        replica.followers = {node: follower for node, follower in replica.followers.items()
                             if node in replicas}

    async def _make_leader(self, replica: Replica, state: PartitionState, revision: int,
                           replicas: tuple[int, ...]) -> None:
        key = (replica.topic, replica.partition)
        await self._stop_fetcher(key)
        log = replica.log
        checkpointed = self._log_manager.checkpointed_high_watermark(*key)

        def take_epoch() -> None:
            # Kafka's makeLeader: the epoch starts at the log end (no batch of it yet), and
            # the high watermark is tracked from the checkpoint (or kept, as a follower's).
            log.maybe_assign_epoch_start_offset(state.leader_epoch, log.log_end_offset)
            if not log.tracks_high_watermark:
                log.update_high_watermark(checkpointed if checkpointed is not None else 0)

        await self._blocking(take_epoch)
        replica.become_leader(state, revision, replicas, _now_ms())
        logger.info("%s-%d: leader at epoch %d from offset %d (isr %s, high watermark %d)",
                    replica.topic, replica.partition, state.leader_epoch, log.log_end_offset,
                    list(state.isr), log.high_watermark)
        self._events.replica_changed(*key)
        if self._leadership is not None:
            self._leadership.became_leader(replica.topic, replica.partition, state.leader_epoch)

    async def _make_follower(self, replica: Replica, state: PartitionState, revision: int,
                             replicas: tuple[int, ...]) -> None:
        key = (replica.topic, replica.partition)
        # No longer leader before anything is awaited: no append slips in at the old epoch.
        replica.become_follower(state, revision, replicas)
        self._events.replica_changed(*key)
        self._stopped_leading(key)
        await self._stop_fetcher(key)
        log = replica.log
        if not log.tracks_high_watermark:
            checkpointed = self._log_manager.checkpointed_high_watermark(*key)
            await self._blocking(log.update_high_watermark,
                                 checkpointed if checkpointed is not None else 0)
        if state.has_leader:
            logger.info("%s-%d: following node %d at epoch %d from offset %d", replica.topic,
                        replica.partition, state.leader, state.leader_epoch, log.log_end_offset)
            fetcher = self._fetchers.get(state.leader)
            if fetcher is None:
                leader = state.leader
                fetcher = self._fetchers[leader] = ReplicaFetcher(
                    self.node_id, leader, lambda: self._stub(leader), self._fetch_settings,
                    self._executor, self._throttled_delay)
                fetcher.start()
            fetcher.add_partition(replica, state.leader_epoch)
            self._fetched_from[key] = state.leader

    def _stopped_leading(self, key: PartitionKey) -> None:
        if self._leadership is not None:
            self._leadership.stopped_leading(*key)

    async def _stop_fetcher(self, key: PartitionKey) -> None:
        """Fetch ``key`` no more (its storage call in flight finished); a fetcher left with no
        partition is stopped (its session ends)."""
        leader = self._fetched_from.pop(key, None)
        fetcher = self._fetchers.get(leader) if leader is not None else None
        if fetcher is None:
            return
        await fetcher.remove_partition(key)
        if not len(fetcher) and self._fetchers.get(leader) is fetcher:
            del self._fetchers[leader]
            await fetcher.stop()

    def _stub(self, node_id: int) -> ReplicationPeer | None:
        address = self.leader_address(node_id)
        return self.peers.replication(address, self._live_addresses) if address else None

    def _throttled_delay(self, key: PartitionKey, size_bytes: int) -> float:
        """The fetchers' throttle (replication_throttle.py): ``size_bytes`` of ``key`` were
        fetched; how long the partition waits before its next fetch. Only while this server is
        being added to the partition, as the view says now: 0 otherwise, and when the
        throttle is off."""
        if not self._throttle.enabled or not self.is_being_added(key, self.node_id):
            return 0.0
        now = time.monotonic()
        self._throttle.record(size_bytes, now)
        return self._throttle.delay_s(now)

    def is_being_added(self, key: PartitionKey, node_id: int) -> bool:
        """Whether ``node_id`` is a replica a reassignment is adding to ``key``, as the view
        says now (what both sides of the throttle apply to)."""
        assignment = self._node.view.topics.get(key[0])
        reassignment = assignment.reassigning.get(key[1]) if assignment is not None else None
        return reassignment is not None and node_id in reassignment.adding

    def _live_addresses(self) -> set[str]:
        return {broker.address for broker in self._node.membership.brokers.values()}

    async def _blocking(self, function: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, function, *args)

    # ---------------------------------------------------------------- the ISR

    def maybe_expand_isr(self, replica: Replica) -> None:
        """After a follower's fetch: write the followers that caught up into the ISR."""
        if replica.isr_change_in_flight or not replica.is_leader():
            return
        # A follower in a controlled shutdown stays out (controlled_shutdown.py; KRaft refuses
        # it in AlterPartition as "shutting down").
        joining = replica.followers_to_add() - self._node.membership.shutting_down_brokers()
        if joining:
            replica.pending_isr_additions |= joining
            self._spawn(self._alter_isr(replica, tuple(sorted(set(replica.isr) | joining)),
                                        f"{sorted(joining)} caught up"))

    async def _check_forever(self) -> None:
        """Every poll interval: a replaced lease re-applies the view; every half of
        ``replica_lag_time_max_ms``: the ISR checks."""
        isr_interval_s = self.lag_time_max_ms / 2 / 1000
        loop = asyncio.get_running_loop()
        isr_due = loop.time() + isr_interval_s
        while True:
            await asyncio.sleep(min(self._tick_s, isr_interval_s))
            try:
                if self._node.session.lease_id != self._lease_seen:
                    await self._on_new_lease()
                if loop.time() >= isr_due:
                    isr_due = loop.time() + isr_interval_s
                    await self._shrink_isrs()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("replica checks failed; trying again")

    async def _shrink_isrs(self) -> None:
        for replica in list(self.partitions.values()):
            if replica.isr_change_in_flight or not replica.is_leader():
                continue
            lagging = replica.followers_to_remove(_now_ms(), self.lag_time_max_ms)
            if lagging:
                isr = tuple(r for r in replica.isr if r not in lagging)
                await self._alter_isr(
                    replica, isr, f"{sorted(lagging)} lagged more than "
                    f"{self.lag_time_max_ms} ms (replica.lag.time.max.ms)",
                )

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _alter_isr(self, replica: Replica, isr: tuple[int, ...], why: str) -> None:
        """Write ``isr`` for ``replica`` if its state in etcd is still the one it read (a
        transaction comparing the mod revision), then re-read the view (module docstring)."""
        key = (replica.topic, replica.partition)
        view, keys = self._node.view, self._node.keys
        versioned = view.state(*key)
        replica.isr_change_in_flight = True
        succeeded = False
        try:
            if (versioned is None or versioned.mod_revision != replica.mod_revision
                    or versioned.state.leader != self.node_id
                    or versioned.state.leader_epoch != replica.leader_epoch):
                return  # the view moved on: its listener applies it first
            new_state = dataclasses.replace(versioned.state, isr=isr)
            client = self._node.session.client
            etcd_key = keys.partition(*key)
            succeeded, _ = await client.transaction(
                compare=[client.transactions.mod(etcd_key) == versioned.mod_revision],
                success=[client.transactions.put(etcd_key, new_state.encode())],
                failure=[],
            )
            if succeeded:
                logger.info("%s-%d: ISR %s -> %s: %s", *key, list(versioned.state.isr),
                            list(isr), why)
                if self._metrics is not None:
                    grew = len(isr) > len(versioned.state.isr)
                    (self._metrics.isr_expands if grew else self._metrics.isr_shrinks).inc()
            else:
                logger.info("%s-%d: ISR change to %s lost a race (the state changed in etcd);"
                            " re-reading", *key, list(isr))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # etcd down: the ISR stays as it is until it answers
            logger.warning("%s-%d: could not write ISR %s: %s", *key, list(isr), exc)
        finally:
            replica.isr_change_in_flight = False
            refreshed = False
            with contextlib.suppress(Exception):
                await view.refresh()  # its listener applies the new state (update_isr)
                refreshed = True
            if refreshed or not succeeded:
                # Written and seen, or not written: the maximal ISR is the committed one.
                # (Written but not seen yet: the additions keep counting until it is.)
                replica.pending_isr_additions.clear()
