"""etcd wiped under a running cluster (etcd and two real servers): the servers keep their
view and their logs, say so, and apply the view again once the cluster's keys are back
(server/cluster/cluster_view.py). Without the guard an empty view reads as every topic
deleted, and each server would delete its copy."""

from __future__ import annotations

from pathlib import Path

import grpc

from .conftest import EtcdProcess, wait_for
from .test_replication import create_topic, fetch, produce_when_ready, values

LOST = "etcd no longer holds this cluster"


def test_a_wiped_etcd_deletes_nothing(etcd: EtcdProcess, start_member, tmp_path: Path) -> None:
    servers = {n: start_member(n) for n in (1, 2)}
    create_topic(etcd, "kept", [1, 2])
    produce_when_ready(servers[1], "kept", [b"a", b"b"])
    saved = etcd.etcdctl("get", "--prefix", "/stratalog/cluster_id", "--print-value-only").strip()
    assert saved

    etcd.etcdctl("del", "--prefix", "/stratalog")
    wait_for(lambda: all(LOST in s.log_text() for s in servers.values()),
             "both servers noticed that etcd lost the cluster")
    assert values(fetch(servers[1], "kept")) == [b"a", b"b"]  # the last view's leader
    for node in (1, 2):
        assert (tmp_path / f"node-{node}" / "kept-0").is_dir(), f"node {node} deleted its log"

    # The servers registered again (their keys were gone under live leases).
    wait_for(lambda: all("registering again" in s.log_text() for s in servers.values()),
             "both servers registered again")
    # The keys restored (a backup): the view applies again; the topic is still served.
    etcd.etcdctl("put", "/stratalog/cluster_id", saved)
    create_topic(etcd, "kept", [1, 2])
    wait_for(lambda: all("applied again" in s.log_text() for s in servers.values()),
             "both servers apply the view again")
    wait_for(lambda: served(servers[1]) == [b"a", b"b"], "the topic served again")
    produce_when_ready(servers[1], "kept", [b"c"])
    assert values(fetch(servers[1], "kept")) == [b"a", b"b", b"c"]


def served(server) -> list[bytes] | None:
    try:
        return values(fetch(server, "kept"))
    except grpc.RpcError:
        return None
