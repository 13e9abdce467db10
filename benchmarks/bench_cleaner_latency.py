"""Produce and fetch latency while the log cleaner runs, against the same run without cleaning.

Issue 16's goal: p99 of both within 1.5x of the same requests on the same server when nothing
is being cleaned. One server process (``log.cleaner.enable=false``: the benchmark decides when a
cleaning runs, through CleanPartition) and this client process, on 127.0.0.1. Each round:

1. builds a compacted topic ``dirty`` of about ``--log-mib`` MiB of 1 KiB records: ``--rounds-
   of-updates`` updates of every key, in batches of 100 records (one per Produce request, as a
   Kafka producer sends them), ``segment.bytes`` 16 MiB, then a sentinel record a minute later
   than the rest that rolls the segment (``segment.ms`` 5 s), so that the whole log but the
   sentinel is cleanable;
2. *cleaning*: starts CleanPartition of ``dirty`` from another thread and, while it runs, times
   requests on a separate topic ``probe`` in turns: a Produce of one 1 KiB record and a
   FetchByOffset of one stored batch (100 records) at a random offset, one request at a time
   (blocking stub);
3. *idle*: the same number of the same requests with no cleaning running;
4. deletes ``dirty`` (and its files: bench_server._drop_topic).

A cleaning runs in the server's thread pool (the RPC) or a cleaner thread (the background
cleaner): either way it shares the interpreter's GIL with the event loop that serves the probe,
which is what this measures. The figures are the p50 and p99 of each phase over all rounds,
their ratios (cleaning over idle), and the cleaner's MB/s of log cleaned as the RPC reports it.

Run: ``.venv/bin/python -m benchmarks.bench_cleaner_latency [--rounds 3] [--log-mib 128]``
(``--server-args '--gil-switch-interval-us 50'``: the server with other flags).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time

import grpc

from benchmarks.bench_server import _drop_topic, _p, _process
from stratalog.records import build_batch
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

T0 = 1_700_000_000_000
RECORD_VALUE_BYTES = 1024
RECORDS_PER_BATCH = 100
PROBE_BATCHES = 200
DIRTY_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(16 << 20),
    "segment.ms": "5000",
}


def _dirty_batches(log_mib: int, updates: int) -> list[bytes]:
    """Batches of 1 KiB records: every key updated ``updates`` times, ~``log_mib`` MiB in all."""
    rng = random.Random(16)
    values = [bytes(rng.getrandbits(8) for _ in range(RECORD_VALUE_BYTES)) for _ in range(64)]
    records_total = (log_mib << 20) // (RECORD_VALUE_BYTES + 40)
    keys = max(1, records_total // updates)
    batches = []
    for update in range(updates):
        for start in range(0, keys, RECORDS_PER_BATCH):
            batches.append(build_batch([
                (T0 + update, b"key-%08d" % k, values[(k + update) % 64], ())
                for k in range(start, min(keys, start + RECORDS_PER_BATCH))
            ]))
    return batches


def _build_dirty(stub: broker_pb2_grpc.BrokerStub, batches: list[bytes]) -> int:
    """Create ``dirty`` and write ``batches`` then the rolling sentinel; its log bytes."""
    stub.CreateTopic(pb.CreateTopicRequest(name="dirty", partitions=1, configs=DIRTY_CONFIGS))
    futures = []
    for batch in batches:
        futures.append(stub.Produce.future(pb.ProduceRequest(topic="dirty",
                                                             record_batches=batch)))
        if len(futures) >= 8:
            futures.pop(0).result()
    for future in futures:
        future.result()
    stub.Produce(pb.ProduceRequest(topic="dirty", records=[
        pb.Record(key=b"sentinel", value=b"sentinel", timestamp=T0 + 60_000)]))
    described = stub.DescribeTopic(pb.DescribeTopicRequest(name="dirty")).topic
    return described.partitions[0].size_bytes


def _probe_once(stub: broker_pb2_grpc.BrokerStub, rng: random.Random, probe_end: int,
                value: bytes, produce_ms: list[float], fetch_ms: list[float]) -> None:
    started = time.perf_counter()
    stub.Produce(pb.ProduceRequest(topic="probe", records=[pb.Record(key=b"p", value=value)]))
    produce_ms.append((time.perf_counter() - started) * 1000)
    request = pb.FetchByOffsetRequest(topic="probe", offset=rng.randrange(probe_end),
                                      max_bytes=1,
                                      format=pb.FETCH_FORMAT_RECORD_BATCHES)
    started = time.perf_counter()
    stub.FetchByOffset(request)
    fetch_ms.append((time.perf_counter() - started) * 1000)


def _clean(stub: broker_pb2_grpc.BrokerStub, outcome: dict[str, object]) -> None:
    """CleanPartition of ``dirty`` (in a thread of its own): its answer or error in ``outcome``."""
    try:
        outcome["result"] = stub.CleanPartition(pb.CleanPartitionRequest(topic="dirty"),
                                                timeout=3600)
    except grpc.RpcError as exc:
        outcome["error"] = exc


def _row(name: str, produce_ms: list[float], fetch_ms: list[float]) -> str:
    return (f"{name:<10} {len(produce_ms):>8} {_p(produce_ms, 50):>9.2f} "
            f"{_p(produce_ms, 99):>9.2f} {_p(fetch_ms, 50):>9.2f} {_p(fetch_ms, 99):>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--log-mib", type=int, default=128,
                        help="size of the log cleaned in each round (MiB)")
    parser.add_argument("--rounds-of-updates", type=int, default=4,
                        help="how many times each key of the cleaned log is written")
    parser.add_argument("--server-args", default="",
                        help="more flags for the server, e.g. '--gil-switch-interval-us 50'")
    args = parser.parse_args()

    batches = _dirty_batches(args.log_mib, args.rounds_of_updates)
    value = bytes(RECORD_VALUE_BYTES)
    rng = random.Random(7)
    samples = {"idle": ([], []), "cleaning": ([], [])}
    cleanings = []
    with tempfile.TemporaryDirectory(prefix="bench-cleaner-latency-") as data_dir, _process([
        sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
        "--metrics-port", "0", "--log-dirs", data_dir, "--set", "log.cleaner.enable=false",
        *args.server_args.split(),
    ]) as (target, _, _pid), grpc.insecure_channel(target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        stub.CreateTopic(pb.CreateTopicRequest(name="probe", partitions=1))
        template = [(T0 + i, b"p", value, ()) for i in range(RECORDS_PER_BATCH)]
        for _ in range(PROBE_BATCHES):
            stub.Produce(pb.ProduceRequest(topic="probe", record_batches=build_batch(template)))
        probe_end = PROBE_BATCHES * RECORDS_PER_BATCH
        for _ in range(200):  # warm up the channel and the server's caches
            _probe_once(stub, rng, probe_end, value, [], [])

        for round_number in range(args.rounds):
            log_bytes = _build_dirty(stub, batches)
            outcome: dict[str, object] = {}
            cleaner = threading.Thread(target=_clean, args=(stub, outcome))
            produce_ms, fetch_ms = [], []
            started = time.perf_counter()
            cleaner.start()
            while cleaner.is_alive():
                _probe_once(stub, rng, probe_end, value, produce_ms, fetch_ms)
            cleaner.join()
            elapsed_s = time.perf_counter() - started
            if "error" in outcome:
                raise SystemExit(f"CleanPartition failed: {outcome['error']}")
            result = outcome["result"]
            samples["cleaning"][0].extend(produce_ms)
            samples["cleaning"][1].extend(fetch_ms)
            idle_produce, idle_fetch = [], []
            for _ in range(len(produce_ms)):
                _probe_once(stub, rng, probe_end, value, idle_produce, idle_fetch)
            samples["idle"][0].extend(idle_produce)
            samples["idle"][1].extend(idle_fetch)
            cleanings.append((log_bytes, result, elapsed_s))
            rate = log_bytes / 2**20 / max(result.duration_ms, 1) * 1000
            print(f"round {round_number + 1}: cleaned {log_bytes / 2**20:.0f} MiB in "
                  f"{result.duration_ms} ms ({rate:.0f} MB/s of log), kept "
                  f"{result.records_kept} of {result.records_read} records; "
                  f"{len(produce_ms)} probes during it", flush=True)
            _drop_topic(target, data_dir, "dirty")

    print()
    print(f"{'phase':<10} {'probes':>8} {'prod p50':>9} {'prod p99':>9} {'fetch p50':>9} "
          f"{'fetch p99':>9}   (ms)")
    for name in ("idle", "cleaning"):
        print(_row(name, *samples[name]))
    idle, busy = samples["idle"], samples["cleaning"]
    print(f"{'ratio':<10} {'':>8} {_p(busy[0], 50) / _p(idle[0], 50):>8.2f}x "
          f"{_p(busy[0], 99) / _p(idle[0], 99):>8.2f}x {_p(busy[1], 50) / _p(idle[1], 50):>8.2f}x "
          f"{_p(busy[1], 99) / _p(idle[1], 99):>8.2f}x   (cleaning / idle; goal: p99 <= 1.5x)")
    total_mib = sum(c[0] for c in cleanings) / 2**20
    total_s = sum(c[1].duration_ms for c in cleanings) / 1000
    print(f"cleaner: {total_mib:.0f} MiB of log in {total_s:.1f} s, "
          f"{total_mib / max(total_s, 1e-9):.0f} MB/s (RPC duration_ms), {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
