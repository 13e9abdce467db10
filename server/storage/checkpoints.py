"""Offset checkpoint files: one offset per partition of a log directory, in Kafka's text format.

A log directory keeps two of them at its root, each covering every partition in that directory:

* ``recovery-point-offset-checkpoint``: per partition, the offset below which everything is known
  to be flushed. After an unclean shutdown, recovery starts at the segment holding it.
* ``log-start-offset-checkpoint``: per partition whose log start offset is above its first
  segment's base offset (after ``delete_records``); a partition missing here starts at its first
  segment.
* ``replication-offset-checkpoint``: per partition whose log tracks a high watermark (issue 17's
  replication mode), that high watermark; written only once some log tracks one.

Each partition directory may hold one more checkpoint, ``leader-epoch-checkpoint``
(:class:`LeaderEpochCheckpointFile`): the start offset of every leader epoch of its log, in the
same container (its entries: :mod:`stratalog.records.leader_epoch_checkpoint`).

The text format and Kafka's exact rules for reading it (version line, count line, ``<topic>
<partition> <offset>`` lines) are :mod:`stratalog.records.offset_checkpoint`'s (the container:
:mod:`stratalog.records.checkpoint_text`), which the Spark file reader parses with too. This
module is the file side: a text that does not parse is a :class:`CorruptCheckpointError` naming
the file and the line. Kafka's ``LogManager`` then logs a warning and carries on as if the file
were empty (Kafka LogManager.loadLogs; docs/kafka-behaviours.md#clean-shutdown); that policy is the
caller's.

Writes replace the file atomically (:func:`~.durable.atomic_write`: tmp, fsync, rename, fsync of
the directory), so a crash leaves the previous checkpoint or the new one, never a torn one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path

from stratalog.records.errors import CorruptOffsetCheckpointError, InvalidTopicNameError
from stratalog.records.leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    format_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
)
from stratalog.records.offset_checkpoint import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    format_offset_checkpoint,
    parse_offset_checkpoint,
)

from .durable import atomic_write
from .errors import CorruptCheckpointError, InvalidTopicError, StorageIOError

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "LOG_START_OFFSET_CHECKPOINT_FILE",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "REPLICATION_OFFSET_CHECKPOINT_FILE",
    "LeaderEpochCheckpointFile",
    "OffsetCheckpointFile",
]

TopicPartition = tuple[str, int]


class OffsetCheckpointFile:
    """One offset checkpoint file: read and atomically rewrite ``(topic, partition) -> offset``.

    Holds only the path; every :meth:`read` reads the file and every :meth:`write` replaces it
    whole. Constructing one creates the file, empty, if it is missing (as Kafka does), so that a
    later read finds an empty checkpoint rather than no file.

    Crash behaviour: a crash during :meth:`write` leaves the previous complete content (and
    perhaps a stray ``<name>.tmp``, which is ignored and overwritten by the next write).

    Concurrency: thread-safe; reads and writes of one object are serialised by a lock (the
    periodic checkpoint task and shutdown may both write). Two objects, or two processes, on the
    same file are not coordinated: the log directory's ``.lock`` keeps other processes out.
    """

    def __init__(self, path: Path, *, create_if_missing: bool = True) -> None:
        """Open the checkpoint at ``path``, creating it empty if missing and asked to.

        Raises:
            StorageIOError: the file cannot be created (missing directory, permissions).
        """
        self.path = Path(path)
        self._lock = threading.Lock()
        if create_if_missing:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                pass
            except OSError as e:
                raise StorageIOError(f"cannot create checkpoint file {self.path}: {e}") from e
            else:
                os.close(fd)

    def __repr__(self) -> str:
        return f"OffsetCheckpointFile({str(self.path)!r})"

    def read(self) -> dict[TopicPartition, int]:
        """The entries of the file; a missing or empty file is an empty checkpoint.

        A partition listed twice takes its last offset (Kafka builds a map from the lines).

        Raises:
            CorruptCheckpointError: bytes that are not UTF-8, a version other than 0, a line that
                is not a decimal int where one is expected, an entry line without exactly three
                whitespace-separated fields, a partition or offset out of Java's int/long range,
                or fewer or more entry lines than the count line says.
            StorageIOError: the file exists but cannot be read.
        """
        with self._lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return {}
            except OSError as e:
                raise StorageIOError(f"cannot read checkpoint file {self.path}: {e}") from e
        try:
            return parse_offset_checkpoint(data)
        except CorruptOffsetCheckpointError as exc:
            raise CorruptCheckpointError(
                f"checkpoint file {self.path}: {exc}",
                path=str(self.path),
                line_number=exc.line_number,
            ) from exc

    def write(self, entries: Mapping[TopicPartition, int]) -> None:
        """Replace the file with ``entries``, atomically and durably.

        Lines are sorted by (topic, partition), so the same entries always give the same bytes.

        Raises:
            InvalidTopicError: a topic that is not a valid topic name (it could not be read back).
            ValueError: a partition outside 0 .. 2^31 - 1 or an offset outside Java's long range.
            StorageIOError: the write failed; the previous file is intact.
        """
        try:
            data = format_offset_checkpoint(entries)
        except InvalidTopicNameError as exc:
            raise InvalidTopicError(str(exc)) from exc
        with self._lock:
            atomic_write(self.path, data)


class LeaderEpochCheckpointFile:
    """A partition's ``leader-epoch-checkpoint``: read and atomically rewrite its
    ``(leader epoch, start offset)`` entries (Kafka's ``LeaderEpochCheckpointFile``).

    Holds only the path. Unlike :class:`OffsetCheckpointFile` it is not created at
    construction: a missing file reads as no entries, and the first :meth:`write` creates it
    (the cache that owns it writes it on its first entry, so a log with no leader epoch yet has
    no file; Kafka creates it empty).

    Crash behaviour: a crash during :meth:`write` leaves the previous complete content (or no
    file), and perhaps a stray ``leader-epoch-checkpoint.tmp``, ignored and overwritten by the
    next write.

    Concurrency: not thread-safe; its :class:`~.leader_epoch_cache.LeaderEpochCache` serialises
    calls (under its partition log's lock).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"LeaderEpochCheckpointFile({str(self.path)!r})"

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> list[tuple[int, int]]:
        """The ``(epoch, start offset)`` entries in file order; a missing or empty file has none.

        Raises:
            CorruptCheckpointError: text not in the format of
                :mod:`stratalog.records.leader_epoch_checkpoint` (names the file and the line).
            StorageIOError: the file exists but cannot be read.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StorageIOError(f"cannot read leader epoch checkpoint {self.path}: {e}") from e
        try:
            return parse_leader_epoch_checkpoint(data)
        except CorruptOffsetCheckpointError as exc:
            raise CorruptCheckpointError(
                f"leader epoch checkpoint {self.path}: {exc}",
                path=str(self.path),
                line_number=exc.line_number,
            ) from exc

    def write(self, entries: list[tuple[int, int]]) -> None:
        """Replace the file with ``entries``, atomically and durably (tmp, fsync, rename, fsync
        of the directory).

        Raises:
            ValueError: an epoch or offset outside its Java type.
            StorageIOError: the write failed; the previous file is intact.
        """
        atomic_write(self.path, format_leader_epoch_checkpoint(entries))
