"""The clean-shutdown marker ``.kafka_cleanshutdown``: "every log here was closed cleanly".

Recovery after a crash scans every segment from the recovery point, which is slow on big logs.
It is skipped when the last shutdown was clean, and this marker is how the next start knows.
The protocol (Kafka LogManager.loadLogs and LogManager.shutdown;
docs/kafka-behaviours.md#clean-shutdown; Kafka's ``LogManager`` and ``CleanShutdownFileHandler``):

1. At startup, before loading any log of the directory: if the marker exists, the last shutdown
   was clean. Delete it at once, durably (:func:`consume_marker`). Only existence matters: a
   marker with garbage in it still means clean.
2. At shutdown, after every log of the directory has been flushed and closed and both offset
   checkpoints were written, write the marker (:func:`write_marker`), but only if the directory
   had a clean shutdown before or all its logs finished loading (KAFKA-15375).

Why delete it at step 1 rather than at the end of loading: a crash *during* loading must count
as unclean next time (KAFKA-10471); with the marker gone, it does.

The content, written by Kafka 3.7 and later (one line, no newline)::

    {"version":0,"brokerEpoch":<long>}

The broker epoch is the cluster's registration epoch of this broker; stratalog has no cluster,
so it writes -1 unless told otherwise (as Kafka's ``LogManager.shutdown`` does by default).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .durable import atomic_write, fsync_directory
from .errors import StorageIOError

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "CLEAN_SHUTDOWN_FILE_VERSION",
    "consume_marker",
    "marker_exists",
    "read_marker",
    "write_marker",
]

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
CLEAN_SHUTDOWN_FILE_VERSION = 0

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def marker_exists(directory: Path) -> bool:
    """Whether the marker is present in ``directory`` (whatever it contains)."""
    return os.path.lexists(Path(directory) / CLEAN_SHUTDOWN_FILE)


def consume_marker(directory: Path) -> bool:
    """Step 1 of the protocol: report whether the marker exists and delete it durably.

    Returns ``had_clean_shutdown``: True if the marker was present (even empty or unparsable).
    After this returns, the marker is gone from disk, so a crash from here on is unclean.

    Raises:
        StorageIOError: the marker exists but cannot be deleted, or the directory cannot be
            fsynced. Carrying on would be unsafe: a crash during loading would then be taken
            for a clean shutdown.
    """
    path = Path(directory) / CLEAN_SHUTDOWN_FILE
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise StorageIOError(f"cannot delete the clean-shutdown marker {path}: {e}") from e
    # The deletion is only durable once the directory entry is gone on disk too.
    fsync_directory(Path(directory))
    return True


def write_marker(directory: Path, broker_epoch: int = -1) -> None:
    """Step 2 of the protocol: write ``{"version":0,"brokerEpoch":N}`` durably.

    Atomic (tmp, fsync, rename, fsync of the directory): the marker either exists complete or
    not at all, so a crash while writing it gives an unclean start, never a wrong clean one.
    Call it only after every log in ``directory`` was flushed and the checkpoints written.

    Raises:
        ValueError: ``broker_epoch`` is not an int in Java's long range.
        StorageIOError: the write failed (the next start will recover, which is safe).
    """
    if isinstance(broker_epoch, bool) or not isinstance(broker_epoch, int):
        raise ValueError(f"broker epoch must be an int, not {broker_epoch!r}")
    if not _INT64_MIN <= broker_epoch <= _INT64_MAX:
        raise ValueError(f"broker epoch {broker_epoch} is outside a Java long")
    # Field order and spacing as Jackson writes Kafka's Content class: version, then brokerEpoch.
    text = json.dumps(
        {"version": CLEAN_SHUTDOWN_FILE_VERSION, "brokerEpoch": broker_epoch},
        separators=(",", ":"),
    )
    atomic_write(Path(directory) / CLEAN_SHUTDOWN_FILE, text.encode("utf-8"))


def read_marker(directory: Path) -> int | None:
    """The broker epoch in the marker, or ``None`` if the marker is missing or unreadable.

    Like Kafka's ``CleanShutdownFileHandler.read``, any problem (not JSON, no ``brokerEpoch``,
    not an integer) gives ``None`` rather than an error: the epoch is informational, and
    whether the shutdown was clean depends on existence alone (see :func:`consume_marker`).
    """
    path = Path(directory) / CLEAN_SHUTDOWN_FILE
    try:
        content = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(content, dict):
        return None
    epoch = content.get("brokerEpoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        return None
    return epoch
