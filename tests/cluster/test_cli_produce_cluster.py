"""`stratalog produce` against a one-member cluster (etcd and a server on 127.0.0.1, issue 25):
cluster mode refuses transactional ids, and the command says so once, before any line is
read, without claiming a transaction was open."""

from __future__ import annotations

import os
import subprocess
import sys

from stratalog.client import SyncClient

from .conftest import metadata, wait_for

CLI = [sys.executable, "-m", "stratalog.cli"]


def test_transactional_id_refused_in_cluster_mode_is_said_once(start_member) -> None:
    server = start_member(1)
    wait_for(lambda: len(metadata(server).brokers) == 1, "the broker registered")
    with SyncClient(server.target) as client:
        client.create_topic("cli-cluster-txn", 1)
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    result = subprocess.run(
        [*CLI, "produce", "cli-cluster-txn", "--transactional-id", "loader",
         "--target", server.target],
        input=b"a\n", capture_output=True, timeout=60, env=env,
    )
    assert result.returncode == 1
    lines = result.stderr.decode().splitlines()
    # It used to print three lines, the last "its open transaction is aborted by the server".
    assert len(lines) == 1, lines
    assert lines[0].startswith("stratalog produce: --transactional-id loader: the server "
                               "refuses it: "), lines
    assert "cluster mode" in lines[0] and lines[0].endswith("[INVALID_REQUEST]"), lines
    assert "aborted" not in lines[0]
    # Nothing was sent; an idempotent producer (no transactional id) works.
    plain = subprocess.run([*CLI, "produce", "cli-cluster-txn", "--target", server.target],
                           input=b"a\n", capture_output=True, timeout=60, env=env)
    assert plain.returncode == 0, plain.stderr
    assert b"produced 1 records to cli-cluster-txn" in plain.stderr
