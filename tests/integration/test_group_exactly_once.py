"""Issue 27's exactly-once test: consume-transform-produce with transactions, in worker
processes of one group, while the test kill -9s workers and the server.

Each worker (``_WORKER_SCRIPT``) is a group Consumer of the input topic (READ_COMMITTED, no
auto-commit) and a transactional Producer (a ``transactional_id`` of its slot, kept across its
restarts, so that a restarted worker fences its dead predecessor's open transaction); per
fetched batch it runs one transaction: the batch's records transformed to the output topic's
same partition, then ``send_offsets_to_transaction`` of the batch's next offset with the
consumer's group metadata, then commit (docs/client.md, "Consumer groups"). On any error it
closes everything and starts again: a new member reads from the group's committed offsets.

The test produces the input in rounds; after each round it waits for the workers to commit
transactions again, then kill -9s a worker (restarted at once) or, twice, the server (restarted
on the same data directory and port). At the end, once the group's committed offsets reach the
input's end, the output topic read READ_COMMITTED holds every input record's transform exactly
once. Every wait is on a condition, bounded; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import collections
import random
import sys
from collections.abc import Callable
from pathlib import Path

from stratalog.client import Client, Consumer, IsolationLevel, Producer
from stratalog.client.types import TopicPartition

from .conftest import ServerProcess, free_port, until

SERVER_FLAGS = (
    "--group-initial-rebalance-delay-ms", "0",
    "--group-min-session-timeout-ms", "100",
    "--offsets-topic-num-partitions", "2",
)
PARTITIONS = 4
WORKERS = 3
#: Input rounds; after each one a fault. Rounds 2 and 5 kill the server, the others a worker.
ROUNDS = 8
SERVER_KILL_ROUNDS = frozenset({2, 5})
#: Each round sends this many batches of BATCH_RECORDS records to each partition.
ROUND_BATCHES = 6
BATCH_RECORDS = 5
BOUND_S = 90.0

_WORKER_SCRIPT = r'''
import asyncio, sys, traceback
from stratalog.client import Client, Consumer, IsolationLevel, Producer
from stratalog.client.types import TopicPartition

async def work(target, source, sink, group, transactional_id):
    async with Client(target, timeout_s=10) as client:
        consumer = Consumer(
            client, topics=[source], group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, isolation_level=IsolationLevel.READ_COMMITTED,
            session_timeout_ms=3000, heartbeat_interval_ms=200, retry_backoff_ms=50,
            retry_backoff_max_ms=500)
        producer = Producer(client, transactional_id=transactional_id, request_timeout_s=10,
                            retry_backoff_ms=50, retry_backoff_max_ms=500, max_block_ms=10_000,
                            transaction_timeout_ms=20_000)
        async with consumer, producer:
            await producer.init_transactions()
            async for batch in consumer.batches():
                tp = TopicPartition(batch.topic, batch.partition)
                async with producer.transaction():
                    await producer.send_many(sink, [b"out:" + v for v in batch.values],
                                             partition=batch.partition)
                    await producer.send_offsets_to_transaction(
                        {tp: batch.next_offset}, consumer.group_metadata())
                print("C", batch.partition, batch.next_offset, flush=True)

async def main(target, source, sink, group, transactional_id):
    for attempt in range(1000):
        try:
            await work(target, source, sink, group, transactional_id)
        except Exception:
            traceback.print_exc()
            print("E", attempt, flush=True)
            await asyncio.sleep(0.2)  # a retry's backoff (the server may be restarting)

asyncio.run(main(*sys.argv[1:]))
'''


class Worker:
    """One worker process: how many transactions it reported committed, its restarts."""

    def __init__(self, slot: int, log_path: Path, args: tuple[str, ...]) -> None:
        self.slot = slot
        self.log_path = log_path
        self.args = args
        self.commits = 0
        self.errors = 0
        self.process: asyncio.subprocess.Process | None = None
        self.reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        with self.log_path.open("a") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _WORKER_SCRIPT, *self.args, f"eos-worker-{self.slot}",
                stdout=asyncio.subprocess.PIPE, stderr=log)
        self.reader = asyncio.get_running_loop().create_task(self._read(self.process))

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            if line.startswith(b"C "):
                self.commits += 1
            elif line.startswith(b"E "):
                self.errors += 1

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def kill(self) -> None:
        """kill -9: no commit, no abort, no LeaveGroup."""
        assert self.process is not None and self.reader is not None
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()
        await self.reader


async def _read_committed(client: Client, topic: str) -> list[bytes]:
    found: list[bytes] = []
    async with Consumer(client, topic, isolation_level=IsolationLevel.READ_COMMITTED) as consumer:
        async for record in consumer:
            assert record.value is not None
            found.append(record.value)
    return found


async def test_consume_transform_produce_exactly_once_through_kills(
    start_server: Callable[..., ServerProcess], tmp_path: Path,
) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    flags = ("--listen", f"127.0.0.1:{port}", *SERVER_FLAGS)
    loop = asyncio.get_running_loop()
    server = start_server(data_dir, *flags)
    source, sink, group = "eos-in", "eos-out", "g-eos"
    rng = random.Random(27)
    expected: list[bytes] = []
    async with Client(server.target, timeout_s=10) as admin:
        await admin.create_topic(source, PARTITIONS)
        await admin.create_topic(sink, PARTITIONS)
    input_ends = dict.fromkeys(range(PARTITIONS), 0)

    async def produce_round(number: int) -> None:
        async with Producer(server.target, linger_ms=0) as producer:
            for batch in range(ROUND_BATCHES):
                for p in range(PARTITIONS):
                    values = [b"%d-%d-%d-%d" % (number, batch, p, i)
                              for i in range(BATCH_RECORDS)]
                    results = await (await producer.send_many(source, values, partition=p))
                    input_ends[p] = results[-1].offset + 1
                    expected.extend(b"out:" + v for v in values)

    workers = [Worker(slot, tmp_path / f"worker-{slot}.log",
                      (server.target, source, sink, group)) for slot in range(WORKERS)]
    server_kills = 0
    try:
        for worker in workers:
            await worker.start()
        for number in range(ROUNDS):
            await produce_round(number)
            commits_before = sum(w.commits for w in workers)
            await until(lambda c=commits_before: sum(w.commits for w in workers) >= c + 3,
                        f"round {number}: workers commit transactions again", BOUND_S)
            if number in SERVER_KILL_ROUNDS:
                await loop.run_in_executor(None, server.kill)
                server = await loop.run_in_executor(None, lambda: start_server(data_dir, *flags))
                server_kills += 1
            else:
                victim = rng.choice(workers)
                await victim.kill()
                await victim.start()
            assert all(w.alive() for w in workers), "a worker process exited"

        async def committed_all() -> bool:
            async with Client(server.target, timeout_s=10) as client:
                found = await client.offset_fetch(group)
            return all(found.get(TopicPartition(source, p)) is not None
                       and found[TopicPartition(source, p)].offset == end
                       for p, end in input_ends.items())

        deadline = loop.time() + BOUND_S
        while not await committed_all():
            assert loop.time() < deadline, "the group's offsets did not reach the input's end"
            assert all(w.alive() for w in workers), "a worker process exited"
            await asyncio.sleep(0.2)
    finally:
        for worker in workers:
            if worker.process is not None:
                await worker.kill()
    assert server_kills == len(SERVER_KILL_ROUNDS)
    async with Client(server.target, timeout_s=10) as client:
        output = await asyncio.wait_for(_read_committed(client, sink), BOUND_S)
    duplicates = [v for v, n in collections.Counter(output).items() if n > 1]
    missing = set(expected) - set(output)
    assert not duplicates, f"{len(duplicates)} transforms twice, e.g. {duplicates[:5]}"
    assert not missing, f"{len(missing)} transforms missing, e.g. {sorted(missing)[:5]}"
    assert sorted(output) == sorted(expected)
