"""Loading a server's partition logs at start-up: the catalogue made whole, then every log opened.

Kafka's ``LogManager.loadLogs`` (``core/src/main/scala/kafka/log/LogManager.scala``): after the
log directories are locked and listed (``log_dirs.py``), the
:class:`~stratalog.server.storage.log_manager.LogManager` hands this module what it found, and
gets back the open logs::

    catalogue + partition directories found
      1. reconcile_catalog   a deletion a crash interrupted is completed (its directories renamed
                             -delete); a partition directory with no catalogue entry is adopted
                             with the server defaults; the catalogue is rewritten if it changed
      2. load_logs           every catalogue partition opened in a pool of
                             recovery.threads.per.data.dir threads per directory (recovery.py
                             decides what each open recovers); a missing partition directory
                             is created in the directory holding the fewest

Crash behaviour: nothing is written here but the catalogue (step 1, written whole, as
``topic_catalog.py`` writes it) and the partition directories step 2 creates (their parent
directories fsynced after): a crash in between leaves a state the next load makes whole again.
A log that fails to open fails the load, after every other log's open has finished; the logs
that did open are handed back so that the caller closes them.

Concurrency: called once, by the LogManager's open, before the manager is shared; the logs are
opened in the pool's threads (``open_log`` must be thread-safe), nothing else runs at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from .config import LogConfig
from .durable import fsync_directory
from .log_dirs import LogDirState, TopicPartition, read_checkpoint_or_empty
from .partition_log import PartitionLog
from .topic_catalog import TopicCatalog, TopicEntry, write_catalog
from .topic_names import partition_dir_name

__all__ = ["LoadedLogs", "OpenLog", "load_logs", "reconcile_catalog"]

log = logging.getLogger(__name__)

#: Opens one partition log (creating it if needed): ``open_log(directory, config, *,
#: had_clean_shutdown, recovery_point, log_start_offset)``; the LogManager's ``_open_log``.
OpenLog = Callable[..., PartitionLog]


class LoadedLogs(NamedTuple):
    """What :func:`load_logs` opened, and the first failure if a log did not open."""

    logs: dict[TopicPartition, PartitionLog]  # every log that opened
    log_dir_of: dict[TopicPartition, Path]  # the log directory of each
    # The replication-offset-checkpoint entries of every directory that has the file.
    high_watermarks: dict[TopicPartition, int]
    first_error: BaseException | None  # not None: the load failed; close ``logs``


def reconcile_catalog(
    catalog: TopicCatalog,
    found: dict[TopicPartition, Path],
    log_dirs: list[Path],
    rename_for_deletion: Callable[[Path, str, int], None],
) -> TopicCatalog:
    """Complete interrupted deletions, adopt partitions with no catalogue entry.

    ``found`` (partition -> its log directory) loses the partitions of a topic whose deletion
    is completed; ``rename_for_deletion(log_dir, topic, partition)`` renames one ``-delete``
    and schedules its removal. The catalogue, if changed, is written to ``log_dirs``.

    Raises:
        StorageIOError: a rename or the catalogue write failed.
    """
    changed = False
    for entry in list(catalog.topics.values()):
        if entry.is_deleting:
            log.warning("completing the deletion of topic %s interrupted by a crash",
                        entry.name)
            for topic_partition in [tp for tp in found if tp[0] == entry.name]:
                directory = found.pop(topic_partition)
                rename_for_deletion(directory, *topic_partition)
            catalog = catalog.without_topic(entry.name)
            changed = True
    by_topic: dict[str, int] = {}
    for topic, partition in found:
        by_topic[topic] = max(by_topic.get(topic, 0), partition + 1)
    for topic, count in sorted(by_topic.items()):
        entry = catalog.topics.get(topic)
        if entry is None:
            log.warning("adopting topic %s (%d partitions) found without a catalogue entry, "
                        "with the server defaults", topic, count)
            catalog = catalog.with_topic(TopicEntry(topic, count))
            changed = True
        elif count > entry.partitions:
            log.warning("topic %s has partition directories up to %d but %d partitions in "
                        "the catalogue; keeping them all", topic, count - 1, entry.partitions)
            catalog = catalog.with_topic(
                TopicEntry(topic, count, dict(entry.configs), entry.state)
            )
            changed = True
    if changed:
        write_catalog(log_dirs, catalog)
    return catalog


def load_logs(
    dirs: list[LogDirState],
    catalog: TopicCatalog,
    found: dict[TopicPartition, Path],
    config_for: Callable[[TopicEntry], LogConfig],
    open_log: OpenLog,
    threads: int,
) -> LoadedLogs:
    """Open every partition log of ``catalog``; create the missing ones.

    ``found``: partition -> the log directory holding it; a partition not found is created in
    the directory with the fewest partitions (ties: the first in ``dirs``). Each log opens with
    its directory's checkpointed recovery point and log start offset, as after a clean
    shutdown when its directory had the marker or the log is new. ``threads`` opens run at once.
    Every open is waited for even after one failed (:attr:`LoadedLogs.first_error`).
    """
    log_dirs = [state.path for state in dirs]
    dir_by_path = {state.path: state for state in dirs}
    checkpoints: dict[Path, tuple[dict[TopicPartition, int], dict[TopicPartition, int]]] = {}
    high_watermarks: dict[TopicPartition, int] = {}
    for state in dirs:
        checkpoints[state.path] = (
            read_checkpoint_or_empty(state.recovery_points),
            read_checkpoint_or_empty(state.log_start_offsets),
        )
        if state.high_watermarks is not None:
            high_watermarks.update(read_checkpoint_or_empty(state.high_watermarks))
    jobs: list[tuple[TopicPartition, Path, LogConfig, bool]] = []
    counts = {state.path: 0 for state in dirs}
    for directory in found.values():
        counts[directory] += 1
    for entry in catalog.topics.values():
        config = config_for(entry)
        for partition in range(entry.partitions):
            topic_partition = (entry.name, partition)
            directory = found.get(topic_partition)
            if directory is None:
                directory = min(counts, key=lambda path: (counts[path], log_dirs.index(path)))
                counts[directory] += 1
                log.warning("creating missing partition directory %s-%d in %s",
                            entry.name, partition, directory)
                jobs.append((topic_partition, directory, config, False))
            else:
                jobs.append((topic_partition, directory, config, True))

    def load(job: tuple[TopicPartition, Path, LogConfig, bool]) -> PartitionLog:
        topic_partition, directory, config, existed = job
        state = dir_by_path[directory]
        recovery_points, log_start_offsets = checkpoints[directory]
        return open_log(
            directory / partition_dir_name(*topic_partition),
            config,
            had_clean_shutdown=state.had_clean_shutdown or not existed,
            recovery_point=recovery_points.get(topic_partition),
            log_start_offset=log_start_offsets.get(topic_partition),
        )

    logs: dict[TopicPartition, PartitionLog] = {}
    log_dir_of: dict[TopicPartition, Path] = {}
    first_error: BaseException | None = None
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="log-loader") as pool:
        futures = [(job, pool.submit(load, job)) for job in jobs]
        for job, future in futures:
            try:
                partition_log = future.result()
            except BaseException as exc:  # keep collecting, to close what did open
                log.error("failed to load partition %s-%d in %s: %s",
                          job[0][0], job[0][1], job[1], exc)
                first_error = first_error or exc
                continue
            logs[job[0]] = partition_log
            log_dir_of[job[0]] = job[1]
    if first_error is not None:
        return LoadedLogs(logs, log_dir_of, high_watermarks, first_error)
    if any(not existed for _, _, _, existed in jobs):
        for state in dirs:
            fsync_directory(state.path)
    log.info("loaded %d partitions of %d topics from %s", len(logs), len(catalog.topics),
             ", ".join(str(path) for path in log_dirs))
    return LoadedLogs(logs, log_dir_of, high_watermarks, None)
