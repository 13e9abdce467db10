"""The controller's work against real processes: CreateTopic with replication factors, leader
elections after kill -9, offline partitions, unclean election, a controller takeover, and a
deposed controller's write refused by etcd.

What is checked is what etcd holds (read with an etcd client) and what the servers answer
(Metadata, CreateTopic, the CLI), never a private state. Servers run with a 2 s session timeout
(conftest.py); a failover is bounded by the session timeout, a few polls and slack for this
shared machine.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import aetcd
import grpc
import pytest

from stratalog.client.errors import from_rpc_error
from stratalog.server.cluster.cluster_view import ClusterView
from stratalog.server.cluster.controller import ControllerElection
from stratalog.server.cluster.endpoints import parse_cluster_url
from stratalog.server.cluster.layout import ClusterKeys
from stratalog.server.cluster.leader_election import LeaderElector
from stratalog.server.cluster.membership import Membership
from stratalog.server.cluster.partition_state import PartitionState
from stratalog.server.cluster.session import EtcdSession
from stratalog.server.cluster.topic_admin import ADMIN_TIMEOUT_S
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.integration.conftest import CALL_TIMEOUT_S, ServerProcess

from .conftest import SESSION_TIMEOUT_MS, EtcdProcess, metadata, wait_for

#: A failover: the session timeout, a few polls (timeout / 12 each), slack for this machine.
FAILOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 * 3 + 5
KEYS = ClusterKeys("/stratalog")


def create_topic(server: ServerProcess, name: str, partitions: int, replication_factor: int,
                 configs: dict[str, str] | None = None) -> pb.CreateTopicResponse:
    with grpc.insecure_channel(server.target) as channel:
        return broker_pb2_grpc.BrokerStub(channel).CreateTopic(
            pb.CreateTopicRequest(name=name, partitions=partitions, configs=configs or {},
                                  replication_factor=replication_factor),
            timeout=ADMIN_TIMEOUT_S + CALL_TIMEOUT_S,
        )


def refused(server: ServerProcess, name: str, partitions: int, replication_factor: int,
            configs: dict[str, str] | None = None):
    with pytest.raises(grpc.RpcError) as caught:
        create_topic(server, name, partitions, replication_factor, configs)
    return from_rpc_error(caught.value)


def etcd_records(etcd: EtcdProcess, topic: str) -> tuple[dict, dict[int, PartitionState]]:
    """The topic's assignment (JSON) and partition states as etcd holds them."""

    async def read() -> tuple[dict, dict[int, PartitionState]]:
        async with aetcd.Client(port=etcd.client_port) as client:
            assignment = await client.get(KEYS.topic(topic))
            states = await client.get_prefix(KEYS.topic_partitions_prefix(topic))
            return (json.loads(assignment.value) if assignment else {},
                    {KEYS.parse_partition_key(kv.key)[1]: PartitionState.decode(kv.value)
                     for kv in states})

    return asyncio.run(read())


def partitions_of(server: ServerProcess, topic: str) -> dict[int, pb.PartitionMetadata]:
    answer = metadata(server)
    return {p.partition: p for t in answer.topics if t.name == topic for p in t.partitions}


def as_tuple(p: pb.PartitionMetadata) -> tuple:
    return p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr)


def test_create_topic_writes_etcd_and_every_server_agrees(start_member, etcd, tmp_path) -> None:
    # Server 3 has a default replication factor of its own; the others keep theirs (0).
    servers = [start_member(1), start_member(2),
               start_member(3, "--default-replication-factor", "2")]
    wait_for(lambda: all([b.node_id for b in metadata(s).brokers] == [1, 2, 3] for s in servers),
             "3 brokers everywhere")
    answer = create_topic(servers[0], "orders", 3, 3, {"retention.ms": "60000"})
    assert [p.partition for p in answer.topic.partitions] == [0, 1, 2]
    assert answer.topic.configs["retention.ms"] == "60000"
    assert list(answer.topic.overridden_configs) == ["retention.ms"]

    assignment, states = etcd_records(etcd, "orders")
    assert assignment["configs"] == {"retention.ms": "60000"}
    replicas = {int(p): tuple(nodes) for p, nodes in assignment["partitions"].items()}
    assert sorted(replicas) == [0, 1, 2]
    for nodes in replicas.values():
        assert sorted(nodes) == [1, 2, 3]
    # Round robin: each broker leads (is the first replica of) one partition.
    assert sorted(nodes[0] for nodes in replicas.values()) == [1, 2, 3]
    assert states == {p: PartitionState(nodes[0], 0, nodes, 0) for p, nodes in replicas.items()}
    expected = {p: (nodes[0], 0, nodes, nodes) for p, nodes in replicas.items()}
    wait_for(lambda: all({p: as_tuple(m) for p, m in partitions_of(s, "orders").items()}
                         == expected for s in servers), "Metadata from every server = etcd")

    # DescribeTopic and ListTopics on another server: the cluster's topic, its configs.
    with grpc.insecure_channel(servers[1].target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        described = stub.DescribeTopic(pb.DescribeTopicRequest(name="orders"),
                                       timeout=CALL_TIMEOUT_S).topic
        listed = stub.ListTopics(pb.ListTopicsRequest(), timeout=CALL_TIMEOUT_S).topics
    assert [p.partition for p in described.partitions] == [0, 1, 2]
    assert described.configs["retention.ms"] == "60000"
    assert described.configs["unclean.leader.election.enable"] == "false"
    assert [t.name for t in listed] == ["orders"]

    # More partitions than etcd's 128 operations per transaction: every first state written.
    create_topic(servers[0], "many", 130, 1)
    assignment, states = etcd_records(etcd, "many")
    assert len(assignment["partitions"]) == 130 and sorted(states) == list(range(130))
    assert all(states[p] == PartitionState(nodes[0], 0, tuple(nodes), 0)
               for p, nodes in ((int(k), v) for k, v in assignment["partitions"].items()))
    with grpc.insecure_channel(servers[0].target) as channel:
        broker_pb2_grpc.BrokerStub(channel).DeleteTopic(pb.DeleteTopicRequest(name="many"),
                                                        timeout=ADMIN_TIMEOUT_S + CALL_TIMEOUT_S)

    # Refused with the reason and both numbers; nothing written.
    error = refused(servers[1], "wide", 1, 4)
    assert error.reason == "INVALID_REPLICATION_FACTOR" and error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "replication factor 4" in error.message and "3 live broker(s)" in error.message
    error = refused(servers[1], "negative", 1, -1)
    assert error.reason == "INVALID_REPLICATION_FACTOR" and "got -1" in error.message
    assert refused(servers[2], "orders", 1, 1).reason == "TOPIC_ALREADY_EXISTS"
    assert refused(servers[2], "bad/name", 1, 1).reason == "INVALID_TOPIC"
    error = refused(servers[2], "badconfig", 1, 1, {"segment.bytes": "1"})
    assert error.reason == "INVALID_CONFIG" and "segment.bytes" in error.message
    assert etcd_records(etcd, "wide") == ({}, {}) and etcd_records(etcd, "negative") == ({}, {})

    # Replication factor 0: the server's default_replication_factor. Its own default (0) is
    # min(3, live brokers): three replicas per partition here; server 3's setting is 2.
    create_topic(servers[0], "triple", 2, 0)
    assignment, _ = etcd_records(etcd, "triple")
    assert all(sorted(nodes) == [1, 2, 3] for nodes in assignment["partitions"].values())
    answer = create_topic(servers[2], "double", 2, 0)
    assignment, _ = etcd_records(etcd, "double")
    assert all(len(set(nodes)) == 2 for nodes in assignment["partitions"].values())

    # The CLI: create with --replication-factor, describe shows leader, replicas and ISR.
    cli = [sys.executable, "-m", "stratalog.cli", "--target", servers[1].target]
    created = subprocess.run([*cli, "topics", "create", "events", "--partitions", "2",
                              "--replication-factor", "2"], capture_output=True, text=True,
                             timeout=60)
    assert created.returncode == 0, created.stderr
    assert created.stdout == "Created topic events with 2 partition(s), replication factor 2.\n"
    wait_for(lambda: len(partitions_of(servers[1], "events")) == 2, "events in the view")
    described = subprocess.run([*cli, "topics", "describe", "events"], capture_output=True,
                               text=True, timeout=60)
    assert described.returncode == 0, described.stderr
    for number, p in partitions_of(servers[1], "events").items():
        line = next(line for line in described.stdout.splitlines()
                    if f"Partition: {number}\t" in line)
        assert f"Leader: {p.leader}" in line
        assert "Replicas: " + ",".join(map(str, p.replicas)) in line
        assert "Isr: " + ",".join(map(str, p.isr)) in line
    wide = subprocess.run([*cli, "topics", "create", "x", "--replication-factor", "9"],
                          capture_output=True, text=True, timeout=60)
    assert wide.returncode != 0 and "replication factor 9" in wide.stderr

    # DeleteTopic: etcd forgets the topic and its partition states.
    with grpc.insecure_channel(servers[0].target) as channel:
        broker_pb2_grpc.BrokerStub(channel).DeleteTopic(pb.DeleteTopicRequest(name="double"),
                                                        timeout=ADMIN_TIMEOUT_S + CALL_TIMEOUT_S)
    assert etcd_records(etcd, "double") == ({}, {})

    # Producer ids: the node id above each server's own counter, so never the same twice in
    # the cluster (transactions in a cluster: tests/cluster/test_transactions_cluster.py).
    ids = []
    for server in servers:
        with grpc.insecure_channel(server.target) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            for _ in range(2):
                ids.append(stub.InitProducerId(pb.InitProducerIdRequest(),
                                               timeout=CALL_TIMEOUT_S).producer_id)
    assert len(set(ids)) == 6
    assert [producer_id >> 40 for producer_id in ids] == [1, 1, 2, 2, 3, 3]

    # etcd stopped: CreateTopic fails soon, saying it needs etcd.
    etcd.stop()
    started = time.monotonic()
    error = refused(servers[0], "later", 1, 1)
    took_s = time.monotonic() - started
    assert error.reason == "COORDINATION_UNAVAILABLE" and error.code == grpc.StatusCode.UNAVAILABLE
    assert "CreateTopic needs etcd" in error.message
    assert took_s < ADMIN_TIMEOUT_S + 2


def partition_within(server: ServerProcess, topic: str, nodes: set[int]) -> int:
    """The number of a partition of ``topic`` whose replicas are all in ``nodes``."""
    return next(number for number, p in partitions_of(server, topic).items()
                if set(p.replicas) <= nodes)


def test_leaders_are_elected_from_the_isr_and_offline_partitions_wait_for_it(start_member) -> None:
    # Node 1 first, so that it is the controller; 2 and 3 hold the partitions under test, so
    # that both can die while the controller lives.
    controller = start_member(1)
    wait_for(lambda: metadata(controller).controller_id == 1, "node 1 controller")
    servers = {1: controller, 2: start_member(2), 3: start_member(3)}
    wait_for(lambda: [b.node_id for b in metadata(controller).brokers] == [1, 2, 3], "3 brokers")
    create_topic(controller, "clean", 3, 2)
    create_topic(controller, "unclean", 3, 2, {"unclean.leader.election.enable": "true"})
    wait_for(lambda: len(partitions_of(controller, "unclean")) == 3, "both topics in the view")
    clean = partition_within(controller, "clean", {2, 3})
    dirty = partition_within(controller, "unclean", {2, 3})

    def state(topic: str, number: int) -> pb.PartitionMetadata:
        return partitions_of(controller, topic)[number]

    first = state("clean", clean)
    first_leader, survivor = first.replicas
    servers[first_leader].kill()
    took_s = wait_for(lambda: state("clean", clean).leader == survivor,
                      f"node {survivor} elected after kill -9 of {first_leader}",
                      timeout_s=FAILOVER_BOUND_S)
    assert took_s < FAILOVER_BOUND_S
    after = state("clean", clean)
    assert after.leader_epoch == first.leader_epoch + 1
    assert list(after.isr) == [survivor]  # the dead leader is out of the ISR
    # The other topic's partition on the same two nodes lost the dead node from its ISR too
    # (a new leader if it led, otherwise an ISR shrink at the same epoch).
    wait_for(lambda: list(state("unclean", dirty).isr) == [survivor], "dead node out of ISR")
    assert state("unclean", dirty).leader == survivor

    # The last in-sync replica dies: both partitions go offline; the ISR names it still.
    servers[survivor].kill()
    wait_for(lambda: state("clean", clean).leader == -1 and state("unclean", dirty).leader == -1,
             "both partitions offline", timeout_s=FAILOVER_BOUND_S)
    offline = state("clean", clean)
    assert offline.leader_epoch == first.leader_epoch + 2 and list(offline.isr) == [survivor]

    # The node outside the ISR comes back: the unclean topic elects it at once, the clean one
    # stays offline (it would lose what only the survivor has).
    servers[first_leader] = start_member(first_leader, data_dir=servers[first_leader].data_dir)
    wait_for(lambda: state("unclean", dirty).leader == first_leader,
             "unclean election of the returning node", timeout_s=FAILOVER_BOUND_S)
    assert list(state("unclean", dirty).isr) == [first_leader]
    assert state("clean", clean).leader == -1  # several passes ran since: still offline

    # The last in-sync replica comes back: elected.
    servers[survivor] = start_member(survivor, data_dir=servers[survivor].data_dir)
    wait_for(lambda: state("clean", clean).leader == survivor, "the ISR member elected again",
             timeout_s=FAILOVER_BOUND_S)
    assert state("clean", clean).leader_epoch == first.leader_epoch + 3
    assert "elected node" in controller.log_text()


def test_a_new_controller_takes_over_the_elections(start_member) -> None:
    servers = {node_id: start_member(node_id) for node_id in (1, 2, 3)}
    wait_for(lambda: all([b.node_id for b in metadata(s).brokers] == [1, 2, 3]
                         for s in servers.values()), "3 brokers everywhere")
    wait_for(lambda: len({metadata(s).controller_id for s in servers.values()} - {-1}) == 1
             and metadata(servers[1]).controller_id > 0, "one controller")
    create_topic(servers[1], "t", 3, 3)
    wait_for(lambda: all(len(partitions_of(s, "t")) == 3 for s in servers.values()),
             "t in every view")
    old = metadata(servers[1]).controller_id
    # Every broker leads one partition: the controller's partition needs a new leader, which
    # only the next controller can elect (at once, on winning).
    led = next(n for n, p in partitions_of(servers[1], "t").items() if p.leader == old)
    before = partitions_of(servers[1], "t")[led]
    servers.pop(old).kill()
    survivor = next(iter(servers.values()))
    wait_for(lambda: partitions_of(survivor, "t")[led].leader in servers,
             "a leader elected by the new controller", timeout_s=FAILOVER_BOUND_S)
    after = partitions_of(survivor, "t")[led]
    assert after.leader_epoch == before.leader_epoch + 1 and old not in after.isr
    new = metadata(survivor).controller_id
    assert new in servers
    # And it goes on electing: kill the leader of another partition that the new controller
    # does not lead.
    other, victim = next((n, p.leader) for n, p in partitions_of(survivor, "t").items()
                         if p.leader in servers and p.leader != new)
    servers.pop(victim).kill()
    controller = servers[new]
    wait_for(lambda: partitions_of(controller, "t")[other].leader == new,
             "the last live replica elected", timeout_s=FAILOVER_BOUND_S)


async def test_a_deposed_controllers_write_is_refused_by_etcd(etcd) -> None:
    endpoints = parse_cluster_url(etcd.url)
    first = await EtcdSession.open(endpoints, SESSION_TIMEOUT_MS)
    second = await EtcdSession.open(endpoints, SESSION_TIMEOUT_MS)
    try:
        async def duties(session: EtcdSession, node_id: int) -> tuple[ControllerElection,
                                                                      LeaderElector]:
            election = ControllerElection(session, KEYS, node_id, 0.1)
            membership = Membership(session, KEYS, node_id, f"127.0.0.1:{node_id}", 0.1)
            view = ClusterView(session, KEYS, 0.1)
            return election, LeaderElector(session, KEYS, election, membership, view, 0.1,
                                           False)

        old_election, old_elector = await duties(first, 1)
        assert (await old_election.maybe_campaign()).epoch == 1
        client = first.client
        await client.put(KEYS.topic("t"), b'{"partitions": {"0": [1, 2]}, "configs": {}}')
        await client.put(KEYS.partition("t", 0), PartitionState(1, 0, (1, 2)).encode())
        revision = (await client.get(KEYS.partition("t", 0))).mod_revision
        # The controller is deposed (its key deleted, as its lease expiring would), and
        # another wins the next election.
        await client.delete(KEYS.controller)
        new_election, new_elector = await duties(second, 2)
        assert (await new_election.maybe_campaign()).epoch == 2
        # The old one, not knowing yet, writes with its epoch and the current revision: refused.
        stale = PartitionState(2, 1, (2,), 1)
        assert not await old_elector.write_state("t", 0, stale, revision, 1)
        assert PartitionState.decode((await client.get(KEYS.partition("t", 0))).value) == \
            PartitionState(1, 0, (1, 2))
        # The new one writes; a write against the revision it replaced is refused next.
        fresh = PartitionState(2, 1, (2,), 2)
        assert await new_elector.write_state("t", 0, fresh, revision, 2)
        assert not await new_elector.write_state("t", 0, PartitionState(1, 2, (1,), 2),
                                                 revision, 2)
        assert PartitionState.decode((await client.get(KEYS.partition("t", 0))).value) == fresh
        # A pass of the deposed one does nothing at all.
        assert await old_elector.maybe_run_pass() == 0
        # The current one's pass: t-0's leader (2) is not a live broker (none registered
        # here) and no ISR member lives: offline. A topic whose creation stopped before its
        # partition states were written gets its first ones.
        second.start()  # keep its lease held: a controller acts only while it is
        await client.put(KEYS.topic("half"), b'{"partitions": {"0": [2, 1], "1": [1, 2]}}')
        assert await new_elector.maybe_run_pass() == 3
        stored = {KEYS.parse_partition_key(kv.key): PartitionState.decode(kv.value)
                  for kv in await client.get_prefix(KEYS.partitions_prefix)}
        assert stored == {
            ("t", 0): PartitionState(-1, 2, (2,), 2),
            ("half", 0): PartitionState(2, 0, (2, 1), 2),
            ("half", 1): PartitionState(1, 0, (1, 2), 2),
        }
    finally:
        await first.close()
        await second.close()


def test_auto_creation_goes_through_etcd_and_create_partitions_grows_it(start_member,
                                                                         etcd) -> None:
    """Issue 25: a Metadata that allows auto-creation creates the topic as CreateTopic does in a
    cluster (etcd, the default replication factor); issue 29: CreatePartitions grows it in etcd,
    and a count not above the topic's is refused, nothing changed."""
    servers = [start_member(node_id, "--num-partitions", "2") for node_id in (1, 2)]
    wait_for(lambda: all([b.node_id for b in metadata(s).brokers] == [1, 2] for s in servers),
             "2 brokers everywhere")
    with grpc.insecure_channel(servers[0].target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        answer = stub.Metadata(pb.MetadataRequest(topics=["auto"], allow_auto_topic_creation=True),
                               timeout=ADMIN_TIMEOUT_S + CALL_TIMEOUT_S)
        assert [(t.name, len(t.partitions)) for t in answer.topics] == [("auto", 2)]
        assignment, _ = etcd_records(etcd, "auto")
        assert sorted(assignment["partitions"]) == ["0", "1"]
        with pytest.raises(grpc.RpcError) as caught:
            stub.CreatePartitions(pb.CreatePartitionsRequest(name="auto", count=2),
                                  timeout=CALL_TIMEOUT_S)
        error = from_rpc_error(caught.value)
        assert "has 2 partitions and cannot have 2" in str(error)
        assert sorted(etcd_records(etcd, "auto")[0]["partitions"]) == ["0", "1"]
        grown = stub.CreatePartitions(pb.CreatePartitionsRequest(name="auto", count=3),
                                      timeout=ADMIN_TIMEOUT_S + CALL_TIMEOUT_S)
    assert [p.partition for p in grown.topic.partitions] == [0, 1, 2]
    assignment, states = etcd_records(etcd, "auto")
    assert sorted(assignment["partitions"]) == ["0", "1", "2"]
    assert sorted(states) == [0, 1, 2]
