"""Issue 27's "Bad input and faults" against real server processes (docs/groups.md).

- Bad input over the client API (the Consumer, and the Client's group RPCs as a tool sends
  them): an empty or over-long group id, a commit for an unknown topic or partition, an offset
  beyond the log end, a commit from a stale generation or an unknown member, a fenced static
  instance, a join beyond ``group.max.size``: each a clear error naming the problem, and
  nothing written (the ``__consumer_offsets`` log ends unchanged).
- A corrupt ``__consumer_offsets`` record stops nothing: in the segment of a stopped server, a
  commit's value made undecodable (the batch's CRC written again): the load skips the record
  with a log line naming its offset and serves the other groups; the batch's CRC left wrong:
  after a clean stop the load skips the batch, after kill -9 storage recovery cuts the log there.
- kill -9 of the server while several members commit and while another group is between the
  JoinGroups and SyncGroups of a generation: after the restart every acknowledged commit is
  there, the interrupted generation is refused and the group forms a new one; a committed
  transaction's offsets are there, an open one's stay pending until its producer aborts it;
  group Consumers killed in a rebalance form the group again in a newer generation.

Every wait is on a condition, bounded; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from stratalog.client import Client, Consumer, Producer
from stratalog.client.errors import (
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InvalidGroupIdError,
    MemberIdRequiredError,
    OffsetOutOfRangeError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
)
from stratalog.client.groups import membership_messages as m
from stratalog.client.groups.consumer_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from stratalog.client.groups.membership_messages import GroupMetadata
from stratalog.client.types import TopicPartition
from stratalog.client.wire import LATEST
from stratalog.records import iter_batch_headers
from stratalog.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET
from stratalog.records.crc import crc32c

from .conftest import ServerProcess, free_port, launch_server, until

OFFSETS_PARTITIONS = 2
GROUP_MAX_SIZE = 2
SERVER_FLAGS = (
    "--group-initial-rebalance-delay-ms", "0",
    "--group-min-session-timeout-ms", "100",
    "--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS),
    "--group-max-size", str(GROUP_MAX_SIZE),
)
#: Short timers; no auto-commit, so that a member writes nothing the test does not ask for.
MEMBER = {
    "session_timeout_ms": 6_000,
    "heartbeat_interval_ms": 200,
    "retry_backoff_ms": 50,
    "retry_backoff_max_ms": 500,
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
}
TOPIC = "faults"
TOPIC_RECORDS = 5
BOUND_S = 60.0


@pytest.fixture(scope="module")
def group_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = launch_server(tmp_path_factory.mktemp("faults") / "data", *SERVER_FLAGS)
    yield process
    assert process.stop(signal.SIGTERM) == 0, process.log_text()[-4000:]


@pytest.fixture
async def client(group_server: ServerProcess) -> AsyncIterator[Client]:
    async with Client(group_server.target, timeout_s=30) as client:
        if TOPIC not in {t.name for t in await client.list_topics()}:
            await client.create_topic(TOPIC, 2)
            # Records in each partition: every member of a group gets one to read.
            async with Producer(client) as producer:
                for partition in range(2):
                    await producer.send_many(TOPIC, [b"r"] * TOPIC_RECORDS, partition=partition)
            # A first commit creates __consumer_offsets, whose ends the tests compare.
            await client.offset_commit(_commit("g-first", (TOPIC, 0, 1)))
        yield client


def _commit(group: str, *offsets: tuple[str, int, int], generation_id: int = -1,
            member_id: str = "", group_instance_id: str | None = None) -> m.OffsetCommitRequest:
    return m.OffsetCommitRequest(
        group, generation_id, member_id, group_instance_id,
        tuple(m.CommittedOffset(topic, partition, offset) for topic, partition, offset in offsets))


async def offsets_log_ends(client: Client) -> list[int]:
    """The log end offset of each ``__consumer_offsets`` partition."""
    return [(await client.list_offsets("__consumer_offsets", p, LATEST)).offset
            for p in range(OFFSETS_PARTITIONS)]


async def _first_record(consumer: Consumer) -> None:
    """Reads one record: the consumer is then a member with an assignment."""
    async def read() -> None:
        async for _record in consumer:
            return

    await asyncio.wait_for(read(), BOUND_S)


async def _read_all(consumer: Consumer) -> None:
    """Reads until the consumer's iteration raises (a group member's never ends)."""
    async for _record in consumer:
        pass


async def test_simple_commits_of_bad_input_are_refused_naming_the_problem(
    client: Client,
) -> None:
    ends = await offsets_log_ends(client)
    refusals = [
        (_commit("g" * 256, (TOPIC, 0, 1)), InvalidGroupIdError,
         "group id of 256 characters: it must have 1 to 255"),
        (_commit("g-bad", ("no-such-topic", 0, 1)), UnknownTopicOrPartitionError,
         "cannot commit an offset of no-such-topic-0: unknown topic 'no-such-topic'"),
        (_commit("g-bad", (TOPIC, 7, 1)), UnknownTopicOrPartitionError,
         "there is no partition 7"),
        (_commit("g-bad", (TOPIC, 0, TOPIC_RECORDS + 1)), OffsetOutOfRangeError,
         f"cannot commit offset {TOPIC_RECORDS + 1} of {TOPIC}-0: beyond its log end offset "
         f"{TOPIC_RECORDS}"),
        # All or nothing: one bad partition refuses the good one beside it.
        (_commit("g-bad", (TOPIC, 0, 2), ("no-such-topic", 0, 1)), UnknownTopicOrPartitionError,
         "unknown topic 'no-such-topic'"),
    ]
    for request, error, words in refusals:
        with pytest.raises(error) as caught:
            await client.offset_commit(request)
        assert words in str(caught.value), (request, caught.value)
    with pytest.raises(ValueError, match="non-empty string, got ''"):
        await client.offset_commit(_commit("", (TOPIC, 0, 1)))
    with pytest.raises(ValueError, match="group_id must be a non-empty string"):
        Consumer(client, topics=[TOPIC], group_id="")
    assert await offsets_log_ends(client) == ends, "a refused commit wrote to __consumer_offsets"
    assert await client.offset_fetch("g-bad") == {}


async def test_an_over_long_group_id_is_refused_at_the_readers_poll(client: Client) -> None:
    ends = await offsets_log_ends(client)
    consumer = Consumer(client, topics=[TOPIC], group_id="x" * 300, **MEMBER)
    try:
        with pytest.raises(InvalidGroupIdError, match="group id of 300 characters"):
            await _first_record(consumer)
    finally:
        await consumer.close()
    assert await offsets_log_ends(client) == ends


async def test_member_commits_of_bad_input_are_refused_naming_the_problem(
    client: Client,
) -> None:
    group = "g-member"
    consumer = Consumer(client, topics=[TOPIC], group_id=group, **MEMBER)
    try:
        await _first_record(consumer)
        member = consumer.group_metadata()
        ends = await offsets_log_ends(client)
        tp = TopicPartition(TOPIC, 0)
        with pytest.raises(UnknownTopicOrPartitionError, match="unknown topic 'no-such-topic'"):
            await consumer.commit({TopicPartition("no-such-topic", 0): 1})
        with pytest.raises(OffsetOutOfRangeError, match=f"beyond its log end offset {TOPIC_RECORDS}"):
            await consumer.commit({tp: 99})
        refusals = [
            (_commit(group, (TOPIC, 0, 1), generation_id=member.generation_id - 1,
                     member_id=member.member_id), IllegalGenerationError,
             f"group {group}: generation {member.generation_id - 1} is not the group's "
             f"{member.generation_id}"),
            (_commit(group, (TOPIC, 0, 1), generation_id=member.generation_id,
                     member_id="nobody"), UnknownMemberIdError,
             f"group {group}: no member 'nobody'"),
            # A simple commit (no member id) while the group has members.
            (_commit(group, (TOPIC, 0, 1)), UnknownMemberIdError,
             "accepted only while it has no members"),
        ]
        for request, error, words in refusals:
            with pytest.raises(error) as caught:
                await client.offset_commit(request)
            assert words in str(caught.value), (request, caught.value)
        assert await offsets_log_ends(client) == ends
        assert await consumer.committed([tp]) == {tp: None}
        # The member itself is unharmed: its own commit goes through.
        await consumer.commit({tp: 1})
        assert await consumer.committed([tp]) == {tp: 1}
    finally:
        await consumer.close()


async def test_a_fenced_static_instance_is_refused(client: Client) -> None:
    group = "g-static"
    first = Consumer(client, topics=[TOPIC], group_id=group, group_instance_id="host-1", **MEMBER)
    second = Consumer(client, topics=[TOPIC], group_id=group, group_instance_id="host-1",
                      **MEMBER)
    try:
        await _first_record(first)
        fenced = first.group_metadata()
        await _first_record(second)  # the same instance, a new member id: the first is fenced
        assert second.group_metadata().member_id != fenced.member_id
        ends = await offsets_log_ends(client)
        with pytest.raises(FencedInstanceIdError) as caught:
            await client.offset_commit(_commit(
                group, (TOPIC, 0, 1), generation_id=fenced.generation_id,
                member_id=fenced.member_id, group_instance_id="host-1"))
        assert "host-1" in str(caught.value), caught.value
        # The fenced member's reader learns it at a poll, once its heartbeat was refused
        # (records fetched before may be handed out first, as Kafka's poll does).
        with pytest.raises(FencedInstanceIdError):
            await asyncio.wait_for(_read_all(first), BOUND_S)
        assert await offsets_log_ends(client) == ends
    finally:
        await first.close()
        await second.close()


async def test_a_join_beyond_group_max_size_is_refused(client: Client) -> None:
    group = "g-full"
    members = [Consumer(client, topics=[TOPIC], group_id=group, **MEMBER)
               for _ in range(GROUP_MAX_SIZE + 1)]
    try:
        for member in members[:GROUP_MAX_SIZE]:
            await _first_record(member)
        ends = await offsets_log_ends(client)
        with pytest.raises(GroupMaxSizeReachedError) as caught:
            await _first_record(members[-1])
        assert group in str(caught.value) and str(GROUP_MAX_SIZE) in str(caught.value), (
            caught.value)
        assert await offsets_log_ends(client) == ends
        (described,) = await client.describe_groups([group])
        assert len(described.members) == GROUP_MAX_SIZE
    finally:
        for member in members:
            await member.close()


# ------------------------------------------------------------------ a corrupt __consumer_offsets


def _offsets_segment(data_dir: Path) -> Path:
    """The one segment of ``__consumer_offsets-0`` (a few commits fill no more)."""
    (segment,) = sorted((data_dir / "__consumer_offsets-0").glob("*.log"))
    return segment


def _batch_holding(data: bytes, needle: bytes) -> tuple[int, int, int]:
    """(position, size, base offset) of the batch whose bytes hold ``needle`` (once)."""
    at = data.index(needle)
    assert data.find(needle, at + 1) == -1, f"{needle!r} twice in the segment"
    for header in iter_batch_headers(data):
        if header.position <= at < header.position + header.size_bytes:
            return header.position, header.size_bytes, header.base_offset
    raise AssertionError(f"{needle!r} is in no batch")


def _damage_commit_value(segment: Path, group: str, topic: str, *, recompute_crc: bool) -> int:
    """Make the offset commit of ``group`` (the one record of its batch) a value that does not
    decode: its schema version becomes 32767, which no reader knows. With ``recompute_crc`` the
    batch's CRC is written again, so the batch reads as whole. Returns the record's offset."""
    data = bytearray(segment.read_bytes())
    # The key of an offset commit: version int16 (1), group, topic (int16 length + UTF-8),
    # partition int32 (docs/groups.md); the record's value length (a varint) follows it.
    key = (struct.pack(">hh", 1, len(group)) + group.encode()
           + struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", 0))
    position, size, base_offset = _batch_holding(bytes(data), key)
    value_length_at = data.index(key, position) + len(key)
    assert data[value_length_at] < 0x80, "a one-byte varint: the value is short"
    version_at = value_length_at + 1
    assert struct.unpack_from(">h", data, version_at)[0] in (1, 2, 3), "not a commit value"
    struct.pack_into(">h", data, version_at, 32767)
    if recompute_crc:
        struct.pack_into(">I", data, position + CRC_OFFSET,
                         crc32c(bytes(data[position + ATTRIBUTES_OFFSET:position + size])))
    segment.write_bytes(bytes(data))
    return base_offset


async def _simple_commits(target: str, commits: dict[str, int]) -> None:
    async with Client(target, timeout_s=30) as client:
        for group, offset in commits.items():
            await client.offset_commit(_commit(group, (TOPIC, 0, offset)))


async def _committed(target: str, group: str) -> int | None:
    async with Client(target, timeout_s=30) as client:
        found = await client.offset_fetch(group)
    committed = found.get(TopicPartition(TOPIC, 0))
    return None if committed is None else committed.offset


CORRUPT_FLAGS = (*SERVER_FLAGS[:4], "--offsets-topic-num-partitions", "1")
COMMITS = {"g-before": 3, "g-corrupt": 4, "g-after": 5}


@pytest.mark.parametrize(("recompute_crc", "skipped"), [
    # A value that does not decode in a batch whose CRC holds: the record is skipped.
    (True, "skipping the record at offset {offset}, which does not decode"),
    # A batch whose CRC fails after a clean stop: storage recovery does not read the segments,
    # so it reaches the coordinator's load, which skips the whole batch (its one record) with a
    # log line naming its offsets and loads the rest (before the fix, the load stopped and every
    # group of the partition answered COORDINATOR_LOAD_IN_PROGRESS for good).
    (False, "skipping the batch at offsets {offset}-{offset}, which does not decode"),
], ids=["record", "batch-crc"])
async def test_a_commit_that_does_not_decode_is_skipped_at_load(
    start_server: Callable[..., ServerProcess], tmp_path: Path, recompute_crc: bool,
    skipped: str,
) -> None:
    data_dir = tmp_path / "data"
    server = await _server_with_commits(start_server, data_dir)
    assert server.stop(signal.SIGTERM) == 0
    offset = _damage_commit_value(_offsets_segment(data_dir), "g-corrupt", TOPIC,
                                  recompute_crc=recompute_crc)
    server = start_server(data_dir, *CORRUPT_FLAGS)
    assert await _committed(server.target, "g-before") == 3
    assert await _committed(server.target, "g-after") == 5
    assert await _committed(server.target, "g-corrupt") is None
    assert f"__consumer_offsets-0: {skipped.format(offset=offset)}" in server.log_text()
    # The group is usable again: a new commit is kept.
    await _simple_commits(server.target, {"g-corrupt": 6})
    assert await _committed(server.target, "g-corrupt") == 6


async def test_a_batch_failing_its_crc_after_a_kill_is_cut_by_recovery(
    start_server: Callable[..., ServerProcess], tmp_path: Path,
) -> None:
    """After kill -9, storage recovery checks every batch of the unflushed segments and cuts
    the log at the first that fails its CRC (as Kafka's LogSegment.recover): the damaged
    commit and every one after it are gone (g-after's, acknowledged, too: the log is damaged,
    docs/storage.md), the ones before are served, and the coordinator loads and serves on."""
    data_dir = tmp_path / "data"
    server = await _server_with_commits(start_server, data_dir)
    server.kill()
    segment = _offsets_segment(data_dir)
    _damage_commit_value(segment, "g-corrupt", TOPIC, recompute_crc=False)
    server = start_server(data_dir, *CORRUPT_FLAGS)
    assert await _committed(server.target, "g-before") == 3
    assert await _committed(server.target, "g-corrupt") is None
    assert await _committed(server.target, "g-after") is None
    assert "recovery stops at a batch of" in server.log_text()
    assert f"of segment {segment} failing its CRC" in server.log_text()
    await _simple_commits(server.target, {"g-after": 6})
    assert await _committed(server.target, "g-after") == 6


async def _server_with_commits(start_server: Callable[..., ServerProcess],
                               data_dir: Path) -> ServerProcess:
    """A server on ``data_dir`` with a topic and COMMITS' simple commits, one batch each, in
    this order, in ``__consumer_offsets``' one partition."""
    server = start_server(data_dir, *CORRUPT_FLAGS)
    async with Client(server.target, timeout_s=30) as client:
        await client.create_topic(TOPIC, 1)
        async with Producer(client) as producer:
            await producer.send_many(TOPIC, [b"r"] * 10, partition=0)
    await _simple_commits(server.target, COMMITS)
    return server


# ------------------------------------------------------------------ kill -9 at a commit, a rebalance

CRASH_FLAGS = (*SERVER_FLAGS[:4], "--offsets-topic-num-partitions", "2")
CRASH_PARTITIONS = 4
CRASH_RECORDS = 2_000
CRASH_MEMBERS = 3
#: Commits each committer has acknowledged before the kill (commits flow, several in flight).
ACKS_BEFORE_KILL = 10


class Committer:
    """One group member committing, one partition of its assignment after the other, offsets
    counting up per partition (``attempted`` shared by all); what the server acknowledged."""

    def __init__(self, consumer: Consumer, attempted: dict[TopicPartition, int],
                 acked: dict[TopicPartition, int]) -> None:
        self.consumer = consumer
        self.attempted = attempted
        self.acked = acked
        self.acks = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for tp in sorted(self.consumer.assignment()):
                offset = self.attempted[tp] = self.attempted.get(tp, 0) + 1
                assert offset <= CRASH_RECORDS
                await self.consumer.commit({tp: offset})
                self.acked[tp] = max(self.acked.get(tp, 0), offset)
                self.acks += 1
            await asyncio.sleep(0)  # an empty assignment does not starve the loop


def _join(group: str, member_id: str) -> m.JoinGroupRequest:
    subscription = encode_subscription(Subscription((TOPIC,)))
    return m.JoinGroupRequest(group, 10_000, 10_000, member_id, None, "consumer",
                              (("range", subscription),))


async def _join_anew(client: Client, group: str) -> m.JoinGroupResponse:
    """A new dynamic member's JoinGroup: MEMBER_ID_REQUIRED, then again with the id given."""
    with pytest.raises(MemberIdRequiredError) as required:
        await client.join_group(_join(group, ""))
    assert required.value.member_id
    return await client.join_group(_join(group, required.value.member_id))


async def _sync(client: Client, group: str, joined: m.JoinGroupResponse) -> m.SyncGroupResponse:
    """SyncGroup of a member of ``joined``'s generation; a leader assigns nothing (the test
    needs the group's generations, not partitions)."""
    assignments = tuple((member.member_id, encode_assignment(Assignment(())))
                        for member in joined.members)
    return await client.sync_group(m.SyncGroupRequest(
        group, joined.generation_id, joined.member_id, None, "consumer", joined.protocol_name,
        assignments))


async def _rebalance(client: Client, new_client: Client, group: str,
                     member_id: str) -> tuple[m.JoinGroupResponse, m.JoinGroupResponse]:
    """A new member joins (on ``new_client``) and waits in the rebalance its join started; then
    ``member_id`` joins again: both JoinGroups are answered, in one generation."""
    with pytest.raises(MemberIdRequiredError) as required:
        await new_client.join_group(_join(group, ""))
    joining = asyncio.ensure_future(new_client.join_group(_join(group, required.value.member_id)))
    try:
        deadline = asyncio.get_running_loop().time() + BOUND_S
        while (await client.describe_groups([group]))[0].state != "PreparingRebalance":
            assert asyncio.get_running_loop().time() < deadline, "no rebalance began"
            assert not joining.done(), joining.result()
            await asyncio.sleep(0.05)
        known = await asyncio.wait_for(client.join_group(_join(group, member_id)), BOUND_S)
        return known, await asyncio.wait_for(joining, BOUND_S)
    finally:
        joining.cancel()


async def test_kill_during_commits_and_a_rebalance_keeps_acknowledged_commits(
    start_server: Callable[..., ServerProcess], tmp_path: Path,
) -> None:
    """kill -9 of the server while three members of a group commit (several commits in
    flight), and while another group is between the JoinGroups of its second generation and
    their SyncGroups: after the restart every acknowledged commit is there (and nothing that
    was never sent), the interrupted generation is refused and its members form a new one,
    and the committing members go on committing."""
    port = free_port()
    data_dir = tmp_path / "data"
    flags = ("--listen", f"127.0.0.1:{port}", *CRASH_FLAGS)
    loop = asyncio.get_running_loop()
    server = start_server(data_dir, *flags)
    committing, rebalancing = "g-crash-commits", "g-crash-rebalance"
    attempted: dict[TopicPartition, int] = {}
    acked: dict[TopicPartition, int] = {}
    async with contextlib.AsyncExitStack() as stack:
        admin = await stack.enter_async_context(Client(server.target, timeout_s=30))
        await admin.create_topic(TOPIC, CRASH_PARTITIONS)
        async with Producer(admin) as producer:
            for p in range(CRASH_PARTITIONS):
                await producer.send_many(TOPIC, [b"r"] * CRASH_RECORDS, partition=p)

        # The rebalancing group: generation 1 Stable with one member; a second joins and
        # both JoinGroups of generation 2 are answered; no SyncGroup yet.
        first = await _join_anew(admin, rebalancing)
        assert first.generation_id == 1 and first.leader_id == first.member_id
        await _sync(admin, rebalancing, first)
        second_client = await stack.enter_async_context(Client(server.target, timeout_s=30))
        first_again, second = await _rebalance(admin, second_client, rebalancing,
                                               first.member_id)
        assert first_again.generation_id == second.generation_id == 2

        # The committing group: three members, each on a client of its own.
        consumers = []
        for _ in range(CRASH_MEMBERS):
            client = await stack.enter_async_context(Client(server.target, timeout_s=30))
            consumer = Consumer(client, topics=[TOPIC], group_id=committing, **MEMBER)
            stack.push_async_callback(consumer.close)
            consumers.append(consumer)
        for consumer in consumers:
            await consumer.start()
        await until(lambda: sorted(tp.partition for c in consumers for tp in c.assignment())
                    == list(range(CRASH_PARTITIONS))
                    and all(c.assignment() for c in consumers),
                    "the committing group shares the partitions", BOUND_S)
        committers = [Committer(c, attempted, acked) for c in consumers]
        stop = asyncio.Event()
        tasks = [loop.create_task(c.run(stop)) for c in committers]
        await until(lambda: all(c.acks >= ACKS_BEFORE_KILL for c in committers)
                    or any(t.done() for t in tasks), "commits acknowledged", BOUND_S)
        assert not any(t.done() for t in tasks), [t.result() for t in tasks if t.done()]

        await loop.run_in_executor(None, server.kill)  # commits in flight from every member
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        acked_at_kill, attempted_at_kill = dict(acked), dict(attempted)
        server = await loop.run_in_executor(None, lambda: start_server(data_dir, *flags))
        # The Client's group RPCs are tried once (a lost connection is the caller's to retry):
        # wait until the clients are connected again.
        await admin.wait_ready(BOUND_S)
        await second_client.wait_ready(BOUND_S)

        found = await admin.offset_fetch(committing)
        for tp, offset in acked_at_kill.items():
            assert offset <= found[tp].offset <= attempted_at_kill[tp], (
                tp, offset, found[tp].offset, attempted_at_kill[tp])

        # The interrupted generation is gone: its SyncGroups are refused, and the members
        # join again: a new generation, Stable with both.
        # The load gave the group its last stored generation, 1 (a generation is stored when
        # its leader's SyncGroup is): the first member is in it, the second in none.
        with pytest.raises(IllegalGenerationError, match="generation 2 is not the group's 1"):
            await _sync(admin, rebalancing, first_again)
        with pytest.raises(UnknownMemberIdError, match=f"no member '{second.member_id}'"):
            await _sync(second_client, rebalancing, second)
        first_new, second_new = await _rebalance(admin, second_client, rebalancing,
                                                 first.member_id)
        assert first_new.generation_id == second_new.generation_id == 2
        assert first_new.member_id == first.member_id
        leader = first_new if first_new.members else second_new
        await asyncio.gather(_sync(admin, rebalancing, first_new),
                             _sync(second_client, rebalancing, second_new))
        (described,) = await admin.describe_groups([rebalancing])
        assert described.state == "Stable"
        assert {mb.member_id for mb in described.members} == {
            first_new.member_id, second_new.member_id}
        assert leader.leader_id in {first_new.member_id, second_new.member_id}

        # The committing group goes on: every member's commits are acknowledged again, and
        # what is committed at the end is exactly what was last acknowledged.
        before = [c.acks for c in committers]
        stop = asyncio.Event()
        tasks = [loop.create_task(c.run(stop)) for c in committers]
        await until(lambda: all(c.acks > b for c, b in zip(committers, before, strict=True))
                    or any(t.done() for t in tasks), "commits acknowledged after", BOUND_S)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), BOUND_S)
        found = await admin.offset_fetch(committing)
        assert {tp: c.offset for tp, c in found.items()} == acked


@pytest.mark.parametrize("aborted_by", ["init", "timeout"])
async def test_kill_with_transactional_offsets_committed_and_open(
    start_server: Callable[..., ServerProcess], tmp_path: Path, aborted_by: str,
) -> None:
    """kill -9 after one transaction with offsets committed and while another holds offsets
    (its TxnOffsetCommit acknowledged, no EndTxn): after the restart the committed
    transaction's offset is the group's, the open one's stays pending (a stable read is
    UNSTABLE_OFFSET_COMMIT; checked before an InitProducerId only, as the timeout may have
    passed by the restart) until it is aborted, by its producer's next InitProducerId or by
    the server at its timeout, and is then dropped. Nothing is produced or fetched after the
    restart: the marker must reach the group coordinator all the same (it did not)."""
    port = free_port()
    data_dir = tmp_path / "data"
    flags = ("--listen", f"127.0.0.1:{port}", *CRASH_FLAGS,
             "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "200",
             "--maintenance-interval-ms", "100")
    loop = asyncio.get_running_loop()
    server = start_server(data_dir, *flags)
    group, tp = "g-txn-crash", TopicPartition(TOPIC, 0)
    simple = GroupMetadata(group, -1, "", None)  # a group without members: a simple commit
    async with Client(server.target, timeout_s=30) as client:
        await client.create_topic(TOPIC, 1)
        async with Producer(client) as producer:
            await producer.send_many(TOPIC, [b"r"] * 10, partition=0)
        committed = Producer(client, transactional_id="t-committed")
        open_ = Producer(client, transactional_id="t-open",
                         transaction_timeout_ms=1_000 if aborted_by == "timeout" else 60_000)
        try:
            async with committed.transaction():
                await committed.send_offsets_to_transaction({tp: 3}, simple)
            await open_.begin_transaction()
            await open_.send_offsets_to_transaction({tp: 7}, simple)
            await loop.run_in_executor(None, server.kill)
        finally:
            for producer in (committed, open_):
                await producer.close(timeout_s=0)
    server = start_server(data_dir, *flags)
    async with Client(server.target, timeout_s=30) as client:
        assert (await client.offset_fetch(group))[tp].offset == 3
        if aborted_by == "init":
            with pytest.raises(UnstableOffsetCommitError):
                await client.offset_fetch(group, [tp], require_stable=True)
            async with Producer(client, transactional_id="t-open") as again:
                await again.init_transactions()  # fences the open transaction: it is aborted
        deadline = loop.time() + BOUND_S
        while True:  # the markers are written after InitProducerId's answer, or at the timeout
            try:
                found = await client.offset_fetch(group, [tp], require_stable=True)
                break
            except UnstableOffsetCommitError:
                assert loop.time() < deadline, "the open transaction's offsets stay pending"
                await asyncio.sleep(0.05)
        assert found[tp].offset == 3


async def test_consumers_in_a_rebalance_at_a_kill_form_the_group_again(
    start_server: Callable[..., ServerProcess], tmp_path: Path,
) -> None:
    """Group Consumers (cooperative-sticky) when the server is killed just after a third
    member started to join (its rebalance most often still under way): after the restart they form the group again, every partition
    owned by exactly one of them in a generation newer than the one before the kill, and
    each member's commits are acknowledged again."""
    port = free_port()
    data_dir = tmp_path / "data"
    flags = ("--listen", f"127.0.0.1:{port}", *CRASH_FLAGS)
    loop = asyncio.get_running_loop()
    server = start_server(data_dir, *flags)
    group = "g-crash-consumers"
    async with contextlib.AsyncExitStack() as stack:
        admin = await stack.enter_async_context(Client(server.target, timeout_s=30))
        await admin.create_topic(TOPIC, CRASH_PARTITIONS)
        async with Producer(admin) as producer:
            for p in range(CRASH_PARTITIONS):
                await producer.send_many(TOPIC, [b"r"] * 10, partition=p)
        consumers: list[Consumer] = []

        async def add_member() -> Consumer:
            client = await stack.enter_async_context(Client(server.target, timeout_s=30))
            consumer = Consumer(client, topics=[TOPIC], group_id=group, **MEMBER)
            stack.push_async_callback(consumer.close)
            consumers.append(consumer)
            await consumer.start()
            return consumer

        def formed() -> bool:
            owned = [tp.partition for c in consumers for tp in c.assignment()]
            return sorted(owned) == list(range(CRASH_PARTITIONS)) and all(
                c.assignment() for c in consumers)

        for _ in range(2):
            await add_member()
        await until(formed, "two members share the partitions", BOUND_S)
        generation_before = max(c.group_metadata().generation_id for c in consumers)
        await add_member()  # its JoinGroup is sent; the kill comes at once
        await loop.run_in_executor(None, server.kill)
        server = await loop.run_in_executor(None, lambda: start_server(data_dir, *flags))
        await until(formed, "three members share the partitions after the restart", BOUND_S)
        generations = {c.group_metadata().generation_id for c in consumers}
        assert len(generations) == 1 and generations.pop() > generation_before, (
            generations, generation_before)
        for offset, consumer in enumerate(consumers, start=1):
            tp = min(consumer.assignment())
            await consumer.commit({tp: offset})
            assert await consumer.committed([tp]) == {tp: offset}
