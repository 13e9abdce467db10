"""What benchmarks/bench_peers.py measures with, apart from the systems: its constants, the
server processes (stratalog, ``nats-server -js``, ``redis-server``, each a child process that dies
with the harness), the CPU of a server process from /proc, and the meters that time a workload
one request at a time or many at once (nearest-rank percentiles). Other harnesses
(bench_session, bench_limits, bench_secured_cluster) use the same parts."""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import ctypes
import importlib.metadata
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench_client import server_argv

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


def package_version(name: str) -> str:
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
        version = f"{package_version('stratalog')} (commit {commit})"
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
