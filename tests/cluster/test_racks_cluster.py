"""Rack-aware placement (issue 29) against etcd and real servers on 127.0.0.1.

* Four servers on two racks: every partition of an RF=2 topic (and of the partitions added to
  it) has a replica on each rack, and an RF=3 topic's partitions use both racks; leaders spread
  over all four servers. The racks are shown by gRPC Metadata, the Kafka listener's Metadata
  and DescribeCluster (confluent-kafka's AdminClient) and ``stratalog cluster describe``.
* Racks on some servers only: a topic is refused with INVALID_REPLICATION_FACTOR naming them.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import grpc
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka.protocol.admin import DescribeClusterRequest
from kafka.protocol.metadata import MetadataRequest

from stratalog.client.errors import from_rpc_error
from tests.cluster.conftest import metadata, wait_for
from tests.cluster.test_controller import create_topic, etcd_records
from tests.integration.conftest import ServerProcess
from tests.kafka.kafka_wire import KafkaWire, ask

RACKS = {1: "rack-a", 2: "rack-a", 3: "rack-b", 4: "rack-b"}


def _replicas(etcd, topic: str) -> dict[int, tuple[int, ...]]:
    assignment, _ = etcd_records(etcd, topic)
    return {int(p): tuple(nodes) for p, nodes in assignment["partitions"].items()}


def test_replicas_spread_over_racks_and_racks_are_shown(start_member, etcd) -> None:
    servers: dict[int, ServerProcess] = {
        node: start_member(node, "--broker-rack", rack) for node, rack in RACKS.items()}
    wait_for(lambda: all(len(metadata(s).brokers) == 4 for s in servers.values()),
             "four brokers seen by every server")

    assert {b.node_id: b.rack for b in metadata(servers[2]).brokers} == RACKS
    described = subprocess.run(
        [sys.executable, "-m", "stratalog.cli", "--target", servers[1].target, "cluster",
         "describe"], capture_output=True, text=True, timeout=60)
    assert described.returncode == 0, described.stderr
    for node, rack in RACKS.items():
        assert f"  {node}  {servers[node].target}  rack {rack}" in described.stdout
    # The Kafka listener (kafka-python's classes on the wire, and librdkafka's AdminClient
    # below; confluent-kafka 2.16's describe_cluster crashed the process while a cluster
    # answered a null cluster id).
    with KafkaWire(servers[3].kafka_bootstrap) as wire:
        cluster = ask(wire, DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                   endpoint_type=1), 1)
        answer = ask(wire, MetadataRequest(topics=[], allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False), 12)
    assert {b.broker_id: b.rack for b in cluster.brokers} == RACKS
    assert {b.node_id: b.rack for b in answer.brokers} == RACKS
    admin = AdminClient({"bootstrap.servers": servers[3].kafka_bootstrap})
    described = admin.describe_cluster().result(30)
    assert {node.id: node.rack for node in described.nodes} == RACKS
    assert described.cluster_id == cluster.cluster_id

    two = f"r2-{uuid.uuid4().hex[:6]}"
    create_topic(servers[1], two, 8, 2)
    replicas = _replicas(etcd, two)
    assert all({RACKS[n] for n in nodes} == {"rack-a", "rack-b"} for nodes in replicas.values())
    assert sorted(nodes[0] for nodes in replicas.values()) == [1, 1, 2, 2, 3, 3, 4, 4]

    admin.create_partitions([NewPartitions(two, 12)])[two].result(30)
    grown = _replicas(etcd, two)
    assert {p: grown[p] for p in replicas} == replicas
    assert all({RACKS[n] for n in grown[p]} == {"rack-a", "rack-b"} for p in range(8, 12))

    three = f"r3-{uuid.uuid4().hex[:6]}"
    create_topic(servers[4], three, 4, 3)
    for nodes in _replicas(etcd, three).values():
        assert len(set(nodes)) == 3 and {RACKS[n] for n in nodes} == {"rack-a", "rack-b"}


def test_racks_on_some_servers_only_are_refused(start_member, etcd) -> None:
    servers = [start_member(1, "--broker-rack", "rack-a"), start_member(2)]
    wait_for(lambda: all(len(metadata(s).brokers) == 2 for s in servers), "two brokers")
    with pytest.raises(grpc.RpcError) as caught:
        create_topic(servers[1], "mixed", 1, 1)
    error = from_rpc_error(caught.value)
    assert error.reason == "INVALID_REPLICATION_FACTOR"
    assert "brokers [1] have a rack (broker_rack) and brokers [2] have none" in str(error)
    assert etcd_records(etcd, "mixed") == ({}, {})
