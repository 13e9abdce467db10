"""A region of a segment's ``.log``: whole batches a fetch returns without reading them.

Kafka's broker answers a consumer's fetch with ``FileRecords.slice``: the file channel and a
byte range, which the network layer writes to the socket with ``sendfile``
(``clients/src/main/java/org/apache/kafka/common/record/FileRecords.java``, ``writeTo``), so
that the batches go from the page cache to the socket without being copied through the JVM.
:class:`FileRegion` is that slice here: a read (:meth:`Segment.fetch_region`) finds where the
whole batches start and end, as any read does, and hands back ``(descriptor, position,
size_bytes)`` instead of the bytes; the Kafka front end sends them with ``os.sendfile``
(server/kafka/connection.py). Only plaintext connections ask for regions (TLS must encrypt the
bytes in this process: a TLS fetch reads them, as before).

Lifetime: the region holds its own duplicate of the ``.log``'s descriptor (``os.dup``), so that
the file stays readable for the send whatever happens to the segment meanwhile: the open
segments cache closing its descriptor, retention or a topic deletion removing it (the inode
lives until the last descriptor closes), a cleaner swap replacing it (a new file; this one is
unchanged). :meth:`close` gives the descriptor back; every holder calls it (the connection
after the send, the serving layer for a read it drops), and a region garbage-collected unclosed
closes itself.

Truncation is the one change that rewrites bytes in place: a follower's or a leader change's
``truncate_to`` cuts the file, and appends after it write other batches at the same positions.
The ``.log`` (:class:`~stratalog.server.storage.log_file.LogFile`) counts its truncations, and a
region remembers the count it was read under; every ``sendfile`` call checks the count under
the file's truncation lock, which the truncation takes too, so no byte is sent once the file
was cut: :meth:`send` raises :class:`RegionTruncatedError` instead, and the connection closes
(the answer is half written; Kafka's ``FileRecords.writeTo`` throws on a truncated file and the
broker closes the connection too). The client reconnects and fetches again, from the log as it
now is.

Bounds: at most :data:`REGIONS_MAX` regions are open in the process at once (each holds a
descriptor); a read that finds none free returns the bytes instead (:func:`open_region`
returns None), as does one made when the process is out of descriptors. A region is only worth its three system calls (dup, sendfile, close) for
:data:`REGION_BYTES_MIN` bytes or more; smaller reads return bytes.

Concurrency: a region is made in any thread and sent from the event loop; the count of open
regions is a semaphore taken without waiting (a read that finds none free copies). Blocking: :meth:`send` and :meth:`read` may
read the disk when the batches are not in the page cache (as Kafka's network threads do).
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Protocol

from .errors import StorageError

__all__ = ["REGIONS_MAX", "REGION_BYTES_MIN", "FileRegion", "RegionTruncatedError",
           "open_region"]

#: Regions open at once in the process (each holds a descriptor): past it, reads copy.
REGIONS_MAX = 1024
#: Below this many bytes a read returns the bytes: a copy costs less than the system calls.
REGION_BYTES_MIN = 64 * 1024

_REGIONS = threading.BoundedSemaphore(REGIONS_MAX)


class LogFile(Protocol):
    """What a region needs of its ``.log`` (log_file.py's LogFile, which makes regions)."""

    truncations: int
    truncation_lock: threading.Lock

    @property
    def path(self) -> Path: ...


class RegionTruncatedError(StorageError):
    """The file was truncated after the region was read: its bytes may be another batch's."""


class FileRegion:
    """``size_bytes`` bytes of whole batches at ``position`` of a ``.log`` (module docstring).

    ``file_region`` marks it for the encoders that pass records through (the Kafka front end's
    hot_messages.py): ``len(region)`` is its size, and it is written with :meth:`send`.
    """

    __slots__ = ("_fd", "_log_file", "_truncations", "position", "size_bytes")

    file_region = True

    def __init__(self, fd: int, log_file: LogFile, truncations: int, position: int,
                 size_bytes: int) -> None:
        self._fd: int | None = fd
        self._log_file = log_file
        self._truncations = truncations
        self.position = position
        self.size_bytes = size_bytes

    def __len__(self) -> int:
        return self.size_bytes

    def __repr__(self) -> str:
        return f"FileRegion({self._log_file.path}, {self.position}, {self.size_bytes})"

    @property
    def path(self) -> str:
        return str(self._log_file.path)

    def send(self, socket_fd: int, offset: int) -> int:
        """Send the region's bytes from ``offset`` (relative to the region) to the
        non-blocking socket ``socket_fd`` with one ``sendfile``; the bytes sent (0: none
        fitted; the caller waits until the socket is writable).

        Raises:
            RegionTruncatedError: the file was truncated since the region was read, or ends
                before the region does.
            OSError: the socket failed (the peer went away).
        """
        fd = self._fd
        assert fd is not None, "a closed region is not sent"
        log_file = self._log_file
        count = self.size_bytes - offset
        with log_file.truncation_lock:
            if log_file.truncations != self._truncations:
                raise RegionTruncatedError(
                    f"segment {log_file.path} was truncated while {self.size_bytes} bytes at "
                    f"position {self.position} were being sent"
                )
            try:
                sent = os.sendfile(socket_fd, fd, self.position + offset, count)
            except BlockingIOError:
                return 0
        if sent == 0:
            raise RegionTruncatedError(
                f"segment {log_file.path} ends before position {self.position + offset}: "
                f"{count} bytes of the region are missing"
            )
        return sent

    def read(self) -> bytes:
        """The region's bytes (a copy: for a connection that cannot take a region).

        Raises:
            RegionTruncatedError: as :meth:`send`.
            OSError: the read failed.
        """
        fd = self._fd
        assert fd is not None, "a closed region is not read"
        log_file = self._log_file
        with log_file.truncation_lock:
            if log_file.truncations == self._truncations:
                data = os.pread(fd, self.size_bytes, self.position)
                if len(data) == self.size_bytes:
                    return data
        raise RegionTruncatedError(
            f"segment {log_file.path} was truncated under {self.size_bytes} bytes at "
            f"position {self.position}"
        )

    def close(self) -> None:
        """Give the descriptor back (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            _REGIONS.release()

    def __del__(self) -> None:
        # A holder that dropped the region without closing it (an exception between the read
        # and the send): the descriptor must not leak.
        if self._fd is not None:
            self.close()


def open_region(log_file: LogFile, fd: int, truncations: int, position: int,
                size_bytes: int) -> FileRegion | None:
    """A region of ``log_file`` (open as ``fd``, truncated ``truncations`` times when the read
    began), or None when :data:`REGIONS_MAX` are open already or the process is out of
    descriptors (the caller reads the bytes).

    Raises:
        OSError: the descriptor could not be duplicated for another reason (it is closed).
    """
    if not _REGIONS.acquire(blocking=False):
        return None
    try:
        duplicate = os.dup(fd)
    except OSError as exc:
        _REGIONS.release()
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            return None
        raise
    except BaseException:
        _REGIONS.release()
        raise
    return FileRegion(duplicate, log_file, truncations, position, size_bytes)
