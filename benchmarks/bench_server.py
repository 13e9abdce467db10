"""The server against the gRPC transport's ceiling: produce throughput and random-read latency.

In one run on one machine, each server a separate process on 127.0.0.1, this client process
measures:

  no-op server (the ceiling)   a grpc.aio server on uvloop with the Broker service, the same
                               gRPC options as stratalog's and the same process settings (malloc
                               thresholds, GIL switch interval; ``--untuned-noop``: the defaults),
                               whose methods return at once: Produce an
                               empty response, FetchByOffset/FetchByTimestamp a response carrying
                               a payload of the size the real server returns (one stored batch)
  produce 1 MiB batches        pre-encoded batches of 100-byte records (~9,400 records, just
                               under 1 MiB), one per request, ``--in-flight`` requests at once
                               (grpc.aio client), to a topic with 1 GiB segments: MB/s, and the
                               ratio to the same requests against the no-op server. The two
                               servers take turns (``--produce-rounds`` each per run); after a
                               run the topic is deleted and its files removed (see _drop_topic)
  random FetchByOffset         one request at a time (blocking stub), uniformly random offsets
                               over a log of ``--records`` records in >= 100 segments, max_bytes=1
                               (one stored batch of 100 records back, raw): p50 and p99 latency,
                               and their ratios to the no-op's unary latency for the same sizes.
                               The unary kinds (no-op, the two fetches, ListOffsets) are timed in
                               turns, one request of each kind per round, so that the machine's
                               other load falls on all of them alike
  random FetchByTimestamp      the same with uniformly random timestamps
  ListOffsets latest           the server's fixed cost per unary RPC: no storage work but
                               reading the log end offset, an empty-ish response
  server RSS                   process_resident_memory_bytes from the metrics endpoint at the end
  server CPU                   each server process's CPU time (/proc/PID/stat, all threads) per
                               MiB produced and per unary call: a figure the machine's other load
                               hardly moves, unlike the wall-clock ones
  client CPU                   this process's CPU time per MiB produced, per server: the sending
                               side's share of the two cores

The log is built from one template batch of 100 records (100-byte values, timestamps 1 ms
apart) whose base timestamp is patched per batch and its CRC recomputed, so that building 10
million records costs the server's append path, not the encoder's time (bench_client measures
the encoder); one batch per Produce request, as a Kafka producer sends them.
Each figure is the median of ``--runs`` runs.

With ``--secure`` a third server runs: stratalog with TLS and password authentication on
(benchmarks/security_setup.py), with its own copy of the log; it takes its turns in the produce
runs and its fetches and ListOffsets are timed in the same rounds ("secure ..." rows), and the
last lines give secure / plain for produce MB/s and the fetch percentiles (issue 13's goal:
at most 15% fewer records/s, p99 fetch at most 1.3 times). A fourth server, the no-op with TLS
("secure noop produce"), takes produce turns too: TLS / plain no-op is what TLS costs gRPC's
transport alone, the bound for the secure / plain ratio of a server that adds nothing else. ``--acl`` turns the authorizer on in
that server, with one ACL (ALL on every topic for its caller) and byte-rate quotas it never
reaches: with ``--secure``, the goal's TLS + authentication + one ACL; alone, a plaintext
server with the authorizer and quotas (the "secure" rows then measure only those).

Run: ``.venv/bin/python -m benchmarks.bench_server [--records 10000000] [--runs 3] [--secure]
[--acl]``
(``--records 1000000 --runs 1`` for a quick look). The data directory lives under /tmp and is
removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import platform
import random
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from stratalog.records import build_batch
from stratalog.records.batch import rewrite_crc
from stratalog.server.allocator import limit_arenas, tune_allocator
from stratalog.server.settings import Settings
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

RECORDS_PER_BATCH = 100
VALUE_SIZE_BYTES = 100
PRODUCE_REQUEST_BYTES = 1 << 20
T0 = 1_700_000_000_000
_BASE_TIMESTAMP_AT = 27  # RecordBatch v2: base timestamp, then max timestamp at 35
_MAX_TIMESTAMP_AT = 35
_INT64 = struct.Struct(">q")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_WARM_UP_CALLS = 50


# ------------------------------------------------------------------------ the no-op server


class _NoopBroker(broker_pb2_grpc.BrokerServicer):
    """Answers at once; fetches carry ``payload`` (the size the real server would send)."""

    def __init__(self, payload: bytes) -> None:
        self._response = pb.FetchResponse(record_batches=payload, next_offset=1)

    async def Produce(self, request, context):
        return pb.ProduceResponse(record_count=1)

    async def FetchByOffset(self, request, context):
        return self._response

    async def FetchByTimestamp(self, request, context):
        return self._response


async def _serve_noop(payload_bytes: int, tls: tuple[str, str] | None = None,
                      options: Sequence[tuple[str, int]] = ()) -> None:
    """The no-op server; with ``tls`` = (certificate file, key file), TLS as stratalog's has it
    (gRPC's defaults: TLS 1.3, AES-128-GCM); ``options``: more gRPC server arguments."""
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", 0),
        *options,
    ])
    broker_pb2_grpc.add_BrokerServicer_to_server(_NoopBroker(bytes(payload_bytes)), server)
    if tls is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        cert, key = (Path(name).read_bytes() for name in tls)
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)]))
    await server.start()
    print(f"stratalog: listening on 127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)


@contextlib.contextmanager
def _process(args: list[str],
             env: dict[str, str] | None = None) -> Iterator[tuple[str, int | None, int]]:
    """Start a server process (in ``env``, or this one's environment); yield its target,
    metrics port and pid; SIGTERM it at the end."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env=env)
    try:
        assert process.stdout is not None
        target, metrics_port = None, None
        for line in process.stdout:
            if match := re.search(r"listening on (\S+:\d+)", line):
                target = match.group(1)
            if match := re.search(r"metrics on https?://\S+:(\d+)/", line):
                metrics_port = int(match.group(1))
            if target and ("--metrics-port" not in args or metrics_port):
                break
        if target is None:
            raise RuntimeError(f"{args} exited with {process.wait()} before serving")
        yield target, metrics_port, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class _Connection:
    """How the client reaches one server: plaintext, or TLS with credentials on every call."""

    def __init__(self, setup: Any = None) -> None:
        self.setup = setup

    def channel(self, target: str, aio: bool = False, **kwargs: Any) -> Any:
        if self.setup is None:
            return (grpc.aio.insecure_channel if aio else grpc.insecure_channel)(target, **kwargs)
        credentials = self.setup.tls.channel_credentials()
        return (grpc.aio.secure_channel if aio else grpc.secure_channel)(
            target, credentials, **kwargs)

    def stub(self, channel: Any) -> Any:
        stub = broker_pb2_grpc.BrokerStub(channel)
        return stub if self.setup is None else _WithMetadata(stub, self.setup.auth.metadata)


class _WithMetadata:
    """A stub whose every call carries ``metadata`` (the authorization entry)."""

    def __init__(self, stub: Any, metadata: Any) -> None:
        self._stub, self._metadata = stub, metadata

    def __getattr__(self, name: str) -> Any:
        return functools.partial(getattr(self._stub, name), metadata=self._metadata)


_PLAIN = _Connection()


# ------------------------------------------------------------------------ payloads


def _template_batch() -> bytes:
    rng = random.Random(1)
    return build_batch([
        (T0 + i, None, bytes(rng.getrandbits(8) for _ in range(VALUE_SIZE_BYTES)), ())
        for i in range(RECORDS_PER_BATCH)
    ])


def _stamped(template: bytes, batch_index: int) -> bytes:
    """The template with timestamps moved to batch ``batch_index``'s, CRC recomputed."""
    batch = bytearray(template)
    base = T0 + batch_index * RECORDS_PER_BATCH
    _INT64.pack_into(batch, _BASE_TIMESTAMP_AT, base)
    _INT64.pack_into(batch, _MAX_TIMESTAMP_AT, base + RECORDS_PER_BATCH - 1)
    rewrite_crc(batch, 0, len(batch))
    return bytes(batch)


def _mib_batch() -> bytes:
    """One batch of 100-byte records as close to 1 MiB as fits (max.message.bytes default
    is 1,048,588), as a producer with batch.size = 1 MiB sends."""
    rng = random.Random(2)
    values = [bytes(rng.getrandbits(8) for _ in range(VALUE_SIZE_BYTES)) for _ in range(64)]
    count = PRODUCE_REQUEST_BYTES // (VALUE_SIZE_BYTES + 12)  # ~12 B of record framing
    while True:
        batch = build_batch([(T0 + i, None, values[i % 64], ()) for i in range(count)])
        if len(batch) <= PRODUCE_REQUEST_BYTES:
            return batch
        count -= (len(batch) - PRODUCE_REQUEST_BYTES) // (VALUE_SIZE_BYTES + 8) + 1


# ------------------------------------------------------------------------ measurements


async def _build_log(target: str, template: bytes, batches: int,
                     connection: _Connection = _PLAIN) -> None:
    """Append ``batches`` stamped batches to topic "log", one batch per request (as a Kafka
    producer sends one batch per partition per request, so that each batch gets its own index
    entry), 8 requests in flight. Requests in flight may be appended in another order than
    sent, so timestamps are nearly, not strictly, increasing with offsets."""
    async with connection.channel(target, aio=True) as channel:
        stub = connection.stub(channel)
        queue = iter(range(batches))

        async def worker() -> None:
            for index in queue:
                payload = _stamped(template, index)
                await stub.Produce(pb.ProduceRequest(topic="log", record_batches=payload))

        await asyncio.gather(*(worker() for _ in range(8)))


async def _produce(target: str, topic: str, payloads: list[bytes], in_flight: int,
                   connection: _Connection = _PLAIN) -> None:
    """Send every payload as one Produce request, ``in_flight`` requests at once."""
    async with connection.channel(target, aio=True, options=[
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]) as channel:
        stub = connection.stub(channel)
        queue = iter(payloads)

        async def worker() -> None:
            for payload in queue:
                await stub.Produce(pb.ProduceRequest(topic=topic, record_batches=payload))

        await asyncio.gather(*(worker() for _ in range(in_flight)))


def _drop_topic(target: str, data_dir: str, topic: str,
                connection: _Connection = _PLAIN) -> None:
    """Delete a produce run's topic and remove its files at once (not file.delete.delay.ms
    later), so that the next run writes into page cache the kernel has just freed.

    Why: on these VMs the host backs guest memory lazily and takes freed memory back, so the
    first write into page cache that grows past what the guest used before costs a host page
    fault per page: pwrite of 1 MiB then takes ~4 ms of CPU instead of ~0.3 (measured with a
    plain pwrite loop, no stratalog involved; docs/performance.md). Keeping every run's 512 MiB
    made each later run pay that, a cost of the hypervisor, not of the server; a broker in a
    steady state (retention deleting old segments) writes into reclaimed page cache.
    """
    with connection.channel(target) as channel:
        connection.stub(channel).DeleteTopic(pb.DeleteTopicRequest(name=topic))
    for entry in os.listdir(data_dir):
        if entry.startswith(f"{topic}-") and entry.endswith("-delete"):
            shutil.rmtree(os.path.join(data_dir, entry))


def _interleaved_latencies_ms(
    calls: list[tuple[object, str, list[object]]],
) -> list[list[float]]:
    """Latency samples of several kinds of call, taken in turns: request i of every kind, then
    request i + 1 of every kind, and so on (the order of kinds rotating each round).

    Taking them in turns, not one kind after the other, exposes every kind to the same moments
    of the machine's other load, so that the ratios between kinds hold even when a shared
    machine's load changes during the run. Each ``(stub, method, requests)`` is one kind.
    """
    bound = [(getattr(stub, method), requests) for stub, method, requests in calls]
    # (a stub may be a _WithMetadata: its methods carry the credentials)
    for call, requests in bound:  # warm up every channel and the server's caches
        for request in requests[:_WARM_UP_CALLS]:
            call(request)
    samples: list[list[float]] = [[] for _ in bound]
    rounds = min(len(requests) for _, requests in bound)
    kinds = len(bound)
    for index in range(rounds):
        for turn in range(kinds):
            kind = (index + turn) % kinds
            call, requests = bound[kind]
            started = time.perf_counter()
            call(requests[index])
            samples[kind].append((time.perf_counter() - started) * 1000)
    return samples


def _p(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) a process used so far: /proc/PID/stat.

    Unlike wall-clock rates, this hardly changes with what else the machine runs."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    match = re.search(r"^process_resident_memory_bytes (\S+)$", text, re.M)
    assert match is not None
    return float(match.group(1)) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lookups", type=int, default=2000, help="random fetches per run")
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--produce-mib", type=int, default=512,
                        help="MiB of 1 MiB requests per produce run and server")
    parser.add_argument("--produce-rounds", type=int, default=4,
                        help="turns each server takes per produce run (--produce-mib split)")
    parser.add_argument("--server-flag", action="append", default=[],
                        help="extra flag for the stratalog server, e.g. "
                             "--server-flag=--read-in-executor-min-bytes=0")
    parser.add_argument("--untuned-noop", action="store_true",
                        help="run the no-op server with CPython's and glibc's defaults instead "
                             "of the allocator and GIL settings the stratalog server applies")
    parser.add_argument("--secure", action="store_true",
                        help="also measure a stratalog server with TLS and password "
                             "authentication, in the same rounds")
    parser.add_argument("--acl", action="store_true",
                        help="that server also has the authorizer on (one ACL) and unreached"
                             " quotas; without --secure it is plaintext")
    parser.add_argument("noop", nargs="?", help=argparse.SUPPRESS)
    parser.add_argument("--payload-bytes", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--noop-tls", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.noop == "noop-server":
        if not args.untuned_noop:
            # The process settings the stratalog server applies at start-up (server/app.py):
            # the ceiling gets them too, so that the ratio measures the server's own work.
            tune_allocator(Settings().malloc_mmap_threshold_bytes)
            limit_arenas(Settings().malloc_arena_max)
            sys.setswitchinterval(Settings().gil_switch_interval_us / 1e6)
        try:
            import uvloop
            uvloop.run(_serve_noop(args.payload_bytes, args.noop_tls))
        except ImportError:
            asyncio.run(_serve_noop(args.payload_bytes, args.noop_tls))
        return

    template = _template_batch()
    batches = args.records // RECORDS_PER_BATCH
    # >= 100 segments for the log: segment.bytes from the log's size.
    segment_bytes = max(1 << 20, batches * len(template) // 110)
    mib_batch = _mib_batch()
    produce_payloads = [mib_batch] * args.produce_mib
    print(f"# stratalog server benchmark: {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} cores, {args.records:,} records of "
          f"{VALUE_SIZE_BYTES} B in batches of {RECORDS_PER_BATCH} ({len(template)} B), "
          f"segment.bytes={segment_bytes}, runs={args.runs}")
    data_dir = tempfile.mkdtemp(prefix="stratalog-bench-server-")
    secure_dir = tempfile.mkdtemp(prefix="stratalog-bench-server-secure-")
    results: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    noop_args = [sys.executable, "-m", "benchmarks.bench_server", "noop-server",
                 "--payload-bytes", str(len(template)),
                 *(["--untuned-noop"] if args.untuned_noop else [])]

    def server_args(log_dir: str, *security: str) -> list[str]:
        return [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
                "--metrics-port", "0", "--log-dirs", log_dir, "--logging-level", "WARNING",
                "--max-request-bytes", str(MAX_MESSAGE_BYTES),
                "--set", f"log.segment.bytes={segment_bytes}", *args.server_flag, *security]

    secure = _PLAIN
    security_flags: tuple[str, ...] = ()
    if args.secure:
        from benchmarks.security_setup import make_secure_setup

        secure = _Connection(make_secure_setup(Path(secure_dir)))
        security_flags = secure.setup.server_flags
    if args.acl:
        from benchmarks.security_setup import ANONYMOUS, USER, authorizer_flags

        security_flags += authorizer_flags(Path(secure_dir, "data"),
                                           f"User:{USER}" if args.secure else ANONYMOUS)
    try:
        with contextlib.ExitStack() as stack:
            noop_target, _, noop_pid = stack.enter_context(_process(noop_args))
            # With --secure, the ceiling with TLS too: what TLS costs the transport alone.
            noops = [("noop produce", noop_target, noop_pid, _PLAIN)]
            if args.secure:
                secure_noop_target, _, secure_noop_pid = stack.enter_context(_process([
                    *noop_args, "--noop-tls", str(secure.setup.cert_file),
                    str(secure.setup.key_file)]))
                noops.append(("secure noop produce", secure_noop_target, secure_noop_pid,
                              secure))
            target, mport, pid = stack.enter_context(_process(server_args(data_dir)))
            # (name prefix, target, pid, connection, data dir) of each stratalog server.
            stratalogs = [("", target, pid, _PLAIN, data_dir)]
            if args.secure or args.acl:
                secure_target, _, secure_pid = stack.enter_context(_process(server_args(
                    os.path.join(secure_dir, "data"), *security_flags)))
                stratalogs.append(("secure ", secure_target, secure_pid, secure,
                                   os.path.join(secure_dir, "data")))
            for prefix, server_target, _, connection, _ in stratalogs:
                with connection.channel(server_target) as channel:
                    stub = connection.stub(channel)
                    stub.CreateTopic(pb.CreateTopicRequest(name="log", partitions=1))
                    started = time.perf_counter()
                    asyncio.run(_build_log(server_target, template, batches, connection))
                    build_s = time.perf_counter() - started
                    described = stub.DescribeTopic(pb.DescribeTopicRequest(name="log")).topic
                    partition = described.partitions[0]
                    print(f"# {prefix}log built in {build_s:.1f} s: "
                          f"{partition.log_end_offset:,} records, "
                          f"{partition.segment_count} segments, "
                          f"{partition.size_bytes / 2**20:.0f} MiB")
            for run in range(args.runs):
                topic = f"produce-{run}"
                for _, server_target, _, connection, _ in stratalogs:
                    with connection.channel(server_target) as channel:
                        # Kafka's default segment size: the produce figure is about appends,
                        # not about the rolls the small segments of the read log would add.
                        connection.stub(channel).CreateTopic(pb.CreateTopicRequest(
                            name=topic, partitions=1,
                            configs={"segment.bytes": str(1 << 30)}))
                # The servers take turns, --produce-rounds times, so that the machine's
                # other load falls on all alike (a run of one then a run of the other swung
                # the ratio by +-0.2 here); each server's MB/s is its bytes over its own seconds.
                servers = noops + [
                    (f"{prefix}produce", t, p, c) for prefix, t, p, c, _ in stratalogs]
                seconds = {name: 0.0 for name, _, _, _ in servers}
                cpu_s = dict(seconds)
                client_cpu_s = dict(seconds)
                rounds = max(1, args.produce_rounds)
                chunk = produce_payloads[: max(1, len(produce_payloads) // rounds)]
                for turn in range(rounds):
                    shift = turn % len(servers)
                    for name, server_target, server_pid, connection in (
                            servers[shift:] + servers[:shift]):
                        cpu, client_cpu = _cpu_s(server_pid), time.process_time()
                        started = time.perf_counter()
                        asyncio.run(_produce(server_target, topic, chunk, args.in_flight,
                                             connection))
                        seconds[name] += time.perf_counter() - started
                        cpu_s[name] += _cpu_s(server_pid) - cpu
                        client_cpu_s[name] += time.process_time() - client_cpu
                for name in seconds:
                    record(f"{name} MB/s", rounds * len(chunk) * len(mib_batch) / seconds[name] / 1e6)
                    record(f"{name} server CPU ms/MiB", cpu_s[name] * 1000 / (rounds * len(chunk)))
                    record(f"{name} client CPU ms/MiB",
                           client_cpu_s[name] * 1000 / (rounds * len(chunk)))
                record("produce / no-op (this run)",
                       seconds["noop produce"] / seconds["produce"])
                for _, server_target, _, connection, log_dir in stratalogs:
                    _drop_topic(server_target, log_dir, topic, connection)
                rng = random.Random(run)
                end = partition.log_end_offset
                by_offset = [pb.FetchByOffsetRequest(
                    topic="log", offset=rng.randrange(end), max_bytes=1,
                    format=pb.FETCH_FORMAT_RECORD_BATCHES) for _ in range(args.lookups)]
                by_time = [pb.FetchByTimestampRequest(
                    topic="log", timestamp=T0 + rng.randrange(end), max_bytes=1,
                    format=pb.FETCH_FORMAT_RECORD_BATCHES) for _ in range(args.lookups)]
                latest = [pb.ListOffsetsRequest(topic="log", timestamp=-1)] * args.lookups
                kinds = [("noop unary", noop_target, by_offset, "FetchByOffset", _PLAIN)]
                for prefix, server_target, _, connection, _ in stratalogs:
                    kinds += [
                        (f"{prefix}FetchByOffset", server_target, by_offset, "FetchByOffset",
                         connection),
                        (f"{prefix}FetchByTimestamp", server_target, by_time,
                         "FetchByTimestamp", connection),
                        (f"{prefix}ListOffsets latest", server_target, latest, "ListOffsets",
                         connection),
                    ]
                channels = [c.channel(t) for _, t, _, _, c in kinds]
                cpu_noop = _cpu_s(noop_pid)
                cpu_servers = [_cpu_s(p) for _, _, p, _, _ in stratalogs]
                try:
                    all_samples = _interleaved_latencies_ms([
                        (connection.stub(channel), method, requests)
                        for channel, (_, _, requests, method, connection)
                        in zip(channels, kinds, strict=True)
                    ])
                finally:
                    for channel in channels:
                        channel.close()
                calls = args.lookups + _WARM_UP_CALLS
                record("noop unary server CPU us", (_cpu_s(noop_pid) - cpu_noop) * 1e6 / calls)
                for (prefix, _, server_pid, _, _), cpu in zip(stratalogs, cpu_servers,
                                                              strict=True):
                    record(f"{prefix}stratalog unary server CPU us (mean of 3 RPCs)",
                           (_cpu_s(server_pid) - cpu) * 1e6 / (3 * calls))
                for (name, _, _, _, _), samples in zip(kinds, all_samples, strict=True):
                    record(f"{name} p50 ms", _p(samples, 50))
                    record(f"{name} p99 ms", _p(samples, 99))
            assert mport is not None
            rss_mib = _rss_mib(mport)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(secure_dir, ignore_errors=True)

    medians = {name: statistics.median(values) for name, values in results.items()}
    print(f"{'measure':<28}{'median':>12}   runs")
    for name, value in medians.items():
        runs = ", ".join(f"{v:.3f}" for v in results[name])
        print(f"{name:<28}{value:>12.3f}   {runs}")
    print(f"{'server RSS MiB (end)':<28}{rss_mib:>12.1f}")
    print(f"produce / no-op produce       {medians['produce MB/s'] / medians['noop produce MB/s']:.2f}"
          "   (goal >= 0.80)")
    for name in ("FetchByOffset", "FetchByTimestamp"):
        p50 = medians[f"{name} p50 ms"] / medians["noop unary p50 ms"]
        p99 = medians[f"{name} p99 ms"] / medians["noop unary p99 ms"]
        print(f"{name:<18} p50 x{p50:.2f} (goal <= 1.2), p99 x{p99:.2f} (goal <= 2.0) "
              "of the no-op unary latency")
    if args.secure or args.acl:
        print("secure: " + " + ".join(
            (["TLS + password"] if args.secure else ["plaintext"])
            + (["authorizer (one ACL) + quotas (not reached)"] if args.acl else [])))
        produce = medians["secure produce MB/s"] / medians["produce MB/s"]
        print(f"secure / plain produce MB/s   {produce:.2f}   (issue 13's goal >= 0.85)")
        if args.secure:
            noop = medians["secure noop produce MB/s"] / medians["noop produce MB/s"]
            print(f"TLS / plain no-op produce MB/s {noop:.2f}   (what TLS costs the transport "
                  "alone: benchmarks/bench_tls.py)")
        for name in ("FetchByOffset", "FetchByTimestamp", "ListOffsets latest"):
            p50 = medians[f"secure {name} p50 ms"] / medians[f"{name} p50 ms"]
            p99 = medians[f"secure {name} p99 ms"] / medians[f"{name} p99 ms"]
            print(f"secure / plain {name:<18} p50 x{p50:.2f}, p99 x{p99:.2f} (goal p99 <= 1.3)")


if __name__ == "__main__":
    main()
