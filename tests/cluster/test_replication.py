"""Replication against real processes: etcd and two or three servers on 127.0.0.1.

The test plays the controller: it writes the topic's assignment and its partitions' states into
etcd with partition_state.py's codecs (as CreateTopic and the controller's elections do), then
waits for the servers to act on them. What is checked is what clients see (Produce, fetches and
their errors), what etcd holds (the ISR the leader wrote) and the replicas' segment files, byte
for byte; never a private state.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import grpc

from stratalog.client.errors import from_rpc_error
from stratalog.server.cluster.layout import ClusterKeys
from stratalog.server.cluster.partition_state import PartitionState, TopicAssignment
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc, replication_pb2
from tests.integration.conftest import CALL_TIMEOUT_S, ServerProcess

from .conftest import ETCD_BINARY, SESSION_TIMEOUT_MS, EtcdProcess, wait_for
from .replica_fetch_call import PartitionFetchError
from .replica_fetch_call import replica_fetch as session_fetch

ETCDCTL = ETCD_BINARY.parent / "etcdctl"
KEYS = ClusterKeys("/stratalog")
#: The ISR checks of these tests: a follower silent for a second leaves the ISR.
LAG_FLAGS = ("--replica-lag-time-max-ms", "1000")


# ------------------------------------------------------------------------ etcd, as a controller


def etcdctl(etcd: EtcdProcess, *args: str) -> str:
    result = subprocess.run(
        [str(ETCDCTL), f"--endpoints=127.0.0.1:{etcd.client_port}", *args],
        capture_output=True, check=True, env={**os.environ, "ETCDCTL_API": "3"}, timeout=30,
    )
    return result.stdout.decode()


def write_state(etcd: EtcdProcess, topic: str, partition: int, leader: int, epoch: int,
                isr: list[int]) -> None:
    value = PartitionState(leader, epoch, tuple(isr)).encode().decode()
    etcdctl(etcd, "put", KEYS.partition(topic, partition).decode(), value)


def read_state(etcd: EtcdProcess, topic: str, partition: int) -> PartitionState:
    value = etcdctl(etcd, "get", "--print-value-only", KEYS.partition(topic, partition).decode())
    state = PartitionState.decode(value.strip().encode())
    assert state is not None, value
    return state


def create_topic(etcd: EtcdProcess, topic: str, replicas: list[int],
                 configs: dict[str, str] | None = None) -> None:
    """One partition on ``replicas``, the first the leader at epoch 0, all in sync."""
    assignment = TopicAssignment({0: tuple(replicas)}, configs or {})
    etcdctl(etcd, "put", KEYS.topic(topic).decode(), assignment.encode().decode())
    write_state(etcd, topic, 0, replicas[0], 0, replicas)


# ------------------------------------------------------------------------ clients


def produce(server: ServerProcess, topic: str, values: list[bytes], acks: int = -1
            ) -> pb.ProduceResponse:
    with grpc.insecure_channel(server.target) as channel:
        return broker_pb2_grpc.BrokerStub(channel).Produce(
            pb.ProduceRequest(topic=topic, partition=0, acks=acks,
                              records=[pb.Record(value=v) for v in values]),
            timeout=60,
        )


def session_produce(server: ServerProcess, topic: str, payloads: list[bytes]
                    ) -> list[pb.SessionResponse]:
    """One acks=all Produce per payload on one Session stream, all sent at once; the answers
    by id."""
    requests = [
        pb.SessionRequest(id=index + 1, produce=pb.ProduceRequest(
            topic=topic, partition=0, records=[pb.Record(value=payload)]))
        for index, payload in enumerate(payloads)
    ]
    with grpc.insecure_channel(server.target) as channel:
        answers = list(broker_pb2_grpc.BrokerStub(channel).Session(iter(requests), timeout=60))
    return sorted(answers, key=lambda answer: answer.id)


def fetch(server: ServerProcess, topic: str, offset: int = 0) -> pb.FetchResponse:
    with grpc.insecure_channel(server.target) as channel:
        return broker_pb2_grpc.BrokerStub(channel).FetchByOffset(
            pb.FetchByOffsetRequest(topic=topic, partition=0, offset=offset,
                                    format=pb.FETCH_FORMAT_RECORDS),
            timeout=CALL_TIMEOUT_S,
        )


def latest_offset(server: ServerProcess, topic: str) -> int:
    with grpc.insecure_channel(server.target) as channel:
        return broker_pb2_grpc.BrokerStub(channel).ListOffsets(
            pb.ListOffsetsRequest(topic=topic, partition=0, timestamp=-1), timeout=CALL_TIMEOUT_S
        ).offset


def error_of(call: grpc.RpcError) -> tuple[str, dict[str, str]]:
    """The ErrorReason name and metadata of a failed call, as the client library reads them."""
    error = from_rpc_error(call)
    return error.reason or "", dict(error.metadata)


def refused(call: object) -> tuple[str, dict[str, str]]:
    """Run ``call``; the reason it was refused with (AssertionError if it was not)."""
    try:
        call()  # type: ignore[operator]
    except grpc.RpcError as exc:
        return error_of(exc)
    except PartitionFetchError as exc:
        return exc.reason, exc.metadata
    raise AssertionError("the call succeeded")


def values(response: pb.FetchResponse) -> list[bytes]:
    return [record.value for record in response.records]


def produce_when_ready(server: ServerProcess, topic: str, payload: list[bytes],
                       acks: int = -1) -> pb.ProduceResponse:
    """Produce once ``server`` has taken the role etcd gives it (until then it refuses)."""
    answer: list[pb.ProduceResponse] = []

    def attempt() -> bool:
        try:
            answer.append(produce(server, topic, payload, acks))
        except grpc.RpcError as exc:
            reason, _ = error_of(exc)
            assert reason in ("NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION",
                              "LEADER_NOT_AVAILABLE", "REQUEST_TIMED_OUT"), reason
            return False
        return True

    wait_for(attempt, f"a produce to {server.target} accepted")
    return answer[0]


def restart_when_id_free(start_member, node_id: int, data_dir: Path, *flags: str
                         ) -> ServerProcess:
    """Start a killed server again on its data: its node id is taken until its lease
    expired (a session timeout after the kill), and the start refused until then."""
    deadline = time.monotonic() + 30
    while True:
        time.sleep(SESSION_TIMEOUT_MS / 1000 / 2)
        try:
            return start_member(node_id, *flags, data_dir=data_dir)
        except AssertionError as exc:
            if "already registered" not in str(exc) or time.monotonic() > deadline:
                raise


def segment_bytes(server: ServerProcess, topic: str) -> bytes:
    """The partition's .log files on ``server``'s disk, concatenated in offset order."""
    directory = Path(server.data_dir) / f"{topic}-0"
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def same_log(servers: list[ServerProcess], topic: str) -> bool:
    logs = {segment_bytes(server, topic) for server in servers}
    return len(logs) == 1 and logs.pop() != b""


# ------------------------------------------------------------------------ tests


def test_acks_all_reaches_every_replica_and_followers_refuse_clients(etcd, start_member) -> None:
    servers = {n: start_member(n) for n in (1, 2, 3)}
    create_topic(etcd, "orders", [1, 2, 3])
    first = produce_when_ready(servers[1], "orders", [b"a", b"b"])
    second = produce(servers[1], "orders", [b"c"])
    assert (first.base_offset, first.last_offset, second.base_offset) == (0, 1, 2)
    # Acknowledged with acks=all: every replica holds the leader's bytes.
    wait_for(lambda: same_log(list(servers.values()), "orders"), "the same log on 3 replicas")
    assert values(fetch(servers[1], "orders")) == [b"a", b"b", b"c"]

    # A follower refuses clients and names the leader.
    for call in (lambda: produce(servers[2], "orders", [b"x"]),
                 lambda: fetch(servers[3], "orders"),
                 lambda: latest_offset(servers[2], "orders")):
        reason, hint = refused(call)
        assert reason == "NOT_LEADER_OR_FOLLOWER"
        assert (hint["leader_id"], hint["leader_address"]) == ("1", servers[1].target)

    # A Subscribe stream on the leader: it sees what is replicated, and ends when the leader
    # steps down.
    channel = grpc.insecure_channel(servers[1].target)
    stream = broker_pb2_grpc.BrokerStub(channel).Subscribe(
        pb.SubscribeRequest(topic="orders", partition=0, offset=0,
                            format=pb.FETCH_FORMAT_RECORDS), timeout=60)
    seen: list[bytes] = []
    while len(seen) < 3:
        seen += [r.value for r in next(stream).records]
    assert seen == [b"a", b"b", b"c"]

    # The controller's part, played here: node 2 leads at epoch 1. It serves what node 1
    # acknowledged, and node 1 now follows it.
    write_state(etcd, "orders", 0, 2, 1, [1, 2, 3])
    try:
        while True:
            assert not next(stream).records, "nothing more was produced"
    except grpc.RpcError as exc:
        assert error_of(exc)[0] == "NOT_LEADER_OR_FOLLOWER"
    finally:
        channel.close()
    produce_when_ready(servers[2], "orders", [b"d"])
    assert values(fetch(servers[2], "orders")) == [b"a", b"b", b"c", b"d"]
    reason, hint = refused(lambda: produce(servers[1], "orders", [b"x"]))
    assert (reason, hint["leader_id"], hint["leader_epoch"]) == ("NOT_LEADER_OR_FOLLOWER", "2", "1")
    wait_for(lambda: same_log(list(servers.values()), "orders"), "node 2's log everywhere")

    # The Replication RPC itself, as a follower would call it.
    def replica_fetch(server: ServerProcess, epoch: int, **fields: int
                      ) -> replication_pb2.PartitionData:
        with grpc.insecure_channel(server.target) as channel:
            return session_fetch(channel, "orders", 3, epoch, **fields)

    assert refused(lambda: replica_fetch(servers[2], 0))[0] == "FENCED_LEADER_EPOCH"
    assert refused(lambda: replica_fetch(servers[2], 7))[0] == "UNKNOWN_LEADER_EPOCH"
    assert refused(lambda: replica_fetch(servers[1], 1))[0] == "NOT_LEADER_OR_FOLLOWER"
    # A follower whose epoch-0 records run past where epoch 0 ended on the leader (3).
    answer = replica_fetch(servers[2], 1, fetch_offset=6, last_fetched_epoch=0)
    assert answer.HasField("diverging_epoch") and not answer.records
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (0, 3)
    assert answer.log_end_offset == 4
    # Past the leader's end in its current epoch: told where that epoch ends; with no epoch
    # to compare (an empty log would send -1), out of range.
    answer = replica_fetch(servers[2], 1, fetch_offset=9, last_fetched_epoch=1)
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (1, 4)
    reason, bounds = refused(lambda: replica_fetch(servers[2], 1, fetch_offset=9,
                                                   last_fetched_epoch=-1))
    assert (reason, bounds["log_end_offset"]) == ("OFFSET_OUT_OF_RANGE", "4")


def test_a_divergent_suffix_is_truncated_by_epoch_and_consumers_never_saw_it(
    etcd, start_member,
) -> None:
    # A longer session: the steps between killing the followers and freezing the leader must
    # all happen before etcd expires the followers' leases (the controller then takes them out
    # of the ISR, and the leader's high watermark could move past x and y).
    session = ("--cluster-session-timeout-ms", "5000")
    servers = {n: start_member(n, *session) for n in (1, 2, 3)}
    create_topic(etcd, "events", [1, 2, 3])
    produce_when_ready(servers[1], "events", [b"a", b"b"])
    wait_for(lambda: same_log(list(servers.values()), "events"), "a, b on every replica")
    # Followers killed, still in the ISR until their leases expire: the leader takes acks=1
    # records, which nobody else has and which its high watermark does not pass.
    data_dirs = {n: servers[n].data_dir for n in (2, 3)}
    for n in (2, 3):
        servers.pop(n).kill()
    suffix = produce(servers[1], "events", [b"x", b"y"], acks=1)
    assert (suffix.base_offset, suffix.last_offset) == (2, 3)
    # Consumers read below the high watermark only: x and y are not replicated.
    response = fetch(servers[1], "events")
    assert values(response) == [b"a", b"b"]
    assert response.high_watermark == 2
    assert latest_offset(servers[1], "events") == 2
    assert values(fetch(servers[1], "events", offset=2)) == []
    os.kill(servers[1].process.pid, signal.SIGSTOP)
    try:
        # The followers come back; the controller (one of them) finds the leader gone and
        # elects the first live replica of the ISR: node 2, at a newer epoch, without x and y.
        for n in (2, 3):
            servers[n] = restart_when_id_free(start_member, n, data_dirs[n], *session)
        wait_for(lambda: read_state(etcd, "events", 0).leader == 2, "node 2 elected", 60)
        assert read_state(etcd, "events", 0).leader_epoch >= 1
        produce_when_ready(servers[2], "events", [b"c"])
    finally:
        os.kill(servers[1].process.pid, signal.SIGCONT)
    assert values(fetch(servers[2], "events")) == [b"a", b"b", b"c"]
    # The old leader thaws, finds the new leader and gives x and y up: truncated by epoch.
    wait_for(lambda: same_log(list(servers.values()), "events"),
             "the old leader truncated to the new leader's log, byte for byte")
    assert "diverges from leader 2" in servers[1].log_text()


def test_a_lagging_follower_leaves_the_isr_and_rejoins(etcd, start_member) -> None:
    servers = {n: start_member(n, *LAG_FLAGS) for n in (1, 2)}
    create_topic(etcd, "audit", [1, 2], {"min.insync.replicas": "2"})
    produce_when_ready(servers[1], "audit", [b"a"])
    follower = servers[2].process.pid
    os.kill(follower, signal.SIGSTOP)
    try:
        # Two Produce requests on one Session stream: each waits until the ISR shrank, then
        # fails: written, but not on min.insync.replicas. The second was appended while the
        # first waited for the replicas (else it would have found the ISR shrunk: refused,
        # nothing written).
        answers = session_produce(servers[1], "audit", [b"b1", b"b2"])
        assert [pb.ErrorReason.Name(a.error.reason) for a in answers] == [
            "NOT_ENOUGH_REPLICAS_AFTER_APPEND"] * 2
        assert read_state(etcd, "audit", 0).isr == (1,)
        assert servers[1].metric("stratalog_isr_shrinks_total") == 1
        assert servers[1].metric("stratalog_under_replicated_partitions") == 1
        # Now refused before anything is written; acks=1 still goes.
        reason, _ = refused(lambda: produce(servers[1], "audit", [b"c"]))
        assert reason == "NOT_ENOUGH_REPLICAS"
        assert produce(servers[1], "audit", [b"d"], acks=1).base_offset == 3
    finally:
        os.kill(follower, signal.SIGCONT)
    wait_for(lambda: read_state(etcd, "audit", 0).isr == (1, 2), "node 2 back in the ISR")
    wait_for(lambda: servers[1].metric("stratalog_under_replicated_partitions") == 0,
             "no partition under-replicated")
    assert servers[1].metric("stratalog_isr_expands_total") == 1
    assert servers[1].metric("stratalog_leader_partitions") == 1
    assert servers[2].metric("stratalog_leader_partitions") == 0
    assert produce(servers[1], "audit", [b"e"]).base_offset == 4
    wait_for(lambda: same_log(list(servers.values()), "audit"), "node 2 caught up")
    assert values(fetch(servers[1], "audit")) == [b"a", b"b1", b"b2", b"d", b"e"]


def test_a_leader_that_lost_its_lease_is_refused_until_it_follows(etcd, start_member) -> None:
    # A session of 4 s: the frozen follower's lease (renewed every third of it) must outlive
    # the 1.5 s acks=all wait below, else the controller, woken by etcd's watch, takes it out
    # of the ISR first and the produce succeeds.
    session_ms = 4_000
    servers = {n: start_member(n, "--request-timeout-ms", "1500",
                               "--cluster-session-timeout-ms", str(session_ms))
               for n in (1, 2)}
    create_topic(etcd, "ledger", [1, 2])
    produce_when_ready(servers[1], "ledger", [b"a"])
    # A follower frozen for less than replica_lag_time_max_ms stays in the ISR: acks=all
    # waits for it until request_timeout_ms (the record stays in the leader's log).
    os.kill(servers[2].process.pid, signal.SIGSTOP)
    try:
        assert refused(lambda: produce(servers[1], "ledger", [b"b"]))[0] == "REQUEST_TIMED_OUT"
    finally:
        os.kill(servers[2].process.pid, signal.SIGCONT)
    os.kill(servers[1].process.pid, signal.SIGSTOP)
    try:
        time.sleep(session_ms / 1000 * 2)  # its lease expires
        write_state(etcd, "ledger", 0, 2, 1, [2])  # the controller moves the leadership
    finally:
        os.kill(servers[1].process.pid, signal.SIGCONT)
    # From the first request after it thawed: never accepted again.
    for _ in range(20):
        reason, _ = refused(lambda: produce(servers[1], "ledger", [b"stale"], acks=1))
        assert reason == "NOT_LEADER_OR_FOLLOWER"
    produce_when_ready(servers[2], "ledger", [b"c"])
    wait_for(lambda: same_log(list(servers.values()), "ledger"), "node 1 follows node 2")
    assert values(fetch(servers[2], "ledger")) == [b"a", b"b", b"c"]


def test_with_etcd_down_the_leaders_keep_serving_and_nobody_is_elected(
    etcd, start_member,
) -> None:
    servers = {n: start_member(n) for n in (1, 2)}
    create_topic(etcd, "steady", [1, 2], {"min.insync.replicas": "2"})
    produce_when_ready(servers[1], "steady", [b"a"])
    etcd.stop()
    try:
        # Past every lease's TTL: a leader that went by its lease alone would refuse now. etcd
        # answers nobody, so no other leader can have been elected: the leader serves, acks=all
        # included (the follower fetches on), and the follower still refuses clients.
        time.sleep(SESSION_TIMEOUT_MS / 1000 * 2)
        for i in range(10):
            produce(servers[1], "steady", [b"b%d" % i])
        assert values(fetch(servers[1], "steady")) == [b"a"] + [b"b%d" % i for i in range(10)]
        assert refused(lambda: produce(servers[2], "steady", [b"x"]))[0] == (
            "NOT_LEADER_OR_FOLLOWER")
    finally:
        etcd.start()
    # etcd back: the same leader at the same epoch (no election happened), still serving.
    produce(servers[1], "steady", [b"c"])
    assert read_state(etcd, "steady", 0).leader_epoch == 0
    wait_for(lambda: same_log(list(servers.values()), "steady"), "both replicas equal")


def test_a_restarted_cluster_keeps_its_leaders_data_and_high_watermark(etcd, start_member) -> None:
    servers = {n: start_member(n) for n in (1, 2)}
    create_topic(etcd, "journal", [1, 2])
    produce_when_ready(servers[1], "journal", [b"a", b"b"])
    produce(servers[1], "journal", [b"c"])
    wait_for(lambda: same_log(list(servers.values()), "journal"), "both replicas hold a, b, c")
    data_dirs = {n: server.data_dir for n, server in servers.items()}
    for server in servers.values():
        assert server.stop() == 0
    servers = {n: start_member(n, data_dir=data_dirs[n]) for n in (1, 2)}
    # The high watermark comes back from replication-offset-checkpoint: everything is readable
    # on the leader (whichever the controller left leading: the servers stopped one after the
    # other, so it may have moved the leadership to the last one up) as soon as it leads.
    def leader() -> ServerProcess | None:
        return servers.get(read_state(etcd, "journal", 0).leader)  # None while it has none

    wait_for(lambda: (found := leader()) is not None
             and _readable(found, "journal") == [b"a", b"b", b"c"],
             "the records readable on the restarted leader")
    assert fetch(leader(), "journal").high_watermark == 3
    produce_when_ready(leader(), "journal", [b"d"])
    assert _readable(leader(), "journal") == [b"a", b"b", b"c", b"d"]
    wait_for(lambda: same_log(list(servers.values()), "journal"), "the follower caught up")
    # Deleted from etcd (DeleteTopic's part, played here): gone from every replica's disk.
    etcdctl(etcd, "del", KEYS.topic("journal").decode())
    etcdctl(etcd, "del", "--prefix", KEYS.topic_partitions_prefix("journal").decode())
    wait_for(lambda: not any((Path(s.data_dir) / "journal-0").exists() for s in servers.values()),
             "the topic deleted locally on both servers")


def _readable(server: ServerProcess, topic: str) -> list[bytes] | None:
    try:
        return values(fetch(server, topic))
    except grpc.RpcError:
        return None  # not leading yet


def test_a_follower_that_lost_its_disk_copies_the_leaders_log_again(etcd, start_member) -> None:
    servers = {n: start_member(n) for n in (1, 2)}
    create_topic(etcd, "vault", [1, 2])
    produce_when_ready(servers[1], "vault", [b"a", b"b", b"c"])  # one batch, offsets 0..2
    with grpc.insecure_channel(servers[1].target) as channel:
        # The leader's log now starts inside that batch.
        broker_pb2_grpc.BrokerStub(channel).DeleteRecords(
            pb.DeleteRecordsRequest(topic="vault", partition=0, before_offset=1),
            timeout=CALL_TIMEOUT_S)
    data_dir = servers[2].data_dir
    servers.pop(2).kill()
    shutil.rmtree(data_dir)
    # Empty, it asks for offset 0, below the leader's log start (OFFSET_OUT_OF_RANGE: it
    # restarts at 1), then gets the batch holding 1, which starts at 0 (Kafka's case of an
    # empty log starting inside the leader's first batch: it restarts at 0).
    servers[2] = restart_when_id_free(start_member, 2, data_dir)
    wait_for(lambda: same_log(list(servers.values()), "vault"), "the batch copied again")
    assert produce(servers[1], "vault", [b"d"]).base_offset == 3  # acks=all: node 2 has it
    assert values(fetch(servers[1], "vault", offset=1)) == [b"b", b"c", b"d"]
    assert "first batch starts at 0, below this empty log's start 1" in servers[2].log_text()
    # A follower moves its log start only after its leader: DeleteRecords there is refused.
    with grpc.insecure_channel(servers[2].target) as channel:
        reason, hint = refused(lambda: broker_pb2_grpc.BrokerStub(channel).DeleteRecords(
            pb.DeleteRecordsRequest(topic="vault", partition=0, before_offset=2),
            timeout=CALL_TIMEOUT_S))
    assert (reason, hint["leader_id"]) == ("NOT_LEADER_OR_FOLLOWER", "1")


def test_a_follower_takes_fetch_answers_above_grpcs_default_4_mib(etcd, start_member) -> None:
    # replica_fetch_max_bytes 8 MiB: a follower that fell 6 MiB behind catches up in answers
    # larger than gRPC's default receive limit (its channel must allow them).
    flags = ("--replica-fetch-max-bytes", str(8 * 1024 * 1024))
    servers = {n: start_member(n, *flags) for n in (1, 2)}
    create_topic(etcd, "bulk", [1, 2])
    produce_when_ready(servers[1], "bulk", [b"first"])
    wait_for(lambda: same_log(list(servers.values()), "bulk"), "the first record on both")
    os.kill(servers[2].process.pid, signal.SIGSTOP)
    try:
        for _ in range(6):  # acks=1: the leader alone
            produce(servers[1], "bulk", [bytes(1024 * 1024 - 100)], acks=1)
    finally:
        os.kill(servers[2].process.pid, signal.SIGCONT)
    wait_for(lambda: same_log(list(servers.values()), "bulk"), "the follower caught up")
    assert "RESOURCE_EXHAUSTED" not in servers[2].log_text()


def test_a_followers_copy_wakes_the_leaders_long_poll_and_subscribe(etcd, start_member) -> None:
    """A follower's append reaches the leader's readers through the serving layer: a record
    appended with acks=1 is readable on the leader only once the follower copied it (its next
    fetch moves the high watermark), and that is what wakes a long poll and a Subscribe stream
    waiting there (the leader's own append woke them too early to see it). Every other writer:
    tests/unit/server/broker/test_wakeups.py."""
    servers = {n: start_member(n) for n in (1, 2)}
    create_topic(etcd, "wake", [1, 2])
    produce_when_ready(servers[1], "wake", [b"a"])
    leader = servers[1]
    channel = grpc.insecure_channel(leader.target)
    try:
        stub = broker_pb2_grpc.BrokerStub(channel)
        poll = stub.FetchByOffset.future(pb.FetchByOffsetRequest(
            topic="wake", partition=0, offset=1, max_wait_ms=30_000,
            format=pb.FETCH_FORMAT_RECORDS), timeout=60)
        stream = stub.Subscribe(pb.SubscribeRequest(
            topic="wake", partition=0, offset=1, format=pb.FETCH_FORMAT_RECORDS), timeout=60)
        # Counted once they wait at the high watermark (1): the count and the wait happen in
        # one step of the leader's event loop, which also answers the scrape.
        wait_for(lambda: (leader.metric('stratalog_waiting_rpcs{kind="long_poll"}'),
                          leader.metric('stratalog_waiting_rpcs{kind="subscribe"}')) == (1, 1),
                 "the long poll and the Subscribe waiting on the leader")
        produce(leader, "wake", [b"b"], acks=1)
        answer = poll.result(timeout=60)
        assert [(r.offset, r.value) for r in answer.records] == [(1, b"b")]
        assert answer.high_watermark == 2
        assert [(r.offset, r.value) for r in next(stream).records] == [(1, b"b")]
    finally:
        channel.close()
