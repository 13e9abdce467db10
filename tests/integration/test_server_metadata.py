"""Metadata on a single server (no --cluster, no etcd): one broker, itself as node 0, the
controller (epoch 0) and the leader, only replica and ISR of every partition; through the RPC,
Client.metadata, SyncClient.metadata and `stratalog cluster describe`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from stratalog.client import (
    BrokerAddress,
    Client,
    PartitionLeadership,
    SyncClient,
    UnknownTopicOrPartitionError,
)
from stratalog.v1 import broker_pb2 as pb


def test_a_single_server_is_broker_0_controller_and_leader_of_everything(server, stub) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(name="md-two", partitions=2), timeout=30)
    stub.CreateTopic(pb.CreateTopicRequest(name="md-one", partitions=1), timeout=30)
    answer = stub.Metadata(pb.MetadataRequest(), timeout=30)
    assert answer.node_id == 0
    assert [(b.node_id, b.address) for b in answer.brokers] == [(0, server.target)]
    assert (answer.controller_id, answer.controller_epoch) == (0, 0)
    names = [t.name for t in answer.topics]
    assert names == sorted(names) and {"md-one", "md-two"} <= set(names)
    two = next(t for t in answer.topics if t.name == "md-two")
    assert [(p.partition, p.leader, list(p.replicas), list(p.isr)) for p in two.partitions] == [
        (0, 0, [0], [0]), (1, 0, [0], [0])]
    only = stub.Metadata(pb.MetadataRequest(topics=["md-one"]), timeout=30)
    assert [t.name for t in only.topics] == ["md-one"]


def test_metadata_names_an_unknown_topic(stub, rpc_error) -> None:
    error = rpc_error(stub.Metadata, pb.MetadataRequest(topics=["md-missing"]))
    assert error.reason == "UNKNOWN_TOPIC_OR_PARTITION"
    assert "md-missing" in str(error)


async def test_client_metadata(server) -> None:
    async with Client(server.target) as client:
        await client.create_topic("md-client", partitions=1)
        metadata = await client.metadata(["md-client"])
        assert metadata.brokers == (BrokerAddress(0, server.target),)
        assert metadata.controller_id == 0
        assert metadata.topics == {"md-client": (PartitionLeadership(0, 0, 0, (0,), (0,)),)}
        try:
            await client.metadata(["md-nope"])
        except UnknownTopicOrPartitionError:
            pass
        else:
            raise AssertionError("metadata of a missing topic succeeded")
    with SyncClient(server.target) as sync:
        assert sync.metadata(["md-client"]).topics == metadata.topics


def test_cli_cluster_describe(server) -> None:
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    cli = [sys.executable, "-m", "stratalog.cli", "cluster", "describe", "--target",
           server.target]
    subprocess.run([sys.executable, "-m", "stratalog.cli", "topics", "create", "md-cli",
                    "--target", server.target], check=True, capture_output=True, env=env)
    shown = subprocess.run([*cli, "--topic", "md-cli"], capture_output=True, env=env,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.decode().splitlines() == [
        "controller: node 0 (epoch 0), answered by node 0",
        "brokers:",
        f"  0  {server.target}",
        "topic md-cli",
        "  partition 0  leader 0  epoch 0  replicas [0]  isr [0]",
    ]
    as_json = subprocess.run([*cli, "--topic", "md-cli", "--format", "json"],
                             capture_output=True, env=env, timeout=120)
    document = json.loads(as_json.stdout)
    assert document["brokers"] == [{"node_id": 0, "address": server.target, "rack": ""}]
    assert document["topics"]["md-cli"][0]["replicas"] == [0]
    missing = subprocess.run([*cli, "--topic", "md-nope"], capture_output=True, env=env,
                             timeout=120)
    assert missing.returncode != 0 and b"md-nope" in missing.stderr
