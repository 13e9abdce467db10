"""Durable small-file writes: replace a file so that a crash leaves old or new, never half.

The metadata files of a log directory (offset checkpoints, ``meta.properties``, the clean-shutdown
marker, topic configs) are small and rewritten whole. Writing them in place is unsafe: a crash in
the middle leaves a torn file, and a torn recovery-point checkpoint could skip recovery of data
that was never flushed. So every rewrite goes through a temporary file and a rename, as Kafka's
``Utils.atomicMoveWithFallback`` does::

    1. write <path>.tmp           (created or truncated; a stray one from a crash is overwritten)
    2. fsync <path>.tmp           the new bytes are on disk, under the temporary name
    3. rename <path>.tmp -> path  atomic on POSIX: readers see the old file or the new, never both
    4. fsync the parent directory the rename itself is on disk

What a crash (process kill or power loss) at each step leaves behind:

* during 1 or 2: ``path`` untouched; ``<path>.tmp`` may exist with any prefix of the new bytes.
  Readers never look at ``.tmp`` files; the next write truncates and reuses it.
* after 2, before 3: ``path`` untouched; ``<path>.tmp`` complete but unused.
* after 3, before 4: after a process kill, ``path`` is new. After a power loss the rename may or
  may not have reached the disk, so ``path`` is old or new (both complete, because step 2 made
  the new bytes durable before the rename could be).
* after 4: ``path`` is new, durably.

Renames are atomic only within one file system; the temporary file lives beside its target, so
they always are here (Kafka's non-atomic fallback move is never needed on POSIX).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .errors import StorageIOError

__all__ = ["TMP_FILE_SUFFIX", "atomic_write", "fsync_directory", "tmp_path_for"]

# Kafka's suffix for a file being replaced (CheckpointFile, PropertiesUtils, PartitionMetadataFile).
TMP_FILE_SUFFIX = ".tmp"


def tmp_path_for(path: Path) -> Path:
    """The temporary file that :func:`atomic_write` uses for ``path``: ``<path>.tmp``."""
    return path.with_name(path.name + TMP_FILE_SUFFIX)


def fsync_directory(path: Path) -> None:
    """Make the directory entries of ``path`` durable (creations, renames and deletions in it).

    On Linux a new, renamed or deleted file is only durable once its directory is fsynced;
    fsyncing the file itself does not persist its name.

    Raises:
        StorageIOError: the directory cannot be opened or fsynced (names the directory).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise StorageIOError(f"cannot open directory {path} to fsync it: {e}") from e
    try:
        os.fsync(fd)
    except OSError as e:
        raise StorageIOError(f"fsync of directory {path} failed: {e}") from e
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace the content of ``path`` with ``data`` atomically and (by default) durably.

    Steps and crash behaviour are in the module docstring: a reader of ``path`` sees either the
    complete old content (or no file, if there was none) or the complete new content.

    Args:
        path: the file to write; its parent directory must exist.
        data: the complete new content.
        fsync: fsync the temporary file and the parent directory. Only tests and throwaway files
            should pass ``False``: without it a power loss may leave an empty or torn ``path``.

    Raises:
        StorageIOError: any OSError on the way (disk full, permissions, a directory in the way);
            the message names the path and the byte count. ``path`` is left as it was, and the
            temporary file is removed where possible.

    Not thread-safe for the same ``path``: two concurrent writers share ``<path>.tmp``. Callers
    that may write one file from several threads hold a lock (see ``OffsetCheckpointFile``).
    """
    path = Path(path)
    tmp_path = tmp_path_for(path)
    view = memoryview(data)
    try:
        # O_TRUNC: a .tmp left by a crash during an earlier write is overwritten, never appended to.
        fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            written = 0
            while written < len(view):
                # os.write may write less than asked (signals, large buffers): loop until done.
                written += os.write(fd, view[written:])
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_path, path)
    except OSError as e:
        _remove_quietly(tmp_path)
        raise StorageIOError(
            f"atomic write of {len(view)} bytes to {path} (via {tmp_path.name}) failed: {e}"
        ) from e
    if fsync:
        fsync_directory(path.parent)


def _remove_quietly(path: Path) -> None:
    # Best effort after a failed write: the original error is the one worth reporting, and a
    # leftover .tmp is harmless (the next write truncates it).
    with contextlib.suppress(OSError):
        os.unlink(path)
