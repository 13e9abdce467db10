"""A partition's unavailability across a stop of its leader: controlled shutdown, a plain
SIGTERM and kill -9 (issue 29; server/cluster/controlled_shutdown.py).

Starts etcd and three servers in cluster mode on 127.0.0.1 (the default session timeout,
3,000 ms), creates a topic of three partitions with three replicas each (min.insync.replicas
2), and runs a producer in a thread of its own: one acks=all Produce at a time to a partition
through a SyncClient given every server, sending again at once after a retriable error (a
leader change: NOT_LEADER_OR_FOLLOWER, a refused connection). Then, ``--stops`` times per
way of stopping, the leader of the partition produced to (one the controller does not lead:
the producer switches to it first) is stopped, and once the producer has 50
acknowledgements after the stopped process exited, it is started again on its port and data;
the next stop waits until every partition is in sync on three replicas and led by its
preferred replica again (``leader_imbalance_check_interval_seconds`` 1).

The **unavailability** of one stop is the longest time between two consecutive
acknowledgements from the signal to the 50th acknowledgement after the exit: the time from the
last acknowledgement before the leadership moved to the first one after it (a produce round
trip, ~1-3 ms here, is the floor when nothing stalls). Three ways, one cluster each:

- ``controlled``: SIGTERM with the default ``controlled_shutdown_timeout_ms`` (30 s): the
  leadership moves while the server still serves;
- ``sigterm``: SIGTERM with ``controlled_shutdown_timeout_ms`` 0 (before the controlled
  shutdown): the leadership moves once the server's lease is revoked at the end of its stop;
- ``kill``: kill -9: the leadership moves once the lease expires (the session timeout).

Prints each stop's unavailability and the process's stop time (signal to exit), then the median
and max per way (docs/performance.md, "Issue 29: controlled shutdown")::

    .venv/bin/python -m benchmarks.bench_controlled_shutdown --stops 5
"""

from __future__ import annotations

import argparse
import itertools
import signal
import statistics
import threading
import time

import grpc

from stratalog.client import StratalogError, SyncClient
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .bench_takeover import (
    TOPIC,
    Server,
    all_in_sync,
    controller,
    launch,
    leaders,
    running_cluster,
    wait,
)

PARTITIONS = 3
#: Acknowledgements after the stopped process exited that end a stop's window.
ACKS_AFTER_EXIT = 50
#: Every way's servers: the leaderships go back to the preferred replicas within a second.
REBALANCE_FLAGS = ("--leader-imbalance-check-interval-seconds", "1")
WAYS: dict[str, tuple[tuple[str, ...], signal.Signals]] = {
    "controlled": (REBALANCE_FLAGS, signal.SIGTERM),
    "sigterm": ((*REBALANCE_FLAGS, "--controlled-shutdown-timeout-ms", "0"), signal.SIGTERM),
    "kill": (REBALANCE_FLAGS, signal.SIGKILL),
}


class AckTimes:
    """A producer thread sending to :attr:`partition` one Produce at a time; when each was
    acknowledged (monotonic seconds)."""

    def __init__(self, servers: dict[int, Server]) -> None:
        #: The partition produced to (the main thread switches it between stops).
        self.partition = 0
        self.times: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._targets = ",".join(s.target for s in servers.values())
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with SyncClient(self._targets, timeout_s=10) as client:
            while not self._stop.is_set():
                try:
                    client.produce(TOPIC, self.partition, [b"x" * 100], acks=-1)
                except StratalogError as err:
                    if not err.retriable:
                        raise
                    continue
                with self._lock:
                    self.times.append(time.monotonic())

    def count_after(self, moment: float) -> int:
        with self._lock:
            return sum(1 for t in self.times if t > moment)

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time between consecutive acknowledgements in [start, end], the one
        just before ``start`` included."""
        with self._lock:
            before = [t for t in self.times if t <= start]
            inside = [t for t in self.times if start < t <= end]
        chain = before[-1:] + inside
        return max((b - a for a, b in itertools.pairwise(chain)), default=0.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)


def balanced(servers: dict[int, Server]) -> bool:
    """Every partition in sync on three replicas, each server leading one."""
    return all_in_sync(servers) and sorted(
        leader for leader, _ in leaders(servers[1]).values()) == [1, 2, 3]


def stop_leader(url: str, servers: dict[int, Server], flags: tuple[str, ...],
                signum: signal.Signals, acks: AckTimes) -> tuple[float, float]:
    """Stop the leader of a partition the controller does not lead with ``signum``, the
    producer sending to it; (unavailability, signal to exit) seconds."""
    wait(lambda: balanced(servers), "the leaderships balanced")
    boss = controller(servers[1])
    acks.partition, (leader, _) = next(
        (p, v) for p, v in sorted(leaders(servers[1]).items()) if v[0] != boss)
    wait(lambda: acks.count_after(time.monotonic() - 0.2) >= 10, "the producer on it")
    process = servers[leader].process
    signalled = time.monotonic()
    process.send_signal(signum)
    process.wait(120)
    exited = time.monotonic()
    wait(lambda: acks.count_after(exited) >= ACKS_AFTER_EXIT, "acknowledgements after the exit")
    gap = acks.longest_gap(signalled, time.monotonic())
    stopped = servers[leader]
    for _ in range(100):  # after a kill -9 the node id is free once the lease expired
        try:
            servers[leader] = launch(url, leader, stopped.port, stopped.data_dir, flags)
            break
        except RuntimeError:
            time.sleep(0.5)
    else:
        raise RuntimeError(f"node {leader} did not start again")
    return gap, exited - signalled


def run(way: str, stops: int) -> tuple[list[float], list[float]]:
    flags, signum = WAYS[way]
    gaps: list[float] = []
    stop_times: list[float] = []
    with running_cluster(flags) as (url, servers):
        wait(lambda: controller(servers[1]) > 0, "a controller")
        with grpc.insecure_channel(servers[1].target) as channel:
            broker_pb2_grpc.BrokerStub(channel).CreateTopic(pb.CreateTopicRequest(
                name=TOPIC, partitions=PARTITIONS, replication_factor=3,
                configs={"min.insync.replicas": "2"}), timeout=10)
        wait(lambda: all_in_sync(servers), "the topic in sync")
        acks = AckTimes(servers)
        try:
            for n in range(stops):
                gap, took = stop_leader(url, servers, flags, signum, acks)
                gaps.append(gap)
                stop_times.append(took)
                print(f"{way} stop {n + 1}: unavailable {gap * 1000:.1f} ms,"
                      f" signal to exit {took:.3f} s", flush=True)
        finally:
            acks.close()
    return gaps, stop_times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stops", type=int, default=5, help="stops per way")
    parser.add_argument("--ways", default="controlled,sigterm,kill",
                        help="comma-separated: controlled,sigterm,kill")
    args = parser.parse_args()
    results = {way: run(way, args.stops) for way in args.ways.split(",")}
    print()
    print("| stop of the partition's leader | n | unavailable, median ms | max ms |"
          " signal to exit, median s |")
    print("|---|---|---|---|---|")
    for way, (gaps, stop_times) in results.items():
        print(f"| {way} | {len(gaps)} | {statistics.median(gaps) * 1000:.1f} |"
              f" {max(gaps) * 1000:.1f} | {statistics.median(stop_times):.3f} |")


if __name__ == "__main__":
    main()
