"""server/pid_file.py: written and locked while held, removed at release, a held file refused,
a stale one taken over, and a signal sent only to the process that holds the lock.

flock locks belong to the open file, so two opens in this one process conflict as two processes
would: these tests need no second process (tests/integration/test_cli_reload.py has them).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from stratalog.server.pid_file import (
    NoServerRunningError,
    PidFile,
    PidFileError,
    PidFileHeldError,
    signal_server,
)


def test_acquire_writes_the_pid_and_release_removes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.pid"
    pid_file = PidFile.acquire(path)
    assert pid_file.held
    assert path.read_text() == f"{os.getpid()}\n"
    pid_file.release()
    assert not pid_file.held
    assert not path.exists()
    pid_file.release()  # idempotent


def test_a_held_file_is_refused_naming_its_holder(tmp_path: Path) -> None:
    path = tmp_path / "s.pid"
    pid_file = PidFile.acquire(path)
    try:
        with pytest.raises(PidFileHeldError, match=rf"{path} is held by process {os.getpid()}"):
            PidFile.acquire(path)
        assert path.read_text() == f"{os.getpid()}\n"  # the refusal wrote nothing
    finally:
        pid_file.release()


def test_a_stale_file_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "s.pid"
    path.write_text("4194304\n")  # a server that was killed: nobody holds the lock
    pid_file = PidFile.acquire(path)
    try:
        assert path.read_text() == f"{os.getpid()}\n"
    finally:
        pid_file.release()


def test_release_leaves_a_file_that_is_no_longer_ours(tmp_path: Path) -> None:
    path = tmp_path / "s.pid"
    pid_file = PidFile.acquire(path)
    path.unlink()
    path.write_text("123\n")  # replaced by hand while held
    pid_file.release()
    assert path.read_text() == "123\n"


@pytest.mark.parametrize("where", ["missing/s.pid", "."])
def test_an_unusable_path_is_named(tmp_path: Path, where: str) -> None:
    path = tmp_path / where
    with pytest.raises(PidFileError, match=str(path)):
        PidFile.acquire(path)


def test_signal_server_signals_the_holder_only(tmp_path: Path) -> None:
    path = tmp_path / "s.pid"
    with pytest.raises(NoServerRunningError, match="does not exist"):
        signal_server(path, signal.SIGUSR1)
    path.write_text(f"{os.getpid()}\n")  # our pid, but nobody holds the file: stale
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, _frame: received.append(signum))
    try:
        with pytest.raises(NoServerRunningError, match=rf"names process {os.getpid()}.*stale"):
            signal_server(path, signal.SIGUSR1)
        assert received == []
        pid_file = PidFile.acquire(path)
        try:
            assert signal_server(path, signal.SIGUSR1) == os.getpid()
        finally:
            pid_file.release()
        assert received == [signal.SIGUSR1]  # delivered to the main thread before it returned
    finally:
        signal.signal(signal.SIGUSR1, previous)
