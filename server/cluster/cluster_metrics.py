"""The cluster's health as an operator watches it: gauges computed at scrape time from the
cluster view this server holds (docs/cluster.md, "What to watch").

Kafka's controller and broker metrics of the same meaning
(``core/src/main/scala/kafka/controller/KafkaController.scala``: ``ActiveControllerCount``,
``OfflinePartitionsCount``; ``core/src/main/scala/kafka/cluster/Partition.scala``:
``UnderMinIsr``)::

    stratalog_active_controller            1 on the controller, 0 elsewhere: the cluster's sum
                                           must be 1 (0: no controller, leaders are not elected;
                                           2: a stale one has not noticed yet)
    stratalog_offline_partitions           partitions with no live leader, counted by the
                                           controller only (0 elsewhere, so that a sum over the
                                           cluster counts each once): nobody can write or read them
    stratalog_under_min_isr_partitions     partitions led here whose ISR is smaller than their
                                           min.insync.replicas: acks=all producers are refused
                                           (NOT_ENOUGH_REPLICAS)
    stratalog_live_brokers                 the brokers registered in etcd, as this server last
                                           read them

A gauge reads the view without a lock: the view's dictionaries are replaced whole when it is
re-read (cluster_view.py), so a scrape sees one version or the next. Concurrency: any thread
(the metrics endpoint's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.storage.config import LogConfig

    from .node import ClusterNode

__all__ = ["ClusterHealth"]

_MIN_ISR = "min.insync.replicas"


class ClusterHealth:
    """The gauges of the module docstring for ``node``; ``defaults``: the server's topic
    config defaults (for a topic that sets no min.insync.replicas)."""

    def __init__(self, node: ClusterNode, defaults: LogConfig) -> None:
        self._node = node
        self._min_insync_default = defaults.min_insync_replicas

    def bind(self, metrics: ServerMetrics) -> None:
        metrics.active_controller.set_function(self.active_controller)
        metrics.offline_partitions.set_function(self.offline_partitions)
        metrics.under_min_isr_partitions.set_function(self.under_min_isr_partitions)
        metrics.live_brokers.set_function(self.live_brokers)

    def active_controller(self) -> int:
        return 1 if self._node.election.is_controller else 0

    def offline_partitions(self) -> int:
        if not self._node.election.is_controller:
            return 0
        live = self._node.membership.brokers
        view = self._node.view
        return sum(1 for key, versioned in list(view.partitions.items())
                   if key[0] in view.topics
                   and (not versioned.state.has_leader or versioned.state.leader not in live))

    def under_min_isr_partitions(self) -> int:
        view, me = self._node.view, self._node.node_id
        topics = view.topics
        count = 0
        for (topic, _), (state, _) in list(view.partitions.items()):
            if state.leader != me:
                continue
            assignment = topics.get(topic)
            if assignment is None:
                continue
            if len(state.isr) < self._min_insync(assignment.configs):
                count += 1
        return count

    def live_brokers(self) -> int:
        return len(self._node.membership.brokers)

    def _min_insync(self, configs: dict[str, str]) -> int:
        value = configs.get(_MIN_ISR)
        if value is None:
            return self._min_insync_default
        try:  # stored in canonical form by CreateTopic / AlterConfigs (topic_configs.py)
            return int(value)
        except ValueError:
            return self._min_insync_default
