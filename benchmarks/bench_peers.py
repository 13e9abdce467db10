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

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_client import VALUE_SIZE_BYTES, codec_path, make_values
from benchmarks.peer_harness import (
    NATS,
    OURS,
    REDIS,
    REDIS_PERSISTENCE,
    STRATALOG,
    STRATALOG_KAFKA,
    SYSTEM_FLAGS,
    SYSTEMS,
    Server,
    nats_server,
    package_version,
    redis_server,
    rotation,
    stratalog_server,
)
from benchmarks.peer_systems import (
    NatsJetStream,
    RedisStreams,
    RunInputs,
    Stratalog,
    StratalogKafka,
)

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

        loop_name = f"uvloop {package_version('uvloop')}"
    except ImportError:
        uvloop = None
        loop_name = "asyncio"

    print(f"# bench_peers: {args.records:,} records of {VALUE_SIZE_BYTES} bytes in one partition,"
          f" {args.reads:,} reads, {args.round_trips:,} round trips, {args.clients} clients,"
          f" median of {args.runs} runs (systems' order rotated per run)")
    print(f"# python {platform.python_version()}, {os.cpu_count()} cores, {loop_name}, "
          f"stratalog record codec: {codec_path()}, grpcio {package_version('grpcio')}; "
          f"clients: confluent-kafka {package_version('confluent-kafka')}, kafka-python "
          f"{package_version('kafka-python')}, nats-py "
          f"{package_version('nats-py')}, redis-py {package_version('redis')} "
          f"(hiredis {package_version('hiredis')})")
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
            "clients": {p: package_version(p)
                        for p in ("grpcio", "protobuf", "nats-py", "redis", "hiredis",
                                  "confluent-kafka", "kafka-python")},
            "medians": results,
            "runs": figures,
        }, indent=1))
        print(f"# figures written to {args.json}")


if __name__ == "__main__":
    main()
