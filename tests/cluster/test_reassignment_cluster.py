"""Partition reassignment and draining (issue 29) against etcd and four real servers on
127.0.0.1.

* A partition reassigned from its three replicas to two of them and the fourth server, under a
  librdkafka acks=all idempotent producer, with the controller killed (kill -9) right after the
  reassignment is recorded: the new controller carries it on, the leadership leaves the replica
  being removed, the replicas become the target, and every acknowledged record is read back.
* A new replica catching up under the reassignment throttle, applied by every server, and by
  the leader alone (Kafka's leader.replication.throttled.rate): never faster than the rate.
* A reassignment cancelled while the new replica cannot catch up (the reassignment throttle at
  one byte per second): back to the original replicas, nothing left of the reassignment in
  etcd.
* ``stratalog cluster drain --node N --wait``: every partition keeps three replicas, none on N;
  N is then stopped and every partition still takes acks=all writes.
* ListPartitionReassignments and AlterPartitionReassignments over the Kafka protocol
  (kafka-python's KafkaAdminClient: confluent-kafka 2.16 has neither).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid

import grpc
from confluent_kafka import Producer

from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.cluster.conftest import AcksAllLoad, metadata, read_back, wait_for
from tests.cluster.test_controller import etcd_records
from tests.cluster.test_faults import FAILOVER_BOUND_S, MEMBER_FLAGS
from tests.integration.conftest import CALL_TIMEOUT_S, ServerProcess, launch_server

#: Records the background producer sends at most (a bound, not a target).
RECORDS_MAX = 30_000
#: A reassignment, from the request to its completion, on this shared machine (generous).
REASSIGNMENT_BOUND_S = 60.0


#: The reassignment throttle that keeps a new replica from ever catching up in these tests:
#: its first answer leaves it a debt of hundreds of seconds (replication_throttle.py).
STALLED = ("--replica-reassignment-throttled-rate", "1")


def _start(start_member, count: int = 4, *flags: str) -> dict[int, ServerProcess]:
    servers = {node: start_member(node, *MEMBER_FLAGS, *flags) for node in range(1, count + 1)}
    wait_for(lambda: all(len(metadata(s).brokers) == count for s in servers.values()),
             f"{count} brokers seen by every server")
    return servers


def _broker(server: ServerProcess) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    channel = grpc.insecure_channel(server.target)
    return channel, broker_pb2_grpc.BrokerStub(channel)


def _create(server: ServerProcess, topic: str, partitions: int) -> None:
    channel, broker = _broker(server)
    with channel:
        broker.CreateTopic(pb.CreateTopicRequest(
            name=topic, partitions=partitions, replication_factor=3,
            configs={"min.insync.replicas": "2"}), timeout=CALL_TIMEOUT_S)


def _alter(server: ServerProcess, topic: str, partition: int, replicas: list[int]
           ) -> pb.ReassignmentResult:
    channel, broker = _broker(server)
    with channel:
        answer = broker.AlterPartitionReassignments(pb.AlterPartitionReassignmentsRequest(
            partitions=[pb.PartitionReassignmentTarget(topic=topic, partition=partition,
                                                       replicas=replicas)]),
            timeout=CALL_TIMEOUT_S)
    [result] = answer.results
    return result


def _replicas(etcd, topic: str) -> dict[int, list[int]]:
    assignment, _ = etcd_records(etcd, topic)
    return {int(p): nodes for p, nodes in assignment["partitions"].items()}


def _fill(servers: dict[int, ServerProcess], topic: str, partitions: int) -> None:
    """A few acks=all records in each partition: a new replica has something to catch up."""
    producer = Producer({"bootstrap.servers": ",".join(s.kafka_bootstrap
                                                       for s in servers.values()),
                         "acks": "all"})
    for n in range(20 * partitions):
        producer.produce(topic, value=b"v" * 500, partition=n % partitions)
    assert producer.flush(60) == 0


def _reassigning(etcd, topic: str) -> dict:
    assignment, _ = etcd_records(etcd, topic)
    return assignment.get("reassigning", {})


def _controller(servers: dict[int, ServerProcess]) -> int:
    live = [s for s in servers.values() if s.process.poll() is None]
    controllers = {metadata(s).controller_id for s in live}
    return next(iter(controllers)) if len(controllers) == 1 else -1


def test_reassignment_under_acks_all_survives_a_controller_kill(start_member, etcd) -> None:
    servers = _start(start_member)
    topic = f"move-{uuid.uuid4().hex[:6]}"
    _create(servers[1], topic, partitions=1)
    original = _replicas(etcd, topic)[0]
    [newcomer] = set(servers) - set(original)
    # The preferred leader leaves: the leadership must move before the replica set shrinks.
    target = [*original[1:], newcomer]

    with AcksAllLoad(servers, topic, 1, RECORDS_MAX) as load:
        load.more(200, "the producer under way")
        result = _alter(servers[original[1]], topic, 0, target)
        assert result.reason == pb.ERROR_REASON_UNSPECIFIED, result.message
        in_progress = bool(_reassigning(etcd, topic))
        killed = _controller(servers)
        assert killed > 0
        servers[killed].kill()
        # Another controller carries the reassignment on (the killed server comes back: it
        # may be one of the target's replicas, which the completion waits for).
        wait_for(lambda: _controller(servers) not in (-1, killed), "a new controller",
                 FAILOVER_BOUND_S)
        servers[killed] = start_member(killed, *MEMBER_FLAGS,
                                       data_dir=servers[killed].data_dir)
        wait_for(lambda: _replicas(etcd, topic)[0] == target and not _reassigning(etcd, topic),
                 f"{topic}-0 reassigned to {target}", REASSIGNMENT_BOUND_S)
        load.more()
    assert load.failed == []
    _, states = etcd_records(etcd, topic)
    assert states[0].leader in target and set(states[0].isr) <= set(target)
    logs = "".join(s.log_text() for s in servers.values())
    assert "reassignment complete" in logs
    print(f"in progress at the kill: {in_progress}", file=sys.stderr)

    read = read_back(servers, topic, 1, len(load.delivered))
    assert sorted(set(read)) == sorted(set(load.delivered))  # nothing acknowledged lost
    # The removed replica holds no partition of the topic: its logs are deleted.
    removed = servers[original[0]]
    wait_for(lambda: f"topic {topic}: deleting its local logs" in removed.log_text(),
             "the removed replica's logs deleted")


def test_a_reassignment_cancelled_goes_back_to_the_original_replicas(start_member,
                                                                    etcd) -> None:
    servers = _start(start_member, 4, *STALLED)
    topic = f"undo-{uuid.uuid4().hex[:6]}"
    _create(servers[1], topic, partitions=1)
    _fill(servers, topic, 1)
    original = _replicas(etcd, topic)[0]
    [newcomer] = set(servers) - set(original)
    target = [*original[:2], newcomer]
    # The throttle keeps the new replica out of the ISR: in progress until cancelled.
    result = _alter(servers[original[0]], topic, 0, target)
    assert result.reason == pb.ERROR_REASON_UNSPECIFIED, result.message
    assert _reassigning(etcd, topic) == {"0": {"adding": [newcomer],
                                               "removing": [original[2]]}}
    channel, broker = _broker(servers[original[1]])
    with channel:
        listed = broker.ListPartitionReassignments(pb.ListPartitionReassignmentsRequest(),
                                                   timeout=CALL_TIMEOUT_S)
        [ongoing] = listed.reassignments
        assert (list(ongoing.replicas), list(ongoing.adding_replicas),
                list(ongoing.removing_replicas)) == ([*target, original[2]], [newcomer],
                                                     [original[2]])
        cancel = broker.AlterPartitionReassignments(pb.AlterPartitionReassignmentsRequest(
            partitions=[pb.PartitionReassignmentTarget(topic=topic, partition=0)]),
            timeout=CALL_TIMEOUT_S)
        assert cancel.results[0].reason == pb.ERROR_REASON_UNSPECIFIED
        wait_for(lambda: _replicas(etcd, topic)[0] == original
                 and not _reassigning(etcd, topic), "back to the original replicas",
                 REASSIGNMENT_BOUND_S)
        again = broker.AlterPartitionReassignments(pb.AlterPartitionReassignmentsRequest(
            partitions=[pb.PartitionReassignmentTarget(topic=topic, partition=0)]),
            timeout=CALL_TIMEOUT_S)
        assert again.results[0].reason == pb.NO_REASSIGNMENT_IN_PROGRESS
        bad = broker.AlterPartitionReassignments(pb.AlterPartitionReassignmentsRequest(
            partitions=[pb.PartitionReassignmentTarget(topic=topic, partition=0,
                                                       replicas=[1, 1, 2])]),
            timeout=CALL_TIMEOUT_S)
        assert bad.results[0].reason == pb.INVALID_REPLICA_ASSIGNMENT
        assert "more than once" in bad.results[0].message


def test_a_drained_server_holds_nothing_and_can_be_stopped(start_member, etcd) -> None:
    servers = _start(start_member)
    topic = f"drain-{uuid.uuid4().hex[:6]}"
    _create(servers[1], topic, partitions=4)
    drained = 2
    assert any(drained in nodes for nodes in _replicas(etcd, topic).values())

    with AcksAllLoad(servers, topic, 4, RECORDS_MAX) as load:
        load.more(200, "the producer under way")
        command = subprocess.run(
            [sys.executable, "-m", "stratalog.cli", "--target", servers[1].target, "cluster",
             "drain", "--node", str(drained), "--wait", "--timeout-s",
             str(REASSIGNMENT_BOUND_S)],
            capture_output=True, text=True, timeout=REASSIGNMENT_BOUND_S + 30)
        assert command.returncode == 0, command.stdout + command.stderr
        assert f"drained node {drained}" in command.stdout
        assignment = _replicas(etcd, topic)
        assert all(len(nodes) == 3 and drained not in nodes for nodes in assignment.values())
        wait_for(lambda: all(len(p.isr) == 3 and p.leader != drained
                             for t in metadata(servers[1], topic).topics
                             for p in t.partitions), "every partition in sync without it")
        servers[drained].stop()
        load.more(400)
    assert load.failed == []
    served = {partition for partition, _ in load.delivered[-400:]}
    assert served == {0, 1, 2, 3}
    read = read_back(servers, topic, 4, len(load.delivered))
    assert sorted(set(read)) == sorted(set(load.delivered))


def test_reassignments_over_the_kafka_protocol(start_member, etcd) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaPartition
    from kafka.errors import InvalidReplicationAssignmentError

    servers = _start(start_member, 4, *STALLED)
    topic = f"kafka-{uuid.uuid4().hex[:6]}"
    _create(servers[1], topic, partitions=2)
    _fill(servers, topic, 2)
    original = _replicas(etcd, topic)
    [frozen] = set(servers) - set(original[0])  # the new replica, stalled by the throttle
    admin = KafkaAdminClient(bootstrap_servers=[s.kafka_bootstrap for s in servers.values()])
    try:
        target = [*original[0][:2], frozen]
        outcomes = admin.alter_partition_reassignments({
            KafkaPartition(topic, 0): target,
            KafkaPartition(topic, 1): [original[1][0], original[1][0]],
        })
        assert outcomes[KafkaPartition(topic, 0)] is None
        assert outcomes[KafkaPartition(topic, 1)] is InvalidReplicationAssignmentError  # 39
        listed = admin.list_partition_reassignments()
        assert listed == {KafkaPartition(topic, 0): {
            "replicas": [*target, original[0][2]], "adding_replicas": [frozen],
            "removing_replicas": [original[0][2]]}}
        assert admin.alter_partition_reassignments({KafkaPartition(topic, 0): None}) == {
            KafkaPartition(topic, 0): None}
        wait_for(lambda: not admin.list_partition_reassignments(), "the cancellation done",
                 REASSIGNMENT_BOUND_S)
    finally:
        admin.close()


#: The throttle test's rate (bytes/s), record size and answer bound (replica_fetch_max_bytes).
THROTTLE_RATE = 50_000
RECORD_BYTES = 1_000
FETCH_BYTES_MAX = 16_384


def test_a_throttled_new_replica_fetches_within_the_rate(start_member, etcd) -> None:
    # Every server throttles: the new replica as follower, its leader as leader.
    flags = ("--replica-reassignment-throttled-rate", str(THROTTLE_RATE),
             "--replica-fetch-max-bytes", str(FETCH_BYTES_MAX))
    servers = {node: start_member(node, *MEMBER_FLAGS, *flags) for node in range(1, 5)}
    wait_for(lambda: all(len(metadata(s).brokers) == 4 for s in servers.values()),
             "4 brokers seen by every server")
    topic = f"slow-{uuid.uuid4().hex[:6]}"
    _create(servers[1], topic, partitions=1)
    original = _replicas(etcd, topic)[0]
    [newcomer] = set(servers) - set(original)
    _throttled_catch_up(servers, etcd, topic, original, newcomer)


def test_the_leader_throttles_what_it_sends_a_new_replica(start_member, etcd) -> None:
    # Kafka's leader.replication.throttled.rate: only the three original servers throttle;
    # the fourth, the new replica, would fetch as fast as it can.
    throttled = ("--replica-reassignment-throttled-rate", str(THROTTLE_RATE),
                 "--replica-fetch-max-bytes", str(FETCH_BYTES_MAX))
    servers = {node: start_member(node, *MEMBER_FLAGS, *throttled) for node in range(1, 4)}
    wait_for(lambda: all(len(metadata(s).brokers) == 3 for s in servers.values()),
             "3 brokers seen by every server")
    topic = f"slow-{uuid.uuid4().hex[:6]}"
    _create(servers[1], topic, partitions=1)
    original = _replicas(etcd, topic)[0]
    servers[4] = start_member(4, *MEMBER_FLAGS, "--replica-fetch-max-bytes",
                              str(FETCH_BYTES_MAX))
    wait_for(lambda: all(len(metadata(s).brokers) == 4 for s in servers.values()),
             "4 brokers seen by every server")
    _throttled_catch_up(servers, etcd, topic, original, 4)


def _throttled_catch_up(servers: dict[int, ServerProcess], etcd, topic: str,
                        original: list[int], newcomer: int) -> None:
    """Fill ``topic``'s partition 0 with ~400 KB, add ``newcomer`` to its replicas, and check
    that the new replica's progress never runs ahead of THROTTLE_RATE (plus one second of burst
    and one answer) until it is half caught up; then the reassignment completes."""
    # Batches below an answer's bound, so that no answer holds more than FETCH_BYTES_MAX.
    producer = Producer({"bootstrap.servers": servers[1].kafka_bootstrap, "acks": "all",
                         "linger.ms": 20, "batch.size": FETCH_BYTES_MAX // 2})
    count = 400  # ~400 KB: eight seconds at the rate, one fetch answer without the throttle
    for n in range(count):
        producer.produce(topic, value=b"%d" % n + b"x" * (RECORD_BYTES - 8), partition=0)
    assert producer.flush(60) == 0
    started = time.monotonic()
    assert _alter(servers[original[0]], topic, 0, [*original[:2], newcomer]).reason == 0
    channel, broker = _broker(servers[_leader(servers[1], topic)])
    samples = []
    with channel:
        def sampled() -> bool:
            ongoing = broker.ListPartitionReassignments(
                pb.ListPartitionReassignmentsRequest(), timeout=CALL_TIMEOUT_S).reassignments
            # None left: finished, so the new replica holds every record (an unthrottled
            # catch-up is done before the first sample).
            progress = ({p.node_id: p.log_end_offset for r in ongoing for p in r.progress}
                        if ongoing else {newcomer: count})
            samples.append((time.monotonic() - started, progress.get(newcomer, -1)))
            return progress.get(newcomer, -1) > 0
        wait_for(sampled, "the new replica fetching")
        wait_for(lambda: sampled() and samples[-1][1] >= count // 2, "half caught up")
    for elapsed_s, end in samples:
        # Bytes fetched by then: at most the rate over the time, one second of burst and one
        # answer (offsets stand for at least RECORD_BYTES each). Unthrottled it is all at once.
        assert end * RECORD_BYTES <= THROTTLE_RATE * (elapsed_s + 1) + FETCH_BYTES_MAX, samples
    wait_for(lambda: not _reassigning(etcd, topic), "the throttled reassignment done",
             REASSIGNMENT_BOUND_S)


def _leader(server: ServerProcess, topic: str) -> int:
    [described] = metadata(server, topic).topics
    return described.partitions[0].leader


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stratalog.cli", "--target", server.target,
                           *args], capture_output=True, text=True, timeout=120)


def test_a_single_server_has_nothing_to_reassign(tmp_path) -> None:
    server = launch_server(tmp_path / "single")
    try:
        assert _cli(server, "topics", "create", "solo").returncode == 0
        refused = _cli(server, "topics", "reassign", "solo", "--partition", "0",
                       "--replicas", "1,2")
        assert refused.returncode == 1
        assert "solo-0: not reassigned: INVALID_REPLICA_ASSIGNMENT" in refused.stdout
        assert "cluster mode only" in refused.stdout
        listed = _cli(server, "topics", "reassignments")
        assert listed.returncode == 0 and "No partition is being reassigned." in listed.stdout
        drained = _cli(server, "cluster", "drain", "--node", "0")
        assert drained.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in drained.stderr
    finally:
        server.stop()


def test_the_cli_reassigns_lists_progress_and_cancels(start_member, etcd) -> None:
    servers = _start(start_member, 4, *STALLED)
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    _create(servers[1], topic, partitions=1)
    _fill(servers, topic, 1)
    original = _replicas(etcd, topic)[0]
    [newcomer] = set(servers) - set(original)
    target = ",".join(map(str, [*original[:2], newcomer]))
    # The throttle keeps the new replica behind: in progress until cancelled.
    started = _cli(servers[1], "topics", "reassign", topic, "--partition", "0",
                   "--replicas", target)
    assert started.returncode == 0, started.stderr
    assert f"{topic}-0: reassignment to [{target.replace(',', ', ')}] started" in \
        started.stdout
    listed = _cli(servers[1], "topics", "reassignments")
    assert listed.returncode == 0, listed.stderr
    assert f"adding [{newcomer}]  removing [{original[2]}]" in listed.stdout
    # The leader's progress: the stalled replica has fetched nothing yet, or is behind.
    assert re.search(rf"node {newcomer} (not fetched yet|\d+ \(\d+ behind\))", listed.stdout), \
        listed.stdout
    cancelled = _cli(servers[1], "topics", "reassign", topic, "--partition", "0",
                     "--cancel", "--wait", "--timeout-s", str(REASSIGNMENT_BOUND_S))
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert f"{topic}-0: done" in cancelled.stdout
    assert _replicas(etcd, topic)[0] == original
    again = _cli(servers[1], "topics", "reassign", topic, "--partition", "0", "--cancel")
    assert again.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in again.stdout
