"""A topic's configs altered in a cluster: etcd and three real servers on 127.0.0.1.

The overrides live with the topic's assignment in etcd (server/cluster/topic_configs.py): an
alteration on any server, through either front end, reaches every replica's own catalogue
(what its rolls, retention and validation follow), a server that was down when it happened
applies it when it comes back, and validate_only writes nothing.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient

from stratalog.server.storage.topic_catalog import read_catalog
from stratalog.v1 import broker_pb2 as pb
from tests.integration.conftest import CALL_TIMEOUT_S, ServerProcess

from .conftest import metadata, wait_for
from .test_faults import MEMBER_FLAGS, create_topic, stub

TOPIC = "cluster-configs"


def catalog_overrides(data_dir: Path) -> dict[str, str] | None:
    """The overrides of :data:`TOPIC` in the catalogue a server wrote; None if it holds none."""
    entry = read_catalog([data_dir]).topics.get(TOPIC)
    return dict(entry.configs) if entry is not None else None


def alter(server: ServerProcess, set: dict[str, str],
          delete: tuple[str, ...] = ()) -> pb.TopicDescription:
    channel, broker = stub(server)
    with channel:
        return broker.AlterTopicConfigs(pb.AlterTopicConfigsRequest(
            name=TOPIC, set=set, delete=list(delete)), timeout=CALL_TIMEOUT_S).topic


def test_an_alteration_reaches_every_replica_and_a_server_that_was_down(
        start_member, tmp_path: Path) -> None:
    servers = [start_member(node, *MEMBER_FLAGS) for node in (1, 2, 3)]
    dirs = [tmp_path / f"node-{node}" for node in (1, 2, 3)]
    create_topic(servers[0], TOPIC, partitions=2)
    wait_for(lambda: all(catalog_overrides(d) is not None for d in dirs),
             "every replica created the topic")

    # Through gRPC on a server that did not create the topic.
    topic = alter(servers[1], {"max.message.bytes": "2000", "retention.ms": "3600000"})
    configs = dict(topic.configs)
    assert configs["max.message.bytes"] == "2000" and configs["retention.ms"] == "3600000"
    assert {"max.message.bytes", "retention.ms", "min.insync.replicas"} <= set(
        topic.overridden_configs)
    wanted = {"max.message.bytes": "2000", "retention.ms": "3600000",
              "min.insync.replicas": "2"}
    wait_for(lambda: all(catalog_overrides(d) == wanted for d in dirs),
             "every replica applied the alteration")

    # A bad value is refused as a single server refuses it, and nothing changes.
    with pytest.raises(grpc.RpcError) as refused:
        alter(servers[2], {"retention.ms": "soon"})
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "retention.ms" in (refused.value.details() or "")
    with pytest.raises(grpc.RpcError) as unknown:
        alter(servers[2], {}, ("no.such.config",))
    assert "no.such.config" in (unknown.value.details() or "")

    # Server 3 down; the Kafka listener of server 1 deletes one override, sets another.
    servers[2].kill()
    # (Its lease expires first: a Kafka client would try the broker Metadata still lists.)
    wait_for(lambda: len(metadata(servers[0]).brokers) == 2, "server 3 left the membership")
    admin = KafkaAdminClient(bootstrap_servers=servers[0].kafka_bootstrap,
                             request_timeout_ms=int(CALL_TIMEOUT_S * 1000))
    try:
        # IncrementalAlterConfigs: max.message.bytes back to the default, retention.ms set.
        resource = ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs={
            "max.message.bytes": (AlterConfigOp.DELETE, None), "retention.ms": "7200000"})
        answer = admin.alter_configs([resource], validate_only=True, incremental=True)
        assert answer == {"topic": {TOPIC: "OK"}}, answer
        assert catalog_overrides(dirs[0]) == wanted  # validate_only wrote nothing
        answer = admin.alter_configs([resource], incremental=True)
        assert answer == {"topic": {TOPIC: "OK"}}, answer
    finally:
        admin.close()
    after = {"retention.ms": "7200000", "min.insync.replicas": "2"}
    wait_for(lambda: all(catalog_overrides(d) == after for d in dirs[:2]),
             "the live replicas applied the second alteration")
    assert catalog_overrides(dirs[2]) == wanted  # down: still the old ones on its disk

    start_member(3, *MEMBER_FLAGS)
    wait_for(lambda: catalog_overrides(dirs[2]) == after,
             "the restarted server applied what changed while it was down")
