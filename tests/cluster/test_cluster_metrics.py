"""The cluster's health gauges (server/cluster/cluster_metrics.py) on etcd and three real
servers: one active controller in the whole cluster, the live brokers, a partition under its
min.insync.replicas on its leader, and a partition whose only replica died counted offline by
the controller alone."""

from __future__ import annotations

from tests.integration.conftest import ServerProcess

from .conftest import wait_for
from .test_replication import LAG_FLAGS, create_topic, produce_when_ready, read_state


def gauges(servers: dict[int, ServerProcess], name: str) -> dict[int, float]:
    return {node: server.metric(name) for node, server in servers.items()}


def test_controller_brokers_under_min_isr_and_offline_partitions(etcd, start_member) -> None:
    servers = {n: start_member(n, *LAG_FLAGS) for n in (1, 2, 3)}
    wait_for(lambda: set(gauges(servers, "stratalog_live_brokers").values()) == {3},
             "every server sees three live brokers")
    wait_for(lambda: sum(gauges(servers, "stratalog_active_controller").values()) == 1,
             "exactly one controller")
    assert sum(gauges(servers, "stratalog_offline_partitions").values()) == 0

    create_topic(etcd, "guarded", [1, 2], {"min.insync.replicas": "2"})
    create_topic(etcd, "lonely", [3])
    produce_when_ready(servers[1], "guarded", [b"a"])
    produce_when_ready(servers[3], "lonely", [b"a"], acks=1)
    assert gauges(servers, "stratalog_under_min_isr_partitions") == {1: 0, 2: 0, 3: 0}

    # The follower of "guarded" dies: its leader drops it from the ISR, under min ISR now.
    servers.pop(2).kill()
    wait_for(lambda: read_state(etcd, "guarded", 0).isr == (1,), "node 2 out of the ISR")
    wait_for(lambda: servers[1].metric("stratalog_under_min_isr_partitions") == 1,
             "guarded counted under its min ISR on its leader")
    wait_for(lambda: set(gauges(servers, "stratalog_live_brokers").values()) == {2},
             "node 2 gone from every server's broker list")

    # The only replica of "lonely" dies: offline, counted once, by the controller.
    servers.pop(3).kill()
    wait_for(lambda: servers[1].metric("stratalog_active_controller") == 1,
             "node 1 is the controller (the only server left)")
    wait_for(lambda: servers[1].metric("stratalog_offline_partitions") == 1,
             "lonely counted offline by the controller")
    assert servers[1].metric("stratalog_under_min_isr_partitions") == 1
