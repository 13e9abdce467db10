"""Consumer groups over the Kafka protocol (issue 28; server/kafka/apis/groups.py): real
clients' groups on the same coordinators as the gRPC front end.

* three confluent-kafka (librdkafka) consumer processes share a 6-partition topic, with the
  range and the cooperative-sticky assignors: every record is consumed exactly once across
  them, no two members own a partition at once, and a member that leaves hands its partitions
  to the others;
* kafka-python's KafkaConsumer, aiokafka's AIOKafkaConsumer and kcat's balanced consumer in
  a group commit, and a new consumer of the group resumes from the committed offset;
* a static member rejoins without a rebalance; a parked JoinGroup counts as a waiting request
  until it is answered or its client goes away;
* every group API authorizes as Kafka's KafkaApis; each version's shape is Kafka's;
* the coordinator's refusals reach a Kafka client with Kafka's codes: UNKNOWN_MEMBER_ID,
  ILLEGAL_GENERATION, INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED (JoinGroup v4+; before,
  a new member is admitted at once).

The server runs with ``group.initial.rebalance.delay.ms`` 0 and a small minimum session
timeout; every wait is on a condition, bounded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Producer
from kafka import KafkaConsumer
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    SyncGroupRequest,
)

from stratalog.client import Client, SyncClient
from stratalog.client.groups import membership_messages
from tests.integration.conftest import ServerProcess, launch_server, wait_until
from tests.kafka.kafka_wire import KafkaWire, ask

GROUP_FLAGS = (
    "--group-initial-rebalance-delay-ms", "0",
    "--group-min-session-timeout-ms", "100",
    "--offsets-topic-num-partitions", "3",
)
PARTITIONS = 6
RECORDS_PER_PARTITION = 20
BOUND_S = 60.0
MEMBER_SCRIPT = Path(__file__).with_name("confluent_group_member.py")


@pytest.fixture(scope="module")
def group_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = launch_server(tmp_path_factory.mktemp("kafka-groups") / "data", *GROUP_FLAGS)
    yield process
    assert process.stop(signal.SIGTERM) == 0, process.log_text()[-4000:]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(server: ServerProcess, topic: str, first: int, count: int) -> list[str]:
    """``count`` records to each partition, valued ``P-I`` for I from ``first``."""
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 5})
    values = []
    for p in range(PARTITIONS):
        for i in range(first, first + count):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
            values.append(f"{p}-{i}")
    assert producer.flush(30) == 0
    return values


class Member:
    """A confluent_group_member.py process and the events it printed (a thread reads them)."""

    def __init__(self, server: ServerProcess, topic: str, group: str, strategy: str,
                 name: str) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), server.kafka_bootstrap, topic, group, strategy,
             name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def seen(self, kind: str) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["event"] == kind]

    def owned(self) -> set[int]:
        """The partitions it owns now, by its callbacks."""
        owned: set[int] = set()
        for event in list(self.events):
            if event["event"] == "assigned":
                owned |= set(event["partitions"])
            elif event["event"] == "revoked":
                owned -= set(event["partitions"])
        return owned

    def stop(self) -> None:
        """Close the consumer (it leaves the group) and wait for the process to exit 0."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.write("stop\n")
            self.process.stdin.flush()
        assert self.process.wait(BOUND_S) == 0
        self._reader.join(BOUND_S)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _intervals(member: Member) -> dict[int, list[tuple[float, float]]]:
    """Partition -> the times [assigned, revoked] this member owned it (still owned: until
    it closed)."""
    start: dict[int, float] = {}
    owned: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
    end_t = float("inf")
    for event in member.events:
        if event["event"] == "assigned":
            for p in event["partitions"]:
                start.setdefault(p, event["t"])
        elif event["event"] == "revoked":
            for p in event["partitions"]:
                owned[p].append((start.pop(p), event["t"]))
        elif event["event"] == "closed":
            end_t = event["t"]
    for p, t in start.items():
        owned[p].append((t, end_t))
    return owned


def _commit_start(server: ServerProcess, group: str, topic: str) -> None:
    """Offset 0 of every partition committed for ``group`` (a simple commit, gRPC)."""
    async def commit() -> None:
        async with Client(server.target) as client:
            await client.offset_commit(membership_messages.OffsetCommitRequest(
                group_id=group, generation_id=-1, member_id="", group_instance_id=None,
                offsets=tuple(membership_messages.CommittedOffset(topic, p, 0)
                              for p in range(PARTITIONS))))

    asyncio.run(commit())


def _history(members: list[Member], partition: int) -> str:
    """Every member's events about ``partition`` (a failure's explanation)."""
    return "\n".join(
        f"{m.name}: {e}" for m in members for e in m.events
        if e.get("partition") == partition or partition in e.get("partitions", ())
        or e["event"] == "closed")


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_consumer_processes_share_partitions_and_take_over_a_leaving_members(
        group_server, strategy):
    """Records are produced once the group is stable (three members, two partitions each),
    and again once the two members left own every partition.

    The group's offsets start committed at 0 (by the gRPC client): librdkafka 2.16 resets a
    partition without one with a ListOffsets query, and when the partition is revoked while
    that query is in flight, the outdated reply "(re)starts the offset query timer" of the
    stopped partition, which then fetches from 0 and hands the application that record when
    the partition comes back to it, before jumping to the committed offset (its debug log
    shows it): a client bug that reads as a duplicate."""
    topic, group = _name("share"), _name("g-share")
    with SyncClient(group_server.target) as client:
        client.create_topic(topic, PARTITIONS)
    _commit_start(group_server, group, topic)
    members = [Member(group_server, topic, group, strategy, f"member-{i}") for i in range(3)]
    try:
        def consumed() -> list[str]:
            return [r["value"] for m in members for r in m.seen("record")]

        wait_until(lambda: sorted(len(m.owned()) for m in members) == [2, 2, 2],
                   "three members own two partitions each", timeout_s=BOUND_S)
        expected = _produce(group_server, topic, 0, RECORDS_PER_PARTITION)
        wait_until(lambda: len(consumed()) >= len(expected),
                   "the three members consumed every record", timeout_s=BOUND_S)
        leaving = members[0]
        handed = leaving.owned()
        leaving.stop()
        wait_until(lambda: members[1].owned() | members[2].owned() == set(range(PARTITIONS)),
                   "the two members left took every partition", timeout_s=BOUND_S)
        taken = members[1].owned() | members[2].owned()
        expected += _produce(group_server, topic, RECORDS_PER_PARTITION, RECORDS_PER_PARTITION)
        wait_until(lambda: len(consumed()) >= len(expected),
                   "the two members left consumed every record", timeout_s=BOUND_S)
        for member in members[1:]:
            member.stop()
    finally:
        for member in members:
            member.kill()
    # A cooperative member consuming through a rebalance may have a commit refused
    # REBALANCE_IN_PROGRESS (the group completes the rebalance) or ILLEGAL_GENERATION (its
    # generation just ended), as Kafka refuses them; the revoke callback's commit never is.
    failed = [e for m in members for e in m.seen("commit_failed")]
    assert [e for e in failed if e["revoking"] or not (
        "REBALANCE_IN_PROGRESS" in e["error"] or "ILLEGAL_GENERATION" in e["error"])] == []
    # Every record exactly once across the members.
    counts = collections.Counter(consumed())
    wrong = sorted(v for v in set(counts) | set(expected) if counts[v] != 1)
    assert wrong == [], _history(members, int(wrong[0].split("-")[0]))
    # The leaving member's partitions moved, and their new records were read by the others.
    assert handed and handed <= taken
    late = {r["partition"] for m in members[1:] for r in m.seen("record")
            if int(r["value"].split("-")[1]) >= RECORDS_PER_PARTITION}
    assert handed <= late
    # No two members owned a partition at once, and each read only what it owned.
    for p in range(PARTITIONS):
        spans = sorted((s, e, m.name) for m in members for s, e in _intervals(m).get(p, []))
        for (_, end, first), (start, _, second) in itertools.pairwise(spans):
            assert end <= start, f"partition {p}: {first} and {second} owned it at once"
    for member in members:
        spans = _intervals(member)
        for record in member.seen("record"):
            assert any(s <= record["t"] <= e for s, e in spans.get(record["partition"], [])), (
                f"{member.name} read partition {record['partition']} while not owning it")


def test_kafka_python_consumer_commits_and_a_new_one_resumes(group_server):
    topic, group = _name("resume"), _name("g-kp")
    with SyncClient(group_server.target) as client:
        client.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": group_server.kafka_bootstrap})
    for i in range(40):
        producer.produce(topic, value=f"r{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    def consumer() -> KafkaConsumer:
        return KafkaConsumer(
            topic, bootstrap_servers=group_server.kafka_bootstrap, group_id=group,
            auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=6000, heartbeat_interval_ms=200, consumer_timeout_ms=15_000)

    first = consumer()
    got = []
    for message in first:
        got.append(message.value)
        if len(got) == 30:
            break
    first.commit()
    committed = {tp.partition: first.committed(tp) for tp in first.assignment()}
    first.close()
    assert sum(committed.values()) == 30
    second = consumer()
    rest = []
    for message in second:
        rest.append(message.value)
        if len(rest) == 10:
            break
    second.close()
    assert sorted(got + rest) == sorted(f"r{i}".encode() for i in range(40))


def test_aiokafka_consumer_commits_and_a_new_one_resumes(group_server):
    topic, group = _name("aio"), _name("g-aio")
    with SyncClient(group_server.target) as client:
        client.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": group_server.kafka_bootstrap})
    for i in range(40):
        producer.produce(topic, value=f"a{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    async def read(count: int) -> tuple[list[bytes], dict[int, int]]:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=group_server.kafka_bootstrap, group_id=group,
            auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=6000, heartbeat_interval_ms=200)
        await consumer.start()
        try:
            got = []
            while len(got) < count:
                message = await asyncio.wait_for(consumer.getone(), BOUND_S)
                got.append(message.value)
            await consumer.commit()
            committed = {tp.partition: await consumer.committed(tp)
                         for tp in consumer.assignment()}
        finally:
            await consumer.stop()
        return got, committed

    got, committed = asyncio.run(read(25))
    assert sum(committed.values()) == 25
    rest, committed = asyncio.run(read(15))
    assert sorted(got + rest) == sorted(f"a{i}".encode() for i in range(40))
    assert committed == {0: 20, 1: 20}


# ---------------------------------------------------------------- the coordinator's refusals


def _join(wire: KafkaWire, group: str, member_id: str = "", *, session_timeout_ms: int = 6000,
          rebalance_timeout_ms: int = 10_000, version: int = 5) -> object:
    return ask(wire, JoinGroupRequest(
        group_id=group, session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        member_id=member_id, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")]),
        version=version)


def _member(wire: KafkaWire, group: str, **timeouts: int) -> tuple[str, int]:
    """A member that joined ``group`` alone and synced: its member id and generation.
    ``timeouts``: _join's session and rebalance timeouts."""
    required = _join(wire, group, **timeouts)
    assert required.error_code == 79  # MEMBER_ID_REQUIRED (KIP-394, JoinGroup v4+)
    assert required.member_id
    joined = _join(wire, group, required.member_id, **timeouts)
    assert joined.error_code == 0 and joined.leader == joined.member_id == required.member_id
    assert [m.member_id for m in joined.members] == [joined.member_id]
    assert bytes(joined.members[0].metadata) == b"m"  # the member's bytes, unchanged
    synced = ask(wire, SyncGroupRequest(
        group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=joined.member_id, assignment=b"\x00\x01assigned")]), version=3)
    assert synced.error_code == 0 and bytes(synced.assignment) == b"\x00\x01assigned"
    return joined.member_id, joined.generation_id


def test_refusals_carry_kafkas_error_codes(group_server):
    group = _name("g-codes")
    with KafkaWire(group_server.kafka_bootstrap) as wire:
        member_id, generation = _member(wire, group)

        def beat(member: str, gen: int) -> int:
            return ask(wire, HeartbeatRequest(group_id=group, generation_id=gen,
                                              member_id=member), version=3).error_code

        assert beat(member_id, generation) == 0
        assert beat("nobody", generation) == 25  # UNKNOWN_MEMBER_ID
        assert beat(member_id, generation + 7) == 22  # ILLEGAL_GENERATION
        # Outside [group.min.session.timeout.ms, group.max.session.timeout.ms].
        assert _join(wire, _name("g-codes"), session_timeout_ms=50).error_code == 26
        # Before v4 (KIP-394) a new member is admitted at once, with its id.
        old = _join(wire, _name("g-old"), version=3)
        assert old.error_code == 0 and old.member_id and old.leader == old.member_id



# ---------------------------------------------------------------- authorization


def _bindings(principal: str) -> list:
    """READ and DELETE on group ``g-ok`` (READ allows DESCRIBE), READ on topic ``t-ok``."""
    from stratalog.client import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    def allow(resource_type: object, name: str, operation: object) -> AclBinding:
        return AclBinding(resource_type, name, PatternType.LITERAL, principal, "*", operation,
                          AclPermissionType.ALLOW)

    return [allow(ResourceType.GROUP, "g-ok", AclOperation.READ),
            allow(ResourceType.GROUP, "g-ok", AclOperation.DELETE),
            allow(ResourceType.TOPIC, "t-ok", AclOperation.READ)]


def test_group_apis_authorize_as_kafka(start_server, tmp_path):
    """KafkaApis' checks, for the principal of a plaintext Kafka client (User:ANONYMOUS):
    DESCRIBE on the group (FindCoordinator, DescribeGroups, OffsetFetch), READ (JoinGroup,
    SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, with READ on each topic), DELETE
    (DeleteGroups, OffsetDelete), DESCRIBE on the transactional id; ListGroups and a fetch of
    every offset leave out what the caller may not DESCRIBE."""
    from kafka.protocol.admin.groups import (
        DeleteGroupsRequest,
        DescribeGroupsRequest,
        ListGroupsRequest,
    )
    from kafka.protocol.consumer.group import (
        LeaveGroupRequest,
        OffsetCommitRequest,
        OffsetDeleteRequest,
        OffsetFetchRequest,
    )
    from kafka.protocol.metadata import FindCoordinatorRequest

    anonymous = "User:ANONYMOUS"
    data = tmp_path / "data"
    commit_topic = OffsetCommitRequest.OffsetCommitRequestTopic
    commit_partition = commit_topic.OffsetCommitRequestPartition

    def commit(wire: KafkaWire, group: str) -> dict[str, int]:
        response = ask(wire, OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
                commit_topic(name=name, partitions=[commit_partition(
                    partition_index=0, committed_offset=1)]) for name in ("t-ok", "t-no")]),
            version=8)
        return {t.name: t.partitions[0].error_code for t in response.topics}

    # 1. A super user makes the topics and both groups' offsets, and grants the ACLs.
    server = start_server(data, "--authorizer", "acl", "--super-users", anonymous,
                          *GROUP_FLAGS)
    with SyncClient(server.target) as client:
        for name in ("t-ok", "t-no"):
            client.create_topic(name, 1)
            client.produce(name, 0, [b"r"] * 3)
        client.create_acls(_bindings(anonymous))
    with KafkaWire(server.kafka_bootstrap) as wire:
        assert commit(wire, "g-ok") == commit(wire, "g-no") == {"t-ok": 0, "t-no": 0}
    assert server.stop() == 0

    # 2. Without super users: the ACLs decide.
    server = start_server(data, "--authorizer", "acl", *GROUP_FLAGS)
    with KafkaWire(server.kafka_bootstrap) as wire:
        def find(key: str, key_type: int = 0) -> int:
            return ask(wire, FindCoordinatorRequest(key=key, key_type=key_type),
                             version=3).error_code

        assert (find("g-ok"), find("g-no"), find("tx", 1)) == (0, 30, 53)
        batched = ask(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=["g-ok", "g-no"]),
                            version=4)
        assert [(c.key, c.error_code, c.node_id) for c in batched.coordinators] == [
            ("g-ok", 0, 0), ("g-no", 30, -1)]
        assert _join(wire, "g-no").error_code == 30
        assert _join(wire, "g-ok").error_code == 79  # allowed: MEMBER_ID_REQUIRED
        assert ask(wire, HeartbeatRequest(group_id="g-no", generation_id=1, member_id="m"),
                         version=3).error_code == 30
        assert ask(wire, SyncGroupRequest(group_id="g-no", generation_id=1, member_id="m",
                                          assignments=[]), version=3).error_code == 30
        assert ask(wire, LeaveGroupRequest(group_id="g-no", members=[
            LeaveGroupRequest.MemberIdentity(member_id="m")]), version=3).error_code == 30
        assert commit(wire, "g-ok") == {"t-ok": 0, "t-no": 29}
        assert commit(wire, "g-no") == {"t-ok": 30, "t-no": 30}
        fetch_group = OffsetFetchRequest.OffsetFetchRequestGroup
        fetched = ask(wire, OffsetFetchRequest(groups=[
            fetch_group(group_id="g-ok", topics=None),
            fetch_group(group_id="g-ok", topics=[fetch_group.OffsetFetchRequestTopics(
                name="t-no", partition_indexes=[0])]),
            fetch_group(group_id="g-no", topics=None)]), version=8)
        assert [(g.group_id, g.error_code, [(t.name, [(p.committed_offset, p.error_code)
                                                      for p in t.partitions])
                                            for t in g.topics])
                for g in fetched.groups] == [
            ("g-ok", 0, [("t-ok", [(1, 0)])]),  # t-no's offset left out
            ("g-ok", 0, [("t-no", [(-1, 29)])]),
            ("g-no", 30, []),
        ]
        listed = ask(wire, ListGroupsRequest(), version=4)
        assert [g.group_id for g in listed.groups] == ["g-ok"]
        described = ask(wire, DescribeGroupsRequest(groups=["g-ok", "g-no"],
                                                    include_authorized_operations=True),
                              version=5)
        assert [(g.group_id, g.error_code) for g in described.groups] == [
            ("g-ok", 0), ("g-no", 30)]
        assert described.groups[0].authorized_operations == {3, 6, 8}  # READ, DELETE, DESCRIBE
        delete_topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
        deleted = ask(wire, OffsetDeleteRequest(group_id="g-ok", topics=[
            delete_topic(name=name, partitions=[
                delete_topic.OffsetDeleteRequestPartition(partition_index=0)])
            for name in ("t-ok", "t-no")]), version=0)
        assert deleted.error_code == 0
        assert {t.name: t.partitions[0].error_code for t in deleted.topics} == {
            "t-ok": 0, "t-no": 29}
        assert ask(wire, OffsetDeleteRequest(group_id="g-no", topics=[]),
                         version=0).error_code == 30
        groups_deleted = ask(wire, DeleteGroupsRequest(groups_names=["g-no", "g-ok"]),
                                   version=2)
        assert {r.group_id: r.error_code for r in groups_deleted.results} == {
            "g-no": 30, "g-ok": 0}
    assert server.stop() == 0


# ---------------------------------------------------------------- versions


def test_each_versions_shape_is_kafkas(group_server):
    """JoinGroup v0 (no rebalance timeout) and v7+ (a null protocol type and name when there
    is none), LeaveGroup v0-v2 (one member, its error at the top) and v3+ (members each with
    an error), SyncGroup v5 (protocol type and name required), OffsetFetch v1 (a group's error
    in each partition), FindCoordinator v0 (no key type)."""
    from kafka.protocol.consumer.group import LeaveGroupRequest, OffsetFetchRequest
    from kafka.protocol.metadata import FindCoordinatorRequest

    group = _name("g-versions")
    with KafkaWire(group_server.kafka_bootstrap) as wire:
        found = ask(wire, FindCoordinatorRequest(key=group), version=0)
        assert (found.error_code, found.node_id) == (0, 0)
        assert f"{found.host}:{found.port}" == group_server.kafka_bootstrap
        joined = _join(wire, group, version=0)  # admitted at once, the session as rebalance
        assert joined.error_code == 0 and joined.leader == joined.member_id
        assert joined.protocol_name == "range"
        # v7+: an error answer's protocol name is null (before v7: "").
        refused = _join(wire, group, "nobody", version=7)
        assert (refused.error_code, refused.protocol_name) == (25, None)
        assert _join(wire, group, "nobody", version=6).protocol_name == ""
        no_protocol = ask(wire, SyncGroupRequest(
            group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
            assignments=[]), version=5)
        assert no_protocol.error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
        left = ask(wire, LeaveGroupRequest(group_id=group, member_id="nobody"), version=1)
        assert left.error_code == 25
        left = ask(wire, LeaveGroupRequest(group_id=group, members=[
            LeaveGroupRequest.MemberIdentity(member_id=joined.member_id),
            LeaveGroupRequest.MemberIdentity(member_id="nobody")]), version=3)
        assert left.error_code == 0
        assert [(m.member_id, m.error_code) for m in left.members] == [
            (joined.member_id, 0), ("nobody", 25)]
        # A group name that is not valid: the error is each partition's before v2.
        fetched = ask(wire, OffsetFetchRequest(group_id="", topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]),
            version=1)
        assert [(p.partition_index, p.committed_offset, p.error_code)
                for p in fetched.topics[0].partitions] == [(0, -1, 24), (1, -1, 24)]
        fetched = ask(wire, OffsetFetchRequest(group_id="", topics=None), version=2)
        assert (fetched.error_code, fetched.topics) == (24, [])


def test_a_static_member_rejoins_without_a_rebalance(group_server):
    """KIP-345 over Kafka's protocol: a member with a group.instance.id joins at once (no
    MEMBER_ID_REQUIRED), and when it comes back with no member id (a restart) it takes its
    instance's place without a rebalance: same generation, and as the leader it is told to
    skip the assignment (JoinGroup v9, KIP-814); its old member id is fenced."""
    group = _name("g-static")

    def join(wire: KafkaWire, member_id: str = "") -> object:
        return ask(wire, JoinGroupRequest(
            group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=10_000,
            member_id=member_id, group_instance_id="instance-1", protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")]),
            version=9)

    with KafkaWire(group_server.kafka_bootstrap) as wire:
        first = join(wire)
        assert first.error_code == 0 and first.member_id.startswith("instance-1-")
        synced = ask(wire, SyncGroupRequest(
            group_id=group, generation_id=first.generation_id, member_id=first.member_id,
            group_instance_id="instance-1", protocol_type="consumer", protocol_name="range",
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=first.member_id, assignment=b"a")]), version=5)
        assert (synced.error_code, synced.protocol_name, bytes(synced.assignment)) == (
            0, "range", b"a")
        again = join(wire)
        assert again.error_code == 0 and again.member_id != first.member_id
        assert again.generation_id == first.generation_id
        assert again.skip_assignment and again.leader == again.member_id
        fenced = ask(wire, HeartbeatRequest(
            group_id=group, generation_id=first.generation_id, member_id=first.member_id,
            group_instance_id="instance-1"), version=4)
        assert fenced.error_code == 82  # FENCED_INSTANCE_ID
        assert ask(wire, HeartbeatRequest(
            group_id=group, generation_id=again.generation_id, member_id=again.member_id,
            group_instance_id="instance-1"), version=4).error_code == 0


def test_a_parked_join_is_a_waiting_request(group_server):
    """A JoinGroup that waits for its group's rebalance counts in the server's waiting
    requests (kind group_rebalance, client_limits.py) until it is answered, as over gRPC."""
    group = _name("g-parked")
    waiting = 'stratalog_waiting_rpcs{kind="group_rebalance"}'
    wait_until(lambda: group_server.metric(waiting) == 0, "no other parked join")
    with KafkaWire(group_server.kafka_bootstrap) as first, \
            KafkaWire(group_server.kafka_bootstrap) as second:
        member_id, generation = _member(first, group)
        required = _join(second, group)
        assert required.error_code == 79
        answers: list[object] = []
        # The second member's join parks until the first rejoins (it learns of the
        # rebalance at its next heartbeat).
        joining = threading.Thread(
            target=lambda: answers.append(_join(second, group, required.member_id)))
        joining.start()
        try:
            wait_until(lambda: group_server.metric(waiting) == 1, "the second join parked")
            beat = ask(first, HeartbeatRequest(group_id=group, generation_id=generation,
                                               member_id=member_id), version=4)
            assert beat.error_code == 27  # REBALANCE_IN_PROGRESS: rejoin
            rejoined = _join(first, group, member_id)
        finally:
            joining.join(BOUND_S)
        (answer,) = answers
        assert rejoined.error_code == answer.error_code == 0
        assert rejoined.generation_id == answer.generation_id == generation + 1
        assert sorted(m.member_id for m in rejoined.members) == sorted(
            [member_id, required.member_id])
    wait_until(lambda: group_server.metric(waiting) == 0, "the parked join was answered")


def test_a_parked_join_whose_client_goes_away_stops_counting(group_server):
    """The connection of a parked JoinGroup closes: the request no longer counts as waiting,
    and the group goes on with the members left."""
    group = _name("g-gone")
    waiting = 'stratalog_waiting_rpcs{kind="group_rebalance"}'
    wait_until(lambda: group_server.metric(waiting) == 0, "no other parked join")
    with KafkaWire(group_server.kafka_bootstrap) as first:
        # The first member neither heartbeats nor rejoins while the test waits on the server's
        # metrics: timeouts long enough for a loaded machine (6 s expired it once).
        member_id, generation = _member(first, group, session_timeout_ms=60_000,
                                        rebalance_timeout_ms=60_000)
        second = KafkaWire(group_server.kafka_bootstrap)
        required = _join(second, group)
        joining = threading.Thread(target=lambda: _swallow(
            lambda: _join(second, group, required.member_id)))
        joining.start()
        wait_until(lambda: group_server.metric(waiting) == 1, "the second join parked")
        second.close()  # the client goes away while its join waits
        wait_until(lambda: group_server.metric(waiting) == 0, "the parked join stopped counting")
        joining.join(BOUND_S)
        beat = ask(first, HeartbeatRequest(group_id=group, generation_id=generation,
                                           member_id=member_id), version=4)
        assert beat.error_code == 27  # the rebalance the second join began goes on
        rejoined = _join(first, group, member_id)
        assert rejoined.error_code == 0 and rejoined.generation_id > generation


def _swallow(call: Callable[[], object]) -> None:
    """Run ``call``; the error of a socket closed under it is expected: an OSError, or the
    empty read KafkaWire reports as the connection closed (AssertionError)."""
    with contextlib.suppress(OSError, AssertionError):
        call()


def test_kcat_balanced_consumer_commits_and_resumes(group_server, kcat):
    """kcat -G (librdkafka's balanced consumer, auto-commit): a second run of the group reads
    only what was produced since the first, which the gRPC client sees committed."""
    topic, group = _name("kcat"), _name("g-kcat")
    with SyncClient(group_server.target) as client:
        client.create_topic(topic, 2)
        for p in range(2):
            client.produce(topic, p, [b"%d-%d" % (p, i) for i in range(5)])

    def consume() -> list[str]:
        out = subprocess.run(
            [kcat, "-b", group_server.kafka_bootstrap, "-G", group, "-e", "-X",
             "auto.offset.reset=earliest", "-f", "%s\n", topic],
            capture_output=True, check=True, timeout=BOUND_S)
        return sorted(out.stdout.decode().split())

    assert consume() == sorted(f"{p}-{i}" for p in range(2) for i in range(5))
    with SyncClient(group_server.target) as client:
        client.produce(topic, 1, [b"1-5", b"1-6"])
    assert consume() == ["1-5", "1-6"]

    async def committed() -> dict[int, int]:
        async with Client(group_server.target) as client:
            found = await client.offset_fetch(group)
        return {tp.partition: c.offset for tp, c in found.items()}

    assert asyncio.run(committed()) == {0: 5, 1: 7}
