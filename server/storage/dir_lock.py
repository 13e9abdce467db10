"""The ``.lock`` of a log directory: one process at a time owns a directory.

Two servers appending to the same partition files would interleave batches and corrupt the log,
so a server locks each of its log directories before reading anything in it and keeps the lock
until it exits. A second server on the same directory fails at once with a message naming the
directory and, when it can be found, the process that holds it.

The lock is an advisory lock on the file ``<dir>/.lock`` (Kafka's ``LogManager.LockFileName``),
taken two ways at once, both non-blocking:

* ``flock(LOCK_EX)``: belongs to the open file, so a second open, even in the same process,
  conflicts. The holder writes its pid into the file (``"<pid>\\n"``) for the error message of
  the next one; the file is otherwise empty, as Kafka leaves it.
* a POSIX record lock (``fcntl``/``lockf``) over the whole file: that is the lock Java's
  ``FileChannel.tryLock`` takes on Linux, and so the one a Kafka broker holds. Taking it too
  makes stratalog and Kafka exclude each other on a shared directory. POSIX locks belong to the
  process, not the open file, and closing ANY descriptor of the file drops them all; so this
  module never opens the lock file of a directory this process already holds: a process-wide
  registry answers that case before any open.

Crash behaviour: the kernel drops both locks when the holder dies (even by SIGKILL), so a crash
never leaves a directory locked; the stale pid left in the file is overwritten by the next
holder. The lock is advisory: it keeps out processes that ask (stratalog, Kafka), nothing else.
Deleting ``.lock`` while it is held defeats it, as in Kafka.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import sys
import threading
from pathlib import Path
from types import TracebackType

from .errors import LogDirLockedError, StorageIOError

__all__ = ["LOCK_FILE", "LogDirLock"]

LOCK_FILE = ".lock"

_log = logging.getLogger(__name__)

# Identity (st_dev, st_ino) of every lock file this process holds -> the directory it was
# locked under. Guarded by _registry_mutex, which also serialises acquire and release.
_held: dict[tuple[int, int], Path] = {}
_registry_mutex = threading.Lock()

# Longest pid text we read back from a lock file ("4194304\n" is the Linux maximum).
_PID_TEXT_BYTES_MAX = 32


def _pid_from_file(fd: int) -> int | None:
    try:
        text = os.pread(fd, _PID_TEXT_BYTES_MAX, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and text.isascii() else None


def _posix_lock_holder_pid(fd: int) -> int | None:
    """The pid holding a conflicting POSIX lock on ``fd``'s file (F_GETLK), where we can tell.

    Uses Linux's 64-bit ``struct flock`` layout (short type, short whence, off_t start,
    off_t len, pid_t pid); elsewhere the pid stays unknown.
    """
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return None
    layout = struct.Struct("@hhqqi")
    request = layout.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0).ljust(32, b"\0")
    try:
        reply = fcntl.fcntl(fd, fcntl.F_GETLK, request)
    except OSError:
        return None
    lock_type, _, _, _, pid = layout.unpack(reply[: layout.size])
    return pid if lock_type != fcntl.F_UNLCK and pid > 0 else None


class LogDirLock:
    """An exclusive lock on one log directory, held from :meth:`acquire` until :meth:`release`.

    Holds the open descriptor of ``<directory>/.lock`` with both the flock and the POSIX lock.
    Invariant: while ``held``, this process is the only one (and this object the only one in
    the process) holding ``directory``.

    Crash behaviour: the kernel releases both locks when the process dies.

    Concurrency: ``acquire`` and ``release`` are thread-safe. A forked child shares the flock
    of its parent until it closes the descriptor (the descriptor is close-on-exec, so a child
    that execs does not keep it).
    """

    def __init__(self, directory: Path, path: Path, fd: int, key: tuple[int, int]) -> None:
        # Use LogDirLock.acquire; this only records an already-locked descriptor.
        self.directory = directory
        self.path = path
        self._fd: int | None = fd
        self._key = key

    @classmethod
    def acquire(cls, directory: Path) -> LogDirLock:
        """Lock ``directory`` (which must exist) or fail at once; never waits.

        Creates ``.lock`` if missing, then writes this process's pid into it.

        Raises:
            LogDirLockedError: another process, or another ``LogDirLock`` in this process, holds
                the directory; the message names the directory and, if known, the holder's pid.
            StorageIOError: the lock file cannot be opened or locked for another reason.
        """
        directory = Path(directory)
        path = directory / LOCK_FILE
        with _registry_mutex:
            # Checked before opening: opening and closing the file here would drop the POSIX
            # lock that this process already holds on it.
            try:
                st = os.stat(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise StorageIOError(f"cannot stat lock file {path}: {e}") from e
            else:
                holder = _held.get((st.st_dev, st.st_ino))
                if holder is not None:
                    raise LogDirLockedError(
                        f"log directory {directory} is already locked by this process "
                        f"(pid {os.getpid()}, through {holder}): a log directory may be open "
                        "only once"
                    )
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise StorageIOError(f"cannot open lock file {path}: {e}") from e
            try:
                key = cls._lock_fd(fd, directory, path)
            except BaseException:
                os.close(fd)
                raise
            _held[key] = directory
        lock = cls(directory, path, fd, key)
        lock._write_pid()
        return lock

    @staticmethod
    def _lock_fd(fd: int, directory: Path, path: Path) -> tuple[int, int]:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StorageIOError(f"cannot lock {path}: {e}") from e
            raise _locked_error(directory, _pid_from_file(fd)) from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            fcntl.flock(fd, fcntl.LOCK_UN)
            if e.errno not in (errno.EACCES, errno.EAGAIN):
                raise StorageIOError(f"cannot lock {path}: {e}") from e
            raise _locked_error(directory, _posix_lock_holder_pid(fd), posix=True) from None
        st = os.fstat(fd)
        return (st.st_dev, st.st_ino)

    def _write_pid(self) -> None:
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as e:
            # The pid only improves the next contender's message; the lock holds regardless.
            _log.warning("could not write the pid into %s: %s", self.path, e)

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock."""
        return self._fd is not None

    def release(self) -> None:
        """Give the directory up. Idempotent: a second call does nothing."""
        with _registry_mutex:
            fd = self._fd
            if fd is None:
                return
            self._fd = None
            _held.pop(self._key, None)
            try:
                # Leave no pid behind: a later contender must not blame a process that has gone.
                os.ftruncate(fd, 0)
            except OSError as e:
                _log.warning("could not clear the pid in %s: %s", self.path, e)
            finally:
                # Closing the only descriptor drops the flock and the POSIX lock together.
                os.close(fd)

    close = release

    def __enter__(self) -> LogDirLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else "released"
        return f"LogDirLock({str(self.directory)!r}, {state})"


def _locked_error(directory: Path, pid: int | None, *, posix: bool = False) -> LogDirLockedError:
    holder = f"process {pid}" if pid is not None else "another process"
    who = "a Kafka broker or another stratalog server" if posix else "another stratalog server"
    return LogDirLockedError(
        f"log directory {directory} is locked by {holder}: {directory / LOCK_FILE} is held, "
        f"probably by {who} using this directory; stop it or choose another directory"
    )
