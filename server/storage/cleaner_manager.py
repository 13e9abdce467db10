"""The log cleaner's threads and bookkeeping: which compacted log to clean next, and how far
each one is cleaned.

Kafka's ``LogCleaner`` (the threads, ``core/src/main/scala/kafka/log/LogCleaner.scala``) and
``LogCleanerManager`` (the state, ``core/src/main/scala/kafka/log/LogCleanerManager.scala``).
Every ``log.cleaner.backoff.ms`` that it found nothing to do, each of ``log.cleaner.threads``
threads picks the *dirtiest* compacted partition (the largest dirty ratio, dirty bytes over
cleaned + dirty bytes, :func:`~.cleaner.cleanable_range`) among those over their
``min.cleanable.dirty.ratio`` or past their ``max.compaction.lag.ms``, marks it in progress,
cleans it once (:class:`~.cleaner.Cleaner`: one round, as far as its offset map reaches) and
records the new first dirty offset in the log directory's checkpoint::

    <log dir>/cleaner-offset-checkpoint      records/offset_checkpoint.py's format:
    0                                        version
    2                                        entries
    changelog 0 81920                        <topic> <partition> <first dirty offset>
    changelog 1 0

A partition is in one of three states (Kafka's ``LogCleaningInProgress``/``Paused``):
idle, *in progress* (a thread or :meth:`CleanerManager.clean_now` holds it) or *paused*
(:meth:`CleanerManager.abort_and_pause`: a topic being deleted; a cleaning in progress is told
to stop at its next segment and waited for). The offset map's memory,
``log.cleaner.dedupe.buffer.size``, is split between the threads (and one more map, of the
same size, is made for :meth:`CleanerManager.clean_now` on first use).

Crash behaviour: the checkpoint is written (atomically) after a cleaning's last swap; a crash
before that leaves the old first dirty offset, and the next cleaning redoes the round (the
cleaned segments are simply cleaned again). An unreadable checkpoint is logged and taken as
empty: every compacted log is then cleaned from its start again, which is only work.

Concurrency: thread-safe; one lock guards the states and checkpoints, and a condition wakes
waiters when a cleaning ends. Cleaning itself runs outside it (see ``cleaner.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .checkpoints import OffsetCheckpointFile
from .cleaner import CleanableRange, Cleaner, CleaningResult, cleanable_range
from .errors import (
    CleaningAbortedError,
    CorruptCheckpointError,
    LogNotCompactedError,
    StorageError,
)
from .offset_map import OffsetMap
from .partition_log import PartitionLog
from .throttler import UNLIMITED, Throttler

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT_FILE",
    "CleanerManager",
    "CleanerPartitionStatus",
    "CleanerStats",
]

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"

TopicPartition = tuple[str, int]
#: The logs to consider: (topic, partition) -> (log, its log directory), a snapshot.
LogsSnapshot = Callable[[], dict[TopicPartition, tuple[PartitionLog, Path]]]


@dataclass(frozen=True, slots=True)
class CleanerPartitionStatus:
    """Where the cleaner stands on one compacted partition (a snapshot).

    ``cleaned_offset`` is the checkpointed first dirty offset (``cleaner-offset-checkpoint``;
    the log start offset when never cleaned); ``dirty_bytes`` the bytes of the segments from
    it up to the first uncleanable offset, ``cleanable_bytes`` those plus the already cleaned
    ones below it, and ``dirty_ratio`` the first over the second (0 when nothing is
    cleanable). ``last_clean_ms`` is the clock's time of the last cleaning of this partition
    by this process, or -1; ``in_progress`` says it is being cleaned now.
    """

    cleaned_offset: int
    dirty_ratio: float
    dirty_bytes: int
    cleanable_bytes: int
    last_clean_ms: int
    in_progress: bool


@dataclass(frozen=True, slots=True)
class CleanerStats:
    """Cumulative figures of every cleaning since the LogManager opened (a snapshot).

    ``last_run_ms`` is the clock's time at the last cleaning's end (-1: none yet);
    ``max_dirty_ratio`` the largest dirty ratio among compacted partitions at the last check
    of a cleaner thread (or of :meth:`CleanerManager.stats` when no thread runs).
    """

    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    cleanings: int = 0
    last_run_ms: int = -1
    max_dirty_ratio: float = 0.0


class CleanerManager:
    """The cleaner threads, the per-partition cleaning states and the checkpoints.

    Holds the settings (threads, map memory, load factor, read buffer, backoff), the clock,
    a view of the manager's logs, one checkpoint file per log directory and the offsets read
    from them, the in-progress and paused partitions, the last cleaning time per partition,
    the cumulative stats, and the threads once started.
    """

    def __init__(
        self,
        log_dirs: list[Path],
        logs: LogsSnapshot,
        time_ms: Callable[[], int],
        *,
        threads: int = 1,
        dedupe_buffer_bytes: int = 134_217_728,
        load_factor: float = 0.9,
        io_buffer_bytes: int = 524_288,
        io_max_bytes_per_second: float = UNLIMITED,
        backoff_ms: int = 15_000,
    ) -> None:
        self._logs = logs
        self._time_ms = time_ms
        self._threads_count = threads
        self._map_bytes = max(dedupe_buffer_bytes // threads, 1024)
        self._load_factor = load_factor
        self._io_buffer_bytes = io_buffer_bytes
        self._backoff_s = backoff_ms / 1000
        self._checkpoint_files = {
            path: OffsetCheckpointFile(path / CLEANER_OFFSET_CHECKPOINT_FILE) for path in log_dirs
        }
        self._checkpoints: dict[TopicPartition, int] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._in_progress: set[TopicPartition] = set()
        self._paused: dict[TopicPartition, int] = {}  # partition -> pause count
        self._aborting: set[TopicPartition] = set()
        self._last_clean_ms: dict[TopicPartition, int] = {}
        self._stats = CleanerStats()
        self._stop = threading.Event()
        # One for all the threads (and on-demand cleanings), as Kafka's: the limit is of the
        # cleaner's I/O as a whole. Its sleeps end at shutdown (a low limit can ask for
        # seconds), after which the cleaning's next check_done stops it.
        self.throttler = Throttler(io_max_bytes_per_second, sleep_s=self._stop.wait)
        self._threads: list[threading.Thread] = []
        self._on_demand: Cleaner | None = None
        self._on_demand_lock = threading.Lock()
        #: Crash tests: passed to every Cleaner made from now on (see PartitionLog.replace_segments).
        self.step_hook: Callable[[str], None] | None = None
        #: Told ``(topic, partition)`` after each cleaning, from the cleaning's thread: the
        #: serving layer wakes the partition's readers, as after any write
        #: (server/broker/replica_manager.py). Must not block.
        self.cleaned_listener: Callable[[str, int], None] | None = None

    # ---------------------------------------------------------------- checkpoints

    def load_checkpoints(self) -> None:
        """Read every log directory's ``cleaner-offset-checkpoint`` (a corrupt one: empty)."""
        loaded: dict[TopicPartition, int] = {}
        for path, checkpoint in self._checkpoint_files.items():
            try:
                loaded.update(checkpoint.read())
            except (CorruptCheckpointError, StorageError) as exc:
                log.warning("ignoring the cleaner checkpoint of %s (its compacted logs are "
                            "cleaned from their start again): %s", path, exc)
        with self._lock:
            self._checkpoints = loaded

    def _write_checkpoint(self, log_dir: Path) -> None:
        """Rewrite ``log_dir``'s checkpoint with the partitions that live there."""
        in_dir = {tp for tp, (_, directory) in self._logs().items() if directory == log_dir}
        with self._lock:
            entries = {tp: offset for tp, offset in self._checkpoints.items() if tp in in_dir}
        checkpoint = self._checkpoint_files.get(log_dir)
        if checkpoint is not None:
            checkpoint.write(entries)

    def checkpointed_offset(self, topic_partition: TopicPartition) -> int | None:
        with self._lock:
            return self._checkpoints.get(topic_partition)

    def forget(self, topic_partition: TopicPartition, log_dir: Path | None = None) -> None:
        """Drop a deleted partition's checkpoint entry (and rewrite its directory's file)."""
        with self._lock:
            self._checkpoints.pop(topic_partition, None)
            self._last_clean_ms.pop(topic_partition, None)
        if log_dir is not None:
            try:
                self._write_checkpoint(log_dir)
            except StorageError:
                log.warning("could not rewrite the cleaner checkpoint of %s", log_dir,
                            exc_info=True)

    # ---------------------------------------------------------------- states

    def abort_and_pause(self, topic_partition: TopicPartition) -> None:
        """Stop a cleaning of the partition at its next segment, wait for it, and keep the
        cleaner away until :meth:`resume` (Kafka's ``abortAndPauseCleaning``)."""
        with self._changed:
            self._paused[topic_partition] = self._paused.get(topic_partition, 0) + 1
            if topic_partition in self._in_progress:
                self._aborting.add(topic_partition)
            while topic_partition in self._in_progress:
                self._changed.wait()
            self._aborting.discard(topic_partition)

    def resume(self, topic_partition: TopicPartition) -> None:
        """Undo one :meth:`abort_and_pause`."""
        with self._changed:
            count = self._paused.get(topic_partition, 0) - 1
            if count > 0:
                self._paused[topic_partition] = count
            else:
                self._paused.pop(topic_partition, None)

    def _check_done(self, topic_partition: TopicPartition) -> Callable[[], None]:
        def check() -> None:
            if topic_partition in self._aborting or self._stop.is_set():
                raise CleaningAbortedError(
                    f"cleaning of {topic_partition[0]}-{topic_partition[1]} aborted: the "
                    "partition is being deleted or the cleaner is shutting down"
                )
        return check

    # ---------------------------------------------------------------- cleaning

    def _new_cleaner(self) -> Cleaner:
        return Cleaner(
            OffsetMap(self._map_bytes, self._load_factor),
            io_buffer_bytes=self._io_buffer_bytes,
            throttler=self.throttler,
            step_hook=self.step_hook,
        )

    def _clean(
        self, cleaner: Cleaner, topic_partition: TopicPartition, partition_log: PartitionLog,
        log_dir: Path, cleanable: CleanableRange,
    ) -> CleaningResult:
        """One cleaning of a partition this thread holds in progress; checkpoint and stats."""
        cleaner.step_hook = self.step_hook
        result = cleaner.clean(
            partition_log, cleanable.first_dirty_offset, cleanable.first_uncleanable_offset,
            topic=topic_partition[0], partition=topic_partition[1],
            check_done=self._check_done(topic_partition),
        )
        now = self._time_ms()
        with self._lock:
            self._checkpoints[topic_partition] = result.end_offset
            self._last_clean_ms[topic_partition] = now
            stats = self._stats
            self._stats = CleanerStats(
                bytes_read=stats.bytes_read + result.bytes_read,
                bytes_written=stats.bytes_written + result.bytes_written,
                records_removed=stats.records_removed + result.records_read
                - result.records_kept,
                cleanings=stats.cleanings + 1,
                last_run_ms=now,
                max_dirty_ratio=stats.max_dirty_ratio,
            )
        self._write_checkpoint(log_dir)
        listener = self.cleaned_listener
        if listener is not None:
            listener(*topic_partition)
        log.info(
            "cleaned %s-%d: offsets [%d, %d) mapped, %d of %d records kept, %d -> %d "
            "segments, %d -> %d bytes in %d ms", topic_partition[0], topic_partition[1],
            result.first_dirty_offset_before, result.end_offset, result.records_kept,
            result.records_read, result.segments_before, result.segments_after,
            result.bytes_read, result.bytes_written, result.duration_ms,
        )
        return result

    def _end_cleaning(self, topic_partition: TopicPartition) -> None:
        with self._changed:
            self._in_progress.discard(topic_partition)
            self._changed.notify_all()

    def clean_now(self, topic_partition: TopicPartition, partition_log: PartitionLog,
                  log_dir: Path) -> CleaningResult:
        """Clean one partition once now, whatever its dirty ratio (see LogManager.clean_now).

        Raises:
            LogNotCompactedError: the log is not compacted.
            CleaningAbortedError: the partition is paused (being deleted), or changed.
        """
        if not partition_log.config.is_compacted:
            raise LogNotCompactedError(
                f"cannot clean {topic_partition[0]}-{topic_partition[1]}: its cleanup.policy "
                f"is {','.join(partition_log.config.cleanup_policy)}, without compact"
            )
        with self._changed:
            while topic_partition in self._in_progress:
                self._changed.wait()
            if topic_partition in self._paused:
                raise CleaningAbortedError(
                    f"cleaning of {topic_partition[0]}-{topic_partition[1]} is paused (the "
                    "partition is being deleted)"
                )
            self._in_progress.add(topic_partition)
        try:
            with self._on_demand_lock:
                if self._on_demand is None:
                    self._on_demand = self._new_cleaner()
                cleanable = cleanable_range(
                    partition_log, self.checkpointed_offset(topic_partition), self._time_ms()
                )
                return self._clean(
                    self._on_demand, topic_partition, partition_log, log_dir, cleanable
                )
        finally:
            self._end_cleaning(topic_partition)

    def _grab_dirtiest(self) -> tuple[TopicPartition, PartitionLog, Path, CleanableRange] | None:
        """Kafka's ``grabFilthiestCompactedLog``: the compacted, idle, unpaused partition with
        the largest dirty ratio among those due (over their min.cleanable.dirty.ratio, or past
        max.compaction.lag.ms with something to clean); marked in progress."""
        now = self._time_ms()
        logs = self._logs()
        best: tuple[float, TopicPartition, PartitionLog, Path, CleanableRange] | None = None
        max_ratio = 0.0
        with self._lock:
            busy = set(self._in_progress) | set(self._paused)
            checkpoints = dict(self._checkpoints)
        for topic_partition, (partition_log, log_dir) in sorted(logs.items()):
            config = partition_log.config
            if (not config.is_compacted or topic_partition in busy or partition_log.is_closed
                    or partition_log.is_offline):
                continue
            try:
                cleanable = cleanable_range(partition_log, checkpoints.get(topic_partition), now)
            except StorageError:
                log.warning("cannot size the dirty section of %s-%d", *topic_partition,
                            exc_info=True)
                continue
            ratio = cleanable.dirty_ratio
            max_ratio = max(max_ratio, ratio)
            due = (cleanable.max_lag_exceeded and cleanable.dirty_bytes > 0) or (
                cleanable.dirty_bytes > 0 and ratio > config.min_cleanable_dirty_ratio
            )
            if due and (best is None or ratio > best[0]):
                best = (ratio, topic_partition, partition_log, log_dir, cleanable)
        with self._lock:
            stats = self._stats
            self._stats = CleanerStats(
                stats.bytes_read, stats.bytes_written, stats.records_removed, stats.cleanings,
                stats.last_run_ms, max_ratio,
            )
            if best is None:
                return None
            _, topic_partition, partition_log, log_dir, cleanable = best
            if topic_partition in self._in_progress or topic_partition in self._paused:
                return None  # taken meanwhile: the next pass looks again
            self._in_progress.add(topic_partition)
        return topic_partition, partition_log, log_dir, cleanable

    def clean_dirtiest(self, cleaner: Cleaner) -> CleaningResult | None:
        """One pass of a cleaner thread: clean the dirtiest due partition, if any."""
        grabbed = self._grab_dirtiest()
        if grabbed is None:
            return None
        topic_partition, partition_log, log_dir, cleanable = grabbed
        try:
            return self._clean(cleaner, topic_partition, partition_log, log_dir, cleanable)
        except CleaningAbortedError as exc:
            log.info("%s", exc)
            return None
        finally:
            self._end_cleaning(topic_partition)

    # ---------------------------------------------------------------- threads

    def start(self) -> None:
        """Start the cleaner threads (once)."""
        if self._threads:
            return
        self._stop.clear()
        for index in range(self._threads_count):
            thread = threading.Thread(
                target=self._run, name=f"log-cleaner-{index}", daemon=True,
            )
            self._threads.append(thread)
            thread.start()

    def _run(self) -> None:
        cleaner = self._new_cleaner()
        while not self._stop.is_set():
            try:
                result = self.clean_dirtiest(cleaner)
            except Exception:  # the thread must outlive a bad cleaning (Kafka marks it uncleanable)
                log.exception("log cleaning failed")
                result = None
            if result is None:
                self._stop.wait(self._backoff_s)

    def shutdown(self) -> None:
        """Stop the threads: a cleaning in progress stops at its next segment."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads = []

    @property
    def running(self) -> bool:
        return bool(self._threads)

    # ---------------------------------------------------------------- observation

    def status(self, topic_partition: TopicPartition, partition_log: PartitionLog
               ) -> CleanerPartitionStatus:
        with self._lock:
            checkpointed = self._checkpoints.get(topic_partition)
            last_clean = self._last_clean_ms.get(topic_partition, -1)
            in_progress = topic_partition in self._in_progress
        cleanable = cleanable_range(partition_log, checkpointed, self._time_ms())
        return CleanerPartitionStatus(
            cleaned_offset=cleanable.first_dirty_offset,
            dirty_ratio=cleanable.dirty_ratio,
            dirty_bytes=cleanable.dirty_bytes,
            cleanable_bytes=cleanable.clean_bytes + cleanable.dirty_bytes,
            last_clean_ms=last_clean,
            in_progress=in_progress,
        )

    def stats(self) -> CleanerStats:
        """The cumulative figures; without running threads the max dirty ratio is computed
        now (O(compacted partitions)), else it is the threads' last look."""
        if not self._threads:
            now = self._time_ms()
            with self._lock:
                checkpoints = dict(self._checkpoints)
            ratio = 0.0
            for topic_partition, (partition_log, _) in self._logs().items():
                if (partition_log.config.is_compacted and not partition_log.is_closed
                        and not partition_log.is_offline):
                    cleanable = cleanable_range(
                        partition_log, checkpoints.get(topic_partition), now
                    )
                    ratio = max(ratio, cleanable.dirty_ratio)
            with self._lock:
                stats = self._stats
                self._stats = CleanerStats(
                    stats.bytes_read, stats.bytes_written, stats.records_removed,
                    stats.cleanings, stats.last_run_ms, ratio,
                )
        with self._lock:
            return self._stats
