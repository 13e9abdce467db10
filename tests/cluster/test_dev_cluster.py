"""``stratalog dev-cluster`` as a person runs it: etcd and three servers, used, then Ctrl-C
(issue 25 items 3 and 18).

The command runs as a real process in a process group of its own, as in a terminal; Ctrl-C is
a SIGINT to that group. Every port is a free one (``--base-port 0 --etcd-port 0``): the
servers take the default metrics port when it is free and any free one when it is not (a
second server on one machine used to exit there). One cluster serves the module; its last
test stops it and checks the stop (exit 0, every child gone, every server's log ending with
a clean stop); the module's teardown kills whatever a failing test left.

docs/cluster.md's "A local cluster on one machine" runs here as written, against this
cluster: its ``$`` commands with 127.0.0.1:50051 replaced by node 1's address
(tests/doc_blocks.py), its blocks that start the cluster skipped (this module started it).
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stratalog.client import Client, Consumer, Producer
from tests.doc_blocks import PROJECT_ROOT, Reader, blocks

CLUSTER_MD = PROJECT_ROOT / "docs" / "cluster.md"
RECIPE = "## A local cluster on one machine"
#: Start-up bound: etcd, three Python servers and an election on a loaded 2-core machine.
READY_TIMEOUT_S = 120.0
#: Stop bound: the command gives each process 30 s before SIGKILL.
STOP_TIMEOUT_S = 90.0
_NODE = re.compile(
    r"^stratalog dev-cluster: node (\d+) on (\S+) \(pid (\d+)\), Kafka \S+, metrics (\S+) ")


@dataclass
class DevCluster:
    """The running command: its process, what it printed, and its servers' addresses."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    output: str
    targets: dict[int, str]
    pids: dict[int, int]
    metrics: dict[int, str]

    def children(self) -> list[int]:
        """The pids whose parent is the command (etcd and the servers), from /proc."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.process.pid:
                found.append(int(entry.name))
        return found

    def read_until(self, pattern: str, timeout_s: float) -> str:
        """Read the command's stdout until a line matches ``pattern``; that line.
        AssertionError with everything it printed if it exits or stays silent."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                for line in self.output.splitlines():
                    if re.search(pattern, line):
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    raise AssertionError(f"no {pattern!r} within {timeout_s} s:\n{self.output}")
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.process.wait(10)
                    raise AssertionError(f"dev-cluster exited {self.process.returncode}"
                                         f" before {pattern!r}:\n{self.output}")
                self.output += chunk.decode(errors="replace")

    def interrupt(self) -> int:
        """Ctrl-C as a terminal sends it (SIGINT to the process group); the exit code."""
        os.killpg(self.process.pid, signal.SIGINT)
        self.read_until(r"dev-cluster: stopped", STOP_TIMEOUT_S)
        return self.process.wait(STOP_TIMEOUT_S)


def launch(data_dir: Path, *extra: str) -> DevCluster:
    """Start ``stratalog dev-cluster`` on free ports and wait until it says it is ready."""
    process = subprocess.Popen(
        [sys.executable, "-m", "stratalog.cli", "dev-cluster", "--data-dir", str(data_dir),
         "--base-port", "0", "--etcd-port", "0", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")},
    )
    cluster = DevCluster(process, data_dir, "", {}, {}, {})
    try:
        cluster.read_until(r"dev-cluster: ready", READY_TIMEOUT_S)
    except BaseException:
        kill(cluster)
        raise
    for line in cluster.output.splitlines():
        if match := _NODE.match(line):
            node_id = int(match.group(1))
            cluster.targets[node_id] = match.group(2)
            cluster.pids[node_id] = int(match.group(3))
            cluster.metrics[node_id] = match.group(4)
    return cluster


def kill(cluster: DevCluster) -> None:
    """SIGKILL the command's children and the command, if still running (teardown)."""
    if cluster.process.poll() is None:
        for pid in cluster.children():
            os.killpg(pid, signal.SIGKILL)
        cluster.process.kill()
        cluster.process.wait()


@pytest.fixture(scope="module")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    cluster = launch(tmp_path_factory.mktemp("dev-cluster") / "cluster-data")
    yield cluster
    kill(cluster)


async def test_three_servers_replicate_what_a_client_produces(dev_cluster: DevCluster) -> None:
    assert sorted(dev_cluster.targets) == [1, 2, 3]
    assert set(dev_cluster.pids.values()) < set(dev_cluster.children())
    # Four children: etcd and three servers, each in a process group of its own (Ctrl-C in
    # the terminal reaches the command alone, which stops them in order).
    children = dev_cluster.children()
    assert len(children) == 4
    assert all(os.getpgid(pid) == pid for pid in children)
    # No metrics flag was given: three servers on one machine, three metrics ports.
    assert len(set(dev_cluster.metrics.values())) == 3

    targets = ",".join(dev_cluster.targets.values())
    async with Client(targets) as client:
        # No replication factor given: min(3, live brokers) = 3 copies (item 18).
        await client.create_topic("replicated", partitions=2)
        metadata = await client.metadata(["replicated"])
    assert [sorted(p.replicas) for p in metadata.topics["replicated"]] == [[1, 2, 3]] * 2
    sent = [b"record-%03d" % i for i in range(200)]
    async with Producer(targets, linger_ms=0) as producer:  # acks=all by default
        for partition in (0, 1):
            await (await producer.send_many("replicated", sent[partition::2],
                                            partition=partition))
    received: list[bytes] = []
    async with Consumer(dev_cluster.targets[2], "replicated", start="earliest") as consumer:
        async for record in consumer:
            received.append(record.value)
    assert sorted(received) == sorted(sent)


def test_the_docs_local_cluster_recipe_runs_as_written(dev_cluster: DevCluster,
                                                       tmp_path: Path) -> None:
    found = blocks(CLUSTER_MD, RECIPE)
    ran = [block for block in found if block.skip is None and block.language != "text"]
    assert ran, f"no block of {RECIPE!r} in {CLUSTER_MD} runs"
    reader = Reader.prepare(tmp_path / "reader", dev_cluster.targets[1])
    for block in found:
        reader.run(block)


def test_ctrl_c_stops_the_servers_then_etcd_cleanly(dev_cluster: DevCluster) -> None:
    children = dev_cluster.children()
    assert len(children) == 4
    assert dev_cluster.interrupt() == 0, dev_cluster.output
    assert "stopped cleanly" in dev_cluster.output
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    for node_id in (1, 2, 3):
        log = (dev_cluster.data_dir / f"node-{node_id}.log").read_text()
        # Each revoked its lease while etcd still answered, and closed its logs.
        assert "stopped cleanly" in log, log[-3000:]
        assert "shutdown was not clean" not in log


def test_a_server_killed_is_reported_and_the_others_keep_serving(tmp_path: Path) -> None:
    cluster = launch(tmp_path / "two", "--servers", "2")
    try:
        # Two live brokers: the default replication factor is 2 (min(3, live)).
        created = subprocess.run(
            [sys.executable, "-m", "stratalog.cli", "--target", cluster.targets[1], "topics",
             "create", "pair"], capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, created.stderr
        assert created.stdout == "Created topic pair with 1 partition(s), replication factor 2.\n"
        # The pid printed is the server's (the launcher exec'd it).
        assert b"--node-id\x002\x00" in Path(f"/proc/{cluster.pids[2]}/cmdline").read_bytes()
        os.kill(cluster.pids[2], signal.SIGKILL)
        line = cluster.read_until(r"node 2 .* exited", 60)
        assert "-9 (SIGKILL)" in line and "the others keep running" in line
        listed = subprocess.run(
            [sys.executable, "-m", "stratalog.cli", "--target", cluster.targets[1], "topics",
             "list"], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and listed.stdout.split() == ["pair"], listed.stderr
        # A process died under it: the stop is clean, the exit code says something failed.
        assert cluster.interrupt() == 1
        assert "stopped cleanly" in (tmp_path / "two" / "node-1.log").read_text()
    finally:
        kill(cluster)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (gone, or a zombie its new parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _wait_gone(pids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(_gone(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running after {timeout_s} s: {pids}"
        time.sleep(0.1)


def test_ctrl_c_before_ready_stops_what_started(tmp_path: Path) -> None:
    # An "etcd" that never becomes healthy holds the command in its start, where Ctrl-C
    # comes for certain before the cluster is ready.
    never_healthy = tmp_path / "etcd"
    never_healthy.write_text("#!/bin/sh\nexec sleep 600\n")
    never_healthy.chmod(0o755)
    process = subprocess.Popen(
        [sys.executable, "-m", "stratalog.cli", "dev-cluster", "--data-dir",
         str(tmp_path / "early"), "--base-port", "0", "--etcd-port", "0",
         "--etcd-binary", str(never_healthy)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")},
    )
    cluster = DevCluster(process, tmp_path / "early", "", {}, {}, {})
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (started := cluster.children()):
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "dev-cluster started no etcd"
            time.sleep(0.1)
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(STOP_TIMEOUT_S) == 130
        _wait_gone(started, 10)
        assert "stopping the servers, then etcd" in process.communicate()[0].decode()
    finally:
        kill(cluster)


def test_a_killed_dev_cluster_leaves_no_server_behind(tmp_path: Path) -> None:
    # PR_SET_PDEATHSIG: each child gets SIGTERM when the command dies (Linux).
    cluster = launch(tmp_path / "orphans", "--servers", "1")
    children = cluster.children()
    assert len(children) == 2
    try:
        cluster.process.kill()
        cluster.process.wait()
        _wait_gone(children, STOP_TIMEOUT_S)
        # The server was told to stop, not killed: it stopped cleanly.
        log = (tmp_path / "orphans" / "node-1.log").read_text()
        assert "SIGTERM: stopping" in log, log[-3000:]
    finally:
        for pid in children:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
