"""Takeover time after a kill -9, with etcd watches and with polls alone (issue 29, item 3).

Starts etcd and three servers in cluster mode on 127.0.0.1 (the default session timeout,
3,000 ms: an etcd lease TTL of 3 s), creates a topic of three partitions with three replicas
each, then, ``--kills`` times for each kind of kill:

- **controller**: kill -9 of the controller; the time until a surviving server's Metadata
  names another controller;
- **leader**: kill -9 of the leader of a partition the controller does not lead; the time
  until every surviving server's Metadata names a new leader of it (each server's view of
  etcd shows it: the new leader serves it), and until a Produce (acks=1) to the partition
  is acknowledged through a client given the survivors.

The killed server is restarted on its port and data directory (once its lease expired) and the
next kill waits until every partition has its three replicas in sync again.

Each time is also given from the moment etcd deleted the killed server's broker key (its lease
expired; seen by a watch of this process): that part is what the watches change, the rest is
the lease's TTL and when the killed server had last renewed it.

Two modes, one cluster each: ``watches`` (the defaults: watches, polls every 5 s as the
fallback) and ``polls`` (``--cluster-watches-enable false --cluster-poll-fallback-ms 250``:
every part polls etcd every 250 ms, as before issue 29). Metadata is polled every 10 ms, so
each time is late by at most that. Prints each kill's times, then the median and the max per
mode and kind (docs/performance.md, "Issue 29: etcd watches")::

    .venv/bin/python -m benchmarks.bench_takeover --kills 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aetcd
import grpc

from stratalog.client import StratalogError, SyncClient
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .bench_cluster_client import _stop, free_port, running_etcd

TOPIC = "takeover"
PARTITIONS = 3
#: How often Metadata is asked while waiting for a takeover (seconds).
PROBE_INTERVAL_S = 0.01
#: A bound on every wait: it turns a hang into an error.
STEP_TIMEOUT_S = 60.0
MODES: dict[str, tuple[str, ...]] = {
    "watches": (),
    "polls": ("--cluster-watches-enable", "false", "--cluster-poll-fallback-ms", "250"),
}


@dataclass
class Server:
    node_id: int
    port: int
    data_dir: Path
    process: subprocess.Popen[str]

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


def launch(cluster_url: str, node_id: int, port: int, data_dir: Path,
           flags: tuple[str, ...]) -> Server:
    """A server on ``port``, started and listening (RuntimeError if it exits first)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "stratalog.server", "--listen", f"127.0.0.1:{port}",
         "--log-dirs", str(data_dir), "--metrics-port", "-1", "--kafka-listen", "",
         "--logging-level", "WARNING", "--cluster", cluster_url, "--node-id", str(node_id),
         *flags],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if re.search(r"listening on \S+:\d+", line):
            return Server(node_id, port, data_dir, process)
    process.wait()
    raise RuntimeError(f"server {node_id} exited with {process.returncode} before listening")


def metadata(server: Server, *topics: str) -> pb.MetadataResponse | None:
    try:
        with grpc.insecure_channel(server.target) as channel:
            return broker_pb2_grpc.BrokerStub(channel).Metadata(
                pb.MetadataRequest(topics=list(topics)), timeout=2)
    except grpc.RpcError:
        return None


def wait(condition: Callable[[], bool], what: str) -> float:
    """Poll ``condition`` every :data:`PROBE_INTERVAL_S`; the seconds until it held."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > STEP_TIMEOUT_S:
            raise RuntimeError(f"not within {STEP_TIMEOUT_S} s: {what}")
        time.sleep(PROBE_INTERVAL_S)
    return time.monotonic() - started


def leaders(server: Server) -> dict[int, tuple[int, int]]:
    """partition -> (leader, ISR size) in ``server``'s view."""
    answer = metadata(server, TOPIC)
    if answer is None or not answer.topics:
        return {}
    return {p.partition: (p.leader, len(p.isr)) for p in answer.topics[0].partitions}


def controller(server: Server) -> int:
    answer = metadata(server)
    return answer.controller_id if answer is not None else -1


@contextlib.contextmanager
def running_cluster(flags: tuple[str, ...]) -> Iterator[tuple[str, dict[int, Server]]]:
    work_dir = Path(tempfile.mkdtemp(prefix="stratalog-bench-takeover-"))
    servers: dict[int, Server] = {}
    try:
        with running_etcd(work_dir) as url:
            try:
                for node in (1, 2, 3):
                    servers[node] = launch(url, node, free_port(), work_dir / f"node-{node}",
                                           flags)
                yield url, servers
            finally:
                for server in servers.values():
                    _stop(server.process)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def all_in_sync(servers: dict[int, Server]) -> bool:
    views = [leaders(s) for s in servers.values()]
    return all(len(v) == PARTITIONS and all(size == 3 and leader > 0
                                            for leader, size in v.values()) for v in views)


def restart(url: str, servers: dict[int, Server], node: int, flags: tuple[str, ...]) -> None:
    killed = servers[node]
    # Its registration goes with its lease: a start before that is refused (node id in use).
    for _ in range(100):
        try:
            servers[node] = launch(url, node, killed.port, killed.data_dir, flags)
            break
        except RuntimeError:
            time.sleep(0.5)
    else:
        raise RuntimeError(f"node {node} did not start again")
    wait(lambda: all_in_sync(servers), "every partition in sync on three replicas")


def first_produce(survivors: list[Server], partition: int) -> None:
    """Until a Produce (acks=1) to ``partition`` through the survivors succeeds."""
    started = time.monotonic()
    with SyncClient(",".join(s.target for s in survivors), timeout_s=10) as client:
        while True:
            try:
                client.produce(TOPIC, partition, [b"after-kill"], acks=1)
                return
            except StratalogError as err:
                if not err.retriable or time.monotonic() - started > STEP_TIMEOUT_S:
                    raise


def kill_controller(url: str, servers: dict[int, Server],
                    flags: tuple[str, ...]) -> tuple[float, float]:
    old = controller(servers[1])
    survivors = [s for n, s in servers.items() if n != old]
    deletion = KeyDeletion(url, f"/stratalog/brokers/{old}".encode())
    servers[old].process.kill()
    killed_at = time.monotonic()
    servers[old].process.wait()
    wait(lambda: controller(survivors[0]) not in (-1, old), "a new controller")
    now = time.monotonic()
    restart(url, servers, old, flags)
    return now - killed_at, deletion.since(now)


def kill_leader(url: str, servers: dict[int, Server],
                flags: tuple[str, ...]) -> tuple[float, float, float]:
    boss = controller(servers[1])
    view = leaders(servers[boss])
    partition, (old, _) = next((p, v) for p, v in sorted(view.items()) if v[0] != boss)
    survivors = [s for n, s in servers.items() if n != old]
    deletion = KeyDeletion(url, f"/stratalog/brokers/{old}".encode())
    servers[old].process.kill()
    killed_at = time.monotonic()
    servers[old].process.wait()
    wait(lambda: all(leaders(s).get(partition, (-1, 0))[0] not in (-1, old)
                     for s in survivors), "every survivor names a new leader")
    now = time.monotonic()
    in_views, after_deletion = now - killed_at, deletion.since(now)
    first_produce(survivors, partition)
    produced = time.monotonic() - killed_at
    restart(url, servers, old, flags)
    return in_views, after_deletion, produced


class KeyDeletion:
    """When etcd deletes one key (monotonic seconds), seen by a watch in a thread of its own."""

    def __init__(self, cluster_url: str, key: bytes) -> None:
        host, _, port = cluster_url.removeprefix("etcd://").rpartition(":")
        self.deleted_at: float | None = None
        ready = threading.Event()

        async def watch() -> None:
            client = aetcd.Client(host=host, port=int(port))
            try:
                events = await client.watch(key, kind=aetcd.EventKind.DELETE)
                ready.set()
                async for _ in events:
                    self.deleted_at = time.monotonic()
                    return
            finally:
                ready.set()
                await client.close()

        self._thread = threading.Thread(target=asyncio.run, args=(watch(),), daemon=True)
        self._thread.start()
        if not ready.wait(STEP_TIMEOUT_S):
            raise RuntimeError(f"no watch of {key!r}")

    def since(self, moment: float) -> float:
        """Seconds from the deletion to ``moment`` (waiting for the deletion to be seen)."""
        self._thread.join(STEP_TIMEOUT_S)
        if self.deleted_at is None:
            raise RuntimeError("the key was not deleted")
        return moment - self.deleted_at


def run(mode: str, kills: int) -> dict[str, list[float]]:
    flags = MODES[mode]
    times: dict[str, list[float]] = {
        "controller": [], "controller, after the lease": [], "leader (views)": [],
        "leader (views), after the lease": [], "leader (produce)": []}
    with running_cluster(flags) as (url, servers):
        wait(lambda: controller(servers[1]) > 0, "a controller")
        with grpc.insecure_channel(servers[1].target) as channel:
            broker_pb2_grpc.BrokerStub(channel).CreateTopic(pb.CreateTopicRequest(
                name=TOPIC, partitions=PARTITIONS, replication_factor=3), timeout=10)
        wait(lambda: all_in_sync(servers), "the topic in sync")
        for n in range(kills):
            took, after_lease = kill_controller(url, servers, flags)
            times["controller"].append(took)
            times["controller, after the lease"].append(after_lease)
            print(f"{mode} kill {n + 1}: controller {took:.3f} s ({after_lease:.3f} s after"
                  " the lease)", flush=True)
        for n in range(kills):
            in_views, after_lease, produced = kill_leader(url, servers, flags)
            times["leader (views)"].append(in_views)
            times["leader (views), after the lease"].append(after_lease)
            times["leader (produce)"].append(produced)
            print(f"{mode} kill {n + 1}: leader {in_views:.3f} s in every view ({after_lease:.3f}"
                  f" s after the lease), {produced:.3f} s to an acknowledged produce",
                  flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="kills of each kind per mode")
    parser.add_argument("--modes", default="polls,watches", help="comma-separated: polls,watches")
    args = parser.parse_args()
    results = {mode: run(mode, args.kills) for mode in args.modes.split(",")}
    print()
    print("| mode | kill -9 of | n | median s | max s | min s |")
    print("|---|---|---|---|---|---|")
    for mode, times in results.items():
        for kind, values in times.items():
            print(f"| {mode} | {kind} | {len(values)} | {statistics.median(values):.3f} |"
                  f" {max(values):.3f} | {min(values):.3f} |")


if __name__ == "__main__":
    main()
