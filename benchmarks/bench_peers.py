"""The cost of one request: stratalog side by side with NATS JetStream and Redis Streams.

Intuition: a user choosing a partitioned log for single-record work (a point read, one record
produced and acknowledged) would compare stratalog with the peers they could pick instead. This
harness starts all three servers on 127.0.0.1 (each one a separate process: stratalog's from
this checkout, ``nats-server -js`` and ``redis-server`` from the distribution's packages when
their binaries are on PATH; a missing one is skipped with one line), gives each the same data
(``--records`` values of 100 bytes, in one partition / stream / key) through its fast API, then
measures, through each system's Python client in this one process (uvloop for all):

  produce            the data set through the fast API: stratalog ``Producer().send_many``
                     (lists of 10,000); nats-py ``publish_async`` (4,000 in flight, its default)
                     then ``publish_async_completed``; redis-py pipelines of 1,000 ``XADD``
  consume            every record, each value's length summed: ``Consumer().batches()``;
                     an ordered push consumer (nats-py ``ordered_consumer=True``, a callback);
                     ``XRANGE`` pages of 10,000 from the last id read (exclusive)
  round trip         ``--round-trips`` records into a second stream, one at a time, each
                     acknowledged before the next: ``await (await Producer().send(...))``;
                     a JetStream publish through benchmarks/nats_wire.py; ``XADD``
  point read         ``--reads`` reads of one record at random offsets, each checked against
                     the value produced there: ``Client.fetch_by_offset(..., max_records=1)``,
                     the point read of docs/client.md, all else its defaults;
                     JetStream's direct get by sequence (``$JS.API.DIRECT.GET``, the stream
                     created with ``allow_direct``) through benchmarks/nats_wire.py;
                     ``XRANGE id id`` with the id XADD returned
                     for that offset (Redis has no offsets: the client keeps the ids)
  lookup by time     ``--reads`` lookups of the first record at or after a random time
                     between the first and last record's: ``Client.fetch_by_timestamp(...,
                     max_records=1)``, all else its defaults; NATS 2.9 has no get-by-time (2.11's direct get has
                     ``start_time``), so the best it offers is a binary search over direct gets
                     on the ``Nats-Time-Stamp`` header (~log2(records) + 1 round trips; the
                     stream's times never decrease); ``XRANGE <ms> + COUNT 1`` (Redis ids are
                     times)
  16 clients         ``--reads`` point reads spread over ``--clients`` connections of their own
                     (stratalog: a Client each, with gRPC's local subchannel pool so that each
                     has its own TCP connection, as separate processes would), all at once from
                     this process; reads/s and p50/p99 over all reads

Extra rows, so that the docs can show both the default and the tuned call: stratalog's round
trip with ``Producer(linger_ms=0)`` and with ``Client.produce``; each default workload of
stratalog's also through ``Client(sessions=False)`` (every request a unary RPC, as before issue
14's Session stream: "sessions=False" rows); its point read and lookup with ``max_records=1``
and ``fetch_format=RECORD_BATCHES`` (decoded by the client), and without ``max_records``
(Kafka's fetch: the whole batches from the record's on); NATS's lookup with a consumer per
lookup (a pull consumer created with
``deliver_policy=by_start_time``, one message fetched, the consumer deleted).

The Kafka listener's and NATS's round trips, point reads and 16 clients go through clients of
one shape, benchmarks/kafka_wire.py and benchmarks/nats_wire.py: one connection, the request
written by hand, the answer parsed in full and checked, a future per request. Their "library"
rows are the same workloads through kafka-python's classes (both ways) and through nats-py
(``js.publish``, ``js.get_msg(direct=True)``), whose own cost per request the client column
shows.

Method. The systems take turns: run r runs every system's workloads, the systems in an order
rotated by r (:func:`rotation`), each on a new topic / stream / key deleted after its run; the
random offsets and times (fractions of each system's time span) are the same for every system
within a run. Figures are medians over ``--runs`` runs of each run's rate or p50 / p99
(:func:`percentile`: nearest rank). Ratios are stratalog / peer of those medians: above 1 a rate
is stratalog's advantage, a latency its disadvantage. CPU per request: the client's from
``time.process_time()`` around the workload, the server's from its process's threads in /proc
(:class:`ServerCpu`), each divided by the workload's requests (records for produce and consume).

Persistence, chosen to match: stratalog and JetStream run with their defaults (every write to the
page cache at once; stratalog fsyncs when a segment rolls, JetStream every 2 minutes); Redis with
``appendonly yes``, ``appendfsync everysec`` (its recommended AOF setting: every write appended to
the file at once, an fsync a second from a background thread), no RDB snapshots (``save ""``) and
no automatic AOF rewrite, so that no fork lands in the middle of a workload
(``--redis-persistence none`` runs it in memory only).

Run: ``.venv/bin/python -m benchmarks.bench_peers [--records 1000000] [--runs 3] [--reads 2000]
[--round-trips 2000] [--clients 16] [--systems stratalog,nats,redis] [--json PATH]``
(``make bench`` installs the peers' Python clients: the ``bench`` extra).
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import calendar
import contextlib
import ctypes
import dataclasses
import functools
import importlib.metadata
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench_client import VALUE_SIZE_BYTES, codec_path, make_values, server_argv
from stratalog.client import Client, Consumer, FetchFormat, Producer, decode_fetched

SEND_MANY_CHUNK = 10_000  # values per Producer.send_many call (as bench_client)
REDIS_PIPELINE_CHUNK = 1_000  # XADDs per pipeline
REDIS_PAGE_RECORDS = 10_000  # entries per XRANGE page when consuming
SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 30.0

STRATALOG, NATS, REDIS = "stratalog", "NATS JetStream", "Redis Streams"
#: The same stratalog server through its Kafka listener (issue 28): librdkafka in bulk, the
#: minimal client of benchmarks/kafka_wire.py one request at a time.
STRATALOG_KAFKA = "stratalog Kafka"
SYSTEMS = (STRATALOG, STRATALOG_KAFKA, NATS, REDIS)
#: stratalog's two front ends: the ratio columns compare each with each peer.
OURS = (STRATALOG, STRATALOG_KAFKA)
SYSTEM_FLAGS = {"stratalog": STRATALOG, "kafka": STRATALOG_KAFKA, "nats": NATS, "redis": REDIS}
#: Bytes per read of the bulk fetch rows (a consumer's max.partition.fetch.bytes default).
FETCH_BYTES = 1 << 20


# --- the pure parts ---------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ascending ``sorted_values``: the smallest value with at
    least ``fraction`` of the values at or below it (so p99 of 2,000 is the 1,980th).

    O(1). Raises ValueError when ``sorted_values`` is empty or ``fraction`` is outside (0, 1].
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    # The rank is ceil(fraction * n), computed in integers so that 0.99 * 100 is rank 99, not
    # 100 (0.99 * 100 == 99.00000000000001 in floats).
    rank = -(-round(fraction * 1_000_000) * len(sorted_values) // 1_000_000)
    return sorted_values[max(rank, 1) - 1]


def rotation(names: Sequence[str], run_index: int) -> list[str]:
    """The order in which the systems take their turns in run ``run_index``: ``names`` rotated
    left by ``run_index``, so that over ``len(names)`` runs each system runs once in each
    position (first after the others' data was freed, last, ...)."""
    if not names:
        return []
    shift = run_index % len(names)
    return [*names[shift:], *names[:shift]]


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z\Z")


def rfc3339_ns(text: str) -> int:
    """Nanoseconds since the epoch of a UTC RFC 3339 time as NATS writes it
    (``2026-11-26T13:15:07.373018471Z``; Go drops the fraction's trailing zeros, and the whole
    fraction when it is zero). Raises ValueError for anything else."""
    match = _RFC3339.match(text)
    if match is None:
        raise ValueError(f"not a UTC RFC 3339 time: {text!r}")
    seconds = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S"))
    fraction = (match.group(2) or "").ljust(9, "0")
    return seconds * 1_000_000_000 + int(fraction)


def format_rfc3339_ns(ns: int) -> str:
    """The inverse of :func:`rfc3339_ns`, with all nine fraction digits."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{fraction:09d}Z"


def server_cpu_delta_s(before: tuple[float, float], after: tuple[float, float],
                       tick_s: float) -> float:
    """CPU seconds a server used between two samples of ``(stat_s, threads_s)``
    (:meth:`ServerCpu.sample`): the threads' nanosecond counters, unless the process's tick
    counter grew by more than their rounding allows (two ticks: utime and stime each lose less
    than one at each end), which means a thread exited in between and took its time out of the
    thread sum; then the ticks."""
    stat_delta = after[0] - before[0]
    threads_delta = after[1] - before[1]
    if stat_delta > threads_delta + 2 * tick_s:
        return stat_delta
    return max(threads_delta, 0.0)


# --- server processes -------------------------------------------------------------------------


class ServerCpu:
    """Reads a server process's CPU time from /proc: ``/proc/<pid>/stat`` (utime + stime in
    clock ticks, 10 ms here: every thread's, dead ones included) and the sum of
    ``/proc/<pid>/task/*/schedstat`` (nanoseconds, live threads only). A 2,000-read workload
    costs Redis ~20 ms of CPU, two ticks: the tick counter alone could not tell its cost per
    read, so :func:`server_cpu_delta_s` prefers the nanoseconds. Linux only; blocking (a few
    small reads)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick_s = 1.0 / os.sysconf("SC_CLK_TCK")

    def sample(self) -> tuple[float, float]:
        with open(f"/proc/{self.pid}/stat") as f:
            # Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
            fields = f.read().rsplit(")", 1)[1].split()
        stat_s = (int(fields[11]) + int(fields[12])) * self.tick_s
        threads_ns = 0
        for task in os.listdir(f"/proc/{self.pid}/task"):
            # A thread may exit between the listing and the read.
            with contextlib.suppress(FileNotFoundError, ProcessLookupError), \
                    open(f"/proc/{self.pid}/task/{task}/schedstat") as f:
                threads_ns += int(f.read().split()[0])
        return stat_s, threads_ns / 1e9

    def delta_s(self, before: tuple[float, float]) -> float:
        return server_cpu_delta_s(before, self.sample(), self.tick_s)


@dataclass
class Server:
    """A server process this script started: where it listens, its version, its settings."""

    system: str
    address: str  # host:port
    pid: int
    version: str
    settings: str
    kafka_address: str = ""  # stratalog's Kafka listener


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: the kernel sends it SIGTERM when this script
    # dies, even by SIGKILL, so that no server outlives the benchmark.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def server_process(argv: list[str], ready: re.Pattern[str], log_path: Path
                   ) -> Iterator[tuple[subprocess.Popen[bytes], re.Match[str]]]:
    """Starts ``argv`` with its output in ``log_path`` (a pipe nobody drains would stall it),
    waits until a line of the log matches ``ready`` and yields the process and the match;
    SIGTERM (then SIGKILL) at exit. Raises RuntimeError with the log's tail when the process
    exits or stays silent for SERVER_START_TIMEOUT_S."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            match = ready.search(log_path.read_text(errors="replace"))
            if match is not None:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{argv[0]} did not start (exit {process.poll()}); "
                                   f"its log {log_path} ends with:\n{tail}")
            time.sleep(0.05)
        yield process, match
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _version(argv: list[str], pattern: str) -> str:
    """What ``argv`` prints, ``pattern``'s group 1 if it matches; "unknown" when it cannot run."""
    try:
        output = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
    except OSError:
        return "unknown"
    match = re.search(pattern, output)
    return match.group(1) if match else (output.strip() or "unknown")


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@contextlib.contextmanager
def stratalog_server(work_dir: Path) -> Iterator[Server]:
    data_dir = work_dir / "stratalog"
    data_dir.mkdir()
    # The Kafka listener's line comes last: the gRPC address is read from the log before it.
    ready = re.compile(r"kafka on (\S+:\d+)")
    log_path = work_dir / "stratalog.log"
    argv = server_argv(str(data_dir), "--kafka-listen", "127.0.0.1:0")
    with server_process(argv, ready, log_path) as (process, match):
        listening = re.search(r"listening on (\S+:\d+)", log_path.read_text(errors="replace"))
        assert listening is not None
        commit = _version(["git", "rev-parse", "--short", "HEAD"], r"(\w+)")
        version = f"{_package_version('stratalog')} (commit {commit})"
        yield Server(STRATALOG, listening.group(1), process.pid, version,
                     "defaults: appends to the page cache, fsync when a segment rolls "
                     "(log.flush.interval.* unset, as Kafka's)", kafka_address=match.group(1))


@contextlib.contextmanager
def nats_server(work_dir: Path) -> Iterator[Server]:
    port = free_port()
    store_dir = work_dir / "jetstream"
    argv = ["nats-server", "--jetstream", "--store_dir", str(store_dir), "--addr", "127.0.0.1",
            "--port", str(port)]
    with server_process(argv, re.compile(r"Server is ready"), work_dir / "nats.log") as (
        process, _,
    ):
        version = _version(["nats-server", "--version"], r"\bv(\d\S*)")
        yield Server(NATS, f"127.0.0.1:{port}", process.pid, version,
                     "defaults (nats-server -js): file storage, 1 replica, writes to the page "
                     "cache, fsync every 2 minutes (sync_interval)")


REDIS_PERSISTENCE = {
    "aof": ["--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--auto-aof-rewrite-percentage", "0"],
    "none": ["--appendonly", "no", "--save", ""],
}
REDIS_SETTINGS = {
    "aof": "appendonly yes, appendfsync everysec, save \"\" (no RDB snapshots), "
           "auto-aof-rewrite-percentage 0",
    "none": "in memory only: appendonly no, save \"\"",
}


@contextlib.contextmanager
def redis_server(work_dir: Path, persistence: str) -> Iterator[Server]:
    port = free_port()
    data_dir = work_dir / "redis"
    data_dir.mkdir()
    argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data_dir),
            "--daemonize", "no", "--logfile", "", *REDIS_PERSISTENCE[persistence]]
    with server_process(argv, re.compile(r"Ready to accept connections"),
                        work_dir / "redis.log") as (process, _):
        version = _version(["redis-server", "--version"], r"v=(\S+)")
        yield Server(REDIS, f"127.0.0.1:{port}", process.pid, version,
                     REDIS_SETTINGS[persistence])


# --- measurements -----------------------------------------------------------------------------


@dataclass
class Measurement:
    """One workload of one system in one run: ``requests`` (records for produce and consume)
    done in ``wall_s``, the CPU both sides spent, and the latency of each request when timed one
    by one (sorted, seconds)."""

    requests: int
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float
    latencies_s: list[float] = field(default_factory=list)
    size_bytes: int = 0  # the bytes moved, where a row shows MB/s

    def figures(self) -> dict[str, float]:
        out = {
            "rate_per_s": self.requests / self.wall_s,
            "client_cpu_us": self.client_cpu_s / self.requests * 1e6,
            "server_cpu_us": self.server_cpu_s / self.requests * 1e6,
        }
        if self.size_bytes:
            out["mb_per_s"] = self.size_bytes / self.wall_s / 1e6
        if self.latencies_s:
            out["p50_us"] = percentile(self.latencies_s, 0.50) * 1e6
            out["p99_us"] = percentile(self.latencies_s, 0.99) * 1e6
        return out


class Meter:
    """Wall clock and both sides' CPU around one workload."""

    def __init__(self, server_cpu: ServerCpu) -> None:
        self._server_cpu = server_cpu

    def __enter__(self) -> Meter:
        self._server_before = self._server_cpu.sample()
        self._client_before = time.process_time()
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.wall_s = time.perf_counter() - self._started
        self.client_cpu_s = time.process_time() - self._client_before
        self.server_cpu_s = self._server_cpu.delta_s(self._server_before)

    def measurement(self, requests: int, latencies_s: list[float] | None = None,
                    size_bytes: int = 0) -> Measurement:
        return Measurement(requests, self.wall_s, self.client_cpu_s, self.server_cpu_s,
                           sorted(latencies_s or []), size_bytes)


async def timed_one_by_one(meter: Meter, call: Callable[[Any], Awaitable[object]],
                           arguments: Sequence[Any]) -> Measurement:
    """``call(argument)`` for each argument in turn, each timed."""
    latencies = []
    perf_counter = time.perf_counter
    with meter:
        for argument in arguments:
            started = perf_counter()
            await call(argument)
            latencies.append(perf_counter() - started)
    return meter.measurement(len(arguments), latencies)


async def timed_concurrently(meter: Meter, calls: Sequence[Callable[[Any], Awaitable[object]]],
                             arguments: Sequence[Any]) -> Measurement:
    """Each of ``calls`` (one per client) takes every ``len(calls)``-th argument, one at a
    time; the clients run at once."""
    latencies: list[float] = []
    perf_counter = time.perf_counter

    async def one_client(call: Callable[[Any], Awaitable[object]], mine: Sequence[Any]) -> None:
        for argument in mine:
            started = perf_counter()
            await call(argument)
            latencies.append(perf_counter() - started)

    with meter:
        await asyncio.gather(*(one_client(call, arguments[i::len(calls)])
                               for i, call in enumerate(calls)))
    return meter.measurement(len(arguments), latencies)


# --- the systems ------------------------------------------------------------------------------


@dataclass
class RunInputs:
    """What every system gets in one run: the values (offset i holds ``values[i]``), the
    offsets of the point reads (single client, then the concurrent clients'), the lookups'
    times as fractions of each system's time span, and the round trips' values."""

    run_index: int
    values: list[bytes]
    read_offsets: list[int]
    concurrent_offsets: list[int]
    lookup_fractions: list[float]
    round_trip_values: list[bytes]


class System(abc.ABC):
    """One system under test, through its Python client: how each workload is done.

    Subclasses set ``name`` and implement the workloads; ``variants()`` lists extra rows
    (row key -> workload) for calls other than the default. Each workload checks what it got
    (values, counts, times), so a fast wrong answer fails the run. Event-loop only.
    """

    name: str

    def __init__(self, server: Server) -> None:
        self.server = server
        self.meter = Meter(ServerCpu(server.pid))

    async def open(self) -> None:  # noqa: B027 (optional hook)
        pass

    async def close(self) -> None:  # noqa: B027 (optional hook)
        pass

    @abc.abstractmethod
    async def create(self, run_index: int) -> None:
        """A new, empty partition / stream / key for the data set and one for round trips."""

    @abc.abstractmethod
    async def drop(self) -> None:
        """Delete what :meth:`create` made."""

    @abc.abstractmethod
    async def produce(self, values: list[bytes]) -> Measurement:
        """The data set through the fast API, timed from the first record to the last ack."""

    @abc.abstractmethod
    async def consume(self, values: list[bytes]) -> Measurement:
        """Every record read back, each value's length summed."""

    @abc.abstractmethod
    async def round_trips(self, values: list[bytes]) -> Measurement:
        """One record at a time, each acknowledged before the next."""

    @abc.abstractmethod
    async def read_at(self, offset: int) -> None:
        """One point read with the default call; checks the value."""

    @abc.abstractmethod
    async def lookup(self, fraction: float) -> None:
        """The first record at or after the time ``fraction`` of the way from the first
        record's time to the last's; checks that its time is not earlier."""

    @abc.abstractmethod
    async def readers(self, count: int) -> list[Callable[[int], Awaitable[None]]]:
        """``count`` point-read callables, each on a connection of its own."""

    @abc.abstractmethod
    async def close_readers(self) -> None:
        pass

    def variants(self) -> dict[str, Callable[[RunInputs], Awaitable[Measurement]]]:
        return {}

    async def run(self, inputs: RunInputs, clients: int) -> dict[str, Measurement]:
        """Every workload of one run, in the order of :data:`ROWS`."""
        self.expected = inputs.values
        self.clients = clients
        await self.create(inputs.run_index)
        try:
            out = {
                "produce": await self.produce(inputs.values),
                "consume": await self.consume(inputs.values),
                "round_trip": await self.round_trips(inputs.round_trip_values),
                "point_read": await timed_one_by_one(self.meter, self.read_at,
                                                     inputs.read_offsets),
                "lookup": await timed_one_by_one(self.meter, self.lookup,
                                                 inputs.lookup_fractions),
            }
            calls = await self.readers(clients)
            try:
                out["concurrent_reads"] = await timed_concurrently(
                    self.meter, calls, inputs.concurrent_offsets)
            finally:
                await self.close_readers()
            for key, workload in self.variants().items():
                out[key] = await workload(inputs)
            return out
        finally:
            await self.drop()


def _check_value(system: str, offset: int, got: bytes | None, expected: list[bytes]) -> None:
    if got != expected[offset]:
        raise AssertionError(f"{system}: offset {offset} read {got!r}, "
                             f"expected {expected[offset]!r}")


def _check_time(system: str, target: int, got: int) -> None:
    if got < target:
        raise AssertionError(f"{system}: a lookup of time {target} found time {got}")


class Stratalog(System):
    name = STRATALOG

    async def open(self) -> None:
        self.client = Client(self.server.address)
        # The same calls as unary RPCs (each on a new HTTP/2 stream), as before issue 14: the
        # "sessions=False" rows, measured in the same run as the default Client's.
        self.unary_client = Client(self.server.address, sessions=False)
        self._readers: list[Client] = []

    async def close(self) -> None:
        await self.client.close()
        await self.unary_client.close()

    async def create(self, run_index: int) -> None:
        self.topic = f"peers-{run_index}"
        self.round_trip_topic = f"peers-rt-{run_index}"
        await self.client.create_topic(self.topic, 1)
        await self.client.create_topic(self.round_trip_topic, 1)

    async def drop(self) -> None:
        await self.client.delete_topic(self.topic)
        await self.client.delete_topic(self.round_trip_topic)

    async def produce(self, values: list[bytes]) -> Measurement:
        async with Producer(self.client) as producer:
            with self.meter:
                for i in range(0, len(values), SEND_MANY_CHUNK):
                    await producer.send_many(self.topic, values[i:i + SEND_MANY_CHUNK],
                                             partition=0)
                await producer.flush()
        end = await self.client.list_offsets(self.topic, 0, -1)
        assert end.offset == len(values), (end, len(values))
        first = await self.client.fetch_by_offset(self.topic, 0, 0, max_records=1)
        last = await self.client.fetch_by_offset(self.topic, 0, len(values) - 1, max_records=1)
        self.first_ms, self.last_ms = first.records[0].timestamp, last.records[0].timestamp
        return self.meter.measurement(len(values))

    async def consume(self, values: list[bytes]) -> Measurement:
        count = size = 0
        with self.meter:
            async with Consumer(self.client, self.topic) as consumer:
                async for batch in consumer.batches():
                    batch_values = batch.values
                    count += len(batch_values)
                    size += sum(map(len, batch_values))
        assert count == len(values) and size == len(values) * VALUE_SIZE_BYTES, (count, size)
        return self.meter.measurement(count)

    async def round_trips(self, values: list[bytes], client: Client | None = None,
                          **producer_options: Any) -> Measurement:
        async with Producer(client or self.client, **producer_options) as producer:
            with self.meter:
                for value in values:
                    await (await producer.send(self.round_trip_topic, value, partition=0))
        return self.meter.measurement(len(values))

    async def round_trips_client(self, values: list[bytes], client: Client) -> Measurement:
        with self.meter:
            for value in values:
                await client.produce(self.round_trip_topic, 0, [value])
        return self.meter.measurement(len(values))

    async def read_at(self, offset: int, client: Client | None = None,
                      max_records: int = 1) -> None:
        result = await (client or self.client).fetch_by_offset(
            self.topic, 0, offset, max_records=max_records)
        record = result.records[0]
        assert record.offset == offset, (record.offset, offset)
        _check_value(self.name, offset, record.value, self.expected)

    async def fetch_all(self, values: list[bytes]) -> Measurement:
        """The data set in reads of FETCH_BYTES of whole batches (RECORD_BATCHES: the bytes as
        stored, as a Kafka Fetch carries them), one after the other."""
        offset = size = reads = 0
        with self.meter:
            while offset < len(values):
                result = await self.client.fetch_by_offset(
                    self.topic, 0, offset, max_bytes=FETCH_BYTES,
                    fetch_format=FetchFormat.RECORD_BATCHES)
                size += len(result.record_batches)
                offset = result.next_offset
                reads += 1
        assert offset == len(values), offset
        return self.meter.measurement(len(values), size_bytes=size)

    async def read_batches_at(self, offset: int) -> None:
        result = await self.client.fetch_by_offset(
            self.topic, 0, offset, max_records=1, fetch_format=FetchFormat.RECORD_BATCHES)
        batch = decode_fetched(self.topic, 0, result.record_batches, offset,
                               result.high_watermark)[0]
        assert batch.offsets[0] == offset, (batch.offsets[0], offset)
        _check_value(self.name, offset, batch.values[0], self.expected)

    def _time_of(self, fraction: float) -> int:
        return self.first_ms + int(fraction * (self.last_ms - self.first_ms))

    async def lookup(self, fraction: float, client: Client | None = None,
                     max_records: int = 1) -> None:
        target = self._time_of(fraction)
        result = await (client or self.client).fetch_by_timestamp(
            self.topic, 0, target, max_records=max_records)
        record = result.records[0]
        assert record.offset == result.matched_offset, (record.offset, result.matched_offset)
        _check_time(self.name, target, record.timestamp)

    async def lookup_batches(self, fraction: float) -> None:
        target = self._time_of(fraction)
        result = await self.client.fetch_by_timestamp(
            self.topic, 0, target, max_records=1, fetch_format=FetchFormat.RECORD_BATCHES)
        batch = decode_fetched(self.topic, 0, result.record_batches, result.matched_offset,
                               result.high_watermark)[0]
        assert batch.offsets[0] == result.matched_offset, (batch.offsets[0], result)
        _check_time(self.name, target, batch.timestamps[0])

    async def readers(self, count: int, **client_options: Any
                      ) -> list[Callable[[int], Awaitable[None]]]:
        # gRPC shares one TCP connection between channels to the same target with the same
        # arguments (its global subchannel pool); a local pool gives each client its own.
        self._readers = [Client(self.server.address,
                                options=[("grpc.use_local_subchannel_pool", 1)],
                                **client_options)
                         for _ in range(count)]
        return [functools.partial(self.read_at, client=c) for c in self._readers]

    async def close_readers(self) -> None:
        for client in self._readers:
            await client.close()
        self._readers = []

    def variants(self) -> dict[str, Callable[[RunInputs], Awaitable[Measurement]]]:
        meter = self.meter

        async def one_by_one(call: Callable[[Any], Awaitable[None]], arguments: list[Any]
                             ) -> Measurement:
            return await timed_one_by_one(meter, call, arguments)

        async def concurrently_unary(inputs: RunInputs) -> Measurement:
            calls = await self.readers(self.clients, sessions=False)
            try:
                return await timed_concurrently(meter, calls, inputs.concurrent_offsets)
            finally:
                await self.close_readers()

        unary = self.unary_client
        return {
            "fetch_mb": lambda i: self.fetch_all(i.values),
            "round_trip.unary_rpc": lambda i: self.round_trips(i.round_trip_values, unary),
            "round_trip.linger0": lambda i: self.round_trips(i.round_trip_values, linger_ms=0),
            "round_trip.client": lambda i: self.round_trips_client(i.round_trip_values,
                                                                   self.client),
            "round_trip.client_unary": lambda i: self.round_trips_client(i.round_trip_values,
                                                                         unary),
            "point_read.unary_rpc": lambda i: one_by_one(
                functools.partial(self.read_at, client=unary), i.read_offsets),
            "lookup.unary_rpc": lambda i: one_by_one(
                functools.partial(self.lookup, client=unary), i.lookup_fractions),
            "concurrent_reads.unary_rpc": concurrently_unary,
            "point_read.batches": lambda i: one_by_one(self.read_batches_at, i.read_offsets),
            "point_read.whole": lambda i: one_by_one(
                lambda o: self.read_at(o, max_records=0), i.read_offsets),
            "lookup.batches": lambda i: one_by_one(self.lookup_batches, i.lookup_fractions),
            "lookup.whole": lambda i: one_by_one(
                lambda f: self.lookup(f, max_records=0), i.lookup_fractions),
        }


class StratalogKafka(System):
    """The stratalog server through its Kafka listener. Bulk through confluent-kafka
    (librdkafka) with its defaults; one request at a time through the minimal client of
    benchmarks/kafka_wire.py (Produce and Fetch written by hand, answers decoded by
    kafka-python's classes, on one asyncio connection; the "library" rows encode with
    kafka-python's classes too).

    A Kafka Fetch returns whole batches (the protocol has no record count): its point read
    reads the round-trip partition, whose records were each produced alone (one per batch),
    at the offset the run drew modulo its size; the "whole batch" row reads the bulk data set,
    whose batches librdkafka filled (up to 10,000 records)."""

    name = STRATALOG_KAFKA

    async def open(self) -> None:
        from benchmarks.kafka_wire import KafkaWire

        self.wire = await KafkaWire.connect(self.server.kafka_address)
        self.library_wire = await KafkaWire.connect(self.server.kafka_address,
                                                    library_encoding=True)
        self.admin = Client(self.server.address)
        self._readers: list[Any] = []

    async def close(self) -> None:
        await self.wire.close()
        await self.library_wire.close()
        await self.admin.close()

    async def create(self, run_index: int) -> None:
        self.topic = f"kafka-peers-{run_index}"
        self.round_trip_topic = f"kafka-peers-rt-{run_index}"
        await self.admin.create_topic(self.topic, 1)
        await self.admin.create_topic(self.round_trip_topic, 1)

    async def drop(self) -> None:
        await self.admin.delete_topic(self.topic)
        await self.admin.delete_topic(self.round_trip_topic)

    async def produce(self, values: list[bytes]) -> Measurement:
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer({"bootstrap.servers": self.server.kafka_address})
        topic = self.topic
        with self.meter:
            for value in values:
                while True:
                    try:
                        producer.produce(topic, value, partition=0)
                        break
                    except BufferError:  # its queue is full: let it send
                        producer.poll(0.001)
            assert producer.flush(60) == 0
        end = await self.admin.list_offsets(topic, 0, -1)
        assert end.offset == len(values), (end, len(values))
        first = await self.admin.fetch_by_offset(topic, 0, 0, max_records=1)
        last = await self.admin.fetch_by_offset(topic, 0, len(values) - 1, max_records=1)
        self.first_ms, self.last_ms = first.records[0].timestamp, last.records[0].timestamp
        return self.meter.measurement(len(values), size_bytes=len(values) * VALUE_SIZE_BYTES)

    async def consume(self, values: list[bytes]) -> Measurement:
        from confluent_kafka import Consumer as KafkaConsumer
        from confluent_kafka import TopicPartition

        # fetch.queue.backoff.ms 0: librdkafka's default (1,000) stops fetching for a second
        # each time its local queue passes queued.min.messages (100,000), which this reader of
        # 100-byte records drains in ~0.1 s: a run would measure the back-off, not the server
        # (docs/performance.md, "Issue 28: the Kafka listener").
        consumer = KafkaConsumer({"bootstrap.servers": self.server.kafka_address,
                                  "group.id": "bench-peers", "enable.auto.commit": False,
                                  "fetch.queue.backoff.ms": 0})
        count = size = 0
        try:
            with self.meter:
                consumer.assign([TopicPartition(self.topic, 0, 0)])
                while count < len(values):
                    for message in consumer.consume(10_000, 5.0):
                        if message.error() is not None:
                            raise RuntimeError(f"{self.name}: {message.error()}")
                        count += 1
                        size += len(message.value())
        finally:
            consumer.close()
        assert count == len(values) and size == len(values) * VALUE_SIZE_BYTES, (count, size)
        return self.meter.measurement(count, size_bytes=size)

    async def round_trips(self, values: list[bytes], wire: Any = None) -> Measurement:
        produce_one, topic = (wire or self.wire).produce_one, self.round_trip_topic
        with self.meter:
            for value in values:
                await produce_one(topic, 0, value)
        self.round_trip_values = values
        return self.meter.measurement(len(values))

    async def read_at(self, offset: int, wire: Any = None) -> None:
        from benchmarks.kafka_wire import first_value_at

        offset %= len(self.round_trip_values)
        # partition_max_bytes 1: the batch holding the offset alone (a first batch always
        # comes whole, KIP-74), as a consumer's Fetch of one record gets it.
        data = await (wire or self.wire).fetch_at(self.round_trip_topic, 0, offset, 1)
        value = first_value_at(data.records, offset)
        if value != self.round_trip_values[offset]:
            raise AssertionError(f"{self.name}: offset {offset} read {value!r}")

    async def read_whole_batch_at(self, offset: int) -> None:
        from benchmarks.kafka_wire import first_value_at

        data = await self.wire.fetch_at(self.topic, 0, offset, 1)
        _check_value(self.name, offset, first_value_at(data.records, offset), self.expected)

    def _time_of(self, fraction: float) -> int:
        return self.first_ms + int(fraction * (self.last_ms - self.first_ms))

    async def lookup(self, fraction: float) -> None:
        from kafka.protocol.consumer import ListOffsetsRequest

        from benchmarks.kafka_wire import first_value_at

        target = self._time_of(fraction)
        Topic = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[Topic(
            name=self.topic, partitions=[Topic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=target)])])
        answer = await self.wire.request(request, 7)
        found = answer.topics[0].partitions[0]
        assert found.error_code == 0 and found.timestamp >= target, found
        data = await self.wire.fetch_at(self.topic, 0, found.offset, 1)
        _check_value(self.name, found.offset, first_value_at(data.records, found.offset),
                     self.expected)

    async def readers(self, count: int) -> list[Callable[[int], Awaitable[None]]]:
        from benchmarks.kafka_wire import KafkaWire

        self._readers = [await KafkaWire.connect(self.server.kafka_address)
                         for _ in range(count)]
        return [functools.partial(self.read_at, wire=w) for w in self._readers]

    async def close_readers(self) -> None:
        for wire in self._readers:
            await wire.close()
        self._readers = []

    async def fetch_all(self, values: list[bytes]) -> Measurement:
        """The data set in Fetches of FETCH_BYTES (zero copy: sent from the segment files),
        the records' bytes only counted."""
        offset = size = 0
        fetch_at, topic = self.wire.fetch_at, self.topic
        with self.meter:
            while offset < len(values):
                data = await fetch_at(topic, 0, offset, FETCH_BYTES)
                records = data.records
                size += len(records)
                # The next offset: the last batch's base offset + last offset delta + 1.
                last = _last_batch_start(records)
                offset = (int.from_bytes(records[last:last + 8], "big")
                          + int.from_bytes(records[last + 23:last + 27], "big") + 1)
        assert offset == len(values), offset
        return self.meter.measurement(len(values), size_bytes=size)

    def variants(self) -> dict[str, Callable[[RunInputs], Awaitable[Measurement]]]:
        return {
            "fetch_mb": lambda i: self.fetch_all(i.values),
            "point_read.kafka_whole": lambda i: timed_one_by_one(
                self.meter, self.read_whole_batch_at, i.read_offsets[:200]),
            "round_trip.library": lambda i: self.round_trips(i.round_trip_values,
                                                             self.library_wire),
            "point_read.library": lambda i: timed_one_by_one(
                self.meter, functools.partial(self.read_at, wire=self.library_wire),
                i.read_offsets),
        }


def _last_batch_start(records: bytes) -> int:
    """Where the last batch of whole batches ``records`` starts (batch_length at byte 8)."""
    position = last = 0
    while position + 12 <= len(records):
        last = position
        position += 12 + int.from_bytes(records[position + 8:position + 12], "big")
    return last


class NatsJetStream(System):
    name = NATS

    async def _connect(self) -> Any:
        import nats

        return await nats.connect(f"nats://{self.server.address}")

    async def open(self) -> None:
        from benchmarks.nats_wire import NatsWire

        self.connection = await self._connect()
        self.js = self.connection.jetstream()
        self.wire = await NatsWire.connect(self.server.address)
        self._reader_connections: list[Any] = []

    async def close(self) -> None:
        await self.wire.close()
        await self.connection.close()

    async def create(self, run_index: int) -> None:
        from nats.js.api import StreamConfig

        self.stream = f"peers-{run_index}"
        self.round_trip_stream = f"peers-rt-{run_index}"
        # allow_direct: point reads by sequence answered by $JS.API.DIRECT.GET (2.9+).
        await self.js.add_stream(StreamConfig(name=self.stream, subjects=[self.stream],
                                              allow_direct=True))
        await self.js.add_stream(StreamConfig(name=self.round_trip_stream,
                                              subjects=[self.round_trip_stream]))

    async def drop(self) -> None:
        await self.js.delete_stream(self.stream)
        await self.js.delete_stream(self.round_trip_stream)

    async def produce(self, values: list[bytes]) -> Measurement:
        js, subject = self.js, self.stream
        with self.meter:
            for value in values:
                await js.publish_async(subject, value)
            await js.publish_async_completed()
        info = await js.stream_info(self.stream)
        assert info.state.messages == len(values), (info.state, len(values))
        first, last = await self._time_at(1), await self._time_at(len(values))
        self.first_ns, self.last_ns = first, last
        return self.meter.measurement(len(values))

    async def _get(self, sequence: int, js: Any = None) -> Any:
        return await (js or self.js).get_msg(self.stream, seq=sequence, direct=True)

    async def _time_at(self, sequence: int) -> int:
        return rfc3339_ns((await self._get(sequence)).headers["Nats-Time-Stamp"])

    async def consume(self, values: list[bytes]) -> Measurement:
        count = size = 0
        expected = len(values)
        done = asyncio.get_running_loop().create_future()

        async def on_message(message: Any) -> None:
            nonlocal count, size
            count += 1
            size += len(message.data)
            if count == expected and not done.done():
                done.set_result(None)

        with self.meter:
            subscription = await self.js.subscribe(self.stream, cb=on_message,
                                                   ordered_consumer=True)
            await done
            await subscription.unsubscribe()
        assert size == expected * VALUE_SIZE_BYTES, (count, size)
        return self.meter.measurement(count)

    async def round_trips(self, values: list[bytes]) -> Measurement:
        publish, subject = self.wire.publish, self.round_trip_stream
        with self.meter:
            for value in values:
                await publish(subject, value)
        return self.meter.measurement(len(values))

    async def round_trips_library(self, values: list[bytes]) -> Measurement:
        js, subject = self.js, self.round_trip_stream
        with self.meter:
            for value in values:
                await js.publish(subject, value)
        return self.meter.measurement(len(values))

    async def read_at(self, offset: int, wire: Any = None) -> None:
        _, data = await (wire or self.wire).direct_get(self.stream, offset + 1)
        _check_value(self.name, offset, data, self.expected)

    async def read_at_library(self, offset: int) -> None:
        message = await self._get(offset + 1)
        _check_value(self.name, offset, message.data, self.expected)

    def _time_of(self, fraction: float) -> int:
        return self.first_ns + int(fraction * (self.last_ns - self.first_ns))

    async def lookup(self, fraction: float) -> None:
        # A binary search for the first sequence whose time is >= the target, over direct
        # gets: 2.9 has no get-by-time, and stream times never decrease.
        target = self._time_of(fraction)
        low, high = 1, len(self.expected)
        while low < high:
            middle = (low + high) // 2
            if await self._time_at(middle) < target:
                low = middle + 1
            else:
                high = middle
        message = await self._get(low)
        _check_time(self.name, target, rfc3339_ns(message.headers["Nats-Time-Stamp"]))

    async def lookup_by_consumer(self, fraction: float) -> None:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        target = self._time_of(fraction)
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME,
                                opt_start_time=format_rfc3339_ns(target),  # type: ignore[arg-type]
                                ack_policy=AckPolicy.NONE)
        subscription = await self.js.pull_subscribe(self.stream, stream=self.stream,
                                                    config=config)
        try:
            (message,) = await subscription.fetch(1)
        finally:
            await self.js.delete_consumer(self.stream, subscription._consumer)
            await subscription.unsubscribe()
        # nats-py gives the delivery's time as a datetime (microseconds, through a float): the
        # check allows for that rounding.
        found_ns = round(message.metadata.timestamp.timestamp() * 1e6) * 1000
        _check_time(self.name, target, found_ns + 2_000)

    async def readers(self, count: int) -> list[Callable[[int], Awaitable[None]]]:
        from benchmarks.nats_wire import NatsWire

        self._reader_connections = [await NatsWire.connect(self.server.address)
                                    for _ in range(count)]
        return [functools.partial(self.read_at, wire=c) for c in self._reader_connections]

    async def close_readers(self) -> None:
        for connection in self._reader_connections:
            await connection.close()
        self._reader_connections = []

    def variants(self) -> dict[str, Callable[[RunInputs], Awaitable[Measurement]]]:
        return {
            "lookup.consumer": lambda i: timed_one_by_one(
                self.meter, self.lookup_by_consumer, i.lookup_fractions),
            "round_trip.library": lambda i: self.round_trips_library(i.round_trip_values),
            "point_read.library": lambda i: timed_one_by_one(
                self.meter, self.read_at_library, i.read_offsets),
        }


class RedisStreams(System):
    name = REDIS
    FIELD = b"v"

    def _connect(self) -> Any:
        import redis.asyncio

        host, port = self.server.address.rsplit(":", 1)
        return redis.asyncio.Redis(host=host, port=int(port))

    async def open(self) -> None:
        self.redis = self._connect()
        await self.redis.ping()
        self._reader_connections: list[Any] = []

    async def close(self) -> None:
        await self.redis.aclose()

    async def create(self, run_index: int) -> None:
        self.key = f"peers-{run_index}"
        self.round_trip_key = f"peers-rt-{run_index}"
        await self.redis.delete(self.key, self.round_trip_key)

    async def drop(self) -> None:
        await self.redis.delete(self.key, self.round_trip_key)

    async def produce(self, values: list[bytes]) -> Measurement:
        ids: list[bytes] = []
        key, field_name = self.key, self.FIELD
        with self.meter:
            for i in range(0, len(values), REDIS_PIPELINE_CHUNK):
                pipeline = self.redis.pipeline(transaction=False)
                for value in values[i:i + REDIS_PIPELINE_CHUNK]:
                    pipeline.xadd(key, {field_name: value})
                ids.extend(await pipeline.execute())
        assert len(ids) == len(values) == await self.redis.xlen(key)
        self.ids = ids
        self.first_ms, self.last_ms = int(ids[0].split(b"-")[0]), int(ids[-1].split(b"-")[0])
        return self.meter.measurement(len(values))

    async def consume(self, values: list[bytes]) -> Measurement:
        count = size = 0
        start: bytes | str = "-"
        field_name = self.FIELD
        with self.meter:
            while True:
                entries = await self.redis.xrange(self.key, start, "+", count=REDIS_PAGE_RECORDS)
                if not entries:
                    break
                count += len(entries)
                size += sum(len(fields[field_name]) for _, fields in entries)
                start = b"(" + entries[-1][0]
        assert count == len(values) and size == len(values) * VALUE_SIZE_BYTES, (count, size)
        return self.meter.measurement(count)

    async def round_trips(self, values: list[bytes]) -> Measurement:
        key, field_name = self.round_trip_key, self.FIELD
        with self.meter:
            for value in values:
                await self.redis.xadd(key, {field_name: value})
        return self.meter.measurement(len(values))

    async def read_at(self, offset: int, connection: Any = None) -> None:
        entry_id = self.ids[offset]
        ((_, fields),) = await (connection or self.redis).xrange(self.key, entry_id, entry_id)
        _check_value(self.name, offset, fields[self.FIELD], self.expected)

    async def lookup(self, fraction: float) -> None:
        target = self.first_ms + int(fraction * (self.last_ms - self.first_ms))
        ((entry_id, _),) = await self.redis.xrange(self.key, target, "+", count=1)
        _check_time(self.name, target, int(entry_id.split(b"-")[0]))

    async def readers(self, count: int) -> list[Callable[[int], Awaitable[None]]]:
        self._reader_connections = [self._connect() for _ in range(count)]
        return [functools.partial(self.read_at, connection=c) for c in self._reader_connections]

    async def close_readers(self) -> None:
        for connection in self._reader_connections:
            await connection.aclose()
        self._reader_connections = []


# --- the table --------------------------------------------------------------------------------

# (row key, label, CPU table label, kind): "rate" rows show records/s, "latency" rows p50 / p99
# µs. A key with a dot is a variant of the row before the dot (other calls of one system).
ROWS = (
    ("produce", "produce, fast API (rec/s)", "produce", "rate"),
    ("consume", "consume all (rec/s)", "consume", "rate"),
    ("fetch_mb", "fetch all, 1 MiB reads (MB/s)", "fetch all, 1 MiB", "mb"),
    ("round_trip", "round trip per record (rec/s)", "round trip", "rate"),
    ("round_trip.unary_rpc", "  stratalog, sessions=False", "  sessions=False", "rate"),
    ("round_trip.linger0", "  stratalog Producer(linger_ms=0)", "  linger_ms=0", "rate"),
    ("round_trip.client", "  stratalog Client.produce", "  Client.produce", "rate"),
    ("round_trip.client_unary", "  stratalog Client.produce, sessions=False",
     "  Client.produce, sessions=False", "rate"),
    ("round_trip.library", "  Kafka, NATS through kafka-python's classes, nats-py",
     "  kafka-python's classes, nats-py", "rate"),
    ("point_read", "point read by offset, p50/p99 (µs)", "point read", "latency"),
    ("point_read.unary_rpc", "  stratalog, sessions=False", "  sessions=False", "latency"),
    ("point_read.batches", "  stratalog RECORD_BATCHES", "  RECORD_BATCHES", "latency"),
    ("point_read.whole", "  stratalog whole batches (no max_records)", "  whole batches",
     "latency"),
    ("point_read.kafka_whole", "  Kafka Fetch of a librdkafka batch (200 reads)",
     "  Kafka whole batch", "latency"),
    ("point_read.library", "  Kafka, NATS through kafka-python's classes, nats-py",
     "  kafka-python's classes, nats-py", "latency"),
    ("lookup", "lookup by time, p50/p99 (µs)", "lookup by time", "latency"),
    ("lookup.unary_rpc", "  stratalog, sessions=False", "  sessions=False", "latency"),
    ("lookup.batches", "  stratalog RECORD_BATCHES", "  RECORD_BATCHES", "latency"),
    ("lookup.whole", "  stratalog whole batches (no max_records)", "  whole batches",
     "latency"),
    ("lookup.consumer", "  NATS a consumer per lookup", "  NATS consumer per lookup",
     "latency"),
    ("concurrent_reads", "{clients} clients' point reads (reads/s)",
     "{clients} clients' point reads", "rate"),
    ("concurrent_reads", "  the same, p50/p99 (µs)", None, "latency"),
    ("concurrent_reads.unary_rpc", "  stratalog, sessions=False (reads/s)",
     "  sessions=False", "rate"),
    ("concurrent_reads.unary_rpc", "  the same, p50/p99 (µs)", None, "latency"),
)


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def _cell(figures: dict[str, float] | None, kind: str) -> str:
    if figures is None:
        return ""
    if kind == "rate":
        return f"{figures['rate_per_s']:,.0f}"
    if kind == "mb":
        return f"{figures['mb_per_s']:,.0f}"
    return f"{figures['p50_us']:,.0f} / {figures['p99_us']:,.0f}"


def format_ratio(ratio: float) -> str:
    """Two or three significant digits, as the size asks: 1,234, 76.7, 7.70, 0.13, 0.012."""
    if ratio >= 100:
        return f"{ratio:,.0f}"
    if ratio >= 10:
        return f"{ratio:.1f}"
    if ratio >= 0.1:
        return f"{ratio:.2f}"
    return f"{ratio:.2g}"


def _ratio(ours: dict[str, float] | None, theirs: dict[str, float] | None, kind: str) -> str:
    if ours is None or theirs is None:
        return ""
    if kind == "rate":
        return format_ratio(ours["rate_per_s"] / theirs["rate_per_s"])
    if kind == "mb":
        return format_ratio(ours["mb_per_s"] / theirs["mb_per_s"])
    return (f"{format_ratio(ours['p50_us'] / theirs['p50_us'])} / "
            f"{format_ratio(ours['p99_us'] / theirs['p99_us'])}")


def _short(system: str) -> str:
    return {STRATALOG: "grpc", STRATALOG_KAFKA: "kafka"}.get(system, system.split()[0])


def print_tables(results: dict[str, dict[str, dict[str, float]]], systems: list[str],
                 clients: int) -> None:
    """``results[row][system]`` holds the medians. A variant row's ratios compare its own
    figure with the other system's main row, so a tuned call is set against each peer's
    default one."""
    ours_present = [s for s in OURS if s in systems]
    # Each of stratalog's front ends against each other system (the gRPC Session against
    # the Kafka listener too, when both run).
    pairs = [(o, p) for o in ours_present for p in systems if p != o
             and not (o == STRATALOG_KAFKA and p == STRATALOG)]
    width = 42
    print("ratios: stratalog / peer (a rate above 1, a latency below 1: stratalog ahead)")
    header = f"{'workload':<{width}}" + "".join(f"{s:>20}" for s in systems)
    header += "".join(f"{_short(o) + '/' + _short(p):>20}" for o, p in pairs)
    print(header)
    for key, label, _, kind in ROWS:
        row = results.get(key, {})
        if not row:
            continue
        main = results.get(key.split(".")[0], {})
        line = f"{label.format(clients=clients):<{width}}"
        line += "".join(f"{_cell(row.get(s), kind):>20}" for s in systems)
        for us, peer in pairs:
            ours = row.get(us) or (main.get(us) if peer in row else None)
            theirs = row.get(peer) or main.get(peer)
            line += f"{_ratio(ours, theirs, kind):>20}"
        print(line)
    print()
    print("CPU per request, client / server (µs; per record for produce and consume)")
    print(f"{'workload':<{width}}" + "".join(f"{s:>20}" for s in systems))
    for key, _, label, _ in ROWS:
        row = results.get(key, {})
        if not row or label is None:
            continue
        line = f"{label.format(clients=clients):<{width}}"
        for s in systems:
            figures = row.get(s)
            cell = (f"{figures['client_cpu_us']:,.1f} / {figures['server_cpu_us']:,.1f}"
                    if figures else "")
            line += f"{cell:>20}"
        print(line)


# --- main -------------------------------------------------------------------------------------


def make_inputs(values: list[bytes], run_index: int, reads: int, round_trips: int,
                seed: int) -> RunInputs:
    rng = random.Random(seed * 1_000 + run_index)
    records = len(values)
    return RunInputs(
        run_index=run_index,
        values=values,
        read_offsets=[rng.randrange(records) for _ in range(reads)],
        concurrent_offsets=[rng.randrange(records) for _ in range(reads)],
        lookup_fractions=[rng.random() for _ in range(reads)],
        round_trip_values=values[:round_trips],
    )


async def run_all(servers: list[Server], args: argparse.Namespace
                  ) -> dict[str, dict[str, list[dict[str, float]]]]:
    """``figures[row][system]``: one dict of figures per run."""
    kinds = {STRATALOG: Stratalog, STRATALOG_KAFKA: StratalogKafka, NATS: NatsJetStream,
             REDIS: RedisStreams}
    systems = {server.system: kinds[server.system](server) for server in servers}
    values = make_values(args.records)
    figures: dict[str, dict[str, list[dict[str, float]]]] = {}
    for system in systems.values():
        await system.open()
    try:
        for run_index in range(args.runs):
            inputs = make_inputs(values, run_index, args.reads, args.round_trips, args.seed)
            for name in rotation(list(systems), run_index):
                started = time.monotonic()
                measured = await systems[name].run(inputs, args.clients)
                for key, measurement in measured.items():
                    figures.setdefault(key, {}).setdefault(name, []).append(
                        measurement.figures())
                print(f"# run {run_index + 1}/{args.runs}: {name} done in "
                      f"{time.monotonic() - started:.0f} s", flush=True)
    finally:
        for system in systems.values():
            await system.close()
    return figures


def available(system: str) -> str | None:
    """Why ``system`` cannot run here, or None."""
    binary = {NATS: "nats-server", REDIS: "redis-server"}.get(system)
    if binary and shutil.which(binary) is None:
        return f"{binary} is not on PATH (apt-get install {binary})"
    module = {NATS: "nats", REDIS: "redis", STRATALOG_KAFKA: "confluent_kafka"}.get(system)
    if module:
        try:
            __import__(module)
        except ImportError:
            return (f"its Python client ({module}) is not installed "
                    "(make bench, or pip install -e '.[bench]')")
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reads", type=int, default=2_000,
                        help="point reads and lookups per run (also the concurrent reads)")
    parser.add_argument("--round-trips", type=int, default=2_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--systems", default="stratalog,kafka,nats,redis",
                        help="a comma-separated subset of stratalog, kafka (the same server's"
                             " Kafka listener), nats, redis")
    parser.add_argument("--redis-persistence", choices=sorted(REDIS_PERSISTENCE), default="aof")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.round_trips > args.records:
        parser.error("--round-trips must not exceed --records")
    chosen = [SYSTEM_FLAGS[name.strip()] for name in args.systems.split(",")]
    # A SIGTERM unwinds like Ctrl-C, so every server is stopped and its directory removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        import uvloop

        loop_name = f"uvloop {_package_version('uvloop')}"
    except ImportError:
        uvloop = None
        loop_name = "asyncio"

    print(f"# bench_peers: {args.records:,} records of {VALUE_SIZE_BYTES} bytes in one partition,"
          f" {args.reads:,} reads, {args.round_trips:,} round trips, {args.clients} clients,"
          f" median of {args.runs} runs (systems' order rotated per run)")
    print(f"# python {platform.python_version()}, {os.cpu_count()} cores, {loop_name}, "
          f"stratalog record codec: {codec_path()}, grpcio {_package_version('grpcio')}; "
          f"clients: confluent-kafka {_package_version('confluent-kafka')}, kafka-python "
          f"{_package_version('kafka-python')}, nats-py "
          f"{_package_version('nats-py')}, redis-py {_package_version('redis')} "
          f"(hiredis {_package_version('hiredis')})")
    with tempfile.TemporaryDirectory(prefix="stratalog-bench-peers-") as work, \
            contextlib.ExitStack() as stack:
        starters = {STRATALOG: lambda: stratalog_server(Path(work)),
                    NATS: lambda: nats_server(Path(work)),
                    REDIS: lambda: redis_server(Path(work), args.redis_persistence)}
        servers = []
        stratalog = None
        for system in SYSTEMS:
            if system not in chosen:
                continue
            reason = available(system)
            if reason is not None:
                print(f"# {system}: skipped: {reason}")
                continue
            if system == STRATALOG_KAFKA:
                # The same server process, through its Kafka listener.
                if stratalog is None:
                    stratalog = stack.enter_context(starters[STRATALOG]())
                servers.append(dataclasses.replace(
                    stratalog, system=STRATALOG_KAFKA,
                    settings=stratalog.settings + f"; Kafka listener {stratalog.kafka_address}"
                    ", clients: confluent-kafka's defaults (linger.ms 5, acks all, batch.size"
                    " 1,000,000; consumer fetch.max.bytes 50 MiB, max.partition.fetch.bytes 1"
                    " MiB, isolation.level read_committed) but the consumer's"
                    " fetch.queue.backoff.ms 0"))
                continue
            server = stack.enter_context(starters[system]())
            if system == STRATALOG:
                stratalog = server
            servers.append(server)
        for server in servers:
            print(f"# {server.system} {server.version} on {server.address}: {server.settings}")
        print(flush=True)
        runner = uvloop.run if uvloop is not None else asyncio.run
        figures = runner(run_all(servers, args))
    results = {key: {system: medians(runs) for system, runs in row.items()}
               for key, row in figures.items()}
    names = [server.system for server in servers]
    print()
    print_tables(results, names, args.clients)
    if args.json:
        args.json.write_text(json.dumps({
            "parameters": {k: (str(v) if isinstance(v, Path) else v)
                           for k, v in vars(args).items()},
            "machine": {"python": platform.python_version(), "cores": os.cpu_count(),
                        "event_loop": loop_name, "codec": codec_path(),
                        "load_average": os.getloadavg()},
            "servers": {s.system: {"version": s.version, "settings": s.settings}
                        for s in servers},
            "clients": {p: _package_version(p)
                        for p in ("grpcio", "protobuf", "nats-py", "redis", "hiredis",
                                  "confluent-kafka", "kafka-python")},
            "medians": results,
            "runs": figures,
        }, indent=1))
        print(f"# figures written to {args.json}")


if __name__ == "__main__":
    main()
