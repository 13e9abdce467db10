"""A live stratalog server and one local[2] SparkSession, shared by every Spark test.

The server runs as ``python -m stratalog.server --listen 127.0.0.1:0`` in its own process (the
approach of tests/integration/conftest.py: the port is read from the line it prints), with
retention off by default (tests use fixed, old timestamps) and checked every 200 ms for the
topics that set one, so that data-loss tests do not wait. The SparkSession is started
once per test session (a JVM takes 6-18 s to start): ``PYSPARK_PYTHON`` is this interpreter, so
Spark's Python workers import the same stratalog and pyarrow, and ``SPARK_LOCAL_IP`` is the
loopback address. Tests use topic names of their own (``topic_name``).

Fixtures: ``server`` (``.target``, ``.data_dir``), ``client`` (a SyncClient), ``spark``
(the session, with the source registered), ``topic_name`` (a fresh name per call).
"""

from __future__ import annotations

import itertools
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import pyspark  # noqa: F401
except ImportError:  # pragma: no cover - the message is the point
    pytest.exit(
        "the Spark tests need the spark extra: .venv/bin/pip install -e '.[dev,spark]'",
        returncode=4,
    )

from stratalog.client import SyncClient

STARTUP_TIMEOUT_S = 60.0
_LISTENING = re.compile(r"^stratalog: listening on (\S+):(\d+)$")
_KAFKA = re.compile(r"^stratalog: kafka on (\S+):(\d+)$")


@dataclass
class ServerProcess:
    """The server process of the Spark tests."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path
    port: int
    kafka_port: int

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def kafka_bootstrap(self) -> str:
        """The server's Kafka listener (issue 28: records Kafka clients wrote, read by Spark)."""
        return f"127.0.0.1:{self.kafka_port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _launch(data_dir: Path, *extra_args: str) -> ServerProcess:
    log_path = data_dir.parent / "server.log"
    args = [
        sys.executable, "-m", "stratalog.server",
        "--listen", "127.0.0.1:0", "--metrics-port", "-1", "--kafka-listen", "127.0.0.1:0",
        "--log-dirs", str(data_dir), *extra_args,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
    with log_path.open("a") as log_file:
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log_file, env=env)
    assert process.stdout is not None
    fd = process.stdout.fileno()
    pending = b""
    port: int | None = None
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            while b"\n" in pending:
                raw, pending = pending.split(b"\n", 1)
                line = raw.decode(errors="replace").strip()
                if match := _LISTENING.match(line):
                    port = int(match.group(2))
                elif (match := _KAFKA.match(line)) and port is not None:
                    return ServerProcess(process, data_dir, log_path, port,
                                         int(match.group(2)))
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                process.kill()
                process.wait()
                raise AssertionError(f"server printed no port; log:\n{log_path.read_text()}")
            chunk = os.read(fd, 4096)
            if not chunk:
                code = process.wait()
                raise AssertionError(f"server exited {code}; log:\n{log_path.read_text()}")
            pending += chunk


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("spark-server") / "data"
    process = _launch(
        data_dir,
        "--maintenance-interval-ms", "100",
        "--set", "log.retention.check.interval.ms=200",
        # Tests write records with fixed, old timestamps; only the data-loss test's topic
        # sets a retention of its own.
        "--set", "log.retention.ms=-1",
    )
    yield process
    process.process.send_signal(signal.SIGTERM)
    try:
        code = process.process.wait(30)
    except subprocess.TimeoutExpired:
        process.process.kill()
        process.process.wait()
        raise AssertionError("server did not stop on SIGTERM") from None
    assert code == 0, f"server exited {code}; log:\n{process.log_text()[-4000:]}"


@pytest.fixture(scope="session")
def client(server: ServerProcess) -> Iterator[SyncClient]:
    with SyncClient(server.target) as sync_client:
        sync_client.wait_ready(STARTUP_TIMEOUT_S)
        yield sync_client


_names = itertools.count()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``topic_name("suffix")``: a topic name no other test uses."""
    base = re.sub(r"[^a-zA-Z0-9]+", "-", request.node.name)[:80].strip("-")

    def make(suffix: str = "t") -> str:
        return f"{base}-{suffix}-{next(_names)}"

    return make


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from stratalog.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("stratalog-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
