"""etcd watches drive the cluster (server/cluster/watches.py, node.py; docs/cluster.md,
"Watches"): with the fallback polls set to ten minutes, longer than any wait here, every change
below reaches the other servers through their watches alone — brokers joining, a topic created
through another server, a controller killed (-9) and replaced, a partition leader killed and
replaced and serving — and each server keeps one etcd watch stream per watched key or range
(three), however many changes and re-creations there were."""

from __future__ import annotations

import re
import urllib.request

import grpc

from stratalog.client import SyncClient
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.integration.conftest import CALL_TIMEOUT_S, ServerProcess

from .conftest import EtcdProcess, metadata, wait_for

#: Longer than any wait of these tests: what happens, happens through a watch.
NO_POLL_FLAGS = ("--cluster-poll-fallback-ms", "600000")
#: The watches of one server (node.py): brokers, controller, the view's (topics and partitions).
WATCHES_PER_SERVER = 3
TOPIC = "watched"


def etcd_watchers(etcd: EtcdProcess) -> int:
    """The watchers etcd holds now (its ``etcd_debugging_mvcc_watcher_total`` gauge)."""
    with urllib.request.urlopen(f"{etcd.client_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(r"^etcd_debugging_mvcc_watcher_total (\S+)$", text, re.MULTILINE)
    assert match is not None, "etcd exports no etcd_debugging_mvcc_watcher_total"
    return int(float(match.group(1)))


def create_topic(server: ServerProcess, partitions: int, replication_factor: int) -> None:
    with grpc.insecure_channel(server.target) as channel:
        broker_pb2_grpc.BrokerStub(channel).CreateTopic(pb.CreateTopicRequest(
            name=TOPIC, partitions=partitions, replication_factor=replication_factor,
        ), timeout=CALL_TIMEOUT_S)


def view(server: ServerProcess) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch) of TOPIC in ``server``'s view; {} when unknown."""
    try:
        answer = metadata(server, TOPIC)
    except grpc.RpcError:
        return {}
    if not answer.topics:
        return {}
    return {p.partition: (p.leader, p.leader_epoch) for p in answer.topics[0].partitions}


def test_without_polls_joins_topics_and_takeovers_reach_every_server(
        start_member, etcd: EtcdProcess) -> None:
    servers = {node: start_member(node, *NO_POLL_FLAGS) for node in (1, 2, 3)}
    # Node 1 read the broker list before 2 and 3 registered: only its watch tells it.
    wait_for(lambda: all(len(metadata(s).brokers) == 3 for s in servers.values()),
             "every server sees three brokers")
    wait_for(lambda: etcd_watchers(etcd) == 3 * WATCHES_PER_SERVER,
             "three watches per server")
    create_topic(servers[1], partitions=3, replication_factor=3)
    wait_for(lambda: all(len(view(s)) == 3 for s in servers.values()),
             "servers 2 and 3 see the topic node 1 created")

    # The controller, killed: the others see its key go and one campaigns.
    old = metadata(servers[1])
    servers[old.controller_id].kill()
    survivors = {n: s for n, s in servers.items() if n != old.controller_id}

    def new_controller() -> bool:
        answers = [metadata(s) for s in survivors.values()]
        return all(a.controller_id not in (-1, old.controller_id)
                   and a.controller_epoch > old.controller_epoch for a in answers)

    wait_for(new_controller, "a new controller in every survivor's view")

    # A leader that is not the controller, killed: the controller sees its broker key go,
    # elects, and the last survivor's view (its watch of the partitions) makes it leader.
    controller_id = metadata(next(iter(survivors.values()))).controller_id
    leader_id = next(n for n in survivors if n != controller_id)
    wait_for(lambda: any(leader == leader_id for leader, _ in view(survivors[leader_id]).values()),
             f"node {leader_id} leads a partition")
    before = view(survivors[leader_id])
    partition = next(p for p, (leader, _) in before.items() if leader == leader_id)
    survivors[leader_id].kill()
    last = survivors[controller_id]
    wait_for(lambda: view(last).get(partition, (-1, 0))[0] == controller_id
             and view(last)[partition][1] > before[partition][1],
             f"node {controller_id} leads partition {partition}")
    with SyncClient(last.target, timeout_s=10) as client:
        client.produce(TOPIC, partition, [b"served after the takeover"], acks=1)

    # etcd dropped the killed servers' streams; the survivor kept its three.
    wait_for(lambda: etcd_watchers(etcd) == WATCHES_PER_SERVER,
             "the survivor's three watches, nothing leaked")


def test_polls_alone_still_follow_etcd(start_member) -> None:
    flags = ("--cluster-watches-enable", "false", "--cluster-poll-fallback-ms", "200")
    servers = {node: start_member(node, *flags) for node in (1, 2)}
    wait_for(lambda: all(len(metadata(s).brokers) == 2 for s in servers.values()),
             "both servers see two brokers (by their polls)")
    create_topic(servers[1], partitions=1, replication_factor=2)
    wait_for(lambda: len(view(servers[2])) == 1, "server 2 sees the topic")
