"""A server's log directories: locking, identity, clean-shutdown markers, checkpoints, listing.

Each of ``log.dirs`` is a :class:`LogDirState` for the life of a
:class:`~stratalog.server.storage.log_manager.LogManager`::

    <log dir>/
      .lock                               held (flock) while a manager has it: dir_lock.py
      meta.properties                     cluster.id, node.id, directory.id: meta_properties.py
      .kafka_cleanshutdown                consumed at open, written at a clean close
      recovery-point-offset-checkpoint    where recovery starts after an unclean shutdown
      log-start-offset-checkpoint         log start offsets above the first segment's base
      replication-offset-checkpoint       high watermarks (only once a log tracks one)
      <topic>-<partition>/ ...            partitions; ``-delete`` ones wait for removal

:func:`create_log_dirs` creates and resolves the directories; :func:`lock_log_dirs` locks
them, checks that they belong to one cluster and consumes their clean-shutdown markers
(Kafka's ``LogManager`` start-up: ``core/src/main/scala/kafka/log/LogManager.scala``,
``lockLogDirs`` and ``loadLogs``); :func:`scan_log_dirs` lists what they hold; the rest reads
and writes what the checkpoint files hold. Crash behaviour: checkpoint files are written tmp + fsync + rename
(``checkpoints.py``); an unreadable one is read as empty, which recovers every log of the
directory from its start. Concurrency: these functions are called by the manager under its lock
(or before it is shared).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stratalog.records.log_layout import (
    LOG_FILE_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
)

from .checkpoints import OffsetCheckpointFile
from .clean_shutdown import consume_marker
from .dir_lock import LogDirLock
from .errors import (
    CorruptCheckpointError,
    InvalidConfigError,
    InvalidTopicError,
    StorageError,
    StorageIOError,
)
from .meta_properties import MetaProperties, read_meta_properties, write_meta_properties
from .topic_names import (
    PartitionDirKind,
    parse_partition_dir_name,
    partition_dir_kind,
    partition_dir_name,
)

if TYPE_CHECKING:
    from .partition_log import PartitionLog

__all__ = [
    "LogDirState",
    "TopicPartition",
    "count_segments",
    "create_log_dirs",
    "lock_log_dirs",
    "log_start_offset_entries",
    "read_checkpoint_or_empty",
    "scan_log_dirs",
    "write_high_watermark_checkpoint",
]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass
class LogDirState:
    """One log directory of a server: its lock, checkpoint files and what loading found.

    Mutable, owned by the :class:`~stratalog.server.storage.log_manager.LogManager`:
    ``fully_loaded`` is set once every partition in it is open, ``offline`` (set from any
    thread, a flag only) once an I/O error took it offline.
    """

    path: Path
    lock: LogDirLock
    recovery_points: OffsetCheckpointFile
    log_start_offsets: OffsetCheckpointFile
    had_clean_shutdown: bool
    # replication-offset-checkpoint: not created until a log of the directory tracks a high
    # watermark, so a single server's directories look as before issue 17.
    high_watermarks: OffsetCheckpointFile | None = None
    fully_loaded: bool = False
    # After an I/O error in one of its logs (Kafka's offline log dir): its logs refuse reads
    # and writes, nothing more is written to it, and it gets no clean-shutdown marker.
    offline: bool = False


def create_log_dirs(paths: list[Path]) -> list[Path]:
    """Each of ``paths`` created if missing and resolved (symlinks, ``..``): the real paths.

    Raises:
        StorageIOError: a directory cannot be created or resolved.
        InvalidConfigError: the same directory listed twice (even through ``..`` or a link).
    """
    resolved: list[Path] = []
    for path in paths:
        try:
            path.mkdir(parents=True, exist_ok=True)
            real = path.resolve(strict=True)
        except OSError as exc:
            raise StorageIOError(f"cannot create log directory {path}: {exc}") from exc
        if real in resolved:
            raise InvalidConfigError(f"log directory {path} is listed twice (as {real})")
        resolved.append(real)
    return resolved


def lock_log_dirs(
    paths: list[Path], node_id: int, locks: list[LogDirLock]
) -> list[LogDirState]:
    """Lock every directory of ``paths`` (appending each lock to ``locks``, which the caller
    releases if anything fails), check that they belong to one cluster (writing
    ``meta.properties`` where missing) and consume their clean-shutdown markers (Kafka
    LogManager.loadLogs; docs/kafka-behaviours.md#clean-shutdown).

    Raises:
        LogDirLockedError: another process (or manager) holds one of the directories.
        InvalidConfigError: directories of different clusters, or two with one directory.id.
        CorruptCheckpointError: a ``meta.properties`` is corrupt.
    """
    for path in paths:
        locks.append(LogDirLock.acquire(path))
    _check_meta_properties(paths, node_id)
    dirs = []
    for path, lock in zip(paths, locks, strict=True):
        had_clean_shutdown = consume_marker(path)
        dirs.append(
            LogDirState(
                path=path,
                lock=lock,
                recovery_points=OffsetCheckpointFile(path / RECOVERY_POINT_CHECKPOINT_FILE),
                log_start_offsets=OffsetCheckpointFile(
                    path / LOG_START_OFFSET_CHECKPOINT_FILE
                ),
                had_clean_shutdown=had_clean_shutdown,
                high_watermarks=OffsetCheckpointFile(
                    path / REPLICATION_OFFSET_CHECKPOINT_FILE, create_if_missing=False
                ),
            )
        )
    return dirs


def scan_log_dirs(
    dirs: list[LogDirState], skip_topics: frozenset[str]
) -> tuple[dict[TopicPartition, Path], list[Path]]:
    """The live partition directories of ``dirs`` (partition -> its log directory), but those
    of ``skip_topics`` (their owners open them), and the ``-delete`` directories waiting for
    removal. Other directories are ignored with a warning.

    Raises:
        StorageError: a partition lives in two log directories.
        StorageIOError: a directory cannot be listed.
    """
    found: dict[TopicPartition, Path] = {}
    deleted: list[Path] = []
    for state in dirs:
        for entry in _list_dir(state.path):
            if not entry.is_dir(follow_symlinks=False):
                continue
            name = entry.name
            try:
                kind = partition_dir_kind(name)
            except InvalidTopicError:
                log.warning("ignoring directory %s: not a partition directory", entry.path)
                continue
            if kind is PartitionDirKind.DELETE:
                deleted.append(Path(entry.path))
                continue
            if kind is not PartitionDirKind.LIVE:
                log.warning("ignoring %s directory %s", kind.name.lower(), entry.path)
                continue
            topic_partition = parse_partition_dir_name(name)
            if topic_partition[0] in skip_topics:
                continue  # its owner opens it
            if topic_partition in found:
                raise StorageError(
                    f"partition {name} exists in two log directories: "
                    f"{found[topic_partition]} and {state.path}"
                )
            found[topic_partition] = state.path
    return found, deleted


def read_checkpoint_or_empty(checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
    """Kafka LogManager.loadLogs (docs/kafka-behaviours.md#clean-shutdown): an unreadable checkpoint
    is treated as empty, with a warning."""
    try:
        return checkpoint.read()
    except CorruptCheckpointError as exc:
        log.warning("ignoring corrupt checkpoint (every log of the directory is recovered "
                    "from its start): %s", exc)
        return {}


def log_start_offset_entries(
    logs: list[tuple[TopicPartition, PartitionLog]],
) -> dict[TopicPartition, int]:
    """Kafka writes only the partitions whose log start offset is above their first segment."""
    entries = {}
    for topic_partition, partition_log in logs:
        first = partition_log.segments.first
        if first is not None and partition_log.log_start_offset > first.base_offset:
            entries[topic_partition] = partition_log.log_start_offset
    return entries


def write_high_watermark_checkpoint(
    state: LogDirState, in_dir: list[tuple[TopicPartition, PartitionLog]]
) -> bool:
    """Write the directory's ``replication-offset-checkpoint``: the high watermark of each log
    that tracks one (Kafka's ReplicaManager.checkpointHighWatermarks). Only once there is
    something to write, or a file to bring up to date; True if written."""
    checkpoint = state.high_watermarks
    if checkpoint is None:
        return False
    entries = {tp: lg.high_watermark for tp, lg in in_dir if lg.tracks_high_watermark}
    if not entries and not checkpoint.path.exists():
        return False
    checkpoint.write(entries)
    return True


def count_segments(partitions: Iterable[tuple[TopicPartition, Path]]) -> int | None:
    """The ``.log`` files of the partition directories (for a start-up message); None if
    they cannot be listed (no descriptor left)."""
    count = 0
    try:
        for (topic, partition), log_dir in partitions:
            with os.scandir(log_dir / partition_dir_name(topic, partition)) as entries:
                count += sum(1 for entry in entries if entry.name.endswith(LOG_FILE_SUFFIX))
    except OSError:
        return None
    return count


def _list_dir(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as exc:
        raise StorageIOError(f"cannot list log directory {path}: {exc}") from exc


def _check_meta_properties(directories: list[Path], node_id: int) -> None:
    """Every directory belongs to one cluster; write ``meta.properties`` where missing."""
    metas = {directory: read_meta_properties(directory) for directory in directories}
    cluster_ids = {meta.cluster_id for meta in metas.values() if meta is not None}
    cluster_ids.discard(None)
    if len(cluster_ids) > 1:
        listing = ", ".join(
            f"{directory}: {meta.cluster_id}" for directory, meta in metas.items() if meta
        )
        raise InvalidConfigError(
            f"the log directories belong to different clusters ({listing}); a server's log "
            "directories must share one cluster.id"
        )
    directory_ids = [meta.directory_id for meta in metas.values() if meta and meta.directory_id]
    if len(directory_ids) != len(set(directory_ids)):
        raise InvalidConfigError(
            "two log directories have the same directory.id in meta.properties (a copied "
            "directory?): " + ", ".join(str(d) for d in directories)
        )
    cluster_id = next(iter(cluster_ids)) if cluster_ids else None
    for directory, meta in metas.items():
        if meta is None:
            new_meta = MetaProperties.create(node_id=node_id, cluster_id=cluster_id)
            cluster_id = new_meta.cluster_id
            write_meta_properties(directory, new_meta)
