"""One segment of a partition log: a ``.log`` file of record batches and its sparse indexes.

A partition is split into segments so that old data can be deleted a file at a time and so that
an offset can be found without scanning the whole partition. Segment ``B`` holds batches whose
offsets are all ``>= B`` (its *base offset*) and below the next segment's base offset; its files
are named after ``B`` (20 digits)::

    00000000000000000100.log        batches back to back, as a producer sent them  LogFile
    00000000000000000100.index      (offset, position) every index.interval.bytes  OffsetIndex
    00000000000000000100.timeindex  (max timestamp so far, offset) alongside       TimeIndex
    00000000000000000100.txnindex   aborted transactions, only if there are any    TransactionIndex

Finding offset ``o``: the offset index gives the position of the greatest indexed offset
``<= o``; the ``.log`` is walked from there to the first batch whose last offset is ``>= o``
(Kafka LogSegment.translateOffset; docs/kafka-behaviours.md#reads). Finding time ``T``: the time
index gives an offset before every record with timestamp ``>= T``; the walk starts at that offset's
position and the first batch whose max timestamp is ``>= T`` is decoded (Kafka
LogSegment.findOffsetByTimestamp; docs/kafka-behaviours.md#timestamp-lookup). A fetch returns whole
batches with their next offset and record count, read with one ``pread`` when the index entries say
where the batch wanted must be (:meth:`Segment._find`).

This is Kafka's ``LogSegment``: file I/O and every walk of batch headers are the ``.log``'s
(:class:`~stratalog.server.storage.log_file.LogFile`, Kafka's ``FileRecords``); each index is
opened on first use (:class:`~stratalog.server.storage.lazy_index.LazyIndex`). The segment
keeps the roll state and the append bookkeeping, and turns lookups into walks; its files and
the users that hold them open are its base class's
(:class:`~stratalog.server.storage.segment_files.SegmentFiles`). The layouts are
in :mod:`stratalog.records.batch`, :mod:`~stratalog.server.storage.offset_index` and
:mod:`~stratalog.server.storage.time_index`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from stratalog.records.batch import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_FIELD,
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
)
from stratalog.records.errors import RecordError
from stratalog.records.reader import (
    iter_records,
)

from .clock import wall_clock_ms
from .config import LogConfig
from .errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    OffsetOverflowError,
)
from .file_region import FileRegion
from .index import INT32_MAX
from .log_file import (
    ANY_OFFSET,
    ANY_TIMESTAMP,
    FIRST_BLOCK_BYTES,
    LENIENT,
    MAX_BLOCK_BYTES,
    FoundBatch,
    ScannedBatch,
    summarize,
)
from .open_segments import OpenSegments
from .segment_files import SegmentFiles, using_files
from .time_index import TimestampOffset
from .timestamp_search import first_record_at
from .txn_index import AbortedTxn, TxnIndexSearchResult

__all__ = ["FetchedBatches", "LogOffsetPosition", "Segment"]

log = logging.getLogger(__name__)


class LogOffsetPosition(NamedTuple):
    """A batch found by offset (Kafka's ``FileRecords.LogOffsetPosition``)."""

    offset: int  # the batch's last offset
    position: int  # where the batch starts in the .log
    size_bytes: int  # the whole batch


class FetchedBatches(NamedTuple):
    """Whole batches read for a fetch, and what a fetch response says of them."""

    # Whole batches back to back, from a batch boundary; b"" when none. A read's own bytes, or
    # a memoryview of their start where a fetch was cut at a bound (fetch_isolation.py), or
    # (Segment.fetch_region only) a region of the .log to send from the file (file_region.py).
    data: bytes | memoryview | FileRegion
    next_offset: int  # the last batch's last offset + 1; the offset asked for when no data
    records_count: int  # the records_count fields of the batches, summed
    # read_committed fetches only (PartitionLog.fetch): the aborted transactions overlapping
    # the batches returned, from the .txnindex files (Kafka's FetchResponse.abortedTransactions).
    aborted_transactions: tuple[AbortedTxn, ...] = ()


# The low byte of a batch's attributes: the flags that decide whether a point read may stop
# after the batch holding its offset.
_TRANSACTIONAL_OR_CONTROL = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
assert _TRANSACTIONAL_OR_CONTROL < 0x100


class Segment(SegmentFiles):
    """A ``.log`` file plus its lazily opened offset, time and transaction indexes.

    Holds: the base offset; the :class:`LogFile` (descriptor, path, published size); the three
    indexes, each opened (for a new offset or time index: created, preallocated) on first use
    (Kafka LazyIndex; docs/kafka-behaviours.md#index-files-mechanics); the roll state (``created``
    wall-clock time, the first batch's timestamp, this segment's jitter); the running ``(max
    timestamp, offset of its batch)``; the bytes appended since the last index entry.

    Invariants: every batch in the file has offsets ``>= base_offset`` and ``< base_offset +
    2^31``; batches are in increasing offset order; ``size_bytes`` is the end of the last whole
    batch written through this object (for a file opened from disk, its length until
    :meth:`recover` says otherwise); index entries point at batch starts below ``size_bytes``.

    Crash behaviour: appends are page-cache writes, durable after :meth:`flush`. A crash can leave
    a torn last batch, an untrimmed preallocated file or stale indexes; :meth:`recover` rebuilds
    both indexes from the ``.log`` and truncates it at the first invalid byte (Kafka
    LogSegment.recover; docs/kafka-behaviours.md#segment-recovery).

    Open files: the files, the count of their users and the closing of an inactive segment's
    files by the cache are :class:`~stratalog.server.storage.segment_files.SegmentFiles`'s (the
    base class): every method here that uses the files holds the segment for the call, the read
    paths inline (no call more), the others with ``@using_files``; the index objects
    (:attr:`offset_index`, :attr:`time_index`, :attr:`txn_index`) are only to be used inside
    :meth:`pinned`, or on the active segment.

    Concurrency: one writer (the owning log serialises append, truncate, roll, recover, flush
    and close under its ``PartitionLog``'s lock; ``local_log.py`` makes the calls). Reads
    (:meth:`fetch`, :meth:`translate_offset`, :meth:`find_offset_by_timestamp`,
    :meth:`fetch_by_timestamp`, :meth:`read_next_offset`) may run in other threads at the same
    time as an append: they use ``pread`` and stop at the size published *after* a write
    completed, so they never see a half-written batch. Reads must not
    overlap :meth:`close` or :meth:`delete` (the log defers those until no reader can hold the
    segment); they may overlap the cache's :meth:`try_close_files` (see :class:`SegmentFiles`).
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        create: bool,
        file_suffix: str,
        roll_jitter_ms: int,
        time_ms: Callable[[], int] | None,
        open_segments: OpenSegments | None,
        active: bool,
    ) -> None:
        """Use :meth:`open` or :meth:`create`."""
        self._index_interval_bytes = config.index_interval_bytes
        self._roll_jitter_ms = roll_jitter_ms
        self._time_ms = time_ms if time_ms is not None else wall_clock_ms
        self._created_ms = self._time_ms()
        # None until known: loaded lazily from the first batch (Kafka LogSegment.timeWaitedForRoll;
        # docs/kafka-behaviours.md#roll).
        self._rolling_based_timestamp: int | None = None
        # None = unknown: read from the time index on first use (Kafka's UNKNOWN).
        self._max_timestamp_and_offset: TimestampOffset | None = None
        self._bytes_since_last_index_entry = 0
        # Last: the files (and the users' count); an inactive segment joins the cache.
        super().__init__(
            directory, base_offset, config, create, file_suffix, open_segments, active
        )

    # ---------------------------------------------------------------- construction

    @classmethod
    def open(
        cls,
        directory: Path | str,
        base_offset: int,
        config: LogConfig,
        *,
        file_already_exists: bool = True,
        file_suffix: str = "",
        roll_jitter_ms: int | None = None,
        time_ms: Callable[[], int] | None = None,
        open_segments: OpenSegments | None = None,
        active: bool = False,
    ) -> Segment:
        """Open the segment at ``base_offset`` in ``directory``; no index file is touched.

        ``file_already_exists=True`` opens an existing ``.log`` (its length is the segment size);
        False creates a new one, preallocated to ``segment.bytes`` when ``preallocate`` is set
        (Kafka's ``FileRecords.open``). ``roll_jitter_ms`` defaults to a fresh draw of
        ``config.random_segment_jitter_ms()``. ``open_segments``: the cache that may close the
        files of this segment while it is inactive (None: they stay open until :meth:`close`);
        ``active``: the segment takes appends (see :meth:`activate`).

        Raises:
            StorageIOError: the file is missing (or present, when creating), cannot be opened,
                or is longer than a segment can be.
        """
        return cls(
            directory if isinstance(directory, Path) else Path(directory),
            base_offset,
            config,
            not file_already_exists,
            file_suffix,
            config.random_segment_jitter_ms() if roll_jitter_ms is None else roll_jitter_ms,
            time_ms,
            open_segments,
            active,
        )

    @classmethod
    def create(
        cls,
        directory: Path | str,
        base_offset: int,
        config: LogConfig,
        *,
        file_suffix: str = "",
        roll_jitter_ms: int | None = None,
        time_ms: Callable[[], int] | None = None,
        open_segments: OpenSegments | None = None,
        active: bool = False,
    ) -> Segment:
        """Create a new, empty segment (``open`` with ``file_already_exists=False``)."""
        return cls.open(
            directory,
            base_offset,
            config,
            file_already_exists=False,
            file_suffix=file_suffix,
            roll_jitter_ms=roll_jitter_ms,
            time_ms=time_ms,
            open_segments=open_segments,
            active=active,
        )

    # ---------------------------------------------------------------- properties

    @property
    def size_bytes(self) -> int:
        """Bytes of whole batches in the ``.log`` (the published size readers stop at)."""
        return self._log.size_bytes

    @property
    def roll_jitter_ms(self) -> int:
        return self._roll_jitter_ms

    @property
    def max_timestamp_and_offset_so_far(self) -> TimestampOffset:
        """(largest timestamp appended, last offset of the first batch that had it).

        ``(-1, base_offset)`` when no batch had a timestamp. The first call after an open reads
        it from the time index's last entry (materialising the index).
        """
        known = self._max_timestamp_and_offset
        if known is None:
            with self.pinned():
                known = self.time_index.last_entry
            self._max_timestamp_and_offset = known
        return known

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset_so_far.timestamp

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the ``.log`` mtime when no batch had one (Kafka
        LogSegment.largestTimestamp; docs/kafka-behaviours.md#timestamp-lookup)."""
        max_timestamp = self.max_timestamp_so_far
        return max_timestamp if max_timestamp >= 0 else self.last_modified_ms

    @property
    def largest_record_timestamp(self) -> int | None:
        """The largest record timestamp, or None when no batch had one."""
        max_timestamp = self.max_timestamp_so_far
        return max_timestamp if max_timestamp >= 0 else None

    # ---------------------------------------------------------------- writes

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview],
    ) -> None:
        """Append batches whose offsets are already assigned; index them per Kafka LogSegment.append
        (docs/kafka-behaviours.md#append).

        ``records`` is one buffer, or a sequence of buffers to store back to back (written
        with gathered writes: a validated append's stamped headers and views of the request).

        ``largest_offset`` is the last offset of the append, ``largest_timestamp`` its max
        timestamp (-1 if none), ``shallow_offset_of_max_timestamp`` the last offset of the
        earliest batch holding that timestamp. An index entry ``(largest_offset, position of the
        append)`` is written only when more than ``index.interval.bytes`` were appended since the
        previous entry, *before* counting this append: the first append never gets one.

        All or nothing: on a failed or short write the file is cut back to where it was.

        Raises:
            OffsetOverflowError: ``largest_offset`` is not within 2^31 - 1 of the base offset.
            StorageIOError: the write failed (the segment is unchanged).
        """
        if isinstance(records, bytes | bytearray | memoryview):
            records = (records,)
        size = sum(len(piece) for piece in records)
        if size == 0:
            return
        if self._active:  # holds its files open while active: no count needed (writer only)
            self._append(largest_offset, largest_timestamp, shallow_offset_of_max_timestamp,
                         records, size)
            return
        users = self._users
        self._pin()
        try:
            self._append(largest_offset, largest_timestamp, shallow_offset_of_max_timestamp,
                         records, size)
        finally:
            users.pop()

    def _append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: Sequence[bytes | bytearray | memoryview],
        size: int,
    ) -> None:
        log_file = self._log
        if log_file.size_bytes == 0:
            self._rolling_based_timestamp = largest_timestamp
        # Every produce comes here: the loaded indexes and the known max without the
        # properties' calls.
        offset_index = self._offset_index.loaded or self._offset_index.get()
        if not offset_index.can_append_offset(largest_offset):
            raise OffsetOverflowError(
                f"cannot append offset {largest_offset} to segment {log_file.path} with base "
                f"offset {self._base_offset}: offsets of a segment are within {INT32_MAX} of "
                "its base offset"
            )
        index_entry_due = self._bytes_since_last_index_entry > self._index_interval_bytes
        if index_entry_due:
            self._check_index_room(largest_offset)
        physical_position = log_file.append(records, size)
        max_so_far = self._max_timestamp_and_offset or self.max_timestamp_and_offset_so_far
        if largest_timestamp > max_so_far.timestamp:
            max_so_far = TimestampOffset(largest_timestamp, shallow_offset_of_max_timestamp)
            self._max_timestamp_and_offset = max_so_far
        if index_entry_due:
            offset_index.append(largest_offset, physical_position)
            time_index = self._time_index.loaded or self._time_index.get()
            time_index.maybe_append(max_so_far.timestamp, max_so_far.offset)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def _check_index_room(self, largest_offset: int) -> None:
        """Fail before writing anything if the index entries due could not be written.

        The log rolls before an index fills (Kafka LogSegment.shouldRoll;
        docs/kafka-behaviours.md#roll), so this only trips on a caller that did not ask
        :meth:`should_roll`; without it the bytes would be in the file and the error after them.
        """
        offset_index = self.offset_index
        if offset_index.is_full:
            raise IndexFullError(
                f"the offset index {offset_index.path} is full ({offset_index.entries} "
                f"entries): segment {self._log.path} must roll before appending offset "
                f"{largest_offset}"
            )
        if offset_index.entries > 0 and largest_offset <= offset_index.last_offset:
            raise InvalidOffsetError(
                f"cannot append offset {largest_offset} to segment {self._log.path}: not above "
                f"its last indexed offset {offset_index.last_offset}"
            )
        time_index = self.time_index
        if time_index.is_full:  # Kafka's maybeAppend refuses a full index, entry or not
            raise IndexFullError(
                f"the time index {time_index.path} is full ({time_index.entries} entries): "
                f"segment {self._log.path} must roll before appending offset {largest_offset}"
            )

    @using_files
    def truncate_to(self, offset: int) -> int:
        """Remove every batch with offsets ``>= offset``, whole batches only (Kafka
        LogSegment.truncateTo; docs/kafka-behaviours.md#truncation).

        A batch holding ``offset`` goes entirely (truncation is batch-granular). Both indexes
        are cut to ``offset`` and grown back to ``segment.index.bytes`` (this segment becomes
        the active one). Returns the bytes removed from the ``.log``.

        Raises:
            StorageIOError: the file could not be truncated.
        """
        mapping = self.translate_offset(offset)
        offset_index = self.offset_index
        time_index = self.time_index
        # Read the max timestamp before the time index loses entries. (Kafka reads it after,
        # so a reopened segment whose every time entry is truncated away forgets the
        # timestamps of the batches it keeps; found by the model test.)
        had_timestamps = self.max_timestamp_so_far >= 0
        offset_index.truncate_to(offset)
        time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        offset_index.resize(offset_index.max_index_size_bytes)
        time_index.resize(time_index.max_index_size_bytes)
        bytes_truncated = 0 if mapping is None else self._log.truncate_to(mapping.position)
        if self._log.size_bytes == 0:
            self._created_ms = self._time_ms()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        if had_timestamps:
            self._max_timestamp_and_offset = self._read_largest_timestamp()
        return bytes_truncated

    def _read_largest_timestamp(self) -> TimestampOffset:
        """The max (timestamp, offset) after a truncation: last time entry plus a walk."""
        last_entry = self.time_index.last_entry
        position = self.offset_index.lookup(last_entry.offset).position
        best = last_entry
        for _, _, last_offset, _, max_timestamp, _, _ in self._log.batches(
            position, self._log.size_bytes
        ):
            if max_timestamp > best.timestamp:
                best = TimestampOffset(max_timestamp, last_offset)
        return best

    def on_become_inactive(self) -> None:
        """The segment stops being active (Kafka LocalLog.roll; docs/kafka-behaviours.md#roll):
        final time entry, trim indexes and ``.log``; then the cache may close its files (the count
        :meth:`activate` took is released, even when trimming failed: the untrimmed index then stays
        open, as the cache closes an index by trimming it first).

        Raises:
            StorageIOError: an index or the ``.log`` could not be trimmed.
        """
        with self.pinned():
            try:
                max_so_far = self.max_timestamp_and_offset_so_far
                self.time_index.maybe_append(
                    max_so_far.timestamp, max_so_far.offset, skip_full_check=True
                )
                self.offset_index.trim_to_valid_size()
                self.time_index.trim_to_valid_size()
                self._log.trim()
            finally:
                if self._active:
                    self._active = False
                    self._users.pop()
        if self._open_segments is not None:
            self._open_segments.add(self)

    @using_files
    def resize_indexes(self, size_bytes: int) -> None:
        """Resize both indexes (the loader grows the active segment's to the maximum)."""
        self.offset_index.resize(size_bytes)
        self.time_index.resize(size_bytes)

    # ---------------------------------------------------------------- roll decision

    def should_roll(
        self,
        *,
        max_segment_bytes: int,
        max_segment_ms: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        messages_size_bytes: int,
        now_ms: int,
    ) -> bool:
        """Whether an append of ``messages_size_bytes`` must go to a new segment (Kafka
        LogSegment.shouldRoll; docs/kafka-behaviours.md#roll).

        True iff the append would push the file past ``max_segment_bytes``; or the segment is
        not empty and has waited longer than ``max_segment_ms`` minus its jitter (Kafka
        LogSegment.timeWaitedForRoll; docs/kafka-behaviours.md#roll); or either index is full; or
        ``max_offset_in_messages`` is too far from the base offset.
        """
        if not self._active:  # the active segment's files stay open (every append asks)
            with self.pinned():
                return self._should_roll(
                    max_segment_bytes, max_segment_ms, max_timestamp_in_messages,
                    max_offset_in_messages, messages_size_bytes, now_ms,
                )
        return self._should_roll(
            max_segment_bytes, max_segment_ms, max_timestamp_in_messages,
            max_offset_in_messages, messages_size_bytes, now_ms,
        )

    def _should_roll(
        self,
        max_segment_bytes: int,
        max_segment_ms: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        messages_size_bytes: int,
        now_ms: int,
    ) -> bool:
        size = self._log.size_bytes
        if size > max_segment_bytes - messages_size_bytes:
            return True
        waited_ms = self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
        if size > 0 and waited_ms > max_segment_ms - self._roll_jitter_ms:
            return True
        offset_index = self._offset_index.loaded or self._offset_index.get()
        return (
            offset_index.is_full
            or (self._time_index.loaded or self._time_index.get()).is_full
            or not offset_index.can_append_offset(max_offset_in_messages)
        )

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """How long the segment has waited to be rolled (Kafka LogSegment.timeWaitedForRoll;
        docs/kafka-behaviours.md#roll).

        Message time when the first batch had a timestamp (incoming max timestamp minus the
        first batch's), else wall-clock time since this object was created (or emptied).
        """
        self._load_first_batch_timestamp()
        first = self._rolling_based_timestamp
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self._created_ms

    @property
    def first_batch_timestamp(self) -> int | None:
        """The first batch's max timestamp, or None when the segment is empty or it has none."""
        self._load_first_batch_timestamp()
        first = self._rolling_based_timestamp
        return first if first is not None and first >= 0 else None

    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None:
            with self.pinned():
                first = self._log.walk(0, self._log.size_bytes)
            if first is not None:
                self._rolling_based_timestamp = first[4]

    # ---------------------------------------------------------------- reads

    def translate_offset(
        self, offset: int, starting_position: int = 0, end_position: int | None = None
    ) -> LogOffsetPosition | None:
        """The first batch whose last offset is ``>= offset``, or None (Kafka
        LogSegment.translateOffset; docs/kafka-behaviours.md#reads).

        Walks from the offset index's floor entry (or ``starting_position`` if larger) up to
        ``end_position`` (default: the published size). Thread-safe.

        Raises:
            CorruptRecordError, InvalidRecordError: a malformed header on the way.
        """
        users = self._users
        users.append(None)
        self.referenced = True
        if self._files_closed:
            users.pop()
            self._pin_reopening()
        try:
            log_file = self._log
            # The read paths take a loaded index without the property's call.
            offset_index = self._offset_index.loaded or self._offset_index.get()
            start = offset_index.lookup_position(offset)
            if start < starting_position:
                start = starting_position
            size = log_file.size_bytes
            end = size if end_position is None else min(end_position, size)
            found = log_file.walk(start, end, offset)
        finally:
            users.pop()
        return None if found is None else LogOffsetPosition(found[2], found[0], found[1])

    def fetch(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
        max_records: int = 0,
    ) -> FetchedBatches | None:
        """The whole batches from the one holding ``start_offset`` (Kafka LogSegment.read;
        docs/kafka-behaviours.md#reads), with what a fetch response says of them.

        At most ``max_bytes`` bytes of whole batches (``min_one_message``: the first one whatever
        its size), never past ``max_position`` (default: the published size). ``max_records`` >
        0 says the caller wants no more records than that from ``start_offset`` on: when the
        first batch holds them all, it alone is read (a point read reads one batch, not
        ``max_bytes``). Their next offset
        and record count come from the headers the read went over anyway, so a caller need not
        parse them again. The batches stop before a malformed header (the next read at its
        offset raises). Empty data (next offset ``start_offset``) when the first batch does not
        fit; None past the end. Kafka returns a byte range that may end inside a batch; this
        returns whole batches only. Thread-safe.

        Raises:
            ValueError: ``max_bytes`` is negative.
            CorruptRecordError, InvalidRecordError: the first batch at or after
                ``start_offset`` is malformed.
        """
        if max_bytes < 0:
            raise ValueError(
                f"invalid max size {max_bytes} for a read from segment {self._log.path}"
            )
        end = self._log.size_bytes
        if max_position is not None and max_position < end:
            end = max_position
        # Counted inline (see the class docstring): this is every fetch's call.
        users = self._users
        users.append(None)
        self.referenced = True
        if self._files_closed:
            users.pop()
            self._pin_reopening()
        try:
            # A point read takes one batch: no read ahead past it for the batches after.
            ahead_bytes = 0 if max_records else max_bytes
            found = self._find(start_offset, ANY_TIMESTAMP, start_offset, end, ahead_bytes)
            if found is None:
                return None
            return self._whole_batches_from(
                found, start_offset, max_bytes, end, min_one_message, max_records
            )
        finally:
            users.pop()

    def fetch_region(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
        stop_offset: int | None = None,
        region_bytes_min: int = 0,
    ) -> FetchedBatches | None:
        """:meth:`fetch` for a reader that sends the batches from the file (zero copy): the
        same whole batches, as a
        :class:`~stratalog.server.storage.file_region.FileRegion` when they are
        ``region_bytes_min`` bytes or more (else, or when no region is free, their bytes).

        The batches are not read: the first is found as :meth:`fetch` finds it; the last whole
        batch within ``max_bytes`` is found from the offset index's entry at or below the
        limit (entries point at batch starts), walking at most the bytes from there to the
        limit; nothing between is read. So the region's ``records_count`` is the offsets it
        spans (its first batch's base offset to its next offset), which is the record count
        unless a compaction removed records. ``stop_offset`` (a high watermark or an LSO, at a
        batch boundary) leaves out the batches from the one holding it on (one more index
        lookup, and a walk only when it lies within the read). Thread-safe, as :meth:`fetch`.

        Raises:
            as :meth:`fetch`.
        """
        if max_bytes < 0:
            raise ValueError(
                f"invalid max size {max_bytes} for a read from segment {self._log.path}"
            )
        log_file = self._log
        # Before anything is found: a truncation after this makes the region unsendable.
        truncations = log_file.truncations
        end = log_file.size_bytes
        if max_position is not None and max_position < end:
            end = max_position
        users = self._users
        users.append(None)
        self.referenced = True
        if self._files_closed:
            users.pop()
            self._pin_reopening()
        try:
            found = self._find(start_offset, ANY_TIMESTAMP, start_offset, end, 0)
            if found is None:
                return None
            position, size, last_offset, _, _, buf, buf_start = found
            base_offset = BASE_OFFSET_FIELD.unpack_from(buf, position - buf_start)[0]
            if stop_offset is not None and base_offset >= stop_offset:
                return FetchedBatches(b"", start_offset, 0)
            if size > max_bytes and not min_one_message:
                return FetchedBatches(b"", start_offset, 0)
            region_end, next_offset = position + size, last_offset + 1
            limit = min(position + max_bytes, end)
            if stop_offset is not None and limit > region_end:
                # A bound inside the first batch keeps that batch alone.
                limit = (region_end if last_offset >= stop_offset
                         else self._stop_before(stop_offset, region_end, limit))
            if limit > region_end:
                region_end, next_offset = self._last_whole_batch_before(
                    limit, region_end, next_offset)
            size_bytes = region_end - position
            region = None
            if size_bytes >= region_bytes_min:
                region = log_file.open_region(position, size_bytes, truncations)
            if region is None:
                relative = position - buf_start
                if relative + size_bytes <= len(buf):
                    data: bytes | FileRegion = buf[relative:relative + size_bytes]
                else:
                    data = log_file.read(size_bytes, position)
                if len(data) < size_bytes:  # the file shrank under the read
                    return FetchedBatches(b"", start_offset, 0)
            else:
                data = region
            return FetchedBatches(data, next_offset, next_offset - base_offset)
        finally:
            users.pop()

    def _stop_before(self, stop_offset: int, position: int, limit: int) -> int:
        """``limit``, or where the batch holding ``stop_offset`` starts when that is below it
        (past it when the bound lies inside the batch, which is kept, as fetch_isolation.py
        keeps it). Walks from the offset index's floor entry for ``stop_offset`` (or
        ``position``, a batch start, if later), so at most the bytes from there to ``limit``:
        a bound far ahead, a READ_COMMITTED reader's LSO at the log end, costs one lookup."""
        offset_index = self._offset_index.loaded or self._offset_index.get()
        start = max(offset_index.lookup_position(stop_offset), position)
        if start >= limit:
            return limit
        stop = self._log.walk(start, limit, stop_offset)
        if stop is None:
            return limit
        stop_position, stop_size, _, _, _, stop_buf, stop_buf_start = stop
        stop_base = BASE_OFFSET_FIELD.unpack_from(stop_buf, stop_position - stop_buf_start)[0]
        return stop_position if stop_base >= stop_offset else stop_position + stop_size

    def _last_whole_batch_before(
        self, limit: int, position: int, next_offset: int
    ) -> tuple[int, int]:
        """Where the last whole batch ending at or before ``limit`` ends, and the offset after
        it, for batches known to run whole up to ``position`` (ending with ``next_offset`` -
        1): walked from the offset index's last entry below ``limit`` when it is past
        ``position`` (every batch between is whole: the log holds whole batches up to its
        published size), else from ``position``. Reads at most the bytes from that entry to
        ``limit``, in blocks."""
        offset_index = self._offset_index.loaded or self._offset_index.get()
        entry = offset_index.lookup_by_position(limit - 1)
        start = position
        if entry is not None and entry.position > position:
            start = entry.position
        log_file = self._log
        read_bytes = min(limit - start, FIRST_BLOCK_BYTES)
        walk_from = start
        end_position = start
        while True:
            scanned: list[ScannedBatch] = []
            walked, _, _ = log_file.walk(  # type: ignore[misc]
                walk_from, limit, ANY_OFFSET, ANY_TIMESTAMP, b"", walk_from, read_bytes,
                scanned, LENIENT,
            )
            for base_offset, length, _, _, last_offset_delta, _, _ in scanned:
                end_position += length + LOG_OVERHEAD
                next_offset = base_offset + last_offset_delta + 1
            if walked is None or not scanned:
                break
            walk_from = walked
            read_bytes = min(2 * read_bytes, MAX_BLOCK_BYTES)
        if end_position == start:  # no whole batch after the entry: it ends at the entry
            return (start, next_offset) if start == position else self._batch_end_at(start)
        return end_position, next_offset

    def _batch_end_at(self, position: int) -> tuple[int, int]:
        """Where the batches up to ``position`` end (``position``, a batch start) and the
        offset after the batch before it: that batch's last offset + 1 is its own base offset
        (the index entry's batch starts there)."""
        block = self._log.read(LOG_OVERHEAD, position)
        return position, BASE_OFFSET_FIELD.unpack_from(block)[0]

    def _find(
        self, offset: int, timestamp: int, from_offset: int, end: int, max_bytes: int
    ) -> FoundBatch | None:
        """The walk for ``offset`` and ``timestamp``, from where the offset index puts
        ``from_offset`` (no batch ending below ``from_offset`` may qualify).

        The index gives the floor entry and the next one. When the gap between them is more
        than twice ``index.interval.bytes``, it holds one append only (an entry is written once
        more than that many bytes came since the last one), and when ``from_offset`` is past the
        floor entry's offset, that append ends below it: the batch wanted is then most likely
        the one at the next entry, about as large as the gap. One ``pread`` there, of the gap
        or ``max_bytes`` if larger, brings it whole; its base offset shows whether the guess
        holds (every batch before it ends below its base offset). If not, the walk starts at
        the floor entry as usual. A random read of one batch is then one ``pread``, where
        each saved counts twice in the server: the copy, and the GIL given up and taken back.
        """
        log_file = self._log
        offset_index = self._offset_index.loaded or self._offset_index.get()
        floor_offset, start, following = offset_index.lookup_floor_and_next(from_offset)
        gap = following - start
        if (
            floor_offset < from_offset
            and following < end
            and 2 * self._index_interval_bytes < gap <= MAX_BLOCK_BYTES
        ):
            read_bytes = max(gap, max_bytes) if max_bytes <= MAX_BLOCK_BYTES else gap
            block = log_file.read(min(read_bytes, end - following), following)
            if (
                len(block) >= LOG_OVERHEAD
                and BASE_OFFSET_FIELD.unpack_from(block)[0] <= from_offset
            ):
                return log_file.walk(following, end, offset, timestamp, block, following)
        # When the next entry is further than a first block, a first block could not reach the
        # batch after the one at the floor entry anyway: the first read takes that batch's
        # header only, and the refill that follows is sized by it (LogFile.walk), so a random
        # read of one batch of a few KiB or more copies that batch and 61 bytes, not 4 KiB
        # more. Bytes copied are what a read costs in the server, whose buffers are rarely in
        # the CPU's caches.
        read_bytes = FIRST_BLOCK_BYTES if gap <= FIRST_BLOCK_BYTES else RECORD_BATCH_OVERHEAD
        return log_file.walk(start, end, offset, timestamp, b"", start, read_bytes)

    def _whole_batches_from(
        self,
        found: FoundBatch,
        start_offset: int,
        max_bytes: int,
        end: int,
        min_one_message: bool,
        max_records: int = 0,
    ) -> FetchedBatches:
        """The whole batches of at most ``max_bytes`` from the batch ``found``, up to ``end``;
        only that batch when it holds the ``max_records`` (> 0) records from ``start_offset``."""
        position, size, last_offset, records_count, _, buf, buf_start = found
        if max_bytes >= size:
            fetch_bytes = end - position
            if fetch_bytes > max_bytes:
                fetch_bytes = max_bytes
            if max_records and last_offset - start_offset >= max_records - 1:
                relative = position - buf_start
                # Not past a transactional or control batch: a READ_COMMITTED reader may drop
                # it (aborted, a marker) and take its records from the batches after it.
                if len(buf) > relative + ATTRIBUTES_OFFSET + 1 and not (
                    buf[relative + ATTRIBUTES_OFFSET + 1] & _TRANSACTIONAL_OR_CONTROL
                ):
                    fetch_bytes = size
        elif min_one_message:
            fetch_bytes = size
        else:
            return FetchedBatches(b"", start_offset, 0)
        relative = position - buf_start
        if relative + fetch_bytes <= len(buf):
            # Read by the walk already; the whole block is the same object, not a copy.
            data = buf[relative : relative + fetch_bytes]
        else:
            data = self._log.read(fetch_bytes, position)
        data_bytes = len(data)
        if data_bytes == size:
            return FetchedBatches(data, last_offset + 1, records_count)
        if data_bytes < size:  # the file shrank under the read
            return FetchedBatches(b"", start_offset, 0)
        # The whole batches after the first, up to the end of the data or a malformed header.
        following: list[ScannedBatch] = []
        self._log.walk(  # (positional: a call with keywords costs more, on every large fetch)
            position + size, position + data_bytes, ANY_OFFSET, ANY_TIMESTAMP, data, position,
            0, following, LENIENT,
        )
        if not following:
            return FetchedBatches(data[:size], last_offset + 1, records_count)
        following_bytes, next_offset, following_count = summarize(following)
        whole_bytes = size + following_bytes
        if whole_bytes < data_bytes:
            data = data[:whole_bytes]
        return FetchedBatches(data, next_offset, records_count + following_count)

    @using_files
    def read_next_offset(self) -> int:
        """The offset after the last batch, or the base offset if empty (Kafka
        LogSegment.readNextOffset; docs/kafka-behaviours.md#log-loading)."""
        found = self.translate_offset(self.offset_index.last_offset)
        if found is None:
            return self._base_offset
        last = self._log.last_batch(found.position, self._log.size_bytes)
        return self._base_offset if last is None else last[2] + 1

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampOffset | None:
        """The first record with timestamp ``>= timestamp`` and offset ``>= starting_offset``.

        Kafka LogSegment.findOffsetByTimestamp (docs/kafka-behaviours.md#timestamp-lookup): the time
        index gives the offset to start from, the offset index its position; the walk stops at the
        first batch whose max timestamp is ``>= timestamp``, which is decoded (later batches follow
        if none of its records qualify). Returns the record's own (timestamp, offset), or None when
        no record of this segment qualifies. Thread-safe.
        """
        users = self._users
        self._pin()  # inline rather than pinned(): a context manager costs ~1 µs a lookup
        try:
            found = self._find_by_timestamp(timestamp, starting_offset, self._log.size_bytes, 0)
        finally:
            users.pop()
        return None if found is None else found[0]

    def fetch_by_timestamp(
        self,
        timestamp: int,
        starting_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
        max_records: int = 0,
    ) -> tuple[TimestampOffset, FetchedBatches] | None:
        """:meth:`find_offset_by_timestamp` and :meth:`fetch` at the record found, in one pass.

        The record is searched for only below ``max_position`` (default: the published size);
        the batch decoded to find it is the first batch of the fetch, so it is read once.
        ``max_records`` as for :meth:`fetch`, from the record found. None
        when no record of this segment qualifies. Thread-safe.

        Raises:
            ValueError: ``max_bytes`` is negative.
            CorruptRecordError, InvalidRecordError: a malformed or corrupt batch on the way.
        """
        if max_bytes < 0:
            raise ValueError(
                f"invalid max size {max_bytes} for a read from segment {self._log.path}"
            )
        end = self._log.size_bytes
        if max_position is not None and max_position < end:
            end = max_position
        users = self._users
        self._pin()
        try:
            ahead_bytes = 0 if max_records else max_bytes
            found = self._find_by_timestamp(timestamp, starting_offset, end, ahead_bytes)
            if found is None:
                return None
            record, batch = found
            return record, self._whole_batches_from(
                batch, record.offset, max_bytes, end, min_one_message, max_records
            )
        finally:
            users.pop()

    def _find_by_timestamp(
        self, timestamp: int, starting_offset: int, end: int, max_bytes: int
    ) -> tuple[TimestampOffset, FoundBatch] | None:
        """The first record with timestamp ``>= timestamp`` and offset ``>= starting_offset``
        below ``end``, and its batch (whose bytes the returned block holds); ``max_bytes``: what
        the caller reads from that batch on (see :meth:`_find`)."""
        entry = (self._time_index.loaded or self._time_index.get()).lookup(timestamp)
        # Every batch ending at or below the entry's offset has a max timestamp at or below the
        # entry's (a running max): below the target, none of them qualifies. (No entry: the
        # sentinel (-1, base offset) says nothing.)
        if 0 <= entry.timestamp < timestamp:
            from_offset = max(entry.offset + 1, starting_offset)
        else:
            from_offset = max(entry.offset, starting_offset)
        found = self._find(starting_offset, timestamp, from_offset, end, max_bytes)
        log_file = self._log
        while found is not None:
            position, size, last_offset, records_count, max_timestamp, buf, buf_start = found
            relative = position - buf_start
            if relative + size > len(buf):
                buf = log_file.read(size, position)
                found = position, size, last_offset, records_count, max_timestamp, buf, position
                relative = 0
            # The batch's own bytes, not copied: error positions are relative to the batch.
            batch = buf if relative == 0 and size == len(buf) else (
                memoryview(buf)[relative : relative + size]
            )
            try:
                record = first_record_at(batch, timestamp, starting_offset)
            except RecordError as exc:
                raise type(exc)(
                    f"segment {log_file.path}, batch at position {position}: {exc}"
                ) from exc
            if record is not None:
                return record, found
            found = log_file.walk(position + size, end, starting_offset, timestamp)
        return None

    @using_files
    def find_max_timestamp_record(self) -> TimestampOffset | None:
        """The first record holding this segment's max timestamp (ListOffsets -3, Kafka
        UnifiedLog.fetchOffsetByTimestamp; docs/kafka-behaviours.md#max-timestamp).

        Walks from the offset index entry of the max's batch to the first batch whose max
        timestamp equals it and returns its first record with that timestamp. None if the
        segment has no timestamps.
        """
        max_so_far = self.max_timestamp_and_offset_so_far
        if max_so_far.timestamp < 0:
            return None
        log_file = self._log
        position = self.offset_index.lookup(max_so_far.offset).position
        for position, size, _, _, max_timestamp, _, _ in log_file.batches(  # noqa: B020
            position, log_file.size_bytes
        ):
            if max_timestamp != max_so_far.timestamp:
                continue
            for record in iter_records(log_file.read(size, position)):
                if record.timestamp == max_so_far.timestamp:
                    return TimestampOffset(record.timestamp, record.offset)
            return None
        return None

    @using_files
    def read_bytes(self, position: int, size_bytes: int) -> bytes:
        """Up to ``size_bytes`` bytes of the ``.log`` at ``position``, never past the published
        size (the cleaner's reads).

        Raises:
            StorageIOError: the read failed.
        """
        size_bytes = max(0, min(size_bytes, self._log.size_bytes - position))
        return self._log.read(size_bytes, position) if size_bytes else b""

    def iter_batch_headers(self, start_position: int = 0) -> Iterator[BatchHeader]:
        """Headers of the whole batches from ``start_position`` to the published size (the
        files held open until the iterator is exhausted or closed)."""
        with self.pinned():
            yield from self._log.headers(start_position, self._log.size_bytes)

    @using_files
    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> (
        TxnIndexSearchResult
    ):
        """The ``.txnindex``'s :meth:`TransactionIndex.collect_aborted_txns`, files held open."""
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    # ---------------------------------------------------------------- recovery

    @using_files
    def sanity_check(self, time_index_file_newly_created: bool) -> None:
        """Kafka's load-time check (Kafka LogSegment.sanityCheck;
        docs/kafka-behaviours.md#sanity-checks): the offset index file must exist.

        A ``.timeindex`` that did not exist before this open is created empty (not rebuilt). The
        offset and time indexes themselves are not checked (that is recovery's job).

        Raises:
            CorruptIndexError: the ``.index`` file is missing: the segment must be recovered.
        """
        if not self._offset_index.path.exists():
            raise CorruptIndexError(
                f"offset index file {self._offset_index.path} does not exist"
            )
        if time_index_file_newly_created:
            self.time_index.resize(0)
        self.txn_index.sanity_check()

    @using_files
    def recover(self, max_message_bytes: int | None = None) -> int:
        """Rebuild both indexes from the ``.log`` and cut it at the first invalid byte.

        Kafka LogSegment.recover (docs/kafka-behaviours.md#segment-recovery): batches are walked
        from position 0 in recovery mode (see :mod:`~stratalog.server.storage.log_file`): each must
        be whole, at least 61 bytes with a matching CRC, and have offsets within 2^31 - 1 of the
        base offset. Index entries are rebuilt per batch (every batch more than
        ``index.interval.bytes`` after the previous entry). Everything from the first invalid batch
        to the end of the file is truncated. ``max_message_bytes``, when given, also treats a larger
        batch as invalid (Kafka before 2.1 did; trunk has no such limit, which is the default here).
        The transaction index is cut to the recovered end; its entries are rebuilt from the ABORT
        markers by the loader's producer-state pass (``recovery.py`` pass 7), which has the producer
        state.

        Returns the number of bytes truncated.

        Raises:
            OffsetOverflowError: a valid batch has offsets too far from the base offset (Kafka
                splits such a segment; not implemented here).
            InvalidRecordError: a batch in the legacy v0/v1 format with a valid checksum:
                stratalog cannot read it, and it is not corruption to cut away.
            StorageIOError: the file cannot be read or truncated.
        """
        offset_index = self.offset_index
        time_index = self.time_index
        offset_index.reset()
        time_index.reset()
        self._max_timestamp_and_offset = TimestampOffset(NO_TIMESTAMP, self._base_offset)
        log_file = self._log
        file_size = log_file.file_size()
        valid_bytes = 0
        last_index_entry = 0
        base_offset = self._base_offset
        highest_offset = base_offset + INT32_MAX
        index_interval_bytes = self._index_interval_bytes
        max_timestamp = NO_TIMESTAMP
        offset_of_max_timestamp = base_offset
        # The per-batch work is kept to locals and plain tuples: with 1 KiB batches a 1 GiB
        # segment is a million iterations. Batches are consecutive: each starts at valid_bytes.
        for batches in log_file.valid_batches(file_size, max_message_bytes):
            for first_offset, length, _, _, last_offset_delta, batch_max_timestamp, _ in batches:
                last_offset = first_offset + last_offset_delta
                if not base_offset <= last_offset <= highest_offset:
                    raise OffsetOverflowError(
                        f"segment {log_file.path} (base offset {base_offset}) holds a batch "
                        f"with last offset {last_offset} at position {valid_bytes}, beyond the "
                        f"{INT32_MAX} offsets one segment can index"
                    )
                if batch_max_timestamp > max_timestamp:
                    max_timestamp, offset_of_max_timestamp = batch_max_timestamp, last_offset
                if valid_bytes - last_index_entry > index_interval_bytes:
                    offset_index.append(last_offset, valid_bytes)
                    time_index.maybe_append(max_timestamp, offset_of_max_timestamp)
                    last_index_entry = valid_bytes
                valid_bytes += length + LOG_OVERHEAD
        max_so_far = TimestampOffset(max_timestamp, offset_of_max_timestamp)
        truncated = file_size - valid_bytes
        if truncated > 0:
            log.warning(
                "truncating %d invalid bytes at position %d of segment %s during recovery",
                truncated, valid_bytes, log_file.path,
            )
        # Cut even when nothing is invalid: it also frees blocks a crash left allocated past
        # the end of the file (space.py).
        log_file.cut_at(valid_bytes)
        self._max_timestamp_and_offset = max_so_far
        self.txn_index.truncate_to(self.read_next_offset())
        offset_index.trim_to_valid_size()
        time_index.maybe_append(max_so_far.timestamp, max_so_far.offset, skip_full_check=True)
        time_index.trim_to_valid_size()
        self._rolling_based_timestamp = None
        return truncated

    # ---------------------------------------------------------------- durability and files

    @using_files
    def flush(self) -> None:
        """fsync the ``.log``, both mapped indexes and the txn index (Kafka LogSegment.flush;
        docs/kafka-behaviours.md#flush); closed files are reopened for it (an fsync writes what any
        descriptor of the file left dirty)."""
        self._log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        txn_index = self._txn_index.loaded
        if txn_index is not None:  # never opened: nothing was appended to it
            txn_index.flush()

    def close(self, *, flush: bool = True) -> None:
        """Final time entry, trim and close the indexes, fsync and trim the ``.log`` (Kafka
        LogSegment.close; docs/kafka-behaviours.md#flush).

        ``flush=False`` skips the fsync of the ``.log``, for a caller that knows it is durable
        already (the log closes segments below its recovery point so after flushing them: an
        fsync each would cost a clean shutdown of 10,000 segments seconds). Idempotent. Files
        the cache closed are reopened only for the fsync (their indexes were trimmed before).
        """
        with self._files_lock:
            if self._closed:
                return
            self._closed = self._files_closed = True
            if self._log.is_closed and flush:
                self._log.reopen()
            try:
                self._close_files(flush)
            finally:
                self._log.close_handler()
        if self._open_segments is not None:
            self._open_segments.remove(self)

    def _close_files(self, flush: bool) -> None:
        if self._log.is_closed:
            return
        try:
            time_index = self._time_index.loaded
            max_so_far = self._max_timestamp_and_offset
            if max_so_far is not None and time_index is not None:
                try:
                    time_index.maybe_append(
                        max_so_far.timestamp, max_so_far.offset, skip_full_check=True
                    )
                except Exception:  # Kafka swallows it too: closing must go on
                    log.warning("could not append the final time index entry of %s",
                                time_index.path, exc_info=True)
            for index in (self._offset_index, self._time_index, self._txn_index):
                index.close()
            self._log.close(flush=flush)
        finally:
            self._log.close_handler()

    def __repr__(self) -> str:
        return (
            f"Segment(base_offset={self._base_offset}, size_bytes={self._log.size_bytes}, "
            f"path={str(self._log.path)!r})"
        )
