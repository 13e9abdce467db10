"""The cost of one request on a Session stream, against unary calls and gRPC's own floor.

Intuition: issue 14 moved the client's Produce, fetches and ListOffsets from unary calls onto one
long-lived bidirectional stream. What a request costs there is gRPC's price for one message each
way on an open stream, plus what stratalog does with it; this harness measures the three side
by side, so that the second can be read against the first:

  echo stream   a 150-byte message written on an open bidirectional stream of an echo server
                (grpc.aio on uvloop, this file's ``--echo-server``: it writes back each message
                it reads, nothing else) and its copy read back: the floor of a request on a
                stream in this stack, with no work done
  session       the default ``Client``: ``list_offsets(topic, 0, LATEST)``; ``fetch_by_offset``
                of one record stored in a batch of its own (RECORD_BATCHES, ``max_bytes=1``:
                the server reads one small batch, so the figure is the request's, not the
                batch size's); ``produce`` of one 100-byte record
  unary         the same calls through ``Client(sessions=False)``: a unary RPC each, as before
                the Session stream

each one at a time (the next sent when the previous answer came), then the fetch from
``--clients`` clients at once, each its own connection (gRPC's local subchannel pool).

Method: both servers are separate processes on 127.0.0.1; the client is this process (uvloop).
Each run measures every row, the three ways taking turns in an order rotated from run to run;
figures are medians over ``--runs`` runs of each run's nearest-rank p50 / p99 and rate. CPU per
request: the client's ``time.process_time()``, the server's from its threads' counters in /proc
(``bench_peers.ServerCpu``), each over the requests.

Run: ``.venv/bin/python -m benchmarks.bench_session [--requests 2000] [--runs 3]
[--clients 16]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import re
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from benchmarks.bench_client import server_argv
from benchmarks.peer_harness import (
    Measurement,
    Meter,
    ServerCpu,
    rotation,
    server_process,
    timed_concurrently,
    timed_one_by_one,
)
from stratalog.client import Client, FetchFormat
from stratalog.records import build_batch

ECHO_METHOD = "/bench.Echo/Stream"
ECHO_MESSAGE = b"x" * 150
RECORDS = 1_000
VALUE = b"v" * 100


async def _serve_echo() -> None:
    async def echo(request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        read, write = context.read, context.write
        while True:
            message = await read()
            if message is grpc.aio.EOF:
                return
            await write(message)

    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(echo)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Echo", {"Stream": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"echo listening on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


class Ways:
    """The three ways of making a request, over the servers of one run."""

    def __init__(self, target: str, echo_target: str) -> None:
        self.session = Client(target)
        self.unary = Client(target, sessions=False)
        self.echo_channel = grpc.aio.insecure_channel(echo_target)
        self.echo_call: Any = None
        self.topic = "bench-session"
        self.produce_topic = "bench-session-produce"

    async def open(self) -> None:
        await self.unary.create_topic(self.topic, 1)
        await self.unary.create_topic(self.produce_topic, 1)
        # One Produce per batch, so that the offset index gets its entries as a Producer's
        # appends would give them (one append of all 1,000 would leave one entry, and every
        # fetch would scan the batches from the first).
        for i in range(RECORDS):
            await self.unary.produce(
                self.topic, 0, record_batches=build_batch([(1_700_000_000_000 + i, None, VALUE, ())]))
        self.echo_call = self.echo_channel.stream_stream(ECHO_METHOD)()

    async def close(self) -> None:
        self.echo_call.cancel()
        await self.echo_channel.close()
        await self.session.close()
        await self.unary.close()

    async def echo(self, _: int) -> None:
        await self.echo_call.write(ECHO_MESSAGE)
        assert await self.echo_call.read() == ECHO_MESSAGE

    async def fetch(self, offset: int, client: Client) -> None:
        result = await client.fetch_by_offset(
            self.topic, 0, offset, max_bytes=1, fetch_format=FetchFormat.RECORD_BATCHES)
        assert result.next_offset == offset + 1, (result.next_offset, offset)

    async def list_offsets(self, _: int, client: Client) -> None:
        assert (await client.list_offsets(self.topic, 0, -1)).offset == RECORDS

    async def produce(self, _: int, client: Client) -> None:
        await client.produce(self.produce_topic, 0, [VALUE])


ROWS = ("echo stream", "list_offsets", "fetch_by_offset", "produce", "concurrent fetches")


async def one_run(ways: Ways, meter: Meter, echo_meter: Meter, requests: int, clients: int,
                  run_index: int) -> dict[tuple[str, str], Measurement]:
    """Every row of one run, the three ways in an order rotated by ``run_index``; ``meter``
    reads the stratalog server's CPU, ``echo_meter`` the echo server's."""
    offsets = [(i * 7919 + run_index) % RECORDS for i in range(requests)]
    out: dict[tuple[str, str], Measurement] = {}
    for way in rotation(["echo", "session", "unary"], run_index):
        if way == "echo":
            out[("echo stream", way)] = await timed_one_by_one(echo_meter, ways.echo, offsets)
            continue
        client = ways.session if way == "session" else ways.unary
        for row, call in (("list_offsets", ways.list_offsets), ("fetch_by_offset", ways.fetch),
                          ("produce", ways.produce)):
            out[(row, way)] = await timed_one_by_one(
                meter, functools.partial(call, client=client), offsets)
        readers = [Client(ways.session.target, sessions=way == "session",
                          options=[("grpc.use_local_subchannel_pool", 1)])
                   for _ in range(clients)]
        try:
            calls: list[Callable[[Any], Awaitable[object]]] = [
                functools.partial(ways.fetch, client=reader) for reader in readers]
            out[("concurrent fetches", way)] = await timed_concurrently(meter, calls, offsets)
        finally:
            for reader in readers:
                await reader.close()
    return out


def _median(values: list[dict[str, float]], key: str) -> float:
    return statistics.median(v[key] for v in values)


async def run(target: str, echo_target: str, server_pid: int, echo_pid: int,
              args: argparse.Namespace) -> None:
    ways = Ways(target, echo_target)
    await ways.open()
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        meter, echo_meter = Meter(ServerCpu(server_pid)), Meter(ServerCpu(echo_pid))
        for _ in range(300):  # both servers' first requests: connections, caches
            await ways.echo(0)
            await ways.list_offsets(0, ways.session)
        for run_index in range(args.runs):
            measured = await one_run(ways, meter, echo_meter, args.requests, args.clients,
                                     run_index)
            for (row, way), measurement in measured.items():
                figures.setdefault((row, way), []).append(measurement.figures())
            print(f"# run {run_index + 1}/{args.runs} done", flush=True)
    finally:
        await ways.close()
    print(f"{'request':<22}{'way':<9}{'p50 µs':>9}{'p99 µs':>9}{'req/s':>10}"
          f"{'client CPU µs':>15}{'server CPU µs':>15}")
    for row in ROWS:
        for way in ("echo", "session", "unary"):
            runs = figures.get((row, way))
            if not runs:
                continue
            print(f"{row:<22}{way:<9}{_median(runs, 'p50_us'):>9,.0f}"
                  f"{_median(runs, 'p99_us'):>9,.0f}{_median(runs, 'rate_per_s'):>10,.0f}"
                  f"{_median(runs, 'client_cpu_us'):>15,.1f}"
                  f"{_median(runs, 'server_cpu_us'):>15,.1f}")
    print()
    print("session / unary (p50, and CPU per request client + server):")
    for row in ROWS[1:]:
        session, unary = figures[(row, "session")], figures[(row, "unary")]
        cpu = (_median(session, "client_cpu_us") + _median(session, "server_cpu_us")) / (
            _median(unary, "client_cpu_us") + _median(unary, "server_cpu_us"))
        print(f"  {row:<22} p50 {_median(session, 'p50_us') / _median(unary, 'p50_us'):.2f}"
              f"  CPU {cpu:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import uvloop

    if args.echo_server:
        uvloop.run(_serve_echo())
        return
    print(f"# bench_session: {args.requests} requests per row, {args.clients} clients, median"
          f" of {args.runs} runs; python {platform.python_version()}, {os.cpu_count()} cores,"
          f" grpcio {grpc.__version__}, uvloop")
    with tempfile.TemporaryDirectory(prefix="stratalog-bench-session-") as work:
        work_dir = Path(work)
        (work_dir / "data").mkdir()
        ready = re.compile(r"listening on (\S+:\d+)")
        with server_process(server_argv(str(work_dir / "data")), ready,
                            work_dir / "stratalog.log") as (server, match), \
                server_process([sys.executable, "-m", "benchmarks.bench_session",
                                "--echo-server"], ready, work_dir / "echo.log") as (
                                    echo, echo_match):
            uvloop.run(run(match.group(1), echo_match.group(1), server.pid, echo.pid, args))


if __name__ == "__main__":
    main()
