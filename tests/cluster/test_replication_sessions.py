"""Fetch sessions (issue 29): every partition a follower copies from one leader over one
ReplicaFetchSession stream, partitions joining and leaving sessions as the roles change, and a
leader killed under a multi-partition stream. Against etcd and three real servers."""

from __future__ import annotations

from pathlib import Path

import grpc

from stratalog.server.cluster.partition_state import TopicAssignment
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.integration.conftest import ServerProcess

from .conftest import wait_for
from .test_replication import KEYS, error_of, etcdctl, read_state, write_state

PARTITIONS = 6


def create_partitions(etcd, topic: str, leaders: dict[int, int]) -> None:
    """``topic`` with a partition per key of ``leaders`` on nodes 1-3, led by the value at
    epoch 0, all in sync."""
    assignment = TopicAssignment({p: (1, 2, 3) for p in leaders}, {})
    etcdctl(etcd, "put", KEYS.topic(topic).decode(), assignment.encode().decode())
    for partition, leader in leaders.items():
        write_state(etcd, topic, partition, leader, 0, [1, 2, 3])


def produce_to(server: ServerProcess, topic: str, partition: int, value: bytes) -> bool:
    """acks=all; False while ``server`` does not lead the partition (yet)."""
    try:
        with grpc.insecure_channel(server.target) as channel:
            broker_pb2_grpc.BrokerStub(channel).Produce(
                pb.ProduceRequest(topic=topic, partition=partition, acks=-1,
                                  records=[pb.Record(value=value)]), timeout=60)
    except grpc.RpcError as exc:
        reason, _ = error_of(exc)
        assert reason in ("NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION",
                          "LEADER_NOT_AVAILABLE", "REQUEST_TIMED_OUT"), reason
        return False
    return True


def partition_log(server: ServerProcess, topic: str, partition: int) -> bytes:
    directory = Path(server.data_dir) / f"{topic}-{partition}"
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def replicated(servers: list[ServerProcess], topic: str, partitions: range) -> bool:
    """Every partition's log byte for byte the same, and not empty, on ``servers``."""
    for partition in partitions:
        logs = {partition_log(server, topic, partition) for server in servers}
        if len(logs) != 1 or logs.pop() == b"":
            return False
    return True


def sessions_opened(leader: ServerProcess, follower: int) -> int:
    return leader.log_text().count(f"node {follower} opened a fetch session")


def test_one_session_per_leader_carries_every_partition_and_follows_the_roles(
    etcd, start_member,
) -> None:
    servers = {n: start_member(n) for n in (1, 2, 3)}
    create_partitions(etcd, "many", {p: 1 for p in range(PARTITIONS)})
    for partition in range(PARTITIONS):
        wait_for(lambda p=partition: produce_to(servers[1], "many", p, b"a%d" % p),
                 f"an acks=all produce to many-{partition}")
    wait_for(lambda: replicated(list(servers.values()), "many", range(PARTITIONS)),
             "every partition on every replica")
    # Six partitions, one leader: each follower copied them over one session (a second one
    # only if the first started before the leader had joined).
    for follower in (2, 3):
        assert 1 <= sessions_opened(servers[1], follower) <= 2
    assert sessions_opened(servers[2], 3) == 0

    # The controller's part, played here: node 2 leads the upper half at epoch 1. Node 1
    # follows them in a new session with node 2; node 3's session with node 1 forgets them
    # and its session with node 2 takes them; node 2's session with node 1 forgets them too.
    moved = range(PARTITIONS // 2, PARTITIONS)
    for partition in moved:
        write_state(etcd, "many", partition, 2, 1, [1, 2, 3])
    for partition in range(PARTITIONS):
        leader = servers[2] if partition in moved else servers[1]
        wait_for(lambda p=partition, s=leader: produce_to(s, "many", p, b"b%d" % p),
                 f"an acks=all produce to many-{partition} at its leader")
    wait_for(lambda: replicated(list(servers.values()), "many", range(PARTITIONS)),
             "every partition on every replica after the move")
    for follower in (1, 3):
        assert 1 <= sessions_opened(servers[2], follower) <= 2

    # Node 1, leading the lower half with both followers' sessions open, is killed: the
    # controller elects another replica; the survivors' sessions move the partitions.
    servers.pop(1).kill()
    for partition in range(PARTITIONS):
        def produced(p: int = partition) -> bool:
            leader = read_state(etcd, "many", p).leader
            return leader in servers and produce_to(servers[leader], "many", p, b"c%d" % p)

        wait_for(produced, f"an acks=all produce to many-{partition} after the kill", 60)
    wait_for(lambda: replicated(list(servers.values()), "many", range(PARTITIONS)),
             "every partition the same on the two survivors")
