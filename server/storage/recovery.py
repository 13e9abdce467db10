"""Loading a partition directory after a clean or an unclean shutdown: Kafka's ``LogLoader``.

A crash can leave a partition directory in several intermediate states: a torn batch (or
preallocated zeros) at the end of the active ``.log``; untrimmed or stale indexes; files renamed
``.deleted`` but not yet removed; the ``.cleaned``/``.swap`` files of an interrupted segment
replacement (Kafka LocalLog.replaceSegments; docs/kafka-behaviours.md#segment-replacement); index
files whose ``.log`` is gone. Loading is a sequence of numbered passes, each making the directory
simpler for the next (Kafka LogLoader.load; docs/kafka-behaviours.md#log-loading)::

    pass 1  remove *.deleted and *.cleaned; drop .swap files an incomplete split left behind
    pass 2  a .swap segment replaces the segments whose offsets it covers: delete those
    pass 3  rename *.swap to their final names
    pass 4  delete orphan index files; open every segment lazily (no index file is read);
            rebuild the indexes of a segment whose .index or .timeindex is missing
    pass 5  unclean shutdown only: recover every segment from the one holding the recovery
            point: scan batches (size, magic, CRC), rebuild both indexes, cut the .log at the
            first invalid byte and delete every later segment
    pass 6  offsets: log end offset from the last segment, log start offset from the
            checkpoint, recovery point; a log with no segment gets one; the active segment's
            indexes are grown back to segment.index.bytes
    pass 7  producer state (Kafka LogLoader.load, docs/kafka-behaviours.md#log-loading;
            UnifiedLog.lastStableOffset, docs/kafka-behaviours.md#aborted-transactions): snapshots
            above the log end or below the log start are deleted; the latest readable snapshot at or
            below the first segment passes 4/5 recovered (clean shutdown: the log end) is loaded,
            corrupt ones deleted with a warning, and without one the scan starts at the log start
            (as Kafka's rebuildProducerState; only a clean shutdown with no snapshot file at all
            scans nothing); the batches after it are scanned (headers, plus the marker of each
            control batch) and the .txnindex entries of the ABORT markers in recovered segments
            rebuilt; a scan that began at the log start with nothing known takes the producers it
            did not meet from the latest later snapshot; after a scan a snapshot at the log end is
            written; then (stratalog, not Kafka) the batch headers of the last two segments give
            each producer back the batches before its last one (a snapshot keeps the last only), so
            that a resend of any of its last 5 is a duplicate

Only the segments pass 5 recovers (and those with a missing index) have their index files
read; a clean start with 10,000 segments opens 10,000 ``.log`` descriptors and nothing else.

Deliberate difference from Kafka: a missing ``.timeindex`` is rebuilt from the ``.log`` instead
of being created empty (Kafka LogSegment.sanityCheck; docs/kafka-behaviours.md#log-loading): an
empty time index makes the segment's largest timestamp fall back to the file's mtime, which
misdirects timestamp lookups and time retention.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from stratalog.records.batch import NO_PRODUCER_ID, NO_TIMESTAMP, BatchHeader
from stratalog.records.control import EndTransactionMarker
from stratalog.records.errors import RecordError
from stratalog.records.file_names import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SNAPSHOT_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    is_index_file,
)
from stratalog.records.reader import iter_records

from .config import PRODUCER_ID_EXPIRATION_MS_DEFAULT, LogConfig
from .errors import CorruptIndexError, InvalidOffsetError, StorageIOError
from .files import offset_from_file_name
from .open_segments import OpenSegments
from .producer_state import ProducerBatch, ProducerStateManager
from .segment import Segment
from .segments import Segments
from .txn_index import AbortedTxn

__all__ = ["LoadedLog", "LogLoader", "load_log", "rebuild_producer_state", "restore_batch_history"]

log = logging.getLogger(__name__)

# Kafka keeps KRaft snapshots named *.checkpoint.deleted in the metadata log's directory; a
# partition directory never has them, but pass 1 spares them as Kafka does.
_KRAFT_SNAPSHOT_DELETED_SUFFIX = ".checkpoint" + DELETED_FILE_SUFFIX


@dataclass(frozen=True)
class LoadedLog:
    """What loading found: the segments and the offsets a :class:`PartitionLog` starts from.

    ``recovered_segments`` counts segments whose indexes were rebuilt from their ``.log``
    (pass 4 or 5); ``truncated_bytes`` the invalid bytes cut from ``.log`` files;
    ``deleted_segments`` the segments removed (swapped out, or after a truncation).
    ``directory_changed`` says files were created, renamed or deleted (fsync the directory).
    """

    segments: Segments
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    recovered_segments: int
    truncated_bytes: int
    deleted_segments: int
    directory_changed: bool
    producer_state: ProducerStateManager | None = None


def load_log(
    directory: Path,
    config: LogConfig,
    time_ms: Callable[[], int],
    *,
    had_clean_shutdown: bool | None,
    recovery_point_checkpoint: int | None = None,
    log_start_offset_checkpoint: int | None = None,
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    open_segments: OpenSegments | None = None,
) -> LoadedLog:
    """Run every pass of :class:`LogLoader` on ``directory``; see there."""
    return LogLoader(
        directory,
        config,
        time_ms,
        had_clean_shutdown=had_clean_shutdown,
        recovery_point_checkpoint=recovery_point_checkpoint,
        log_start_offset_checkpoint=log_start_offset_checkpoint,
        producer_id_expiration_ms=producer_id_expiration_ms,
        open_segments=open_segments,
    ).load()


class LogLoader:
    """Loads one partition directory, recovering it as far as its shutdown requires.

    Holds the directory, the config and clock given to every segment, how the last shutdown
    ended, the two checkpointed offsets (None when the checkpoint has no entry), and running
    counts for :class:`LoadedLog`.

    ``had_clean_shutdown``: True skips pass 5 (the directory's clean-shutdown marker said so);
    False recovers from the recovery point (from offset 0 without a checkpoint entry, Kafka
    LogManager.loadLogs; docs/kafka-behaviours.md#clean-shutdown); None, for a log opened on its own
    without a log directory's marker, recovers the active segment only: a process crash can only
    tear the end of the log.

    Crash behaviour: every pass is idempotent, so a crash during loading is handled by loading
    again. Within pass 5 a segment is cut before the later ones are deleted, as in Kafka; a
    crash between the two leaves later segments whose offsets follow a gap, which the next load
    keeps (they hold valid, later batches).

    Concurrency: runs before the log is published; nothing else may use the directory.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        time_ms: Callable[[], int],
        *,
        had_clean_shutdown: bool | None,
        recovery_point_checkpoint: int | None = None,
        log_start_offset_checkpoint: int | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        open_segments: OpenSegments | None = None,
    ) -> None:
        """``open_segments``: the cache that may close the files of the inactive segments
        (None: every segment's files stay open)."""
        self._directory = Path(directory)
        self._open_segments = open_segments
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self._first_recovered: int | None = None  # lowest base offset recovered by pass 4/5
        self._snapshot_offsets: list[int] = []  # the .snapshot files pass 4's listing saw
        self._config = config
        self._time_ms = time_ms
        self._had_clean_shutdown = had_clean_shutdown
        self._recovery_point_checkpoint = recovery_point_checkpoint
        self._log_start_offset_checkpoint = log_start_offset_checkpoint
        self._recovered_segments = 0
        self._truncated_bytes = 0
        self._deleted_segments = 0
        self._directory_changed = False
        self._recovered_at_load: dict[int, int] = {}  # base offset -> bytes cut, in pass 4

    def load(self) -> LoadedLog:
        """Run passes 1 to 6 and return the loaded segments and offsets.

        Raises:
            StorageIOError: a file cannot be listed, read, renamed, truncated or deleted.
            OffsetOverflowError: a segment holds offsets more than 2^31 - 1 past its base
                (only Kafka's legacy formats can; Kafka splits such a segment, stratalog stops).
            InvalidRecordError: a segment holds batches in the legacy v0/v1 formats.
        """
        swap_files = self._remove_temp_files_and_collect_swap_files()  # pass 1
        self._delete_segments_replaced_by_swap_files(swap_files)  # pass 2
        self._rename_swap_files(swap_files)  # pass 3
        segments = self._load_segment_files()  # pass 4
        if self._had_clean_shutdown is not True:
            segments = self._recover_log(segments)  # pass 5
        loaded = self._finish(segments)  # pass 6
        return self._load_producer_state(loaded)  # pass 7

    # ---------------------------------------------------------------- pass 1

    def _remove_temp_files_and_collect_swap_files(self) -> list[Path]:
        """Kafka LogLoader.removeTempFilesAndCollectSwapFiles
        (docs/kafka-behaviours.md#log-loading): delete ``.deleted`` and ``.cleaned`` files and the
        swaps of a broken split."""
        swap_files: list[Path] = []
        cleaned_files: list[Path] = []
        for name in self._list_names():
            if not name.endswith((DELETED_FILE_SUFFIX, CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)):
                continue
            path = self._directory / name
            if name.endswith(DELETED_FILE_SUFFIX):
                if name.endswith(_KRAFT_SNAPSHOT_DELETED_SUFFIX):
                    continue
                log.info("deleting leftover file %s", path)
                self._unlink(path)
            elif name.endswith(CLEANED_FILE_SUFFIX):
                cleaned_files.append(path)
            elif name.endswith(SWAP_FILE_SUFFIX):
                swap_files.append(path)
        if cleaned_files:
            # A .swap at or above the lowest .cleaned offset belongs to a split that had not
            # finished writing all its .cleaned files: roll the split back.
            min_cleaned_offset = min(self._file_offset(path) for path in cleaned_files)
            for path in list(swap_files):
                if self._file_offset(path) >= min_cleaned_offset:
                    log.info("deleting swap file %s of an incomplete split", path)
                    self._unlink(path)
                    swap_files.remove(path)
            for path in cleaned_files:
                log.info("deleting cleaner output %s", path)
                self._unlink(path)
        return swap_files

    # ---------------------------------------------------------------- passes 2 and 3

    def _delete_segments_replaced_by_swap_files(self, swap_files: list[Path]) -> None:
        """Kafka LogLoader.load (docs/kafka-behaviours.md#log-loading): the segments a ``.log.swap``
        covers are deleted (the swap completes)."""
        swap_logs = [p for p in swap_files if p.name.endswith(LOG_FILE_SUFFIX + SWAP_FILE_SUFFIX)]
        if not swap_logs:
            return
        min_offset: int | None = None
        max_offset: int | None = None
        for path in swap_logs:
            base_offset = self._file_offset(path)
            next_offset = self._next_offset_of_swap_log(base_offset)
            min_offset = base_offset if min_offset is None else min(min_offset, base_offset)
            max_offset = next_offset if max_offset is None else max(max_offset, next_offset)
        assert min_offset is not None and max_offset is not None
        for path in self._list_files():
            name = path.name
            if name.endswith(SWAP_FILE_SUFFIX):
                continue
            if not (name.endswith(LOG_FILE_SUFFIX) or is_index_file(name)):
                continue
            if min_offset <= self._file_offset(path) < max_offset:
                log.info("deleting %s, replaced by a swap segment covering offsets [%d, %d)",
                         path, min_offset, max_offset)
                self._unlink(path)

    def _next_offset_of_swap_log(self, base_offset: int) -> int:
        """The offset after the last batch of a ``.log.swap``, by scanning its headers.

        Scanning (rather than Kafka's index-based ``readNextOffset``) opens no index, so no
        preallocated ``.index.swap`` is created that pass 3 would then rename into place.
        """
        segment = Segment.open(
            self._directory, base_offset, self._config, file_suffix=SWAP_FILE_SUFFIX,
            roll_jitter_ms=0, time_ms=self._time_ms,
        )
        try:
            next_offset = base_offset
            for header in segment.iter_batch_headers(0):
                next_offset = header.next_offset
            return next_offset
        finally:
            segment.close_handlers()

    def _rename_swap_files(self, swap_files: list[Path]) -> None:
        """Pass 3: every remaining ``.swap`` file takes its final name."""
        for path in swap_files:
            target = path.with_name(path.name[: -len(SWAP_FILE_SUFFIX)])
            log.info("completing swap: renaming %s to %s", path, target.name)
            try:
                os.replace(path, target)
            except OSError as exc:
                raise StorageIOError(f"cannot rename swap file {path} to {target}: {exc}") from exc
            self._directory_changed = True

    # ---------------------------------------------------------------- pass 4

    def _load_segment_files(self) -> list[Segment]:
        """Kafka LogLoader.loadSegmentFiles (docs/kafka-behaviours.md#log-loading): orphan indexes
        deleted; segments opened; missing indexes rebuilt.

        Works from one directory listing (names, not per-file stats): with 10,000 segments
        every avoided system call or ``Path`` object is worth ~0.1 s of startup.
        """
        log_offsets: dict[int, str] = {}
        index_names: list[str] = []
        names = self._list_names()
        for name in names:
            if name.endswith(LOG_FILE_SUFFIX):
                log_offsets[offset_from_file_name(name)] = name[: -len(LOG_FILE_SUFFIX)]
            elif is_index_file(name):
                index_names.append(name)
            elif name.endswith(SNAPSHOT_FILE_SUFFIX):
                # Passes 1 to 6 never touch snapshots: pass 7 works from this listing.
                self._snapshot_offsets.append(offset_from_file_name(name))
        for name in index_names:
            if offset_from_file_name(name) not in log_offsets:
                path = self._directory / name
                log.warning("deleting orphaned index file %s", path)
                self._unlink(path)
        present = set(names)
        segments: list[Segment] = []
        try:
            for base_offset in sorted(log_offsets):
                stem = log_offsets[base_offset]
                missing = [
                    stem + suffix
                    for suffix in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX)
                    if stem + suffix not in present
                ]
                segment = Segment.open(
                    self._directory, base_offset, self._config, time_ms=self._time_ms,
                    open_segments=self._open_segments,
                )
                segments.append(segment)
                if stem + TXN_INDEX_FILE_SUFFIX in present:  # most segments have none
                    try:
                        with segment.pinned():
                            segment.txn_index.sanity_check()
                    except CorruptIndexError as exc:
                        missing.append(f"{segment.txn_index_path.name} ({exc})")
                if missing:
                    log.warning("rebuilding the indexes of segment %s: missing or corrupt %s",
                                segment.log_path, ", ".join(missing))
                    self._recovered_at_load[base_offset] = self._recover_segment(segment)
        except BaseException:
            for segment in segments:
                segment.close_handlers()
            raise
        return segments

    # ---------------------------------------------------------------- pass 5

    def _recover_log(self, segments: list[Segment]) -> list[Segment]:
        """Kafka LogLoader.recoverLog (docs/kafka-behaviours.md#log-loading): recover from the
        segment holding the recovery point to the end.

        After an unclean shutdown (``had_clean_shutdown`` False) from the checkpointed
        recovery point (0 without one); with no marker to go by (None), the active segment.
        The first segment that needed truncating ends the pass: every later segment is
        deleted, as its data follows a hole.
        """
        if not segments:
            return segments
        if self._had_clean_shutdown is None:
            start = segments[-1].base_offset
        else:
            start = self._recovery_point_checkpoint or 0
        first = Segments(segments).floor_segment(start)
        first_position = 0 if first is None else segments.index(first)
        # Past the active segment's base, the floor is the active segment itself: it is scanned
        # anyway, because only a flush proves its bytes are whole.
        for position in range(first_position, len(segments)):
            segment = segments[position]
            truncated = self._recovered_at_load.get(segment.base_offset)
            if truncated is None:  # not rebuilt by pass 4 already
                truncated = self._recover_segment(segment)
            if truncated > 0 and position + 1 < len(segments):
                doomed = segments[position + 1 :]
                log.warning(
                    "deleting %d segments after %s, whose recovery cut %d invalid bytes: "
                    "offsets from %d on follow a hole", len(doomed), segment.log_path,
                    truncated, doomed[0].base_offset,
                )
                for later in doomed:
                    later.delete()
                self._deleted_segments += len(doomed)
                self._directory_changed = True
                return segments[: position + 1]
        return segments

    def _recover_segment(self, segment: Segment) -> int:
        """Recover one segment; returns the bytes cut from its ``.log``."""
        try:
            truncated = segment.recover()
        except InvalidOffsetError as exc:
            # Kafka: CRC-valid batches whose offsets do not increase; nothing in the segment
            # can be trusted past its start, so it is emptied.
            log.warning("segment %s holds non-monotonic offsets (%s): emptying it",
                        segment.log_path, exc)
            truncated = segment.size_bytes
            segment.truncate_to(segment.base_offset)
        self._recovered_segments += 1
        self._truncated_bytes += truncated
        if self._first_recovered is None or segment.base_offset < self._first_recovered:
            self._first_recovered = segment.base_offset
        return truncated

    # ---------------------------------------------------------------- pass 7

    def _load_producer_state(self, loaded: LoadedLog) -> LoadedLog:
        """Kafka LogLoader.load (docs/kafka-behaviours.md#log-loading) and
        UnifiedLog.lastStableOffset (docs/kafka-behaviours.md#aborted-transactions): the producer
        state as of the log end (see the module docstring).

        Where the scan starts (Kafka's ``UnifiedLog.rebuildProducerState``): after the latest
        readable snapshot at or below the first recovered segment (the log end after a clean
        shutdown); without one, at the log start offset, so every segment's batch headers are
        read. The one exception is Kafka's too: after a clean shutdown, no snapshot file at
        all means no producer was known at the close (which writes one whenever a producer
        is), so nothing is scanned and no producer is known.

        An unclean shutdown gets no such trust: a power loss can take snapshots written
        shortly before it (those of recent rolls, fsynced only by the flush that moves the
        recovery point past them), and snapshot files can be lost or deleted by hand; a log
        whose producers all wrote below the recovery point would otherwise forget them, their
        duplicates and their open transactions (the LSO). A log opened without a marker to go
        by (``had_clean_shutdown`` None) is recovered as after a process crash (pass 5: the
        active segment only): the page cache, and every snapshot written at a roll, survived
        it, so without any snapshot file the active segment is scanned, where producers may
        have appeared since the last roll.
        """
        end = loaded.log_end_offset
        start = loaded.log_start_offset
        state = ProducerStateManager(self._directory, self._producer_id_expiration_ms)
        offsets = sorted(self._snapshot_offsets)
        if state.delete_snapshots(below=start, above=end, offsets=offsets):
            self._directory_changed = True
            offsets = [offset for offset in offsets if start <= offset <= end]
        bound = end if self._first_recovered is None else min(self._first_recovered, end)
        if not offsets and self._had_clean_shutdown is True:
            state.reset(end)
        elif not offsets and self._had_clean_shutdown is None:
            state.reset(max(bound, start))
        else:
            # No usable snapshot at or below the bound resets the state to the log start.
            state.load_latest_snapshot(bound, start, self._time_ms(), offsets)
        scan_from = state.map_end_offset
        if scan_from < end:
            rebuild_producer_state(
                state, loaded.segments, end, rebuild_txn_index_from=self._first_recovered
            )
            if scan_from == start and offsets:
                # The scan knew nothing before the log start: a later snapshot still knows the
                # producers whose batches all lie below it (see load_unknown_producers).
                state.load_unknown_producers(offsets, scan_from, end, self._time_ms())
            if state.producers:
                state.take_snapshot()
                self._directory_changed = True
        state.map_end_offset = end
        restore_batch_history(state, loaded.segments, end)
        return dataclasses.replace(
            loaded, producer_state=state, directory_changed=self._directory_changed
        )

    # ---------------------------------------------------------------- pass 6

    def _finish(self, segments: list[Segment]) -> LoadedLog:
        """Kafka LogLoader.load (docs/kafka-behaviours.md#log-loading): offsets, a first segment if
        none, the active indexes grown."""
        checkpoint_start = self._log_start_offset_checkpoint
        if segments:
            log_end_offset = segments[-1].read_next_offset()
            if checkpoint_start is not None and log_end_offset < checkpoint_start:
                log.warning(
                    "log %s ends at offset %d, below its checkpointed log start offset %d: "
                    "deleting its %d segments", self._directory, log_end_offset,
                    checkpoint_start, len(segments),
                )
                for segment in segments:
                    segment.delete()
                self._deleted_segments += len(segments)
                self._directory_changed = True
                segments = []
        if not segments:
            start = checkpoint_start if checkpoint_start is not None else 0
            segments = [Segment.create(
                self._directory, start, self._config, time_ms=self._time_ms,
                open_segments=self._open_segments, active=True,
            )]
            self._directory_changed = True
        active = segments[-1]
        # Active before its indexes grow: the cache must never close a preallocated index.
        active.activate()
        active.resize_indexes(self._config.segment_index_bytes)
        log_end_offset = active.read_next_offset()
        first_base_offset = segments[0].base_offset
        log_start_offset = max(checkpoint_start or 0, first_base_offset)
        if self._had_clean_shutdown is True:
            recovery_point = log_end_offset
        elif self._had_clean_shutdown is None:
            recovery_point = active.base_offset
        else:
            recovery_point = min(self._recovery_point_checkpoint or 0, log_end_offset)
        if self._recovered_segments or self._truncated_bytes or self._deleted_segments:
            log.info(
                "recovered log %s: %d segments rebuilt, %d invalid bytes cut, %d segments "
                "deleted; offsets [%d, %d)", self._directory, self._recovered_segments,
                self._truncated_bytes, self._deleted_segments, log_start_offset, log_end_offset,
            )
        return LoadedLog(
            segments=Segments(segments),
            log_start_offset=log_start_offset,
            log_end_offset=log_end_offset,
            recovery_point=recovery_point,
            recovered_segments=self._recovered_segments,
            truncated_bytes=self._truncated_bytes,
            deleted_segments=self._deleted_segments,
            directory_changed=self._directory_changed,
        )

    # ---------------------------------------------------------------- file helpers

    def _list_names(self) -> list[str]:
        """Names of the regular files in the directory, sorted."""
        try:
            with os.scandir(self._directory) as entries:
                return sorted(
                    entry.name for entry in entries if entry.is_file(follow_symlinks=False)
                )
        except OSError as exc:
            raise StorageIOError(f"cannot list log directory {self._directory}: {exc}") from exc

    def _list_files(self) -> list[Path]:
        return [self._directory / name for name in self._list_names()]

    def _file_offset(self, path: Path) -> int:
        return offset_from_file_name(path.name)

    def _unlink(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageIOError(f"cannot delete {path}: {exc}") from exc
        self._directory_changed = True


def rebuild_producer_state(
    state: ProducerStateManager,
    segments: Segments,
    end_offset: int,
    *,
    rebuild_txn_index_from: int | None = None,
) -> None:
    """Scan the batches in ``[state.map_end_offset, end_offset)`` into ``state`` (Kafka's
    ``loadProducersFromRecords``).

    Only headers are read, and the one record of each control batch (its marker). Each ABORT
    marker that completes a transaction yields an ``AbortedTxn`` with the LSO of that moment;
    in segments at or above ``rebuild_txn_index_from`` (those recovery rebuilt) the entry is
    appended to the segment's ``.txnindex`` (whose entries are reset first when the scan covers
    the segment from its start; otherwise appended when past its last entry). Each segment is
    replayed in one call of :meth:`ProducerStateManager.load_batches`.
    """
    start = state.map_end_offset
    first = segments.floor_segment(start) or segments.first
    segment = first
    while segment is not None and segment.base_offset < end_offset:
        rebuild_index = (
            rebuild_txn_index_from is not None and segment.base_offset >= rebuild_txn_index_from
        )
        following = segments.higher_segment(segment.base_offset)
        with segment.pinned():  # its .txnindex is used directly
            if rebuild_index and start <= segment.base_offset:
                segment.txn_index.reset()
            position = 0
            if start > segment.base_offset:
                found = segment.translate_offset(start)
                if found is None:
                    segment = following
                    continue
                position = found.position
            segment_end = (
                end_offset if following is None else min(following.base_offset, end_offset)
            )
            for txn, last_stable_offset in state.load_batches(
                _producer_batches(segment, position, start, end_offset), segment_end
            ):
                if not (txn.is_aborted and rebuild_index):
                    continue
                txn_index = segment.txn_index
                if txn_index.last_offset is None or txn_index.last_offset < txn.last_offset:
                    txn_index.append(AbortedTxn(
                        txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset
                    ))
        segment = following
    state.map_end_offset = max(state.map_end_offset, end_offset)


def restore_batch_history(state: ProducerStateManager, segments: Segments, end_offset: int) -> None:
    """Give ``state``'s producers back their batches before the last one (up to 5 in all) from
    the batch headers of the last two segments below ``end_offset`` (stratalog's, not Kafka's:
    :meth:`ProducerStateManager.restore_batch_history` says why).

    The window is the one Kafka keeps snapshots for at open (the segment before the active one
    and the active one): a producer's batches older than that are not looked for, and a resend
    of one of them is answered OUT_OF_ORDER_SEQUENCE as in Kafka. Nothing is read for a log
    without producers (or whose producers' last batches were all markers).
    """
    if not any(entry.batches for entry in state.producers.values()):
        return
    last = segments.floor_segment(end_offset - 1) if end_offset > 0 else None
    if last is None:
        return
    first = segments.lower_segment(last.base_offset) or last
    scanned = ProducerStateManager(state.directory, state.producer_id_expiration_ms)
    scanned.reset(first.base_offset)
    rebuild_producer_state(scanned, segments, end_offset)
    restored = state.restore_batch_history(scanned)
    if restored:
        log.debug("restored the batch history of %d producers from offset %d", restored,
                  first.base_offset)


def _producer_batches(
    segment: Segment, position: int, start: int, end_offset: int
) -> Iterator[ProducerBatch]:
    """The producer-state view of the batches of ``segment`` from ``position`` that end at or
    after ``start`` and begin below ``end_offset``, those with a producer id only."""
    for header in segment.iter_batch_headers(position):
        if header.base_offset >= end_offset:
            return
        if header.last_offset < start or header.producer_id == NO_PRODUCER_ID:
            continue
        batch = _producer_batch(segment, header)
        if batch is not None:
            yield batch


def _producer_batch(segment: Segment, header: BatchHeader) -> ProducerBatch | None:
    """The producer-state view of one stored batch; None for a control batch that is not a
    transaction marker (or whose marker does not parse: logged, skipped)."""
    control_type = None
    coordinator_epoch = -1
    if header.is_control:
        fetched = segment.fetch(header.base_offset, header.size_bytes)
        try:
            record = next(iter(iter_records(fetched.data if fetched else b"", 0)))
            marker = EndTransactionMarker.decode(record.key, record.value)
        except (RecordError, StopIteration) as exc:
            log.warning("control batch at offset %d of %s is not a transaction marker: %s",
                        header.base_offset, segment.log_path, exc)
            return None
        control_type, coordinator_epoch = marker.type, marker.coordinator_epoch
    return ProducerBatch(
        header.producer_id, header.producer_epoch, header.base_sequence, header.base_offset,
        header.last_offset, max(header.max_timestamp, NO_TIMESTAMP), header.is_transactional,
        control_type, coordinator_epoch,
    )
