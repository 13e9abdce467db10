"""Reads while a producer writes: what appends on the event loop cost the requests behind them.

Random FetchByOffset latency (one stored batch of 100 records, raw, over a log of
``--records`` records) on an idle server and on one receiving Produce requests from another
process (``--in-flight`` at once, as fast as it can), and the producer's MB/s. Two scenarios:

  placements (default)   1 MiB requests to a topic with 1 GiB segments, for three servers side
                         by side: where appends run (docs/server.md, "Where appends run")
                           default   1 MiB appends in the pool while reads are served, else
                                     inline
                           executor  ``--append-inline-max-bytes 0``: always in the pool
                           inline    ``--append-in-executor-min-bytes 4194304``: always inline
  rolling (``--rolling``)  requests of ``--load-request-kib`` (32 KiB: under
                         ``append_in_executor_min_bytes``, so appended on the loop) to a topic
                         that rolls a segment every ``--segment-mib`` (4 MiB) and whose
                         retention (``retention.bytes`` = ``--retention-mib``, checked every
                         maintenance pass of 200 ms) deletes segments while it runs, with
                         ``file.delete.delay.ms`` = ``--delete-delay-ms``: rolls, renames and
                         deletions beside the reads

``--baseline-python PATH`` compares two checkouts instead of the placements: the server of the
checkout whose virtualenv holds PATH (e.g. ``../before/.venv/bin/python``, a ``git worktree``
of the commit to compare with, set up by its own ``make install``: the "before") beside
this checkout's (the "after"), both with their default settings, in the same run.

Each round loads one server after the other (the order rotating), so that the machine's other
load falls on all alike; every figure is the median over ``--rounds`` rounds. The load topic is
deleted (and its files removed) after each phase (bench_server._drop_topic).

Run: ``.venv/bin/python -m benchmarks.bench_mixed [--rounds 3] [--lookups 1000]``;
``... --rolling --baseline-python ../before/.venv/bin/python --rounds 5 --lookups 3000``.
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
    T0,
    VALUE_SIZE_BYTES,
    _build_log,
    _drop_topic,
    _p,
    _process,
    _template_batch,
)
from stratalog.records import build_batch
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

PLACEMENTS = {
    "default": [],
    "executor": ["--append-inline-max-bytes", "0"],
    "inline": ["--append-in-executor-min-bytes", str(4 << 20)],
}
_KIB = 1024
_MIB = 1024 * _KIB
# Retention is checked every maintenance pass of the rolling scenario's servers.
_ROLLING_SERVER_FLAGS = ["--maintenance-interval-ms", "200",
                         "--set", "log.retention.check.interval.ms=200"]


def _batch_near(size_bytes: int) -> bytes:
    """One batch of 100-byte records as close to ``size_bytes`` as fits (1 MiB: a producer with
    batch.size = 1 MiB; max.message.bytes default is 1,048,588)."""
    rng = random.Random(2)
    values = [bytes(rng.getrandbits(8) for _ in range(VALUE_SIZE_BYTES)) for _ in range(64)]
    count = max(1, size_bytes // (VALUE_SIZE_BYTES + 12))  # ~12 B of record framing
    while True:
        batch = build_batch([(T0 + i, None, values[i % 64], ()) for i in range(count)])
        if len(batch) <= size_bytes or count == 1:
            return batch
        count -= (len(batch) - size_bytes) // (VALUE_SIZE_BYTES + 8) + 1


def _producer_main(target: str, in_flight: int, request_bytes: int) -> None:
    """The load: Produce requests of one batch of ``request_bytes`` to topic "load", on one
    channel, ``in_flight`` at once, until stdin closes; prints MB/s."""
    payload = _batch_near(request_bytes)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(sys.stdin.fileno(), stop.set)
        sent = 0
        started = time.perf_counter()
        async with grpc.aio.insecure_channel(target, options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ]) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            request = pb.ProduceRequest(topic="load", record_batches=payload)

            async def worker() -> None:
                nonlocal sent
                while not stop.is_set():
                    await stub.Produce(request)
                    sent += len(payload)

            await asyncio.gather(*(worker() for _ in range(in_flight)))
        print(f"{sent / (time.perf_counter() - started) / 1e6:.1f}", flush=True)

    asyncio.run(run())


@contextlib.contextmanager
def _load(target: str, in_flight: int, request_bytes: int) -> Iterator[list[float]]:
    """A producer process sending to ``target`` while the block runs; its MB/s lands in the
    list yielded once the block is over."""
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_mixed", "producer", target, str(in_flight),
         str(request_bytes)],
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


def _servers(args: argparse.Namespace) -> dict[str, tuple[str, list[str]]]:
    """name -> (the Python that runs the server, its extra flags)."""
    common = _ROLLING_SERVER_FLAGS if args.rolling else []
    if args.baseline_python:
        return {"before": (args.baseline_python, common), "after": (sys.executable, common)}
    return {name: (sys.executable, common + flags) for name, flags in PLACEMENTS.items()}


def _load_topic_configs(args: argparse.Namespace) -> dict[str, str]:
    if not args.rolling:
        return {"segment.bytes": str(1 << 30)}
    return {
        "segment.bytes": str(args.segment_mib * _MIB),
        "retention.bytes": str(args.retention_mib * _MIB),
        "retention.ms": "-1",  # the batches' timestamps are of 2023: size alone decides
        "file.delete.delay.ms": str(args.delete_delay_ms),
    }


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "producer":
        _producer_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lookups", type=int, default=1000, help="fetches per phase")
    parser.add_argument("--records", type=int, default=100_000, help="records in the read log")
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--rolling", action="store_true",
                        help="the load topic rolls and retention deletes segments meanwhile")
    parser.add_argument("--load-request-kib", type=int, default=None,
                        help="bytes of each produce request (default: 1024; 32 with --rolling)")
    parser.add_argument("--segment-mib", type=int, default=4, help="--rolling: segment.bytes")
    parser.add_argument("--retention-mib", type=int, default=16,
                        help="--rolling: retention.bytes of the load topic")
    parser.add_argument("--delete-delay-ms", type=int, default=100,
                        help="--rolling: file.delete.delay.ms of the load topic")
    parser.add_argument("--baseline-python", metavar="PATH", default=None,
                        help="compare with the server of the checkout whose venv holds PATH "
                             "(the 'before'), instead of the three placements")
    args = parser.parse_args()
    request_kib = args.load_request_kib or (32 if args.rolling else 1024)
    request_bytes = request_kib * _KIB
    servers = _servers(args)
    load_configs = _load_topic_configs(args)
    print(f"# reads during {request_kib} KiB produce: {os.cpu_count()} cores, "
          f"{args.records:,} records read, {args.lookups} fetches per phase, "
          f"rounds={args.rounds}, load topic {load_configs}")
    for name, (python, flags) in servers.items():
        print(f"# server {name}: {python} {' '.join(flags)}")
    data_dirs = {name: tempfile.mkdtemp(prefix=f"stratalog-bench-mixed-{name}-")
                 for name in servers}
    results: dict[str, list[float]] = {}
    try:
        with contextlib.ExitStack() as stack:
            targets = {}
            for name, (python, flags) in servers.items():
                target, _, _ = stack.enter_context(_process([
                    python, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
                    "--metrics-port", "0", "--log-dirs", data_dirs[name],
                    "--logging-level", "WARNING", "--max-request-bytes", str(MAX_MESSAGE_BYTES),
                    *flags,
                ]))
                targets[name] = target
                with grpc.insecure_channel(target) as channel:
                    # Its timestamps are of 2023: no retention.ms may delete it meanwhile.
                    broker_pb2_grpc.BrokerStub(channel).CreateTopic(pb.CreateTopicRequest(
                        name="log", partitions=1, configs={"retention.ms": "-1"}))
                asyncio.run(_build_log(target, _template_batch(),
                                       args.records // RECORDS_PER_BATCH))
            names = list(servers)
            for round_ in range(args.rounds):
                rng = random.Random(round_)
                requests = [pb.FetchByOffsetRequest(
                    topic="log", offset=rng.randrange(args.records), max_bytes=1,
                    format=pb.FETCH_FORMAT_RECORD_BATCHES) for _ in range(args.lookups)]
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    idle = _latencies_ms(targets[name], requests)
                    with grpc.insecure_channel(targets[name]) as channel:
                        stub = broker_pb2_grpc.BrokerStub(channel)
                        stub.CreateTopic(pb.CreateTopicRequest(
                            name="load", partitions=1, configs=load_configs))
                        with _load(targets[name], args.in_flight, request_bytes) as rate:
                            loaded = _latencies_ms(targets[name], requests)
                        load = stub.DescribeTopic(
                            pb.DescribeTopicRequest(name="load")).topic.partitions[0]
                    _drop_topic(targets[name], data_dirs[name], "load")
                    print(f"# round {round_} {name}: load topic ended with {load.segment_count} "
                          f"segments, {load.size_bytes / _MIB:.0f} MiB, offsets "
                          f"[{load.log_start_offset:,}, {load.log_end_offset:,})", flush=True)
                    for label, samples in (("idle", idle), ("producing", loaded)):
                        for q in (50, 99):
                            results.setdefault(f"{name} {label} p{q} ms", []).append(
                                _p(samples, q))
                    results.setdefault(f"{name} produce MB/s", []).append(rate[0])
    finally:
        for directory in data_dirs.values():
            shutil.rmtree(directory, ignore_errors=True)
    print(f"{'measure':<32}{'median':>10}   runs")
    for name, values in results.items():
        runs = ", ".join(f"{v:.3f}" for v in values)
        print(f"{name:<32}{statistics.median(values):>10.3f}   {runs}")
    if args.baseline_python:
        for measure in ("producing p50 ms", "producing p99 ms", "produce MB/s"):
            before = statistics.median(results[f"before {measure}"])
            after = statistics.median(results[f"after {measure}"])
            print(f"after / before, {measure:<18}{after / before:>8.2f}")


if __name__ == "__main__":
    main()
