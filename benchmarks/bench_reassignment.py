"""Reassignment catch-up, with and without the throttle (issue 29, item 2).

Starts etcd and four servers in cluster mode on 127.0.0.1, once per mode, creates a topic of
one partition with three replicas, writes ``--megabytes`` of 1 KB records into it (acks=all),
then ``--runs`` times moves one replica to the fourth server (the target: the replicas without
their last one, plus the server that holds none) and back, timing each move from the
AlterPartitionReassignments request to the moment no reassignment is listed and Metadata
shows the target replicas (docs/cluster.md, "Reassigning partitions"). MB/s is the partition's
bytes over that time: what the new replica copied while catching up.

Modes: ``unthrottled`` (the default settings) and ``throttled``
(``--replica-reassignment-throttled-rate`` ``--rate`` bytes/s on every server). Prints each
move, then the median and the range per mode (docs/performance.md, "Issue 29: reassignment
catch-up")::

    .venv/bin/python -m benchmarks.bench_reassignment --megabytes 32 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from stratalog.client import Client, Producer

from .bench_cluster_client import _stop, free_port, running_etcd
from .bench_takeover import Server, launch

TOPIC = "moves"
RECORD_BYTES = 1_000
#: A bound on one move: it turns a hang into an error.
MOVE_TIMEOUT_S = 600.0


@contextlib.contextmanager
def running_cluster(flags: tuple[str, ...]) -> Iterator[dict[int, Server]]:
    work_dir = Path(tempfile.mkdtemp(prefix="stratalog-bench-reassignment-"))
    servers: dict[int, Server] = {}
    try:
        with running_etcd(work_dir) as url:
            try:
                for node in (1, 2, 3, 4):
                    servers[node] = launch(url, node, free_port(), work_dir / f"node-{node}",
                                           flags)
                yield servers
            finally:
                for server in servers.values():
                    _stop(server.process)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


async def replicas_of(client: Client) -> tuple[tuple[int, ...], tuple[int, ...]]:
    (partition,) = (await client.metadata([TOPIC])).topics[TOPIC]
    return partition.replicas, partition.isr


async def fill(client: Client, megabytes: int) -> int:
    """Write ``megabytes`` MB of records (acks=all); the bytes written."""
    value = bytes(RECORD_BYTES)
    count = megabytes * 1_000_000 // RECORD_BYTES
    async with Producer(client, acks="all") as producer:
        for start in range(0, count, 10_000):
            await producer.send_many(TOPIC, [value] * min(10_000, count - start), partition=0)
        await producer.flush()
    return count * RECORD_BYTES


async def move(client: Client, target: tuple[int, ...]) -> float:
    """Reassign the partition to ``target``; the seconds until it is done."""
    started = time.monotonic()
    outcome = await client.alter_partition_reassignments({(TOPIC, 0): list(target)})
    if outcome[(TOPIC, 0)] is not None:
        raise RuntimeError(f"reassignment to {target} refused: {outcome[(TOPIC, 0)]}")
    while True:
        if not await client.list_partition_reassignments([(TOPIC, 0)]):
            replicas, isr = await replicas_of(client)
            if replicas == target and set(isr) == set(target):
                return time.monotonic() - started
        if time.monotonic() - started > MOVE_TIMEOUT_S:
            raise RuntimeError(f"reassignment to {target} not done in {MOVE_TIMEOUT_S} s")
        await asyncio.sleep(0.01)


async def measure(servers: dict[int, Server], megabytes: int, runs: int) -> list[float]:
    targets = ",".join(server.target for server in servers.values())
    async with Client(targets) as client:
        await client.create_topic(TOPIC, 1, {"min.insync.replicas": "2"}, replication_factor=3)
        for _ in range(200):
            _, isr = await replicas_of(client)
            if len(isr) == 3:
                break
            await asyncio.sleep(0.05)
        written = await fill(client, megabytes)
        original, _ = await replicas_of(client)
        spare = next(node for node in servers if node not in original)
        moved = (*original[:-1], spare)
        rates = []
        for run in range(runs):
            for target in (moved, original):
                seconds = await move(client, target)
                rate = written / seconds / 1e6
                rates.append(rate)
                print(f"  run {run + 1}: to {list(target)} in {seconds:.2f} s, {rate:.1f} MB/s",
                      flush=True)
        return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=5_000_000,
                        help="the throttled mode's rate, bytes/s")
    args = parser.parse_args()
    modes = {
        "unthrottled": (),
        "throttled": ("--replica-reassignment-throttled-rate", str(args.rate)),
    }
    results = {}
    for mode, flags in modes.items():
        print(f"{mode}:", flush=True)
        with running_cluster(flags) as servers:
            results[mode] = asyncio.run(measure(servers, args.megabytes, args.runs))
    print(f"\n{args.megabytes} MB, {args.runs * 2} moves per mode:")
    for mode, rates in results.items():
        print(f"  {mode:<12} median {statistics.median(rates):6.1f} MB/s"
              f"  (range {min(rates):.1f}-{max(rates):.1f})")


if __name__ == "__main__":
    main()
