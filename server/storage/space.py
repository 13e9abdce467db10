"""Disk blocks for a large append, allocated in one call before it is written.

Why: on ext4 (delayed allocation) a buffered write reserves and tracks space page by page; a
range allocated first with ``fallocate(FALLOC_FL_KEEP_SIZE)`` takes one extent allocation instead
of 256 page reservations per MiB, which makes a large ``pwrite`` cheaper in CPU (measured with a
bare write loop: docs/server.md, "Where appends run"). RocksDB allocates its
files' space the same way (``fallocate_with_keep_size``). Kafka does not: its ``preallocate``
option sizes the whole segment file instead, which this does not change.

``FALLOC_FL_KEEP_SIZE`` leaves the file's length alone: the ``.log`` is exactly its batches at
every moment, so readers, recovery and Kafka's tools see what they would without it. Only the
range about to be written is allocated, never more, so nothing is reserved past the data except
between the call and the write. Crash behaviour: a crash in that window leaves at most one
append's blocks allocated past the end of the file, invisible to reads; recovery of the segment
cuts the file to its valid length, which frees them.

Where the call is missing (not Linux, no ``fallocate`` in the C library) or the file system
does not support it (``EOPNOTSUPP``), :func:`allocate` says so and the caller stops asking; a
full disk or any other failure is left to the write that follows, which reports it.

Preallocation (``preallocate=true``) sizes a new segment's file to ``segment.bytes`` with
``posix_fallocate``, which reserves real blocks (Kafka's ``RandomAccessFile.setLength`` makes a
sparse file, which reserves nothing). :func:`check_free_space` refuses one whose blocks the
file system has not got, before anything is created: 20 partitions of 1 GiB segments are 21 GB
at once.

Concurrency: plain system calls (ctypes releases the GIL for fallocate).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .errors import InsufficientSpaceError, StorageIOError

#: Appends smaller than this are written without the extra call: page reservations of a small
#: write cost less than a system call.
ALLOCATE_MIN_BYTES = 64 * 1024

_FALLOC_FL_KEEP_SIZE = 0x01
_UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


def _load_fallocate() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    function.restype = ctypes.c_int
    return function


_fallocate = _load_fallocate()


def allocate(fd: int, offset: int, length: int) -> bool:
    """Allocate the blocks of ``[offset, offset + length)`` of ``fd``; its size stays as it is.

    Returns False when this platform or file system cannot do it (ask no more for this file),
    True otherwise, including when the call failed for another reason (a full disk): the write
    that follows meets the same condition and reports it.
    """
    if _fallocate is None or length <= 0:
        return False
    if _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    return ctypes.get_errno() not in _UNSUPPORTED


def reserve(fd: int, offset: int, length: int) -> bool:
    """Allocate the blocks of ``[offset, offset + length)`` of ``fd`` before a mapped index
    writes into them. A write through a map into a hole that the file system cannot fill (a
    full disk) is not an error but SIGBUS, which kills the process: reserved first, a full
    disk is an OSError here instead.

    Returns False when this platform or file system cannot allocate (ask no more for this
    file), True once allocated.

    Raises:
        OSError: the allocation failed (ENOSPC, EDQUOT, EIO ...).
    """
    if _fallocate is None or length <= 0:
        return False
    if _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code))


def free_bytes(directory: Path | str) -> int:
    """Bytes an unprivileged process may still allocate in ``directory``'s file system.

    Raises:
        StorageIOError: ``statvfs`` failed.
    """
    try:
        stats = os.statvfs(directory)
    except OSError as exc:
        raise StorageIOError(f"cannot read the free space of {directory}: {exc}") from exc
    return stats.f_bavail * stats.f_frsize


def check_free_space(directory: Path | str, need_bytes: int, what: str) -> None:
    """Refuse to preallocate ``need_bytes`` in ``directory`` unless its file system has them
    free. ``what`` says what needs them, for the message (which names no path: a client may
    read it).

    Raises:
        InsufficientSpaceError: fewer bytes free than needed (STORAGE_FULL).
        StorageIOError: the free space cannot be read.
    """
    free = free_bytes(directory)
    if need_bytes > free:
        raise InsufficientSpaceError(
            f"{what} needs {need_bytes:,} bytes of preallocated segment files (preallocate="
            f"true) and its log directory has {free:,} bytes free",
            need_bytes=need_bytes,
            free_bytes=free,
        )
