"""A partition's segments in one directory: Kafka's ``LocalLog``, under the :class:`PartitionLog`.

The local log is the part of a partition log that is files: the ordered :class:`Segments` of one
directory ``<topic>-<partition>/``, the last of them *active*, and what is done to them::

    [segment 0 .......][segment 1000 .......][segment 2000 ...active...]
                                                                       ^ published end (LEO,
                                                                         active base, its size)

It rolls a new active segment, writes an append's bytes to the active one, reads whole batches
by offset and searches by timestamp up to the end it published, truncates, schedules removed
segments for deletion (renamed ``*.deleted`` now, closed and deleted ``file.delete.delay.ms``
later, so a reader that still holds one keeps a valid file), swaps cleaned segments in,
fsyncs (moving the recovery point), closes, and goes offline after an I/O error. What the
records *mean* — offsets assigned by validation, the log start offset, the high watermark, the
last stable offset, producer state and leader epochs — is the log above it:
:class:`~stratalog.server.storage.partition_log.PartitionLog` (Kafka's ``UnifiedLog``), which
holds one LocalLog and calls it. Kafka splits the two so
(``storage/src/main/java/org/apache/kafka/storage/internals/log/LocalLog.java`` and
``UnifiedLog.java``), and so does this module.

Reads never block appends: the writer publishes the end of the log as one immutable
:class:`LogEnd` only after the bytes are written, and a read stops at the end it saw.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from stratalog.records.batch import NO_TIMESTAMP
from stratalog.records.log_layout import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
)

from .config import LogConfig
from .descriptor_budget import ran_out_of_descriptors
from .durable import fsync_directory
from .errors import (
    CleaningAbortedError,
    InvalidTopicError,
    LogClosedError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    OutOfDescriptorsError,
    StorageError,
    StorageIOError,
)
from .files import (
    log_file,
    offset_index_file,
    time_index_file,
    transaction_index_file,
)
from .open_segments import OpenSegments
from .segment import FetchedBatches, Segment
from .segments import Segments
from .time_index import TimestampOffset
from .topic_names import parse_partition_dir_name
from .txn_index import AbortedTxn

__all__ = ["LocalLog", "LogEnd", "delete_segments"]

log = logging.getLogger(__name__)


class LogEnd(NamedTuple):
    """The end of the log as readers may see it, published as one value after each write.

    ``first_unstable`` is the producer state's first unstable offset as of that end (None: no
    transaction open), published with it so that a lock-free reader computes the LSO from one
    consistent moment: two separate reads could pair an end from before a marker with the state
    from after it, an LSO past a marker the reader's data does not hold. The local log carries
    it for the log above, which computes it.
    """

    offset: int  # the log end offset (next offset to assign)
    segment_base_offset: int  # the active segment holding the end
    position: int  # readable bytes of that segment
    first_unstable: int | None = None


class LocalLog:
    """The segments of one partition in one directory, and the files' life cycle.

    Holds: the directory, the :class:`LogConfig`, the clock, the :class:`Segments` map, the
    published :class:`LogEnd`, the recovery point (everything below it is fsynced), the
    segments waiting for deferred deletion, the roll snapshots not fsynced yet, and the
    offline and closed flags.

    Invariants: at least one segment while open; segment base offsets increase and each
    segment's offsets lie below the next one's base; the active segment is the last one and
    holds the log end offset's position; the published end never runs ahead of bytes written.

    Crash behaviour: appends reach the page cache; :meth:`flush` makes them durable and
    advances the recovery point. Segments removed by retention, truncation or a roll over an
    empty segment are renamed ``.deleted`` first; a crash before their deletion leaves files
    the next open deletes (``recovery.py``, pass 1). An I/O error on a write path (write,
    index entry, fsync, roll, rename) publishes nothing and takes the log offline
    (:meth:`io_failed`); running out of file descriptors before anything was written raises
    OutOfDescriptorsError and leaves it online (:meth:`out_of_descriptors`).

    Concurrency: not thread-safe by itself. Every mutation runs under ``lock``, the
    :class:`~stratalog.server.storage.partition_log.PartitionLog`'s (an ``RLock`` shared by
    the two layers, as Kafka's ``LocalLog`` relies on ``UnifiedLog``'s lock): the methods
    documented "under the lock" expect the caller to hold it, and :meth:`flush`,
    :meth:`maybe_delete_pending`, :meth:`replace_segments`, :meth:`close` and
    :meth:`close_for_deletion` take it themselves (fsyncs and unlinks run outside it). Reads
    (:meth:`read`, the timestamp searches) take no lock: they see one published end and a
    copy-on-write segment map.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        time_ms: Callable[[], int],
        segments: Segments,
        lock: threading.RLock,
        end: LogEnd,
        *,
        recovery_point: int,
        directory_changed: bool = False,
        open_segments: OpenSegments | None = None,
        io_failure_handler: Callable[[BaseException], None] | None = None,
        flush_snapshot: Callable[[int], None] | None = None,
    ) -> None:
        """Take over ``segments`` (non-empty, the active one ready) ending at ``end``.

        ``lock`` is the log above's; ``directory_changed`` makes the next flush fsync the
        directory; ``open_segments`` is the cache new segments join; ``io_failure_handler``
        is told of an I/O error on a write path, once, when the log goes offline;
        ``flush_snapshot`` fsyncs the producer snapshot a roll wrote at an offset (see
        :meth:`note_unflushed_snapshot`).
        """
        self._directory = directory
        self._config = config
        self._time_ms = time_ms
        self._segments = segments
        self._lock = lock
        self._end = end
        self._closed = False
        self._offline = False
        self._pending_deletes: list[tuple[int, Segment]] = []  # (due time ms, segment)
        # A file was created or renamed since the last directory fsync.
        self._directory_dirty = directory_changed
        self._truncations = 0  # counts truncations, so a flush can tell one overlapped it
        # The cache that closes the files of inactive segments (segments.py's Segment docs);
        # new segments get it. One per server (the LogManager's), or one per embedded log.
        self._open_segments = open_segments
        # Told of an I/O error on a write path (the log is offline then): the LogManager
        # takes the log's directory offline. See io_failed.
        self._io_failure_handler = io_failure_handler
        self._flush_snapshot = flush_snapshot
        self._recovery_point = recovery_point
        self._last_flush_ms = time_ms()
        # The roll snapshots written without an fsync, by offset: flush fsyncs each before the
        # recovery point reaches it (see LogWriter.roll).
        self._unflushed_snapshots: set[int] = set()
        # The running max of segment timestamps for time lookups (see first_segment_reaching).
        self._timestamp_lock = threading.Lock()
        self._timestamp_cache_version = -1
        self._timestamp_cache_segments: list[Segment] = []
        self._timestamp_prefix_max: list[int] = []

    # ---------------------------------------------------------------- properties

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def segments(self) -> Segments:
        """The segment map (read-only: only the log mutates it)."""
        return self._segments

    @property
    def active_segment(self) -> Segment:
        active = self._segments.active
        assert active is not None
        return active

    @property
    def end(self) -> LogEnd:
        """The end of the log readers may see (one published value; lock-free)."""
        return self._end

    @property
    def log_end_offset(self) -> int:
        return self._end.offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this has been fsynced."""
        return self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def size_bytes(self) -> int:
        """Bytes in all segments' ``.log`` files."""
        return self._segments.size_bytes

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def open_segments(self) -> OpenSegments | None:
        """The cache that closes inactive segments' files (new segments join it)."""
        return self._open_segments

    @property
    def pending_deletes(self) -> int:
        """Segments renamed ``.deleted`` and waiting for their delay to pass."""
        return len(self._pending_deletes)

    # ---------------------------------------------------------------- state the log above sets

    def update_config(self, config: LogConfig) -> LogConfig:
        """Use ``config`` from now on; returns the old one. Under the lock."""
        old, self._config = self._config, config
        return old

    def publish_end(self, end: LogEnd) -> None:
        """Make ``end`` what readers see: after its bytes are written (and fsynced, when the
        append asked for it). Under the lock."""
        self._end = end

    def update_recovery_point(self, offset: int) -> None:
        """Set the recovery point (the log above moves it with the log start offset and
        truncations). Under the lock."""
        self._recovery_point = offset

    def note_unflushed_snapshot(self, offset: int) -> None:
        """A roll wrote the producer snapshot at ``offset`` without an fsync: the flush that
        moves the recovery point to it fsyncs it first. Under the lock."""
        self._unflushed_snapshots.add(offset)

    # ---------------------------------------------------------------- roll

    def roll(self, expected_next_offset: int | None) -> Segment:
        """Start a new active segment at the log end offset (or ``expected_next_offset`` when
        higher: a follower's append may start past the end) and publish the end in it; returns
        it. Kafka's ``LocalLog.roll``. Under the lock; an I/O error takes the log offline.

        Rolling an empty active segment at the log end recreates it (still one segment there).
        """
        try:
            return self._roll(expected_next_offset)
        except BaseException as exc:
            self.io_failed(exc, "roll")
            raise

    def _roll(self, expected_next_offset: int | None) -> Segment:
        end = self._end
        new_offset = max(expected_next_offset or 0, end.offset)
        active = self.active_segment
        segment: Segment | None = None
        if new_offset in self._segments:
            if active.base_offset == new_offset and active.size_bytes == 0:
                # KAFKA-6388: an empty active segment at the roll offset is replaced.
                log.warning(
                    "rolling log %s to offset %d, where the empty active segment already is: "
                    "recreating it", self._directory, new_offset,
                )
                self._segments.remove(new_offset)
                self.schedule_delete([active])
            else:
                raise StorageError(
                    f"cannot roll log {self._directory} to a new segment at offset "
                    f"{new_offset}: a segment with that base offset already exists"
                )
        elif new_offset < active.base_offset:
            raise StorageError(
                f"cannot roll log {self._directory} to offset {new_offset}, below the active "
                f"segment's base offset {active.base_offset}"
            )
        else:
            self._delete_stale_files(new_offset)
            active.on_become_inactive()
            try:
                segment = self._create_active_segment(new_offset)
            except BaseException as exc:
                if ran_out_of_descriptors(exc) is None:
                    raise
                # Nothing of the new segment is kept: the old one takes the appends again,
                # and the next append rolls again (its roll is still due).
                self._delete_stale_files(new_offset, left_by="this roll")
                active.activate()
                self.out_of_descriptors(exc, "roll")
                raise
        if segment is None:  # the KAFKA-6388 replacement above
            segment = self._create_active_segment(new_offset)
        self._segments.add(segment)
        self._directory_dirty = True
        # The log end offset does not change; only the segment holding it does.
        self._end = LogEnd(end.offset, new_offset, 0, end.first_unstable)
        return segment

    def _create_active_segment(self, base_offset: int) -> Segment:
        """A new active segment at ``base_offset`` with both its indexes open, so that a
        shortage of descriptors shows here, in the roll, and not in the first append after it
        (whose bytes would then be written before its index failed). Its files are closed
        again if that fails.

        Raises:
            StorageIOError: a file could not be created or opened.
        """
        segment = Segment.create(
            self._directory, base_offset, self._config, time_ms=self._time_ms,
            open_segments=self._open_segments, active=True,
        )
        try:
            segment.offset_index  # noqa: B018 - opened for the side effect
            segment.time_index  # noqa: B018
        except BaseException:
            segment.close_handlers()  # writes nothing: its files are deleted by the caller
            raise
        return segment

    def _delete_stale_files(self, base_offset: int, left_by: str = "") -> None:
        """Delete the files of a segment at ``base_offset`` that is not in the map: left by a
        crash (warned of), or by ``left_by``, a roll that failed half-way."""
        for path in (
            log_file(self._directory, base_offset),
            offset_index_file(self._directory, base_offset),
            time_index_file(self._directory, base_offset),
            transaction_index_file(self._directory, base_offset),
        ):
            if path.exists():
                if not left_by:
                    log.warning("newly rolled segment file %s already exists; deleting it",
                                path)
                try:
                    path.unlink()
                except OSError as exc:
                    raise StorageIOError(f"failed to delete stale file {path}: {exc}") from exc

    # ---------------------------------------------------------------- writes

    def append(
        self,
        segment: Segment,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        pieces: Sequence[bytes | bytearray | memoryview],
        aborted_txns: Sequence[AbortedTxn] = (),
    ) -> None:
        """Write validated batches to the active ``segment`` (Kafka's ``LocalLog.append``),
        after the ``.txnindex`` entries of the transactions an ABORT marker among them ends.
        Publishes nothing: the log above publishes the new end once its producer state
        follows. Under the lock.

        All or nothing: the ``.txnindex`` entries are taken back if the write fails. (Kafka
        writes the marker first; an index write failing after it takes the log directory
        offline. Here it fails the call, and the log stays as it was.) A write that fails
        goes offline (:meth:`io_failed`) when the failure was an I/O error, since the file may
        now hold bytes past the published end that later appends must not follow; an index
        that could not be opened for want of a descriptor fails before the bytes are written,
        and raises the retriable OutOfDescriptorsError.
        """
        for entry in aborted_txns:
            segment.txn_index.append(entry)
        size_before = segment.size_bytes
        try:
            segment.append(last_offset, max_timestamp, offset_of_max_timestamp, pieces)
        except BaseException as exc:
            if aborted_txns:
                self._take_back_txn_index_entries(segment, aborted_txns[0].last_offset)
            # An index that could not be opened fails the append before its bytes are
            # written: the log is as it was, and only then is the failure retriable.
            if segment.size_bytes == size_before:
                self.out_of_descriptors(exc, "write")
            self.io_failed(exc, "write")
            raise

    def _take_back_txn_index_entries(self, segment: Segment, from_offset: int) -> None:
        """Cut the ``.txnindex`` entries of a marker whose write failed. If that fails too, the
        entries stay: they name offsets from the log end on, which the next marker's entries
        must pass (a retry fails until a restart rebuilds the index from the log)."""
        try:
            segment.txn_index.truncate_to(from_offset)
        except StorageError:
            log.exception("cannot take back the transaction index entries from offset %d of %s",
                          from_offset, segment.log_path)

    # ---------------------------------------------------------------- reads

    def read(
        self,
        offset: int,
        max_bytes: int,
        min_one_message: bool,
        max_records: int,
        log_start_offset: int,
        stop_offset: int | None = None,
        region_bytes_min: int | None = None,
    ) -> FetchedBatches | None:
        """:meth:`Segment.fetch` on the segment holding ``offset``, then on later ones while it
        says None (a gap at the end of a segment), never past the published log end. None at
        the log end. Kafka's ``LocalLog.read``; lock-free.

        With ``region_bytes_min`` (not None), :meth:`Segment.fetch_region` instead: the
        batches as a file region when that large, those from the one holding ``stop_offset``
        on left out.

        Raises:
            OffsetOutOfRangeError: ``offset`` below ``log_start_offset`` or above the log end.
            ValueError: ``max_bytes`` negative.
            LogDirOfflineError: the log is offline.
        """
        if self._offline:
            raise self.offline_error()
        end = self._end
        if offset < log_start_offset or offset > end.offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for log {self._directory}: the log holds "
                f"offsets [{log_start_offset}, {end.offset})",
                log_start_offset=log_start_offset,
                log_end_offset=end.offset,
            )
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, got {max_bytes}")
        if offset == end.offset:
            return None
        segments = self._segments
        segment = segments.floor_segment(offset)
        if segment is None:
            raise OffsetOutOfRangeError(
                f"offset {offset} is below the first segment of log {self._directory}",
                log_start_offset=log_start_offset,
                log_end_offset=end.offset,
            )
        while segment is not None and segment.base_offset <= end.segment_base_offset:
            if segment.base_offset == end.segment_base_offset:
                max_position = end.position
            else:
                max_position = segment.size_bytes
            if region_bytes_min is None:
                fetched = segment.fetch(offset, max_bytes, max_position, min_one_message,
                                        max_records)
            else:
                fetched = segment.fetch_region(offset, max_bytes, max_position, min_one_message,
                                               stop_offset, region_bytes_min)
            if fetched is not None:
                if (fetched.records_count or not fetched.data
                        or fetched.next_offset <= offset or fetched.next_offset >= end.offset):
                    return fetched
                # Only empty batches (a compacted log's: cleaner.py keeps some): a read
                # returns records, so it goes on from after them.
                offset = fetched.next_offset
                segment = segments.floor_segment(offset)
                continue
            # A gap at the end of this segment: the offset's data is in a later one.
            segment = segments.higher_segment(segment.base_offset)
        return None

    def collect_aborted_txns(
        self, start_offset: int, upper_bound: int
    ) -> tuple[AbortedTxn, ...]:
        """Aborted transactions overlapping ``[start_offset, upper_bound)``, from the segment
        holding ``start_offset`` on (Kafka's ``LocalLog.collectAbortedTransactions``)."""
        found: list[AbortedTxn] = []
        segments = self._segments
        segment = segments.floor_segment(start_offset)
        while segment is not None:
            result = segment.collect_aborted_txns(start_offset, upper_bound)
            found.extend(result.aborted_txns)
            if result.is_complete:
                break
            segment = segments.higher_segment(segment.base_offset)
        return tuple(found)

    # ---------------------------------------------------------------- timestamp searches

    def fetch_by_timestamp(
        self,
        timestamp: int,
        log_start_offset: int,
        max_bytes: int,
        end: LogEnd,
        min_one_message: bool,
        max_records: int,
    ) -> tuple[TimestampOffset, FetchedBatches] | None:
        """The first record at or after ``timestamp`` (offset ``>= log_start_offset``) below
        ``end``, and the whole batches from the one holding it (:meth:`Segment.fetch_by_timestamp`
        on the first segment reaching the timestamp); None when there is none. Lock-free.

        In a compacted log a segment whose max timestamp reaches the target may hold no
        record that does (the cleaner removed it; empty batches keep their max timestamps,
        as Kafka's): the search goes on in the next segments. Otherwise Kafka's rule: the
        first segment reaching the target, alone.
        """
        segment = self.first_segment_reaching(timestamp)
        found = None
        compacted = self._config.is_compacted
        while segment is not None and segment.base_offset <= end.segment_base_offset:
            if segment.base_offset == end.segment_base_offset:
                max_position = end.position
            else:
                max_position = segment.size_bytes
            found = segment.fetch_by_timestamp(
                timestamp, log_start_offset, max_bytes, max_position, min_one_message,
                max_records,
            )
            if found is not None or not compacted:
                break
            segment = self._segments.higher_segment(segment.base_offset)
        return found

    def max_timestamp_record(self) -> TimestampOffset | None:
        """The first record holding the largest timestamp of the log, in the first segment
        holding it; None for a log without timestamps. Lock-free."""
        segments = list(self._segments)
        best: Segment | None = None
        best_timestamp = NO_TIMESTAMP
        for segment in segments:
            segment_max = segment.max_timestamp_so_far
            if best is None or segment_max > best_timestamp:
                best, best_timestamp = segment, segment_max
        if best is None or best_timestamp < 0:
            return None
        return best.find_max_timestamp_record()

    def find_offset_by_timestamp(
        self, timestamp: int, log_start_offset: int
    ) -> TimestampOffset | None:
        """The earliest record (offset ``>= log_start_offset``) whose timestamp is
        ``>= timestamp``, searched in the first segment reaching it (and the next ones in a
        compacted log, see :meth:`fetch_by_timestamp`); None when there is none. Lock-free."""
        segment = self.first_segment_reaching(timestamp)
        compacted = self._config.is_compacted
        while segment is not None:
            found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
            if found is not None or not compacted:
                return found
            # Cleaned away (see fetch_by_timestamp): the next segments may hold one.
            segment = self._segments.higher_segment(segment.base_offset)
        return None

    def first_segment_reaching(self, timestamp: int) -> Segment | None:
        """The first segment whose largest timestamp is ``>= timestamp`` (Kafka
        LogSegment.largestTimestamp; docs/kafka-behaviours.md#timestamp-lookup).

        Kafka scans the segments in order. Here the running maximum of the non-active segments'
        max timestamps (which cannot change until the segment map does) is kept, extended only
        as far as lookups need, and searched by bisection: O(log n) per lookup instead of
        O(n). Segments without timestamps (judged by their file's mtime, which can change)
        and the active segment are evaluated live, in order, as Kafka does.
        """
        with self._timestamp_lock:
            version = self._segments.version
            if version != self._timestamp_cache_version:
                self._timestamp_cache_version = version
                self._timestamp_cache_segments = list(self._segments)
                self._timestamp_prefix_max = []
            segments = self._timestamp_cache_segments
            prefix_max = self._timestamp_prefix_max
            if prefix_max and prefix_max[-1] >= timestamp:
                return segments[bisect.bisect_left(prefix_max, timestamp)]
            index = len(prefix_max)
            while index < len(segments) - 1:
                segment_max = segments[index].max_timestamp_so_far
                if segment_max < 0:
                    break
                running = max(prefix_max[-1], segment_max) if prefix_max else segment_max
                prefix_max.append(running)
                if running >= timestamp:
                    return segments[index]
                index += 1
            for segment in segments[index:]:
                if segment.largest_timestamp >= timestamp:
                    return segment
            return None

    # ---------------------------------------------------------------- truncation

    def truncate_to(self, offset: int) -> Segment:
        """Remove every record with offset ``>= offset``: the segments entirely above it are
        scheduled for deletion, the active one is cut before the batch holding it, and the
        end moves to ``offset`` (its ``first_unstable`` kept as it was: the log above
        publishes the reloaded one). The recovery point falls to ``offset``. Returns the new
        active segment. Kafka's ``LocalLog.truncateTo``. Under the lock; the caller has
        checked that ``offset`` lies below the end and at or above the first segment's base.
        """
        self._truncations += 1
        doomed = self._segments.higher_segments(offset)
        self._segments.remove_many([segment.base_offset for segment in doomed])
        self.schedule_delete(doomed)
        active = self.active_segment
        # Active (files held open) before truncate_to grows its indexes back.
        active.activate()
        active.truncate_to(offset)
        # The first unstable offset as it was: one above the new end shows as the end.
        self._end = LogEnd(
            offset, active.base_offset, active.size_bytes, self._end.first_unstable
        )
        self._recovery_point = min(self._recovery_point, offset)
        return active

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Schedule every segment for deletion and continue at ``new_offset`` with one empty
        active segment; the end and the recovery point become ``new_offset`` (Kafka's
        ``LocalLog.truncateFullyAndStartAt``). Under the lock."""
        self._truncations += 1
        doomed = list(self._segments)
        # Rename the old files first, so that the new segment can take its name even when an
        # old segment had the same base offset.
        self.schedule_delete(doomed)
        segment = Segment.create(
            self._directory, new_offset, self._config, time_ms=self._time_ms,
            open_segments=self._open_segments, active=True,
        )
        # Add before removing, so that a reader always finds a segment.
        self._segments.add(segment)
        self._segments.remove_many(
            [old.base_offset for old in doomed if old.base_offset != new_offset]
        )
        self._directory_dirty = True
        self._end = LogEnd(new_offset, new_offset, 0)
        self._recovery_point = new_offset

    # ---------------------------------------------------------------- deletion

    def remove_segments(self, doomed: list[Segment]) -> None:
        """Take ``doomed`` (non-active segments retention let go) out of the map and schedule
        their deletion. Under the lock."""
        self._segments.remove_many([segment.base_offset for segment in doomed])
        self.schedule_delete(doomed)

    def schedule_delete(self, segments: list[Segment]) -> None:
        """Rename segments ``*.deleted`` now; close and delete them after the delay (Kafka
        LocalLog.deleteSegmentFiles; docs/kafka-behaviours.md#retention), in
        :meth:`maybe_delete_pending_locked`. Under the lock."""
        due_ms = self._time_ms() + self._config.file_delete_delay_ms
        for segment in segments:
            segment.change_file_suffixes("", DELETED_FILE_SUFFIX)
            self._pending_deletes.append((due_ms, segment))
        if segments:
            self._directory_dirty = True

    def take_due_deletes(self, now_ms: int) -> list[Segment]:
        """Take the ``.deleted`` segments whose delay has passed off the pending list; the
        caller holds the lock and deletes them with :func:`delete_segments` after releasing
        it (unlinking a large file can take milliseconds, and appends wait for the lock)."""
        if not self._pending_deletes:
            return []
        due: list[tuple[int, Segment]] = []
        remaining: list[tuple[int, Segment]] = []
        for due_ms, segment in self._pending_deletes:
            (due if due_ms <= now_ms else remaining).append((due_ms, segment))
        self._pending_deletes = remaining
        return [segment for _, segment in due]

    def maybe_delete_pending_locked(self, now_ms: int) -> None:
        """Delete the due segments now, under the lock (the embedded log's calls that remove
        segments: truncations, ``roll``; close)."""
        delete_segments(self.take_due_deletes(now_ms))

    def maybe_delete_pending(self, now_ms: int | None = None) -> int:
        """Delete the ``.deleted`` segments whose ``file.delete.delay.ms`` has passed, off the
        lock; returns how many. Takes the lock."""
        with self._lock:
            if self._closed:
                return 0
            due = self.take_due_deletes(self._time_ms() if now_ms is None else now_ms)
        # Off the lock: the segments left the map and were renamed when they were scheduled;
        # only this call holds them now.
        delete_segments(due)
        return len(due)

    # ---------------------------------------------------------------- segment replacement

    def replace_segments(
        self,
        new_segment: Segment,
        old_segments: list[Segment],
        step_hook: Callable[[str], None],
    ) -> None:
        """:meth:`PartitionLog.replace_segments` (Kafka's ``LocalLog.replaceSegments``): the
        three renames, each a crash point recovery resolves, then one publish of the map.
        Takes the lock."""
        with self._lock:
            current = self._segments
            active = current.active
            stale = (
                self._closed or self._offline or not old_segments
                or old_segments[0].base_offset != new_segment.base_offset
                or any(current.get(old.base_offset) is not old or old is active
                       for old in old_segments)
            )
            if stale:
                delete_segments([new_segment])
                raise CleaningAbortedError(
                    f"cleaning of {self._directory} aborted: the segments from offset "
                    f"{new_segment.base_offset} changed while they were cleaned (truncated, "
                    "deleted or closed)"
                )
            try:
                step_hook("swap")
                new_segment.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
                for old in sorted(old_segments, key=lambda s: s.base_offset, reverse=True):
                    step_hook(f"delete {old.base_offset}")
                    old.change_file_suffixes("", DELETED_FILE_SUFFIX)
                step_hook("rename")
                new_segment.change_file_suffixes(SWAP_FILE_SUFFIX, "")
                fsync_directory(self._directory)
            except BaseException as exc:
                self.io_failed(exc, "rename")
                # Whatever failed, the files are mid-swap: only a reopen (recovery) can say
                # what the log holds now.
                self._offline = True
                raise
            current.replace(new_segment, [old.base_offset for old in old_segments])
            due_ms = self._time_ms() + self._config.file_delete_delay_ms
            self._pending_deletes.extend((due_ms, old) for old in old_segments)
            log.info(
                "cleaned %d segments of %s into segment %d (%d bytes)", len(old_segments),
                self._directory, new_segment.base_offset, new_segment.size_bytes,
            )

    # ---------------------------------------------------------------- durability

    def flush(self, offset: int | None, end_offset: int | None) -> None:
        """:meth:`PartitionLog.flush`; ``end_offset``: the log end to flush through when it is
        not the published one (an append whose records are published only once durable, under
        the lock). Takes the lock for the bookkeeping only; the fsyncs run outside it."""
        # An append's own flush (its records written, waiting for it) passes end_offset.
        appends_flush = end_offset is not None
        with self._lock:
            self.ensure_open()
            if end_offset is None:
                end_offset = self._end.offset
            if offset is None:
                new_recovery_point = end_offset
                flush_to = end_offset + 1
            else:
                new_recovery_point = min(offset, end_offset)
                flush_to = new_recovery_point
            # Also those the recovery point already passed: a roll while an earlier flush
            # ran its fsyncs (at the offset that flush then moved it to), or retention moving
            # the recovery point to the new log start.
            snapshots = sorted(
                o for o in self._unflushed_snapshots
                if o <= max(new_recovery_point, self._recovery_point)
            )
            if flush_to <= self._recovery_point and not snapshots:
                return
            to_flush = self._segments.values(
                self._recovery_point, max(flush_to, self._recovery_point)
            )
            self._unflushed_snapshots.difference_update(snapshots)
            # The roll that wrote each snapshot set this flag, under the lock, with its rename.
            directory_dirty = self._directory_dirty
            self._directory_dirty = False
            truncations = self._truncations
        try:
            for segment in to_flush:
                if not segment.is_closed:
                    segment.flush()
            flush_snapshot = self._flush_snapshot
            for snapshot_offset in snapshots:
                if flush_snapshot is not None:
                    flush_snapshot(snapshot_offset)
            if directory_dirty:
                fsync_directory(self._directory)
        except BaseException as exc:
            with self._lock:
                self._directory_dirty = self._directory_dirty or directory_dirty
                self._unflushed_snapshots.update(snapshots)
            if not appends_flush:
                # EMFILE comes from opening a file (a closed segment's, a snapshot, the
                # directory), never from an fsync: nothing failed to reach the disk, and the
                # recovery point has not moved, so the next flush does it all again. Not so in
                # an append's own flush: its records are written and wait for it.
                self.out_of_descriptors(exc, "flush")
            self.io_failed(exc, "fsync")
            raise
        with self._lock:
            # A truncation while the fsyncs ran may have replaced what they covered: then the
            # recovery point stays where the truncation put it.
            if truncations == self._truncations:
                self._recovery_point = max(self._recovery_point, new_recovery_point)
            self._last_flush_ms = self._time_ms()

    def close(self, *, durable: bool) -> None:
        """Close every segment (each appends its final time-index entry and trims its indexes
        and ``.log``, Kafka LogSegment.close (docs/kafka-behaviours.md#flush); fsynced unless
        ``durable``: a flush just made them so) and finish deferred deletions. Goes on past a
        failing segment and raises the first error. Under the lock; the log above flushed first."""
        first_error: BaseException | None = None
        self._closed = True
        for segment in self._segments:
            try:
                segment.close(flush=not durable)
            except BaseException as exc:
                log.exception("failed to close segment %s", segment.log_path)
                first_error = first_error or exc
        for _, segment in self._pending_deletes:
            try:
                segment.delete()
            except BaseException as exc:
                first_error = first_error or exc
        self._pending_deletes = []
        if first_error is not None:
            raise first_error

    def close_for_deletion(self) -> None:
        """:meth:`PartitionLog.close_for_deletion`: every file closed, nothing written or
        synced. Idempotent; takes the lock."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = [segment for _, segment in self._pending_deletes]
            for segment in itertools.chain(self._segments, pending):
                try:
                    segment.close_handlers()
                except Exception:
                    log.warning("closing %s failed", segment.log_path, exc_info=True)
            self._pending_deletes = []

    def ensure_open(self) -> None:
        if self._offline:
            raise self.offline_error()
        if self._closed:
            raise LogClosedError(f"log {self._directory} is closed")

    # ---------------------------------------------------------------- log directory failure

    @property
    def is_offline(self) -> bool:
        """The log refuses reads and writes after an I/O error in its directory."""
        return self._offline

    def take_offline(self) -> None:
        """Refuse every read and write from now on (one flag, read first by every call)."""
        self._offline = True

    def out_of_descriptors(self, exc: BaseException, action: str) -> None:
        """After ``exc`` on a ``write``, ``roll`` or ``flush`` that left the log as it was: if
        it ran out of file descriptors, log it and raise the retriable OutOfDescriptorsError
        (the log stays online); otherwise return, for :meth:`io_failed` to judge it.

        Kafka's ``LogDirFailureChannel`` takes a directory offline on any IOException, EMFILE
        included (``storage/src/main/java/org/apache/kafka/storage/internals/log/
        LogDirFailureChannel.java``), and it stays offline until a restart. Here a shortage of
        descriptors is a moment of the process, not a fault of the disk: the append is
        refused and the next one tries again (docs/durability.md).

        Raises:
            OutOfDescriptorsError: ``exc`` was an EMFILE or ENFILE.
        """
        limit = ran_out_of_descriptors(exc)
        if limit is None or self._offline:
            return
        topic, partition = self._topic_partition()
        log.warning("log %s: a %s failed for want of a file descriptor (%s reached), not for"
                    " an I/O error: the log stays online, and the %s is tried again (%s)",
                    self._directory, action, limit, action, exc)
        raise OutOfDescriptorsError(topic, partition, action, limit=limit) from exc

    def io_failed(self, exc: BaseException, action: str) -> None:
        """After ``exc`` on a write path (``action``: write, fsync, roll, truncate, rename): an
        I/O error takes the log offline and reports it to the failure handler (the LogManager
        takes the whole directory offline, as Kafka's ``LogDirFailureChannel`` does). Other
        errors (bad input, a closed log) change nothing."""
        if not isinstance(exc, StorageIOError | OSError) or self._offline:
            return
        self._offline = True
        log.error("log %s is offline after a failed %s: %s", self._directory, action, exc)
        handler = self._io_failure_handler
        if handler is not None:
            try:
                handler(exc)
            except Exception:
                log.exception("the log directory failure handler failed for %s",
                              self._directory)

    def offline_error(self) -> LogDirOfflineError:
        topic, partition = self._topic_partition()
        return LogDirOfflineError(topic, partition)

    def _topic_partition(self) -> tuple[str, int]:
        try:
            return parse_partition_dir_name(self._directory.name)
        except InvalidTopicError:  # an embedded log in a directory of any name
            return self._directory.name, -1


def delete_segments(segments: list[Segment]) -> None:
    """Close and unlink the files of segments no log holds any more.

    Goes on past a failing segment and raises the first error: a file left behind still ends
    in ``.deleted``, and the next open of the log removes it (recovery's first pass).
    """
    first_error: BaseException | None = None
    for segment in segments:
        try:
            segment.delete()
        except BaseException as exc:
            log.exception("failed to delete segment %s", segment.log_path)
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
