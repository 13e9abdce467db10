"""What issue 24's limits cost: the same workloads against servers with and without them.

Issue 24 bounded what a client can make the server hold: Session streams in bytes
(``session_buffer_bytes``, ``session_buffer_bytes_total``), the bytes compressed Produce
requests may decompress to at once (``produce_decompressed_bytes_in_flight_max``), each
connection's share of Subscribe messages (``subscribe_buffer_bytes_per_connection``) and glibc's
malloc arenas (``malloc_arena_max``). Its goal: the existing workloads within the noise (5%) of
the same run without them. Up to three servers run side by side, each a process on 127.0.0.1:

  before     the code before issue 24 (``--before DIR``: a checkout of it with its own
             ``.venv``, e.g. ``git worktree add /tmp/bench-base c5a4a5c`` made like ours); left
             out when ``--before`` is not given
  defaults   this checkout with every setting at its default
  off        this checkout with the limits out of the way: each byte budget 1 TiB, glibc's
             default arenas (``malloc_arena_max`` 0)

and this process (uvloop, this checkout's client) runs each workload on each server in turns,
the order of the servers rotating every round, so that a slow spell of the shared machine falls
on all of them alike:

  produce 1 MiB           pre-built uncompressed batches of 100-byte records (just under
                          1 MiB), ``--in-flight`` unary Produce calls at once: MB/s
  produce zstd            batches of 10,000 records of 100 bytes compressed with zstd (the
                          server decompresses each to validate it: the decompressed-bytes
                          budget's path), ``--in-flight`` at once: decompressed MB/s
  consume fetch           unary FetchByOffset from offset 0 to the end of a 20 MiB log, 1 MiB
                          per call, raw batches: MB/s
  consume Subscribe       the same log over one Subscribe stream (1 MiB messages): MB/s
  point read unary        ``fetch_by_offset(max_records=1)`` at random offsets, one call at a
                          time, a unary RPC each: p50 latency
  point read Session      the same on the default client's Session stream: p50
  produce 1 rec Session   ``produce`` of one 100-byte record on the Session stream, one at a
                          time: p50

Each turn also reads the server's CPU time from /proc (``bench_peers.ServerCpu``): CPU per MiB
or per call moves far less with the machine's other load than wall-clock figures do. Per round,
the ratio of ``defaults`` to each other server is taken for every figure; the printed ratio is
the median over the rounds with an approximately 95% confidence interval for it beside it
(:func:`median_interval`): a cost is beyond the noise when the interval leaves out 1.

Run: ``.venv/bin/python -m benchmarks.bench_limits --before /tmp/bench-base [--rounds 60]``.
Figures: docs/performance.md ("Issue 24: the cost of the limits"). Every server and its data
directory are removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import random
import re
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.peer_harness import Meter, ServerCpu, rotation, server_process, timed_one_by_one
from stratalog.client import Client, FetchFormat
from stratalog.records import build_batch
from stratalog.records.batch import Compression

MIB = 1 << 20
VALUE_BYTES = 100
T0 = 1_700_000_000_000
LOG_TOPIC = "log"
LOG_BATCHES = 2_000  # of 100 records: ~21 MiB, the consume workloads' log
# Each byte budget of the "off" server: more than the machine has, so that nothing waits.
OUT_OF_THE_WAY_BYTES = 1 << 40
OFF_FLAGS = (
    "--set", f"session_buffer_bytes={OUT_OF_THE_WAY_BYTES}",
    "--set", f"session_buffer_bytes_total={OUT_OF_THE_WAY_BYTES}",
    "--set", f"produce_decompressed_bytes_in_flight_max={OUT_OF_THE_WAY_BYTES}",
    "--set", f"subscribe_buffer_bytes_per_connection={OUT_OF_THE_WAY_BYTES}",
    "--set", "malloc_arena_max=0",
)
READY = re.compile(r"listening on (\S+:\d+)")


@dataclass
class Variant:
    """One server of the comparison: its name, the Python that runs it, its extra flags."""

    name: str
    python: str
    flags: tuple[str, ...] = ()


@dataclass
class Running:
    """A started server: the name of its variant, its target and its CPU meter."""

    name: str
    target: str
    meter: Meter


def _values(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(VALUE_BYTES) for _ in range(count)]


def _mib_batch() -> bytes:
    """Uncompressed 100-byte records, about as many as fit under 1 MiB (max.message.bytes is
    1,048,588), as a producer with batch.size = 1 MiB sends."""
    values = _values(64, 2)
    count = MIB // (VALUE_BYTES + 12)  # ~12 B of framing per record
    while True:
        batch = build_batch([(T0 + i, None, values[i % 64], ()) for i in range(count)])
        if len(batch) <= MIB:
            return batch
        count -= (len(batch) - MIB) // (VALUE_BYTES + 8) + 1


def _zstd_batch() -> tuple[bytes, int]:
    """10,000 records of 100 bytes drawn from 256 random values, zstd: the batch and the bytes
    its records take uncompressed."""
    values = _values(256, 3)
    rng = random.Random(4)
    records = [(T0 + i, None, values[rng.randrange(256)], ()) for i in range(10_000)]
    uncompressed = len(build_batch(records))
    return build_batch(records, compression=Compression.ZSTD), uncompressed


class Workloads:
    """The workloads of one server: its two clients (unary and Session) and its topics."""

    def __init__(self, target: str, args: argparse.Namespace) -> None:
        self.unary = Client(target, sessions=False)
        self.session = Client(target)
        self.args = args
        self.mib_batch = _mib_batch()
        self.zstd_batch, self.zstd_bytes = _zstd_batch()
        self.log_bytes = 0

    async def open(self) -> None:
        for topic in (LOG_TOPIC, "produce", "produce-zstd", "produce-one"):
            await self.unary.create_topic(topic, 1)
        template = build_batch([(T0 + i, None, v, ()) for i, v in enumerate(_values(100, 1))])
        queue = iter(range(LOG_BATCHES))

        async def writer() -> None:
            for _ in queue:
                await self.unary.produce(LOG_TOPIC, 0, record_batches=template)

        await asyncio.gather(*(writer() for _ in range(8)))
        self.log_bytes = LOG_BATCHES * len(template)
        for _ in range(200):  # first requests of both clients: connections, caches
            await self.session.fetch_by_offset(LOG_TOPIC, 0, 0, max_records=1)
            await self.unary.fetch_by_offset(LOG_TOPIC, 0, 0, max_records=1)

    async def close(self) -> None:
        await self.session.close()
        await self.unary.close()

    async def _in_flight(self, meter: Meter, topic: str, batch: bytes, requests: int) -> float:
        queue = iter(range(requests))

        async def sender() -> None:
            for _ in queue:
                await self.unary.produce(topic, 0, record_batches=batch)

        with meter:
            await asyncio.gather(*(sender() for _ in range(self.args.in_flight)))
        return meter.wall_s

    async def produce_mib(self, meter: Meter) -> dict[str, float]:
        requests = self.args.produce_mib
        wall_s = await self._in_flight(meter, "produce", self.mib_batch, requests)
        mib = requests * len(self.mib_batch) / MIB
        return {"MB/s": mib * MIB / 1e6 / wall_s, "server CPU ms/MiB": meter.server_cpu_s
                * 1e3 / mib}

    async def produce_zstd(self, meter: Meter) -> dict[str, float]:
        requests = self.args.zstd_requests
        wall_s = await self._in_flight(meter, "produce-zstd", self.zstd_batch, requests)
        mib = requests * self.zstd_bytes / MIB
        return {"MB/s": mib * MIB / 1e6 / wall_s, "server CPU ms/MiB": meter.server_cpu_s
                * 1e3 / mib}

    async def consume_fetch(self, meter: Meter) -> dict[str, float]:
        offset = 0
        end = LOG_BATCHES * 100
        with meter:
            while offset < end:
                result = await self.unary.fetch_by_offset(
                    LOG_TOPIC, 0, offset, max_bytes=MIB, fetch_format=FetchFormat.RECORD_BATCHES)
                offset = result.next_offset
        mib = self.log_bytes / MIB
        return {"MB/s": self.log_bytes / 1e6 / meter.wall_s,
                "server CPU ms/MiB": meter.server_cpu_s * 1e3 / mib}

    async def consume_subscribe(self, meter: Meter) -> dict[str, float]:
        end = LOG_BATCHES * 100
        stream = self.session.subscribe(LOG_TOPIC, 0, offset=0, max_bytes=MIB,
                                        fetch_format=FetchFormat.RECORD_BATCHES)
        with meter:
            try:
                async for result in stream:
                    if result.next_offset >= end:
                        break
            finally:
                await stream.aclose()  # type: ignore[attr-defined]
        mib = self.log_bytes / MIB
        return {"MB/s": self.log_bytes / 1e6 / meter.wall_s,
                "server CPU ms/MiB": meter.server_cpu_s * 1e3 / mib}

    async def _one_by_one(self, meter: Meter, call: Callable[[int], Awaitable[object]],
                          round_index: int) -> dict[str, float]:
        rng = random.Random(round_index)
        offsets = [rng.randrange(LOG_BATCHES * 100) for _ in range(self.args.calls)]
        figures = (await timed_one_by_one(meter, call, offsets)).figures()
        return {"p50 us": figures["p50_us"], "p99 us": figures["p99_us"],
                "server CPU us/call": figures["server_cpu_us"]}

    async def point_read_unary(self, meter: Meter, round_index: int) -> dict[str, float]:
        async def read(offset: int) -> None:
            await self.unary.fetch_by_offset(LOG_TOPIC, 0, offset, max_records=1)

        return await self._one_by_one(meter, read, round_index)

    async def point_read_session(self, meter: Meter, round_index: int) -> dict[str, float]:
        async def read(offset: int) -> None:
            await self.session.fetch_by_offset(LOG_TOPIC, 0, offset, max_records=1)

        return await self._one_by_one(meter, read, round_index)

    async def produce_one_session(self, meter: Meter, round_index: int) -> dict[str, float]:
        value = b"v" * VALUE_BYTES

        async def send(_: int) -> None:
            await self.session.produce("produce-one", 0, [value])

        return await self._one_by_one(meter, send, round_index)


# (row, Workloads method, takes the round's index, the figure that says better by being higher)
ROWS = (
    ("produce 1 MiB", "produce_mib", False),
    ("produce zstd", "produce_zstd", False),
    ("consume fetch", "consume_fetch", False),
    ("consume Subscribe", "consume_subscribe", False),
    ("point read unary", "point_read_unary", True),
    ("point read Session", "point_read_session", True),
    ("produce 1 rec Session", "produce_one_session", True),
)


async def measure(servers: list[Running], args: argparse.Namespace
                  ) -> dict[tuple[str, str], list[dict[str, float]]]:
    """Every row on every server, ``args.rounds`` times; figures by (row, server name)."""
    workloads = {server.name: Workloads(server.target, args) for server in servers}
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for server in servers:
            await workloads[server.name].open()
        names = [server.name for server in servers]
        by_name = {server.name: server for server in servers}
        for round_index in range(args.rounds):
            for row, method, takes_round in ROWS:
                for name in rotation(names, round_index + len(row)):
                    call = getattr(workloads[name], method)
                    meter = by_name[name].meter
                    measured = await (call(meter, round_index) if takes_round else call(meter))
                    figures.setdefault((row, name), []).append(measured)
            print(f"# round {round_index + 1}/{args.rounds} done", flush=True)
    finally:
        for workload in workloads.values():
            await workload.close()
    return figures


def median_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """The median of ``values`` and an approximately 95% confidence interval for it that
    assumes nothing about their distribution: the order statistics at ranks n/2 -+ 1.96 *
    sqrt(n)/2 (each value falls below the true median with probability 1/2, so the count that
    does is binomial(n, 1/2), whose standard deviation is sqrt(n)/2). With few values the
    interval is their whole range. Raises ValueError when ``values`` is empty.

    Why this and not a mean and standard deviation: on the shared machine a round now and then
    takes several times as long as the others (the ratios of one run went from 0.06 to 8), and
    such rounds would swamp a mean; they move an order statistic by one rank.
    """
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    n = len(ordered)
    half_width = 0.98 * math.sqrt(n)  # 1.96 * sqrt(n) / 2
    low = max(0, math.floor(n / 2 - half_width))
    high = min(n - 1, math.ceil(n / 2 + half_width) - 1)
    return statistics.median(ordered), ordered[low], ordered[high]


def report(figures: dict[tuple[str, str], list[dict[str, float]]], names: list[str]) -> None:
    """Medians per server, then defaults / each other server: the median of the per-round
    ratios and its 95% interval (:func:`median_interval`)."""
    others = [name for name in names if name != "defaults"]
    print(f"{'workload':<24}{'figure':<20}" + "".join(f"{name:>12}" for name in names)
          + "".join(f"{'defaults/' + name:>28}" for name in others))
    for row, _, _ in ROWS:
        for key in figures[(row, names[0])][0]:
            cells = "".join(
                f"{statistics.median(f[key] for f in figures[(row, name)]):>12,.2f}"
                for name in names)
            ratios = ""
            for other in others:
                median, low, high = median_interval([
                    mine[key] / theirs[key] for mine, theirs in
                    zip(figures[(row, "defaults")], figures[(row, other)], strict=True)])
                ratios += f"{median:>12.3f} ({low:.2f}-{high:.2f})"
            print(f"{row:<24}{key:<20}{cells}{ratios}")
    print("(MB/s: higher is better; latency and CPU: lower is better)")


def server_argv(python: str, data_dir: Path, flags: tuple[str, ...]) -> list[str]:
    return [python, "-m", "stratalog.server", "--listen", "127.0.0.1:0", "--log-dirs",
            str(data_dir), "--metrics-port", "0", "--logging-level", "WARNING", *flags]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path,
                        help="a checkout of the code before issue 24, with its own .venv")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--produce-mib", type=int, default=48,
                        help="1 MiB Produce calls per turn")
    parser.add_argument("--zstd-requests", type=int, default=48,
                        help="zstd Produce calls (~1 MiB decompressed each) per turn")
    parser.add_argument("--calls", type=int, default=500,
                        help="calls per turn of the one-at-a-time workloads")
    args = parser.parse_args(argv)
    variants = [Variant("defaults", sys.executable), Variant("off", sys.executable, OFF_FLAGS)]
    if args.before is not None:
        python = args.before.resolve() / ".venv" / "bin" / "python"
        if not python.exists():
            parser.error(f"{python} does not exist: make the checkout's .venv first")
        variants.insert(0, Variant("before", str(python)))
    import uvloop

    print(f"# bench_limits: {args.rounds} rounds, python {platform.python_version()}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; "
          f"servers: {', '.join(v.name for v in variants)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="stratalog-bench-limits-") as work, \
            contextlib.ExitStack() as stack:
        servers = []
        for variant in variants:
            data_dir = Path(work, variant.name)
            data_dir.mkdir()
            process, match = stack.enter_context(server_process(
                server_argv(variant.python, data_dir, variant.flags), READY,
                Path(work, f"{variant.name}.log")))
            servers.append(Running(variant.name, match.group(1),
                                   Meter(ServerCpu(process.pid))))
        figures = uvloop.run(measure(servers, args))
    print(f"# load average {os.getloadavg()[0]:.1f} at the end")
    report(figures, [v.name for v in variants])
    return 0


if __name__ == "__main__":
    sys.exit(main())
