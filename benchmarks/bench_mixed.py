"""Reads while a producer writes: what an inline append costs the requests that wait behind it.

A large append runs inline on the event loop while no read is being served, and in the thread
pool while reads are (``append_in_executor_min_bytes``, ``append_inline_max_bytes``,
docs/server.md "where appends run"): the hop to a thread costs CPU, and an inline append makes
a read that arrives meanwhile wait for it. This measures both sides: random FetchByOffset
latency (one stored batch of 100 records, raw) on an idle server and on one receiving 1 MiB
produce requests from another process (``--in-flight`` at once, as fast as it can), and the
producer's MB/s, for three servers side by side:

  default    the defaults: 1 MiB appends in the pool while reads are served, else inline
  executor   ``--append-inline-max-bytes 0``: always in the pool (before session 3)
  inline     ``--append-in-executor-min-bytes 4194304``: always inline

Each round loads one server after the other (the order rotating), so that the machine's other
load falls on both alike; every figure is the median over ``--rounds`` rounds. The producer's

Run: ``.venv/bin/python -m benchmarks.bench_mixed [--rounds 3] [--lookups 1000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import grpc

from benchmarks.bench_server import (
    MAX_MESSAGE_BYTES,
    RECORDS_PER_BATCH,
    _build_log,
    _drop_topic,
    _mib_batch,
    _p,
    _process,
    _produce,
    _template_batch,
)
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

SETTINGS = {
    "default": [],
    "executor": ["--append-inline-max-bytes", "0"],
    "inline": ["--append-in-executor-min-bytes", str(4 << 20)],
}


def _producer_main(target: str, in_flight: int) -> None:
    """The load: 1 MiB Produce requests to topic "load" until stdin closes; prints MB/s. The
    topic is deleted (and its files removed) after each phase: see bench_server._drop_topic."""
    payload = _mib_batch()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(sys.stdin.fileno(), stop.set)
        sent = 0
        started = time.perf_counter()
        while not stop.is_set():
            await _produce(target, "load", [payload] * 64, in_flight)
            sent += 64 * len(payload)
        print(f"{sent / (time.perf_counter() - started) / 1e6:.1f}", flush=True)

    asyncio.run(run())


@contextlib.contextmanager
def _load(target: str, in_flight: int) -> Iterator[list[float]]:
    """A producer process sending to ``target`` while the block runs; its MB/s lands in the
    list yielded once the block is over."""
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_mixed", "producer", target, str(in_flight)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    result: list[float] = []
    try:
        time.sleep(1.0)  # let it reach its steady rate
        yield result
    finally:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        result.append(float(process.stdout.read().strip() or "nan"))
        process.wait(60)


def _latencies_ms(target: str, requests: list[pb.FetchByOffsetRequest]) -> list[float]:
    with grpc.insecure_channel(target) as channel:
        call = broker_pb2_grpc.BrokerStub(channel).FetchByOffset
        for request in requests[:50]:
            call(request)
        samples = []
        for request in requests:
            started = time.perf_counter()
            call(request)
            samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "producer":
        _producer_main(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lookups", type=int, default=1000, help="fetches per phase")
    parser.add_argument("--records", type=int, default=100_000, help="records in the read log")
    parser.add_argument("--in-flight", type=int, default=4)
    args = parser.parse_args()
    print(f"# reads during 1 MiB produce: {os.cpu_count()} cores, {args.records:,} records read, "
          f"{args.lookups} fetches per phase, rounds={args.rounds}")
    data_dirs = {name: tempfile.mkdtemp(prefix=f"stratalog-bench-mixed-{name}-")
                 for name in SETTINGS}
    results: dict[str, list[float]] = {}
    try:
        with contextlib.ExitStack() as stack:
            targets = {}
            for name, flags in SETTINGS.items():
                target, _, _ = stack.enter_context(_process([
                    sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
                    "--metrics-port", "0", "--log-dirs", data_dirs[name], "--logging-level", "WARNING",
                    "--max-request-bytes", str(MAX_MESSAGE_BYTES), *flags,
                ]))
                targets[name] = target
                with grpc.insecure_channel(target) as channel:
                    broker_pb2_grpc.BrokerStub(channel).CreateTopic(
                        pb.CreateTopicRequest(name="log", partitions=1))
                asyncio.run(_build_log(target, _template_batch(),
                                       args.records // RECORDS_PER_BATCH))
            names = list(SETTINGS)
            for round_ in range(args.rounds):
                rng = random.Random(round_)
                requests = [pb.FetchByOffsetRequest(
                    topic="log", offset=rng.randrange(args.records), max_bytes=1,
                    format=pb.FETCH_FORMAT_RECORD_BATCHES) for _ in range(args.lookups)]
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    idle = _latencies_ms(targets[name], requests)
                    with grpc.insecure_channel(targets[name]) as channel:
                        broker_pb2_grpc.BrokerStub(channel).CreateTopic(pb.CreateTopicRequest(
                            name="load", partitions=1, configs={"segment.bytes": str(1 << 30)}))
                    with _load(targets[name], args.in_flight) as rate:
                        loaded = _latencies_ms(targets[name], requests)
                    _drop_topic(targets[name], data_dirs[name], "load")
                    for label, samples in (("idle", idle), ("producing", loaded)):
                        results.setdefault(f"{name} {label} p50 ms", []).append(_p(samples, 50))
                        results.setdefault(f"{name} {label} p99 ms", []).append(_p(samples, 99))
                    results.setdefault(f"{name} produce MB/s", []).append(rate[0])
    finally:
        for directory in data_dirs.values():
            shutil.rmtree(directory, ignore_errors=True)
    print(f"{'measure':<32}{'median':>10}   runs")
    for name, values in results.items():
        runs = ", ".join(f"{v:.3f}" for v in values)
        print(f"{name:<32}{statistics.median(values):>10.3f}   {runs}")


if __name__ == "__main__":
    main()
