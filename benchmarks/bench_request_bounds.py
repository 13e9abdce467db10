"""Request bounds (issue 13, part 2): what a decompression bomb costs, and what the pool costs
small compressed requests.

In one run, against one server process on 127.0.0.1, this client process measures:

  ListOffsets, idle            one call at a time: p50 and p99 latency, the server's fixed cost
  ListOffsets beside bombs     the same while another channel sends the probe's bomb request
                               again and again (498 zstd batches of one 63 MiB record of zeros,
                               ~1 MiB), against a server whose produce_decompressed_bytes_max is
                               ``--bomb-bound-mib`` (large, so that each bomb keeps the server
                               busy for seconds before it is refused): the other clients' latency
                               while the server decompresses. Before issue 13 the bomb ran on
                               the event loop and a ListOffsets waited for all of it (25 s)
  bomb refusal, default bound  the same request against the default bound (64 MiB): bombs
                               refused per second and server CPU per bomb
  small Produce, zstd vs none  ``--small-requests`` requests of one batch of 100 records of
                               160 bytes of text (16 KiB), one at a time, compressed with zstd
                               (validated in the thread pool since issue 13) and uncompressed
                               (inline): requests/s and server CPU per request, the price of the
                               pool hop for a small compressed request

Server CPU is the process's CPU time (/proc/PID/stat, all threads), which the machine's other
load hardly moves; latencies and rates are wall clock. Each figure is the median of ``--runs``.

Run: ``.venv/bin/python -m benchmarks.bench_request_bounds [--runs 3]``. The data directories
live under /tmp and are removed at the end.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time

import grpc

from benchmarks.bench_server import _cpu_s, _p, _process
from stratalog.records import Compression, build_batch
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

T0 = 1_700_000_000_000
BOMB_BATCHES = 498
BOMB_RECORD_BYTES = 63 << 20
TIMEOUT_S = 300.0


def _server_args(data_dir: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
            "--metrics-port", "0", "--log-dirs", data_dir, *flags]


def _bomb_request(topic: str) -> pb.ProduceRequest:
    batch = build_batch([(T0, None, bytes(BOMB_RECORD_BYTES), ())], compression=Compression.ZSTD)
    return pb.ProduceRequest(topic=topic, record_batches=batch * BOMB_BATCHES)


def _list_offsets_ms(stub: broker_pb2_grpc.BrokerStub, topic: str, calls: int) -> list[float]:
    request = pb.ListOffsetsRequest(topic=topic, timestamp=-1)
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        stub.ListOffsets(request, timeout=TIMEOUT_S)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _send_bombs(target: str, request: pb.ProduceRequest, stop: threading.Event,
                sent: list[int]) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        while not stop.is_set():
            try:
                stub.Produce(request, timeout=TIMEOUT_S)
            except grpc.RpcError as exc:
                assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT, exc  # RECORD_TOO_LARGE
            sent[0] += 1


def _latency_beside_bombs(bound_mib: int, calls: int, request: pb.ProduceRequest) -> dict:
    data_dir = tempfile.mkdtemp(prefix="bench-bounds-")
    try:
        args = _server_args(data_dir, "--produce-decompressed-bytes-max", str(bound_mib << 20))
        with _process(args) as (target, _, _pid), grpc.insecure_channel(target) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            stub.CreateTopic(pb.CreateTopicRequest(name="bomb", partitions=1), timeout=TIMEOUT_S)
            idle = _list_offsets_ms(stub, "bomb", calls)
            stop, sent = threading.Event(), [0]
            bomber = threading.Thread(target=_send_bombs, args=(target, request, stop, sent))
            bomber.start()
            time.sleep(0.5)  # the first bomb reaches the server
            busy = _list_offsets_ms(stub, "bomb", calls)
            stop.set()
            bomber.join()
        return {"idle": idle, "busy": busy, "bombs": sent[0]}
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _refusals(count: int, request: pb.ProduceRequest) -> tuple[float, float]:
    """Bombs refused per second and server CPU ms per bomb, at the default bound."""
    data_dir = tempfile.mkdtemp(prefix="bench-bounds-")
    try:
        with _process(_server_args(data_dir)) as (target, _, pid), \
                grpc.insecure_channel(target) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            stub.CreateTopic(pb.CreateTopicRequest(name="bomb", partitions=1), timeout=TIMEOUT_S)
            cpu_before, started = _cpu_s(pid), time.perf_counter()
            for _ in range(count):
                try:
                    stub.Produce(request, timeout=TIMEOUT_S)
                except grpc.RpcError as exc:
                    assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT, exc
                else:
                    raise AssertionError("a bomb was accepted")
            elapsed = time.perf_counter() - started
            return count / elapsed, (_cpu_s(pid) - cpu_before) * 1000 / count
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _small_produce(requests: int) -> dict[str, tuple[float, float]]:
    """requests/s and server CPU ms per request, by codec, one request at a time."""
    values = [(b"event %06d: user signed in from a browser; " % i) * 4 for i in range(100)]
    batches = {
        codec: build_batch([(T0 + i, None, v[:160], ()) for i, v in enumerate(values)],
                           compression=codec)
        for codec in (Compression.NONE, Compression.ZSTD)
    }
    data_dir = tempfile.mkdtemp(prefix="bench-bounds-")
    results = {}
    try:
        with _process(_server_args(data_dir)) as (target, _, pid), \
                grpc.insecure_channel(target) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            stub.CreateTopic(pb.CreateTopicRequest(name="small", partitions=1), timeout=TIMEOUT_S)
            for codec, batch in batches.items():
                request = pb.ProduceRequest(topic="small", record_batches=batch)
                for _ in range(50):  # warm up
                    stub.Produce(request, timeout=TIMEOUT_S)
                cpu_before, started = _cpu_s(pid), time.perf_counter()
                for _ in range(requests):
                    stub.Produce(request, timeout=TIMEOUT_S)
                elapsed = time.perf_counter() - started
                results[codec.name.lower()] = (
                    requests / elapsed, (_cpu_s(pid) - cpu_before) * 1000 / requests
                )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=300, help="ListOffsets per measure")
    parser.add_argument("--bomb-bound-mib", type=int, default=4096)
    parser.add_argument("--refusals", type=int, default=20)
    parser.add_argument("--small-requests", type=int, default=2000)
    args = parser.parse_args()
    request = _bomb_request("bomb")
    print(f"# {platform.node()}: {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}; bomb request {request.ByteSize()} bytes")
    figures: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    for _ in range(args.runs):
        beside = _latency_beside_bombs(args.bomb_bound_mib, args.calls, request)
        record("ListOffsets idle p50 ms", _p(beside["idle"], 50))
        record("ListOffsets idle p99 ms", _p(beside["idle"], 99))
        record("ListOffsets beside bombs p50 ms", _p(beside["busy"], 50))
        record("ListOffsets beside bombs p99 ms", _p(beside["busy"], 99))
        record("bombs in flight during the calls", beside["bombs"])
        per_s, cpu_ms = _refusals(args.refusals, request)
        record("bombs refused per s (64 MiB bound)", per_s)
        record("server CPU ms per refused bomb", cpu_ms)
        for codec, (rate, cpu) in _small_produce(args.small_requests).items():
            record(f"16 KiB Produce {codec} requests/s", rate)
            record(f"16 KiB Produce {codec} server CPU ms/request", cpu)
    width = max(len(name) for name in figures)
    for name, values in figures.items():
        print(f"{name:<{width}}  {statistics.median(values):10.2f}   "
              f"(runs: {', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
