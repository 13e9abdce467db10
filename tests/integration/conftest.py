"""A real stratalog server process for integration tests, and gRPC channels to it.

The server runs as ``python -m stratalog.server --listen 127.0.0.1:0 --metrics-port 0`` in its own
process, on a data directory under pytest's tmp dir; the ports it bound are read from the two
lines it prints on stdout (docs/configuration.md). Its log (stderr) goes to ``server.log`` beside
the data directory and is printed when a test fails to start a server.

Fixtures:

``server``            one server per test module (tests share it; use topic names of your own)
``server_target``     its ``"127.0.0.1:PORT"``, for ``stratalog.client`` and grpc channels
``stub``              a blocking ``BrokerStub`` on a channel to ``server``, per module
``rpc_error``         ``rpc_error(stub.Method, request)``: the error a failing call gives
``start_server``      a factory for servers of a test's own (restarts, signals, other flags):
                      ``start_server(data_dir, *extra_flags) -> ServerProcess``; every server it
                      started is stopped (SIGKILL if still running) after the test
``bomb_request``      the issue 13 probe's zstd bomb: a Produce of about 1 MiB to topic "bomb"
                      that decompresses to 31 GB

``until(condition, what)`` (a coroutine) and ``wait_until(condition, what)`` (blocking) poll a
condition every 200 ms, bounded: a wait on the server's own counters instead of a sleep. The
usual condition is :meth:`ServerProcess.waiting_rpcs`: a long poll or a Subscribe stream that
reached the server and waits there (a sleep of "long enough" was too short on a loaded machine,
and the test then checked less than it said, or too long everywhere else).

A module-scoped ``server`` is stopped with SIGTERM at the end of its module, and the teardown
fails if it did not exit 0: every test module also checks a clean shutdown.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from stratalog.client.errors import StratalogError, from_rpc_error
from stratalog.records import Compression, build_batch
from stratalog.v1 import broker_pb2, broker_pb2_grpc

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
#: Deadline of one RPC in the tests: generous, it only turns a hang into a failure.
CALL_TIMEOUT_S = 30.0
#: The probe's zstd bomb (issue 13, defect 2): this many copies of one batch ...
BOMB_BATCHES = 498
#: ... of one record of this many zero bytes.
BOMB_RECORD_BYTES = 63 << 20
_LISTENING = re.compile(r"^stratalog: listening on (\S+):(\d+)$")
_METRICS = re.compile(r"^stratalog: metrics on https?://(\S+):(\d+)/metrics$")
_KAFKA = re.compile(r"^stratalog: kafka on (\S+):(\d+)$")


@dataclass
class ServerProcess:
    """A server process started by the fixtures: its ports, data dir and log file."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path
    port: int
    metrics_port: int | None
    args: list[str] = field(default_factory=list)
    kafka_port: int | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def kafka_bootstrap(self) -> str:
        """``"127.0.0.1:PORT"`` of the server's Kafka listener (docs/kafka-protocol.md)."""
        assert self.kafka_port is not None, "started without a Kafka listener"
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def metrics_url(self) -> str:
        assert self.metrics_port is not None, "started with metrics off"
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def metric(self, sample: str) -> float:
        """The value of one sample of the server's /metrics (plain HTTP), named as Prometheus
        prints it (``stratalog_waiting_rpcs{kind="subscribe"}``); 0 when it is absent (a
        counter not yet incremented has no sample)."""
        with urllib.request.urlopen(self.metrics_url, timeout=CALL_TIMEOUT_S) as response:
            text = response.read().decode()
        match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    def waiting_rpcs(self, kind: str) -> float:
        """How many RPCs of ``kind`` wait in the server now, by its gauge
        ``stratalog_waiting_rpcs{kind}`` (docs/server.md): ``"long_poll"`` (a fetch waiting
        for records, unary or on a Session stream; counted from its first wait to its
        answer), ``"subscribe"`` (a Subscribe stream, from when its start offset is resolved
        to its end) or ``"session"`` (a Session stream). The gauge is server-wide: a test on
        the module's shared server waits for it to be back at what it expects first."""
        return self.metric(f'stratalog_waiting_rpcs{{kind="{kind}"}}')

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Send ``signum`` and wait for the exit code (SIGKILL after ``timeout_s``)."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(
                    f"server did not exit within {timeout_s} s of {signal.Signals(signum).name}; "
                    f"log:\n{self.log_text()[-4000:]}"
                ) from None
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    def kill(self) -> int:
        """SIGKILL: the process dies at once, as in a crash."""
        return self.stop(signal.SIGKILL)


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """Wait, polling every 200 ms, until ``condition()`` holds; AssertionError naming ``what``
    after ``timeout_s`` (generous: it only turns a hang into a failure)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.2)


#: Linux's list of the ports it hands out itself (every outgoing connection's local port, every
#: bind to port 0): "LOW HIGH". Elsewhere :data:`_EPHEMERAL_LOW_DEFAULT` stands for its start.
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_EPHEMERAL_LOW_DEFAULT = 32768
#: How many ports below the ephemeral range free_port draws from.
_FREE_PORTS_DRAWN = 10_000
_port_draws = random.SystemRandom()  # not the random module's: a test may seed that


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now, for a process a test starts (and may
    kill and start again) on a port it must know beforehand: etcd, a server restarted in place.

    Drawn at random from the :data:`_FREE_PORTS_DRAWN` ports just below the kernel's
    ephemeral range, and checked by binding it. A port from inside that range (what a bind to
    port 0 gives), let go for the process to bind, may be handed to any process's outgoing
    connection meanwhile, most likely between a kill and the restart, while the parallel
    phase's other workers connect all the time; below the range the kernel never hands it out.
    At random, so that two workers rarely try the same port at once.
    """
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = _EPHEMERAL_LOW_DEFAULT
    first = max(1024, low - _FREE_PORTS_DRAWN)
    for _ in range(100):
        port = _port_draws.randrange(first, low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise AssertionError(f"no free port in {first}-{low - 1} in 100 draws")


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """:func:`until` for a test without an event loop: blocks, polling every 200 ms."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.2)


def launch_server(data_dir: Path, *extra_args: str, log_path: Path | None = None,
                  env: dict[str, str] | None = None,
                  rlimits: dict[int, tuple[int, int]] | None = None,
                  kafka_listen: str | None = "127.0.0.1:0") -> ServerProcess:
    """Start a server on ``data_dir`` and wait until it printed its ports.

    ``kafka_listen``: the Kafka listener's address (a free port by default; None: no flag, the
    server's default ``127.0.0.1:9092``, which gives way to a free port when taken).

    ``rlimits``: ``resource`` limits set in the child before it runs the server, e.g.
    ``{resource.RLIMIT_NOFILE: (1024, 1024)}`` (the server raises the soft limit to the hard one
    at start; SIGXFSZ is ignored in the child, so that RLIMIT_FSIZE makes writes fail with EFBIG
    rather than kill it).

    Raises AssertionError with the server's log if it exits or stays silent for
    :data:`STARTUP_TIMEOUT_S`.
    """
    data_dir = Path(data_dir)
    log_path = log_path or data_dir.parent / f"{data_dir.name}-server.log"
    args = [
        sys.executable, "-m", "stratalog.server",
        "--listen", "127.0.0.1:0",
        "--metrics-port", "0",
        *(("--kafka-listen", kafka_listen) if kafka_listen is not None else ()),
        "--log-dirs", str(data_dir),
        *extra_args,
    ]
    # Append: a restarted server on the same dir keeps the earlier log for a failing test.
    log_file = log_path.open("a")
    process_env = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
    process_env.update(env or {})
    process = subprocess.Popen(
        _with_limits(args, rlimits) if rlimits else args,
        stdout=subprocess.PIPE, stderr=log_file, env=process_env,
    )
    log_file.close()
    port: int | None = None
    metrics_port: int | None = None
    kafka_port: int | None = None
    wants_metrics = True  # argparse takes the last --metrics-port given
    wants_kafka = kafka_listen != ""
    for flag, value in itertools.pairwise(extra_args):
        if flag == "--metrics-port":
            wants_metrics = value != "-1"
        elif flag == "--kafka-listen":
            wants_kafka = bool(value)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    assert process.stdout is not None
    # Raw reads of the pipe, lines split here: a buffered readline could swallow both lines in
    # one read and leave the selector waiting for data that already came.
    fd = process.stdout.fileno()
    pending = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (port is None or (wants_metrics and metrics_port is None)
               or (wants_kafka and kafka_port is None)):
            if b"\n" not in pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    process.kill()
                    process.wait()
                    raise AssertionError(
                        f"server printed no ports within {STARTUP_TIMEOUT_S} s; log:\n"
                        + log_path.read_text(errors="replace")[-4000:]
                    )
                chunk = os.read(fd, 4096)
                if not chunk:
                    code = process.wait()
                    raise AssertionError(
                        f"server exited with {code} before serving; log:\n"
                        + log_path.read_text(errors="replace")[-4000:]
                    )
                pending += chunk
                continue
            raw, pending = pending.split(b"\n", 1)
            line = raw.decode(errors="replace").strip()
            if match := _LISTENING.match(line):
                port = int(match.group(2))
            elif match := _METRICS.match(line):
                metrics_port = int(match.group(2))
            elif match := _KAFKA.match(line):
                kafka_port = int(match.group(2))
    return ServerProcess(process, data_dir, log_path, port, metrics_port, args, kafka_port)


# Sets the limits, then becomes the server. Not a preexec_fn: Python code run between fork and
# exec in this process, whose gRPC threads may hold locks at the fork, could abort the child
# (seen once: exit -6 before the server wrote a line, gRPC "skipping fork() handlers").
_LIMITS_LAUNCHER = (
    "import json, os, resource, signal, sys\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # an ignored signal stays so over exec
    "for limit, values in json.loads(sys.argv[1]):\n"
    "    resource.setrlimit(limit, tuple(values))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def _with_limits(args: list[str], rlimits: dict[int, tuple[int, int]]) -> list[str]:
    limits = json.dumps([[limit, list(values)] for limit, values in rlimits.items()])
    return [sys.executable, "-c", _LIMITS_LAUNCHER, limits, *args]


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def start(data_dir: Path | None = None, *extra_args: str, **kwargs: object) -> ServerProcess:
        directory = data_dir or tmp_path / "data"
        server = launch_server(directory, *extra_args, **kwargs)  # type: ignore[arg-type]
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("server") / "data"
    process = launch_server(data_dir)
    yield process
    code = process.stop(signal.SIGTERM)
    assert code == 0, f"server exited {code} on SIGTERM; log:\n{process.log_text()[-4000:]}"
    assert (data_dir / ".kafka_cleanshutdown").exists(), "no clean-shutdown marker after SIGTERM"


@pytest.fixture(scope="module")
def server_target(server: ServerProcess) -> str:
    return server.target


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.target) as channel:
        grpc.channel_ready_future(channel).result(timeout=STARTUP_TIMEOUT_S)
        yield channel


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> broker_pb2_grpc.BrokerStub:
    return broker_pb2_grpc.BrokerStub(channel)


@pytest.fixture(scope="session")
def rpc_error() -> Callable[..., StratalogError]:
    """``rpc_error(stub.Method, request)``: the call must fail; its error as the client sees it.

    The result is :func:`stratalog.client.errors.from_rpc_error` of the failure: ``code``,
    ``reason`` (the ErrorInfo reason, None without one), ``metadata`` and the message.
    """

    def call(method: Callable[..., object], request: object) -> StratalogError:
        with pytest.raises(grpc.RpcError) as caught:
            result = method(request, timeout=CALL_TIMEOUT_S)
            # A server stream fails when iterated, not when opened.
            if hasattr(result, "__next__"):
                list(result)  # type: ignore[call-overload]
        return from_rpc_error(caught.value)

    return call


@pytest.fixture(scope="session")
def bomb_request() -> broker_pb2.ProduceRequest:
    """The probe's request: 498 copies of one zstd batch holding one record of 63 MiB of zeros
    (31 GB once decompressed), in one request of about 1 MiB, to topic "bomb"."""
    batch = build_batch([(1_700_000_000_000, None, bytes(BOMB_RECORD_BYTES), ())],
                        compression=Compression.ZSTD)
    request = broker_pb2.ProduceRequest(topic="bomb", record_batches=batch * BOMB_BATCHES)
    assert request.ByteSize() < 1_100_000
    return request
