"""The LogManager: the log directories of one server, their topics, and the background jobs.

Kafka's ``LogManager``: it owns ``log.dirs``, finds and loads every partition in them at startup,
creates and deletes topics, and runs the periodic jobs that keep the directories durable and
bounded (flush, retention, checkpoints, delayed deletes)::

    <log dir>/                            one of log_dirs, locked for the life of the manager
      .lock  meta.properties  .kafka_cleanshutdown
      recovery-point-offset-checkpoint    written every log.flush.offset.checkpoint.interval.ms
      log-start-offset-checkpoint         written every log.flush.start.offset.checkpoint...
      replication-offset-checkpoint       high watermarks, every replica.high.watermark...
                                          (only once a log tracks one: issue 17)
      stratalog-topics.json               the topic catalogue (topic_catalog.py)
      orders-0/  orders-2/                partitions: a new one goes to the dir with the fewest
      old-0.<hex>-delete/                 a deleted partition, removed file.delete.delay.ms later
      __transaction_state-0/              an internal topic: opened by its owner, not listed here

Lifecycle: :meth:`LogManager.open` locks every directory, consumes the clean-shutdown markers
(Kafka LogManager.loadLogs; docs/kafka-behaviours.md#clean-shutdown), reads the checkpoints and the
catalogue, and loads every partition (``log_loading.py``; segment recovery only after an unclean
shutdown, see ``recovery.py``). :meth:`LogManager.close` flushes and closes every log, writes both
checkpoints and then the markers (Kafka LogManager.shutdown;
docs/kafka-behaviours.md#clean-shutdown), and unlocks.

Server defaults for topic configs and the job intervals come from Kafka's broker names
(``log_defaults.py``); a topic's effective config is those defaults with its overrides on top.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import space
from .clean_shutdown import write_marker
from .cleaner import CleaningResult
from .cleaner_manager import CleanerManager, CleanerPartitionStatus, CleanerStats
from .clock import wall_clock_ms
from .config import TOPIC_CONFIG_NAMES, LogConfig
from .descriptor_budget import (
    DESCRIPTORS_PER_PARTITION,
    DescriptorBudget,
    ran_out_of_descriptors,
    read_open_files_limit,
)
from .dir_lock import LogDirLock
from .durable import fsync_directory
from .errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogClosedError,
    OffsetOutOfRangeError,
    StorageError,
    StorageIOError,
    TooManyOpenFilesError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from .log_defaults import ServerLogSettings, parse_server_defaults
from .log_dirs import (
    LogDirState,
    TopicPartition,
    count_segments,
    create_log_dirs,
    lock_log_dirs,
    scan_log_dirs,
)
from .log_loading import load_logs, reconcile_catalog
from .log_maintenance import DEFAULT_MAINTENANCE_INTERVAL_MS, LogMaintenance, MaintenanceReport
from .open_segments import OpenSegments
from .partition_log import PartitionLog
from .topic_catalog import (
    STATE_DELETING,
    TopicCatalog,
    TopicEntry,
    read_catalog,
    write_catalog,
)
from .topic_description import PartitionDescription, TopicDescription, describe_partition
from .topic_names import (
    deleted_dir_name,
    partition_dir_name,
    topic_collision_key,
    validate_topic_name,
)

__all__ = [
    "CLUSTER_TRANSACTION_STATE_TOPIC",
    "DEFAULT_MAINTENANCE_INTERVAL_MS",
    "GROUP_METADATA_TOPIC",
    "INTERNAL_TOPICS",
    "SERVER_WRITTEN_TOPICS",
    "TRANSACTION_STATE_TOPIC",
    "LogManager",
    "MaintenanceReport",
    "PartitionDescription",
    "TopicDescription",
]

log = logging.getLogger(__name__)

# Internal topics: logs the server keeps for itself in a log directory (the transaction
# coordinator's state, server/transactions). Their owners open them; the manager neither loads,
# lists nor lets anyone create them.
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({TRANSACTION_STATE_TOPIC})
# Internal topics in the catalogue: listed and read as any topic, but created and written by
# the server alone (the group coordinator writes __consumer_offsets, issue 27): create_topic
# makes them only when asked with internal=True, and the serving layer refuses clients' writes
# and topic changes on them (server/broker/replica_manager.py, refuse_client_change).
GROUP_METADATA_TOPIC = "__consumer_offsets"
# The transaction coordinators' state in a cluster (server/transaction_service/): replicated, so a
# catalogue topic; not __transaction_state, whose name this server's own log above holds.
CLUSTER_TRANSACTION_STATE_TOPIC = "__cluster_transaction_state"
SERVER_WRITTEN_TOPICS = frozenset({GROUP_METADATA_TOPIC, CLUSTER_TRANSACTION_STATE_TOPIC})
_INTERNAL_COLLISION_KEYS = frozenset(
    topic_collision_key(name) for name in INTERNAL_TOPICS | SERVER_WRITTEN_TOPICS
)


class LogManager:
    """The partition logs of one server across its log directories, and their topics.

    Holds: the locked log directories (with their checkpoint files and clean-shutdown state),
    the server defaults, the topic catalogue, the open :class:`PartitionLog` of every partition
    and where it lives, the ``-delete`` directories waiting for removal, the job schedule.

    Invariants: every live catalogue topic with ``n`` partitions has exactly the logs
    ``(topic, 0) .. (topic, n - 1)`` open, each in one log directory; every partition directory
    in a log directory belongs to a catalogue topic or is an internal topic's (directories written by Kafka, with no
    catalogue, are adopted at open with the server defaults).

    Crash behaviour: the catalogue is written before partition directories are created and,
    on deletion, marked ``deleting`` before they are renamed, so :meth:`open` completes a
    creation or deletion a crash interrupted. Logs are recovered from their recovery points
    after an unclean shutdown; the clean-shutdown marker is written only after every log of the
    directory was flushed, closed and checkpointed. An I/O error on a log's write path takes its
    whole directory offline (``_log_dir_failed``, Kafka's ``LogDirFailureChannel``): its logs
    refuse reads and writes, nothing more is written there, it gets no marker, and the next
    open recovers it; the other directories go on. A CreateTopic is checked against the
    descriptor budget (``descriptor_budget.py``) and the free space (``preallocate``) before
    anything is written, and removed from the catalogue and the disk if it fails half-way.

    Concurrency: thread-safe. Admin calls (create, delete, alter, describe, delete_records,
    close) are serialised by one lock; :meth:`get_log` is lock-free (a published dict).
    :meth:`run_maintenance` may run in a worker thread while other threads append: it takes the
    manager lock only to snapshot the logs, and each :class:`PartitionLog` guards its own state.
    Blocking: every method does file I/O; call it from an executor, not an event loop.
    """

    def __init__(
        self,
        dirs: list[LogDirState],
        default_config: LogConfig,
        settings: ServerLogSettings,
        time_ms: Callable[[], int],
        open_files_limit: int,
        connections_reserved: int = 0,
    ) -> None:
        """Use :meth:`open`."""
        self._dirs = dirs
        # The descriptors the logs may hold, and the cache that closes inactive segments'
        # files beyond what the partitions leave (descriptor_budget.py, open_segments.py).
        self.descriptor_budget = DescriptorBudget(
            open_files_limit, settings.descriptors_reserved, settings.open_segments_max,
            connections_reserved,
        )
        self.open_segments = OpenSegments(settings.open_segments_max)
        self._dir_by_path = {state.path: state for state in dirs}
        self._default_config = default_config
        self._settings = settings
        self._time_ms = time_ms
        self._lock = threading.RLock()
        self._catalog = TopicCatalog()
        self._logs: dict[TopicPartition, PartitionLog] = {}  # replaced whole, never mutated
        self._log_dir_of: dict[TopicPartition, Path] = {}
        self._closed = False
        # The background jobs (flush.ms, retention, checkpoints, deletions): their schedule,
        # the -delete directories waiting, and the embedded thread (log_maintenance.py).
        self._maintenance = LogMaintenance(
            dirs,
            settings,
            time_ms,
            self._lock,
            lambda: self._logs,
            self._placed_logs,
            lambda: self._closed,
        )
        # The replication-offset-checkpoint entries read at open, for the replication layer to
        # hand to the logs it makes leader or follower (Kafka's Partition.createLog).
        self._checkpointed_high_watermarks: dict[TopicPartition, int] = {}
        self.log_dirs: list[Path] = [state.path for state in dirs]
        self.had_clean_shutdown: dict[Path, bool] = {
            state.path: state.had_clean_shutdown for state in dirs
        }
        self.recovered_segments = 0
        self._counter_lock = threading.Lock()  # loader threads add to recovered_segments
        # One thread for the flushes Kafka runs after each roll: fsyncs never hold up appends.
        self._flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-flusher")
        # The log cleaner (compacted topics): its threads start with start_cleaner.
        self.cleaner = CleanerManager(
            self.log_dirs,
            self._cleanable_logs,
            time_ms,
            threads=settings.cleaner_threads,
            dedupe_buffer_bytes=settings.cleaner_dedupe_buffer_size,
            load_factor=settings.cleaner_io_buffer_load_factor,
            io_buffer_bytes=settings.cleaner_io_buffer_size,
            io_max_bytes_per_second=settings.cleaner_io_max_bytes_per_second,
            backoff_ms=settings.cleaner_backoff_ms,
        )

    # ---------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        log_dirs: Sequence[str | Path],
        *,
        defaults: Mapping[str, str] | None = None,
        time_ms: Callable[[], int] | None = None,
        open_files_limit: int | None = None,
        connections_reserved: int = 0,
    ) -> LogManager:
        """Lock and load ``log_dirs`` (created if missing).

        ``defaults`` are server-level storage settings by Kafka's broker names (``log.*``) or
        topic config names (see ``log_defaults.py``); ``time_ms`` the clock for every log and
        job (default: the wall clock); ``open_files_limit`` the descriptors the process may
        hold (default: its soft ``RLIMIT_NOFILE`` now; a server raises it to the hard limit
        first, see ``descriptor_budget.py``); ``connections_reserved`` the descriptors of it
        the server's connections may take (its connection caps; 0 embedded), which the logs
        never count on.

        Raises:
            InvalidConfigError: no directory, the same directory twice, a bad setting, or
                directories of different clusters (``meta.properties``).
            LogDirLockedError: another process (or manager) holds one of the directories.
            CorruptCheckpointError: every copy of the topic catalogue is corrupt, or a
                ``meta.properties`` is.
            StorageError: a partition cannot be loaded, or lives in two log directories.
            TooManyOpenFilesError: the partitions need more descriptors than the limit (or
                loading them ran out): the message gives the counts and what to raise.
        """
        if isinstance(log_dirs, (str, Path)):
            raise InvalidConfigError(
                f"log_dirs must be a sequence of directories, not one path {str(log_dirs)!r}"
            )
        paths = [Path(directory) for directory in log_dirs]
        if not paths:
            raise InvalidConfigError("at least one log directory is needed")
        default_config, settings = parse_server_defaults(defaults)
        clock = time_ms if time_ms is not None else wall_clock_ms
        resolved = create_log_dirs(paths)
        locks: list[LogDirLock] = []
        manager: LogManager | None = None
        try:
            dirs = lock_log_dirs(resolved, settings.node_id, locks)
            if open_files_limit is None:
                open_files_limit = read_open_files_limit()[0]
            manager = cls(dirs, default_config, settings, clock, open_files_limit,
                          connections_reserved)
            manager._load()
        except BaseException:
            if manager is not None:
                manager._close_logs_quietly()
            for lock in locks:
                lock.release()
            raise
        return manager

    def _load(self) -> None:
        """Read the catalogue and load every partition directory (Kafka's ``loadLogs``)."""
        catalog = read_catalog(self.log_dirs)
        now_ms = self._time_ms()
        found, deleted = scan_log_dirs(self._dirs, INTERNAL_TOPICS)
        for directory in deleted:
            self._maintenance.schedule_dir_removal(
                now_ms + self._default_config.file_delete_delay_ms, directory
            )
        for name in sorted(INTERNAL_TOPICS & catalog.topics.keys()):
            # A topic created before its name was reserved: its owner opens that directory now.
            log.warning("ignoring topic %s of the catalogue: the name is reserved for an "
                        "internal topic", name)
            catalog = catalog.without_topic(name)
        catalog = reconcile_catalog(catalog, found, self.log_dirs, self._rename_for_deletion)
        self._catalog = catalog
        partitions = sum(entry.partitions for entry in catalog.topics.values())
        budget = self.descriptor_budget
        budget.check_startup(partitions)
        # Loading opens every segment's .log once: the cache keeps what the budget leaves.
        self.open_segments.set_capacity(budget.open_segments_capacity(partitions))
        try:
            self._load_logs(catalog, found)
        except StorageError as exc:
            if ran_out_of_descriptors(exc) is None:
                raise
            raise TooManyOpenFilesError(
                budget.shortage(partitions, count_segments(found.items()), ran_out=True)
            ) from exc
        self._update_open_segments_capacity()
        log.info(
            "file descriptors: RLIMIT_NOFILE %d, %d for connections, %d reserved "
            "(log.descriptors.reserved), %d per partition for %d partitions (room for %d); up "
            "to %d inactive segments kept open (log.open.segments.max %d)", budget.limit,
            budget.connections, budget.reserved,
            DESCRIPTORS_PER_PARTITION, partitions, budget.partitions_max,
            self.open_segments.capacity, budget.open_segments_max,
        )
        for state in self._dirs:
            state.fully_loaded = True
        self.cleaner.load_checkpoints()

    def _load_logs(self, catalog: TopicCatalog, found: dict[TopicPartition, Path]) -> None:
        """Open every partition log; create the missing ones (``log_loading.py``). On a
        failure the logs that opened are kept, for :meth:`_close_logs_quietly` to close."""
        loaded = load_logs(
            self._dirs, catalog, found, self._config_for, self._open_log,
            max(1, self._settings.recovery_threads_per_data_dir * len(self._dirs)),
        )
        self._checkpointed_high_watermarks.update(loaded.high_watermarks)
        self._logs = loaded.logs
        self._log_dir_of = loaded.log_dir_of
        if loaded.first_error is not None:
            raise loaded.first_error

    def _open_log(
        self,
        directory: Path,
        config: LogConfig,
        *,
        had_clean_shutdown: bool,
        recovery_point: int | None,
        log_start_offset: int | None,
    ) -> PartitionLog:
        """Load one partition log (creating it if needed); see ``recovery.py``."""
        partition_log = PartitionLog.open(
            directory,
            config,
            time_ms=self._time_ms,
            flush_scheduler=self._schedule_flush,
            had_clean_shutdown=had_clean_shutdown,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            producer_id_expiration_ms=self._settings.producer_id_expiration_ms,
            open_segments=self.open_segments,
            io_failure_handler=self._log_dir_failed,
        )
        with self._counter_lock:
            self.recovered_segments += partition_log.recovered_segments
        return partition_log

    def _schedule_flush(self, flush: Callable[[], None]) -> None:
        """Run a log's post-roll flush (Kafka LocalLog.roll; docs/kafka-behaviours.md#roll) in the
        flusher thread, off the append path."""

        def run() -> None:
            try:
                flush()
            except Exception:
                log.exception("flush after a segment roll failed")

        # After shutdown the executor refuses work: close() flushes everything anyway.
        with contextlib.suppress(RuntimeError):
            self._flusher.submit(run)

    def _log_dir_failed(self, failed_log: PartitionLog, exc: BaseException) -> None:
        """A log had an I/O error on a write path (it is offline already): take its whole
        log directory offline, as Kafka's ``LogDirFailureChannel`` and
        ``ReplicaManager.handleLogDirFailure`` do. Its partitions refuse reads and writes with
        LogDirOfflineError until the next start, which recovers them (the directory gets no
        clean-shutdown marker); the other directories go on serving.

        Called under the failing log's lock, from any thread: sets flags only, takes no lock
        (another thread may hold the manager's lock and wait for that log's).
        """
        logs = self._logs  # a published dict, never mutated
        log_dir_of = self._log_dir_of
        directory = next(
            (log_dir_of.get(tp) for tp, lg in logs.items() if lg is failed_log), None
        )
        state = self._dir_by_path.get(directory) if directory is not None else None
        if state is None or state.offline:
            return
        state.offline = True
        in_dir = [lg for tp, lg in logs.items() if log_dir_of.get(tp) == directory]
        for partition_log in in_dir:
            partition_log.take_offline()
        log.error(
            "log directory %s is offline after an I/O error in %s (%s): its %d partitions "
            "refuse reads and writes until the server restarts and recovers them",
            directory, failed_log.directory.name, exc, len(in_dir),
        )
        if all(other.offline for other in self._dirs):
            log.error("every log directory is offline: no partition can be served")

    @property
    def offline_log_dirs(self) -> list[Path]:
        """The log directories taken offline by an I/O error."""
        return [state.path for state in self._dirs if state.offline]

    def _online_log_dirs(self) -> list[Path]:
        """The log directories still online; the catalogue is written to these.

        Raises:
            StorageIOError: every log directory is offline.
        """
        online = [state.path for state in self._dirs if not state.offline]
        if not online:
            raise StorageIOError("every log directory is offline after an I/O error")
        return online

    def _update_open_segments_capacity(self) -> None:
        """Give the open segments cache what the partitions leave of the descriptor budget."""
        capacity = self.descriptor_budget.open_segments_capacity(len(self._logs))
        if capacity != self.open_segments.capacity:
            if capacity < self.descriptor_budget.open_segments_max:
                log.warning(
                    "keeping at most %d inactive segments open (log.open.segments.max is %d): "
                    "%d partitions leave no more of RLIMIT_NOFILE %d", capacity,
                    self.descriptor_budget.open_segments_max, len(self._logs),
                    self.descriptor_budget.limit,
                )
            self.open_segments.set_capacity(capacity)

    # ---------------------------------------------------------------- topics

    def _config_for(self, entry: TopicEntry) -> LogConfig:
        return LogConfig.from_mapping(entry.configs, defaults=self._default_config)

    @property
    def default_config(self) -> LogConfig:
        """The topic config defaults of this server."""
        return self._default_config

    @property
    def settings(self) -> ServerLogSettings:
        return self._settings

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None, *,
        internal: bool = False, validate_only: bool = False,
    ) -> TopicDescription:
        """Create ``name`` with ``partitions`` partitions and the config overrides ``configs``.

        ``internal``: the server creates one of ``SERVER_WRITTEN_TOPICS`` for itself (their
        names are refused otherwise, as Kafka refuses clients' creation of internal topics).
        ``validate_only``: every check below, nothing written (Kafka's CreateTopics
        ``validate_only``); the answer describes the topic as it would be, its partitions
        empty, with ``log_dir`` "".

        Each partition goes to the log directory holding the fewest partitions (ties: the
        first in ``log_dirs``), as Kafka's ``nextLogDirs``.

        Raises:
            InvalidTopicError: a bad name, an internal topic's name (``INTERNAL_TOPICS``, or one
                colliding with it), a partition count below 1 or above
                ``log.topic.partitions.max``, or a name that collides with an existing topic
                once ``.`` and ``_`` are unified.
            TopicAlreadyExistsError: the topic exists.
            InvalidConfigError: an unknown config name or a bad value.
            InsufficientSpaceError: ``preallocate`` is set and a log directory has not the
                space for the partitions' first segments; nothing was written.
            ResourceLimitExceededError: the partitions' active segments would not fit in the
                open files limit beside the existing ones (``descriptor_budget.py``); nothing
                was written.
            StorageIOError: a directory or file could not be created: the topic was removed
                again, from the catalogue and the disk (``_roll_back_creation``); if that
                failed too, the error says so and the next start completes the removal.
        """
        overrides = self.check_new_topic(name, partitions, configs, internal=internal)
        with self._lock:
            self._ensure_open()
            existing_entry = self._catalog.topics.get(name)
            if existing_entry is not None and existing_entry.is_deleting:
                raise TopicAlreadyExistsError(
                    f"topic {name} is still being deleted (its removal failed; the server "
                    "completes it at its next start)"
                )
            if existing_entry is not None:
                raise TopicAlreadyExistsError(f"topic {name} already exists")
            key = topic_collision_key(name)
            for existing in self._catalog.topics:
                if topic_collision_key(existing) == key:
                    raise InvalidTopicError(
                        f"topic {name} collides with existing topic {existing}: names that "
                        "differ only in '.' versus '_' are not allowed together"
                    )
            self.descriptor_budget.check_new_partitions(name, len(self._logs), partitions)
            entry = TopicEntry(name, partitions, overrides)
            config = self._config_for(entry)
            placement = self._place_partitions(partitions)
            if config.preallocate:
                # Each partition's first segment is preallocated to segment.bytes at once.
                for directory in set(placement):
                    count = placement.count(directory)
                    space.check_free_space(
                        directory, count * config.segment_bytes,
                        f"creating topic {name} ({count:,} partitions of segment.bytes "
                        f"{config.segment_bytes:,} in one log directory)",
                    )
            if validate_only:
                return TopicDescription(
                    name, config.to_mapping(),
                    [PartitionDescription(p, 0, 0, 0, 0, "", -1) for p in range(partitions)],
                    tuple(sorted(overrides)),
                )
            # The catalogue first: a crash after it leaves a topic whose missing partition
            # directories the next open creates. In memory only once every log opened.
            pending = self._catalog.with_topic(entry)
            write_catalog(self._online_log_dirs(), pending)
            logs = dict(self._logs)
            log_dir_of = dict(self._log_dir_of)
            try:
                self._open_new_partitions(name, config, placement, 0, logs, log_dir_of)
            except BaseException as exc:
                log.exception("failed to create topic %s; removing it again", name)
                created = {tp: lg for tp, lg in logs.items() if tp[0] == name}
                self._roll_back_creation(pending, name, partitions, created, exc)
                raise
            self._catalog = pending
            self._logs, self._log_dir_of = logs, log_dir_of
            self._update_open_segments_capacity()
            log.info("created topic %s with %d partitions and configs %s", name, partitions,
                     overrides)
            return self._describe_locked(name)

    def create_partitions(
        self, name: str, count: int, *, validate_only: bool = False
    ) -> TopicDescription:
        """Grow topic ``name`` to ``count`` partitions (Kafka's CreatePartitions); its
        description. The new partitions are empty, placed as :meth:`create_topic` places a new
        topic's, with the topic's configs. Existing partitions are untouched, so a key's records
        written before go on being read where they are; after, the producers' partitioner
        (hash modulo the count) may send the key elsewhere, as in Kafka. ``validate_only``:
        every check, nothing written; the answer is the topic as it is.

        Crash behaviour: the catalogue is written (and fsynced) with the new count first, then
        the new partitions' directories are created; a crash in between leaves a catalogue
        whose missing partition directories the next open creates, so the grow completes.

        Raises:
            UnknownTopicOrPartitionError: no such topic (or one being deleted).
            InvalidPartitionsError: ``count`` is not above the topic's partition count.
            InvalidTopicError: ``count`` above ``log.topic.partitions.max``.
            ResourceLimitExceededError: the new partitions' active segments would not fit in
                the open files limit (nothing was written).
            StorageIOError: a directory or file could not be created: the new partitions were
                removed again and the topic keeps its count; if that failed too, the error
                says so and the next start completes the grow.
        """
        if isinstance(count, bool) or not isinstance(count, int):
            raise InvalidPartitionsError(f"partition count of topic {name} must be an int, "
                                         f"not {count!r}")
        with self._lock:
            self._ensure_open()
            entry = self._catalog.topics.get(name)
            if entry is None or entry.is_deleting:
                raise UnknownTopicOrPartitionError(f"topic {name} does not exist")
            current = entry.partitions
            if count <= current:
                raise InvalidPartitionsError(
                    f"topic {name} has {current} partitions and cannot have {count}: "
                    f"partitions can only be added (ask for more than {current})"
                )
            limit = self._settings.topic_partitions_max
            if count > limit:
                raise InvalidTopicError(
                    f"topic {name} cannot have {count} partitions: the count must be between 1 "
                    f"and {limit} (log.topic.partitions.max)"
                )
            partition_dir_name(name, count - 1)  # the longest directory name must fit
            added = count - current
            self.descriptor_budget.check_new_partitions(name, len(self._logs), added)
            if validate_only:
                return self._describe_locked(name)
            grown = TopicEntry(name, count, dict(entry.configs))
            config = self._config_for(grown)
            placement = self._place_partitions(added)
            pending = self._catalog.with_topic(grown)
            write_catalog(self._online_log_dirs(), pending)
            logs = dict(self._logs)
            log_dir_of = dict(self._log_dir_of)
            try:
                self._open_new_partitions(name, config, placement, current, logs,
                                          log_dir_of)
            except BaseException as exc:
                log.exception("failed to add partitions to topic %s; removing them again", name)
                self._roll_back_partitions(pending, entry, current, count, logs, exc)
                raise
            self._catalog = pending
            self._logs, self._log_dir_of = logs, log_dir_of
            self._update_open_segments_capacity()
            log.info("topic %s grown from %d to %d partitions", name, current, count)
            return self._describe_locked(name)

    def _open_new_partitions(
        self,
        name: str,
        config: LogConfig,
        placement: Sequence[Path],
        first: int,
        logs: dict[TopicPartition, PartitionLog],
        log_dir_of: dict[TopicPartition, Path],
    ) -> None:
        """Create and open the empty partitions ``first``, ``first + 1`` ... of topic ``name``,
        one in each directory of ``placement``, into ``logs`` and ``log_dir_of`` (the caller's
        copies, published only once all are there), then fsync those directories so that the
        new partition directories are durable. Blocking.

        Raises:
            StorageIOError: a directory or file could not be created (the caller rolls back).
        """
        for partition, directory in enumerate(placement, start=first):
            logs[(name, partition)] = self._open_log(
                directory / partition_dir_name(name, partition),
                config,
                had_clean_shutdown=True,
                recovery_point=None,
                log_start_offset=None,
            )
            log_dir_of[(name, partition)] = directory
        for directory in set(placement):
            fsync_directory(directory)

    def _roll_back_partitions(
        self,
        pending: TopicCatalog,
        entry: TopicEntry,
        current: int,
        count: int,
        logs: dict[TopicPartition, PartitionLog],
        cause: BaseException,
    ) -> None:
        """Remove the partitions ``current`` .. ``count - 1`` of a failed
        :meth:`create_partitions` and write the catalogue with the old ``entry`` back.

        Raises:
            StorageIOError: that failed too (chained to ``cause``); the catalogue on disk may
                hold the new count, and the next start creates the missing partitions.
        """
        name = entry.name
        for partition in range(current, count):
            opened = logs.get((name, partition))
            if opened is not None:
                opened.close_for_deletion()
        try:
            renamed_in: set[Path] = set()
            for state in self._dirs:
                for partition in range(current, count):
                    if (state.path / partition_dir_name(name, partition)).is_dir():
                        self._rename_for_deletion(state.path, name, partition)
                        renamed_in.add(state.path)
            for directory in renamed_in:
                fsync_directory(directory)
            restored = pending.with_topic(entry)
            write_catalog(self._online_log_dirs(), restored)
        except Exception as rollback_error:
            raise StorageIOError(
                f"adding partitions to topic {name} failed ({cause}), and so did removing them "
                f"again ({rollback_error}): the next start completes the grow to {count}"
            ) from rollback_error
        self._catalog = restored

    def check_new_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None, *,
        internal: bool = False,
    ) -> dict[str, str]:
        """What :meth:`create_topic` checks before it looks at the existing topics: the name,
        the partition count and the configs. Returns the config overrides in Kafka's canonical
        string form. Touches nothing; the cluster's CreateTopic (server/cluster/topic_admin.py)
        runs it before it writes a topic to etcd, so that both paths refuse the same requests.

        Raises:
            InvalidTopicError, InvalidConfigError: as :meth:`create_topic`.
        """
        validate_topic_name(name)
        if internal:
            assert name in SERVER_WRITTEN_TOPICS, name
        elif topic_collision_key(name) in _INTERNAL_COLLISION_KEYS:
            raise InvalidTopicError(f"topic {name} is reserved for the server's internal use")
        if isinstance(partitions, bool) or not isinstance(partitions, int):
            raise InvalidTopicError(f"partition count of topic {name} must be an int, "
                                    f"not {partitions!r}")
        limit = self._settings.topic_partitions_max
        if not 1 <= partitions <= limit:
            raise InvalidTopicError(
                f"topic {name} cannot have {partitions} partitions: the count must be between 1 "
                f"and {limit} (log.topic.partitions.max)"
            )
        partition_dir_name(name, partitions - 1)  # the longest directory name must fit
        return self._normalise_overrides(name, dict(configs or {}))

    def effective_configs(self, overrides: Mapping[str, str]) -> dict[str, str]:
        """Every config of a topic with ``overrides`` (checked ones): this server's defaults
        for the others, as :meth:`describe_topic` reports them."""
        return LogConfig.from_mapping(dict(overrides), defaults=self._default_config).to_mapping()

    def _place_partitions(self, partitions: int) -> list[Path]:
        """The log directory of each new partition: the online one holding the fewest
        partitions at the time (ties: the first in ``log_dirs``), as Kafka's ``nextLogDirs``.

        Raises:
            StorageIOError: every log directory is offline.
        """
        online = self._online_log_dirs()
        counts = {path: 0 for path in online}
        for directory in self._log_dir_of.values():
            if directory in counts:
                counts[directory] += 1
        placement = []
        for _ in range(partitions):
            directory = min(counts, key=lambda path: (counts[path], self.log_dirs.index(path)))
            counts[directory] += 1
            placement.append(directory)
        return placement

    def _roll_back_creation(
        self,
        pending: TopicCatalog,
        name: str,
        partitions: int,
        created: dict[TopicPartition, PartitionLog],
        cause: BaseException,
    ) -> None:
        """Remove a topic whose creation failed, from the disk and the catalogue.

        The logs it opened are closed first, without writing (which also gives back the
        descriptors a creation that ran out of them took); then the catalogue marks it
        ``deleting`` (``pending`` is the catalogue written with it), every partition directory it may have created in any log directory
        (opened or not: a failed open may leave its directory) is renamed ``-delete``, and the
        catalogue drops it. A crash in between leaves a ``deleting`` topic, whose removal the
        next open completes. The live logs and the in-memory catalogue never saw it.

        Raises:
            StorageIOError: the removal failed (chained to ``cause``): the catalogue may still
                hold the topic as ``deleting``, and the next start completes the removal.
        """
        for partition_log in created.values():
            partition_log.close_for_deletion()
        deleting = pending.with_topic(
            TopicEntry(name, partitions, dict(pending.topics[name].configs), STATE_DELETING)
        )
        try:
            write_catalog(self._online_log_dirs(), deleting)
            renamed_in: set[Path] = set()
            for state in self._dirs:
                for partition in range(partitions):
                    if (state.path / partition_dir_name(name, partition)).is_dir():
                        self._rename_for_deletion(state.path, name, partition)
                        renamed_in.add(state.path)
            for directory in renamed_in:
                fsync_directory(directory)
            removed = deleting.without_topic(name)
            write_catalog(self._online_log_dirs(), removed)
        except Exception as rollback_error:
            # The newest catalogue the disk may hold: the next open completes the removal.
            self._catalog = deleting
            raise StorageIOError(
                f"creating topic {name} failed ({cause}), and so did removing it again "
                f"({rollback_error}): the next start completes the removal"
            ) from rollback_error
        self._catalog = removed
        log.info("removed topic %s, whose creation failed", name)

    def _normalise_overrides(self, topic: str, configs: dict[str, str]) -> dict[str, str]:
        """Validate overrides and return them in Kafka's canonical string form."""
        for key, value in configs.items():
            if not isinstance(key, str) or not isinstance(value, (str, int)):
                raise InvalidConfigError(
                    f"config {key!r} of topic {topic}: names and values must be strings"
                )
        config = LogConfig.from_mapping(configs, defaults=self._default_config)
        canonical = config.to_mapping()
        return {key: canonical[key] for key in sorted(configs)}

    def delete_topic(self, name: str) -> None:
        """Delete ``name``: its partition directories are renamed ``-delete`` and removed
        ``file.delete.delay.ms`` (the server default) later by :meth:`run_maintenance`.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            StorageIOError: a directory could not be renamed (the next open completes it).
        """
        with self._lock:
            self._ensure_open()
            if name not in self._catalog.topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            self._delete_topic_locked(name)
            self._update_open_segments_capacity()
            log.info("deleted topic %s", name)

    def _delete_topic_locked(self, name: str) -> None:
        entry = self._catalog.topics[name]
        catalog = self._catalog.with_topic(
            TopicEntry(entry.name, entry.partitions, dict(entry.configs), STATE_DELETING)
        )
        write_catalog(self._online_log_dirs(), catalog)
        self._catalog = catalog
        doomed = {tp: log_ for tp, log_ in self._logs.items() if tp[0] == name}
        self._logs = {tp: log_ for tp, log_ in self._logs.items() if tp[0] != name}
        directories = {tp: self._log_dir_of[tp] for tp in doomed}
        self._log_dir_of = {tp: d for tp, d in self._log_dir_of.items() if tp[0] != name}
        for topic_partition in sorted(doomed):
            # Kafka's abortAndPauseCleaning: a cleaning stops before the files go.
            self.cleaner.abort_and_pause(topic_partition)
        for topic_partition, partition_log in sorted(doomed.items()):
            # Closed without a flush, as Kafka does: its files are about to go.
            partition_log.close_for_deletion()
            self._rename_for_deletion(directories[topic_partition], *topic_partition)
            self.cleaner.forget(topic_partition, directories[topic_partition])
            self.cleaner.resume(topic_partition)
        for directory in set(directories.values()):
            fsync_directory(directory)
        catalog = self._catalog.without_topic(name)
        write_catalog(self._online_log_dirs(), catalog)
        self._catalog = catalog

    def _rename_for_deletion(self, log_dir: Path, topic: str, partition: int) -> None:
        source = log_dir / partition_dir_name(topic, partition)
        target = log_dir / deleted_dir_name(topic, partition)
        try:
            os.rename(source, target)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageIOError(
                f"cannot rename partition directory {source} to {target.name}: {exc}"
            ) from exc
        self._maintenance.schedule_dir_removal(
            self._time_ms() + self._default_config.file_delete_delay_ms, target
        )

    def has_topic(self, name: str) -> bool:
        """Whether topic ``name`` exists (a topic being deleted does not). O(1)."""
        entry = self._catalog.topics.get(name)  # replaced whole under the lock: a safe read
        return entry is not None and not entry.is_deleting

    def list_topics(self) -> list[TopicDescription]:
        """Every topic, by name."""
        with self._lock:
            self._ensure_open()
            topics = self._catalog.topics
            return [
                self._describe_locked(name) for name in sorted(topics)
                if not topics[name].is_deleting
            ]

    def describe_topic(self, name: str) -> TopicDescription:
        """One topic: effective configs and a snapshot of every partition.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        with self._lock:
            self._ensure_open()
            entry = self._catalog.topics.get(name)
            if entry is None or entry.is_deleting:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            return self._describe_locked(name)

    def _describe_locked(self, name: str) -> TopicDescription:
        entry = self._catalog.topics[name]
        partitions = []
        for partition in range(entry.partitions):
            partition_log = self._logs.get((name, partition))
            if partition_log is None:
                continue
            partitions.append(describe_partition(
                partition, partition_log, self._log_dir_of[(name, partition)]
            ))
        return TopicDescription(name, self._config_for(entry).to_mapping(), partitions,
                                tuple(sorted(entry.configs)))

    def alter_topic_configs(
        self, name: str, set: Mapping[str, str], delete: Iterable[str] = (), *,
        validate_only: bool = False,
    ) -> TopicDescription:
        """Set and delete (back to the server default) config overrides of ``name``.
        ``validate_only``: every check, nothing changed; the topic as it would be.

        The new configuration applies to every partition at once: existing segments keep
        their files, new segments and every later append, roll, flush and retention decision
        follow it.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            InvalidConfigError: an unknown name (in ``set`` or ``delete``), a bad value, or a
                name both set and deleted.
        """
        set_configs = dict(set)
        delete_names = list(delete)
        for key in delete_names:
            if key not in TOPIC_CONFIG_NAMES:
                raise InvalidConfigError(
                    f"cannot delete unknown config {key!r} of topic {name}; known configs: "
                    + ", ".join(TOPIC_CONFIG_NAMES)
                )
            if key in set_configs:
                raise InvalidConfigError(
                    f"config {key!r} of topic {name} is both set and deleted"
                )
        with self._lock:
            self._ensure_open()
            entry = self._catalog.topics.get(name)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            overrides = {k: v for k, v in entry.configs.items() if k not in delete_names}
            overrides.update(set_configs)
            overrides = self._normalise_overrides(name, overrides)
            new_entry = TopicEntry(name, entry.partitions, overrides, entry.state)
            config = self._config_for(new_entry)
            if validate_only:
                current = self._describe_locked(name)
                return TopicDescription(name, config.to_mapping(), current.partitions,
                                        tuple(sorted(overrides)))
            catalog = self._catalog.with_topic(new_entry)
            write_catalog(self._online_log_dirs(), catalog)
            self._catalog = catalog
            for partition in range(entry.partitions):
                self._apply_config((name, partition), config)
            log.info("altered configs of topic %s: now %s", name, overrides)
            return self._describe_locked(name)

    def _apply_config(self, topic_partition: TopicPartition, config: LogConfig) -> None:
        """Give a live log its new config (Kafka's ``UnifiedLog.updateConfig``)."""
        partition_log = self._logs.get(topic_partition)
        if partition_log is None:
            return
        partition_log.update_config(config)

    # ---------------------------------------------------------------- partitions

    def get_log(self, topic: str, partition: int) -> PartitionLog:
        """The log of one partition. Lock-free.

        Raises:
            UnknownTopicOrPartitionError: no such topic, or no such partition of it.
            LogClosedError: the manager is closed.
        """
        partition_log = self._logs.get((topic, partition))
        if partition_log is not None:
            return partition_log
        if self._closed:
            raise LogClosedError("the log manager is closed")
        entry = self._catalog.topics.get(topic) if isinstance(topic, str) else None
        if entry is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        raise UnknownTopicOrPartitionError(
            f"topic {topic} has partitions 0 .. {entry.partitions - 1}; there is no partition "
            f"{partition!r}"
        )

    def log_dir_of(self, topic: str, partition: int) -> Path:
        """The log directory holding a partition.

        Raises:
            UnknownTopicOrPartitionError: no such partition.
        """
        self.get_log(topic, partition)
        return self._log_dir_of[(topic, partition)]

    def logs(self) -> dict[TopicPartition, PartitionLog]:
        """A snapshot of every open log by (topic, partition)."""
        return dict(self._logs)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Move the log start offset of a partition up to ``before_offset`` (Kafka
        UnifiedLog.maybeIncrementLogStartOffset; docs/kafka-behaviours.md#retention).

        ``-1`` means the high watermark (the log end offset: stratalog has one replica).
        Records below the new start become unreadable at once; segments wholly below it are
        deleted by the next retention pass. Returns the new log start offset (never lower than
        the old one).

        Raises:
            UnknownTopicOrPartitionError: no such partition.
            OffsetOutOfRangeError: ``before_offset`` above the log end offset, or below -1.
        """
        partition_log = self.get_log(topic, partition)
        end_offset = partition_log.log_end_offset
        target = end_offset if before_offset == -1 else before_offset
        if target < 0 or target > end_offset:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {topic}-{partition} before offset {before_offset}: "
                f"the log holds offsets [{partition_log.log_start_offset}, {end_offset})",
                log_start_offset=partition_log.log_start_offset,
                log_end_offset=end_offset,
            )
        partition_log.maybe_increment_log_start_offset(target)
        return partition_log.log_start_offset

    # ---------------------------------------------------------------- the log cleaner

    def clean_now(self, topic: str, partition: int) -> CleaningResult:
        """Clean one compacted partition once now, whatever its dirty ratio.

        Still never cleans the active segment, nor records younger than
        ``min.compaction.lag.ms``, nor from the first unstable offset (an open transaction)
        on. Blocking (reads and rewrites the cleanable section): call it from a thread. Waits
        for a cleaner thread cleaning the same partition to finish first.

        Raises:
            UnknownTopicOrPartitionError: no such partition.
            LogNotCompactedError: the topic's ``cleanup.policy`` does not contain ``compact``.
            CleaningAbortedError: the log was truncated, deleted or closed meanwhile.
        """
        partition_log = self.get_log(topic, partition)
        return self.cleaner.clean_now(
            (topic, partition), partition_log, self._log_dir_of[(topic, partition)]
        )

    def cleaner_status(self, topic: str, partition: int) -> CleanerPartitionStatus:
        """Where the cleaner stands on one partition (any cleanup policy; a log that is not
        compacted reports its whole non-active part as dirty, never cleaned).

        Raises:
            UnknownTopicOrPartitionError: no such partition.
        """
        partition_log = self.get_log(topic, partition)
        return self.cleaner.status((topic, partition), partition_log)

    def cleaner_stats(self) -> CleanerStats:
        """Cumulative figures of every cleaning since this manager opened."""
        return self.cleaner.stats()

    def start_cleaner(self) -> bool:
        """Start the ``log.cleaner.threads`` cleaner threads unless ``log.cleaner.enable`` is
        false (or they run already); they stop on :meth:`close`. Returns whether they run.
        :meth:`start_background` starts them too; a server that drives
        :meth:`run_maintenance` itself calls this."""
        with self._lock:
            self._ensure_open()
            if not self._settings.cleaner_enable:
                return False
            self.cleaner.start()
            return True

    def _cleanable_logs(self) -> dict[TopicPartition, tuple[PartitionLog, Path]]:
        """The cleaner's view: every live log and its log directory (offline ones left out)."""
        logs = self._logs
        dirs = self._log_dir_of
        offline = {state.path for state in self._dirs if state.offline}
        return {
            tp: (partition_log, dirs[tp]) for tp, partition_log in logs.items()
            if tp in dirs and dirs[tp] not in offline
        }

    # ---------------------------------------------------------------- background work

    def checkpointed_high_watermark(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark as the ``replication-offset-checkpoint`` of its log
        directory held at open (None: not there). The log itself does not track a high
        watermark until told (:meth:`PartitionLog.update_high_watermark`): the replication
        layer passes it this value when it makes the replica a leader or follower, as Kafka's
        ``Partition.createLogIfNotExists`` does."""
        return self._checkpointed_high_watermarks.get((topic, partition))

    def run_maintenance(self, now_ms: int | None = None) -> MaintenanceReport:
        """One bounded pass of every background job that is due at ``now_ms``.

        Jobs: ``flush.ms`` flushes (every log at most once), retention (every
        ``log.retention.check.interval.ms``), the two checkpoints (their intervals), removal
        of ``-delete`` directories whose delay passed (at most ``log.delete.dirs.per.pass.max``).
        A failing partition is logged and reported; the pass goes on. Passes do not overlap
        (a second caller waits). Safe to call from a worker thread while others append.
        (:meth:`LogMaintenance.run`.)
        """
        return self._maintenance.run(now_ms)

    def _placed_logs(self) -> list[tuple[TopicPartition, PartitionLog, Path]]:
        """Every open log with its log directory, as of one moment (for the checkpoints)."""
        with self._lock:
            return [
                (tp, partition_log, self._log_dir_of[tp])
                for tp, partition_log in self._logs.items()
            ]

    @property
    def pending_deleted_dirs(self) -> list[Path]:
        """The ``-delete`` directories not removed yet."""
        return self._maintenance.pending_deleted_dirs

    def start_background(self, interval_ms: int = DEFAULT_MAINTENANCE_INTERVAL_MS) -> None:
        """Run :meth:`run_maintenance` every ``interval_ms`` in a daemon thread until
        :meth:`close` (for embedded use; a server drives it from its own task instead).

        Raises:
            ValueError: ``interval_ms`` below 1.
            StorageError: already started, or the manager is closed.
        """
        if interval_ms < 1:
            raise ValueError(f"interval_ms must be at least 1, got {interval_ms}")
        with self._lock:
            self._ensure_open()
            self._maintenance.start_background(interval_ms, lambda: self.run_maintenance())
        self.start_cleaner()

    def stop_background(self) -> None:
        """Stop the background thread (if running) and wait for its pass to end."""
        self._maintenance.stop_background()

    # ---------------------------------------------------------------- closing

    def close(self) -> None:
        """Stop background work, flush and close every log, write both checkpoints and the
        clean-shutdown markers, unlock the directories. Idempotent.

        A directory gets its marker only if every log in it closed without error (Kafka
        LogManager.shutdown; docs/kafka-behaviours.md#clean-shutdown); the first error is raised
        after everything else was done. An offline directory's logs are closed without writing
        anything, and it gets no checkpoint and no marker: the next start recovers it (not an error
        of the close: it was reported when it went offline).
        """
        self.stop_background()
        self.cleaner.shutdown()
        with self._maintenance.lock, self._lock:
            if self._closed:
                return
            self._closed = True
            self._flusher.shutdown(wait=True)
            first_error: BaseException | None = None
            failed_dirs: set[Path] = set()
            for topic_partition, partition_log in sorted(self._logs.items()):
                if partition_log.is_offline:
                    partition_log.close_for_deletion()  # closes without writing
                    failed_dirs.add(self._log_dir_of[topic_partition])
                    continue
                try:
                    partition_log.close()
                except BaseException as exc:
                    log.exception("closing %s failed", partition_log.directory)
                    failed_dirs.add(self._log_dir_of[topic_partition])
                    first_error = first_error or exc
            report = MaintenanceReport(now_ms=self._time_ms())
            failed_dirs |= self._maintenance.write_checkpoints(report.now_ms, report, force=True)
            offline = set(self.offline_log_dirs)
            if offline:
                log.warning("not closing %s cleanly: offline after an I/O error",
                            ", ".join(str(path) for path in sorted(offline)))
            if report.errors:
                first_error = first_error or StorageIOError("; ".join(report.errors))
            for state in self._dirs:
                clean = state.path not in failed_dirs and state.fully_loaded
                try:
                    if clean:
                        write_marker(state.path)
                    else:
                        log.warning("not writing the clean-shutdown marker of %s: the next "
                                    "start recovers it", state.path)
                except StorageError as exc:
                    first_error = first_error or exc
                state.lock.release()
            self._logs = {}
            if first_error is not None:
                raise first_error
            log.info("closed the log manager of %s",
                     ", ".join(str(path) for path in self.log_dirs))

    def _close_logs_quietly(self) -> None:
        """After a failed open: close what was opened, write no marker."""
        for partition_log in self._logs.values():
            try:
                partition_log.close()
            except Exception:
                log.warning("closing %s failed", partition_log.directory, exc_info=True)
        self._logs = {}
        self._closed = True
        self._flusher.shutdown(wait=True)
        self.cleaner.shutdown()

    @property
    def is_closed(self) -> bool:
        return self._closed

    def _ensure_open(self) -> None:
        if self._closed:
            raise LogClosedError("the log manager is closed")

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"LogManager(log_dirs={[str(path) for path in self.log_dirs]}, "
            f"topics={len(self._catalog.topics)}, partitions={len(self._logs)})"
        )


# -------------------------------------------------------------------- helpers
