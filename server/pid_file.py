"""The pid file: where ``stratalog reload`` (and any supervisor) finds the running server.

A server started with ``pid_file`` set (``--pid-file PATH``, ``STRATALOG_PID_FILE``) writes its
process id there as it starts and removes the file when it stops; ``stratalog reload`` reads
it and sends that process SIGHUP. The file is one line of ASCII digits::

    4242\\n

Whether the server named in the file still runs is never guessed from the pid alone: a pid is
reused after its process exits (in a container the server is always pid 1, so a pid file left
in a volume by the last container names the next one too). The server holds an exclusive
``flock`` on the open file for as long as it runs, and that lock is the proof of life:

* a second server given the same path finds the lock held and refuses to start, naming the
  path and the pid of the server that holds it (:class:`PidFileHeldError`);
* a file nobody holds is stale (its server was killed, or the machine stopped): the next
  server takes it over and writes its own pid;
* ``stratalog reload`` takes a shared lock without waiting: if it gets one, no server holds
  the file, and it says so instead of signalling whatever process now has that pid
  (:class:`NoServerRunningError`).

Kafka has no pid file: its ``bin/kafka-server-stop.sh`` finds brokers with ``ps ax | grep
kafka.Kafka`` and signals every match. docs/server.md, "The pid file", says why we differ.

Crash behaviour: the kernel drops the lock when the process dies, even by SIGKILL, so a crash
leaves a stale file and never a held one. A clean stop, or a start that fails after the pid file
was taken, removes the file (while still holding the lock, so that no other server can be
holding the same path at that moment).

Concurrency: one :class:`PidFile` per process and path; :meth:`PidFile.acquire` and
:meth:`PidFile.release` do blocking file I/O (a few system calls) and are not thread-safe: the
server calls them from its start-up and shutdown path on the event loop's thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
from pathlib import Path

__all__ = [
    "NoServerRunningError",
    "PidFile",
    "PidFileError",
    "PidFileHeldError",
    "signal_server",
]

# The longest pid text read back ("4194304\n" is Linux's maximum pid); a larger file is not ours.
_PID_TEXT_BYTES_MAX = 32
# Attempts to lock the file that is at the path: a server removing its file between our open
# and our lock makes us lock an unlinked file, and we open the path again. Two suffice unless
# servers start and stop on the same path in a tight loop; the bound turns that into an error.
_ACQUIRE_ATTEMPTS_MAX = 8


class PidFileError(Exception):
    """The pid file cannot be used: the message names the path and the reason."""


class PidFileHeldError(PidFileError):
    """Another live server holds the pid file (it has the lock)."""


class NoServerRunningError(PidFileError):
    """No server holds the pid file: it is missing, or stale (its process has exited)."""


def _read_pid(fd: int) -> int | None:
    """The pid written in the file, or None if it holds no pid (empty, or not digits)."""
    try:
        text = os.pread(fd, _PID_TEXT_BYTES_MAX, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and text.isascii() and int(text) > 0 else None


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open at ``fd`` (it was not removed or replaced)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (opened.st_dev, opened.st_ino)


class PidFile:
    """This process's pid file, written and locked from :meth:`acquire` until :meth:`release`.

    Holds the open descriptor of the file with an exclusive ``flock``. Invariant: while
    ``held``, the file at ``path`` is the one locked here and holds this process's pid.
    The descriptor is close-on-exec: a child process that execs does not inherit the lock.
    """

    def __init__(self, path: Path, fd: int) -> None:
        # Use PidFile.acquire; this only records an already-locked descriptor.
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, path: str | os.PathLike[str]) -> PidFile:
        """Lock the pid file at ``path`` (created 0644 if missing; its directory must exist)
        and write this process's pid into it. Never waits.

        A stale file (no process holds its lock) is taken over: its old pid is replaced.

        Raises:
            PidFileHeldError: another process holds the file; the message names its pid.
            PidFileError: the file cannot be opened, locked or written (a missing directory,
                no permission, a path that is a directory ...).
        """
        path = Path(path)
        for _ in range(_ACQUIRE_ATTEMPTS_MAX):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise PidFileError(f"cannot open the pid file {path}: {exc.strerror}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_pid(fd)
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise PidFileError(f"cannot lock the pid file {path}: {exc.strerror}") from exc
                who = f"process {holder}" if holder is not None else "another process"
                raise PidFileHeldError(
                    f"the pid file {path} is held by {who}: another server runs with this"
                    " pid file; stop it (or give this one another --pid-file) first"
                ) from None
            # The holder we waited out may have removed the file between our open and our
            # lock: then we hold an unlinked file, and the path is free (or someone else's).
            if not _same_file(fd, path):
                os.close(fd)
                continue
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
            except OSError as exc:
                os.close(fd)
                raise PidFileError(f"cannot write the pid file {path}: {exc.strerror}") from exc
            return cls(path, fd)
        raise PidFileError(f"the pid file {path} was removed and created again"
                           f" {_ACQUIRE_ATTEMPTS_MAX} times while this server tried to lock it:"
                           " other servers start and stop on the same path")

    @property
    def held(self) -> bool:
        """Whether this object still holds the file."""
        return self._fd is not None

    def release(self) -> None:
        """Remove the file, then drop the lock. Idempotent: a second call does nothing.

        The file is removed while locked: a server starting at the same moment either finds
        it held (and refuses) or opens a new file at the path. A file that is no longer ours
        (removed, or replaced by hand) is left alone.
        """
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if _same_file(fd, self.path):
                with contextlib.suppress(FileNotFoundError):  # gone since the check
                    os.unlink(self.path)
        finally:
            os.close(fd)

    def __repr__(self) -> str:
        return f"PidFile({str(self.path)!r}, {'held' if self.held else 'released'})"


def signal_server(path: str | os.PathLike[str], signum: int = signal.SIGHUP) -> int:
    """Send ``signum`` to the server that holds the pid file at ``path``; its pid.

    The server is alive if and only if it holds the file's lock (a shared lock cannot be had);
    a pid read from a file nobody holds is never signalled: it may belong to another program
    by now.

    Raises:
        NoServerRunningError: the file does not exist, or no process holds it (stale).
        PidFileError: the file cannot be read, holds no pid, or the signal cannot be sent
            (another user's server: EPERM).
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NoServerRunningError(
            f"no server runs with the pid file {path}: the file does not exist (a server"
            " writes it at start when started with --pid-file or STRATALOG_PID_FILE)"
        ) from None
    except OSError as exc:
        raise PidFileError(f"cannot open the pid file {path}: {exc.strerror}") from exc
    try:
        pid = _read_pid(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise PidFileError(f"cannot lock the pid file {path}: {exc.strerror}") from exc
        else:
            named = f"names process {pid}, which" if pid is not None else "names no process and"
            raise NoServerRunningError(
                f"no server runs with the pid file {path}: it {named} holds it no longer (a"
                " stale file, left by a server that was killed; the next server takes it over)"
            )
        if pid is None:
            # Held, but the holder has not written its pid yet (it does right after locking).
            raise PidFileError(f"the pid file {path} is held but holds no pid yet: the server"
                               " is starting; try again")
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            raise NoServerRunningError(
                f"no server runs with the pid file {path}: process {pid} has exited"
            ) from None
        except PermissionError:
            raise PidFileError(
                f"not allowed to signal process {pid} (the server of {path}): it runs as"
                " another user; run this as that user (or root)"
            ) from None
        return pid
    finally:
        os.close(fd)
