"""Preferred-leader election (issue 29) against etcd and three real servers on 127.0.0.1.

* Automatic: under a librdkafka producer (acks=all, idempotent, min.insync.replicas 2) the
  servers are restarted one after the other; each restart moves its partitions' leadership
  away, and with ``leader_imbalance_check_interval_seconds`` 1 the controller moves it back to
  the preferred replica once that replica is in sync again. Every acknowledged record is read
  back once, none failed: the moves are clean.
* Leaders all bunched on one server (the two others stopped, then started again) are spread
  over the three again within a few check intervals.
* On demand, with the automatic rebalance off: after a restart the leadership stays where the
  failover put it; ``stratalog topics elect-leaders`` moves it back (an epoch bump), says "not
  needed" when asked again; a preferred replica that is down is PREFERRED_LEADER_NOT_AVAILABLE;
  confluent-kafka's AdminClient.elect_leaders (Kafka's ElectLeaders) does the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.cluster.conftest import AcksAllLoad, metadata, read_back, wait_for
from tests.cluster.test_controller import etcd_records
from tests.cluster.test_faults import FAILOVER_BOUND_S, MEMBER_FLAGS, create_topic
from tests.integration.conftest import ServerProcess, launch_server

#: Records the background producer sends at most (a bound, not a target).
RECORDS_MAX = 40_000
#: The automatic check's interval in these tests (the default is 300 s).
CHECK_INTERVAL_S = 1


def _partitions(server: ServerProcess, topic: str) -> dict:
    return {p.partition: p for t in metadata(server).topics if t.name == topic
            for p in t.partitions}


def _leaders(server: ServerProcess, topic: str) -> dict[int, int]:
    return {number: p.leader for number, p in _partitions(server, topic).items()}


def _preferred(etcd, topic: str) -> dict[int, int]:
    assignment, _ = etcd_records(etcd, topic)
    return {int(p): nodes[0] for p, nodes in assignment["partitions"].items()}


def _in_sync(servers: dict[int, ServerProcess], topic: str) -> bool:
    return all(len(p.isr) == 3 for s in servers.values() for p in _partitions(s, topic).values())


def _start(start_member, flags: tuple[str, ...]) -> dict[int, ServerProcess]:
    servers = {node: start_member(node, *MEMBER_FLAGS, *flags) for node in (1, 2, 3)}
    wait_for(lambda: all(len(metadata(s).brokers) == 3 for s in servers.values()),
             "three brokers seen by every server")
    return servers


def _restart(start_member, servers: dict[int, ServerProcess], node: int,
             flags: tuple[str, ...], topic: str, preferred: dict[int, int]) -> None:
    """Stop ``node`` cleanly, wait until its preferred partitions are led elsewhere, start it
    again on its data."""
    others = [s for n, s in servers.items() if n != node]
    servers[node].stop()
    mine = [p for p, leader in preferred.items() if leader == node]
    wait_for(lambda: all(_leaders(others[0], topic).get(p, node) not in (node, -1)
                         for p in mine),
             f"node {node}'s partitions led elsewhere", FAILOVER_BOUND_S)
    servers[node] = start_member(node, *MEMBER_FLAGS, *flags, data_dir=servers[node].data_dir)


def test_leaders_rebalanced_after_a_rolling_restart_under_acks_all(start_member, etcd) -> None:
    flags = ("--leader-imbalance-check-interval-seconds", str(CHECK_INTERVAL_S))
    servers = _start(start_member, flags)
    topic = f"bal-{uuid.uuid4().hex[:6]}"
    create_topic(servers[1], topic, partitions=3, min_insync=2)
    preferred = _preferred(etcd, topic)
    assert sorted(preferred.values()) == [1, 2, 3]

    with AcksAllLoad(servers, topic, 3, RECORDS_MAX) as load:
        load.more(200, "the producer under way")
        for node in (1, 2, 3):
            _restart(start_member, servers, node, flags, topic, preferred)
            # Back in sync, then led by its preferred replica again: the controller's check.
            wait_for(lambda: _in_sync(servers, topic) and all(
                _leaders(s, topic) == preferred for s in servers.values()),
                f"leadership back on the preferred replicas after node {node}'s restart",
                FAILOVER_BOUND_S + 4 * CHECK_INTERVAL_S)
        load.more()
    assert load.failed == []
    controller_logs = "".join(s.log_text() for s in servers.values())
    assert "moved back to its preferred replica" in controller_logs

    read = read_back(servers, topic, 3, len(load.delivered))
    assert sorted(read) == sorted(load.delivered)  # every acknowledged record, once


def test_leaders_bunched_on_one_server_are_balanced_again(start_member, etcd) -> None:
    flags = ("--leader-imbalance-check-interval-seconds", str(CHECK_INTERVAL_S))
    servers = _start(start_member, flags)
    topic = f"bunch-{uuid.uuid4().hex[:6]}"
    create_topic(servers[1], topic, partitions=6, min_insync=1)
    preferred = _preferred(etcd, topic)
    for node in (2, 3):
        servers[node].stop()
    wait_for(lambda: set(_leaders(servers[1], topic).values()) == {1},
             "every leader on node 1", FAILOVER_BOUND_S)
    for node in (2, 3):
        servers[node] = start_member(node, *MEMBER_FLAGS, *flags,
                                     data_dir=servers[node].data_dir)
    wait_for(lambda: all(_leaders(s, topic) == preferred for s in servers.values()),
             "every partition led by its preferred replica again",
             FAILOVER_BOUND_S + 4 * CHECK_INTERVAL_S)
    assert sorted(preferred.values()) == [1, 1, 2, 2, 3, 3]


def _elect_cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stratalog.cli", "--target", server.target, "topics",
         "elect-leaders", *args], capture_output=True, text=True, timeout=60)


def test_on_demand_election_through_the_cli_and_the_kafka_api(start_member, etcd) -> None:
    flags = ("--auto-leader-rebalance-enable", "false")
    servers = _start(start_member, flags)
    topic = f"pref-{uuid.uuid4().hex[:6]}"
    create_topic(servers[1], topic, partitions=3, min_insync=1)
    preferred = _preferred(etcd, topic)
    by_node = {node: p for p, node in preferred.items()}

    _restart(start_member, servers, 2, flags, topic, preferred)
    wait_for(lambda: _in_sync(servers, topic), "node 2 back in every ISR", FAILOVER_BOUND_S)
    moved = by_node[2]
    before = _partitions(servers[1], topic)[moved]
    assert before.leader != 2  # no automatic rebalance: the failover's leader stays

    done = _elect_cli(servers[3], "--topic", topic)
    assert done.returncode == 0, done.stderr
    assert f"{topic}-{moved}: elected (preferred)" in done.stdout
    for p in set(preferred) - {moved}:
        assert f"{topic}-{p}: not needed" in done.stdout
    wait_for(lambda: all(_leaders(s, topic) == preferred for s in servers.values()),
             "every server sees the preferred leaders")
    after = _partitions(servers[1], topic)[moved]
    assert after.leader_epoch == before.leader_epoch + 1 and list(after.isr) == list(before.isr)
    again = _elect_cli(servers[1], "--topic", topic, "--partition", str(moved),
                       "--format", "json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == [{
        "topic": topic, "partition": moved, "elected": False, "error": "ELECTION_NOT_NEEDED",
        "message": "its preferred replica 2 leads it already"}]
    everything = _elect_cli(servers[1])
    assert everything.returncode == 0, everything.stderr
    assert "No election needed" in everything.stdout

    # The Kafka API: node 3 restarted, its partition moved back by confluent's AdminClient.
    _restart(start_member, servers, 3, flags, topic, preferred)
    wait_for(lambda: _in_sync(servers, topic), "node 3 back in every ISR", FAILOVER_BOUND_S)
    admin = AdminClient({"bootstrap.servers": servers[1].kafka_bootstrap})
    wanted = [TopicPartition(topic, by_node[3]), TopicPartition(topic, by_node[1])]
    outcome = admin.elect_leaders(ElectionType.PREFERRED, wanted).result(30)
    errors = {tp.partition: error for tp, error in outcome.items()}
    assert errors[by_node[3]] is None
    assert errors[by_node[1]].name() == "ELECTION_NOT_NEEDED"
    wait_for(lambda: _leaders(servers[2], topic) == preferred, "node 3 leads its partition")

    # A preferred replica that is down cannot be elected: nothing moves.
    servers[1].stop()
    wait_for(lambda: _leaders(servers[2], topic)[by_node[1]] not in (1, -1),
             "node 1's partition led elsewhere", FAILOVER_BOUND_S)
    refused = _elect_cli(servers[2], "--topic", topic, "--partition", str(by_node[1]))
    assert refused.returncode == 1
    assert "PREFERRED_LEADER_NOT_AVAILABLE" in refused.stdout
    assert "is not a live broker" in refused.stdout
    survivor = AdminClient({"bootstrap.servers": servers[2].kafka_bootstrap})
    outcome = survivor.elect_leaders(ElectionType.PREFERRED,
                                     [TopicPartition(topic, by_node[1])]).result(30)
    [error] = outcome.values()
    assert error.name() == "PREFERRED_LEADER_NOT_AVAILABLE"
    assert "is not a live broker" in error.str()
    assert _leaders(servers[2], topic)[by_node[1]] != 1


def test_a_single_server_needs_no_election(tmp_path) -> None:
    server = launch_server(tmp_path / "single")
    try:
        subprocess.run([sys.executable, "-m", "stratalog.cli", "--target", server.target,
                        "topics", "create", "solo", "--partitions", "2"],
                       check=True, capture_output=True, timeout=60)
        done = _elect_cli(server, "--topic", "solo", "--format", "json")
        assert done.returncode == 0, done.stderr
        assert [(r["partition"], r["error"]) for r in json.loads(done.stdout)] == [
            (0, "ELECTION_NOT_NEEDED"), (1, "ELECTION_NOT_NEEDED")]
        unknown = _elect_cli(server, "--topic", "solo", "--partition", "5")
        assert unknown.returncode == 1
        assert "solo-5: not elected: UNKNOWN_TOPIC_OR_PARTITION" in unknown.stdout
        assert "No election needed" in _elect_cli(server).stdout
    finally:
        server.stop()
