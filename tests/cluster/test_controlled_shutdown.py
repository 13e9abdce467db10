"""Controlled shutdown (server/cluster/controlled_shutdown.py) against etcd and three real
servers on 127.0.0.1.

* Under a librdkafka producer (acks=all, idempotent, min.insync.replicas 2) sending to an RF 3
  partition, its leader X gets SIGTERM: the controller elects another in-sync replica
  *because X is shutting down* (its log says so), X follows the new leader and only then
  stops (the order of X's log lines), no send fails, every acknowledged record is read back
  once and in order; X starts again, registers without the mark and rejoins the ISR.
* With ``controlled_shutdown_timeout_ms`` 0 the old behaviour: X stops at once, the
  leadership moves because X's lease went (a failover election), not before. X's stop ends
  its followers' fetch sessions instead of waiting its grace period for them.
* The controller's own SIGTERM: it moves its leaderships itself, then resigns (its lease goes
  with its stop); another server becomes controller. The partition of a single-copy topic it
  leads is not waited for (no other replica can take it).
"""

from __future__ import annotations

import re
import uuid

from stratalog.v1 import broker_pb2 as pb
from tests.integration.conftest import CALL_TIMEOUT_S, STOP_TIMEOUT_S, ServerProcess

from .conftest import AcksAllLoad, metadata, read_back, wait_for
from .test_faults import (
    FAILOVER_BOUND_S,
    MEMBER_FLAGS,
    create_topic,
    partition_metadata,
    stub,
)

#: Records the background producer sends at most (a bound, not a target).
RECORDS_MAX = 40_000


def _start(start_member, *flags: str) -> dict[int, ServerProcess]:
    servers = {node: start_member(node, *MEMBER_FLAGS, *flags) for node in (1, 2, 3)}
    wait_for(lambda: all(len(metadata(s).brokers) == 3 for s in servers.values()),
             "three brokers seen by every server")
    return servers


def _agreed_leader(servers: dict[int, ServerProcess], topic: str, partition: int = 0) -> int:
    """The leader of ``topic``-``partition`` every live server agrees on, with a full ISR."""
    seen: list[int] = []

    def agreed() -> bool:
        views = [partition_metadata(s, topic, partition) for s in servers.values()
                 if s.process.poll() is None]
        if any(v is None for v in views):
            return False
        leaders = {v.leader for v in views}
        seen[:] = list(leaders)
        return len(leaders) == 1 and -1 not in leaders and all(len(v.isr) == 3 for v in views)

    wait_for(agreed, f"the servers agree on a leader of {topic}-{partition}, ISR of 3",
             FAILOVER_BOUND_S)
    return seen[0]


def _leader_seen_by(servers: dict[int, ServerProcess], topic: str, partition: int = 0) -> int:
    """The leader of ``topic``-``partition`` as the first of ``servers`` sees it; -1: none."""
    found = partition_metadata(next(iter(servers.values())), topic, partition)
    return found.leader if found is not None else -1


def _logs(servers: dict[int, ServerProcess]) -> str:
    return "".join(s.log_text() for s in servers.values())


def _position(log: str, pattern: str) -> int:
    found = re.search(pattern, log)
    assert found is not None, f"no line matching {pattern!r} in the log"
    return found.start()


def test_a_sigterm_moves_the_leadership_before_the_server_stops(start_member, etcd) -> None:
    servers = _start(start_member)
    topic = f"cs-{uuid.uuid4().hex[:6]}"
    create_topic(servers[1], topic, partitions=1, min_insync=2)
    leader = _agreed_leader(servers, topic)
    before = partition_metadata(servers[leader], topic)
    assert before is not None
    others = {n: s for n, s in servers.items() if n != leader}

    with AcksAllLoad(servers, topic, 1, RECORDS_MAX) as producer:
        producer.more(300, "the producer under way")
        assert servers[leader].stop() == 0
        # Led by another server at the next leader epoch, X out of the ISR (the log lines
        # below say it happened before X stopped).
        wait_for(lambda: _leader_seen_by(others, topic) in others, "the new leader seen")
        after = partition_metadata(next(iter(others.values())), topic)
        assert after is not None
        assert after.leader in others and after.leader_epoch == before.leader_epoch + 1
        assert leader not in after.isr
        producer.more(300, "the producer goes on with the new leader")

        x_log = servers[leader].log_text()
        signalled = _position(x_log, r"SIGTERM: stopping")
        followed = _position(x_log, rf"{topic}-0: following node {after.leader} at epoch"
                                    rf" {after.leader_epoch}")
        done = _position(x_log, rf"controlled shutdown of node {leader} done")
        stopped = _position(x_log, r"stopped cleanly")
        # X heard of the move and followed the new leader while serving, then stopped.
        assert signalled < followed < done < stopped
        assert re.search(rf"{topic}-0: elected node {after.leader} leader at leader epoch"
                         rf" {after.leader_epoch}, ISR \[[0-9, ]+\] \(controlled shutdown of"
                         rf" node {leader}\)", _logs(servers))
        assert f"the previous leader {leader} is gone" not in _logs(servers)

        # X again, on its data: registered without the mark, back in the ISR, a follower.
        servers[leader] = start_member(leader, *MEMBER_FLAGS,
                                       data_dir=servers[leader].data_dir)
        assert _agreed_leader(servers, topic) == after.leader
        producer.more(300, "the producer goes on with X back")
    assert producer.failed == []
    read = read_back(servers, topic, 1, len(producer.delivered))
    # Every acknowledged record once, in the order acknowledged (one partition, idempotent).
    assert read == producer.delivered


def test_timeout_zero_keeps_the_old_behaviour(start_member, etcd) -> None:
    # A grace period longer than stop() waits: the followers' fetch sessions to X, calls that
    # never end by themselves, must be ended by X's stop, not waited for.
    servers = _start(start_member, "--controlled-shutdown-timeout-ms", "0",
                     "--shutdown-grace-ms", str(int(STOP_TIMEOUT_S * 2 * 1000)))
    topic = f"cs0-{uuid.uuid4().hex[:6]}"
    create_topic(servers[1], topic, partitions=1, min_insync=1)
    leader = _agreed_leader(servers, topic)
    wait_for(lambda: len(partition_metadata(servers[leader], topic).isr) == 3,
             "both followers in the ISR (their sessions open)")
    assert servers[leader].stop() == 0
    others = {n: s for n, s in servers.items() if n != leader}
    wait_for(lambda: _leader_seen_by(others, topic) in others,
             "the leadership moved once the lease went", FAILOVER_BOUND_S)
    x_log = servers[leader].log_text()
    assert "controlled shutdown" not in x_log
    assert f"{topic}-0: following node" not in x_log  # it stopped as the leader
    # A failover election: the controller saw X's lease gone, not a mark.
    assert re.search(rf"{topic}-0: elected node \d leader at leader epoch 1, ISR .*the"
                     rf" previous leader {leader} is gone", _logs(others))


def test_the_controllers_own_sigterm_moves_its_leaderships_then_resigns(start_member,
                                                                        etcd) -> None:
    servers = _start(start_member)
    topic = f"csc-{uuid.uuid4().hex[:6]}"
    # Three partitions: each server is the preferred leader of one, the controller too.
    create_topic(servers[1], topic, partitions=3, min_insync=2)
    # And one copy of each of three partitions: each server leads one, with nobody to take it.
    solo = f"solo-{uuid.uuid4().hex[:6]}"
    channel, broker = stub(servers[1])
    with channel:
        broker.CreateTopic(pb.CreateTopicRequest(name=solo, partitions=3, replication_factor=1),
                           timeout=CALL_TIMEOUT_S)
    for partition in range(3):
        _agreed_leader(servers, topic, partition)
    wait_for(lambda: sorted(_leader_seen_by(servers, solo, p) for p in range(3)) == [1, 2, 3],
             "each server leads one partition of the single-copy topic")
    controller = metadata(servers[1]).controller_id
    led = [p for p in range(3)
           if partition_metadata(servers[controller], topic, p).leader == controller]
    assert led, "the controller leads one partition (the preferred leaders are spread)"

    assert servers[controller].stop() == 0
    others = {n: s for n, s in servers.items() if n != controller}
    c_log = servers[controller].log_text()
    # The controller elected the new leaders itself, while still controller, then stopped.
    moved = _position(c_log, rf"{topic}-{led[0]}: elected node \d leader at leader epoch 1,"
                             rf" ISR \[[0-9, ]+\] \(controlled shutdown of node {controller}\)")
    # Not waited for: the single-copy partition it leads (it goes offline with the server).
    done = _position(c_log, rf"controlled shutdown of node {controller} done in [0-9.]+ s: its"
                            r" leaderships moved; 1 partition\(s\) without another in-sync"
                            r" replica stay led here until it stops")
    assert moved < done < _position(c_log, r"stopped cleanly")
    assert "timed out" not in c_log
    for partition in led:
        wait_for(lambda p=partition: _leader_seen_by(others, topic, p) in others,
                 f"{topic}-{partition} led by another server")
    # Another server took the controller role once the lease went.
    wait_for(lambda: all(metadata(s).controller_id in others for s in others.values()),
             "a new controller", FAILOVER_BOUND_S)
