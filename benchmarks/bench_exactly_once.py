"""What exactly-once costs, against a real stratalog server, all in one run.

Starts one server process (as bench_client does) and runs, in this client process, rounds of:

  produce plain          Producer(idempotent=False).send_many(), lists of 10,000 values (its
                         default: one request in flight per partition, which keeps order)
  produce plain 5        the same with max_in_flight_per_partition=5 (no order guarantee)
  produce idempotent     Producer() (idempotent, the default: 5 in flight, order kept), same records
  produce transactional  Producer(transactional_id=...), a commit every 1,000 records
  consume uncommitted    ``async for batch in Consumer.batches()`` READ_UNCOMMITTED
  consume committed      the same READ_COMMITTED

one partition, null keys, 100-byte values, a fresh topic per produce. The consumes read the
transactional topic (every transaction committed: control batches, no aborted data) and the
idempotent one. Each round runs every operation once, in an order that rotates between rounds, so
that machine noise falls on all of them alike; figures are records / wall-clock second (median of
the rounds) and the ratios of the medians, which are what the goals are about:

  idempotent / plain 5    >= 0.90   (at most 10% fewer records/s, the same requests in flight)
  idempotent / plain      what a user sees switching the default on (informational)
  committed / uncommitted  within 10% either way

Run: ``.venv/bin/python -m benchmarks.bench_exactly_once [--records 300000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable

from stratalog.client import Client, Consumer, IsolationLevel, Producer

from .bench_client import SEND_MANY_CHUNK, VALUE_SIZE_BYTES, codec_path, make_values, running_server

TXN_RECORDS = 1_000


async def produce_many(client: Client, topic: str, values: list[bytes], **options: object) -> float:
    started = time.perf_counter()
    async with Producer(client, linger_ms=5, **options) as producer:  # type: ignore[arg-type]
        for i in range(0, len(values), SEND_MANY_CHUNK):
            await producer.send_many(topic, values[i : i + SEND_MANY_CHUNK], partition=0)
        await producer.flush()
    return len(values) / (time.perf_counter() - started)


async def produce_transactional(client: Client, topic: str, values: list[bytes]) -> float:
    started = time.perf_counter()
    async with Producer(client, linger_ms=5, transactional_id=f"bench-{topic}") as producer:
        for i in range(0, len(values), TXN_RECORDS):
            async with producer.transaction():
                await producer.send_many(topic, values[i : i + TXN_RECORDS], partition=0)
    return len(values) / (time.perf_counter() - started)


async def consume(client: Client, topic: str, expected: int, level: IsolationLevel) -> float:
    started = time.perf_counter()
    count = 0
    async with Consumer(client, topic, start="earliest", isolation_level=level) as consumer:
        async for batch in consumer.batches():
            count += len(batch)
    elapsed = time.perf_counter() - started
    assert count == expected, (topic, level, count, expected)
    return count / elapsed


async def run(target: str, records: int, rounds: int) -> dict[str, list[float]]:
    values = make_values(records)
    names = ["produce plain", "produce plain 5", "produce idempotent", "produce transactional",
             "consume uncommitted", "consume committed"]
    figures: dict[str, list[float]] = {name: [] for name in names}
    async with Client(target) as client:
        for round_index in range(rounds):
            topics = {name: f"eos-{round_index}-{i}" for i, name in enumerate(names[:4])}
            for topic in topics.values():
                await client.create_topic(topic, 1)
            txn_topic = topics["produce transactional"]
            operations: dict[str, Callable[[], Awaitable[float]]] = {
                "produce plain": functools.partial(
                    produce_many, client, topics["produce plain"], values, idempotent=False),
                "produce plain 5": functools.partial(
                    produce_many, client, topics["produce plain 5"], values, idempotent=False,
                    max_in_flight_per_partition=5),
                "produce idempotent": functools.partial(
                    produce_many, client, topics["produce idempotent"], values),
                "produce transactional": functools.partial(
                    produce_transactional, client, txn_topic, values),
            }
            shift = round_index % len(operations)
            order = list(operations)[shift:] + list(operations)[:shift]
            for name in order:
                figures[name].append(await operations[name]())
            reads = [("consume uncommitted", IsolationLevel.READ_UNCOMMITTED),
                     ("consume committed", IsolationLevel.READ_COMMITTED)]
            if round_index % 2:
                reads.reverse()
            for name, level in reads:
                figures[name].append(await consume(client, txn_topic, records, level))
            for topic in topics.values():
                await client.delete_topic(topic)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
        loop_name = "uvloop"
    except ImportError:
        loop_name = "asyncio"
    print(f"# bench_exactly_once: {args.records} records of {VALUE_SIZE_BYTES} bytes, "
          f"median of {args.rounds} rounds")
    print(f"# python {platform.python_version()}, {os.cpu_count()} cores, {loop_name}, "
          f"record codec: {codec_path()}")
    with running_server() as target:
        figures = asyncio.run(run(target, args.records, args.rounds))
    medians = {name: statistics.median(rates) for name, rates in figures.items()}
    print(f"{'operation':<24}{'median rec/s':>14}{'min':>12}{'max':>12}")
    for name, rates in figures.items():
        print(f"{name:<24}{medians[name]:>14,.0f}{min(rates):>12,.0f}{max(rates):>12,.0f}")
    idempotent = medians["produce idempotent"] / medians["produce plain 5"]
    idempotent_default = medians["produce idempotent"] / medians["produce plain"]
    transactional = medians["produce transactional"] / medians["produce plain"]
    committed = medians["consume committed"] / medians["consume uncommitted"]
    print(f"idempotent / plain 5        {idempotent:6.2f}  (goal >= 0.90)")
    print(f"idempotent / plain          {idempotent_default:6.2f}  (each with its default in flight)")
    print(f"transactional / plain       {transactional:6.2f}  (a commit every {TXN_RECORDS:,})")
    print(f"committed / uncommitted     {committed:6.2f}  (goal 0.90..1.10)")


if __name__ == "__main__":
    main()
