"""Consumer groups from the client's side: rebalance time, throughput with auto-commit, commits.

Issue 27's consumer-side benchmarks, against a stratalog server process on 127.0.0.1 started
with this repository's python (``group.initial.rebalance.delay.ms=0``, see below), through the
repository's client (``stratalog.client.Consumer`` with ``group_id``):

  rebalance   a topic of 12 partitions; a producer (this process) sends one 100-byte record to
              every partition every 10 ms throughout. Three member processes (each its own
              interpreter and event loop; cooperative-sticky, the default) form a new group and
              consume until stable (4 partitions each, every one of them consuming). A fourth
              process, already started and connected, is told to go: the time it prints just
              before creating its Consumer is t0. Each member prints its rebalance callbacks'
              events with their times and the time of its first record of each partition it is
              newly given; at the end, every record's receipt time per partition. Figures, from
              t0: the joiner's first record; *every member consuming again* (per member, its
              first record after its last callback event of the rebalance, the latest of the
              four); and the old members' largest gap between two records of a partition they
              kept (Kafka's cooperative protocol: those never stop), against the same
              partitions' largest gap in the second before t0. Measured with the Consumer's
              default held heartbeats at its default ``heartbeat_interval_ms`` (3,000), then
              with Kafka's schedule (``held_heartbeats=False``) at 3,000 and at
              ``--heartbeat-ms`` (200): on Kafka's schedule the old members learn of the
              rebalance from their next heartbeat's answer, so the interval bounds the
              rebalance; a held heartbeat is answered as the rebalance starts
              (docs/groups.md "Held heartbeats").
  throughput  one topic of ``--partitions`` (4) holding ``--records`` (1,000,000) records of 100
              bytes; the same Consumer reads all of it, in turns: without a group (``topics=``,
              partitions assigned, until the end), and as a group of one with auto-commit at the
              default 5 s interval and at 100 ms (a new group each time, from the earliest
              offset; timed until its last record, the join included). Per record (``async for``)
              and per batch (``batches()``), the three kinds in turns (the first rotating). Per
              read: records/s over the whole read and after the first hand-over (a group's join
              is a one-off; auto-commit runs in the steady state), and this process's CPU per
              record over both (on a shared machine the steadier figure); each against the
              no-group read's.
  commit      a group of one member (auto-commit off) owning a 1-partition topic: in turns,
              ``await consumer.commit({tp: offset})`` of that partition, a one-record
              ``await (await producer.send(...))`` through the same Client (Produce on its
              Session stream: the goal's reference), and the same through a Client with
              ``sessions=False`` (a unary Produce, as the group RPCs always are), the kinds
              rotating each round: p50 and p99 of each, and commit / each.

The initial rebalance delay: a new group's first join waits ``group.initial.rebalance.delay.ms``
(Kafka's default and ours: 3 s) for more members. The rebalance measured here is of a group that
is not new (a fourth member joins a stable group), which the delay does not touch (only a join
to an Empty group waits: server/groups/classic_group_manager.py, as Kafka's
``InitialDelayedJoin``); it is set to 0 so that each run's new groups (the three first members,
each throughput run's group of one) do not wait 3 s on purpose.

Every figure is the median of ``--runs`` runs. Run: ``.venv/bin/python -m
benchmarks.bench_group_consumer [--runs 3] [--records 1000000] [--partitions 4]
[--heartbeat-ms 200] [--commits 1000] [--skip-rebalance] [--skip-throughput] [--skip-commit]``.
Figures: docs/performance.md, "Issue 27: the group coordinator".
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from stratalog.client import Client, Consumer, Producer, TopicPartition

#: Partitions of the rebalance's topic: 4 per member for 3, 3 per member for 4.
REBALANCE_PARTITIONS = 12
#: The producer's period: one record to each partition every 10 ms.
PRODUCE_PERIOD_S = 0.010
VALUE_SIZE_BYTES = 100
#: The window before t0 (and after the end of the rebalance) whose gaps are the reference.
WINDOW_S = 1.0
#: Bound on every wait for the group to get somewhere.
WAIT_TIMEOUT_S = 60.0
DEFAULT_HEARTBEAT_MS = 3_000
SEND_MANY_CHUNK = 10_000


# ------------------------------------------------------------------ arithmetic (unit-tested)


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of ``samples`` (``fraction`` in [0, 1])."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(round(fraction * len(ordered), 9)))
    return ordered[min(rank, len(ordered)) - 1]


def largest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The largest time between two consecutive entries of ``times`` (sorted receipt times),
    counting ``start`` and ``end`` as entries: a partition with no record in the window has a
    gap as long as the window. Only entries within [start, end] count."""
    inside = [t for t in times if start <= t <= end]
    points = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(points))


def first_after(times: Iterable[float], moment: float) -> float | None:
    """The first receipt time after ``moment`` (None: none)."""
    later = [t for t in times if t > moment]
    return min(later) if later else None


@dataclass
class MemberReport:
    """What one member process said: its callbacks' events (time, kind, partitions) and every
    record's receipt time per partition (CLOCK_MONOTONIC: one clock for every process)."""

    events: list[tuple[float, str, frozenset[int]]] = field(default_factory=list)
    times: dict[int, list[float]] = field(default_factory=dict)

    def owned_at(self, moment: float) -> frozenset[int]:
        owned: set[int] = set()
        for t, kind, partitions in self.events:
            if t > moment:
                break
            if kind == "ASSIGNED":
                owned |= partitions
            else:
                owned -= partitions
        return frozenset(owned)


@dataclass
class RebalanceFigures:
    """One rebalance run's figures, in seconds from t0 (gaps: seconds)."""

    joiner_first_record_s: float
    all_consuming_s: float
    last_event_s: float
    kept_gap_s: float
    kept_gap_before_s: float
    #: The first revocation by an old member: the end of the first of cooperative's two
    #: rebalances (the second gives the revoked partitions to the joiner).
    first_revoke_s: float


def rebalance_figures(old: Sequence[MemberReport], joiner: MemberReport, t0: float,
                      end: float) -> RebalanceFigures:
    """The figures of a run whose joiner went at ``t0``; ``end``: when the run stopped looking.

    A member consumes again at its first record (of any partition) after its last callback
    event in [t0, end] (the joiner: after its assignment); "every member consuming again" is the
    latest of those. The kept partitions are those an old member owned both at t0 and at end.
    Raises ValueError when a member has no event after t0 or no record after it, or no old
    member revoked anything."""
    consuming, last_events = [], []
    for member in [*old, joiner]:
        events = [t for t, _kind, _parts in member.events if t0 <= t <= end]
        if not events:
            raise ValueError("a member had no rebalance event after the joiner went")
        last_events.append(max(events))
        first = first_after((t for ts in member.times.values() for t in ts), max(events))
        if first is None:
            raise ValueError("a member consumed nothing after its rebalance")
        consuming.append(first)
    revokes = [t for member in old for t, kind, _parts in member.events
               if kind == "REVOKED" and t0 <= t <= end]
    if not revokes:
        raise ValueError("no old member revoked a partition")
    gaps, gaps_before = [0.0], [0.0]
    for member in old:
        for partition in member.owned_at(t0) & member.owned_at(end):
            times = member.times.get(partition, [])
            gaps.append(largest_gap(times, t0, end))
            gaps_before.append(largest_gap(times, t0 - WINDOW_S, t0))
    return RebalanceFigures(
        joiner_first_record_s=consuming[-1] - t0,
        all_consuming_s=max(consuming) - t0,
        last_event_s=max(last_events) - t0,
        kept_gap_s=max(gaps),
        kept_gap_before_s=max(gaps_before),
        first_revoke_s=min(revokes) - t0,
    )


def median_of(runs: Sequence[RebalanceFigures]) -> RebalanceFigures:
    """Each field's median over ``runs``."""
    return RebalanceFigures(**{
        name: statistics.median(getattr(r, name) for r in runs)
        for name in RebalanceFigures.__dataclass_fields__
    })


def median_read(runs: Sequence[ReadFigures]) -> ReadFigures:
    """Each field's median over ``runs``."""
    return ReadFigures(**{name: statistics.median(getattr(r, name) for r in runs)
                          for name in ReadFigures.__dataclass_fields__})


def make_values(count: int) -> list[bytes]:
    """``count`` distinct values of VALUE_SIZE_BYTES (a counter in front of filler)."""
    filler = b"x" * VALUE_SIZE_BYTES
    return [(b"%010d" % i + filler)[:VALUE_SIZE_BYTES] for i in range(count)]


# ------------------------------------------------------------------ the member process


async def _member(target: str, topic: str, group: str, heartbeat_ms: int, held: bool) -> None:
    """A member process: waits for "go" on stdin, then consumes; prints ``START t``, ``EV t
    KIND p p ...`` per callback and ``FIRST t p`` per newly assigned partition's first record;
    on "stop" prints ``TIMES {json}`` (receipt times per partition) and exits at once (no
    LeaveGroup: the run's group is dropped)."""

    loop = asyncio.get_running_loop()
    times: dict[int, list[float]] = {}
    fresh: set[int] = set()
    clock = time.monotonic

    def event(kind: str) -> Callable[[frozenset], None]:
        def say(tps: frozenset) -> None:
            parts = sorted(tp.partition for tp in tps)
            if kind == "ASSIGNED":
                fresh.update(parts)
            print("EV", clock(), kind, *parts, flush=True)
        return say

    async def stop_on_command() -> None:
        await loop.run_in_executor(None, sys.stdin.readline)
        print("TIMES", json.dumps(times), flush=True)
        os._exit(0)

    async with Client(target) as client:
        await client.describe_topic(topic)  # connected before "go"
        print("READY", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
        stopper = loop.create_task(stop_on_command())
        print("START", clock(), flush=True)
        async with Consumer(client, topics=[topic], group_id=group,
                            auto_offset_reset="latest", heartbeat_interval_ms=heartbeat_ms,
                            held_heartbeats=held,
                            on_partitions_assigned=event("ASSIGNED"),
                            on_partitions_revoked=event("REVOKED"),
                            on_partitions_lost=event("LOST")) as consumer:
            async for record in consumer:
                now = clock()
                p = record.partition
                times.setdefault(p, []).append(now)
                if p in fresh:
                    fresh.discard(p)
                    print("FIRST", now, p, flush=True)
        await stopper


class _MemberProcess:
    """The driver's view of one member process, filled from its stdout lines."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.report = MemberReport()
        self.started: float | None = None
        self.ready = asyncio.Event()
        self.first: dict[int, float] = {}
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def spawn(cls, target: str, topic: str, group: str, heartbeat_ms: int, held: bool
                    ) -> _MemberProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.bench_group_consumer", "--member", target, topic,
            group, str(heartbeat_ms), "held" if held else "kafka", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=None, limit=64 * 1024 * 1024)
        return cls(process)

    @property
    def owned(self) -> frozenset[int]:
        return self.report.owned_at(float("inf"))

    def consuming(self) -> bool:
        """Owns partitions and got a record of each since it was given it."""
        last = {p: t for t, kind, parts in self.report.events if kind == "ASSIGNED"
                for p in parts}
        return bool(self.owned) and all(self.first.get(p, -1.0) >= last[p] for p in self.owned)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            async for line in self.process.stdout:
                kind, _, rest = line.decode().partition(" ")
                if kind == "EV":
                    t, event, *parts = rest.split()
                    self.report.events.append(
                        (float(t), event, frozenset(int(p) for p in parts)))
                elif kind == "FIRST":
                    t, p = rest.split()
                    self.first[int(p)] = float(t)
                elif kind == "START":
                    self.started = float(rest)
                elif kind.strip() == "READY":
                    self.ready.set()
                elif kind == "TIMES":
                    self.report.times = {int(p): ts for p, ts in json.loads(rest).items()}
        finally:
            if not self.done.done():
                self.done.set_result(None)

    def tell(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.tell("stop")
            try:
                await asyncio.wait_for(asyncio.shield(self.done), WAIT_TIMEOUT_S)
            finally:
                if self.process.returncode is None:
                    self.process.kill()
        await self.process.wait()
        await self.reader


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Polls ``condition`` every 5 ms until true, at most WAIT_TIMEOUT_S."""
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {WAIT_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.005)


# ------------------------------------------------------------------ the phases


async def _produce_steadily(client: Client, topic: str, stop: asyncio.Event) -> None:

    value = b"r" * VALUE_SIZE_BYTES
    async with Producer(client, linger_ms=1) as producer:
        next_at = time.monotonic()
        while not stop.is_set():
            for p in range(REBALANCE_PARTITIONS):
                await producer.send(topic, value, partition=p)
            next_at += PRODUCE_PERIOD_S
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def rebalance_run(client: Client, target: str, run: int, heartbeat_ms: int, held: bool
                        ) -> RebalanceFigures:
    schedule = f"{heartbeat_ms}-{'held' if held else 'kafka'}"
    topic, group = f"rebalance-{schedule}-{run}", f"g-rebalance-{schedule}-{run}"
    await client.create_topic(topic, REBALANCE_PARTITIONS)
    stop = asyncio.Event()
    producer = asyncio.get_running_loop().create_task(_produce_steadily(client, topic, stop))
    members = [await _MemberProcess.spawn(target, topic, group, heartbeat_ms, held)
               for _ in range(4)]
    old, joiner = members[:3], members[3]
    try:
        await _until(lambda: all(m.ready.is_set() for m in members), "members connected")
        for m in old:
            m.tell("go")
        await _until(lambda: sorted(len(m.owned) for m in old) == [4, 4, 4]
                     and all(m.consuming() for m in old), "three members, 4 partitions each")
        await asyncio.sleep(WINDOW_S)  # the reference window before t0
        joiner.tell("go")
        await _until(lambda: joiner.started is not None, "the joiner's start")
        await _until(lambda: sorted(len(m.owned) for m in members) == [3, 3, 3, 3]
                     and all(m.consuming() for m in members), "four members, 3 partitions each")
        await asyncio.sleep(WINDOW_S)  # records after the last member's first one
        end = time.monotonic()
        for m in members:
            await m.stop()
    finally:
        stop.set()
        await producer
        for m in members:
            if m.process.returncode is None:
                m.process.kill()
                await m.process.wait()
    assert joiner.started is not None
    return rebalance_figures([m.report for m in old], joiner.report, joiner.started, end)


async def _fill(client: Client, topic: str, records: int, partitions: int) -> None:

    await client.create_topic(topic, partitions)
    values = make_values(records // partitions)
    async with Producer(client, linger_ms=5) as producer:
        for p in range(partitions):
            for i in range(0, len(values), SEND_MANY_CHUNK):
                await producer.send_many(topic, values[i:i + SEND_MANY_CHUNK], partition=p)
        await producer.flush()


@dataclass
class ReadFigures:
    """One read of the throughput phase: records/s over the whole read (the Consumer's start,
    a group's join, included), records/s after the first batch or record was handed over (the
    steady state, where auto-commit runs), and this process's CPU µs per record over the whole
    read and after the first hand-over (which the machine's other load disturbs much less than
    wall-clock rates)."""

    rate: float
    rate_after_first: float
    cpu_us: float
    cpu_us_after_first: float


def read_figures(count: int, first_count: int, started: float, first_at: float, ended: float,
                 cpu_s: float, cpu_after_first_s: float) -> ReadFigures:
    """The figures of a read of ``count`` records between ``started`` and ``ended`` whose
    first hand-over (``first_count`` records) was at ``first_at``; ``cpu_s`` the CPU time of
    the whole read, ``cpu_after_first_s`` of its part after the first hand-over."""
    rest = count - first_count
    return ReadFigures(rate=count / (ended - started),
                       rate_after_first=rest / (ended - first_at),
                       cpu_us=cpu_s / count * 1e6,
                       cpu_us_after_first=cpu_after_first_s / rest * 1e6)


async def read_all(client: Client, topic: str, expected: int, *, per_batch: bool,
                   group: str | None, auto_commit_ms: int) -> ReadFigures:
    """One Consumer reading ``expected`` records of ``topic`` from the start (with ``group``:
    a new group of one, auto-commit every ``auto_commit_ms``)."""
    kwargs: dict = {}
    if group is not None:
        kwargs = {"group_id": group, "auto_offset_reset": "earliest",
                  "auto_commit_interval_ms": auto_commit_ms}
    count = first_count = 0
    first_at = first_cpu = 0.0
    cpu = time.process_time()
    started = time.perf_counter()
    async with Consumer(client, topics=[topic], **kwargs) as consumer:
        if per_batch:
            async for batch in consumer.batches():
                if not count:
                    first_at, first_count = time.perf_counter(), len(batch)
                    first_cpu = time.process_time()
                count += len(batch)
                if count >= expected:
                    break
        else:
            async for _record in consumer:
                if not count:
                    first_at, first_count = time.perf_counter(), 1
                    first_cpu = time.process_time()
                count += 1
                if count >= expected:
                    break
        ended = time.perf_counter()
        cpu_ended = time.process_time()
    if count != expected:
        raise RuntimeError(f"read {count} records of {expected}")
    return read_figures(count, first_count, started, first_at, ended, cpu_ended - cpu,
                        cpu_ended - first_cpu)


THROUGHPUT_KINDS = (("no group", None), ("group, auto-commit 5 s", 5_000),
                    ("group, auto-commit 100 ms", 100))


async def throughput(client: Client, runs: int, records: int, partitions: int
                     ) -> dict[tuple[str, str], list[ReadFigures]]:
    topic = "throughput"
    await _fill(client, topic, records, partitions)
    expected = records // partitions * partitions
    figures: dict[tuple[str, str], list[ReadFigures]] = {}
    for run in range(runs):
        for read in ("records", "batches"):
            order = THROUGHPUT_KINDS[run % 3:] + THROUGHPUT_KINDS[:run % 3]
            for name, auto_commit_ms in order:
                group = None if auto_commit_ms is None else f"g-tp-{run}-{read}-{auto_commit_ms}"
                one = await read_all(client, topic, expected, per_batch=read == "batches",
                                     group=group, auto_commit_ms=auto_commit_ms or 0)
                figures.setdefault((read, name), []).append(one)
                print(f"  run {run + 1} {read:7} {name:26} {one.rate:12,.0f} records/s"
                      f" ({one.rate_after_first:12,.0f} after the first)"
                      f" {one.cpu_us:6.3f} client CPU us/record"
                      f" ({one.cpu_us_after_first:6.3f} after)", flush=True)
    return figures


async def commit_latency(client: Client, target: str, commits: int
                         ) -> dict[str, list[float]]:
    """Latencies (ms) of ``commits`` commits and as many one-record produces of each kind, in
    turns: through ``client`` (its Session stream) and through a Client with
    ``sessions=False`` (unary calls, as the group RPCs always are)."""

    topic = "commit-latency"
    await client.create_topic(topic, 1)
    tp = TopicPartition(topic, 0)
    value = b"x" * VALUE_SIZE_BYTES
    samples: dict[str, list[float]] = {"commit": [], "produce": [], "produce (unary)": []}
    async with Client(target, sessions=False) as unary_client, Producer(
            client, linger_ms=0) as producer, Producer(
            unary_client, linger_ms=0) as unary_producer, Consumer(
            client, topics=[topic], group_id="g-commit-latency", enable_auto_commit=False,
            auto_offset_reset="earliest") as consumer:
        await (await producer.send(topic, value, partition=0))
        async for _record in consumer:
            break  # a member with the partition assigned

        async def commit(i: int) -> None:
            await consumer.commit({tp: i})

        async def produce(_i: int) -> None:
            await (await producer.send(topic, value, partition=0))

        async def produce_unary(_i: int) -> None:
            await (await unary_producer.send(topic, value, partition=0))

        kinds = [("commit", commit), ("produce", produce), ("produce (unary)", produce_unary)]
        for i in range(commits):
            for name, call in kinds[i % 3:] + kinds[:i % 3]:
                started = time.perf_counter()
                await call(i)
                samples[name].append((time.perf_counter() - started) * 1000)
    return samples


# ------------------------------------------------------------------ the run


def _server_flags() -> tuple[str, ...]:
    return ("--set", "group.initial.rebalance.delay.ms=0")


async def _main(args: argparse.Namespace, target: str) -> None:

    async with Client(target) as client:
        if not args.skip_rebalance:
            print("rebalance: a fourth member joins three (12 partitions, cooperative-sticky)")
            # Held heartbeats (the Consumer's default) at the default interval, then Kafka's
            # schedule (held_heartbeats=False) at the default interval and at --heartbeat-ms.
            for heartbeat_ms, held in ((DEFAULT_HEARTBEAT_MS, True),
                                       (DEFAULT_HEARTBEAT_MS, False), (args.heartbeat_ms, False)):
                name = f"heartbeat {heartbeat_ms} ms, {'held' if held else 'Kafka schedule'}"
                runs = []
                for run in range(args.runs):
                    figures = await rebalance_run(client, target, run, heartbeat_ms, held)
                    runs.append(figures)
                    print(f"  {name}, run {run + 1}: {_row(figures)}", flush=True)
                print(f"  {name}, median: {_row(median_of(runs))}", flush=True)
        if not args.skip_throughput:
            print(f"throughput: {args.records:,} records of {VALUE_SIZE_BYTES} B,"
                  f" {args.partitions} partitions")
            figures = await throughput(client, args.runs, args.records, args.partitions)
            for read in ("records", "batches"):
                base = median_read(figures[(read, "no group")])
                for name, _ in THROUGHPUT_KINDS:
                    m = median_read(figures[(read, name)])
                    print(f"  median {read:7} {name:26} {m.rate:12,.0f} records/s"
                          f" x{m.rate / base.rate:.3f}; after the first"
                          f" {m.rate_after_first:12,.0f} x{m.rate_after_first / base.rate_after_first:.3f};"
                          f" {m.cpu_us:.3f} us/record x{m.cpu_us / base.cpu_us:.3f}, after the"
                          f" first {m.cpu_us_after_first:.3f}"
                          f" x{m.cpu_us_after_first / base.cpu_us_after_first:.3f}", flush=True)
        if not args.skip_commit:
            samples = await commit_latency(client, target, args.commits)
            p = {k: (percentile(v, 0.5), percentile(v, 0.99)) for k, v in samples.items()}
            print(f"commit latency ({args.commits} calls of each kind, in turns):")
            for name, (p50, p99) in p.items():
                ratio = (f"  commit / this: {p['commit'][0] / p50:.2f} /"
                         f" {p['commit'][1] / p99:.2f}" if name != "commit" else "")
                print(f"  {name:16} p50 {p50:.3f} ms  p99 {p99:.3f} ms{ratio}", flush=True)


def _row(f: RebalanceFigures) -> str:
    return (f"first revocation {f.first_revoke_s * 1000:.0f} ms, joiner's first record"
            f" {f.joiner_first_record_s * 1000:.0f} ms, every member"
            f" consuming {f.all_consuming_s * 1000:.0f} ms (last callback"
            f" {f.last_event_s * 1000:.0f} ms); kept partitions' largest gap"
            f" {f.kept_gap_s * 1000:.0f} ms (before t0: {f.kept_gap_before_s * 1000:.0f} ms)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--member", nargs=5,
                        metavar=("TARGET", "TOPIC", "GROUP", "HB_MS", "HELD_OR_KAFKA"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--heartbeat-ms", type=int, default=200)
    parser.add_argument("--commits", type=int, default=1_000)
    parser.add_argument("--skip-rebalance", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-commit", action="store_true")
    args = parser.parse_args(argv)
    if args.member:
        target, topic, group, heartbeat_ms, schedule = args.member
        asyncio.run(_member(target, topic, group, int(heartbeat_ms), schedule == "held"))
        return
    from benchmarks.bench_client import running_server

    print(f"load average at start: {_load_average()}", flush=True)
    with running_server(*_server_flags()) as target:
        asyncio.run(_main(args, target))
    print(f"load average at end: {_load_average()}", flush=True)


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
