"""Where a Kafka request's server time goes: each piece of a Produce round trip and of a point
read timed in this process, and the floor under them, a socket echo's CPU.

Intuition: the server's CPU per request (benchmarks/kafka_wire.py ``--server-pid``, or
bench_peers' server column) is the sum of what the Kafka front end and the serving layer do in
Python and of what the event loop and the kernel do to move the bytes. This script measures
the first part piece by piece, with no socket: the pieces of server/kafka/connection.py's
``_answer`` called on the real serving layer (a ReplicaManager over a LogManager in a
temporary directory, the handlers of server/kafka/apis/), each request a frame as
kafka_wire.py sends it. A handler that finishes without suspending (every request here does)
is stepped as connection.py steps it. The same requests then go whole through a
KafkaConnection's ``data_received``, one at a time from the event loop (uvloop) as a
transport hands them over (framing, the budget, the answer written to a transport that drops
it): the connection's own cost, event loop turns included, is the difference. Then, for the second part, it starts a uvloop echo server
in a process of its own and reports that process's CPU per round trip of a frame the size of
a Produce request: what any server on this event loop spends per request before doing
anything.

Run ``python -m benchmarks.kafka_request_costs [--count N] [--echo-count N]``; figures are
µs of CPU per request (this thread's CPU time: a busy machine's other processes do not count),
medians of ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["echo_server_cpu_us", "piece_costs_us"]

_PIECES = ("header", "body", "context", "handler", "encode", "metric")


class _Transport:
    """What a KafkaConnection asks of its transport, with nothing behind it: the answers are
    dropped, as the kernel would take them; ``answered`` is resolved by each."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else default

    answered: asyncio.Future[None] | None = None

    def writelines(self, pieces: Any) -> None:
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(None)

    def write(self, data: bytes) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _step(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` to its end in one step (as connection.py's data_received does)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the handler suspended: not the request this script measures")


def piece_costs_us(count: int, rng: random.Random) -> dict[str, dict[str, float]]:
    """µs per request of each piece, for ``count`` produce round trips (one record of 100
    bytes, acks=1) then ``count`` point reads (Fetch v12 at a random offset of those)."""
    from benchmarks.kafka_wire import fetch_frame, produce_frame
    from stratalog.records import build_batch
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.client_limits import ClientLimits
    from stratalog.server.kafka.apis.registry import HANDLERS, SERVED_VERSIONS
    from stratalog.server.kafka.codec import decode_body, decode_header, encode_response
    from stratalog.server.kafka.connection import KafkaConnection
    from stratalog.server.kafka.context import ConnectionState, KafkaServices, RequestContext
    from stratalog.server.kafka.listener import KafkaListener
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.security.principal import ANONYMOUS, CallIdentity, current_identity
    from stratalog.server.security.quotas import QuotaConfig, QuotaManager
    from stratalog.server.settings import Settings
    from stratalog.server.settings_schema import Address
    from stratalog.server.storage.log_manager import LogManager

    async def measure() -> dict[str, dict[str, float]]:
        with tempfile.TemporaryDirectory(prefix="kafka-request-costs-") as data_dir:
            log_manager = LogManager.open([Path(data_dir)])
            executor = ThreadPoolExecutor(2)
            settings = Settings()
            metrics = ServerMetrics()
            replicas = ReplicaManager(log_manager, settings, metrics, executor)
            log_manager.create_topic("t", 1)
            services = KafkaServices(
                replicas, log_manager, None, None, settings, metrics,  # type: ignore[arg-type]
                executor, ClientLimits(10, 10, 100), QuotaManager(QuotaConfig()), None,
                advertised=lambda: Address("127.0.0.1", 9092),
                time_ms=lambda: int(time.time() * 1000))
            state = ConnectionState("127.0.0.1:5555", "127.0.0.1",
                                    CallIdentity(ANONYMOUS, "127.0.0.1"))
            histogram = metrics.kafka_request_seconds.labels("Produce")
            produces = [b"".join(produce_frame(i, "kafka-wire", "t", 0, build_batch(
                [(int(time.time() * 1000), None, rng.randbytes(100), ())])))[4:]
                for i in range(count)]
            fetches = [fetch_frame(i, "kafka-wire", "t", 0, rng.randrange(count), 1)[4:]
                       for i in range(count)]
            out = {}
            try:
                for name, frames in (("produce", produces), ("point read", fetches)):
                    # Each piece over every frame in turn, timed in this thread's CPU time
                    # (immune to the other processes of a busy machine).
                    spent = {}
                    clock = time.thread_time
                    t0 = clock()
                    headers = [decode_header(frame, SERVED_VERSIONS) for frame in frames]
                    spent["header"] = clock() - t0
                    t0 = clock()
                    requests = [decode_body(f, h) for f, h in zip(frames, headers, strict=True)]
                    spent["body"] = clock() - t0
                    t0 = clock()
                    contexts = []
                    for header in headers:
                        contexts.append(RequestContext(services, state, header.api_key,
                                                       header.api_version,
                                                       header.client_id or ""))
                        current_identity.set(state.identity)
                    spent["context"] = clock() - t0
                    t0 = clock()
                    responses = [_step(HANDLERS[h.api_key].handler(c, r))
                                 for h, c, r in zip(headers, contexts, requests, strict=True)]
                    spent["handler"] = clock() - t0
                    t0 = clock()
                    for header, response in zip(headers, responses, strict=True):
                        encode_response(header, response)
                    spent["encode"] = clock() - t0
                    t0 = clock()
                    for _ in frames:
                        started = time.perf_counter()
                        histogram.observe(time.perf_counter() - started)
                    spent["metric"] = clock() - t0
                    out[name] = {piece: seconds / count * 1e6
                                 for piece, seconds in spent.items()}
                # The whole of a request in the connection, the socket aside: each frame
                # handed to data_received, its answer to the transport's writelines.
                listener = KafkaListener(services)
                connection = KafkaConnection(listener)
                transport = _Transport()
                connection.connection_made(transport)  # type: ignore[arg-type]
                more = [b"".join(produce_frame(i, "kafka-wire", "t", 0, build_batch(
                    [(int(time.time() * 1000), None, rng.randbytes(100), ())])))
                    for i in range(count)]
                reads = [fetch_frame(i, "kafka-wire", "t", 0, rng.randrange(count), 1)
                         for i in range(count)]
                loop = asyncio.get_running_loop()
                for name, frames in (("produce", more), ("point read", reads)):
                    # Each frame from a callback of the loop, as a transport hands it over,
                    # and the next once the answer is written: the event loop's turns count.
                    started = time.thread_time()
                    for frame in frames:
                        transport.answered = loop.create_future()
                        loop.call_soon(connection.data_received, frame)
                        await transport.answered
                    out[name]["connection"] = (time.thread_time() - started) / count * 1e6
                connection.close()
                connection.connection_lost(None)
            finally:
                replicas.begin_shutdown()
                executor.shutdown()
                log_manager.close()
            return out

    import uvloop

    return uvloop.run(measure())


_ECHO_SERVER = """
import asyncio, sys, uvloop
class Echo(asyncio.Protocol):
    def connection_made(self, transport): self.transport = transport
    def data_received(self, data): self.transport.write(data)
async def main():
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
uvloop.run(main())
"""


def _process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def echo_server_cpu_us(count: int, size_bytes: int) -> tuple[float, float]:
    """The echo server's CPU µs per round trip of ``size_bytes``, and the round trip's p50
    µs, over ``count`` round trips one at a time from a uvloop client in this process."""
    import uvloop

    server = subprocess.Popen([sys.executable, "-c", _ECHO_SERVER], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())

        async def run() -> tuple[float, float]:
            loop = asyncio.get_running_loop()
            answered: list[asyncio.Future[None]] = []

            class Client(asyncio.Protocol):
                received = 0

                def data_received(self, data: bytes) -> None:
                    self.received += len(data)
                    if self.received >= size_bytes:
                        self.received -= size_bytes
                        answered[0].set_result(None)

            transport, _ = await loop.create_connection(Client, "127.0.0.1", port)
            payload = b"x" * size_bytes
            latencies = []
            before = _process_cpu_s(server.pid)
            for _ in range(count):
                answered[:] = [loop.create_future()]
                started = time.perf_counter()
                transport.write(payload)
                await answered[0]
                latencies.append(time.perf_counter() - started)
            cpu_us = (_process_cpu_s(server.pid) - before) / count * 1e6
            transport.close()
            return cpu_us, statistics.median(latencies) * 1e6

        return uvloop.run(run())
    finally:
        server.kill()
        server.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--echo-count", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rng = random.Random(28)
    rounds = [piece_costs_us(args.count, rng) for _ in range(args.rounds)]
    for name in rounds[0]:
        figures = {piece: statistics.median(r[name][piece] for r in rounds)
                   for piece in _PIECES}
        cells = ", ".join(f"{piece} {us:.1f}" for piece, us in figures.items())
        whole = statistics.median(r[name]["connection"] for r in rounds)
        print(f"{name}: {cells}; total {sum(figures.values()):.1f} µs; the whole request"
              f" through KafkaConnection.data_received {whole:.1f} µs")
    echoes = [echo_server_cpu_us(args.echo_count, 150) for _ in range(args.rounds)]
    print(f"uvloop echo of 150 bytes: server CPU {statistics.median(e[0] for e in echoes):.1f}"
          f" µs per round trip, p50 {statistics.median(e[1] for e in echoes):.0f} µs")


if __name__ == "__main__":
    main()

