"""The .lock of a log directory: exclusive across processes, within a process, and with Kafka."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from stratalog.server.storage.dir_lock import LOCK_FILE, LogDirLock
from stratalog.server.storage.errors import LogDirLockedError, StorageIOError

# A child that takes the lock through our API and reports how it went. A child that fails must
# fail fast: communicate() below has a timeout, and a lock attempt that blocked would hit it.
ACQUIRE_CHILD = textwrap.dedent(
    """
    import sys
    from stratalog.server.storage.dir_lock import LogDirLock
    from stratalog.server.storage.errors import LogDirLockedError
    try:
        lock = LogDirLock.acquire(sys.argv[1])
    except LogDirLockedError as e:
        print("LOCKED", e)
        sys.exit(3)
    print("ACQUIRED", flush=True)
    sys.stdin.readline()  # hold the lock until told to stop
    lock.release()
    """
)

CHILD_TIMEOUT_S = 60


def run_child(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ACQUIRE_CHILD, str(directory)],
        input="",
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )


def start_holding_child(directory: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", ACQUIRE_CHILD, str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ACQUIRED"
    return child


def stop_child(child: subprocess.Popen[str]) -> None:
    child.communicate("\n", timeout=CHILD_TIMEOUT_S)


def test_acquire_creates_the_lock_file_with_our_pid(tmp_path: Path) -> None:
    with LogDirLock.acquire(tmp_path) as lock:
        assert lock.held
        assert lock.path == tmp_path / LOCK_FILE
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    assert not lock.held
    # Released: the pid is cleared so no later contender blames this process.
    assert (tmp_path / LOCK_FILE).read_bytes() == b""


def test_second_acquire_in_the_same_process_fails_fast(tmp_path: Path) -> None:
    first = LogDirLock.acquire(tmp_path)
    try:
        with pytest.raises(LogDirLockedError) as info:
            LogDirLock.acquire(tmp_path)
        message = str(info.value)
        assert str(tmp_path) in message
        assert str(os.getpid()) in message
        # The failed attempt must not have disturbed the first lock (closing a descriptor of the
        # file would drop this process's POSIX lock): a child still cannot get in.
        result = run_child(tmp_path)
        assert result.returncode == 3, result.stdout + result.stderr
    finally:
        first.release()


def test_same_directory_by_another_path_is_the_same_lock(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with LogDirLock.acquire(real), pytest.raises(LogDirLockedError):
        LogDirLock.acquire(link)


def test_release_then_acquire_again(tmp_path: Path) -> None:
    lock = LogDirLock.acquire(tmp_path)
    lock.release()
    lock.release()  # idempotent
    again = LogDirLock.acquire(tmp_path)
    assert again.held
    again.close()


def test_other_directories_are_independent(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with LogDirLock.acquire(tmp_path / "a"), LogDirLock.acquire(tmp_path / "b") as b:
        assert b.held


def test_child_process_fails_fast_with_directory_and_pid(tmp_path: Path) -> None:
    with LogDirLock.acquire(tmp_path):
        result = run_child(tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout.startswith("LOCKED")
    assert str(tmp_path) in result.stdout
    assert f"process {os.getpid()}" in result.stdout


def test_child_gets_the_lock_after_release(tmp_path: Path) -> None:
    lock = LogDirLock.acquire(tmp_path)
    lock.release()
    result = run_child(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_we_fail_fast_while_a_child_holds_it(tmp_path: Path) -> None:
    child = start_holding_child(tmp_path)
    try:
        with pytest.raises(LogDirLockedError) as info:
            LogDirLock.acquire(tmp_path)
        assert f"process {child.pid}" in str(info.value)
        assert str(tmp_path) in str(info.value)
    finally:
        stop_child(child)
    # The child released it on exit.
    with LogDirLock.acquire(tmp_path) as lock:
        assert lock.held


def test_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    child = start_holding_child(tmp_path)
    child.kill()
    child.wait(timeout=CHILD_TIMEOUT_S)
    assert child.stdout is not None
    child.stdout.close()
    assert child.stdin is not None
    child.stdin.close()
    # The kernel dropped the lock with the process; its stale pid in the file is overwritten.
    with LogDirLock.acquire(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_posix_record_lock_holder_is_refused_with_its_pid(tmp_path: Path) -> None:
    # Java's FileChannel.tryLock, and so a Kafka broker, takes an fcntl record lock; a child
    # taking one the same way stands in for Kafka here (the Java test below uses Java itself).
    script = textwrap.dedent(
        """
        import fcntl, os, sys
        fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("HELD", flush=True)
        sys.stdin.readline()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / LOCK_FILE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "HELD"
        with pytest.raises(LogDirLockedError) as info:
            LogDirLock.acquire(tmp_path)
        assert f"process {child.pid}" in str(info.value)
        assert "Kafka" in str(info.value)
        # The refused attempt gave its flock back: after the holder goes, we get in.
    finally:
        child.communicate("\n", timeout=CHILD_TIMEOUT_S)
    with LogDirLock.acquire(tmp_path) as lock:
        assert lock.held


def test_we_hold_a_posix_record_lock_too(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import fcntl, os, sys
        fd = os.open(sys.argv[1], os.O_RDWR)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print("REFUSED")
        else:
            print("GOT IT")
        """
    )
    with LogDirLock.acquire(tmp_path):
        result = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / LOCK_FILE)],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    assert result.stdout.strip() == "REFUSED", result.stderr


def test_concurrent_acquires_in_threads_let_exactly_one_in(tmp_path: Path) -> None:
    results: list[object] = []
    barrier = threading.Barrier(8)

    def attempt() -> None:
        barrier.wait()
        try:
            results.append(LogDirLock.acquire(tmp_path))
        except LogDirLockedError as e:
            results.append(e)

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    locks = [r for r in results if isinstance(r, LogDirLock)]
    assert len(locks) == 1
    assert sum(isinstance(r, LogDirLockedError) for r in results) == 7
    locks[0].release()


def test_missing_directory_is_a_storage_io_error(tmp_path: Path) -> None:
    with pytest.raises(StorageIOError) as info:
        LogDirLock.acquire(tmp_path / "missing")
    assert str(tmp_path / "missing") in str(info.value)


def test_lock_file_that_is_a_directory_is_a_storage_io_error(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).mkdir()
    with pytest.raises(StorageIOError):
        LogDirLock.acquire(tmp_path)


def test_garbage_in_the_lock_file_gives_no_pid(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_bytes(b"not a pid\xff")
    # Someone else holds a flock but wrote no pid (the file keeps the garbage).
    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(LogDirLockedError) as info:
            LogDirLock.acquire(tmp_path)
        assert "another process" in str(info.value)
    finally:
        os.close(fd)


# --- Kafka's own lock (Java's FileChannel.tryLock), when java is installed -----------------------

JAVA_LOCKER = r"""
import java.io.*;
import java.nio.channels.*;
import java.nio.file.*;

public class Locker {
    public static void main(String[] args) throws Exception {
        // As Kafka's FileLock: open with CREATE, READ, WRITE and tryLock() the whole file.
        FileChannel channel = FileChannel.open(Paths.get(args[0]),
            StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE);
        FileLock lock = channel.tryLock();
        System.out.println(lock == null ? "BUSY" : "LOCKED");
        System.out.flush();
        if (lock != null) new BufferedReader(new InputStreamReader(System.in)).readLine();
    }
}
"""


@pytest.fixture(scope="module")
def java_locker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: no Kafka-lock oracle (the lockf tests cover it)")
    source = tmp_path_factory.mktemp("locker") / "Locker.java"
    source.write_text(JAVA_LOCKER)
    return source


def test_a_kafka_style_java_lock_keeps_us_out(java_locker: Path, tmp_path: Path) -> None:
    child = subprocess.Popen(
        ["java", str(java_locker), str(tmp_path / LOCK_FILE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "LOCKED"
        with pytest.raises(LogDirLockedError) as info:
            LogDirLock.acquire(tmp_path)
        assert f"process {child.pid}" in str(info.value)
    finally:
        child.communicate("\n", timeout=CHILD_TIMEOUT_S)


def test_our_lock_keeps_a_kafka_style_java_lock_out(java_locker: Path, tmp_path: Path) -> None:
    with LogDirLock.acquire(tmp_path):
        result = subprocess.run(
            ["java", str(java_locker), str(tmp_path / LOCK_FILE)],
            input="",
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    assert result.stdout.strip() == "BUSY", result.stderr
