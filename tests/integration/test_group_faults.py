"""Issue 27's "Bad input and faults" against real server processes (docs/groups.md).

- Bad input over the client API (the Consumer, and the Client's group RPCs as a tool sends
  them): an empty or over-long group id, a commit for an unknown topic or partition, an offset
  beyond the log end, a commit from a stale generation or an unknown member, a fenced static
  instance, a join beyond ``group.max.size``: each a clear error naming the problem, and
  nothing written (the ``__consumer_offsets`` log ends unchanged).

Every wait is on a condition, bounded; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator

import pytest

from stratalog.client import Client, Consumer, Producer
from stratalog.client.errors import (
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InvalidGroupIdError,
    OffsetOutOfRangeError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from stratalog.client.groups import membership_messages as m
from stratalog.client.types import TopicPartition
from stratalog.client.wire import LATEST

from .conftest import ServerProcess, launch_server

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
