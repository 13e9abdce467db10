"""The group Consumer against a real server process (issue 27 item 5; docs/client.md, "Consumer
groups"): consumers of one group share a topic's partitions, take over a closed member's,
resume after the last commit, auto-commit only what the reader was handed, keep their
partitions through a cooperative rebalance; the Client's group RPCs (describe, list, delete,
offset_fetch).

The server runs with ``group.initial.rebalance.delay.ms`` 0 and a small minimum session
timeout; every wait is on a condition (``until``), never a sleep; every test is bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import sys
from collections.abc import Iterator

import pytest

from stratalog.client import Client, Consumer, Producer, SyncClient, SyncConsumer
from stratalog.client.errors import CommitFailedError, IllegalGenerationError, NonEmptyGroupError
from stratalog.client.groups import RangeAssignor
from stratalog.client.types import TopicPartition
from tests.doc_blocks import PROJECT_ROOT, blocks

from .conftest import ServerProcess, launch_server, until

GROUP_FLAGS = (
    "--group-initial-rebalance-delay-ms", "0",
    "--group-min-session-timeout-ms", "100",
    "--offsets-topic-num-partitions", "3",
)
PARTITIONS = 6
#: Short timers, so that a rebalance or a commit happens within a test's bound.
FAST = {
    "session_timeout_ms": 6_000,
    "heartbeat_interval_ms": 200,
    "auto_commit_interval_ms": 200,
    "retry_backoff_ms": 50,
    "retry_backoff_max_ms": 500,
}
BOUND_S = 60.0


@pytest.fixture(scope="module")
def group_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = launch_server(tmp_path_factory.mktemp("groups") / "data", *GROUP_FLAGS)
    yield process
    assert process.stop(signal.SIGTERM) == 0, process.log_text()[-4000:]


async def _topic(client: Client, name: str, records_per_partition: int) -> None:
    await client.create_topic(name, PARTITIONS)
    async with Producer(client) as producer:
        for p in range(PARTITIONS):
            await producer.send_many(
                name, [b"%d-%d" % (p, i) for i in range(records_per_partition)], partition=p)


class Reader:
    """One group consumer reading in a task: what it got, by partition, and its callbacks."""

    def __init__(self, client: Client, topic: str, group: str, **kwargs: object) -> None:
        self.got: dict[TopicPartition, list[int]] = {}
        self.assigned: list[frozenset[TopicPartition]] = []
        self.revoked: list[frozenset[TopicPartition]] = []
        self.consumer = Consumer(
            client, topics=[topic], group_id=group, auto_offset_reset="earliest",
            on_partitions_assigned=self.assigned.append,
            on_partitions_revoked=self.revoked.append, **{**FAST, **kwargs})
        self.task: asyncio.Task[None] | None = None

    def start(self) -> Reader:
        self.task = asyncio.get_running_loop().create_task(self._read())
        return self

    async def _read(self) -> None:
        async for record in self.consumer:
            self.got.setdefault(TopicPartition(record.topic, record.partition), []).append(
                record.offset)

    def count(self) -> int:
        """Records read so far; raises what ended the reading task early."""
        assert self.task is not None
        if self.task.done() and not self.task.cancelled():
            self.task.result()  # raises the reader's error
            raise AssertionError("the reader ended")
        return sum(len(v) for v in self.got.values())

    async def close(self) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.close()


async def test_two_consumers_share_the_partitions_and_one_takes_over(
    group_server: ServerProcess,
) -> None:
    async with Client(group_server.target) as client:
        await _topic(client, "shared", 5)
        a = Reader(client, "shared", "g-share").start()
        b = Reader(client, "shared", "g-share").start()
        try:
            await until(lambda: a.count() + b.count() == PARTITIONS * 5
                        and len(a.consumer.assignment()) == 3
                        and len(b.consumer.assignment()) == 3,
                        "two members, three partitions each, every record read", BOUND_S)
            # Each partition was read by exactly one of them, every record once.
            assert not set(a.got) & set(b.got)
            assert set(a.got) | set(b.got) == {TopicPartition("shared", p)
                                               for p in range(PARTITIONS)}
            for got in (a.got, b.got):
                for offsets in got.values():
                    assert offsets == list(range(5))
            await a.close()  # commits and leaves: b gets every partition
            await until(lambda: len(b.consumer.assignment()) == PARTITIONS,
                        "the other member owns all six", BOUND_S)
            async with Producer(client) as producer:
                for p in range(PARTITIONS):
                    await producer.send("shared", b"late", partition=p)
            await until(lambda: b.count() == 3 * 5 + PARTITIONS,
                        "b reads the new records of a's partitions too", BOUND_S)
            # a committed what it had read, so b started a's partitions after those records.
            assert len(b.got) == PARTITIONS
            for tp, offsets in b.got.items():
                assert offsets == sorted(set(offsets)), (tp, offsets)
                assert offsets[-1] == 5
            described = (await client.describe_groups(["g-share"]))[0]
            assert described.error is None and described.state == "Stable"
            assert len(described.members) == 1
            assert set(described.members[0].assignment) == b.consumer.assignment()
        finally:
            await a.close()
            await b.close()
        listed = {g.group_id: g for g in await client.list_groups()}
        assert listed["g-share"].state == "Empty"
        committed = await client.offset_fetch("g-share")
        assert {tp: c.offset for tp, c in committed.items()} == {
            TopicPartition("shared", p): 6 for p in range(PARTITIONS)}
        (deleted,) = await client.delete_groups(["g-share"])
        assert deleted.error is None
        assert await client.offset_fetch("g-share") == {}


async def test_a_restarted_consumer_resumes_after_the_last_commit(
    group_server: ServerProcess,
) -> None:
    async with Client(group_server.target) as client:
        await _topic(client, "resume", 10)
        async with Consumer(client, topics=["resume"], group_id="g-resume",
                            auto_offset_reset="earliest", enable_auto_commit=False,
                            **FAST) as consumer:
            seen: list[tuple[int, int]] = []
            async for record in consumer:
                seen.append((record.partition, record.offset))
                if len(seen) == 20:
                    break
            await consumer.commit()
            read_to: dict[TopicPartition, int] = {}
            for p, o in seen:
                read_to[TopicPartition("resume", p)] = o + 1
            committed = await consumer.committed()
            assert set(committed) == {TopicPartition("resume", p) for p in range(PARTITIONS)}
            for tp, offset in committed.items():
                # A partition none of whose records was read committed its start (0), or
                # nothing when it had no position yet.
                assert offset == read_to.get(tp, offset if offset in (0, None) else -1)
                if tp in read_to:
                    assert consumer.position(tp) == offset
            # Read some more without committing: the next run reads them again.
            async for record in consumer:
                seen.append((record.partition, record.offset))
                if len(seen) == 25:
                    break
        # close() with auto-commit off committed nothing more.
        async with Consumer(client, topics=["resume"], group_id="g-resume",
                            auto_offset_reset="earliest", **FAST) as again:
            rest: list[tuple[int, int]] = []
            async for record in again:
                rest.append((record.partition, record.offset))
                if len(rest) == PARTITIONS * 10 - 20:
                    break
            assert again.group_metadata().generation_id >= 1
        # Nothing skipped, nothing read twice beyond the uncommitted tail.
        first = set(seen[:20])
        assert first.isdisjoint(rest)
        assert first | set(rest) == {(p, o) for p in range(PARTITIONS) for o in range(10)}


async def test_auto_commit_commits_only_records_handed_out(group_server: ServerProcess) -> None:
    async with Client(group_server.target) as client:
        await client.create_topic("handed", 1)
        async with Producer(client) as producer:
            await producer.send_many("handed", [b"r%d" % i for i in range(100)], partition=0)
        tp = TopicPartition("handed", 0)
        consumer = Consumer(client, topics=["handed"], group_id="g-handed",
                            auto_offset_reset="earliest", **FAST)
        try:
            got = 0
            async for _record in consumer:
                got += 1
                if got == 7:
                    break  # the consumer fetched all 100: only 7 were handed out
            # The reader polls no more; auto-commit runs on the member's timer.
            await until(lambda: consumer._group is not None
                        and consumer._group._member is not None
                        and consumer._group._member.positions.last_committed(tp) == 7,
                        "auto-commit of the 7 records handed out", BOUND_S)
            assert await consumer.committed([tp]) == {tp: 7}
            assert consumer.position(tp) == 7
        finally:
            await consumer.close()
        assert (await client.offset_fetch("g-handed"))[tp].offset == 7


async def test_cooperative_joiner_takes_partitions_others_keep_theirs(
    group_server: ServerProcess,
) -> None:
    async with Client(group_server.target) as client:
        await _topic(client, "coop", 1)
        a = Reader(client, "coop", "g-coop").start()
        b = Reader(client, "coop", "g-coop").start()
        c: Reader | None = None
        try:
            await until(lambda: len(a.consumer.assignment()) == 3
                        and len(b.consumer.assignment()) == 3, "a and b stable", BOUND_S)
            before_a, before_b = a.consumer.assignment(), b.consumer.assignment()
            revoked_before = len(a.revoked) + len(b.revoked)
            c = Reader(client, "coop", "g-coop").start()
            await until(lambda: len(c.consumer.assignment()) == 2
                        and len(a.consumer.assignment()) == 2
                        and len(b.consumer.assignment()) == 2, "three members, two each",
                        BOUND_S)
            # Cooperative: a and b gave up one partition each, kept the rest throughout.
            assert a.consumer.assignment() < before_a and b.consumer.assignment() < before_b
            new_revoked = [*a.revoked, *b.revoked][revoked_before:]
            assert sum(len(r) for r in new_revoked) == 2
            assert frozenset().union(*new_revoked) == c.consumer.assignment()
        finally:
            for reader in (a, b, c):
                if reader is not None:
                    await reader.close()


async def test_eager_range_and_client_errors(group_server: ServerProcess) -> None:
    async with Client(group_server.target) as client:
        await _topic(client, "eager", 1)
        consumer = Consumer(client, topics=["eager"], group_id="g-eager",
                            assignors=[RangeAssignor()], auto_offset_reset="earliest", **FAST)
        try:
            async for _record in consumer:
                break
            assert len(consumer.assignment()) == PARTITIONS
            (deleted,) = await client.delete_groups(["g-eager"])
            assert isinstance(deleted.error, NonEmptyGroupError)
        finally:
            await consumer.close()
        # After close the member is in no generation: a commit is refused at once.
        with pytest.raises(CommitFailedError):
            await consumer._group.commit(None, 1.0)  # type: ignore[union-attr]


async def test_offsets_sent_to_a_transaction_commit_with_it(group_server: ServerProcess) -> None:
    """Consume-transform-produce: the offsets of a committed transaction are the group's,
    those of an aborted one are dropped."""
    async with Client(group_server.target) as client:
        await client.create_topic("txn-in", 1)
        await client.create_topic("txn-out", 1)
        async with Producer(client) as producer:
            await producer.send_many("txn-in", [b"in%d" % i for i in range(10)], partition=0)
        tp = TopicPartition("txn-in", 0)
        async with Consumer(client, topics=["txn-in"], group_id="g-txn",
                            enable_auto_commit=False, auto_offset_reset="earliest",
                            **FAST) as consumer, Producer(
                                client, transactional_id="txn-copier") as producer:
            taken = []
            async for record in consumer:
                taken.append(record)
                if len(taken) == 4:
                    break
            async with producer.transaction():
                await producer.send_many("txn-out", [r.value for r in taken], partition=0)
                await producer.send_offsets_to_transaction(
                    {tp: consumer.position(tp)}, consumer.group_metadata())
            assert await consumer.committed([tp]) == {tp: 4}
            await producer.begin_transaction()
            await producer.send_offsets_to_transaction({tp: 9}, consumer.group_metadata())
            await producer.abort_transaction()
            assert await consumer.committed([tp]) == {tp: 4}
            # A zombie's group metadata (a past generation) is refused; the transaction
            # must be aborted.
            zombie = consumer.group_metadata()
            zombie = type(zombie)(zombie.group_id, zombie.generation_id + 5, zombie.member_id,
                                  zombie.group_instance_id)
            await producer.begin_transaction()
            with pytest.raises(IllegalGenerationError):
                await producer.send_offsets_to_transaction({tp: 7}, zombie)
            await producer.abort_transaction()
            assert await consumer.committed([tp]) == {tp: 4}


# ------------------------------------------------------------------ consumer processes

_MEMBER_SCRIPT = r'''
import asyncio, sys
from stratalog.client import Client, Consumer

def say(kind, tps):
    print(kind, " ".join(str(tp.partition) for tp in sorted(tps)), flush=True)

async def main(target, topic, group):
    async with Client(target) as client:
        async with Consumer(
            client, topics=[topic], group_id=group, auto_offset_reset="earliest",
            session_timeout_ms=3000, heartbeat_interval_ms=200, auto_commit_interval_ms=200,
            retry_backoff_ms=50, retry_backoff_max_ms=500,
            on_partitions_assigned=lambda tps: say("ASSIGNED", tps),
            on_partitions_revoked=lambda tps: say("REVOKED", tps),
            on_partitions_lost=lambda tps: say("LOST", tps),
        ) as consumer:
            async for record in consumer:
                print("R", record.partition, record.offset, flush=True)

asyncio.run(main(*sys.argv[1:]))
'''


class MemberProcess:
    """A consumer process of the group: the records it printed, its callbacks' events."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.records: set[tuple[int, int]] = set()
        self.events: list[tuple[str, frozenset[int]]] = []
        self.owned: set[int] = set()
        self.reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(cls, target: str, topic: str, group: str) -> MemberProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _MEMBER_SCRIPT, target, topic, group,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            kind, *rest = line.decode().split()
            if kind == "R":
                self.records.add((int(rest[0]), int(rest[1])))
                continue
            partitions = frozenset(int(p) for p in rest)
            self.events.append((kind, partitions))
            if kind == "ASSIGNED":
                self.owned |= partitions
            else:
                self.owned -= partitions

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()
        await self.reader


async def test_three_consumer_processes_one_killed_one_joins(
    group_server: ServerProcess,
) -> None:
    """Issue 27's test: three processes share a 6-partition topic; one is killed with kill -9
    (its partitions go to the others after the session timeout); one joins (cooperative: the
    others give up only what it takes); every record is processed at least once, and the
    committed offsets never move backwards."""
    topic, group = "procs", "g-procs"
    members: list[MemberProcess] = []
    committed_seen: list[dict[TopicPartition, int]] = []
    produced: set[tuple[int, int]] = set()
    async with Client(group_server.target) as client:
        await client.create_topic(topic, PARTITIONS)

        async def produce(count: int) -> None:
            async with Producer(client) as producer:
                for p in range(PARTITIONS):
                    results = await (await producer.send_many(
                        topic, [b"v"] * count, partition=p))
                    produced.update((p, r.offset) for r in results)

        def seen() -> set[tuple[int, int]]:
            return set().union(*(m.records for m in members))

        async def watch_commits() -> None:
            while True:  # samples the committed offsets (not a wait for a condition)
                found = await client.offset_fetch(group)
                committed_seen.append({tp: c.offset for tp, c in found.items()})
                await asyncio.sleep(0.05)

        watcher = asyncio.get_running_loop().create_task(watch_commits())
        try:
            await produce(20)
            for _ in range(3):
                members.append(await MemberProcess.start(group_server.target, topic, group))
            await until(lambda: produced <= seen() and all(len(m.owned) == 2 for m in members),
                        "three members with two partitions each, every record read", BOUND_S)

            victim = members[0]
            await victim.kill()  # kill -9: no commit, no LeaveGroup
            survivors = members[1:]
            await produce(20)
            await until(lambda: produced <= seen()
                        and sorted(len(m.owned) for m in survivors) == [3, 3],
                        "the survivors took the killed member's partitions", BOUND_S)

            owned_before = {id(m): set(m.owned) for m in survivors}
            events_before = {id(m): len(m.events) for m in survivors}
            joiner = await MemberProcess.start(group_server.target, topic, group)
            members.append(joiner)
            await produce(20)
            await until(lambda: produced <= seen() and len(joiner.owned) == 2
                        and all(len(m.owned) == 2 for m in survivors),
                        "the joiner took two partitions, every record read", BOUND_S)
            # Cooperative: a survivor revoked only what the joiner took, never everything.
            for m in survivors:
                revoked = frozenset().union(*(p for kind, p in m.events[events_before[id(m)]:]
                                              if kind == "REVOKED"))
                assert revoked <= joiner.owned, (revoked, joiner.owned)
                assert owned_before[id(m)] - revoked == m.owned
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            for m in members:
                await m.kill()
    assert produced <= seen()  # at least once
    for before, after in itertools.pairwise(committed_seen):
        for tp, offset in before.items():
            assert after.get(tp, offset) >= offset, (tp, offset, after.get(tp))


async def test_pattern_subscription_picks_up_new_matching_topics(
    group_server: ServerProcess,
) -> None:
    async with Client(group_server.target) as client:
        await client.create_topic("pat-a", 2)
        await client.create_topic("other-a", 1)
        reader = Reader.__new__(Reader)
        reader.got, reader.assigned, reader.revoked = {}, [], []
        reader.consumer = Consumer(client, pattern=r"pat-.*", group_id="g-pattern",
                                   auto_offset_reset="earliest", metadata_max_age_ms=200,
                                   on_partitions_assigned=reader.assigned.append, **FAST)
        reader.start()
        try:
            await until(lambda: reader.consumer.assignment() == {
                TopicPartition("pat-a", 0), TopicPartition("pat-a", 1)}, "pat-a assigned",
                BOUND_S)
            await client.create_topic("pat-b", 1)
            async with Producer(client) as producer:
                await producer.send("pat-b", b"new topic", partition=0)
                await producer.send("other-a", b"not matched", partition=0)
            await until(lambda: reader.count() == 1, "the record of the new topic", BOUND_S)
            assert set(reader.got) == {TopicPartition("pat-b", 0)}
            assert reader.consumer.topics == ("pat-a", "pat-b")
        finally:
            await reader.close()


async def test_a_reader_that_stops_polling_leaves_the_group(group_server: ServerProcess) -> None:
    """max_poll_interval_ms: the member of a reader that stopped reading commits, revokes and
    leaves, so the other member gets its partitions; its next poll joins again."""
    async with Client(group_server.target) as client:
        await _topic(client, "stalled", 1)
        stalled = Consumer(client, topics=["stalled"], group_id="g-stalled",
                           auto_offset_reset="earliest", max_poll_interval_ms=1_000, **FAST)
        busy = Reader(client, "stalled", "g-stalled")
        reading: asyncio.Task[None] | None = None
        try:
            await asyncio.wait_for(_first_record(stalled), BOUND_S)
            # Then no poll for longer than max_poll_interval_ms.
            busy.start()
            await until(lambda: len(busy.consumer.assignment()) == PARTITIONS
                        and not stalled.assignment(), "the stalled member left", BOUND_S)

            async def read() -> None:
                async for _record in stalled:  # polls again: joins again
                    pass
            reading = asyncio.get_running_loop().create_task(read())
            await until(lambda: len(stalled.assignment()) == 3
                        and len(busy.consumer.assignment()) == 3, "it rejoined", BOUND_S)
        finally:
            if reading is not None:
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
            await stalled.close()
            if busy.task is not None:
                await busy.close()


async def _first_record(consumer: Consumer) -> None:
    async for _record in consumer:
        return


async def test_a_static_member_does_not_leave_on_close(group_server: ServerProcess) -> None:
    async with Client(group_server.target) as client:
        await _topic(client, "static", 1)
        settings = {**FAST, "group_instance_id": "instance-1"}
        async with Consumer(client, topics=["static"], group_id="g-static",
                            auto_offset_reset="earliest", **settings) as first:
            await asyncio.wait_for(_first_record(first), BOUND_S)
            owned = first.assignment()
        (described,) = await client.describe_groups(["g-static"])
        assert [m.group_instance_id for m in described.members] == ["instance-1"]
        async with Consumer(client, topics=["static"], group_id="g-static",
                            auto_offset_reset="earliest", **settings) as again:
            await until(lambda: again.assignment() == owned, "the same partitions back", BOUND_S)
            assert again.assignment() == owned


async def test_client_md_group_example_resumes_on_its_next_run(
    group_server: ServerProcess,
) -> None:
    """docs/client.md's "Consumer groups" example, run twice as a reader would: the second run
    reads only the records it sent (the group resumed after the first run's commit)."""
    [example] = [b for b in blocks(PROJECT_ROOT / "docs" / "client.md", "## Consumer groups")
                 if b.language == "python" and b.skip is None]
    script = example.text.replace("127.0.0.1:50051", group_server.target)
    for run in (1, 2):
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), BOUND_S)
        assert process.returncode == 0, err.decode()[-4000:]
        assert out.decode().strip() == str([TopicPartition("payments", p) for p in range(3)])
        async with Client(group_server.target) as client:
            committed = await client.offset_fetch("billing")
        assert {tp: c.offset for tp, c in committed.items()} == {
            TopicPartition("payments", p): run for p in range(3)}, run


def test_sync_consumer_in_a_group(group_server: ServerProcess) -> None:
    """The blocking SyncConsumer: a group member that commits, and a second one that resumes
    after its commit; poll() times out with None at the end."""
    target = group_server.target
    with SyncClient(target) as client:
        client.create_topic("sync-group", 2)
        for p in range(2):
            client.produce("sync-group", p, [b"a", b"b", b"c"])
    settings = {**FAST, "auto_offset_reset": "earliest", "enable_auto_commit": False}
    with SyncConsumer(target, topics=["sync-group"], group_id="g-sync", **settings) as first:
        got = []
        for record in first:
            got.append((record.partition, record.offset))
            if len(got) == 4:
                break
        first.commit()
        assert sum(first.position(tp) for tp in first.assignment()) == 4
        assert first.group_metadata().generation_id >= 1
    with SyncConsumer(target, topics=["sync-group"], group_id="g-sync", **settings) as second:
        rest = []
        while (record := second.poll(5.0)) is not None:
            rest.append((record.partition, record.offset))
            if len(got) + len(rest) == 6:
                assert second.poll(0.2) is None  # nothing more
                break
        assert set(got).isdisjoint(rest)
        assert set(got) | set(rest) == {(p, o) for p in range(2) for o in range(3)}
        # What the first member committed; the second commits nothing (auto-commit off).
        assert sum(v or 0 for v in second.committed().values()) == 4
    with pytest.raises(TypeError, match="exactly one of"):
        SyncConsumer(target)


async def test_several_topics_without_a_group(group_server: ServerProcess) -> None:
    """topics=[...] without a group: every partition of each, keyed by TopicPartition, to the
    end and no further."""
    async with Client(group_server.target) as client:
        await client.create_topic("many-a", 2)
        await client.create_topic("many-b", 1)
        async with Producer(client) as producer:
            await producer.send_many("many-a", [b"a0", b"a1"], partition=0)
            await producer.send_many("many-a", [b"a2"], partition=1)
            await producer.send_many("many-b", [b"b0"], partition=0)
        async with Consumer(client, topics=["many-a", "many-b"]) as consumer:
            got = sorted([(r.topic, r.partition, r.offset, r.value) async for r in consumer])
            assert got == [("many-a", 0, 0, b"a0"), ("many-a", 0, 1, b"a1"),
                           ("many-a", 1, 0, b"a2"), ("many-b", 0, 0, b"b0")]
            assert consumer.assignment() == {TopicPartition("many-a", 0),
                                             TopicPartition("many-a", 1),
                                             TopicPartition("many-b", 0)}
            assert consumer.position(TopicPartition("many-a", 0)) == 2
            assert consumer.partitions == sorted(consumer.assignment())
            consumer.seek(("many-b", 0), 0)
            async for record in consumer:
                assert (record.topic, record.offset) == ("many-b", 0)
                break


async def test_a_failing_rebalance_callback_is_raised_once_and_the_member_goes_on(
    group_server: ServerProcess,
) -> None:
    async with Client(group_server.target) as client:
        await _topic(client, "bad-callback", 1)

        def refuse(partitions: frozenset[TopicPartition]) -> None:
            raise RuntimeError(f"cannot take {len(partitions)} partitions")

        consumer = Consumer(client, topics=["bad-callback"], group_id="g-bad-callback",
                            on_partitions_assigned=refuse, auto_offset_reset="earliest", **FAST)
        try:
            with pytest.raises(RuntimeError, match="cannot take 6 partitions"):
                await asyncio.wait_for(_first_record(consumer), BOUND_S)
            # Raised once, as Kafka's poll() raises a listener's error: the member stayed in
            # the group with its partitions, and the reader goes on reading them.
            await asyncio.wait_for(_first_record(consumer), BOUND_S)
            assert len(consumer.assignment()) == PARTITIONS
            (described,) = await client.describe_groups(["g-bad-callback"])
            assert (described.state, len(described.members)) == ("Stable", 1)
        finally:
            await asyncio.wait_for(consumer.close(), BOUND_S)
        (described,) = await client.describe_groups(["g-bad-callback"])
        assert described.members == ()  # close() left the group


async def test_a_members_client_id_is_the_clients(group_server: ServerProcess) -> None:
    """Kafka's client.id: the Client's ``client_id`` reaches the coordinator on every call and
    names the member (``stratalog groups describe`` shows it)."""
    async with Client(group_server.target, client_id="billing-reader") as client:
        await _topic(client, "named", 1)
        async with Consumer(client, topics=["named"], group_id="g-named",
                            auto_offset_reset="earliest", **FAST) as consumer:
            await asyncio.wait_for(_first_record(consumer), BOUND_S)
            (described,) = await client.describe_groups(["g-named"])
    assert [m.client_id for m in described.members] == ["billing-reader"]
    assert described.members[0].member_id.startswith("billing-reader-")
    with pytest.raises(ValueError, match="printable ASCII"):
        Client(group_server.target, client_id="naïve")
