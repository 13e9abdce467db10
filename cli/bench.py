"""``stratalog bench``: measure a running server from this machine, as a user would.

Like Kafka's producer/consumer perf-test tools, it works on a topic of its own (``bench-<random>``
unless ``--topic`` names one, deleted afterwards unless ``--keep``) and reports:

* produce: ``--records`` records of ``--record-size`` bytes through the client's batching
  Producer (records/s, MB/s);
* consume: the same records read back through the Consumer (records/s, MB/s);
* fetch latency: ``--fetches`` random FetchByOffset requests (1 batch each), p50/p99 in ms.

Results print as a table, or as JSON with ``--format json``. These are end-to-end figures (client and
server on their machines, with whatever else runs there); the repository's ``benchmarks/``
harness measures the parts in isolation against baselines.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

from stratalog.client import Consumer, FetchFormat, Producer
from stratalog.records import Compression

from .connection import add_target_argument, connect, fail, run_client_command
from .output_format import add_format_argument, wants_json

__all__ = ["add_parser", "run"]

_CHUNK_RECORDS = 10_000


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="measure produce, consume and fetch latency")
    parser.add_argument("--records", type=int, default=1_000_000, help="default 1000000")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes (default 100)")
    parser.add_argument("--partitions", type=int, default=1, help="default 1")
    parser.add_argument("--compression", default="none",
                        choices=[c.name.lower() for c in Compression])
    parser.add_argument("--fetches", type=int, default=1000,
                        help="random FetchByOffset requests to time (default 1000)")
    parser.add_argument("--topic", help="use this topic (created if missing)")
    parser.add_argument("--keep", action="store_true", help="keep the topic afterwards")
    add_format_argument(parser)
    add_target_argument(parser)
    parser.set_defaults(run=run)


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run(args: argparse.Namespace) -> int:
    for name in ("records", "record_size", "partitions"):
        if getattr(args, name) < 1:
            return fail("bench", f"--{name.replace('_', '-')} must be >= 1")
    if args.fetches < 0:
        return fail("bench", "--fetches must be >= 0")
    topic = args.topic or f"bench-{os.urandom(4).hex()}"

    async def body() -> int:
        results: dict[str, float | int | str] = {
            "topic": topic, "records": args.records, "record_size": args.record_size,
            "partitions": args.partitions, "compression": args.compression,
        }
        payload = os.urandom(args.record_size)
        async with connect(args) as client:
            created = False
            if args.topic is None or topic not in {t.name for t in await client.list_topics()}:
                await client.create_topic(topic, args.partitions)
                created = True
            try:
                started = time.perf_counter()
                async with Producer(client, compression=args.compression) as producer:
                    pending = []
                    for sent in range(0, args.records, _CHUNK_RECORDS):
                        count = min(_CHUNK_RECORDS, args.records - sent)
                        pending.append(await producer.send_many(topic, [payload] * count))
                        if len(pending) > 16:
                            await pending.pop(0)
                    for future in pending:
                        await future
                elapsed = time.perf_counter() - started
                results["produce_records_per_s"] = round(args.records / elapsed)
                results["produce_mb_per_s"] = round(
                    args.records * args.record_size / elapsed / 1e6, 1
                )

                started = time.perf_counter()
                consumed = 0
                async with Consumer(client, topic, start="earliest") as consumer:
                    async for batch in consumer.batches():
                        consumed += len(batch)
                elapsed = time.perf_counter() - started
                results["consumed"] = consumed
                results["consume_records_per_s"] = round(consumed / elapsed)
                results["consume_mb_per_s"] = round(consumed * args.record_size / elapsed / 1e6, 1)

                if args.fetches:
                    ends = [
                        (await client.list_offsets(topic, p, -1)).offset
                        for p in range(args.partitions)
                    ]
                    rng = random.Random(7)
                    latencies_ms = []
                    for _ in range(args.fetches):
                        partition = rng.randrange(args.partitions)
                        if ends[partition] == 0:
                            continue
                        offset = rng.randrange(ends[partition])
                        t0 = time.perf_counter()
                        await client.fetch_by_offset(
                            topic, partition, offset, max_bytes=1,
                            fetch_format=FetchFormat.RECORD_BATCHES,
                        )
                        latencies_ms.append((time.perf_counter() - t0) * 1000)
                    if latencies_ms:
                        results["fetch_p50_ms"] = round(statistics.median(latencies_ms), 3)
                        results["fetch_p99_ms"] = round(_percentile(latencies_ms, 0.99), 3)
            finally:
                if created and not args.keep:
                    await client.delete_topic(topic)
        if wants_json(args):
            print(json.dumps(results))
        else:
            width = max(map(len, results))
            for key, value in results.items():
                print(f"{key:<{width}}  {value}")
        return 0

    return run_client_command("bench", body)
