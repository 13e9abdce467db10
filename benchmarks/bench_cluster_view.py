"""The cluster view's cost per change in etcd: a full re-read per watch event (before) against
the event applied as the change it carries (now) (issue 29, docs/cluster.md "What is next").

Starts etcd alone on 127.0.0.1 (no stratalog server: the view runs in this process against
etcd), writes N partition states (topics of 100 partitions, three replicas each, as CreateTopic
writes them), then for each mode follows etcd with one :class:`ClusterView` and makes
``--events`` changes, one after the other: an ISR update of one partition (a leader's ISR
shrink or expand: the most frequent write), each waited for until the view holds it. Per
change it reports:

- **CPU**: this process's CPU time (``time.process_time``) over the changes, divided by their
  number: the view's work on the event, plus the writer's put (measured alone as mode
  ``writer``, to subtract);
- **etcd CPU** and **etcd bytes**: etcd's own ``process_cpu_seconds_total`` and
  ``etcd_network_client_grpc_sent_bytes_total`` (its /metrics) over the changes, divided by
  their number: what etcd spends and sends per change (the put's answer included);
- **latency**: from just before the put is sent to the view's listener seeing the new state
  (median and max);
- **full reads**: the view's full reads during the mode (its first included, for the modes
  with a watch);
- **fallback ms**: then, the median wall time of a full read (the fallback poll's step) of
  the view the mode kept: ``full`` decodes every key again only when a key's mod revision
  differs from the view's; with every change applied, none does.

Modes, in the same run against the same etcd:

- ``writer``: the puts alone, no view (the writer's share of the CPU above);
- ``full``: as before: a watch per prefix wakes the view, which re-reads both prefixes
  (node.py's wiring before; coalesced, but one read per change when changes come one by one);
- ``delta``: now: the view's own watch applies each event (cluster_view.py).

The fallback poll is off (an hour) in both, so that only the changes cost.

A server that wrote a change itself (a leader its ISR) calls ``refresh()`` to see it at once,
without waiting for its watch. Two more modes measure that, the same way (no watch: the
latency column is then the refresh's own time, after the put was answered):

- ``refresh full``: before: each refresh a full read (into an empty view, so that it decodes
  every key as before; also what a start, a broken watch and each fallback poll still cost);
- ``refresh catch-up``: now: a read of the keys modified since the view's revision and the
  range's key count (cluster_view.py).

Prints one line per N and mode (docs/performance.md, "Issue 29: watch events as deltas")::

    .venv/bin/python -m benchmarks.bench_cluster_view --partitions 100,1000,10000 --events 50
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from stratalog.server.cluster.cluster_view import ClusterView, PartitionKey
from stratalog.server.cluster.endpoints import Endpoint
from stratalog.server.cluster.layout import ClusterKeys
from stratalog.server.cluster.partition_state import PartitionState, TopicAssignment
from stratalog.server.cluster.session import EtcdSession
from stratalog.server.cluster.watches import KeyWatch

from .bench_cluster_client import running_etcd

PARTITIONS_PER_TOPIC = 100
REPLICAS = (1, 2, 3)
#: etcd's limit of operations per transaction (--max-txn-ops).
TXN_OPS_MAX = 128
#: A bound on every wait for the view: it turns a hang into an error.
STEP_TIMEOUT_S = 60.0
LONG_INTERVAL_S = 3600.0
MODES = ("writer", "full", "delta")
#: Full reads timed after each mode with a watch (the median is printed).
FALLBACK_READS = 5
REFRESHES = ("full", "catch-up")


def etcd_metrics(client_url: str) -> tuple[float, float]:
    """etcd's (CPU seconds, bytes sent to clients) so far."""
    with urllib.request.urlopen(f"{client_url}/metrics", timeout=5) as response:
        text = response.read().decode()

    def value(name: str) -> float:
        match = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
        if match is None:
            raise RuntimeError(f"etcd exports no {name}")
        return float(match.group(1))
    return value("process_cpu_seconds_total"), value("etcd_network_client_grpc_sent_bytes_total")


async def populate(session: EtcdSession, keys: ClusterKeys, partitions: int) -> list[str]:
    """Topics of :data:`PARTITIONS_PER_TOPIC` partitions, ``partitions`` in all; their names."""
    client = session.client
    names = [f"t{n:04d}" for n in range(max(1, partitions // PARTITIONS_PER_TOPIC))]
    ops = []
    for name in names:
        assignment = TopicAssignment({p: REPLICAS for p in range(PARTITIONS_PER_TOPIC)})
        ops.append(client.transactions.put(keys.topic(name), assignment.encode()))
        first = PartitionState(1, 0, REPLICAS).encode()
        ops += [client.transactions.put(keys.partition(name, p), first)
                for p in range(PARTITIONS_PER_TOPIC)]
    for start in range(0, len(ops), TXN_OPS_MAX):
        await client.transaction(compare=[], success=ops[start:start + TXN_OPS_MAX], failure=[])
    return names


async def measure(session: EtcdSession, keys: ClusterKeys, names: list[str], mode: str,
                  events: int, client_url: str) -> dict[str, float]:
    view = ClusterView(session, keys, LONG_INTERVAL_S)
    watches: list[KeyWatch] = []
    waiting: dict[PartitionKey, tuple[PartitionState, asyncio.Future[float]]] = {}

    async def listener(_topics: set[str], partitions: set[PartitionKey]) -> None:
        for key in partitions & waiting.keys():
            expected, seen = waiting[key]
            versioned = view.state(*key)
            if versioned is not None and versioned.state == expected and not seen.done():
                seen.set_result(time.perf_counter())

    if mode != "writer":
        view.add_listener(listener)
        await view.refresh()
        view.start()
        if mode == "full":
            watches = [KeyWatch(session, prefix, [view.wake], f"bench-{mode}", prefix=True)
                       for prefix in (keys.topics_prefix, keys.partitions_prefix)]
        else:
            watches = [view.watch()]
        for watch in watches:
            watch.start()
        for watch in watches:
            await asyncio.wait_for(watch.wait_watching(), STEP_TIMEOUT_S)
        await asyncio.sleep(0.5)  # the creations' wakes (a full read each) are over
    latencies: list[float] = []
    etcd_cpu_before, etcd_bytes_before = etcd_metrics(client_url)
    cpu_before = time.process_time()
    for n in range(events):
        key = (names[n % len(names)], (n // len(names)) % PARTITIONS_PER_TOPIC)
        isr = REPLICAS if (n // (len(names) * PARTITIONS_PER_TOPIC)) % 2 else REPLICAS[:2]
        state = PartitionState(1, 0, isr)
        seen: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        waiting[key] = (state, seen)
        sent = time.perf_counter()
        await session.client.put(keys.partition(*key), state.encode())
        if mode != "writer":
            latencies.append(await asyncio.wait_for(seen, STEP_TIMEOUT_S) - sent)
        del waiting[key]
    cpu = time.process_time() - cpu_before
    etcd_cpu_after, etcd_bytes_after = etcd_metrics(client_url)
    full_reads = view.full_read_count
    fallback_ms = 0.0
    if mode != "writer":
        # The fallback poll's step, on a view the watch kept up to date.
        reads = []
        for _ in range(FALLBACK_READS):
            started = time.perf_counter()
            await view.full_read()
            reads.append(time.perf_counter() - started)
        fallback_ms = statistics.median(reads) * 1000
    for watch in watches:
        await watch.stop()
    await view.close()
    return {
        "fallback_ms": fallback_ms,
        "cpu_ms": cpu / events * 1000,
        "etcd_cpu_ms": (etcd_cpu_after - etcd_cpu_before) / events * 1000,
        "etcd_bytes": (etcd_bytes_after - etcd_bytes_before) / events,
        "latency_median_ms": statistics.median(latencies) * 1000 if latencies else 0.0,
        "latency_max_ms": max(latencies) * 1000 if latencies else 0.0,
        "full_reads": full_reads,
    }


async def measure_refresh(session: EtcdSession, keys: ClusterKeys, names: list[str], how: str,
                          events: int, client_url: str) -> dict[str, float]:
    """A writer's :meth:`ClusterView.refresh` after each of its puts (no watch): ``full``, a
    full read into an empty view (what every refresh was before), or ``catch-up`` (now)."""
    view = ClusterView(session, keys, LONG_INTERVAL_S)
    await view.refresh()
    full_reads = 0  # the refreshes', the first read above left out
    times: list[float] = []
    etcd_cpu_before, etcd_bytes_before = etcd_metrics(client_url)
    cpu_before = time.process_time()
    for n in range(events):
        key = (names[n % len(names)], (n // len(names)) % PARTITIONS_PER_TOPIC)
        isr = REPLICAS if n % 2 else REPLICAS[:2]
        await session.client.put(keys.partition(*key), PartitionState(1, 0, isr).encode())
        started = time.perf_counter()
        if how == "full":
            view = ClusterView(session, keys, LONG_INTERVAL_S)
        reads_before = view.full_read_count
        await view.refresh()
        times.append(time.perf_counter() - started)
        full_reads += view.full_read_count - reads_before
        assert view.state(*key) is not None and view.state(*key).state.isr == isr
    cpu = time.process_time() - cpu_before
    etcd_cpu_after, etcd_bytes_after = etcd_metrics(client_url)
    return {
        "cpu_ms": cpu / events * 1000,
        "etcd_cpu_ms": (etcd_cpu_after - etcd_cpu_before) / events * 1000,
        "etcd_bytes": (etcd_bytes_after - etcd_bytes_before) / events,
        "latency_median_ms": statistics.median(times) * 1000,
        "latency_max_ms": max(times) * 1000,
        "full_reads": full_reads,
        "fallback_ms": 0.0,
    }


async def run_all(cluster_url: str, sizes: list[int], events: int) -> None:
    address = cluster_url.removeprefix("etcd://")
    host, _, port = address.rpartition(":")
    session = await EtcdSession.open([Endpoint(host, int(port))], 10_000)
    session.start()  # the lease kept alive
    try:
        print(f"{'partitions':>10} {'mode':>16} {'CPU ms/change':>13} {'etcd CPU ms':>11}"
              f" {'etcd bytes':>10} {'latency median ms':>17} {'max ms':>7} {'full reads':>10}"
              f" {'fallback ms':>11}")
        for size in sizes:
            keys = ClusterKeys(f"/bench-{size}")
            names = await populate(session, keys, size)
            runs = [(mode, measure(session, keys, names, mode, events, f"http://{address}"))
                    for mode in MODES]
            runs += [(f"refresh {how}", measure_refresh(session, keys, names, how, events,
                                                        f"http://{address}"))
                     for how in REFRESHES]
            for mode, run in runs:
                result = await run
                print(f"{size:>10} {mode:>16} {result['cpu_ms']:>13.3f}"
                      f" {result['etcd_cpu_ms']:>11.3f} {result['etcd_bytes']:>10.0f}"
                      f" {result['latency_median_ms']:>17.2f} {result['latency_max_ms']:>7.2f}"
                      f" {result['full_reads']:>10.0f} {result['fallback_ms']:>11.1f}",
                      flush=True)
            await session.client.delete_prefix(f"/bench-{size}/".encode())
    finally:
        await session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="100,1000,10000",
                        help="comma-separated partition counts (default 100,1000,10000)")
    parser.add_argument("--events", type=int, default=50, help="changes per mode (50)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.partitions.split(",")]
    if args.events < 1 or any(size < 1 for size in sizes):
        parser.error("--events and every --partitions count must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-cluster-view-") as work, \
            running_etcd(Path(work)) as cluster_url:
        asyncio.run(run_all(cluster_url, sizes, args.events))


if __name__ == "__main__":
    main()
