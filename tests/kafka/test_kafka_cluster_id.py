"""The cluster id (Kafka's cluster.id) that Metadata and DescribeCluster answer: a single
server's meta.properties cluster.id; a cluster's made once in etcd by the first server
(server/cluster/cluster_id.py), the same from every server (tests/kafka/test_kafka_cluster.py
checks that on three servers).
"""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from stratalog.server.cluster.cluster_id import ensure_cluster_id
from stratalog.server.cluster.errors import ClusterConfigError
from stratalog.server.cluster.layout import ClusterKeys
from stratalog.server.cluster.node import connect
from stratalog.server.storage.meta_properties import read_meta_properties, uuid_from_kafka_string
from tests.kafka.kafka_wire import KafkaWire


def test_a_single_server_answers_its_meta_properties_cluster_id(server) -> None:
    cluster_id = read_meta_properties(server.data_dir).cluster_id
    assert cluster_id
    with KafkaWire(server.kafka_bootstrap) as wire:
        metadata = wire.call(MetadataRequest(topics=[]), MetadataResponse, 7)
        described = wire.call(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                     endpoint_type=1),
                              DescribeClusterResponse, 1)
    assert metadata.cluster_id == described.cluster_id == cluster_id


async def test_servers_joining_at_once_agree_on_one_id(etcd) -> None:
    """Four servers' first joins race: one transaction creates the key, the others read it."""
    sessions = [await connect(etcd.url, "/race", 3000) for _ in range(4)]
    try:
        keys = ClusterKeys("/race")
        ids = await asyncio.gather(*(ensure_cluster_id(s, keys) for s in sessions))
        assert len(set(ids)) == 1
        uuid_from_kafka_string(ids[0])  # a Kafka Uuid
        stored = etcd.etcdctl("get", "/race/cluster_id", "--print-value-only").strip()
        assert stored == ids[0]
        # A later server (a restart) reads it; its own candidate is not written.
        assert await ensure_cluster_id(sessions[0], keys, candidate="AAAAAAAAAAAAAAAAAAAAAQ") \
            == ids[0]
    finally:
        for session in sessions:
            await session.close()


async def test_a_value_that_is_not_a_cluster_id_is_refused_naming_the_key(etcd) -> None:
    etcd.etcdctl("put", "/bad/cluster_id", "not an id")
    session = await connect(etcd.url, "/bad", 3000)
    try:
        with pytest.raises(ClusterConfigError, match="/bad/cluster_id"):
            await ensure_cluster_id(session, ClusterKeys("/bad"))
    finally:
        await session.close()
