"""One partition's log: offsets, producers, epochs and bounds over its segments; the embedded API.

A partition log is what a Kafka broker calls ``UnifiedLog``: the log of one partition
``<topic>-<partition>/``, whose files (segments ``<20-digit base offset>.log`` + indexes, of
which the last is *active* and takes appends) are its
:class:`~stratalog.server.storage.local_log.LocalLog` (Kafka's ``LocalLog``: roll, write,
read, truncate, delete, flush, offline handling). Above the segments this module keeps what
gives the records their meaning: it validates appends and assigns offsets, judges producers
(idempotence, transactions: the producer state and the last stable offset), stamps and records
leader epochs, keeps the log start offset and the high watermark, bounds reads by them, and
answers lookups by timestamp::

    log_start_offset          high watermark / LSO     log_end_offset (LEO: next offset to assign)
    |                                   |              |
    [segment 0 .......][segment 1000 .......][segment 2000 ...active...]
                                                        ^ appends: validate, assign offsets from
                                                          LEO, maybe roll, write, publish LEO

Reads never block appends: the writer publishes the end of the log as one immutable value
(LEO, the active segment's base offset, its size, the first unstable offset) only after the
bytes are written, and a read stops at the end it saw. Removed segments (retention,
truncation, roll over an empty segment) are renamed ``*.deleted`` at once and closed and
deleted ``file.delete.delay.ms`` later, as in Kafka, so a reader that still holds one keeps a
valid file. The deletion is background work (:meth:`PartitionLog.maybe_delete_pending`, which
the LogManager's maintenance pass calls), never an append's: an append touches the file system
only to write, and to roll when one is due. :meth:`PartitionLog.try_append_without_blocking`
says when an append would do more than write (roll, fsync, wait for the lock), so that an
event loop can hand those to a thread.

Opening a directory is the job of :mod:`~stratalog.server.storage.recovery` (Kafka's
``LogLoader``): segments are opened lazily from their ``.log`` files, leftovers of interrupted
renames are resolved, and the segments a crash may have damaged are recovered (rebuilt from
their ``.log`` and cut at the first invalid byte). Retention ([B-59]..[B-64]) is decided by
:mod:`~stratalog.server.storage.retention` and carried out here.

Kafka's split of the two layers is the model:
``storage/src/main/java/org/apache/kafka/storage/internals/log/UnifiedLog.java`` (this module)
over ``storage/src/main/java/org/apache/kafka/storage/internals/log/LocalLog.java``
(``local_log.py``).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stratalog.records.batch import NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, parse_header
from stratalog.records.builder import BatchBuilder
from stratalog.records.control import ControlRecordType, EndTransactionMarker

from .clock import wall_clock_ms
from .config import PRODUCER_ID_EXPIRATION_MS_DEFAULT, LogConfig
from .descriptor_budget import ran_out_of_descriptors
from .errors import (
    LogClosedError,
    OffsetOutOfRangeError,
    StorageIOError,
)
from .follower_append import FollowerRun, validate_follower_batches
from .leader_epoch_cache import LeaderEpochCache, load_leader_epoch_cache
from .local_log import LocalLog, LogEnd, delete_segments
from .open_segments import DEFAULT_OPEN_SEGMENTS_MAX, OpenSegments
from .producer_state import (
    DuplicateAppend,
    ProducerAppend,
    ProducerBatch,
    ProducerStateManager,
)
from .recovery import load_log, rebuild_producer_state, restore_batch_history
from .retention import RetentionPlan, plan_retention
from .segment import FetchedBatches, Segment
from .segments import Segments
from .time_index import TimestampOffset
from .txn_index import AbortedTxn
from .validation import ValidatedAppend, validate_and_assign_offsets

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
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

# ListOffsets special targets (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

# A single server is the one leader of its partitions for the life of the log: every batch is
# stamped with epoch 0, as a Kafka partition whose first leader never changed. (Clients send
# -1.) A replicated partition's leader passes its own epoch to the append path.
LEADER_EPOCH = 0


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append did (Kafka's ``LogAppendInfo``, the part a producer sees).

    ``first_offset``/``last_offset`` are -1 for an empty append. ``max_timestamp`` and
    ``offset_of_max_timestamp`` are what was indexed: the largest record timestamp and the last
    offset of the earliest batch holding it (CreateTime), or the append time and the last offset
    (LogAppendTime). ``log_append_time`` is -1 unless the topic uses LogAppendTime.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    record_count: int
    size_bytes: int
    log_start_offset: int
    # True when every batch repeated one of its producer's last 5: nothing was written and the
    # offsets are those of the original append (Kafka answers a duplicate so).
    duplicate: bool = False


class IsolationLevel(enum.IntEnum):
    """Kafka's fetch isolation levels (the values of its FetchRequest)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class WouldBlock(enum.Enum):
    """Why :meth:`PartitionLog.try_append_without_blocking` left an append undone."""

    LOCK_HELD = "the log's lock is held by another thread (maintenance, a flush, close)"
    OPEN_INDEXES = "the active segment's index files are not open yet: opening creates them"
    ROLL = "the append must roll a new segment: files created, the old segment trimmed"
    FLUSH = "flush.messages: the append would fsync"


@dataclass(frozen=True, slots=True)
class DeferredAppend:
    """An append :meth:`PartitionLog.try_append_without_blocking` did not do, and why.

    ``record_batches`` are the caller's batches, ``reason`` what the append would have waited
    for. ``validated`` is set when the batches passed validation before the reason was found
    (a roll or a flush), with the log end offset (``first_offset``), the config and the clock
    reading it was made against: :meth:`PartitionLog.append_deferred` reuses it while those
    still hold. ``verify_transaction`` is the caller's verifier, run again when the append is
    carried out (the coordinator's state may have moved meanwhile), and
    ``decompressed_bytes_max`` the caller's bound, applied again if the batches are. Immutable; holds views of
    the caller's batches, which must not change.
    """

    record_batches: bytes | bytearray | memoryview = field(repr=False)
    reason: WouldBlock
    validated: ValidatedAppend | None = field(default=None, repr=False)
    first_offset: int = -1
    config: LogConfig | None = field(default=None, repr=False)
    now_ms: int = -1
    verify_transaction: TransactionVerifier | None = field(default=None, repr=False)
    decompressed_bytes_max: int | None = None
    leader_epoch: int = LEADER_EPOCH


# Runs a job later, off the caller's thread (``concurrent.futures.Executor.submit`` fits).
FlushScheduler = Callable[[Callable[[], None]], object]

#: Told of an I/O error on a log's write path (a write, an fsync, a roll): called as
#: ``handler(log, error)`` once, when the log goes offline; Kafka's ``LogDirFailureChannel``.
#: Called under the log's lock: it must not wait for another log's lock.
IoFailureHandler = Callable[["PartitionLog", BaseException], None]

#: Checks a client's transactional batch against the transaction coordinator before it is
#: appended: called as ``verify(producer_id, producer_epoch)`` under the log's lock, once per
#: transactional batch, it raises to refuse the append (nothing is written). It must not block:
#: an event loop's append runs it. The server binds one per partition; the log never imports
#: the coordinator. (Kafka's ReplicaManager verifies a transactional produce with the
#: coordinator before the append, KIP-890.)
TransactionVerifier = Callable[[int, int], None]


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
        ([B-55]); ``log_start_offset`` defaults to the first segment's base offset (a
        checkpointed one may be higher), ``recovery_point`` to the log end offset (a clean
        shutdown); ``directory_changed`` makes the next flush fsync the directory.
        ``producer_state`` is the state as of the log end (default: no producer known);
        ``producer_id_expiration_ms`` Kafka's ``producer.id.expiration.ms``.
        ``leader_epoch_cache`` is the cache as of the log end (default: loaded from the
        directory's ``leader-epoch-checkpoint`` and repaired, :func:`load_leader_epoch_cache`).
        """
        self._time_ms = time_ms
        self._lock = threading.RLock()
        self._flush_scheduler = flush_scheduler
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
        # The LogManager is told which log failed (it takes the log's whole directory
        # offline); the local log below only knows that one did.
        on_io_failure = (
            None if io_failure_handler is None
            else functools.partial(io_failure_handler, self)
        )
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
        path, the flush Kafka schedules after every roll ([B-13]): it fsyncs the segments below
        the new one and moves the recovery point there. Without it the recovery point moves
        only on :meth:`flush`. ``open_segments`` is the cache that closes the files of inactive
        segments beyond its capacity (a LogManager passes its one cache to every log); None
        gives this log a cache of its own with the default capacity
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
        """Move the log start offset up to ``new_offset`` (DeleteRecords, [B-65]).

        Offsets below it become unreadable at once (reads at or above it may still return
        whole batches that start below it, [B-35]); segments wholly below it are for the next
        retention pass to delete. Never moves down. The recovery point follows if it was
        lower. Returns True if the start offset moved.

        The leader epoch cache forgets what lies below it ([B-65]).

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
        """Validate client batches, assign offsets from the log end, and append them.

        ``record_batches`` is one or more whole RecordBatch v2 batches with base offset 0 (see
        :mod:`~stratalog.server.storage.validation` for every check). The log rolls first if
        the active segment cannot take the append ([B-4], [B-11]); the bytes are written with
        one positioned write: all the batches or none. An empty input does nothing. When the
        topic sets ``flush.messages`` and enough messages are unflushed, the log is flushed
        before this returns, and so with ``flush`` (a Produce with ``flush=true``): then the
        records are published (readers see them, the log end moves) only once fsynced, so a
        failed fsync never lets them be read. Segments waiting for deletion are left to
        :meth:`maybe_delete_pending`: an append deletes no file.

        An I/O error (the write, the fsync, the roll) takes the log offline: the records are
        not published, the call raises it, and every later call raises LogDirOfflineError;
        the next start recovers the directory (or not) as after a crash.

        ``verify_transaction`` (see :data:`TransactionVerifier`) is called for every
        transactional batch after validation and before the producer state judges it, under the
        lock that transaction markers also take: a batch it accepted is written before any
        marker that ends its transaction. Batches without the transactional flag never call it.
        ``decompressed_bytes_max`` bounds the bytes the batches' records decompress to, all
        together (validation's ``decompressed_bytes_max``; None: each batch by the default).

        ``leader_epoch`` is stamped on every batch (a single server's is 0; a replicated
        partition's leader passes its own, having checked it is still the leader). The first
        append of an epoch records its start offset in the leader epoch cache, whose
        checkpoint is rewritten (fsynced) before the records are written.

        Blocking: waits for the log's lock (held by maintenance while it renames or deletes
        segments) and may roll (create files, trim the old segment) or fsync. An event loop
        calls :meth:`try_append_without_blocking` instead.

        Raises:
            CorruptRecordError, InvalidRecordError, RecordTooLargeError: bad batches.
            InvalidTimestampError: a timestamp outside the accepted window.
            RecordBatchTooLargeError: the append is larger than ``segment.bytes`` or
                decompresses to more than ``decompressed_bytes_max``.
            StorageIOError: the write, fsync or roll failed; nothing was published and the log
                is offline.
            LogClosedError: the log is closed. LogDirOfflineError: the log is offline.
            what ``verify_transaction`` raises; nothing was appended.
        """
        with self._lock:
            self._local.ensure_open()
            if len(record_batches) == 0:
                return self._empty_append_info()
            now_ms = self._time_ms()
            validated = self._validate(
                record_batches, now_ms, decompressed_bytes_max, leader_epoch
            )
            return self._write(validated, now_ms, verify=verify_transaction, flush=flush)

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
        transaction, as a transaction coordinator does (Kafka's ``appendAsLeader`` with the
        COORDINATOR origin).

        The batch is a one-record control batch (attributes: control and transactional) with
        the producer's id and epoch, no sequence, and the marker of :mod:`records.control`
        holding ``coordinator_epoch``, stamped with the log's clock. It completes the producer's
        open transaction: an ABORT appends ``AbortedTxn(producer id, first offset, marker
        offset, LSO)`` to the active segment's ``.txnindex`` before the marker becomes visible,
        and the last stable offset moves past the transaction. A marker for a producer with no
        open transaction is written and completes nothing (as in Kafka). ``leader_epoch`` as
        in :meth:`append`.

        Raises:
            InvalidProducerEpochError: ``producer_epoch`` is older than the producer's.
            TransactionCoordinatorFencedError: ``coordinator_epoch`` is older than the last one
                that wrote a marker for the producer.
            ValueError: ``producer_id`` is negative.
            StorageIOError, LogClosedError: as :meth:`append`.
        """
        if producer_id < 0:
            raise ValueError(f"a transaction marker needs a producer id, got {producer_id}")
        marker = EndTransactionMarker(
            ControlRecordType.COMMIT if commit else ControlRecordType.ABORT, coordinator_epoch
        )
        with self._lock:
            self._local.ensure_open()
            now_ms = self._time_ms()
            builder = BatchBuilder(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=NO_SEQUENCE,
                is_transactional=True,
                is_control=True,
            )
            builder.append(now_ms, marker.encode_key(), marker.encode_value(), ())
            validated = validate_and_assign_offsets(
                builder.build(),
                self._local.config,
                first_offset=self._local.end.offset,
                now_ms=now_ms,
                partition_leader_epoch=leader_epoch,
                allow_control=True,
            )
            offset = validated.first_offset
            control = ProducerBatch(
                producer_id, producer_epoch, NO_SEQUENCE, offset, offset,
                validated.max_timestamp, True, marker.type, coordinator_epoch,
            )
            return self._write(validated, now_ms, (control,))

    def try_append_without_blocking(
        self,
        record_batches: bytes | bytearray | memoryview,
        *,
        verify_transaction: TransactionVerifier | None = None,
        decompressed_bytes_max: int | None = None,
        leader_epoch: int = LEADER_EPOCH,
    ) -> AppendInfo | DeferredAppend:
        """:meth:`append`, unless it would wait for the lock or touch the file system beyond
        the write; then nothing changes and a :class:`DeferredAppend` says why.

        The append is left undone (:class:`WouldBlock`) when the log's lock is held by another
        thread (maintenance renaming or deleting segments, a flush's bookkeeping, close), when
        the active segment's index files are not open yet (in a log just opened; a roll opens
        the new segment's itself), when the append would roll, and when it would fsync
        (``flush.messages``). Otherwise it validates, writes and indexes exactly as
        :meth:`append` does: a page-cache write and index entries in mapped memory, with the
        blocks of a large append allocated first. Batches that fail validation raise as in
        :meth:`append`; the batches of a deferred append were validated already when the
        reason is a roll or a flush, and :meth:`append_deferred` reuses that work.

        One exception to "nothing but the write": the first append of a leader epoch rewrites
        (and fsyncs) the small ``leader-epoch-checkpoint`` inline, as Kafka's request
        threads do; a single server's partition does so once in its life, and a leader that
        assigns its epoch when it takes over (:meth:`maybe_assign_epoch_start_offset`) never.

        Never waits: the lock is taken only if it is free. For an event loop, which hands a
        :class:`DeferredAppend` to a thread that may block (:meth:`append_deferred`), still
        serialising its appends to this log.

        Raises:
            the errors of :meth:`append` (and its validation), never from waiting.
        """
        if not self._lock.acquire(blocking=False):
            return DeferredAppend(
                record_batches, WouldBlock.LOCK_HELD, verify_transaction=verify_transaction,
                decompressed_bytes_max=decompressed_bytes_max, leader_epoch=leader_epoch,
            )
        try:
            self._local.ensure_open()
            if len(record_batches) == 0:
                return self._empty_append_info()
            segment = self.active_segment
            if segment.indexes_loaded != (True, True):
                return DeferredAppend(
                    record_batches, WouldBlock.OPEN_INDEXES, verify_transaction=verify_transaction,
                    decompressed_bytes_max=decompressed_bytes_max, leader_epoch=leader_epoch,
                )
            now_ms = self._time_ms()
            validated = self._validate(
                record_batches, now_ms, decompressed_bytes_max, leader_epoch
            )
            judged = self._judge_producers(validated, None, verify_transaction)
            if isinstance(judged, DuplicateAppend):
                return self._duplicate_append_info(judged)
            if self._roll_due(segment, validated, now_ms):
                reason = WouldBlock.ROLL
            elif self._flush_due(validated.last_offset + 1):
                reason = WouldBlock.FLUSH
            else:
                return self._write_to(segment, validated, judged)
            return DeferredAppend(
                record_batches, reason, validated, self._local.end.offset, self._local.config, now_ms,
                verify_transaction, decompressed_bytes_max, leader_epoch,
            )
        finally:
            self._lock.release()

    def append_deferred(self, deferred: DeferredAppend) -> AppendInfo:
        """Carry out an append :meth:`try_append_without_blocking` deferred; blocking, as
        :meth:`append`.

        The validation it did is reused when nothing moved the log end or replaced the config
        since (the offsets and the stamped headers depend on both); otherwise the batches are
        validated again. Raises what :meth:`append` raises.
        """
        with self._lock:
            self._local.ensure_open()
            validated = deferred.validated
            if (
                validated is None
                or deferred.first_offset != self._local.end.offset
                or deferred.config is not self._local.config
            ):
                return self.append(
                    deferred.record_batches,
                    verify_transaction=deferred.verify_transaction,
                    decompressed_bytes_max=deferred.decompressed_bytes_max,
                    leader_epoch=deferred.leader_epoch,
                )
            return self._write(validated, deferred.now_ms, verify=deferred.verify_transaction)

    def append_as_follower(
        self, record_batches: bytes | bytearray | memoryview
    ) -> AppendInfo:
        """Append the leader's batches as they are: their offsets, epochs and headers kept
        (Kafka's ``UnifiedLog.appendAsFollower``). A replica fetching from its leader calls
        this with the fetched bytes.

        Checks (``follower_append.py``): whole batches with valid CRCs, offsets increasing
        from at or above the log end offset (a gap a compacted leader left is kept), every batch
        stamped with a leader epoch. Nothing is re-stamped and no offset assigned; no
        timestamp or sequence is checked (the leader did). The producer state replays the
        batches as recovery does (Kafka's replication origin: no duplicate or sequence check
        refuses them; transaction markers open and close transactions, ABORT markers get
        their ``.txnindex`` entries before they are visible). Each batch whose epoch differs
        from the one before it assigns its epoch in the leader epoch cache, before the write.

        The log rolls, as for a leader's append, when the active segment cannot take the
        batches: too many bytes, too old, or an offset that does not fit the segment's 32-bit
        relative offsets; the new segment starts at the first batch's base offset (which may
        lie past the log end). An append spanning more than 2^31 - 1 offsets goes to several
        segments, one roll each. Whole append or nothing for validation errors; an I/O error
        takes the log offline as :meth:`append` says. The high watermark does not move: the
        replication layer sets it (:meth:`update_high_watermark`) from the leader's.

        Returns the :class:`AppendInfo` of the whole append (its first and last offsets are
        the leader's).

        Raises:
            UnexpectedAppendOffsetError: the first batch starts below the log end offset.
            CorruptRecordError, InvalidRecordError, RecordTooLargeError: a bad batch.
            RecordBatchTooLargeError: the append is larger than ``segment.bytes``.
            StorageIOError, LogClosedError, LogDirOfflineError: as :meth:`append`.
        """
        with self._lock:
            self._local.ensure_open()
            runs = validate_follower_batches(
                record_batches, self._local.config, log_end_offset=self._local.end.offset,
                log_name=str(self._local.directory),
            )
            if not runs:
                return self._empty_append_info()
            now_ms = self._time_ms()
            max_timestamp, offset_of_max = NO_TIMESTAMP, -1
            for run in runs:
                self._write_follower_run(run, now_ms)
                if run.validated.max_timestamp > max_timestamp or offset_of_max < 0:
                    max_timestamp = run.validated.max_timestamp
                    offset_of_max = run.validated.shallow_offset_of_max_timestamp
            return AppendInfo(
                first_offset=runs[0].validated.first_offset,
                last_offset=runs[-1].validated.last_offset,
                max_timestamp=max_timestamp,
                offset_of_max_timestamp=offset_of_max,
                log_append_time=NO_TIMESTAMP,
                record_count=sum(run.validated.record_count for run in runs),
                size_bytes=sum(run.validated.size_bytes for run in runs),
                log_start_offset=self._log_start_offset,
            )

    def _write_follower_run(self, run: FollowerRun, now_ms: int) -> None:
        """Roll if due, assign the run's epochs, replay its producers, write it, then flush
        when ``flush.messages`` says so, and publish the new end. Under the lock.

        The producer state is replayed before the write (the ABORT markers' ``.txnindex``
        entries need the LSO of their moment and must precede the marker's bytes); a failed
        write then leaves it ahead of the log, which is harmless because the failure takes
        the log offline and the next open rebuilds the state from the log."""
        validated = run.validated
        segment = self.active_segment
        if self._roll_due(segment, validated, now_ms):
            log.debug(
                "rolling log %s for a follower append at offsets [%d, %d]", self._local.directory,
                validated.first_offset, validated.last_offset,
            )
            segment = self._roll(validated.first_offset)
        try:
            self._epoch_cache.assign_all(run.epoch_starts)
        except StorageIOError as exc:
            self._local.io_failed(exc, "leader epoch checkpoint write")
            raise
        end_offset = validated.last_offset + 1
        state = self._producer_state
        try:
            if run.producer_batches:
                for txn, last_stable_offset in state.load_batches(run.producer_batches, end_offset):
                    if txn.is_aborted:
                        segment.txn_index.append(AbortedTxn(
                            txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset
                        ))
            else:
                state.map_end_offset = end_offset
            segment.append(
                validated.last_offset,
                validated.max_timestamp,
                validated.shallow_offset_of_max_timestamp,
                validated.pieces,
            )
        except BaseException as exc:
            self._local.io_failed(exc, "follower write")
            raise
        new_end = LogEnd(
            end_offset, segment.base_offset, segment.size_bytes, state.first_unstable_offset
        )
        if self._flush_due(end_offset):
            # Durable before visible, as a leader's flushed append.
            self._local.flush(None, end_offset)
        self._local.publish_end(new_end)

    def _validate(
        self,
        record_batches: bytes | bytearray | memoryview,
        now_ms: int,
        decompressed_bytes_max: int | None,
        leader_epoch: int = LEADER_EPOCH,
    ) -> ValidatedAppend:
        return validate_and_assign_offsets(
            record_batches,
            self._local.config,
            first_offset=self._local.end.offset,
            now_ms=now_ms,
            partition_leader_epoch=leader_epoch,
            decompressed_bytes_max=decompressed_bytes_max,
        )

    def _empty_append_info(self) -> AppendInfo:
        return AppendInfo(-1, -1, NO_TIMESTAMP, -1, NO_TIMESTAMP, 0, 0, self._log_start_offset)

    def _duplicate_append_info(self, duplicate: DuplicateAppend) -> AppendInfo:
        return AppendInfo(
            first_offset=duplicate.first_offset,
            last_offset=duplicate.last_offset,
            max_timestamp=duplicate.timestamp,
            offset_of_max_timestamp=duplicate.last_offset,
            log_append_time=NO_TIMESTAMP,
            record_count=duplicate.last_offset - duplicate.first_offset + 1,
            size_bytes=0,
            log_start_offset=self._log_start_offset,
            duplicate=True,
        )

    def _judge_producers(
        self,
        validated: ValidatedAppend,
        producer_batches: tuple[ProducerBatch, ...] | None,
        verify: TransactionVerifier | None = None,
    ) -> ProducerAppend | DuplicateAppend | None:
        """The producer state's verdict on an append (under the lock); None when no batch has a
        producer id. ``producer_batches`` defaults to those of the client headers, whose
        transactional batches ``verify`` checks first."""
        if producer_batches is None:
            batches = []
            next_offset = validated.first_offset
            for header in validated.headers:
                first_offset = next_offset
                next_offset += header.records_count
                if header.producer_id != NO_PRODUCER_ID:
                    if verify is not None and header.is_transactional:
                        verify(header.producer_id, header.producer_epoch)
                    batches.append(ProducerBatch(
                        header.producer_id, header.producer_epoch, header.base_sequence,
                        first_offset, next_offset - 1, header.max_timestamp,
                        header.is_transactional,
                    ))
            if not batches:
                return None
            producer_batches = tuple(batches)
        return self._producer_state.prepare(producer_batches, validated.last_offset + 1)

    def _write(
        self,
        validated: ValidatedAppend,
        now_ms: int,
        producer_batches: tuple[ProducerBatch, ...] | None = None,
        *,
        verify: TransactionVerifier | None = None,
        flush: bool = False,
    ) -> AppendInfo:
        """Judge the producers (``verify`` first), roll if due, write, and flush if ``flush``
        or ``flush.messages`` says so, before the new end is published. Under the lock. A
        duplicate writes nothing."""
        judged = self._judge_producers(validated, producer_batches, verify)
        if isinstance(judged, DuplicateAppend):
            return self._duplicate_append_info(judged)
        segment = self.active_segment
        if self._roll_due(segment, validated, now_ms):
            log.debug(
                "rolling log %s: segment %d has %d bytes, an append of %d bytes, max timestamp "
                "%d", self._local.directory, segment.base_offset, segment.size_bytes,
                validated.size_bytes, validated.max_timestamp,
            )
            segment = self._roll(self._local.end.offset)
        if not (flush or self._flush_due(validated.last_offset + 1)):
            return self._write_to(segment, validated, judged)
        # Durable before visible: the records are published only once fsynced, so that a
        # failed fsync (the log goes offline) never lets a reader see them.
        info = self._write_to(segment, validated, judged, publish=False)
        new_end = LogEnd(
            validated.last_offset + 1, segment.base_offset, segment.size_bytes,
            self._producer_state.first_unstable_offset,
        )
        self._local.flush(None, new_end.offset)
        self._local.publish_end(new_end)
        return info

    def _write_to(
        self,
        segment: Segment,
        validated: ValidatedAppend,
        judged: ProducerAppend | None,
        *,
        publish: bool = True,
    ) -> AppendInfo:
        """Write and index the append in the active ``segment``, record its producer state,
        publish the new log end (unless ``publish`` is False: the caller fsyncs first).

        A write that fails publishes nothing: the log end does not move past it, and the log
        goes offline when the failure was an I/O error (:meth:`LocalLog.append`).

        Order matters to lock-free readers: the ``.txnindex`` entries of aborted transactions
        are written before the marker that completes them, and the new end is published last,
        with the producer state's first unstable offset after the append (one value: a reader
        computes the LSO from one moment, so it never passes a transaction whose marker the
        reader cannot see, nor a transaction whose start it can).

        All or nothing: the ``.txnindex`` entries of an ABORT marker are written before the
        marker, and taken back if the marker's write fails (:meth:`LocalLog.append`).
        """
        self._maybe_assign_epoch(validated.partition_leader_epoch, validated.first_offset)
        aborted: list[AbortedTxn] = []
        if judged is not None:
            state = self._producer_state
            aborted = [
                AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                           state.last_stable_offset_for(txn))
                for txn in judged.completed_txns if txn.is_aborted
            ]
        self._local.append(
            segment,
            validated.last_offset,
            validated.max_timestamp,
            validated.shallow_offset_of_max_timestamp,
            validated.pieces,
            aborted,
        )
        state = self._producer_state
        if judged is not None:
            state.apply(judged)
        else:
            state.map_end_offset = validated.last_offset + 1
        if publish:
            self._local.publish_end(LogEnd(
                validated.last_offset + 1, segment.base_offset, segment.size_bytes,
                state.first_unstable_offset,
            ))
        return AppendInfo(
            first_offset=validated.first_offset,
            last_offset=validated.last_offset,
            max_timestamp=validated.max_timestamp,
            offset_of_max_timestamp=validated.shallow_offset_of_max_timestamp,
            log_append_time=validated.log_append_time,
            record_count=validated.record_count,
            size_bytes=validated.size_bytes,
            log_start_offset=self._log_start_offset,
        )

    def _maybe_assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Record a leader epoch's start before its first records are written (Kafka assigns
        before the segment append too: after a crash the cache may hold an entry at the log
        end, never lack one for a stored batch). A checkpoint that cannot be written takes
        the log offline, as a failed write does. Under the lock."""
        if epoch < 0 or not self._epoch_cache.needs_assign(epoch, start_offset):
            return
        try:
            self._epoch_cache.assign(epoch, start_offset)
        except StorageIOError as exc:
            self._local.io_failed(exc, "leader epoch checkpoint write")
            raise

    def _truncate_epochs_from_end(self, end_offset: int) -> None:
        """The leader epoch cache drops the epochs from the new log end on; a failed write is
        logged (as :meth:`_truncate_epochs_from_start`; Kafka flushes this one in the
        background)."""
        try:
            self._epoch_cache.truncate_from_end(end_offset)
        except StorageIOError:
            log.exception("cannot write the leader epoch checkpoint of %s", self._local.directory)

    def _truncate_epochs_from_start(self, start_offset: int) -> None:
        """The leader epoch cache forgets what lies below the new log start. A failed
        checkpoint write is logged, not raised: the entries in memory are right, and a stale
        file is cut to the log start at the next open."""
        try:
            self._epoch_cache.truncate_from_start(start_offset)
        except StorageIOError:
            log.exception("cannot write the leader epoch checkpoint of %s", self._local.directory)

    def _roll_due(self, segment: Segment, validated: ValidatedAppend, now_ms: int) -> bool:
        """Whether ``validated`` must go to a new segment ([B-4], [B-11], [B-12])."""
        return segment.should_roll(
            max_segment_bytes=self._local.config.segment_bytes,
            max_segment_ms=self._local.config.max_segment_ms,
            max_timestamp_in_messages=validated.max_timestamp,
            max_offset_in_messages=validated.last_offset,
            messages_size_bytes=validated.size_bytes,
            now_ms=now_ms,
        )

    def _flush_due(self, end_offset: int) -> bool:
        """Whether a log ending at ``end_offset`` holds ``flush.messages`` unflushed messages."""
        return end_offset - self._local.recovery_point >= self._local.config.flush_messages

    def roll(self) -> Segment:
        """Start a new active segment at the log end offset ([B-13], [B-14]); returns it.

        Rolling an empty active segment at the log end recreates it (still one segment there).
        """
        with self._lock:
            self._local.ensure_open()
            segment = self._roll(None)
            self._local.maybe_delete_pending_locked(self._time_ms())
            return segment

    def _roll(self, expected_next_offset: int | None) -> Segment:
        """:meth:`roll` under the lock (Kafka's ``UnifiedLog.roll``): the local log rolls,
        then the producer state takes its snapshot at the new segment's base offset and the
        flush below it is scheduled. An I/O error takes the log offline."""
        segment = self._local.roll(expected_next_offset)
        new_offset = segment.base_offset
        # Kafka's snapshot on roll, named by the new segment's base offset (the state reflects
        # every batch below it), written whatever the producers, as UnifiedLog.roll does: an
        # empty one (header, 0 entries) is what lets an unclean open of a log that never had a
        # producer start its scan at the latest roll instead of the log start (recovery.py,
        # pass 7). Not fsynced here: the roll holds the log's lock (and may run on an
        # append), and an fsync would stall every append behind it. As Kafka's scheduled
        # flushProducerStateSnapshot, the flush that moves the recovery point to this offset
        # fsyncs it first (flush: it runs off the append path), so the snapshot an unclean
        # open starts from (the latest at or below the recovery point) survives a power loss;
        # one lost before that flush costs a longer scan, never producer state.
        self._producer_state.map_end_offset = new_offset
        try:
            self._producer_state.take_snapshot(fsync=False)
        except BaseException as exc:
            if not isinstance(exc, StorageIOError) or ran_out_of_descriptors(exc) is None:
                self._local.io_failed(exc, "roll")
                raise
            # Written tmp + rename, so nothing of it is on disk; without it an unclean open
            # starts its scan at an older snapshot (longer, never wrong): not worth the roll.
            log.warning("log %s rolled to offset %d without its producer snapshot: no file "
                        "descriptor free (%s)", self._local.directory, new_offset, exc)
        else:
            self._local.note_unflushed_snapshot(new_offset)
        if self._flush_scheduler is not None:
            self._flush_scheduler(lambda: self._flush_after_roll(new_offset))
        return segment

    def _flush_after_roll(self, new_base_offset: int) -> None:
        """Kafka's ``flushUptoOffsetExclusive(newSegment.baseOffset)``, run by the scheduler."""
        with contextlib.suppress(LogClosedError):  # closed meanwhile: close flushed it all
            self.flush(new_base_offset)

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
        return self.fetch(offset, max_bytes, min_one_message=min_one_message).data

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
        their next offset and record count ([B-29]..[B-33]).

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
        earlier records, [B-31]). With ``min_one_message`` the first batch is returned even when
        larger than ``max_bytes``; without it such a read returns nothing. Only batches of one
        segment are returned per call; they stop before a batch whose header is malformed (the
        next fetch at its offset raises). ``next_offset`` is the last batch's last offset + 1
        (``offset`` when no batch came back), ``records_count`` the sum of the batches' record
        counts, both from the headers the read went over anyway (:meth:`Segment.fetch`).
        Reading at the log end returns no batches. Thread-safe against a concurrent append.

        Deliberate difference from Kafka: Kafka may return a partial last batch (the consumer
        drops it); this returns whole batches only.

        ``isolation_level`` READ_COMMITTED stops before the last stable offset (batches from
        the LSO on are left out; the LSO is always a batch boundary) and fills
        ``aborted_transactions`` with the aborted transactions overlapping the offsets returned,
        from the ``.txnindex`` of the segment read and the later ones until a search is
        complete ([B-70], [B-71]); the consumer drops their records and every control batch.

        Raises:
            OffsetOutOfRangeError: ``offset`` below the log start offset or above the log end.
            ValueError: ``max_bytes`` negative.
        """
        if isolation_level != IsolationLevel.READ_COMMITTED:
            fetched = self._read_segments(offset, max_bytes, min_one_message, max_records)
            if fetched is None:
                return FetchedBatches(b"", offset, 0)
            if upper_bound is not None and fetched.next_offset > upper_bound:
                return self._bounded_part(fetched, offset, upper_bound)
            return fetched
        stable = self.last_stable_offset
        if upper_bound is not None:
            stable = min(stable, upper_bound)
        fetched = self._read_segments(offset, max_bytes, min_one_message, max_records)
        if fetched is None:
            return FetchedBatches(b"", offset, 0)
        return self._committed_part(fetched, offset, stable)

    @staticmethod
    def _bounded_part(fetched: FetchedBatches, offset: int, upper_bound: int) -> FetchedBatches:
        """The whole batches of ``fetched`` (read at ``offset``) starting below
        ``upper_bound``; empty at ``offset`` when none is left."""
        if offset >= upper_bound:
            return FetchedBatches(b"", offset, 0)
        data, next_offset, records_count = _cut_batches_at(fetched.data, upper_bound, offset)
        if not data:
            return FetchedBatches(b"", offset, 0)
        return FetchedBatches(data, next_offset, records_count)

    def _committed_part(
        self, fetched: FetchedBatches, offset: int, stable: int
    ) -> FetchedBatches:
        """What a READ_COMMITTED reader may see of ``fetched`` (read at ``offset``): the whole
        batches starting below ``stable`` (an LSO read before the data), with the aborted
        transactions overlapping them. Empty at ``offset`` when none is left."""
        if offset >= stable:
            return FetchedBatches(b"", offset, 0)
        data, next_offset, records_count = fetched.data, fetched.next_offset, fetched.records_count
        if next_offset > stable:
            data, next_offset, records_count = _cut_batches_at(data, stable, offset)
            if not data:
                return FetchedBatches(b"", offset, 0)
        aborted = self._collect_aborted_txns(offset, next_offset)
        return FetchedBatches(data, next_offset, records_count, aborted)

    def _collect_aborted_txns(self, start_offset: int, upper_bound: int) -> tuple[AbortedTxn, ...]:
        """Aborted transactions overlapping ``[start_offset, upper_bound)``, from the segment
        holding ``start_offset`` on (:meth:`LocalLog.collect_aborted_txns`)."""
        return self._local.collect_aborted_txns(start_offset, upper_bound)

    def _read_segments(
        self, offset: int, max_bytes: int, min_one_message: bool, max_records: int = 0
    ) -> FetchedBatches | None:
        """Whole batches from the segment holding ``offset`` up to the published end, from
        the log start offset on (:meth:`LocalLog.read`); None at the log end."""
        return self._local.read(
            offset, max_bytes, min_one_message, max_records, self._log_start_offset
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
        """:meth:`offset_for_timestamp` for a timestamp ``>= 0``, then :meth:`fetch` there
        (``max_records`` as there, from the record found).

        Returns the record found (its timestamp and offset) and the whole batches from the one
        holding it, as :meth:`fetch` at its offset returns them; the batch searched is read
        once. Only records below the log end published when the call started are searched.
        When none qualifies: ``(None, empty batches at the log end offset)``. A log that
        tracks a high watermark (replication) searches and returns only records below it, as
        :meth:`fetch` with ``upper_bound``. Thread-safe against a concurrent append.

        With ``isolation_level`` READ_COMMITTED only a record below the last stable offset
        matches (Kafka's ``fetchOffsetForTimestamp`` filters the lookup by the last fetchable
        offset); when none does: ``(None, empty batches at the LSO)``, where a READ_COMMITTED
        reader's "latest" is. The batches are cut at the LSO and carry the aborted transactions
        overlapping them, as :meth:`fetch` returns them.

        Raises:
            ValueError: ``timestamp`` or ``max_bytes`` negative (the special ListOffsets
                targets are :meth:`offset_for_timestamp`'s).
            CorruptRecordError, InvalidRecordError: a malformed or corrupt batch on the way.
        """
        if timestamp < 0:
            raise ValueError(f"timestamp must not be negative, got {timestamp}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, got {max_bytes}")
        if self._local.is_offline:
            raise self._local.offline_error()
        committed = isolation_level == IsolationLevel.READ_COMMITTED
        # The LSO before the end: the end read next is never below it.
        stable = self.last_stable_offset if committed else -1
        end = self._local.end
        found = self._local.fetch_by_timestamp(
            timestamp, self._log_start_offset, max_bytes, end, min_one_message, max_records
        )
        if not committed:
            high_watermark = self._high_watermark
            if high_watermark is not None:
                # Replicated: a consumer reads below the high watermark only (as fetch's
                # upper_bound), so a record at or above it is not found yet.
                if found is None or found[0].offset >= high_watermark:
                    return None, FetchedBatches(b"", min(high_watermark, end.offset), 0)
                record, fetched = found
                if fetched.next_offset > high_watermark:
                    fetched = self._bounded_part(fetched, record.offset, high_watermark)
                return record, fetched
            if found is None:
                return None, FetchedBatches(b"", end.offset, 0)
            return found
        if found is None or found[0].offset >= stable:
            return None, FetchedBatches(b"", stable, 0)
        record, fetched = found
        return record, self._committed_part(fetched, record.offset, stable)

    def offset_for_timestamp(
        self,
        timestamp: int,
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> TimestampOffset | None:
        """ListOffsets: the offset for a timestamp or a special target ([B-36]..[B-40]).

        * ``-2`` (earliest) and ``-4`` (earliest local): ``(-1, log_start_offset)``;
        * ``-1`` (latest): ``(-1, log_end_offset)``, or the high watermark of a log that
          tracks one (a replicated partition's; consumers read below it only, and no
          record at or above it is found for the targets below);
        * ``-3`` (max timestamp): the first record holding the largest timestamp of the log,
          in the first segment holding it; None for a log without timestamps;
        * ``-5`` (latest tiered): None (no tiered storage);
        * otherwise the earliest record (offset ``>= log_start_offset``) whose timestamp is
          ``>= timestamp``, searched in the first segment whose largest timestamp (or, with no
          timestamps, its file's mtime) is ``>= timestamp``; returns that record's own
          timestamp. None when there is none.

        With ``isolation_level`` READ_COMMITTED, latest is the last stable offset, and a record
        found at or above it for a timestamp or max timestamp is not returned (Kafka's
        ``Partition.fetchOffsetForTimestamp``: every target but latest and earliest is filtered
        by the last fetchable offset).

        Thread-safe against a concurrent append.
        """
        if self._local.is_offline:
            raise self._local.offline_error()
        if isolation_level == IsolationLevel.READ_COMMITTED:
            if timestamp == LATEST_TIMESTAMP:
                return TimestampOffset(NO_TIMESTAMP, self.last_stable_offset)
            stable = self.last_stable_offset
            found = self.offset_for_timestamp(timestamp)
            if (found is not None and found.offset >= stable
                    and timestamp not in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP)):
                return None
            return found
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampOffset(NO_TIMESTAMP, self._log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            # The log end, or the high watermark of a replicated log (equal otherwise).
            return TimestampOffset(NO_TIMESTAMP, self.high_watermark)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return None
        high_watermark = self._high_watermark
        if high_watermark is not None:
            # Replicated: only records below the high watermark are found (Kafka's
            # fetchOffsetForTimestamp filters by the last fetchable offset).
            found = self._offset_for_timestamp_below_end(timestamp)
            return found if found is None or found.offset < high_watermark else None
        return self._offset_for_timestamp_below_end(timestamp)

    def _offset_for_timestamp_below_end(self, timestamp: int) -> TimestampOffset | None:
        """:meth:`offset_for_timestamp` of a timestamp or max timestamp, up to the log end."""
        if timestamp == MAX_TIMESTAMP:
            return self._local.max_timestamp_record()
        return self._local.find_offset_by_timestamp(timestamp, self._log_start_offset)

    # ---------------------------------------------------------------- truncation

    def truncate_to(self, offset: int) -> bool:
        """Remove every record with offset ``>= offset`` ([B-27]); True if anything changed.

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
        """Remove every segment and continue at ``new_offset`` with one empty segment ([B-28]).

        Log start offset, log end offset and recovery point all become ``new_offset``, and so
        does a tracked high watermark; the leader epoch cache is cleared ([B-28]).
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
        """Delete the oldest segments retention lets go ([B-59]..[B-64]; see ``retention.py``).

        By the log start offset always, by ``retention.bytes`` and ``retention.ms`` when
        ``cleanup.policy`` contains ``delete``; at most ``max_segments``; only segments wholly
        below the high watermark ([B-60]: a single server's is the log end). If every segment goes,
        the log rolls first so that an empty active segment remains ([B-63]). The log start
        offset moves to the first kept segment's base offset (never down); the deleted segments
        leave the segment map and are renamed ``.deleted`` now, and deleted
        ``file.delete.delay.ms`` later. Returns the plan carried out (empty if nothing went).

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
                self._roll(None)  # [B-63]: an empty active segment remains to append to
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
        ``LocalLog.replaceSegments``, [B-74]).

        The steps, each a crash point that recovery resolves ([B-48]/[B-49]):

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
        """fsync every segment holding offsets in ``[recovery_point, offset)`` ([B-66]).

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
        ``.log`` ([B-68]); closing goes on past a failing segment and raises the first error.
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


def _cut_batches_at(data: bytes, stable: int, offset: int) -> tuple[bytes, int, int]:
    """The whole batches of ``data`` that start below ``stable``: (bytes, next offset, records)."""
    position = 0
    next_offset = offset
    records = 0
    view = memoryview(data)
    while position < len(data):
        header = parse_header(view, position)
        if header.base_offset >= stable:
            break
        position = header.end_position
        next_offset = header.next_offset
        records += header.records_count
    return data[:position], next_offset, records
