"""One cleaning of one compacted log: keep only the latest record of each key.

Kafka's ``Cleaner`` (``core/src/main/scala/kafka/log/LogCleaner.scala``). A compacted log
(``cleanup.policy`` containing ``compact``) is cut in three by two offsets::

    log start        first dirty offset         first uncleanable offset        log end
    |  cleaned       |  dirty                   |  uncleanable: the active segment, records
    |  (checkpointed)|                          |  younger than min.compaction.lag.ms, an
    |                |                          |  open transaction (first unstable offset)

A cleaning (:meth:`Cleaner.clean`) does:

1. *Map* the dirty section: every keyed record of ``[first dirty, first uncleanable)`` puts
   ``key -> offset`` into the :class:`~.offset_map.OffsetMap` (records of aborted
   transactions and control batches put nothing). The map has a fixed size; when it fills,
   mapping stops there and the end of this round (``end_offset``) is the last mapped offset
   + 1: the rest of the dirty section is the next round's.
2. *Rewrite* every segment of ``[log start, end_offset)``, in groups of consecutive segments
   whose sizes add up to at most ``segment.bytes`` (and whose indexes fit, and whose offsets
   span less than 2^31: :func:`group_segments_by_size`). Each group becomes one new segment
   with the first one's base offset, written as ``<base>.log.cleaned`` (+ indexes), keeping a
   record iff

   * it lies past the mapped section (offset > the map's latest offset), or
   * it has a key and its offset is at least the map's offset for that key (the latest), and
     it has a value, or it is a tombstone (null value) in a segment modified less than
     ``delete.retention.ms`` before the last cleaned segment (Kafka's legacy delete horizon,
     see below);

   records without a key are dropped (a compacted topic refuses them on append; older data
   may hold some). Batches of aborted transactions are dropped whole; a transaction marker is
   kept while any batch of its transaction was met in this cleaning (the next cleaning, with
   the data gone, drops it once its segment is past the delete horizon). A batch keeps its
   offsets, timestamps and producer fields: one whose records are all kept is copied byte for
   byte; one that lost some is re-framed around the kept records' own bytes (same base
   offset, same last offset delta, same base timestamp and so the same record timestamps,
   records count, max timestamp and CRC recomputed; recompressed with its codec if it was
   compressed); one that lost all is dropped, or kept *empty* (header only, 0 records, its
   offsets and max timestamp: Kafka's ``writeEmptyHeader``) when it is the last batch of a
   producer the log still tracks (so that a restart rebuilds the producer's sequence, as
   Kafka's ``RETAIN_EMPTY``) or the last batch of the group (see crash safety below).
3. *Replace* the group's old segments by the new one (:meth:`PartitionLog.replace_segments`,
   Kafka's ``replaceSegments``): ``.cleaned`` -> ``.swap``, old segments -> ``.deleted``
   (deleted after ``file.delete.delay.ms``, so readers holding them finish), ``.swap`` ->
   final name, directory fsynced. Only this step takes the log's lock; if the group's segments
   are no longer those the cleaner read (a truncation, retention), the cleaning is aborted
   and nothing replaced (:class:`~.errors.CleaningAbortedError`).

Crash safety: recovery (``recovery.py`` passes 1 to 3, Kafka
LogLoader.removeTempFilesAndCollectSwapFiles and LogLoader.load;
docs/kafka-behaviours.md#log-loading) deletes ``.cleaned`` files and the ``.swap`` files at or above
them, and completes a swap by deleting every segment whose base offset lies in ``[swap base, swap's
next offset)``. That range is exactly the group's only if the new segment ends where the group
ended: so the group's last batch is always kept, empty if all its records went (Kafka drops it, and
after a crash between the renames can leave old segments beside the new one, a mix; see
docs/durability.md).

Tombstones: Kafka 3.1+ stamps a delete horizon into a batch (KIP-534); stratalog uses the
legacy rule: ``delete_horizon_ms = (last modified time of the last segment below the first
dirty offset) - delete.retention.ms``, and a segment whose mtime is after it keeps its
tombstones (and markers). A cleaned segment takes the largest mtime of its group, as Kafka.

Concurrency: a Cleaner is used by one thread at a time (it owns its offset map). It reads the
log's segments while appends, fetches and retention go on; only the replacement takes the
log's lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stratalog.records.accel import RecordColumns, decode_columns, encode_record
from stratalog.records.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    HEADER,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    Compression,
    TimestampType,
    parse_header,
    rewrite_crc,
)
from stratalog.records.batch_walk import iter_batch_headers
from stratalog.records.compression import compress, decompress
from stratalog.records.control import ControlRecordType, decode_control_key
from stratalog.records.file_names import CLEANED_FILE_SUFFIX

from .files import log_file, offset_index_file, time_index_file, transaction_index_file
from .offset_map import OffsetMap
from .segment import Segment
from .throttler import Throttler
from .txn_index import AbortedTxn

if TYPE_CHECKING:
    from .partition_log import PartitionLog

__all__ = [
    "CleanableRange",
    "Cleaner",
    "CleaningResult",
    "cleanable_range",
    "group_segments_by_size",
]

log = logging.getLogger(__name__)

_INT32_MAX = (1 << 31) - 1
# Cleaned output is written to the new segment in pieces of about this many bytes: an offset
# index entry (one per append at most) every piece. Kafka appends once per read buffer.
_WRITE_PIECE_BYTES = 64 * 1024

#: Called with the name of each step of a cleaning's replacement before it is taken (tests
#: inject a failure or a kill there): see PartitionLog.replace_segments.
StepHook = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class CleaningResult:
    """What one cleaning of one partition did.

    ``first_dirty_offset_before`` is the checkpointed first dirty offset the cleaning started
    from; ``end_offset`` the first offset it did not clean (the new first dirty offset).
    Bytes and records count the rewritten section ``[log start, end_offset)``: read, and kept.
    ``segments_before``/``segments_after`` count that section's segments.
    """

    topic: str
    partition: int
    first_dirty_offset_before: int
    end_offset: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int
    segments_before: int
    segments_after: int
    duration_ms: int


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """Kafka's ``LogCleanerManager.cleanableOffsets`` for one log at one moment.

    ``first_dirty_offset``: where the dirty section starts (the checkpoint, or the log start if
    the checkpoint is out of the log). ``first_uncleanable_offset``: the lowest of the active
    segment's base offset, the last stable offset (an open transaction), and the base offset of
    the first segment holding a record younger than ``min.compaction.lag.ms``.
    ``max_lag_exceeded``: the first dirty segment waited longer than ``max.compaction.lag.ms``
    (clean it whatever the dirty ratio). Byte counts are of whole segments, as Kafka's.
    """

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    max_lag_exceeded: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_range(log_: PartitionLog, checkpointed: int | None, now_ms: int) -> CleanableRange:
    """The cleanable section of ``log_`` with first dirty offset ``checkpointed`` (None: never
    cleaned) at ``now_ms``; see :class:`CleanableRange`."""
    config = log_.config
    segments = list(log_.segments)
    active = segments[-1]
    log_start = log_.log_start_offset
    log_end = log_.log_end_offset
    if checkpointed is None or checkpointed < log_start or checkpointed > log_end:
        # Kafka resets a checkpoint below the log start (retention moved past it) or past the
        # end (the log was truncated under it) to the log start.
        first_dirty = log_start
    else:
        first_dirty = checkpointed
    uncleanable = min(active.base_offset, log_.last_stable_offset)
    dirty_segments = [
        segment for index, segment in enumerate(segments[:-1])
        if _segment_end(segments, index) > first_dirty and segment.base_offset < uncleanable
    ]
    if config.min_compaction_lag_ms > 0:
        horizon = now_ms - config.min_compaction_lag_ms
        for segment in dirty_segments:
            # A segment with no timestamp is judged by its mtime, as Kafka's largestTimestamp.
            if segment.largest_timestamp > horizon:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    uncleanable = max(uncleanable, first_dirty)
    max_lag_exceeded = False
    if config.max_compaction_lag_ms < (1 << 63) - 1 and dirty_segments:
        first_timestamp = dirty_segments[0].first_batch_timestamp
        if first_timestamp is not None and first_timestamp >= 0:
            max_lag_exceeded = now_ms - first_timestamp > config.max_compaction_lag_ms
    clean_bytes = dirty_bytes = 0
    for index, segment in enumerate(segments[:-1]):
        end = _segment_end(segments, index)
        if end <= first_dirty:
            clean_bytes += segment.size_bytes
        elif segment.base_offset < uncleanable:
            dirty_bytes += segment.size_bytes
    return CleanableRange(first_dirty, uncleanable, clean_bytes, dirty_bytes, max_lag_exceeded)


def _segment_end(segments: Sequence[Segment], index: int) -> int:
    """The base offset of the segment after ``segments[index]`` (its offsets end there)."""
    return segments[index + 1].base_offset


def group_segments_by_size(
    segments: Sequence[Segment], max_bytes: int, max_index_bytes: int, end_offset: int
) -> list[list[Segment]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose ``.log`` sizes sum to at
    most ``max_bytes`` (``segment.bytes``), whose offset and time index sizes each sum to at
    most ``max_index_bytes``, and whose offsets (up to the next segment's base, or
    ``end_offset`` for the last) stay within 2^31 - 1 of the first one's base offset, so one
    segment holds them all. A segment larger than ``max_bytes`` is a group of its own.
    Index sizes are estimated from their files (an inactive segment's are trimmed to their
    entries)."""
    groups: list[list[Segment]] = []
    index = 0
    count = len(segments)
    while index < count:
        first = segments[index]
        group = [first]
        log_bytes = first.size_bytes
        offset_index_bytes, time_index_bytes = _index_sizes(first)
        index += 1
        while index < count:
            candidate = segments[index]
            candidate_offset_bytes, candidate_time_bytes = _index_sizes(candidate)
            next_end = segments[index + 1].base_offset if index + 1 < count else end_offset
            if log_bytes + candidate.size_bytes > max_bytes:
                break
            if offset_index_bytes + candidate_offset_bytes > max_index_bytes:
                break
            if time_index_bytes + candidate_time_bytes > max_index_bytes:
                break
            # An empty segment never widens the span (Kafka: avoids leaving one every 2^31).
            if candidate.size_bytes and next_end - 1 - first.base_offset > _INT32_MAX:
                break
            group.append(candidate)
            log_bytes += candidate.size_bytes
            offset_index_bytes += candidate_offset_bytes
            time_index_bytes += candidate_time_bytes
            index += 1
        groups.append(group)
    return groups


def _index_sizes(segment: Segment) -> tuple[int, int]:
    sizes = []
    for path in (segment.offset_index_path, segment.time_index_path):
        try:
            sizes.append(os.stat(path).st_size)
        except OSError:
            sizes.append(0)
    return sizes[0], sizes[1]


# ------------------------------------------------------------------------- transactions


@dataclass(slots=True)
class _AbortedTxnState:
    last_observed_batch_offset: int | None = None


@dataclass(slots=True)
class _TransactionTracker:
    """Kafka's ``CleanedTransactionMetadata``: which batches belong to aborted transactions,
    and which markers still have data of their transaction behind them.

    ``aborted`` are ``(first offset, producer id)`` of the aborted transactions of the section
    read, sorted; an aborted transaction becomes *ongoing* when the reader passes its first
    offset, and ends at its ABORT marker. A COMMIT marker whose transaction had no batch read
    in this pass, and an ABORT marker whose transaction had none, may be dropped.
    """

    aborted: list[tuple[int, int]]
    next_aborted: int = 0
    ongoing_aborted: dict[int, _AbortedTxnState] = field(default_factory=dict)
    ongoing_committed: set[int] = field(default_factory=set)

    def _consume_aborted_up_to(self, offset: int) -> None:
        aborted = self.aborted
        while self.next_aborted < len(aborted) and aborted[self.next_aborted][0] <= offset:
            self.ongoing_aborted[aborted[self.next_aborted][1]] = _AbortedTxnState()
            self.next_aborted += 1

    def on_batch_read(self, header: BatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (drop it)."""
        last_offset = header.base_offset + header.last_offset_delta
        self._consume_aborted_up_to(last_offset)
        if not header.attributes & TRANSACTIONAL_FLAG_MASK:
            return False
        state = self.ongoing_aborted.get(header.producer_id)
        if state is not None:
            state.last_observed_batch_offset = last_offset
            return True
        self.ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch_read(self, header: BatchHeader, control_type: int | None) -> bool:
        """A control batch: True if no batch of its transaction was read (it may go)."""
        self._consume_aborted_up_to(header.base_offset + header.last_offset_delta)
        producer_id = header.producer_id
        if control_type == ControlRecordType.ABORT:
            state = self.ongoing_aborted.pop(producer_id, None)
            return not (state is not None and state.last_observed_batch_offset is not None)
        if control_type == ControlRecordType.COMMIT:
            if producer_id in self.ongoing_committed:
                self.ongoing_committed.discard(producer_id)
                return False
            return True
        return False


# ------------------------------------------------------------------------- records


def _first_batch_bytes(view: memoryview) -> int:
    """The size of the batch ``view`` starts with; 0 when fewer than its 61-byte header are
    there (a torn tail: nothing to read on for).

    Raises:
        CorruptRecordError, InvalidRecordError: the header is impossible or not v2.
    """
    if len(view) < RECORD_BATCH_OVERHEAD:
        return 0
    return parse_header(view, 0).size_bytes


def _records_region(batch: memoryview, header: BatchHeader) -> bytes | memoryview:
    payload = batch[RECORD_BATCH_OVERHEAD:]
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if codec == Compression.NONE:
        return payload
    # A batch the log accepted decompressed within max.message.bytes-ish sizes; bound it
    # generously (Kafka's cleaner has no bound at all).
    return decompress(Compression(codec), payload, max_bytes=max(64 << 20, len(payload) * 256))


def _columns(batch: memoryview, header: BatchHeader) -> RecordColumns:
    """The records of a data batch as columns (the C decoder: offsets, timestamps, keys,
    values, headers). LogAppendTime batches read every timestamp as their max, as Kafka's
    readers do; the cleaner re-encodes their records with delta 0."""
    return decode_columns(
        _records_region(batch, header), header.records_count, header.base_offset,
        header.base_timestamp,
    )


def _control_type(batch: memoryview, header: BatchHeader) -> int | None:
    """The control record type of a control batch (None if it holds no record or an unknown
    key: such a batch is kept)."""
    if header.records_count < 1:
        return None
    try:
        key = _columns(batch, header).keys[0]
        return decode_control_key(key)[1]
    except Exception:
        return None


def _frame_batch(header: BatchHeader, records: bytes | bytearray | memoryview, count: int,
                 max_timestamp: int) -> bytes:
    """A batch with ``header``'s fields and a new records region (already compressed if the
    codec asks), ``count`` records and ``max_timestamp``; CRC recomputed."""
    out = bytearray(RECORD_BATCH_OVERHEAD + len(records))
    HEADER.pack_into(
        out, 0, header.base_offset, len(out) - LOG_OVERHEAD, header.partition_leader_epoch,
        header.magic, 0, header.attributes, header.last_offset_delta, header.base_timestamp,
        max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence, count,
    )
    out[RECORD_BATCH_OVERHEAD:] = records
    rewrite_crc(out, 0, len(out))
    return bytes(out)


def _empty_batch(header: BatchHeader, *, keep_producer: bool = True) -> bytes:
    """Kafka's ``writeEmptyHeader``: the batch's offsets and producer fields, no records,
    codec cleared, both timestamps the batch's max timestamp. Without ``keep_producer`` (the
    group's end marker, which no producer needs) it is a plain batch: no producer, not
    transactional nor control (its max timestamp stays: time retention still sees it)."""
    out = bytearray(RECORD_BATCH_OVERHEAD)
    attributes = header.attributes & ~COMPRESSION_CODEC_MASK
    producer = (header.producer_id, header.producer_epoch, header.base_sequence)
    timestamp = header.max_timestamp
    if not keep_producer:
        attributes &= ~(TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
        producer = (-1, -1, -1)
    HEADER.pack_into(
        out, 0, header.base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD,
        header.partition_leader_epoch, header.magic, 0, attributes, header.last_offset_delta,
        timestamp, timestamp, *producer, 0,
    )
    rewrite_crc(out, 0, len(out))
    return bytes(out)


# ------------------------------------------------------------------------- the cleaner


@dataclass(slots=True)
class _Counts:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0


class _CleanedWriter:
    """Buffers the cleaned batches of one new segment and appends them in pieces, each piece
    with its largest offset and max timestamp (what Segment.append indexes)."""

    def __init__(self, segment: Segment, throttler: Throttler | None = None) -> None:
        self.segment = segment
        self.throttler = throttler
        self.pieces: list[bytes | memoryview] = []
        self.pending_bytes = 0
        self.last_offset = -1
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.written_bytes = 0
        self.aborted_by_marker: dict[int, list[AbortedTxn]] = {}
        self.aborted_kept: list[AbortedTxn] = []

    def add_marker(self, batch: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        """A control batch kept: with the ``.txnindex`` entries its marker completes."""
        self.aborted_kept.extend(self.aborted_by_marker.get(last_offset, ()))
        self.add(batch, last_offset, max_timestamp)

    def add(self, batch: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        self.pieces.append(batch)
        self.pending_bytes += len(batch)
        self.last_offset = last_offset
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self.pending_bytes >= _WRITE_PIECE_BYTES:
            self.flush()

    def flush(self) -> None:
        """Append the buffered batches, then the ``.txnindex`` entries of their markers."""
        if not self.pieces:
            return
        self.segment.append(
            self.last_offset, self.max_timestamp, self.offset_of_max_timestamp, self.pieces
        )
        self.written_bytes += self.pending_bytes
        if self.throttler is not None:
            self.throttler.maybe_throttle(self.pending_bytes)
        if self.aborted_kept:
            with self.segment.pinned():
                for txn in self.aborted_kept:
                    self.segment.txn_index.append(txn)
            self.aborted_kept = []
        self.pieces = []
        self.pending_bytes = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1


class Cleaner:
    """Cleans one log at a time with one offset map (see the module docstring).

    Holds the offset map (its memory is reused from one cleaning to the next), the read
    buffer size, the I/O throttler (``log.cleaner.io.max.bytes.per.second``, shared by the
    cleaner threads; it is told every read buffer and every write, as Kafka's) and an optional
    step hook for crash tests. Not thread-safe: one per cleaner thread.
    """

    def __init__(
        self,
        offset_map: OffsetMap,
        *,
        io_buffer_bytes: int = 524_288,
        throttler: Throttler | None = None,
        step_hook: StepHook | None = None,
    ) -> None:
        self.offset_map = offset_map
        self._io_buffer_bytes = max(io_buffer_bytes, RECORD_BATCH_OVERHEAD)
        self.throttler = throttler
        self.step_hook = step_hook
        self._check_done: Callable[[], None] = lambda: None

    # ------------------------------------------------------------------ reading

    def _batches(self, segment: Segment) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Every whole batch of ``segment``: its header and bytes, read ``io_buffer_bytes``
        at a time (more for a batch larger than that, as Kafka grows its buffer), each read
        walked by :func:`~stratalog.records.batch_walk.iter_batch_headers`: a batch cut by the
        end of a read is a partial tail there, and the next read starts with it. Stops at a
        torn tail (recovery's to cut, never the cleaner's).

        Raises:
            CorruptRecordError, InvalidRecordError: a batch breaks a framing rule.
        """
        size = segment.size_bytes
        position = 0
        buffer_bytes = self._io_buffer_bytes
        throttler = self.throttler
        with segment.pinned():
            while position < size:
                chunk = segment.read_bytes(position, min(buffer_bytes, size - position))
                if throttler is not None:
                    throttler.maybe_throttle(len(chunk))
                view = memoryview(chunk)
                walked = 0
                for header in iter_batch_headers(view):
                    walked = header.end_position
                    yield header, view[header.position : walked]
                if walked == 0:
                    # Not one whole batch in this read: a batch larger than the buffer (read
                    # it again with a buffer its size), or the segment's torn tail.
                    needed = _first_batch_bytes(view)
                    if needed <= buffer_bytes or position + needed > size:
                        return
                    buffer_bytes = needed
                    continue
                position += walked

    # ------------------------------------------------------------------ step 1: the map

    def build_offset_map(
        self, segments: Sequence[Segment], start: int, end: int,
        aborted: list[tuple[int, int]],
    ) -> int:
        """Map the keys of ``[start, end)`` in ``segments`` (Kafka's ``buildOffsetMap``);
        returns the end of the mapped section: ``end``, or less when the map filled."""
        offset_map = self.offset_map
        offset_map.clear()
        tracker = _TransactionTracker(aborted)
        put_records = offset_map.put_records
        for segment in segments:
            self._check_done()
            for header, batch in self._batches(segment):
                last_offset = header.base_offset + header.last_offset_delta
                if last_offset < start:
                    continue
                if header.base_offset >= end:
                    return end
                if header.attributes & CONTROL_FLAG_MASK:
                    tracker.on_control_batch_read(header, _control_type(batch, header))
                elif not tracker.on_batch_read(header) and header.records_count:
                    full = put_records(
                        _records_region(batch, header), header.records_count,
                        header.base_offset, start,
                    )
                    if full:  # this round ends before the record that found the map full
                        return offset_map.latest_offset + 1
                offset_map.update_latest_offset(last_offset)
        return end

    # ------------------------------------------------------------------ the whole cleaning

    def clean(
        self,
        log_: PartitionLog,
        first_dirty_offset: int,
        first_uncleanable_offset: int,
        *,
        topic: str = "",
        partition: int = -1,
        check_done: Callable[[], None] | None = None,
    ) -> CleaningResult:
        """Clean ``log_`` from its start up to where the map of ``[first_dirty_offset,
        first_uncleanable_offset)`` reaches (see the module docstring).

        ``check_done`` is called before each segment is read; it raises (CleaningAbortedError)
        to stop the cleaning there (Kafka's ``checkDone``: a paused partition, a shutdown).

        Raises:
            CleaningAbortedError: the log changed under the cleaner (truncated, segments
                deleted, closed), or ``check_done`` said stop; the groups swapped in before
                stay (each is a complete cleaning of its segments), the rest is untouched.
            StorageIOError: reading or writing failed (the ``.cleaned`` files are removed;
                a failed rename takes the log offline, recovered at the next start).
        """
        started = time.monotonic()
        segments_now = list(log_.segments)
        dirty = [
            segment for index, segment in enumerate(segments_now[:-1])
            if segments_now[index + 1].base_offset > first_dirty_offset
            and segment.base_offset < first_uncleanable_offset
        ]
        aborted = _aborted_txns(segments_now[:-1], first_uncleanable_offset)
        self._check_done = check_done or (lambda: None)
        end_offset = self.build_offset_map(
            dirty, first_dirty_offset, first_uncleanable_offset, aborted
        )
        # The legacy delete horizon: from the last segment that was already clean.
        clean_below = [
            segment for index, segment in enumerate(segments_now[:-1])
            if segments_now[index + 1].base_offset <= first_dirty_offset
        ]
        delete_horizon_ms = (
            clean_below[-1].last_modified_ms - log_.config.delete_retention_ms
            if clean_below else 0
        )
        to_clean = [segment for segment in segments_now[:-1] if segment.base_offset < end_offset]
        groups = group_segments_by_size(
            to_clean, log_.config.segment_bytes, log_.config.segment_index_bytes, end_offset
        )
        counts = _Counts()
        tracker = _TransactionTracker(aborted)
        last_data_offsets = log_.last_data_offsets_of_producers()
        segments_after = 0
        for group in groups:
            self._clean_group(
                log_, group, tracker, delete_horizon_ms, last_data_offsets, counts
            )
            segments_after += 1
        duration_ms = int((time.monotonic() - started) * 1000)
        return CleaningResult(
            topic=topic,
            partition=partition,
            first_dirty_offset_before=first_dirty_offset,
            end_offset=end_offset,
            bytes_read=counts.bytes_read,
            bytes_written=counts.bytes_written,
            records_read=counts.records_read,
            records_kept=counts.records_kept,
            segments_before=len(to_clean),
            segments_after=segments_after,
            duration_ms=duration_ms,
        )

    def _clean_group(
        self,
        log_: PartitionLog,
        group: list[Segment],
        tracker: _TransactionTracker,
        delete_horizon_ms: int,
        last_data_offsets: dict[int, int],
        counts: _Counts,
    ) -> None:
        """Rewrite ``group`` into one ``.cleaned`` segment and swap it in."""
        directory = log_.directory
        base_offset = group[0].base_offset
        _remove_stale_cleaned_files(directory, base_offset)
        cleaned = Segment.create(
            directory, base_offset, log_.config, file_suffix=CLEANED_FILE_SUFFIX,
            roll_jitter_ms=0, open_segments=log_.open_segments,
        )
        try:
            writer = _CleanedWriter(cleaned, self.throttler)
            # The .txnindex entries of the group, by their ABORT marker's offset: an entry
            # moves to the new segment with its marker (a marker goes only once its data has).
            for segment in group:
                for txn in segment.collect_aborted_txns(segment.base_offset, 1 << 62).aborted_txns:
                    writer.aborted_by_marker.setdefault(txn.last_offset, []).append(txn)
            last_modified_ms = 0
            for position, segment in enumerate(group):
                self._check_done()
                retain_deletes = segment.last_modified_ms > delete_horizon_ms
                last_modified_ms = max(last_modified_ms, segment.last_modified_ms)
                self._clean_into(
                    segment, writer, tracker, retain_deletes, last_data_offsets, counts,
                    is_last_of_group=position == len(group) - 1,
                )
            writer.flush()
            counts.bytes_written += writer.written_bytes
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.set_last_modified_ms(last_modified_ms)
        except BaseException:
            _discard(cleaned)
            raise
        log_.replace_segments(cleaned, group, step_hook=self.step_hook)

    def _clean_into(
        self,
        segment: Segment,
        writer: _CleanedWriter,
        tracker: _TransactionTracker,
        retain_deletes: bool,
        last_data_offsets: dict[int, int],
        counts: _Counts,
        *,
        is_last_of_group: bool,
    ) -> None:
        """Kafka's ``cleanInto`` for one old segment: its retained batches to ``writer``."""
        offset_map = self.offset_map
        latest_mapped = offset_map.latest_offset
        retain_mask = offset_map.retain_mask
        last_header: BatchHeader | None = None  # the last batch seen, and whether it stayed
        kept_last = True
        for header, batch in self._batches(segment):
            last_header = header
            counts.bytes_read += len(batch)
            last_offset = header.base_offset + header.last_offset_delta
            counts.records_read += header.records_count
            has_producer = header.producer_id >= 0
            keep_empty = has_producer and last_data_offsets.get(header.producer_id) == last_offset
            if header.attributes & CONTROL_FLAG_MASK:
                discard = tracker.on_control_batch_read(header, _control_type(batch, header))
                if discard and not retain_deletes and not keep_empty:
                    kept_last = False
                    continue
                writer.add_marker(batch, last_offset, header.max_timestamp)
                counts.records_kept += header.records_count
                kept_last = True
                continue
            if tracker.on_batch_read(header):  # aborted: the whole batch goes
                if keep_empty:
                    writer.add(_empty_batch(header), last_offset, header.max_timestamp)
                    kept_last = True
                else:
                    kept_last = False
                continue
            if header.records_count == 0:  # an empty batch (an earlier cleaning's)
                if keep_empty:
                    writer.add(batch, last_offset, header.max_timestamp)
                    kept_last = True
                else:
                    kept_last = False
                continue
            # Kept: records past the map (the next round judges them), and keyed records at
            # least as new as their key's mapped offset, with a value or within the tombstone
            # retention. Records without a key go (a compacted log cannot keep them; Kafka
            # drops them too). One call for the whole region: without the GIL in C.
            region = _records_region(batch, header)
            mask = retain_mask(
                region, header.records_count, header.base_offset, latest_mapped,
                retain_deletes,
            )
            kept_count = mask.count(1)
            counts.records_kept += kept_count
            if kept_count == header.records_count:
                writer.add(batch, last_offset, header.max_timestamp)
                kept_last = True
            elif kept_count:
                kept = [index for index, keep in enumerate(mask) if keep]
                columns = decode_columns(
                    region, header.records_count, header.base_offset, header.base_timestamp
                )
                batch_bytes, max_timestamp = _reframe(header, columns, kept)
                writer.add(batch_bytes, last_offset, max_timestamp)
                kept_last = True
            elif keep_empty:
                writer.add(_empty_batch(header), last_offset, header.max_timestamp)
                kept_last = True
            else:
                kept_last = False
        if is_last_of_group and last_header is not None and not kept_last:
            # The group's last batch went: keep it empty so that the new segment ends where
            # the group did (recovery's swap range, see the module docstring).
            header = last_header
            writer.add(_empty_batch(header, keep_producer=False),
                       header.base_offset + header.last_offset_delta, header.max_timestamp)


def _reframe(header: BatchHeader, columns: RecordColumns, kept: list[int]) -> tuple[bytes, int]:
    """A batch of the ``kept`` records (indexes into ``columns``) under ``header``'s fields,
    and its max timestamp. Each record is encoded as it was: same offset delta, same timestamp
    (the base timestamp is kept, so same delta), key, value and headers."""
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    out = bytearray()
    offsets, timestamps = columns.offsets, columns.timestamps
    keys, values, headers = columns.keys, columns.values, columns.headers
    max_delta = -(1 << 63)
    for index in kept:
        delta = 0 if log_append_time else timestamps[index] - base_timestamp
        max_delta = max(max_delta, delta)
        encode_record(out, offsets[index] - base_offset, delta, keys[index], values[index],
                      headers[index])
    max_timestamp = header.max_timestamp if log_append_time else base_timestamp + max_delta
    codec = header.attributes & COMPRESSION_CODEC_MASK
    records: bytes | bytearray = out
    if codec != Compression.NONE:
        records = compress(Compression(codec), out)
    return _frame_batch(header, records, len(kept), max_timestamp), max_timestamp


def _aborted_txns(segments: Sequence[Segment], upper_bound: int) -> list[tuple[int, int]]:
    """``(first offset, producer id)`` of every aborted transaction the segments' ``.txnindex``
    files list below ``upper_bound``, sorted (Kafka's ``collectAbortedTransactions``)."""
    found: list[tuple[int, int]] = []
    for segment in segments:
        result = segment.collect_aborted_txns(segment.base_offset, upper_bound)
        for txn in result.aborted_txns:
            found.append((txn.first_offset, txn.producer_id))
    return sorted(set(found))


def _remove_stale_cleaned_files(directory: Path, base_offset: int) -> None:
    """Delete ``.cleaned`` files an earlier, failed cleaning left at ``base_offset`` (the new
    segment is created exclusively); recovery would delete them at the next start anyway."""
    for make in (log_file, offset_index_file, time_index_file, transaction_index_file):
        path = make(directory, base_offset, CLEANED_FILE_SUFFIX)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            log.warning("deleted the stale cleaner output %s", path)


def _discard(segment: Segment) -> None:
    """Delete an unfinished ``.cleaned`` segment (recovery would, at the next start)."""
    try:
        segment.delete()
    except Exception:
        log.warning("could not delete the unfinished cleaner output %s", segment.log_path,
                    exc_info=True)

