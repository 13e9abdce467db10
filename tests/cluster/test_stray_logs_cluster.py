"""Stray logs (issue 29) against etcd and real servers on 127.0.0.1.

* A topic deleted while a server was down is gone from that server's disk after it restarts
  (its partition directories renamed for deletion, the deletion logged), while the topic that
  still exists keeps its logs and records there.
* A topic a server held before it joined the cluster (created as a single server) is never
  taken for a stray log: it stays, served as before.
"""

from __future__ import annotations

import json
import uuid

import grpc

from stratalog.server.cluster.stray_logs import RECORD_FILE_NAME
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.cluster.conftest import metadata, wait_for
from tests.cluster.test_controller import create_topic
from tests.cluster.test_faults import MEMBER_FLAGS, start_cluster
from tests.integration.conftest import CALL_TIMEOUT_S, ServerProcess, launch_server


def _stub_call(server: ServerProcess, method: str, request):
    with grpc.insecure_channel(server.target) as channel:
        return getattr(broker_pb2_grpc.BrokerStub(channel), method)(request,
                                                                     timeout=CALL_TIMEOUT_S)


def _listed(server: ServerProcess) -> set[str]:
    return {t.name for t in _stub_call(server, "ListTopics", pb.ListTopicsRequest()).topics}


def _produce(server: ServerProcess, topic: str) -> None:
    leader = next(p.leader for t in metadata(server).topics if t.name == topic
                  for p in t.partitions if p.partition == 0)
    target = next(b.address for b in metadata(server).brokers if b.node_id == leader)
    with grpc.insecure_channel(target) as channel:
        broker_pb2_grpc.BrokerStub(channel).Produce(pb.ProduceRequest(
            topic=topic, partition=0, records=[pb.Record(value=b"x" * 100)] * 10),
            timeout=CALL_TIMEOUT_S)


def test_a_topic_deleted_while_a_server_was_down_leaves_its_disk(start_member) -> None:
    servers = start_cluster(start_member)
    gone, kept = f"gone-{uuid.uuid4().hex[:6]}", f"kept-{uuid.uuid4().hex[:6]}"
    create_topic(servers[1], gone, 2, 3)
    create_topic(servers[1], kept, 1, 3)
    wait_for(lambda: all((s.data_dir / f"{gone}-1").is_dir() and (s.data_dir / f"{kept}-0")
                         .is_dir() for s in servers.values()), "the logs on every server")
    _produce(servers[1], gone)
    _produce(servers[1], kept)
    record = json.loads((servers[3].data_dir / RECORD_FILE_NAME).read_text())
    assert {gone, kept} <= set(record["topics"])

    servers[3].stop()
    _stub_call(servers[1], "DeleteTopic", pb.DeleteTopicRequest(name=gone))
    wait_for(lambda: not (servers[2].data_dir / f"{gone}-0").exists(),
             "a live server deleted it at once")
    assert (servers[3].data_dir / f"{gone}-0").is_dir()  # the stopped server's copy is there

    servers[3] = start_member(3, *MEMBER_FLAGS, data_dir=servers[3].data_dir)
    wait_for(lambda: not (servers[3].data_dir / f"{gone}-0").exists()
             and not (servers[3].data_dir / f"{gone}-1").exists(),
             "the stray logs gone from the restarted server's disk")
    assert gone not in _listed(servers[3])
    assert (servers[3].data_dir / f"{kept}-0").is_dir()
    assert kept in _listed(servers[3])
    log = servers[3].log_text()
    assert f"topic {gone}: deleting its local logs (stray: it is not in the cluster any more" in log
    wait_for(lambda: gone not in json.loads(
        (servers[3].data_dir / RECORD_FILE_NAME).read_text())["topics"], "the record updated")


def test_a_topic_held_before_joining_the_cluster_is_not_stray(start_member, tmp_path) -> None:
    data_dir = tmp_path / "node-1"
    single = launch_server(data_dir)
    try:
        _stub_call(single, "CreateTopic", pb.CreateTopicRequest(name="mine", partitions=1))
    finally:
        single.stop()
    member = start_member(1, data_dir=data_dir)
    create_topic(member, "theirs", 1, 1)  # a view change: another pass
    wait_for(lambda: "theirs" in json.loads((data_dir / RECORD_FILE_NAME).read_text())["topics"],
             "the cluster's topic recorded")
    assert "mine" not in json.loads((data_dir / RECORD_FILE_NAME).read_text())["topics"]
    assert (data_dir / "mine-0").is_dir()
    assert {"mine", "theirs"} <= _listed(member)
    assert "stray" not in member.log_text()


def test_no_stray_log_is_deleted_against_an_etcd_behind_the_record(start_member,
                                                                     tmp_path) -> None:
    """A record made with a newer controller epoch than etcd's (another etcd, wiped or
    restored): nothing deleted, an ERROR says why; with a record of this etcd, the same
    recorded topic that the cluster does not have is deleted."""
    data_dir = tmp_path / "node-1"
    single = launch_server(data_dir)
    try:
        _stub_call(single, "CreateTopic", pb.CreateTopicRequest(name="old", partitions=1))
    finally:
        single.stop()
    (data_dir / RECORD_FILE_NAME).write_text(json.dumps(
        {"version": 1, "controller_epoch": 1_000_000, "topics": ["old"]}))
    member = start_member(1, data_dir=data_dir)
    wait_for(lambda: "stray logs not deleted: etcd's controller epoch" in member.log_text(),
             "the refusal logged")
    assert (data_dir / "old-0").is_dir() and "old" in _listed(member)
    member.stop()

    (data_dir / RECORD_FILE_NAME).write_text(json.dumps(
        {"version": 1, "controller_epoch": 1, "topics": ["old"]}))
    member = start_member(1, data_dir=data_dir)
    wait_for(lambda: not (data_dir / "old-0").exists(), "the recorded topic deleted")
    assert "old" not in _listed(member)
