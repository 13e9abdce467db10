"""One partition's log: offsets, producers, epochs and bounds over its segments; the embedded API.

A partition log is what a Kafka broker calls ``UnifiedLog``: the log of one partition
``<topic>-<partition>/``, whose files (segments ``<20-digit base offset>.log`` + indexes, of
which the last is *active* and takes appends) are its
:class:`~stratalog.server.storage.local_log.LocalLog` (Kafka's ``LocalLog``: roll, write,
read, truncate, delete, flush, offline handling). Above the segments this layer keeps what
gives the records their meaning: appends are validated, given offsets, their producers judged
(idempotence, transactions) and their leader epochs recorded by its one
:class:`~stratalog.server.storage.log_writer.LogWriter`; this module keeps the log start
offset, the high watermark and the last stable offset, bounds reads and lookups by them
(``fetch_isolation.py``, ``timestamp_lookup.py``), truncates the producer state and the epochs
with the segments, and answers lookups by timestamp::

    log_start_offset          high watermark / LSO     log_end_offset (LEO: next offset to assign)
    |                                   |              |
    [segment 0 .......][segment 1000 .......][segment 2000 ...active...]
                                                        ^ appends (LogWriter): validate, assign
                                                          offsets from LEO, maybe roll, write,
                                                          publish LEO

Reads never block appends: the end of the log is published as one immutable value (LEO, the
active segment's base offset, its size, the first unstable offset) only after the bytes are
written, and a read stops at the end it saw (``local_log.py``). Removed segments are deleted
``file.delete.delay.ms`` later, in the background (:meth:`PartitionLog.maybe_delete_pending`,
which the LogManager's maintenance pass calls), never by an append.

Opening a directory is the job of :mod:`~stratalog.server.storage.recovery` (Kafka's
``LogLoader``): segments are opened lazily from their ``.log`` files, leftovers of interrupted
renames are resolved, and the segments a crash may have damaged are recovered (rebuilt from
their ``.log`` and cut at the first invalid byte). Retention (Kafka UnifiedLog.deleteOldSegments;
docs/kafka-behaviours.md#retention) is decided by :mod:`~stratalog.server.storage.retention` and
carried out here.

Kafka's split of the two layers is the model:
``storage/src/main/java/org/apache/kafka/storage/internals/log/UnifiedLog.java`` (this module
and ``log_writer.py``) over
``storage/src/main/java/org/apache/kafka/storage/internals/log/LocalLog.java``
(``local_log.py``).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path

from . import timestamp_lookup
from .clock import wall_clock_ms
from .config import PRODUCER_ID_EXPIRATION_MS_DEFAULT, LogConfig
from .errors import (
    OffsetOutOfRangeError,
    StorageIOError,
)
from .fetch_isolation import (
    IsolationLevel,
    SlicedWalk,
    batches_before_bound,
    committed_part,
    take_records,
)
from .leader_epoch_cache import LeaderEpochCache, load_leader_epoch_cache
from .local_log import LocalLog, LogEnd, delete_segments
from .log_writer import (
    LEADER_EPOCH,
    AppendInfo,
    DeferredAppend,
    FlushScheduler,
    LogWriter,
    TransactionVerifier,
    WouldBlock,
)
from .open_segments import DEFAULT_OPEN_SEGMENTS_MAX, OpenSegments
from .producer_state import (
    ProducerStateManager,
)
from .recovery import load_log, rebuild_producer_state, restore_batch_history
from .retention import RetentionPlan, plan_retention
from .segment import FetchedBatches, Segment
from .segments import Segments
from .time_index import TimestampOffset
from .timestamp_lookup import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "LEADER_EPOCH",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "DeferredAppend",
    "FetchedBatches",
    "FlushScheduler",
    "IsolationLevel",
    "PartitionLog",
    "TimestampOffset",
    "TransactionVerifier",
    "WouldBlock",
]

log = logging.getLogger(__name__)

#: Told of an I/O error on a log's write path (a write, an fsync, a roll): called as
#: ``handler(log, error)`` once, when the log goes offline; Kafka's ``LogDirFailureChannel``.
#: Called under the log's lock: it must not wait for another log's lock.
IoFailureHandler = Callable[["PartitionLog", BaseException], None]

class PartitionLog:
    """The log of one partition (Kafka's ``UnifiedLog``): offsets, producers, epochs, bounds,
    over the :class:`~stratalog.server.storage.local_log.LocalLog` of its segments.

    Holds: the :class:`LocalLog` (the directory, the config, the :class:`Segments` map, the
    published end of the log, the recovery point, the segments waiting for deferred
    deletion), the lock both layers share, the log start offset, the high watermark once a
    replication layer tracks one, the producer state and the leader epoch cache.

    Invariants: at least one segment while open; segment base offsets increase and each segment's
    offsets lie below the next one's base; ``log_start_offset <= log_end_offset``; the active
    segment is the last one and holds ``log_end_offset``'s position; a tracked high watermark
    lies in ``[log_start_offset, log_end_offset]``; the producer state and the leader epoch
    cache describe the log up to its end.

    Crash behaviour: appends reach the page cache; :meth:`flush` (or ``flush.messages``) makes
    them durable and advances the recovery point. After a crash the active segment may end in a
    torn batch, and segments above the recovery point may hold stale indexes: :meth:`open`
    recovers them (``recovery.py``): from the recovery point when the caller knows the
    shutdown was unclean, the active segment when it cannot know. Segments removed by
    retention or truncation are renamed ``.deleted`` first; a crash before their deletion
    leaves files the next open deletes. An I/O error on a write path (write, index entry,
    fsync, roll) publishes nothing and takes the log offline (:meth:`LocalLog.io_failed`):
    every later call raises LogDirOfflineError, and the next open decides, as after a crash,
    what the failed write left. Running out of file descriptors (EMFILE, ENFILE) is not an
    I/O error of the disk: an append or roll that fails for want of one before anything was
    written raises OutOfDescriptorsError and leaves the log online, as it was, for the same
    append to succeed once descriptors are free (:meth:`LocalLog.out_of_descriptors`).

    Concurrency: one writer at a time for :meth:`append`, :meth:`roll`, :meth:`truncate_to`,
    :meth:`truncate_fully_and_start_at` and :meth:`close` (the server serialises them per
    partition; an internal lock makes overlapping calls wait rather than corrupt). :meth:`read`,
    :meth:`fetch`, :meth:`offset_for_timestamp`, :meth:`fetch_by_timestamp` and :meth:`flush`
    may run in other threads concurrently with the writer: reads never see a half-written
    batch. A reader that overlaps a truncation may
    see the data being truncated away (as in Kafka); it must finish within
    ``file.delete.delay.ms`` of the truncation, after which removed segments are closed.
    Background work (:meth:`flush`, :meth:`delete_old_segments`, :meth:`maybe_delete_pending`,
    :meth:`maybe_increment_log_start_offset`) may run in another thread while the writer
    appends: every mutation of the segment map and offsets takes one internal lock
    (uncontended in the common case; the local log below takes the same one), and fsyncs run
    outside it.
    :meth:`try_append_without_blocking` and :meth:`append_deferred` are writers as
    :meth:`append` is; the first never waits for the lock (an event loop's append: it gives
    the append back, undone, when the lock is held, and when the append would roll or fsync).
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        time_ms: Callable[[], int],
        segments: Segments,
        *,
        log_start_offset: int | None = None,
        recovery_point: int | None = None,
        directory_changed: bool = False,
        flush_scheduler: FlushScheduler | None = None,
        producer_state: ProducerStateManager | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        open_segments: OpenSegments | None = None,
        io_failure_handler: IoFailureHandler | None = None,
        leader_epoch_cache: LeaderEpochCache | None = None,
    ) -> None:
        """Use :meth:`open`, or pass what a loader found.

        ``segments`` must be non-empty, their indexes ready (the active one grown to
        ``segment.index.bytes``). The log end offset is read from the active segment
        (Kafka LogSegment.readNextOffset; docs/kafka-behaviours.md#log-loading);
        ``log_start_offset`` defaults to the first segment's base offset (a checkpointed one may be
        higher), ``recovery_point`` to the log end offset (a clean shutdown); ``directory_changed``
        makes the next flush fsync the directory. ``producer_state`` is the state as of the log end
        (default: no producer known); ``producer_id_expiration_ms`` Kafka's
        ``producer.id.expiration.ms``. ``leader_epoch_cache`` is the cache as of the log end
        (default: loaded from the directory's ``leader-epoch-checkpoint`` and repaired,
        :func:`load_leader_epoch_cache`).
        """
        self._time_ms = time_ms
        self._lock = threading.RLock()
        active = segments.active
        assert active is not None, "a log always has an active segment"
        active.activate()
        first = segments.first
        assert first is not None
        end_offset = active.read_next_offset()
        start = first.base_offset if log_start_offset is None else log_start_offset
        assert start <= end_offset, f"log start offset {start} above the log end {end_offset}"
        self._log_start_offset = start
        if producer_state is None:
            producer_state = ProducerStateManager(directory, producer_id_expiration_ms)
            producer_state.reset(end_offset)
        self._producer_state = producer_state
        # The layers below reach this log through a weak reference only: a strong one would
        # make a reference cycle, and a deleted topic's logs must be freed by reference
        # counting alone (the server freezes what it loaded at start-up out of the cyclic
        # collector's reach: server/garbage_collector.py).
        this = weakref.ref(self)

        # Named apart from the argument log_start_offset above: a second binding of one local
        # name with another type is refused by both mypyc and Cython.
        def current_log_start_offset() -> int:
            partition_log = this()
            assert partition_log is not None, "called by a method of the log"
            return partition_log._log_start_offset

        on_io_failure: Callable[[BaseException], None] | None = None
        if io_failure_handler is not None:
            handler = io_failure_handler

            def on_io_failure(exc: BaseException) -> None:
                # The LogManager is told which log failed (it takes the log's whole directory
                # offline); the local log below only knows that one did.
                partition_log = this()
                if partition_log is not None:
                    handler(partition_log, exc)

        self._local = LocalLog(
            directory,
            config,
            time_ms,
            segments,
            self._lock,
            LogEnd(
                end_offset, active.base_offset, active.size_bytes,
                producer_state.first_unstable_offset,
            ),
            recovery_point=end_offset if recovery_point is None else recovery_point,
            directory_changed=directory_changed,
            open_segments=open_segments,
            io_failure_handler=on_io_failure,
            flush_snapshot=producer_state.flush_snapshot,
        )
        if leader_epoch_cache is None:
            leader_epoch_cache = load_leader_epoch_cache(directory, segments, start, end_offset)
        self._epoch_cache = leader_epoch_cache
        # The high watermark, once a replication layer tracks one (update_high_watermark);
        # None: a single server's log, whose high watermark is its log end offset.
        self._high_watermark: int | None = None
        # Every append, marker, follower append and roll goes through the writer.
        self._writer = LogWriter(
            self._local,
            self._lock,
            producer_state,
            leader_epoch_cache,
            time_ms,
            current_log_start_offset,
            flush_scheduler,
        )
        # Every produce's path goes straight to the writer: these instance attributes are the
        # writer's methods of the same names and signatures (the methods below keep the
        # contract and the docs), and save the one forwarding call an append would make.
        self.append = self._writer.append  # type: ignore[method-assign]
        self.try_append_without_blocking = (  # type: ignore[method-assign]
            self._writer.try_append_without_blocking
        )
        # Segments the loader rebuilt when this log was opened (set by open; observable).
        self.recovered_segments = 0

    # ---------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        directory: Path | str,
        config: LogConfig | Mapping[str, str | int | bool] | None = None,
        *,
        time_ms: Callable[[], int] | None = None,
        flush_scheduler: FlushScheduler | None = None,
        had_clean_shutdown: bool | None = None,
        recovery_point: int | None = None,
        log_start_offset: int | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        open_segments: OpenSegments | None = None,
        io_failure_handler: IoFailureHandler | None = None,
    ) -> PartitionLog:
        """Open the log in ``directory``, creating the directory and a first segment if needed.

        ``config`` is a :class:`LogConfig` or a mapping of Kafka topic config names (validated;
        unknown names rejected). ``time_ms`` is the clock (ms since the epoch) used for
        ``segment.ms``, LogAppendTime, timestamp validation and deferred deletes; default: the
        wall clock. ``flush_scheduler`` (for example ``executor.submit``) runs, off the append
        path, the flush Kafka schedules after every roll (Kafka LocalLog.roll;
        docs/kafka-behaviours.md#roll): it fsyncs the segments below the new one and moves the
        recovery point there. Without it the recovery point moves only on :meth:`flush`.
        ``open_segments`` is the cache that closes the files of inactive segments beyond its
        capacity (a LogManager passes its one cache to every log); None gives this log a cache of
        its own with the default capacity
        (:data:`~stratalog.server.storage.open_segments.DEFAULT_OPEN_SEGMENTS_MAX`).
        ``io_failure_handler`` is told of an I/O error on a write path, after which the log is
        offline (see :meth:`take_offline`).

        Loading (:class:`~stratalog.server.storage.recovery.LogLoader`) depends on what the
        caller knows of the last shutdown: ``had_clean_shutdown=True`` (a LogManager found its
        directory's clean-shutdown marker) opens segments without reading any index of a
        non-active segment; False recovers every segment from the one holding
        ``recovery_point`` (the checkpointed value; 0 when None); None, the default for a log
        opened on its own, recovers the active segment only. ``log_start_offset`` is the
        checkpointed log start offset (None: the first segment's base offset). Missing indexes
        are rebuilt in every case. :attr:`recovered_segments` says how many segments were.
        The producer state is loaded from the ``.snapshot`` files and the log after the latest
        usable one (``recovery.py`` pass 7); ``producer_id_expiration_ms`` is Kafka's
        ``producer.id.expiration.ms``.

        Raises:
            InvalidConfigError: a bad config.
            StorageIOError: the directory or a file cannot be created, read or repaired.
            OffsetOverflowError, InvalidRecordError: a segment Kafka's legacy formats wrote,
                which stratalog cannot serve (see ``recovery.py``).
        """
        if config is None:
            log_config = LogConfig()
        elif isinstance(config, LogConfig):
            log_config = config
        else:
            log_config = LogConfig.from_mapping(config)
        clock = time_ms if time_ms is not None else wall_clock_ms
        path = Path(directory)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageIOError(f"failed to create log directory {path}: {exc}") from exc
        if open_segments is None:
            open_segments = OpenSegments(DEFAULT_OPEN_SEGMENTS_MAX)
        loaded = load_log(
            path,
            log_config,
            clock,
            had_clean_shutdown=had_clean_shutdown,
            recovery_point_checkpoint=recovery_point,
            log_start_offset_checkpoint=log_start_offset,
            producer_id_expiration_ms=producer_id_expiration_ms,
            open_segments=open_segments,
        )
        partition_log = cls(
            path,
            log_config,
            clock,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            directory_changed=loaded.directory_changed,
            flush_scheduler=flush_scheduler,
            producer_state=loaded.producer_state,
            producer_id_expiration_ms=producer_id_expiration_ms,
            open_segments=open_segments,
            io_failure_handler=io_failure_handler,
        )
        partition_log.recovered_segments = loaded.recovered_segments
        log.debug(
            "opened log %s: %d segments, offsets [%d, %d), %d segments recovered",
            path, len(loaded.segments), partition_log.log_start_offset,
            partition_log.log_end_offset, loaded.recovered_segments,
        )
        return partition_log

    # ---------------------------------------------------------------- properties

    @property
    def directory(self) -> Path:
        return self._local.directory

    @property
    def config(self) -> LogConfig:
        return self._local.config

    @property
    def segments(self) -> Segments:
        """The segment map (read-only: only the log mutates it)."""
        return self._local.segments

    @property
    def active_segment(self) -> Segment:
        return self._local.active_segment

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        return self._local.end.offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first offset of the earliest open transaction, or the log end offset
        when none is open (Kafka's ``lastStableOffset``; stratalog's high watermark is the log
        end), never below the log start offset: a transaction may have begun below it
        (DeleteRecords, retention), and offsets there cannot be read (Kafka bounds its first
        unstable offset so too). read_committed fetches and ListOffsets stop here.
        Thread-safe without the lock: the end and the first unstable offset come from one
        published :class:`LogEnd`. When the log tracks a high watermark (replication), the LSO
        is bounded by it too (Kafka's ``lastStableOffset``)."""
        end = self._local.end
        bound = end.offset
        high_watermark = self._high_watermark
        if high_watermark is not None:
            bound = min(high_watermark, bound)
        first_unstable = end.first_unstable
        if first_unstable is None:
            return bound
        return min(max(first_unstable, self._log_start_offset), bound)

    # ---------------------------------------------------------------- high watermark

    @property
    def high_watermark(self) -> int:
        """The offset below which every record is replicated to the in-sync replicas: what
        consumers may read (:meth:`fetch` with ``upper_bound``) and retention may delete.

        A single server's log does not track one: its high watermark is the log end offset,
        exactly as before replication existed. Once a replication layer calls
        :meth:`update_high_watermark` the log tracks it (:attr:`tracks_high_watermark`): it
        moves only by the calls below, falls with a truncation below it, and stays within
        ``[log_start_offset, log_end_offset]``. Lock-free read of one published int.
        """
        high_watermark = self._high_watermark
        return self._local.end.offset if high_watermark is None else high_watermark

    @property
    def tracks_high_watermark(self) -> bool:
        """Whether a replication layer set the high watermark (else it is the log end)."""
        return self._high_watermark is not None

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark to ``offset`` bounded to ``[log_start_offset, log_end_offset]``
        and track it from now on (Kafka's ``updateHighWatermark``: a follower takes its
        leader's, a restart the checkpointed one). May move it down. Returns the value set.

        What advances it (the in-sync replicas' log end offsets, KIP-101's rules) is the
        replication layer's: the log only keeps it, bounds reads and retention by it and lowers
        it on truncation.
        """
        with self._lock:
            self._local.ensure_open()
            bounded = min(max(offset, self._log_start_offset), self._local.end.offset)
            self._high_watermark = bounded
            return bounded

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Raise the tracked high watermark to ``offset`` if that is higher (a leader, once the
        in-sync replicas have everything below it); True if it moved.

        Raises:
            ValueError: ``offset`` above the log end offset (Kafka's IllegalArgumentException),
                or the log does not track a high watermark (call :meth:`update_high_watermark`
                first).
        """
        with self._lock:
            self._local.ensure_open()
            if self._high_watermark is None:
                raise ValueError(
                    f"log {self._local.directory} tracks no high watermark: set one with "
                    "update_high_watermark first"
                )
            if offset > self._local.end.offset:
                raise ValueError(
                    f"high watermark {offset} of log {self._local.directory} would be above its log "
                    f"end offset {self._local.end.offset}"
                )
            if offset <= self._high_watermark:
                return False
            self._high_watermark = offset
            return True

    # ---------------------------------------------------------------- leader epochs

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        """The leader epoch cache (read-only for callers: the log assigns and truncates it
        under its lock; :meth:`maybe_assign_epoch_start_offset` for a new leader)."""
        return self._epoch_cache

    @property
    def latest_epoch(self) -> int | None:
        """The latest leader epoch with an entry in the cache, or None."""
        return self._epoch_cache.latest_epoch

    def end_offset_for_epoch(self, requested_epoch: int) -> tuple[int, int]:
        """The OffsetsForLeaderEpoch answer ``(epoch, end offset)`` for ``requested_epoch``
        (:meth:`LeaderEpochCache.end_offset_for` against this log's end)."""
        with self._lock:
            return self._epoch_cache.end_offset_for(requested_epoch, self._local.end.offset)

    def maybe_assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> bool:
        """Record that ``leader_epoch`` starts at ``start_offset`` (Kafka: a replica becoming
        leader assigns its epoch at its log end, so the epoch is known before it appends);
        True if the cache changed.

        Raises:
            ValueError: a negative epoch or offset. StorageIOError: the checkpoint write failed.
        """
        with self._lock:
            self._local.ensure_open()
            return self._epoch_cache.assign(leader_epoch, start_offset)

    def _truncate_epochs_from_end(self, end_offset: int) -> None:
        """The leader epoch cache drops the epochs from the new log end on; a failed write is
        logged (as :meth:`_truncate_epochs_from_start`; Kafka flushes this one in the
        background)."""
        try:
            self._epoch_cache.truncate_from_end(end_offset)
        except StorageIOError:
            log.exception("cannot write the leader epoch checkpoint of %s",
                          self._local.directory)

    def _truncate_epochs_from_start(self, start_offset: int) -> None:
        """The leader epoch cache forgets what lies below the new log start. A failed
        checkpoint write is logged, not raised: the entries in memory are right, and a stale
        file is cut to the log start at the next open."""
        try:
            self._epoch_cache.truncate_from_start(start_offset)
        except StorageIOError:
            log.exception("cannot write the leader epoch checkpoint of %s",
                          self._local.directory)

    @property
    def producer_state(self) -> ProducerStateManager:
        """The producer state (read-only for callers; the log mutates it under its lock)."""
        return self._producer_state

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        """Forget the producers idle for ``producer.id.expiration.ms`` with no open transaction
        (run by the LogManager's maintenance pass); returns their ids."""
        with self._lock:
            if self._local.is_closed:
                return []
            return self._producer_state.remove_expired_producers(
                self._time_ms() if now_ms is None else now_ms
            )

    @property
    def recovery_point(self) -> int:
        """Every offset below this has been fsynced."""
        return self._local.recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._local.last_flush_ms

    @property
    def size_bytes(self) -> int:
        """Bytes in all segments' ``.log`` files."""
        return self._local.size_bytes

    @property
    def is_closed(self) -> bool:
        return self._local.is_closed

    def update_config(self, config: LogConfig) -> LogConfig:
        """Use ``config`` from now on; returns the old one (Kafka's ``updateConfig``).

        Roll limits, validation and timestamps follow at once; ``index.interval.bytes`` and
        ``segment.index.bytes`` apply to segments created from now on, as in Kafka.
        """
        with self._lock:
            self._local.ensure_open()
            return self._local.update_config(config)

    def maybe_increment_log_start_offset(self, new_offset: int) -> bool:
        """Move the log start offset up to ``new_offset`` (DeleteRecords, Kafka
        UnifiedLog.maybeIncrementLogStartOffset; docs/kafka-behaviours.md#retention).

        Offsets below it become unreadable at once (reads at or above it may still return
        whole batches that start below it, Kafka UnifiedLog.maybeIncrementLogStartOffset;
        docs/kafka-behaviours.md#reads); segments wholly below it are for the next retention pass to
        delete. Never moves down. The recovery point follows if it was lower. Returns True if the
        start offset moved.

        The leader epoch cache forgets what lies below it (Kafka
        UnifiedLog.maybeIncrementLogStartOffset; docs/kafka-behaviours.md#retention).

        Raises:
            OffsetOutOfRangeError: ``new_offset`` is above the high watermark (a single
                server's is the log end offset).
        """
        with self._lock:
            self._local.ensure_open()
            end_offset = self._local.end.offset
            high_watermark = self.high_watermark
            if new_offset > high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot increment the log start offset of {self._local.directory} to "
                    f"{new_offset}: it is above the high watermark {high_watermark} (log end "
                    f"offset {end_offset})",
                    log_start_offset=self._log_start_offset,
                    log_end_offset=end_offset,
                )
            if new_offset <= self._log_start_offset:
                return False
            self._log_start_offset = new_offset
            self._truncate_epochs_from_start(new_offset)
            self._local.update_recovery_point(max(self._local.recovery_point, new_offset))
            self._producer_state.delete_snapshots(below=new_offset)
            log.info("incremented the log start offset of %s to %d", self._local.directory,
                     new_offset)
            return True

    # ---------------------------------------------------------------- appends

    def append(
        self,
        record_batches: bytes | bytearray | memoryview,
        *,
        verify_transaction: TransactionVerifier | None = None,
        flush: bool = False,
        decompressed_bytes_max: int | None = None,
        leader_epoch: int = LEADER_EPOCH,
    ) -> AppendInfo:
        """Validate client batches, assign offsets from the log end, and append them
        (:meth:`LogWriter.append` says how, what it raises and when it blocks)."""
        return self._writer.append(
            record_batches,
            verify_transaction=verify_transaction,
            flush=flush,
            decompressed_bytes_max=decompressed_bytes_max,
            leader_epoch=leader_epoch,
        )

    def write_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        *,
        leader_epoch: int = LEADER_EPOCH,
    ) -> AppendInfo:
        """Append a COMMIT (``commit``) or ABORT control batch ending ``producer_id``'s
        transaction, as a transaction coordinator does (:meth:`LogWriter.write_txn_marker`)."""
        return self._writer.write_txn_marker(
            producer_id, producer_epoch, coordinator_epoch, commit, leader_epoch=leader_epoch
        )

    def try_append_without_blocking(
        self,
        record_batches: bytes | bytearray | memoryview,
        *,
        verify_transaction: TransactionVerifier | None = None,
        decompressed_bytes_max: int | None = None,
        leader_epoch: int = LEADER_EPOCH,
    ) -> AppendInfo | DeferredAppend:
        """:meth:`append`, unless it would wait for the lock or touch the file system beyond
        the write; then nothing changes and a :class:`DeferredAppend` says why
        (:meth:`LogWriter.try_append_without_blocking`). Never waits: an event loop's append."""
        return self._writer.try_append_without_blocking(
            record_batches,
            verify_transaction=verify_transaction,
            decompressed_bytes_max=decompressed_bytes_max,
            leader_epoch=leader_epoch,
        )

    def append_deferred(self, deferred: DeferredAppend) -> AppendInfo:
        """Carry out an append :meth:`try_append_without_blocking` deferred; blocking, as
        :meth:`append` (:meth:`LogWriter.append_deferred`)."""
        return self._writer.append_deferred(deferred)

    def append_as_follower(
        self, record_batches: bytes | bytearray | memoryview
    ) -> AppendInfo:
        """Append the leader's batches as they are: their offsets, epochs and headers kept
        (Kafka's ``UnifiedLog.appendAsFollower``; :meth:`LogWriter.append_as_follower`)."""
        return self._writer.append_as_follower(record_batches)

    def try_follow_without_blocking(
        self, record_batches: bytes | bytearray | memoryview, leader_high_watermark: int
    ) -> AppendInfo | None:
        """:meth:`append_as_follower` of ``record_batches`` (none: only the high watermark),
        then :meth:`update_high_watermark` to ``leader_high_watermark`` bounded by the new log
        end, as one step; or None, with nothing changed, when either would wait for the lock
        or the append would touch the file system beyond its write
        (:meth:`LogWriter.try_append_as_follower_without_blocking` says when). Never waits: an
        event loop's follower append."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            self._local.ensure_open()
            info = self._writer.try_append_as_follower_without_blocking(record_batches)
            if info is None:
                return None
            self._high_watermark = min(max(leader_high_watermark, self._log_start_offset),
                                       self._local.end.offset)
            return info
        finally:
            self._lock.release()

    def roll(self) -> Segment:
        """Start a new active segment at the log end offset (Kafka LocalLog.roll;
        docs/kafka-behaviours.md#roll); returns it.

        Rolling an empty active segment at the log end recreates it (still one segment there).
        """
        with self._lock:
            self._local.ensure_open()
            segment = self._writer.roll(None)
            self._local.maybe_delete_pending_locked(self._time_ms())
            return segment

    # ---------------------------------------------------------------- reads

    def fetchable_bytes_max(self, offset: int) -> int | None:
        """At most how many bytes :meth:`fetch` at ``offset`` can return, known from the
        published end alone: 0 at or past the log end (nothing to read, or an error), the
        active segment's readable size when ``offset`` lies in it, None when it lies in an
        older segment (up to that segment's size: knowing more takes an index lookup). O(1),
        thread-safe without the lock (one published :class:`LogEnd`); it lets a caller judge
        a read's cost before making it."""
        end = self._local.end
        if offset >= end.offset:
            return 0
        if offset >= end.segment_base_offset:
            return end.position
        return None

    def read(self, offset: int, max_bytes: int, *, min_one_message: bool = True) -> bytes:
        """Whole batches from the one holding ``offset``: :meth:`fetch`'s data.

        Raises:
            OffsetOutOfRangeError: ``offset`` below the log start offset or above the log end.
            ValueError: ``max_bytes`` negative.
        """
        # fetch's READ_UNCOMMITTED, unbounded case, without its call: every point read's path.
        fetched = self._local.read(offset, max_bytes, min_one_message, 0, self._log_start_offset)
        return b"" if fetched is None else fetched.data

    def fetch(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one_message: bool = True,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        max_records: int = 0,
        upper_bound: int | None = None,
    ) -> FetchedBatches:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` bytes, with
        their next offset and record count (Kafka UnifiedLog.read, LocalLog.read and
        LogSegment.read; docs/kafka-behaviours.md#reads).

        ``upper_bound`` (a consumer's read on a replicated partition passes
        :attr:`high_watermark`; a follower's read passes nothing) leaves out the batches
        starting at or after it, as Kafka's fetch bounded by the high watermark: nothing is
        returned at or above it (no error: the records exist, they are not readable yet).
        The bound is expected at a batch boundary, as a high watermark is (a follower's log
        end); a batch that starts below it is returned whole. None: up to the log end.

        ``max_records`` > 0: the caller takes at most that many records from ``offset``; when
        the batch holding ``offset`` holds them all, only that batch is read (a point read
        reads one batch whatever ``max_bytes``). The caller cuts the records it wants out of
        the whole batches (``stratalog.records.slicing``).

        The first batch may start before ``offset`` (a batch is never split; consumers skip
        earlier records, Kafka LogSegment.read; docs/kafka-behaviours.md#reads). With
        ``min_one_message`` the first batch is returned even when larger than ``max_bytes``; without
        it such a read returns nothing. Only batches of one segment are returned per call; they stop
        before a batch whose header is malformed (the next fetch at its offset raises).
        ``next_offset`` is the last batch's last offset + 1 (``offset`` when no batch came back),
        ``records_count`` the sum of the batches' record counts, both from the headers the read went
        over anyway (:meth:`Segment.fetch`). Reading at the log end returns no batches. Thread-safe
        against a concurrent append.

        Deliberate difference from Kafka: Kafka may return a partial last batch (the consumer
        drops it); this returns whole batches only.

        ``isolation_level`` READ_COMMITTED stops before the last stable offset (batches from
        the LSO on are left out; the LSO is always a batch boundary) and fills
        ``aborted_transactions`` with the aborted transactions overlapping the offsets returned,
        from the ``.txnindex`` of the segment read and the later ones until a search is
        complete (Kafka TransactionIndex.collectAbortedTxns and LocalLog.addAbortedTransactions;
        docs/kafka-behaviours.md#aborted-transactions); the consumer drops their records and every
        control batch.

        Raises:
            OffsetOutOfRangeError: ``offset`` below the log start offset or above the log end.
            ValueError: ``max_bytes`` negative.
        """
        if isolation_level != IsolationLevel.READ_COMMITTED:
            # The segments read by the local log (LocalLog.read) directly: the hot path.
            fetched = self._local.read(
                offset, max_bytes, min_one_message, max_records, self._log_start_offset
            )
            if fetched is None:
                return FetchedBatches(b"", offset, 0)
            if upper_bound is not None and fetched.next_offset > upper_bound:
                return batches_before_bound(fetched, offset, upper_bound)
            return fetched
        stable = self.last_stable_offset
        if upper_bound is not None:
            stable = min(stable, upper_bound)
        fetched = self._local.read(
            offset, max_bytes, min_one_message, max_records, self._log_start_offset
        )
        if fetched is None:
            return FetchedBatches(b"", offset, 0)
        return committed_part(self._local, fetched, offset, stable)

    def fetch_region(
        self,
        offset: int,
        max_bytes: int,
        *,
        region_bytes_min: int,
        min_one_message: bool = True,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        upper_bound: int | None = None,
    ) -> FetchedBatches:
        """:meth:`fetch` for a reader that sends the batches from the file (the Kafka front
        end's plaintext Fetch, as Kafka's ``FileRecords.writeTo``): the same whole batches,
        as a region of the segment's ``.log`` when they are ``region_bytes_min`` bytes or more
        (:meth:`Segment.fetch_region`: the holder closes it), else their bytes. The bounds
        (``upper_bound``, READ_COMMITTED's last stable offset) stop the read at the batch
        holding them; READ_COMMITTED's aborted transactions are collected as :meth:`fetch`
        does. ``records_count`` is the offsets spanned (no record is counted: the batches
        are not read).

        Raises:
            as :meth:`fetch`.
        """
        stop = upper_bound
        if isolation_level == IsolationLevel.READ_COMMITTED:
            stable = self.last_stable_offset
            stop = stable if stop is None else min(stop, stable)
        if stop is not None and offset >= stop:
            return FetchedBatches(b"", offset, 0)
        fetched = self._local.read(offset, max_bytes, min_one_message, 0,
                                   self._log_start_offset, stop, region_bytes_min)
        if fetched is None:
            return FetchedBatches(b"", offset, 0)
        if isolation_level == IsolationLevel.READ_COMMITTED and fetched.data:
            aborted = self._local.collect_aborted_txns(offset, fetched.next_offset)
            return fetched._replace(aborted_transactions=aborted)
        return fetched

    def take_records(
        self,
        offset: int,
        max_bytes: int,
        max_records: int,
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        upper_bound: int | None = None,
        whole_bytes_enough: int | None = None,
    ) -> SlicedWalk:
        """At most ``max_records`` (> 0) records from ``offset``, as a reader delivers them: the
        batches :meth:`fetch` would return (read as it reads them, bounded as it bounds them),
        cut to those records in the same walk of their headers
        (:func:`~stratalog.server.storage.fetch_isolation.take_records`: each batch's share
        re-framed, control batches and for READ_COMMITTED the aborted transactions' batches
        left out, at most ``max_bytes`` bytes after the first record). ``whole_bytes`` is the
        length of what :meth:`fetch` would have returned, or, when that is cut and more than
        ``whole_bytes_enough``, at least ``whole_bytes_enough`` (the walk stops counting there).
        Thread-safe against a concurrent append.

        Raises:
            OffsetOutOfRangeError: ``offset`` below the log start offset or above the log end.
            StorageError: a stored batch does not decode (damage on disk).
        """
        committed = isolation_level == IsolationLevel.READ_COMMITTED
        bound = upper_bound
        if committed:
            # The LSO read before the data, as fetch reads it.
            stable = self.last_stable_offset
            bound = stable if upper_bound is None else min(stable, upper_bound)
        fetched = self._local.read(offset, max_bytes, True, max_records, self._log_start_offset)
        if fetched is None or (bound is not None and offset >= bound):
            return SlicedWalk(b"", offset, 0)
        if bound is not None and fetched.next_offset <= bound:
            bound = None  # nothing to cut: the walk stops at the last record taken
        aborted = (
            self._local.collect_aborted_txns(offset, fetched.next_offset) if committed else None
        )
        return take_records(
            fetched.data, offset, max_records, max_bytes, aborted, bound, whole_bytes_enough
        )

    def fetch_by_timestamp(
        self,
        timestamp: int,
        max_bytes: int,
        *,
        min_one_message: bool = True,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        max_records: int = 0,
    ) -> tuple[TimestampOffset | None, FetchedBatches]:
        """:meth:`offset_for_timestamp` for a timestamp ``>= 0``, then :meth:`fetch` there, the
        batch searched read once, bounded as :meth:`fetch` is; ``(None, empty batches)`` at the
        log end, the high watermark or the LSO when no record qualifies
        (:func:`~stratalog.server.storage.timestamp_lookup.fetch_by_timestamp` says how, and
        what it raises). Thread-safe against a concurrent append."""
        return timestamp_lookup.fetch_by_timestamp(
            self._local, self, timestamp, max_bytes, min_one_message, isolation_level,
            max_records,
        )

    def take_records_by_timestamp(
        self,
        timestamp: int,
        max_bytes: int,
        max_records: int,
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> tuple[TimestampOffset | None, SlicedWalk]:
        """:meth:`fetch_by_timestamp` with ``max_records`` (> 0), the records taken from the
        record found as :meth:`take_records` takes them: the cut at the high watermark or the
        LSO, the reader's filter and the slicing in one walk of the batches read
        (:func:`~stratalog.server.storage.timestamp_lookup.take_records_by_timestamp`).
        Thread-safe against a concurrent append."""
        return timestamp_lookup.take_records_by_timestamp(
            self._local, self, timestamp, max_bytes, max_records, isolation_level
        )

    def offset_for_timestamp(
        self,
        timestamp: int,
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> TimestampOffset | None:
        """ListOffsets: the offset for a timestamp or a special target (``-1`` latest, ``-2``
        earliest, ``-3`` max timestamp, ``-4`` earliest local, ``-5`` latest tiered), bounded by
        the high watermark and, for READ_COMMITTED, the LSO
        (:func:`~stratalog.server.storage.timestamp_lookup.offset_for_timestamp` gives the
        table). Thread-safe against a concurrent append."""
        return timestamp_lookup.offset_for_timestamp(self._local, self, timestamp, isolation_level)

    # ---------------------------------------------------------------- truncation

    def truncate_to(self, offset: int) -> bool:
        """Remove every record with offset ``>= offset`` (Kafka UnifiedLog.truncateTo;
        docs/kafka-behaviours.md#truncation); True if anything changed.

        Segments entirely above ``offset`` are removed (renamed ``.deleted``, deleted after
        ``file.delete.delay.ms``); the segment holding ``offset`` is cut before the batch
        holding it. Truncation is batch-granular, and as in Kafka the log end offset becomes
        ``offset`` even when that is inside a removed batch (callers such as replication
        truncate at batch boundaries). A no-op (False) when ``offset >= log_end_offset``,
        except that an epoch entry starting at the log end (a leader's that wrote nothing) is
        dropped. The leader epoch cache drops the epochs starting at or above ``offset``, and a tracked
        high watermark above ``offset`` falls to it.

        Raises:
            ValueError: ``offset`` is negative.
        """
        if offset < 0:
            raise ValueError(
                f"cannot truncate log {self._local.directory} to negative offset {offset}"
            )
        with self._lock:
            self._local.ensure_open()
            if offset >= self._local.end.offset:
                # No data to remove, but an epoch a leader assigned at its log end and never
                # wrote in conflicts with the new leader's history: drop it (Kafka does too).
                self._truncate_epochs_from_end(self._local.end.offset)
                return False
            first = self._local.segments.first
            assert first is not None
            if first.base_offset > offset:
                self._truncate_fully_and_start_at(offset)
                return True
            # The segments first (the end and the recovery point fall to ``offset``), then
            # what describes them: the log start, the high watermark, epochs, producers.
            active = self._local.truncate_to(offset)
            self._log_start_offset = min(offset, self._log_start_offset)
            if self._high_watermark is not None:
                self._high_watermark = min(self._high_watermark, offset)
            self._truncate_epochs_from_end(offset)
            self._reload_producer_state(offset)
            # Again, with the reloaded state's first unstable offset.
            self._local.publish_end(LogEnd(
                offset, active.base_offset, active.size_bytes,
                self._producer_state.first_unstable_offset,
            ))
            self._local.maybe_delete_pending_locked(self._time_ms())
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Remove every segment and continue at ``new_offset`` with one empty segment (Kafka
        UnifiedLog.truncateFullyAndStartAt; docs/kafka-behaviours.md#truncation).

        Log start offset, log end offset and recovery point all become ``new_offset``, and so
        does a tracked high watermark; the leader epoch cache is cleared (Kafka
        UnifiedLog.truncateFullyAndStartAt; docs/kafka-behaviours.md#truncation).
        """
        if new_offset < 0:
            raise ValueError(
                f"cannot restart log {self._local.directory} at negative offset {new_offset}"
            )
        with self._lock:
            self._local.ensure_open()
            self._truncate_fully_and_start_at(new_offset)

    def _reload_producer_state(self, end_offset: int) -> None:
        """After a truncation to ``end_offset``: snapshots above it deleted, the state reloaded
        from the latest one at or below it plus a scan of the log after it (Kafka's
        ``truncateAndReload``), then written as a snapshot at ``end_offset`` (Kafka's
        ``rebuildProducerState`` takes one too).

        The truncation may have deleted every snapshot (those above the end, and a damaged one
        the reload skipped) while producers of earlier segments remain. Without this snapshot
        a crash now would make an unclean open rebuild them from the log start, and an open
        without a marker to go by (which takes no snapshot file at all to mean no producer was
        known at any roll, see ``recovery.py`` pass 7) forget them and their open transactions.
        """
        state = self._producer_state
        state.delete_snapshots(above=end_offset)
        state.load_latest_snapshot(end_offset, self._log_start_offset, self._time_ms())
        if state.map_end_offset < end_offset:
            rebuild_producer_state(state, self._local.segments, end_offset)
        if state.producers or state.snapshots_seen:
            # Named by the end of the batches kept: a truncation inside a batch removes it
            # whole, so a reopened log ends there (below end_offset) and would delete a
            # snapshot named end_offset as "above the log end". Nothing lies in between.
            state.map_end_offset = self.active_segment.read_next_offset()
            state.take_snapshot()
        state.map_end_offset = end_offset
        # The last 5, not just the last.
        restore_batch_history(state, self._local.segments, end_offset)

    def _truncate_fully_and_start_at(self, new_offset: int) -> None:
        self._local.truncate_fully_and_start_at(new_offset)
        self._log_start_offset = new_offset
        if self._high_watermark is not None:
            self._high_watermark = new_offset
        try:
            self._epoch_cache.clear_and_flush()
        except StorageIOError:
            # The entries in memory are gone; a stale file is cut to the new log at next open.
            log.exception("cannot write the leader epoch checkpoint of %s",
                          self._local.directory)
        self._producer_state.delete_snapshots(below=new_offset + 1, above=new_offset)  # all
        self._producer_state.reset(new_offset)
        self._local.maybe_delete_pending_locked(self._time_ms())

    # ---------------------------------------------------------------- retention

    def delete_old_segments(
        self, now_ms: int | None = None, max_segments: int | None = None
    ) -> RetentionPlan:
        """Delete the oldest segments retention lets go (Kafka UnifiedLog.deleteOldSegments;
        docs/kafka-behaviours.md#retention; see ``retention.py``).

        By the log start offset always, by ``retention.bytes`` and ``retention.ms`` when
        ``cleanup.policy`` contains ``delete``; at most ``max_segments``; only segments wholly
        below the high watermark (Kafka UnifiedLog.deletableSegments;
        docs/kafka-behaviours.md#retention: a single server's is the log end). If every segment
        goes, the log rolls first so that an empty active segment remains (Kafka
        UnifiedLog.deleteSegments; docs/kafka-behaviours.md#retention). The log start offset moves
        to the first kept segment's base offset (never down); the deleted segments leave the segment
        map and are renamed ``.deleted`` now, and deleted ``file.delete.delay.ms`` later. Returns
        the plan carried out (empty if nothing went).

        Raises:
            StorageIOError: a rename failed (the segments before it are already deleted).
            LogClosedError: the log is closed.
        """
        with self._lock:
            self._local.ensure_open()
            now = self._time_ms() if now_ms is None else now_ms
            end_offset = self._local.end.offset
            plan = plan_retention(
                list(self._local.segments),
                self._local.config,
                log_start_offset=self._log_start_offset,
                log_end_offset=end_offset,
                high_watermark=self.high_watermark,
                now_ms=now,
                max_segments=max_segments,
            )
            if not plan:
                return plan
            doomed = list(plan.segments)
            if doomed[-1] is self.active_segment:
                # Kafka UnifiedLog.deleteSegments (docs/kafka-behaviours.md#retention): an empty
                # active segment remains to append to
                self._writer.roll(None)
            next_segment = self._local.segments.higher_segment(doomed[-1].base_offset)
            assert next_segment is not None, "a segment after the deleted ones always remains"
            self._log_start_offset = max(self._log_start_offset, next_segment.base_offset)
            self._local.update_recovery_point(
                max(self._local.recovery_point, self._log_start_offset)
            )
            self._truncate_epochs_from_start(self._log_start_offset)
            # Their snapshots go with the segments (Kafka deletes a segment's snapshot with it).
            self._producer_state.delete_snapshots(below=self._log_start_offset)
            self._local.remove_segments(doomed)
            log.info(
                "deleting %d segments of %s (%s): base offsets %d .. %d; log start offset now %d",
                len(doomed), self._local.directory,
                ", ".join(sorted({reason.value for reason in plan.reasons})),
                doomed[0].base_offset, doomed[-1].base_offset, self._log_start_offset,
            )
            due = self._local.take_due_deletes(now)
        delete_segments(due)  # off the lock, as maybe_delete_pending does
        return plan

    # ---------------------------------------------------------------- segment replacement

    @property
    def open_segments(self) -> OpenSegments | None:
        """The cache that closes inactive segments' files (new segments join it)."""
        return self._local.open_segments

    def last_data_offsets_of_producers(self) -> dict[int, int]:
        """Producer id -> the last offset of its last data batch, for every producer the log
        tracks (the cleaner keeps those batches, empty if need be: Kafka's RETAIN_EMPTY)."""
        with self._lock:
            return {
                producer_id: entry.last_data_offset
                for producer_id, entry in self._producer_state.producers.items()
            }

    def replace_segments(
        self,
        new_segment: Segment,
        old_segments: list[Segment],
        *,
        step_hook: Callable[[str], None] | None = None,
    ) -> None:
        """Swap ``new_segment`` (written as ``.cleaned``, flushed) in for ``old_segments``,
        consecutive non-active segments of this log starting at its base offset (Kafka's
        ``LocalLog.replaceSegments``, Kafka LocalLog.replaceSegments;
        docs/kafka-behaviours.md#segment-replacement).

        The steps, each a crash point that recovery resolves (Kafka
        LogLoader.removeTempFilesAndCollectSwapFiles and LogLoader.load;
        docs/kafka-behaviours.md#log-loading):

        1. ``.cleaned`` -> ``.swap`` (all four files of the new segment);
        2. each old segment, in descending base-offset order, -> ``.deleted``;
        3. ``.swap`` -> the final names; the directory is fsynced.

        A crash before step 1 ends leaves ``.cleaned`` files (and perhaps some ``.swap``
        ones): recovery deletes them, the old segments stay: *before*. From step 1's end on,
        recovery completes the swap: it deletes every segment file in ``[base offset, the
        swap segment's next offset)`` and renames the ``.swap`` files: *after* (the cleaner
        ends the new segment where the group ended, see ``cleaner.py``). ``step_hook`` is
        called with ``"swap"``, ``"delete <base offset>"`` and ``"rename"`` before each step
        (crash tests inject failures there).

        Only this takes the lock: appends and fetches wait for the renames, not the cleaning.
        The segment map switches from the old segments to the new one in one publish after
        the renames; readers holding an old segment keep a valid file, closed and deleted
        ``file.delete.delay.ms`` later as retention's are.

        Raises:
            CleaningAbortedError: the log is closed or offline, or ``old_segments`` are no
                longer this log's (truncated, deleted by retention): nothing is renamed, and
                the ``.cleaned`` segment is deleted.
            StorageIOError: a rename failed; the log goes offline and the next start
                resolves the files as after a crash.
        """
        self._local.replace_segments(new_segment, old_segments, step_hook or (lambda step: None))

    def maybe_delete_pending(self, now_ms: int | None = None) -> int:
        """Delete the ``.deleted`` segments whose ``file.delete.delay.ms`` has passed.

        Closing and unlinking their files is background work: the LogManager's maintenance pass
        calls this for every log with segments waiting. An embedded log without a LogManager
        deletes them here, and in :meth:`roll`, :meth:`delete_old_segments`, the truncations
        and :meth:`close` (every call that removes segments also deletes those that are due),
        never in :meth:`append`. Returns how many segments were deleted.
        """
        return self._local.maybe_delete_pending(now_ms)

    @property
    def pending_deletes(self) -> int:
        """Segments renamed ``.deleted`` and waiting for their delay to pass."""
        return self._local.pending_deletes

    # ---------------------------------------------------------------- durability

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets in ``[recovery_point, offset)`` (Kafka
        UnifiedLog.flush; docs/kafka-behaviours.md#flush).

        With no ``offset``: everything up to the log end, including the files of an empty active
        segment (what a clean shutdown does). The producer snapshots rolls wrote at offsets up
        to the new recovery point are fsynced too (Kafka's ``flushProducerStateSnapshot`` before
        ``flushUptoOffsetExclusive``). Then the directory is fsynced if segments or snapshots
        were created or renamed, and the recovery point moves to ``offset`` (or the log end).

        An fsync that fails takes the log offline (:meth:`LocalLog.io_failed`): after a failed fsync
        the page cache may have dropped what it could not write, so nothing written since the
        last good one may be trusted before recovery.

        Raises:
            StorageIOError: an fsync failed (the recovery point does not move; the log is
                offline).
            LogDirOfflineError: the log is offline.
        """
        self._local.flush(offset, None)

    def close(self) -> None:
        """Flush everything, close every segment and finish deferred deletions. Idempotent.

        Each segment's close appends its final time-index entry and trims its indexes and
        ``.log`` (Kafka LogSegment.close; docs/kafka-behaviours.md#flush); closing goes on past a
        failing segment and raises the first error.
        """
        with self._lock:
            if self._local.is_closed:
                return
            first_error: BaseException | None = None
            try:
                self.flush()
            except BaseException as exc:
                first_error = exc
            state = self._producer_state
            if first_error is None and (state.producers or state.snapshots_seen):
                # The snapshot at the log end that the next (clean) open loads. Kafka's close
                # takes one whatever the producers; a log with no producer and no snapshot
                # file (it never rolled, as every roll writes one) needs none: a clean open
                # without any snapshot scans nothing (Kafka's rule), and an unclean one starts
                # no later than the recovered segment's base: the log start, in such a log.
                try:
                    self._producer_state.map_end_offset = self._local.end.offset
                    self._producer_state.take_snapshot()
                except BaseException as exc:
                    first_error = exc
            # After a successful flush every segment is below the recovery point, durable:
            # closing need not fsync each one again.
            try:
                self._local.close(durable=first_error is None)
            except BaseException as exc:
                first_error = first_error or exc
            if first_error is not None:
                raise first_error

    def close_for_deletion(self) -> None:
        """Close every file without writing or syncing anything: the log is about to be deleted.

        Kafka's ``closeHandlers`` before a deleted log's directory is renamed: fsyncing data
        that will be removed would only make DeleteTopic wait for the disk (seconds for a GiB
        of unflushed appends). After a crash the renamed ``-delete`` directory is removed, never
        loaded, so nothing relies on its indexes being trimmed. Idempotent.
        """
        self._local.close_for_deletion()

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- log directory failure

    @property
    def is_offline(self) -> bool:
        """The log refuses reads and writes after an I/O error in its directory."""
        return self._local.is_offline

    def take_offline(self) -> None:
        """Refuse every read and write from now on (Kafka's offline partition): the log's
        directory had an I/O error. The files stay as they are, closed without writing by
        :meth:`close`; the next start recovers them. Thread-safe (one flag, read first by every
        call)."""
        self._local.take_offline()

    def __repr__(self) -> str:
        return (
            f"PartitionLog(directory={str(self._local.directory)!r}, "
            f"offsets=[{self._log_start_offset}, {self._local.end.offset}), "
            f"segments={len(self._local.segments)})"
        )
