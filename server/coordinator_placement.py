"""Coordinators on the leaders of an internal topic's partitions, in a cluster: the topic made in
etcd, where a key's coordinator is, and when a new leader may load.

Kafka places both of its coordinators so: a consumer group's on the leader of its
``__consumer_offsets`` partition, a transactional id's on the leader of its
``__transaction_state`` partition (``core/src/main/scala/kafka/server/KafkaApis.scala``,
``getOrCreateInternalTopic`` and ``handleFindCoordinatorRequest``;
``core/src/main/scala/kafka/server/ReplicaManager.scala``'s ``applyDelta`` tells both of each
election and resignation). Each of ours keeps its own state and requests
(server/group_service/cluster_partitions.py, server/transaction_service/); this module is what
they share:

* :class:`InternalTopicPlacement`: the topic, written to etcd through the cluster's topic
  administration (server/cluster/topic_admin.py, ``internal=True``) by the first request on any
  server that needs it, with its ``partitions`` setting's partitions and min(its replication
  factor setting, live brokers) replicas; a server that loses the race reads the winner's. Its
  partition count is the cluster view's from then on. :meth:`~InternalTopicPlacement.leader_of`:
  a partition's leader with its registered address, the coordinator FindCoordinator names.
* :func:`wait_until_caught_up`: a new leader's coordinator loads only once the partition's high
  watermark reached the log end it took the leadership with. A new leader may hold records the
  old one acknowledged (acks=all: every in-sync replica had them) above its own high watermark,
  which moves only with its followers' next fetches; it never truncates its own log, so once
  they fetched, every acknowledged record is below the high watermark and is replayed.
* :class:`LeadershipListeners`: the replica roles tell one ``LeadershipListener``
  (server/cluster/replica.py); this hands each event to every coordinator runtime.

Crash behaviour: nothing here is durable: the topic and the leaders are etcd's. Concurrency:
event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

from stratalog.server.cluster import errors as cluster_errors
from stratalog.server.storage.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.cluster.node import ClusterNode
    from stratalog.server.cluster.topic_admin import TopicAdmin
    from stratalog.server.settings import Settings

__all__ = [
    "HIGH_WATERMARK_RECHECK_S",
    "CoordinatorLocation",
    "InternalTopicPlacement",
    "LeadershipListener",
    "LeadershipListeners",
    "wait_until_caught_up",
]

logger = logging.getLogger(__name__)

#: A new leader's wait for its high watermark wakes at least this often to look again (the
#: serving layer's signal wakes it at every move; the timeout only bounds a missed one).
HIGH_WATERMARK_RECHECK_S = 1.0


class CoordinatorLocation(NamedTuple):
    """FindCoordinator's answer: the key's partition and its leader (``node_id`` None: this
    single server, at the front end's advertised address)."""

    partition: int
    node_id: int | None = None
    address: str = ""


class LeadershipListener(Protocol):
    """server/cluster/replica.py's ``LeadershipListener`` (the same two calls)."""

    def became_leader(self, topic: str, partition: int, leader_epoch: int) -> None: ...

    def stopped_leading(self, topic: str, partition: int) -> None: ...


class LeadershipListeners:
    """Every coordinator runtime's ``LeadershipListener`` behind the one the replica roles
    call, in order; each picks its own topic. A listener must not raise (they never do: a
    failure is theirs to log), so one cannot keep the next from hearing."""

    def __init__(self, *listeners: LeadershipListener) -> None:
        self._listeners = listeners

    def became_leader(self, topic: str, partition: int, leader_epoch: int) -> None:
        for listener in self._listeners:
            listener.became_leader(topic, partition, leader_epoch)

    def stopped_leading(self, topic: str, partition: int) -> None:
        for listener in self._listeners:
            listener.stopped_leading(topic, partition)


class InternalTopicPlacement:
    """One internal topic in a cluster: made on first need, and its partitions' leaders
    (module docstring).

    ``unavailable(message)`` makes the caller's retriable "no coordinator now" error (the
    groups' and the transactions' COORDINATOR_NOT_AVAILABLE); ``configs(replication_factor)``
    the topic's config overrides. Holds the topic administration once it was needed.
    """

    def __init__(
        self,
        replica_manager: ReplicaManager,
        settings: Settings,
        topic: str,
        *,
        partitions: int,
        replication_factor: int,
        configs: Callable[[int], Mapping[str, str]],
        unavailable: Callable[[str], Exception],
        key_name: str,
    ) -> None:
        """``partitions`` and ``replication_factor``: the settings the topic is made with;
        ``key_name`` names a key in messages ("group", "transactional id")."""
        self._replicas = replica_manager
        self._settings = settings
        self.topic = topic
        self._partitions = partitions
        self._replication_factor = replication_factor
        self._configs = configs
        self._unavailable = unavailable
        self._key_name = key_name
        self._creating = asyncio.Lock()
        self._topic_admin: TopicAdmin | None = None

    def node(self) -> ClusterNode:
        """This server in its cluster; ``unavailable`` before it joined."""
        node = self._replicas.cluster_node
        if node is None:
            raise self._unavailable(
                "this server has not joined its cluster yet (it registers in etcd right after"
                " it starts listening): retry")
        return node

    def partition_count(self) -> int:
        """The topic's partitions in the cluster view (0: none yet, or not joined)."""
        node = self._replicas.cluster_node
        assignment = node.view.topics.get(self.topic) if node is not None else None
        return assignment.partition_count if assignment is not None else 0

    async def ensure_topic(self) -> int:
        """The topic's partition count, the topic written to etcd first if the cluster has
        none (module docstring).

        Raises:
            ``unavailable``: not joined yet, or etcd cannot make it now.
        """
        node = self.node()
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
            factor = max(1, min(self._replication_factor, live))
            try:
                await self._topic_admin.create_topic(
                    self.topic, self._partitions, dict(self._configs(factor)), factor,
                    internal=True)
            except TopicAlreadyExistsError:
                pass  # another server made it first: the view shows it
            except (cluster_errors.CoordinationUnavailableError,
                    cluster_errors.InvalidReplicationFactorError) as exc:
                raise self._unavailable(f"cannot create {self.topic} now: {exc}") from exc
            else:
                logger.info("created the internal topic %s in the cluster: %d partitions,"
                            " replication factor %d (setting %d, %d live brokers)",
                            self.topic, self._partitions, factor, self._replication_factor,
                            live)
            with contextlib.suppress(Exception):  # etcd down: the next poll shows it
                await node.view.refresh()
            count = self.partition_count()
            if not count:
                raise self._unavailable(f"{self.topic} is being created: retry")
            return count

    def leader_of(self, key: str, partition: int) -> CoordinatorLocation:
        """Where ``key`` (of ``partition``) is coordinated: the partition's leader.

        Raises:
            ``unavailable``: the partition has no leader, or its leader is not live.
        """
        node = self.node()
        versioned = node.view.state(self.topic, partition)
        where = f"{self.topic}-{partition}, the partition of {self._key_name} {key!r},"
        if versioned is None or not versioned.state.has_leader:
            raise self._unavailable(f"{where} has no leader now: retry")
        leader = versioned.state.leader
        broker = node.membership.brokers.get(leader)
        if broker is None:
            raise self._unavailable(
                f"{where} is led by node {leader}, which is not live: retry once another"
                " replica is elected")
        return CoordinatorLocation(partition, leader, broker.address)


async def wait_until_caught_up(replica_manager: ReplicaManager, topic: str, partition: int,
                               name: str) -> int | None:
    """Wait until ``topic``-``partition``'s high watermark reached the log end this leader
    has now (module docstring); the high watermark then (the end a load reads to), or None
    when the partition is gone (nothing to load)."""
    try:
        log, state = replica_manager.get_partition(topic, partition)
    except UnknownTopicOrPartitionError as exc:  # deleted meanwhile: nothing to load
        logger.warning("%s: not loaded: %s", name, exc)
        return None
    target = log.log_end_offset
    if log.high_watermark < target:
        logger.info("%s: loading once the high watermark %d reaches %d (the followers"
                    " fetch)", name, log.high_watermark, target)
    while log.high_watermark < target and not state.closed:
        signal = state.signal()
        if log.high_watermark >= target:
            break
        await state.wait(signal, HIGH_WATERMARK_RECHECK_S)
    return log.high_watermark
