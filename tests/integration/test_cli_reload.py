"""The pid file and `stratalog reload` against real servers (issue 25, item 7).

docs/security.md told users to reload with ``kill -HUP $(pidof -s python)``, which signals
whichever Python process comes first. A server started with ``--pid-file`` writes its pid there
and holds the file locked; ``stratalog reload`` signals it only while it holds the lock. These
tests check: the file is written and removed at a clean stop, a reload through it takes effect
(a user added to the credential file gets in), a second server on a live pid file is refused,
a stale file (its server killed) is taken over, and a stale file whose pid now belongs to
another process is never used to signal that process.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stratalog.client import Credentials, SyncClient, TlsConfig
from stratalog.client.errors import AuthenticationError
from stratalog.server.security.credentials import CredentialFile

from .conftest import until

CLI = [sys.executable, "-m", "stratalog.cli"]
# Fewer PBKDF2 iterations than the CLI's default: the tests check the reload, not the cost.
_ITERATIONS = 4096


def reload(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
    environ.update(env or {})
    return subprocess.run([*CLI, "reload", *args], capture_output=True, text=True, timeout=60,
                          env=environ)


def pid_in(path: Path) -> int:
    return int(path.read_text())


def test_reload_through_the_pid_file_makes_a_new_user_get_in(start_server, pki,
                                                                tmp_path: Path) -> None:
    credentials = tmp_path / "credentials.json"
    CredentialFile().with_user("alice", "alice-secret", _ITERATIONS).save(credentials)
    pid_file = tmp_path / "stratalog.pid"
    server = start_server(
        tmp_path / "data", "--pid-file", str(pid_file),
        "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
        "--authentication-credentials-file", str(credentials),
    )
    assert pid_in(pid_file) == server.process.pid
    tls = TlsConfig.from_files(pki.ca)

    def principal(user: str, password: str) -> str | None:
        with SyncClient(server.target, tls=tls, auth=Credentials.password(user, password)) as c:
            try:
                return c.who_am_i().principal
            except AuthenticationError:
                return None

    assert principal("alice", "alice-secret") == "User:alice"
    assert principal("carol", "carol-secret") is None
    CredentialFile.load(credentials).with_user("carol", "carol-secret", _ITERATIONS).save(
        credentials)

    result = reload("--pid-file", str(pid_file))
    assert result.returncode == 0, result.stderr
    assert f"pid {server.process.pid}" in result.stdout
    asyncio.run(until(lambda: principal("carol", "carol-secret") == "User:carol",
                      "carol accepted after stratalog reload", timeout_s=30))
    assert "reloaded the credential file" in server.log_text()

    # The path from the environment, as the Docker image sets it: a second reload, observed in
    # the server's log (the file is unchanged: two users again).
    reloads = server.log_text().count("reloaded the credential file")
    result = reload(env={"STRATALOG_PID_FILE": str(pid_file)})
    assert result.returncode == 0, result.stderr
    asyncio.run(until(lambda: server.log_text().count("reloaded the credential file") > reloads,
                      "a second reload in the server's log", timeout_s=30))

    # A clean stop removes the file; a reload then says no server runs.
    assert server.stop() == 0, server.log_text()[-4000:]
    assert not pid_file.exists()
    result = reload("--pid-file", str(pid_file))
    assert result.returncode == 1
    assert "no server runs" in result.stderr and "does not exist" in result.stderr


def test_a_second_server_on_a_live_pid_file_is_refused(start_server, tmp_path: Path) -> None:
    pid_file = tmp_path / "stratalog.pid"
    first = start_server(tmp_path / "first", "--pid-file", str(pid_file))
    second = subprocess.run(
        [*CLI, "serve", "--log-dirs", str(tmp_path / "second"), "--listen", "127.0.0.1:0",
         "--metrics-port", "-1", "--pid-file", str(pid_file)],
        capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")},
    )
    assert second.returncode == 1
    assert (f"the pid file {pid_file} is held by process {first.process.pid}"
            in second.stderr), second.stderr
    # Refused before anything else: no data directory, and the first server's file intact.
    assert not (tmp_path / "second").exists()
    assert pid_in(pid_file) == first.process.pid
    assert first.process.poll() is None
    assert first.stop() == 0


def test_a_stale_pid_file_is_refused_by_reload_and_taken_over(start_server,
                                                              tmp_path: Path) -> None:
    pid_file = tmp_path / "stratalog.pid"
    killed = start_server(tmp_path / "data", "--pid-file", str(pid_file))
    killed_pid = killed.process.pid
    killed.kill()
    assert pid_in(pid_file) == killed_pid  # SIGKILL: nothing removed it

    result = reload("--pid-file", str(pid_file))
    assert result.returncode == 1
    assert f"names process {killed_pid}" in result.stderr and "stale" in result.stderr

    successor = start_server(tmp_path / "data", "--pid-file", str(pid_file))
    assert pid_in(pid_file) == successor.process.pid
    assert reload("--pid-file", str(pid_file)).returncode == 0
    assert successor.stop() == 0
    assert not pid_file.exists()


def test_a_stale_pid_now_of_another_program_is_not_signalled(tmp_path: Path) -> None:
    """What `kill -HUP $(pidof -s python)` got wrong: the pid in a stale file may belong to
    another program by now (pids are reused); SIGHUP would end it."""
    pid_file = tmp_path / "stratalog.pid"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        pid_file.write_text(f"{other.pid}\n")  # as a killed server whose pid was reused
        result = reload("--pid-file", str(pid_file))
        assert result.returncode == 1
        assert "stale" in result.stderr
        assert other.poll() is None, "reload signalled a process that is not the server"
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize(("args", "env", "code", "words"), [
    ((), {}, 2, "no pid file to find the server by"),
    (("--config", "/nonexistent/stratalog.toml"), {}, 2, "/nonexistent/stratalog.toml"),
])
def test_reload_without_a_pid_file_says_how_to_give_one(args, env, code, words) -> None:
    result = reload(*args, env=env)
    assert result.returncode == code
    assert words in result.stderr


def test_reload_reads_pid_file_from_the_servers_settings_file(tmp_path: Path) -> None:
    pid_file = tmp_path / "from-config.pid"
    config = tmp_path / "stratalog.toml"
    config.write_text(f'pid_file = "{pid_file}"\n')
    result = reload("--config", str(config))
    assert result.returncode == 1
    assert f"the pid file {pid_file}" in result.stderr

