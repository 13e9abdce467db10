"""Consumer groups served by a real server: coordinator load, commit latency and rate, join.

Issue 27's server-side benchmarks, each against stratalog server processes on 127.0.0.1 started
with this repository's python, through raw gRPC stubs (broker_pb2_grpc; no group-aware client):

  load          a ``__consumer_offsets`` partition holding ``--groups`` x ``--partitions``
                offset commits (default 1,000 x 1,000 = 1,000,000 records, every key distinct):
                written through OffsetCommit (simple commits: generation -1, no member; one
                request per group commits all its partitions, ``--in-flight`` requests at
                once), to groups chosen to hash to one partition (``LOAD_PARTITION``). The
                server is stopped and started ``--load-runs`` times; each start, the load time
                of that partition is read from its log line ("loaded N records ... in X s",
                the count checked) and from ``stratalog_group_coordinator_load_seconds``
                (the histogram's sum over all 50 partitions, the 49 empty ones included), with
                the process's CPU time during the load from the same log line (every thread;
                on a shared machine, the figure its other load hardly moves), and one group's
                offsets are fetched back. Goal: < 2 s. With ``--baseline REV`` (default: the
                merge before the load's fast path), the server of that revision (``git
                archive`` of its packages, this build's C extension when its source is the
                same) loads the same data directory too, its starts alternating with this
                tree's: "before" and "after" in one run. For both, the server's CPU time from
                its start to the end of the load (/proc, every thread; start-up included, the
                same for both) is read when the load's metric appears.
  commit latency  one request at a time (blocking stubs), in turns (the kinds rotating each
                round, so that the machine's other load falls on all alike): a one-record
                Produce (the reference), a simple OffsetCommit of one partition, and a
                member's OffsetCommit of one partition (generation and member id of a joined,
                synced single-member group): p50 and p99. Goal: commit <= 2x produce.
  commit rate   ``--clients`` (64) clients, each its own channel, committing one partition per
                request at once, ``--commits`` requests each: to 64 groups spread over all
                partitions of ``__consumer_offsets`` (every partition has one, 14 have two),
                and all to one group (each client its own partition); beside it a one-record
                Produce from as many clients (each its own partition), for scale. Commits/s
                over the wall time of the whole burst, and the server's CPU per request.
  join + sync   a single-member group's first JoinGroup (MEMBER_ID_REQUIRED and the member
                id back), its JoinGroup with that id (the leader's answer), and its SyncGroup
                with its assignment, one new group each time: p50 and p99 of the whole round
                trip. The server runs with group.initial.rebalance.delay.ms=0: Kafka's default
                (and ours), 3 s, would hold every new group's first join that long on
                purpose, and measure the delay, not the coordinator.

The phases after ``load`` run on a second server with a fresh data directory, so that the
1,000,000 commits a load holds in memory are not in their figures. Every figure is the median
of ``--runs`` runs (the load's: of ``--load-runs`` starts).

Run: ``.venv/bin/python -m benchmarks.bench_group_service [--groups 1000] [--partitions 1000]
[--load-runs 2] [--runs 3] [--baseline REV | none] [--skip-load | --load-only]`` (under 2 minutes at a load
average of 6 on 2 vCPUs; ``--groups 100`` for a quick look: 100,000 commits). The data
directories live under /tmp and are removed at the end. Figures: docs/performance.md, "Issue
27: the group coordinator".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from benchmarks.bench_server import _cpu_s, _interleaved_latencies_ms, _p
from stratalog.client.errors import MemberIdRequiredError, from_rpc_error
from stratalog.records.group_partition import partition_for_group
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

#: __consumer_offsets partitions (the server's default offsets.topic.num.partitions).
OFFSETS_PARTITIONS = 50
#: The partition the load's groups hash to.
LOAD_PARTITION = 7
REPO = Path(__file__).resolve().parent.parent
#: The merge before the load's fast path (server/group_service/offsets_topic.py).
DEFAULT_BASELINE = "f6fec6b"
#: The source directories of the packages a server imports, as pyproject.toml's package-dir
#: maps them, and where they go under a baseline's ``stratalog`` package.
PACKAGE_DIRS = {"stratalog_pkg": ".", "records": "records", "server": "server",
                "client": "client", "cli": "cli", "proto/stratalog/v1": "v1"}
COMMITTED_TOPIC = "committed"
PRODUCED_TOPIC = "produced"
SESSION_TIMEOUT_MS = 300_000
STARTUP_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 60.0
_LOADED = re.compile(
    r"__consumer_offsets-(\d+): loaded (\d+) records, (\d+) groups in ([0-9.]+) s"
    r"(?: \(process CPU ([0-9.]+) s\))?")


# ------------------------------------------------------------------------ the server


@dataclass
class _Server:
    target: str
    metrics_port: int
    pid: int
    log_path: Path


@contextlib.contextmanager
def _server(data_dir: Path, log_path: Path, *flags: str,
            package_root: Path | None = None) -> Iterator[_Server]:
    """A stratalog server on ``data_dir``, INFO log appended to ``log_path``; SIGTERM at the
    end (SIGKILL if it does not exit within 60 s). ``package_root``: a directory whose
    ``stratalog`` package to run instead of this tree's (:func:`_baseline_package`)."""
    argv = [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
            "--log-dirs", str(data_dir), "--metrics-port", "0", "--logging-level", "INFO",
            *flags]
    env = None
    if package_root is not None:
        # Ahead of this worktree's editable install on the path.
        env = dict(os.environ, PYTHONPATH=str(package_root))
    with open(log_path, "a") as log:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True,
                                   env=env, cwd=package_root)
    try:
        assert process.stdout is not None
        target, metrics_port = None, None
        for line in process.stdout:
            if match := re.search(r"listening on (\S+:\d+)", line):
                target = match.group(1)
            if match := re.search(r"metrics on https?://\S+:(\d+)/", line):
                metrics_port = int(match.group(1))
            if target and metrics_port:
                break
        if target is None or metrics_port is None:
            raise RuntimeError(f"the server exited with {process.wait()} before serving;"
                               f" its log: {log_path}")
        yield _Server(target, metrics_port, process.pid, log_path)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _metric(server: _Server, name: str) -> float | None:
    """A sample's value on the server's metrics endpoint (None: not exported yet)."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def _wait_for(condition: Callable[[], bool], what: str,
              timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Poll ``condition()`` every 100 ms until true; bounded by ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.1)


def _groups_of_partition(prefix: str, partition: int, count: int) -> list[str]:
    """``count`` group ids ``prefix-N`` that live in ``__consumer_offsets``-``partition``."""
    found = []
    n = 0
    while len(found) < count:
        group_id = f"{prefix}-{n}"
        if partition_for_group(group_id, OFFSETS_PARTITIONS) == partition:
            found.append(group_id)
        n += 1
    return found


def _spread_groups(prefix: str, count: int) -> list[str]:
    """``count`` group ids covering every ``__consumer_offsets`` partition (round robin)."""
    return [_groups_of_partition(f"{prefix}{i // OFFSETS_PARTITIONS}", i % OFFSETS_PARTITIONS,
                                 1)[0] for i in range(count)]


def _create_topic(stub: broker_pb2_grpc.BrokerStub, name: str, partitions: int) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(name=name, partitions=partitions),
                     timeout=CALL_TIMEOUT_S)


def _simple_commit(group_id: str, partitions: range | list[int]) -> pb.OffsetCommitRequest:
    """A simple commit (no member: generation -1) of offset 0 of ``partitions`` of the
    committed topic (an empty topic: its log end offset is 0)."""
    return pb.OffsetCommitRequest(
        group_id=group_id, generation_id=-1, member_id="",
        offsets=[pb.CommittedOffset(topic=COMMITTED_TOPIC, partition=p, offset=0,
                                    leader_epoch=-1) for p in partitions],
    )


# ------------------------------------------------------------------------ load


async def _fill(target: str, groups: list[str], partitions: int, in_flight: int) -> None:
    """One OffsetCommit per group of all ``partitions``, ``in_flight`` at once."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        queue = iter(groups)

        async def worker() -> None:
            for group_id in queue:
                await stub.OffsetCommit(_simple_commit(group_id, range(partitions)),
                                        timeout=CALL_TIMEOUT_S)

        await asyncio.gather(*(worker() for _ in range(in_flight)))


def _load_line(log_path: Path, start_at: int) -> tuple[int, int, float, float | None]:
    """The LOAD_PARTITION's last "loaded" log line written after byte ``start_at``:
    (records, groups, seconds, process CPU seconds: None from a server that does not say)."""
    with open(log_path) as log:
        log.seek(start_at)
        found = None
        for line in log:
            match = _LOADED.search(line)
            if match and int(match.group(1)) == LOAD_PARTITION:
                cpu = match.group(5)
                found = (int(match.group(2)), int(match.group(3)), float(match.group(4)),
                         float(cpu) if cpu is not None else None)
    if found is None:
        raise RuntimeError(f"no load line of __consumer_offsets-{LOAD_PARTITION} in {log_path}")
    return found


def _baseline_package(revision: str, root: Path) -> Path:
    """``revision``'s ``stratalog`` package under ``root`` (its directories laid out as
    pyproject.toml's package-dir maps them), with this build's C extension if this tree's
    records/_speedups.c is ``revision``'s with lines added only (functions it does not call:
    the ones it calls are the same), else it runs pure Python, and says so."""
    package = root / "stratalog"
    for source, target in PACKAGE_DIRS.items():
        archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, source],
                                 check=True, capture_output=True).stdout
        (package / target).mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-x", "-C", str(package / target),
                        f"--strip-components={source.count('/') + 1}"],
                       input=archive, check=True)
    numstat = subprocess.run(["git", "-C", str(REPO), "diff", "--numstat", revision, "--",
                              "records/_speedups.c"], check=True, capture_output=True,
                             text=True).stdout.split()
    if not numstat or numstat[1] == "0":  # unchanged, or lines added only
        for built in (REPO / "records").glob("_speedups*.so"):
            shutil.copy(built, package / "records")
    else:
        print(f"baseline {revision}: records/_speedups.c differs, the baseline runs pure"
              " Python", flush=True)
    return root


def _timed_load(data_dir: Path, log_path: Path, package_root: Path | None,
                groups: list[str], expected: int, partitions: int) -> dict[str, float]:
    """Start a server on ``data_dir`` and wait for every partition's load: its figures."""
    start_at = log_path.stat().st_size
    with _server(data_dir, log_path, package_root=package_root) as server:
        _wait_for(lambda: _metric(
            server, "stratalog_group_coordinator_load_seconds_count") == OFFSETS_PARTITIONS,
            "the 50 partitions' loads")
        server_cpu_s = _cpu_s(server.pid)
        records, group_count, seconds, cpu_s = _load_line(log_path, start_at)
        assert records == expected and group_count == len(groups), (records, group_count)
        total_s = _metric(server, "stratalog_group_coordinator_load_seconds_sum")
        assert total_s is not None
        with grpc.insecure_channel(server.target) as channel:
            fetched = broker_pb2_grpc.BrokerStub(channel).OffsetFetch(
                pb.OffsetFetchRequest(group_id=groups[-1]), timeout=CALL_TIMEOUT_S)
        assert len(fetched.offsets) == partitions, len(fetched.offsets)
    figures = {"load s (log line)": seconds, "load s (metric sum)": total_s,
               "server CPU s, start to loaded": server_cpu_s, "load records/s": records / seconds}
    if cpu_s is not None:
        figures["load process CPU s (log line)"] = cpu_s
    return figures


def measure_load(args: argparse.Namespace, work: Path) -> dict[str, list[float]]:
    data_dir = work / "load"
    log_path = work / "load-server.log"
    groups = _groups_of_partition("load", LOAD_PARTITION, args.groups)
    expected = args.groups * args.partitions
    with _server(data_dir, log_path) as server:
        with grpc.insecure_channel(server.target) as channel:
            _create_topic(broker_pb2_grpc.BrokerStub(channel), COMMITTED_TOPIC, args.partitions)
        started = time.perf_counter()
        asyncio.run(_fill(server.target, groups, args.partitions, args.in_flight))
        elapsed = time.perf_counter() - started
    print(f"load: wrote {expected:,} commits ({args.groups:,} OffsetCommit requests of "
          f"{args.partitions:,} partitions, {args.in_flight} in flight) in {elapsed:.1f} s:"
          f" {expected / elapsed:,.0f} commits/s", flush=True)
    servers: list[tuple[str, Path | None]] = [("", None)]
    if args.baseline != "none":
        root = _baseline_package(args.baseline, work / "baseline")
        servers.insert(0, (f"before ({args.baseline}): ", root))
    figures: dict[str, list[float]] = {}
    for run in range(args.load_runs):
        for label, package_root in servers:
            loaded = _timed_load(data_dir, log_path, package_root, groups, expected,
                                 args.partitions)
            print(f"load run {run + 1} {label}" + ", ".join(
                f"{name} {value:,.3f}" for name, value in loaded.items())
                + f"; load average {os.getloadavg()[0]:.1f}", flush=True)
            for name, value in loaded.items():
                figures.setdefault(label + name, []).append(value)
    return figures


# ------------------------------------------------------------------------ join and sync


def _join_sync(stub: broker_pb2_grpc.BrokerStub, group_id: str,
               times_ms: list[list[float]]) -> tuple[str, int]:
    """A single member's first join (MEMBER_ID_REQUIRED), join and sync; appends the three
    calls' times in ms to ``times_ms``; the member id and generation."""
    protocols = [pb.GroupProtocol(name="range", metadata=b"\x00\x03")]

    def join(member_id: str) -> pb.JoinGroupResponse:
        return stub.JoinGroup(pb.JoinGroupRequest(
            group_id=group_id, session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=SESSION_TIMEOUT_MS, member_id=member_id,
            protocol_type="consumer", protocols=protocols), timeout=CALL_TIMEOUT_S)

    t0 = time.perf_counter()
    try:
        join("")
        raise AssertionError("a first JoinGroup without a member id was not MEMBER_ID_REQUIRED")
    except grpc.RpcError as exc:
        error = from_rpc_error(exc)
        if not isinstance(error, MemberIdRequiredError):
            raise
        member_id = error.member_id
    t1 = time.perf_counter()
    joined = join(member_id)
    assert joined.leader_id == member_id and joined.generation_id >= 1, joined
    t2 = time.perf_counter()
    stub.SyncGroup(pb.SyncGroupRequest(
        group_id=group_id, generation_id=joined.generation_id, member_id=member_id,
        protocol_type="consumer", protocol_name=joined.protocol_name,
        assignments=[pb.SyncGroupAssignment(member_id=member_id, assignment=b"\x00\x03")]),
        timeout=CALL_TIMEOUT_S)
    t3 = time.perf_counter()
    for column, seconds in zip(times_ms, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
        column.append(seconds * 1000)
    return member_id, joined.generation_id


def _leave(stub: broker_pb2_grpc.BrokerStub, group_id: str, member_id: str) -> None:
    stub.LeaveGroup(pb.LeaveGroupRequest(group_id=group_id, members=[
        pb.LeavingMember(member_id=member_id)]), timeout=CALL_TIMEOUT_S)


def measure_joins(stub: broker_pb2_grpc.BrokerStub, run: int, count: int) -> dict[str, float]:
    times_ms: list[list[float]] = [[], [], [], []]
    for i in range(count):
        group_id = f"join-{run}-{i}"
        member_id, _ = _join_sync(stub, group_id, times_ms)
        _leave(stub, group_id, member_id)
    first, second, sync, whole = times_ms
    return {
        "join+sync p50 ms": _p(whole, 50), "join+sync p99 ms": _p(whole, 99),
        "  join (MEMBER_ID_REQUIRED) p50 ms": _p(first, 50),
        "  join (with the id) p50 ms": _p(second, 50), "  sync p50 ms": _p(sync, 50),
    }


# ------------------------------------------------------------------------ latency


def measure_latency(stub: broker_pb2_grpc.BrokerStub, run: int,
                    count: int) -> dict[str, float]:
    """Produce, simple commit and member's commit of one partition, in turns."""
    group_id = f"latency-member-{run}"
    member_id, generation = _join_sync(stub, group_id, [[], [], [], []])
    value = bytes(100)
    produce = [pb.ProduceRequest(topic=PRODUCED_TOPIC, partition=0,
                                 records=[pb.Record(value=value)])] * count
    simple = [_simple_commit(f"latency-simple-{run}", [0])] * count
    member = [pb.OffsetCommitRequest(
        group_id=group_id, generation_id=generation, member_id=member_id,
        offsets=[pb.CommittedOffset(topic=COMMITTED_TOPIC, partition=0, offset=0,
                                    leader_epoch=-1)])] * count
    produced, simple_ms, member_ms = _interleaved_latencies_ms([
        (stub, "Produce", produce), (stub, "OffsetCommit", simple),
        (stub, "OffsetCommit", member),
    ])
    _leave(stub, group_id, member_id)
    figures = {}
    for name, samples in (("produce", produced), ("simple commit", simple_ms),
                          ("member commit", member_ms)):
        figures[f"{name} p50 ms"] = _p(samples, 50)
        figures[f"{name} p99 ms"] = _p(samples, 99)
    for name in ("simple commit", "member commit"):
        for q in ("p50", "p99"):
            figures[f"{name} / produce {q}"] = (figures[f"{name} {q} ms"]
                                                / figures[f"produce {q} ms"])
    return figures


# ------------------------------------------------------------------------ rate


async def _burst(target: str, requests: list[pb.OffsetCommitRequest | pb.ProduceRequest],
                 method: str, per_client: int) -> float:
    """Each request's client (one channel each) sends it ``per_client`` times, one at a time,
    all clients at once; the wall seconds from the first to the last answer (after each
    channel's warm-up call)."""
    channels = [grpc.aio.insecure_channel(target) for _ in requests]
    try:
        calls = [getattr(broker_pb2_grpc.BrokerStub(c), method) for c in channels]
        await asyncio.gather(*(call(r, timeout=CALL_TIMEOUT_S)
                               for call, r in zip(calls, requests, strict=True)))

        async def client(call: Callable[..., Awaitable[object]], request: object) -> None:
            for _ in range(per_client):
                await call(request, timeout=CALL_TIMEOUT_S)

        started = time.perf_counter()
        await asyncio.gather(*(client(call, r) for call, r in zip(calls, requests, strict=True)))
        return time.perf_counter() - started
    finally:
        for channel in channels:
            await channel.close()


def measure_rate(server: _Server, run: int, clients: int, per_client: int) -> dict[str, float]:
    spread = [_simple_commit(g, [i % clients])
              for i, g in enumerate(_spread_groups(f"rate{run}-", clients))]
    one = [_simple_commit(f"rate-one-{run}", [i]) for i in range(clients)]
    produce = [pb.ProduceRequest(topic=PRODUCED_TOPIC, partition=i,
                                 records=[pb.Record(value=bytes(100))]) for i in range(clients)]
    total = clients * per_client
    figures = {}
    kinds = [
        ("commits/s, groups spread", "spread", spread, "OffsetCommit"),
        ("commits/s, one group", "one group", one, "OffsetCommit"),
        ("produces/s (1 record)", "produce", produce, "Produce"),
    ]
    # The order rotates from run to run: none is always the first after the latency phase.
    for name, short, requests, method in kinds[run % 3:] + kinds[:run % 3]:
        cpu = _cpu_s(server.pid)
        seconds = asyncio.run(_burst(server.target, requests, method, per_client))
        figures[name] = total / seconds
        # The warm-up calls are in the CPU time too.
        figures[f"  server CPU us/request ({short})"] = (
            (_cpu_s(server.pid) - cpu) / (total + clients) * 1e6)
    figures["commits/s spread / produces/s"] = (figures["commits/s, groups spread"]
                                                / figures["produces/s (1 record)"])
    return figures


# ------------------------------------------------------------------------ main


def _print(title: str, figures: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    for name, values in figures.items():
        shown = ", ".join(f"{v:,.2f}" for v in values)
        print(f"  {name:44s} {statistics.median(values):12,.2f}   ({shown})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--load-runs", type=int, default=2)
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--load-only", action="store_true",
                        help="the load's figures alone (no latency, rate or join runs)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE,
                        help="git revision whose server loads the same partition, or 'none'")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--commits", type=int, default=50, help="requests per client")
    parser.add_argument("--joins", type=int, default=200)
    args = parser.parse_args()
    assert args.clients <= 10_000 and args.partitions <= 10_000

    work = Path(tempfile.mkdtemp(prefix="stratalog-bench-groups-"))
    print(f"stratalog group service, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; work directory {work}", flush=True)
    try:
        if not args.skip_load:
            _print(f"load of __consumer_offsets-{LOAD_PARTITION}: "
                   f"{args.groups * args.partitions:,} commits (median of {args.load_runs})",
                   measure_load(args, work))
        if args.load_only:
            return
        figures: dict[str, list[float]] = {}
        with contextlib.ExitStack() as stack:
            server = stack.enter_context(_server(
                work / "serve", work / "serve-server.log",
                "--set", "group.initial.rebalance.delay.ms=0"))
            stub = broker_pb2_grpc.BrokerStub(
                stack.enter_context(grpc.insecure_channel(server.target)))
            _create_topic(stub, COMMITTED_TOPIC, args.clients)
            _create_topic(stub, PRODUCED_TOPIC, args.clients)
            for run in range(args.runs):
                for name, value in (measure_latency(stub, run, args.latency_requests)
                                    | measure_rate(server, run, args.clients, args.commits)
                                    | measure_joins(stub, run, args.joins)).items():
                    figures.setdefault(name, []).append(value)
                print(f"run {run + 1} done; load average {os.getloadavg()[0]:.1f}", flush=True)
        _print(f"latency, rate and joins (median of {args.runs} runs; "
               f"{args.latency_requests} requests of each kind, {args.clients} clients x "
               f"{args.commits} requests, {args.joins} groups)", figures)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
