"""One segment of a partition log: a ``.log`` file of record batches and its sparse indexes.

A partition is split into segments so that old data can be deleted a file at a time and so that
an offset can be found without scanning the whole partition. Segment ``B`` holds batches whose
offsets are all ``>= B`` (its *base offset*) and below the next segment's base offset; its files
are named after ``B`` (20 digits)::

    00000000000000000100.log        batches back to back, as a producer sent them, offsets assigned
    00000000000000000100.index      (offset, position) every index.interval.bytes  OffsetIndex
    00000000000000000100.timeindex  (max timestamp so far, offset) alongside       TimeIndex
    00000000000000000100.txnindex   aborted transactions, only if there are any    TransactionIndex

Finding offset ``o``: the offset index gives the position of the greatest indexed offset
``<= o``; batch headers are scanned forward from there to the first batch whose last offset is
``>= o`` ([B-29]). Finding time ``T``: the time index gives an offset before every record with
timestamp ``>= T``; the scan starts there and decodes the first batch whose max timestamp is
``>= T`` ([B-37]). The fetch path (:meth:`Segment.fetch`, :meth:`Segment.fetch_by_timestamp`)
reads the batch wanted with one ``pread`` when the index entries say where it must be (see
``_scan_indexed``), and returns whole batches with their next offset and record count. The batch layout is in :mod:`stratalog.records.batch`; the index layouts in
:mod:`~stratalog.server.storage.offset_index` and :mod:`~stratalog.server.storage.time_index`.

This is Kafka's ``LogSegment`` (``LogSegment.java``) with ``FileRecords`` folded in: the ``.log``
is a file descriptor written with ``pwrite`` at the tracked end and read with ``pread``; nothing
uses a shared file position, so reads need no lock.
"""

from __future__ import annotations

import array
import bisect
import contextlib
import itertools
import logging
import os
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c as _crc32c  # the C function: recovery's hot loop skips our wrapper

from stratalog.records.accel import ACCELERATED, decode_arrow
from stratalog.records.batch import (
    COMPRESSION_CODEC_MASK,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    validate_batch,
)
from stratalog.records.crc import crc32c
from stratalog.records.errors import CorruptRecordError, InvalidRecordError, RecordError
from stratalog.records.reader import decode_batch_columns, iter_records

from . import space
from .config import LogConfig
from .errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    LogClosedError,
    OffsetOverflowError,
    StorageIOError,
)
from .files import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    filename_prefix_from_offset,
)
from .index import INT32_MAX
from .offset_index import OffsetIndex
from .time_index import TimeIndex, TimestampOffset
from .txn_index import TransactionIndex

__all__ = ["FetchSlice", "FetchedBatches", "LogOffsetPosition", "Segment"]

log = logging.getLogger(__name__)

# The batch header as one struct, in BatchHeader's field order (see stratalog.records.batch).
_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == RECORD_BATCH_OVERHEAD
_LENGTH = struct.Struct(">i")  # at byte 8 of a batch
_BASE_OFFSET = struct.Struct(">q")  # at byte 0
# What a scan needs of a batch header, in one unpack: base offset, length, magic, last offset
# delta, max timestamp, records count (the rest of the 61 bytes skipped).
_SCAN_FIELDS = struct.Struct(
    ">"
    "q"  # 0 base_offset
    "i"  # 8 length
    "4x"  # 12 partition_leader_epoch
    "B"  # 16 magic
    "6x"  # 17 crc, attributes
    "i"  # 23 last_offset_delta
    "8x"  # 27 base_timestamp
    "q"  # 35 max_timestamp
    "14x"  # 43 producer_id, producer_epoch, base_sequence
    "i"  # 57 records_count
)
assert _SCAN_FIELDS.size == RECORD_BATCH_OVERHEAD
# Below every int64 timestamp: an offset scan takes batches whatever their timestamps.
_ANY_TIMESTAMP = -(2**63) - 1
_UINT32 = struct.Struct(">I")
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
# Kafka rejects a size field below the legacy v0 record overhead before looking at the magic.
_MIN_SIZE_FIELD = 14
# Header scans start with a small read (an index lookup usually lands on or just before the
# batch wanted) and double it on every refill, up to the maximum, for long scans.
_SCAN_FIRST_BLOCK_BYTES = 4 * 1024
_SCAN_MAX_BLOCK_BYTES = 256 * 1024
# Recovery reads the log in blocks of this size and checksums batches in place.
_RECOVERY_BLOCK_BYTES = 1024 * 1024
# A batch larger than this is checksummed in pieces rather than read into memory whole.
_CRC_CHUNK_BYTES = 8 * 1024 * 1024


class LogOffsetPosition(NamedTuple):
    """A batch found by offset (Kafka's ``FileRecords.LogOffsetPosition``)."""

    offset: int  # the batch's last offset
    position: int  # where the batch starts in the .log
    size_bytes: int  # the whole batch


class FetchSlice(NamedTuple):
    """What :meth:`Segment.read` returns: raw ``.log`` bytes starting at a batch boundary."""

    offset: int  # the offset asked for (may lie inside the first batch)
    segment_base_offset: int
    position: int  # position of the first batch in the .log
    data: bytes  # may end in the middle of a batch (Kafka's semantics)
    first_entry_incomplete: bool  # max_bytes cut the first batch


class FetchedBatches(NamedTuple):
    """Whole batches read for a fetch, and what a fetch response says of them."""

    data: bytes  # whole batches back to back, from a batch boundary; b"" when none
    next_offset: int  # the last batch's last offset + 1; the offset asked for when no data
    records_count: int  # the records_count fields of the batches, summed


# A batch found by a scan: (position, size_bytes, last_offset, records_count, block, block_start),
# where block is the last bytes read (starting at position block_start of the .log).
_Found = tuple[int, int, int, int, bytes, int]


def _extend_run(
    data: bytes, position: int, next_offset: int, records_count: int
) -> tuple[int, int, int]:
    """Walk the whole batches of ``data`` from ``position`` (a batch boundary).

    Returns where they end (a partial batch, or a malformed header -- magic other than 2, a
    size below the 61-byte header -- ends them) and ``next_offset`` and ``records_count``
    carried over the batches walked.
    """
    end = len(data)
    unpack = _SCAN_FIELDS.unpack_from
    while position + RECORD_BATCH_OVERHEAD <= end:
        base_offset, length, magic, last_offset_delta, _, count = unpack(data, position)
        size = length + LOG_OVERHEAD
        if magic != MAGIC or size < RECORD_BATCH_OVERHEAD or size > end - position:
            break
        position += size
        next_offset = base_offset + last_offset_delta + 1
        records_count += count
    return position, next_offset, records_count


def _first_read_bytes(position: int, next_entry: int) -> int:
    """How much a scan's first ``pread`` takes from ``position`` (an index entry's), given the
    position of the next index entry (-1: none).

    When the next entry is further than a first block, a first block could not reach the batch
    after the one at ``position`` anyway: the first read then takes that batch's header only,
    and the refill that follows is sized by it (see :meth:`Segment._scan`), so a random read of
    one batch of a few KiB or more copies that batch and 61 bytes, not 4 KiB more. Bytes copied
    are what a read costs in the server, whose buffers are rarely in the CPU's caches.
    """
    if next_entry - position > _SCAN_FIRST_BLOCK_BYTES:
        return RECORD_BATCH_OVERHEAD
    return _SCAN_FIRST_BLOCK_BYTES


def _record_offsets_and_timestamps(
    batch: bytes | memoryview,
) -> tuple[Sequence[int], Sequence[int]]:
    """The offsets and timestamps of the records of ``batch`` (one whole batch at position 0),
    with every check and error of :func:`~stratalog.records.reader.decode_batch_columns`.

    An uncompressed batch, with the C codec, is decoded by
    :func:`~stratalog.records.accel.decode_arrow`, which makes no Python object per record (a
    time lookup needs two numbers of each record, not its key, value and headers): less than
    half the cost. Compressed batches, and the pure-Python codec, take decode_batch_columns.
    """
    if not ACCELERATED or batch[_ATTRIBUTES_OFFSET + 1] & COMPRESSION_CODEC_MASK:
        _, columns = decode_batch_columns(batch)
        return columns.offsets, columns.timestamps
    header = validate_batch(batch)
    count = header.records_count
    if count < 0:
        raise CorruptRecordError(f"record batch at position 0 declares {count} records")
    override = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    with memoryview(batch) as view:
        region = view[RECORD_BATCH_OVERHEAD : header.length + LOG_OVERHEAD]
        try:
            columns = decode_arrow(
                region, count, header.base_offset, header.base_timestamp, override
            )
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"record batch at position 0: {exc}") from None
        finally:
            region.release()
    offsets = array.array("q", columns.offsets)  # little-endian int64s
    timestamps = array.array("q", columns.timestamps)
    if sys.byteorder != "little":
        offsets.byteswap()
        timestamps.byteswap()
    return offsets, timestamps


def _first_record_reaching(
    offsets: Sequence[int], timestamps: Sequence[int], timestamp: int, starting_offset: int
) -> int:
    """The index of the first record with timestamp ``>= timestamp`` and offset ``>=
    starting_offset``, in record order; -1 if none.

    Timestamps within a batch are usually in order: a bisection then finds the answer, and
    it is taken only once checked (every timestamp before it below the target), so records
    out of order cost a scan, never a wrong answer. The scan runs its test per record in C.
    """
    index = bisect.bisect_left(timestamps, timestamp)
    start = 0
    if index < len(timestamps) and (index == 0 or max(timestamps[:index]) < timestamp):
        if offsets[index] >= starting_offset:
            return index
        start = index + 1
    reaching = map(timestamp.__le__, itertools.islice(timestamps, start, None))
    for index in itertools.compress(itertools.count(start), reaching):
        if offsets[index] >= starting_offset:
            return index
    return -1


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Segment:
    """A ``.log`` file plus its lazily opened offset, time and transaction indexes.

    Holds: the base offset; the ``.log`` descriptor and its *published* size (bytes of whole
    batches readers may see); the indexes (each opened, and for a new file preallocated, on first
    use: [B-10]); the roll state (``created`` wall-clock time, the first batch's timestamp, this
    segment's jitter); the running ``(max timestamp, offset of its batch)``; the bytes appended
    since the last index entry.

    Invariants: every batch in the file has offsets ``>= base_offset`` and ``< base_offset +
    2^31``; batches are in increasing offset order; ``size_bytes`` is the end of the last whole
    batch written through this object (for a file opened from disk, its length until
    :meth:`recover` says otherwise); index entries point at batch starts below ``size_bytes``.

    Crash behaviour: appends are page-cache writes, durable after :meth:`flush`. A crash can leave
    a torn last batch, an untrimmed preallocated file or stale indexes; :meth:`recover` rebuilds
    both indexes from the ``.log`` and truncates it at the first invalid byte ([B-46], [B-47]).

    Concurrency: one writer (the owning ``PartitionLog`` serialises append, truncate, roll,
    recover, flush and close). Reads (:meth:`read`, :meth:`fetch`, :meth:`translate_offset`,
    :meth:`find_offset_by_timestamp`, :meth:`fetch_by_timestamp`, :meth:`read_next_offset`) may
    run in other threads at the same time as an append: they use ``pread`` and stop at the size
    published *after* a write completed, so they never see a half-written batch. Reads must not overlap :meth:`close` or
    :meth:`delete` (the log defers those until no reader can hold the segment).
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        fd: int,
        size_bytes: int,
        *,
        file_suffix: str = "",
        roll_jitter_ms: int = 0,
        time_ms: Callable[[], int] | None = None,
    ) -> None:
        """Use :meth:`open` or :meth:`create`; this takes an already opened descriptor."""
        directory = directory if isinstance(directory, Path) else Path(directory)
        self._directory = directory
        self._base_offset = base_offset
        self._config = config
        self._fd: int | None = fd
        self._size = size_bytes
        # Only the .log path is built now; the index paths and the transaction index object on
        # first use: opening a log of 10,000 segments builds 10,000 of each, most never used.
        self._stem = filename_prefix_from_offset(base_offset)
        self._file_suffix = file_suffix
        self._log_path = directory / f"{self._stem}{LOG_FILE_SUFFIX}{file_suffix}"
        self._offset_index_path: Path | None = None
        self._time_index_path: Path | None = None
        self._txn_index_path: Path | None = None
        self._index_interval_bytes = config.index_interval_bytes
        self._max_index_size_bytes = config.segment_index_bytes
        # Large appends allocate their blocks first (space.py), unless the file was sized to
        # segment.bytes already (preallocate) or the file system cannot.
        self._allocate_appends = not config.preallocate
        self._roll_jitter_ms = roll_jitter_ms
        self._time_ms = time_ms if time_ms is not None else _wall_clock_ms
        self._created_ms = self._time_ms()
        # None until known: loaded lazily from the first batch ([B-12]).
        self._rolling_based_timestamp: int | None = None
        # None = unknown: read from the time index on first use (Kafka's UNKNOWN).
        self._max_timestamp_and_offset: TimestampOffset | None = None
        self._bytes_since_last_index_entry = 0
        # Lazy indexes (Kafka's LazyIndex): the lock makes two racing first uses map one file.
        self._index_lock = threading.Lock()
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._txn_index: TransactionIndex | None = None

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
    ) -> Segment:
        """Open the segment at ``base_offset`` in ``directory``; no index file is touched.

        ``file_already_exists=True`` opens an existing ``.log`` (its length is the segment size);
        False creates a new one, preallocated to ``segment.bytes`` when ``preallocate`` is set
        (Kafka's ``FileRecords.open``). ``roll_jitter_ms`` defaults to a fresh draw of
        ``config.random_segment_jitter_ms()``.

        Raises:
            StorageIOError: the file is missing (or present, when creating), or cannot be opened.
        """
        directory = directory if isinstance(directory, Path) else Path(directory)
        # A plain string for os.open; __init__ builds the Path objects once.
        path = f"{directory}{os.sep}{filename_prefix_from_offset(base_offset)}{LOG_FILE_SUFFIX}"
        path += file_suffix
        try:
            if file_already_exists:
                fd = os.open(path, os.O_RDWR)
                size = os.fstat(fd).st_size
            else:
                # O_EXCL: the log deletes stale files before it creates a segment ([B-13]); an
                # existing file here would be someone's data, never to be overwritten silently.
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                size = 0
                if config.preallocate and config.init_file_size > 0:
                    try:
                        os.posix_fallocate(fd, 0, config.init_file_size)
                    except OSError:
                        # Not every file system allocates; a sparse length does as well.
                        os.ftruncate(fd, config.init_file_size)
        except OSError as exc:
            action = "open" if file_already_exists else "create"
            raise StorageIOError(f"failed to {action} segment file {path}: {exc}") from exc
        if size > INT32_MAX:
            os.close(fd)
            raise StorageIOError(
                f"segment file {path} is {size} bytes; a segment holds at most {INT32_MAX}"
            )
        jitter = config.random_segment_jitter_ms() if roll_jitter_ms is None else roll_jitter_ms
        return cls(
            directory,
            base_offset,
            config,
            fd,
            size,
            file_suffix=file_suffix,
            roll_jitter_ms=jitter,
            time_ms=time_ms,
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
        )

    # ---------------------------------------------------------------- properties

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def size_bytes(self) -> int:
        """Bytes of whole batches in the ``.log`` (the published size readers stop at)."""
        return self._size

    @property
    def log_path(self) -> Path:
        return self._log_path

    @property
    def offset_index_path(self) -> Path:
        path = self._offset_index_path
        if path is None:
            path = self._directory / f"{self._stem}{INDEX_FILE_SUFFIX}{self._file_suffix}"
            self._offset_index_path = path
        return path

    @property
    def time_index_path(self) -> Path:
        path = self._time_index_path
        if path is None:
            path = self._directory / f"{self._stem}{TIME_INDEX_FILE_SUFFIX}{self._file_suffix}"
            self._time_index_path = path
        return path

    @property
    def txn_index_path(self) -> Path:
        index = self._txn_index
        if index is not None:
            return index.path
        path = self._txn_index_path
        if path is None:
            path = self._directory / f"{self._stem}{TXN_INDEX_FILE_SUFFIX}{self._file_suffix}"
            self._txn_index_path = path
        return path

    @property
    def roll_jitter_ms(self) -> int:
        return self._roll_jitter_ms

    @property
    def is_closed(self) -> bool:
        return self._fd is None

    @property
    def offset_index(self) -> OffsetIndex:
        """The offset index, opened (and created, preallocated) on first use."""
        index = self._offset_index
        if index is None:
            with self._index_lock:
                index = self._offset_index
                if index is None:
                    index = OffsetIndex(
                        self.offset_index_path, self._base_offset, self._max_index_size_bytes
                    )
                    self._offset_index = index
        return index

    @property
    def time_index(self) -> TimeIndex:
        """The time index, opened (and created, preallocated) on first use."""
        index = self._time_index
        if index is None:
            with self._index_lock:
                index = self._time_index
                if index is None:
                    index = TimeIndex(
                        self.time_index_path, self._base_offset, self._max_index_size_bytes
                    )
                    self._time_index = index
        return index

    @property
    def txn_index(self) -> TransactionIndex:
        """The transaction index, opened on first use (its file is created on first append)."""
        index = self._txn_index
        if index is None:
            with self._index_lock:
                index = self._txn_index
                if index is None:
                    index = TransactionIndex(self.txn_index_path, self._base_offset)
                    self._txn_index = index
        return index

    @property
    def indexes_loaded(self) -> tuple[bool, bool]:
        """Whether the offset and time indexes are open (for tests of laziness)."""
        return self._offset_index is not None, self._time_index is not None

    @property
    def max_timestamp_and_offset_so_far(self) -> TimestampOffset:
        """(largest timestamp appended, last offset of the first batch that had it).

        ``(-1, base_offset)`` when no batch had a timestamp. The first call after an open reads
        it from the time index's last entry (materialising the index).
        """
        known = self._max_timestamp_and_offset
        if known is None:
            known = self.time_index.last_entry
            self._max_timestamp_and_offset = known
        return known

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset_so_far.timestamp

    @property
    def last_modified_ms(self) -> int:
        """The ``.log`` file's modification time in ms."""
        try:
            return os.stat(self._log_path).st_mtime_ns // 1_000_000
        except OSError as exc:
            raise StorageIOError(f"failed to stat segment file {self._log_path}: {exc}") from exc

    def set_last_modified_ms(self, timestamp_ms: int) -> None:
        """Set the modification time of the ``.log`` and index files (tests, retention)."""
        nanoseconds = timestamp_ms * 1_000_000
        for path in (self._log_path, self.offset_index_path, self.time_index_path):
            if path.exists():
                os.utime(path, ns=(nanoseconds, nanoseconds))

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the ``.log`` mtime when no batch had one ([B-36])."""
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
        """Append batches whose offsets are already assigned; index them per [B-5].

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
        physical_position = self._size
        if physical_position == 0:
            self._rolling_based_timestamp = largest_timestamp
        offset_index = self.offset_index
        if not offset_index.can_append_offset(largest_offset):
            raise OffsetOverflowError(
                f"cannot append offset {largest_offset} to segment {self._log_path} with base "
                f"offset {self._base_offset}: offsets of a segment are within {INT32_MAX} of "
                "its base offset"
            )
        index_entry_due = self._bytes_since_last_index_entry > self._index_interval_bytes
        if index_entry_due:
            self._check_index_room(largest_offset)
        self._write_at(records, physical_position, size)
        # Published only now: readers stop at this size, so they never see a partial batch.
        self._size = physical_position + size
        if largest_timestamp > self.max_timestamp_so_far:
            self._max_timestamp_and_offset = TimestampOffset(
                largest_timestamp, shallow_offset_of_max_timestamp
            )
        if index_entry_due:
            offset_index.append(largest_offset, physical_position)
            max_so_far = self.max_timestamp_and_offset_so_far
            self.time_index.maybe_append(max_so_far.timestamp, max_so_far.offset)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def _check_index_room(self, largest_offset: int) -> None:
        """Fail before writing anything if the index entries due could not be written.

        The log rolls before an index fills ([B-11]), so this only trips on a caller that did
        not ask :meth:`should_roll`; without it the bytes would be in the file and the error
        after them.
        """
        offset_index = self.offset_index
        if offset_index.is_full:
            raise IndexFullError(
                f"the offset index {offset_index.path} is full ({offset_index.entries} "
                f"entries): segment {self._log_path} must roll before appending offset "
                f"{largest_offset}"
            )
        if offset_index.entries > 0 and largest_offset <= offset_index.last_offset:
            raise InvalidOffsetError(
                f"cannot append offset {largest_offset} to segment {self._log_path}: not above "
                f"its last indexed offset {offset_index.last_offset}"
            )
        time_index = self.time_index
        if time_index.is_full:  # Kafka's maybeAppend refuses a full index, entry or not
            raise IndexFullError(
                f"the time index {time_index.path} is full ({time_index.entries} entries): "
                f"segment {self._log_path} must roll before appending offset {largest_offset}"
            )

    def _write_at(
        self, pieces: Sequence[bytes | bytearray | memoryview], position: int, size: int
    ) -> None:
        """Write ``pieces`` (``size`` bytes in all) at ``position``; all or nothing."""
        fd = self._require_fd()
        views = [memoryview(piece) for piece in pieces]
        if self._allocate_appends and size >= space.ALLOCATE_MIN_BYTES:
            self._allocate_appends = space.allocate(fd, position, size)
        try:
            _pwrite_all(fd, views, position)
        except OSError as exc:
            try:
                os.ftruncate(fd, position)
            except OSError:
                log.exception("could not cut %s back to %d bytes", self._log_path, position)
            raise StorageIOError(
                f"failed to append {size} bytes at position {position} of segment "
                f"{self._log_path} (cut back to {position}): {exc}"
            ) from exc

    def truncate_to(self, offset: int) -> int:
        """Remove every batch with offsets ``>= offset``, whole batches only ([B-26]).

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
        bytes_truncated = 0 if mapping is None else self._truncate_log(mapping.position)
        if self._size == 0:
            self._created_ms = self._time_ms()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        if had_timestamps:
            self._max_timestamp_and_offset = self._read_largest_timestamp()
        return bytes_truncated

    def _truncate_log(self, target_size: int, *, always: bool = False) -> int:
        """Cut the ``.log`` to ``target_size`` bytes; returns the bytes removed.

        The file is cut only when longer, unless ``always``: a cut to its own length frees
        blocks allocated past its end.
        """
        original = self._size
        if not 0 <= target_size <= original:
            raise ValueError(
                f"cannot truncate segment {self._log_path} of {original} bytes to {target_size}"
            )
        fd = self._require_fd()
        # Publish the smaller size first so that no reader starts a read past it.
        self._size = target_size
        try:
            if always or os.fstat(fd).st_size > target_size:
                os.ftruncate(fd, target_size)
        except OSError as exc:
            raise StorageIOError(
                f"failed to truncate segment {self._log_path} to {target_size} bytes: {exc}"
            ) from exc
        return original - target_size

    def _read_largest_timestamp(self) -> TimestampOffset:
        """The max (timestamp, offset) after a truncation: last time entry plus a scan."""
        last_entry = self.time_index.last_entry
        position = self.offset_index.lookup(last_entry.offset).position
        best = last_entry
        for header in self._iter_headers(position, self._size):
            if header.max_timestamp > best.timestamp:
                best = TimestampOffset(header.max_timestamp, header.last_offset)
        return best

    def on_become_inactive(self) -> None:
        """The segment stops being active ([B-13]): final time entry, trim indexes and ``.log``."""
        max_so_far = self.max_timestamp_and_offset_so_far
        self.time_index.maybe_append(max_so_far.timestamp, max_so_far.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._trim_log()

    def _trim_log(self) -> None:
        """Cut a preallocated ``.log`` down to its data."""
        fd = self._require_fd()
        try:
            if os.fstat(fd).st_size > self._size:
                os.ftruncate(fd, self._size)
        except OSError as exc:
            raise StorageIOError(
                f"failed to trim segment {self._log_path} to {self._size} bytes: {exc}"
            ) from exc

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
        """Whether an append of ``messages_size_bytes`` must go to a new segment ([B-11]).

        True iff the append would push the file past ``max_segment_bytes``; or the segment is
        not empty and has waited longer than ``max_segment_ms`` minus its jitter ([B-12]); or
        either index is full; or ``max_offset_in_messages`` is too far from the base offset.
        """
        size = self._size
        if size > max_segment_bytes - messages_size_bytes:
            return True
        waited_ms = self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
        if size > 0 and waited_ms > max_segment_ms - self._roll_jitter_ms:
            return True
        offset_index = self.offset_index
        return (
            offset_index.is_full
            or self.time_index.is_full
            or not offset_index.can_append_offset(max_offset_in_messages)
        )

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """How long the segment has waited to be rolled ([B-12]).

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
            for header in self._iter_headers(0, self._size):
                self._rolling_based_timestamp = header.max_timestamp
                break

    # ---------------------------------------------------------------- reads

    def translate_offset(
        self, offset: int, starting_position: int = 0, end_position: int | None = None
    ) -> LogOffsetPosition | None:
        """The first batch whose last offset is ``>= offset``, or None ([B-29]).

        Starts at the offset index's floor entry (or ``starting_position`` if larger) and scans
        batch headers up to ``end_position`` (default: the published size). Thread-safe.
        """
        start = max(self.offset_index.lookup_position(offset), starting_position)
        end = self._size if end_position is None else min(end_position, self._size)
        found = self._scan(offset, _ANY_TIMESTAMP, start, end)
        return None if found is None else LogOffsetPosition(found[2], found[0], found[1])

    def _scan(
        self,
        offset: int,
        timestamp: int,
        start: int,
        end: int,
        first_read_bytes: int = _SCAN_FIRST_BLOCK_BYTES,
        block: bytes = b"",
    ) -> _Found | None:
        """Scan headers in ``[start, end)`` for the first batch whose last offset is ``>= offset``
        and whose max timestamp is ``>= timestamp`` (``_ANY_TIMESTAMP``: any).

        The hot loop of every read: the rules of :meth:`_iter_headers` (the same errors for a
        malformed batch, the same quiet stop at a partial tail or a file that shrank), without
        building headers: one ``unpack_from`` per batch. Returns the batch as a :data:`_Found`,
        with the last block read, so that a caller whose bytes are in it needs no second
        ``pread``.

        ``block``, if given, holds bytes already read from ``start``. Else the first ``pread``
        takes ``first_read_bytes`` (4 KiB unless the caller knows better, see
        :func:`_first_read_bytes`). A refill takes at least the size of the batch just skipped,
        so that when batches are alike (one producer's) the batch wanted arrives whole with its
        header. The block doubles per refill up to 256 KiB for long scans.
        """
        fd = self._require_fd()
        pread = os.pread
        buf = block
        buf_start = start
        buf_length = len(block)
        block_bytes = _SCAN_FIRST_BLOCK_BYTES
        size = 0
        read_bytes = first_read_bytes
        position = start
        limit = end - HEADER_SIZE_UP_TO_MAGIC
        unpack = _SCAN_FIELDS.unpack_from
        while position < limit:
            relative = position - buf_start
            if relative + RECORD_BATCH_OVERHEAD > buf_length:
                if buf_length:
                    # A batch larger than a block would not help the guess: its header is
                    # enough.
                    read_bytes = (
                        size if block_bytes < size <= _SCAN_MAX_BLOCK_BYTES else block_bytes
                    )
                if read_bytes > end - position:
                    read_bytes = end - position
                try:
                    buf = pread(fd, read_bytes, position)
                except OSError as exc:
                    raise self._read_error(read_bytes, position, exc) from exc
                if block_bytes < _SCAN_MAX_BLOCK_BYTES:
                    block_bytes *= 2
                buf_start = position
                buf_length = len(buf)
                relative = 0
                if buf_length < RECORD_BATCH_OVERHEAD:
                    self._check_short_header(buf, position, end)
                    return None
            base_offset, length, magic, last_offset_delta, max_timestamp, records_count = unpack(
                buf, relative
            )
            size = length + LOG_OVERHEAD
            if length < _MIN_SIZE_FIELD:
                raise CorruptRecordError(
                    f"found record size {length} at position {position} of segment "
                    f"{self._log_path}, smaller than the minimum record overhead "
                    f"({_MIN_SIZE_FIELD})"
                )
            if position > end - size:
                return None  # a partial tail: a write in progress or a torn end
            if magic != MAGIC or size < RECORD_BATCH_OVERHEAD:
                # The rare cases: let the general scanner raise its precise error.
                for _ in self._iter_headers(position, position + size):
                    pass
                return None
            last_offset = base_offset + last_offset_delta
            if last_offset >= offset and max_timestamp >= timestamp:
                return position, size, last_offset, records_count, buf, buf_start
            position += size
        return None

    def _check_short_header(self, buf: bytes, position: int, end: int) -> None:
        """Fewer than a header's bytes were read at ``position``: raise as :meth:`_iter_headers`
        would for a malformed batch there, or return (a partial tail, a file that shrank)."""
        if len(buf) <= HEADER_SIZE_UP_TO_MAGIC:
            return
        length = _LENGTH.unpack_from(buf, 8)[0]
        if length < _MIN_SIZE_FIELD:
            raise CorruptRecordError(
                f"found record size {length} at position {position} of segment "
                f"{self._log_path}, smaller than the minimum record overhead ({_MIN_SIZE_FIELD})"
            )
        size = length + LOG_OVERHEAD
        if position <= end - size and (buf[16] != MAGIC or size < RECORD_BATCH_OVERHEAD):
            for _ in self._iter_headers(position, position + size):
                pass

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchSlice | None:
        """Raw bytes from the batch holding ``start_offset`` ([B-30]); None past the end.

        At most ``max_bytes`` bytes and never past ``max_position`` (default: the published
        size); with ``min_one_message`` the first batch is returned whole even if larger than
        ``max_bytes``. As in Kafka the bytes may end inside a batch; ``PartitionLog.read`` cuts
        them to whole batches. Thread-safe.

        Raises:
            ValueError: ``max_bytes`` is negative.
        """
        if max_bytes < 0:
            raise ValueError(
                f"invalid max size {max_bytes} for a read from segment {self._log_path}"
            )
        end = self._size if max_position is None else min(max_position, self._size)
        start = self.offset_index.lookup_position(start_offset)
        found = self._scan(start_offset, _ANY_TIMESTAMP, start, end)
        if found is None:
            return None
        position, size, _, _, buf, buf_start = found
        adjusted_max_bytes = max(max_bytes, size) if min_one_message else max_bytes
        incomplete = adjusted_max_bytes < size
        fetch_bytes = min(end - position, adjusted_max_bytes)
        relative = position - buf_start
        if fetch_bytes <= 0:
            data = b""
        elif relative + fetch_bytes <= len(buf):
            # Already read by the scan (small batches): no second pread.
            data = buf[relative : relative + fetch_bytes]
        else:
            data = self._pread(fetch_bytes, position)
        return FetchSlice(start_offset, self._base_offset, position, data, incomplete)

    def fetch(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchedBatches | None:
        """:meth:`read` cut to whole batches, with what a fetch response says of them.

        The whole batches of at most ``max_bytes`` bytes (``min_one_message``: the first one
        whatever its size) from the batch holding ``start_offset``, never past ``max_position``;
        their next offset and record count come from the headers the read went over anyway, so
        a caller need not parse them again. The batches stop before a malformed header (the
        next read at its offset raises the scan's error). Empty data (next offset
        ``start_offset``) when the first batch does not fit; None past the end. Thread-safe.

        Raises:
            ValueError: ``max_bytes`` is negative.
            CorruptRecordError, InvalidRecordError: the first batch at or after
                ``start_offset`` is malformed.
        """
        if max_bytes < 0:
            raise ValueError(
                f"invalid max size {max_bytes} for a read from segment {self._log_path}"
            )
        end = self._size if max_position is None else min(max_position, self._size)
        found = self._scan_indexed(start_offset, _ANY_TIMESTAMP, start_offset, end, max_bytes)
        if found is None:
            return None
        return self._whole_batches_from(found, start_offset, max_bytes, end, min_one_message)

    def _scan_indexed(
        self, offset: int, timestamp: int, from_offset: int, end: int, max_bytes: int
    ) -> _Found | None:
        """:meth:`_scan` for ``offset`` and ``timestamp``, from where the offset index puts
        ``from_offset`` (no batch ending below ``from_offset`` may qualify).

        The index gives the floor entry and the next one. When the gap between them is more
        than twice ``index.interval.bytes``, it holds one append only (an entry is written once
        more than that many bytes came since the last one), and when ``from_offset`` is past the
        floor entry's offset, that append ends below it: the batch wanted is then most likely
        the one at the next entry, about as large as the gap. One ``pread`` there, of the gap
        or ``max_bytes`` if larger, brings it whole; its base offset shows whether the guess
        holds (every batch before it ends below its base offset). If not, the scan starts at
        the floor entry as usual. A random read of one batch is then one ``pread``, where
        each saved counts twice in the server: the copy, and the GIL given up and taken back.
        """
        floor_offset, start, following = self.offset_index.lookup_floor_and_next(from_offset)
        gap = following - start
        if (
            floor_offset < from_offset
            and following < end
            and 2 * self._index_interval_bytes < gap <= _SCAN_MAX_BLOCK_BYTES
        ):
            read_bytes = max(gap, max_bytes) if max_bytes <= _SCAN_MAX_BLOCK_BYTES else gap
            block = self._pread(min(read_bytes, end - following), following)
            if len(block) >= LOG_OVERHEAD and _BASE_OFFSET.unpack_from(block)[0] <= from_offset:
                return self._scan(offset, timestamp, following, end, block=block)
        return self._scan(offset, timestamp, start, end, _first_read_bytes(start, following))

    def _whole_batches_from(
        self, found: _Found, start_offset: int, max_bytes: int, end: int, min_one_message: bool
    ) -> FetchedBatches:
        """The whole batches of at most ``max_bytes`` from the batch ``found``, up to ``end``."""
        position, size, last_offset, records_count, buf, buf_start = found
        if max_bytes >= size:
            fetch_bytes = min(end - position, max_bytes)
        elif min_one_message:
            fetch_bytes = size
        else:
            return FetchedBatches(b"", start_offset, 0)
        relative = position - buf_start
        if relative + fetch_bytes <= len(buf):
            # Read by the scan already; the whole block is the same object, not a copy.
            data = buf[relative : relative + fetch_bytes]
        else:
            data = self._pread(fetch_bytes, position)
        data_bytes = len(data)
        if data_bytes == size:
            return FetchedBatches(data, last_offset + 1, records_count)
        if data_bytes < size:  # the file shrank under the read
            return FetchedBatches(b"", start_offset, 0)
        whole_bytes, next_offset, records_count = _extend_run(
            data, size, last_offset + 1, records_count
        )
        if whole_bytes < data_bytes:
            data = data[:whole_bytes]
        return FetchedBatches(data, next_offset, records_count)

    def read_batches(self, position: int, size_bytes: int) -> bytes:
        """The raw bytes ``[position, position + size_bytes)`` of the ``.log``. Thread-safe."""
        return self._pread(size_bytes, position)

    def read_next_offset(self) -> int:
        """The offset after the last batch, or the base offset if empty ([B-55])."""
        found = self.translate_offset(self.offset_index.last_offset)
        if found is None:
            return self._base_offset
        last: BatchHeader | None = None
        for header in self._iter_headers(found.position, self._size):
            last = header
        return self._base_offset if last is None else last.next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampOffset | None:
        """The first record with timestamp ``>= timestamp`` and offset ``>= starting_offset``.

        [B-37]: the time index gives the offset to start from, the offset index its position;
        batches are scanned from there and the first whose max timestamp is ``>= timestamp`` is
        decoded (later batches follow if none of its records qualify). Returns the record's own
        (timestamp, offset), or None when no record of this segment qualifies. Thread-safe.
        """
        found = self._find_by_timestamp(timestamp, starting_offset, self._size, 0)
        return None if found is None else found[0]

    def fetch_by_timestamp(
        self,
        timestamp: int,
        starting_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> tuple[TimestampOffset, FetchedBatches] | None:
        """:meth:`find_offset_by_timestamp` and :meth:`fetch` at the record found, in one pass.

        The record is searched for only below ``max_position`` (default: the published size);
        the batch decoded to find it is the first batch of the fetch, so it is read once. None
        when no record of this segment qualifies. Thread-safe.

        Raises:
            ValueError: ``max_bytes`` is negative.
            CorruptRecordError, InvalidRecordError: a malformed or corrupt batch on the way.
        """
        if max_bytes < 0:
            raise ValueError(
                f"invalid max size {max_bytes} for a read from segment {self._log_path}"
            )
        end = self._size if max_position is None else min(max_position, self._size)
        found = self._find_by_timestamp(timestamp, starting_offset, end, max_bytes)
        if found is None:
            return None
        record, batch = found
        return record, self._whole_batches_from(
            batch, record.offset, max_bytes, end, min_one_message
        )

    def _find_by_timestamp(
        self, timestamp: int, starting_offset: int, end: int, max_bytes: int
    ) -> tuple[TimestampOffset, _Found] | None:
        """The first record with timestamp ``>= timestamp`` and offset ``>= starting_offset``
        below ``end``, and its batch (whose bytes the returned block holds); ``max_bytes``: what
        the caller reads from that batch on (see :meth:`_scan_indexed`)."""
        entry = self.time_index.lookup(timestamp)
        # Every batch ending at or below the entry's offset has a max timestamp at or below the
        # entry's (a running max): below the target, none of them qualifies. (No entry: the
        # sentinel (-1, base offset) says nothing.)
        if 0 <= entry.timestamp < timestamp:
            from_offset = max(entry.offset + 1, starting_offset)
        else:
            from_offset = max(entry.offset, starting_offset)
        found = self._scan_indexed(starting_offset, timestamp, from_offset, end, max_bytes)
        while True:
            if found is None:
                return None
            position, size, last_offset, records_count, buf, buf_start = found
            relative = position - buf_start
            if relative + size > len(buf):
                buf = self._pread(size, position)
                found = position, size, last_offset, records_count, buf, position
                relative = 0
            # The batch's own bytes, not copied: error positions are relative to the batch.
            batch = buf if relative == 0 and size == len(buf) else (
                memoryview(buf)[relative : relative + size]
            )
            try:
                offsets, timestamps = _record_offsets_and_timestamps(batch)
            except RecordError as exc:
                raise type(exc)(
                    f"segment {self._log_path}, batch at position {position}: {exc}"
                ) from exc
            index = _first_record_reaching(offsets, timestamps, timestamp, starting_offset)
            if index >= 0:
                return TimestampOffset(timestamps[index], offsets[index]), found
            found = self._scan(starting_offset, timestamp, position + size, end)

    def find_max_timestamp_record(self) -> TimestampOffset | None:
        """The first record holding this segment's max timestamp (ListOffsets -3, [B-36] table).

        Scans from the offset index entry of the max's batch for the first batch whose max
        timestamp equals it and returns its first record with that timestamp. None if the
        segment has no timestamps.
        """
        max_so_far = self.max_timestamp_and_offset_so_far
        if max_so_far.timestamp < 0:
            return None
        position = self.offset_index.lookup(max_so_far.offset).position
        for header in self._iter_headers(position, self._size):
            if header.max_timestamp != max_so_far.timestamp:
                continue
            batch = self._pread(header.length + LOG_OVERHEAD, header.position)
            for record in iter_records(batch):
                if record.timestamp == max_so_far.timestamp:
                    return TimestampOffset(record.timestamp, record.offset)
            return None
        return None

    def iter_batch_headers(self, start_position: int = 0) -> Iterator[BatchHeader]:
        """Headers of the whole batches from ``start_position`` to the published size."""
        return self._iter_headers(start_position, self._size)

    def _iter_headers(self, start: int, end: int) -> Iterator[BatchHeader]:
        """Yield the header of every whole batch in ``[start, end)`` of the ``.log``.

        Kafka's ``FileLogInputStream``: stops quietly at a partial tail (17 bytes or fewer left,
        or a batch extending past ``end``); a size field below 14, a batch shorter than its
        header or a magic other than 2 raises. Reads 4 KiB first, doubling per ``pread`` up to
        256 KiB; a file that shrinks under the scan (concurrent truncation) ends it early.
        """
        buf = b""
        buf_start = start
        buf_end = start
        block_bytes = _SCAN_FIRST_BLOCK_BYTES
        position = start
        limit = end - HEADER_SIZE_UP_TO_MAGIC
        unpack_length = _LENGTH.unpack_from
        unpack_header = _HEADER.unpack_from
        while position < limit:
            if position + RECORD_BATCH_OVERHEAD > buf_end:
                buf = self._pread(min(block_bytes, end - position), position)
                block_bytes = min(2 * block_bytes, _SCAN_MAX_BLOCK_BYTES)
                buf_start = position
                buf_end = position + len(buf)
                if len(buf) <= HEADER_SIZE_UP_TO_MAGIC:
                    return
            relative = position - buf_start
            (length,) = unpack_length(buf, relative + 8)
            if length < _MIN_SIZE_FIELD:
                raise CorruptRecordError(
                    f"found record size {length} at position {position} of segment "
                    f"{self._log_path}, smaller than the minimum record overhead "
                    f"({_MIN_SIZE_FIELD})"
                )
            if position > end - LOG_OVERHEAD - length:
                return
            magic = buf[relative + 16]
            if magic != MAGIC:
                raise InvalidRecordError(
                    f"batch at position {position} of segment {self._log_path} has magic "
                    f"{magic}; only magic {MAGIC} (RecordBatch v2) is supported"
                )
            if length + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD:
                raise CorruptRecordError(
                    f"batch at position {position} of segment {self._log_path} declares "
                    f"{length + LOG_OVERHEAD} bytes, less than the {RECORD_BATCH_OVERHEAD}-byte "
                    "batch header"
                )
            if relative + RECORD_BATCH_OVERHEAD > len(buf):
                return  # the file shrank under us
            yield BatchHeader(*unpack_header(buf, relative), position)
            position += length + LOG_OVERHEAD

    def _pread(self, size: int, position: int) -> bytes:
        fd = self._require_fd()
        try:
            return os.pread(fd, size, position)
        except OSError as exc:
            raise self._read_error(size, position, exc) from exc

    def _read_error(self, size: int, position: int, exc: OSError) -> StorageIOError:
        return StorageIOError(
            f"failed to read {size} bytes at position {position} of segment "
            f"{self._log_path}: {exc}"
        )

    # ---------------------------------------------------------------- recovery

    def sanity_check(self, time_index_file_newly_created: bool) -> None:
        """Kafka's load-time check ([B-45]): the offset index file must exist.

        A ``.timeindex`` that did not exist before this open is created empty (not rebuilt). The
        offset and time indexes themselves are not checked (that is recovery's job).

        Raises:
            CorruptIndexError: the ``.index`` file is missing: the segment must be recovered.
        """
        if not self.offset_index_path.exists():
            raise CorruptIndexError(
                f"offset index file {self.offset_index_path} does not exist"
            )
        if time_index_file_newly_created:
            self.time_index.resize(0)
        self.txn_index.sanity_check()

    def recover(self, max_message_bytes: int | None = None) -> int:
        """Rebuild both indexes from the ``.log`` and cut it at the first invalid byte.

        [B-46]/[B-47]: batches are read from position 0; each must be whole, at least 61 bytes
        with a matching CRC, and have offsets within 2^31 - 1 of the base offset. Index entries
        are rebuilt per batch (every batch more than ``index.interval.bytes`` after the previous
        entry). Everything from the first invalid batch to the end of the file is truncated.
        ``max_message_bytes``, when given, also treats a larger batch as invalid (Kafka before
        2.1 did; trunk has no such limit, which is the default here). The transaction index is
        cut to the recovered end; rebuilding it needs producer state (not yet implemented).

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
        max_so_far = TimestampOffset(NO_TIMESTAMP, self._base_offset)
        self._max_timestamp_and_offset = max_so_far
        fd = self._require_fd()
        try:
            file_size = os.fstat(fd).st_size
        except OSError as exc:
            raise StorageIOError(f"failed to stat segment {self._log_path}: {exc}") from exc
        valid_bytes = 0
        last_index_entry = 0
        base_offset = self._base_offset
        highest_offset = base_offset + INT32_MAX
        index_interval_bytes = self._index_interval_bytes
        max_timestamp = NO_TIMESTAMP
        offset_of_max_timestamp = base_offset
        # The per-batch work is kept to locals and plain tuples: with 1 KiB batches a 1 GiB
        # segment is a million iterations.
        for position, size, last_offset, batch_max_timestamp in self._iter_valid_batches(
            file_size, max_message_bytes
        ):
            if not base_offset <= last_offset <= highest_offset:
                raise OffsetOverflowError(
                    f"segment {self._log_path} (base offset {base_offset}) holds a batch "
                    f"with last offset {last_offset} at position {position}, beyond the "
                    f"{INT32_MAX} offsets one segment can index"
                )
            if batch_max_timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = batch_max_timestamp, last_offset
            if valid_bytes - last_index_entry > index_interval_bytes:
                offset_index.append(last_offset, valid_bytes)
                time_index.maybe_append(max_timestamp, offset_of_max_timestamp)
                last_index_entry = valid_bytes
            valid_bytes += size
        max_so_far = TimestampOffset(max_timestamp, offset_of_max_timestamp)
        truncated = file_size - valid_bytes
        if truncated > 0:
            log.warning(
                "truncating %d invalid bytes at position %d of segment %s during recovery",
                truncated, valid_bytes, self._log_path,
            )
        self._size = file_size
        # Cut even when nothing is invalid: it also frees blocks a crash left allocated past
        # the end of the file (space.py).
        self._truncate_log(valid_bytes, always=True)
        self._max_timestamp_and_offset = max_so_far
        self.txn_index.truncate_to(self.read_next_offset())
        offset_index.trim_to_valid_size()
        time_index.maybe_append(max_so_far.timestamp, max_so_far.offset, skip_full_check=True)
        time_index.trim_to_valid_size()
        self._rolling_based_timestamp = None
        return truncated

    def _iter_valid_batches(
        self, file_size: int, max_message_bytes: int | None
    ) -> Iterator[tuple[int, int, int, int]]:
        """Yield ``(position, size, last offset, max timestamp)`` of each valid batch from
        position 0; stop (quietly, with a warning) at the first invalid one.

        Reads ``_RECOVERY_BLOCK_BYTES`` per ``pread`` and checksums batches in place.
        """
        position = 0
        buf = b""
        view = memoryview(buf)
        buf_start = 0
        unpack_length = _LENGTH.unpack_from
        unpack_uint32 = _UINT32.unpack_from
        unpack_header = _HEADER.unpack_from
        crc_of = _crc32c

        def where() -> str:
            return f"position {position} of segment {self._log_path}"

        while position < file_size - HEADER_SIZE_UP_TO_MAGIC:
            relative = position - buf_start
            buf_length = len(buf)
            if relative + RECORD_BATCH_OVERHEAD > buf_length and buf_start + buf_length < file_size:
                buf = self._pread(min(_RECOVERY_BLOCK_BYTES, file_size - position), position)
                view = memoryview(buf)
                buf_start = position
                buf_length = len(buf)
                relative = 0
            if relative + HEADER_SIZE_UP_TO_MAGIC >= buf_length:
                return  # the file shrank under us
            (length,) = unpack_length(buf, relative + 8)
            size = length + LOG_OVERHEAD
            if length < _MIN_SIZE_FIELD:
                log.warning("found invalid size field %d at %s", length, where())
                return
            if position > file_size - size:
                log.warning("found a partial batch of %d bytes at %s", size, where())
                return
            magic = buf[relative + 16]
            if magic != MAGIC or size < RECORD_BATCH_OVERHEAD:
                if magic in (0, 1):
                    self._reject_legacy_batch(buf, relative, position, size)
                    return
                log.warning("found an invalid batch (magic %d, %d bytes) at %s", magic, size,
                            where())
                return
            if max_message_bytes is not None and size > max_message_bytes:
                log.warning("found a batch of %d bytes > %d at %s", size, max_message_bytes,
                            where())
                return
            if relative + size > buf_length:
                # At least the header fits: size >= 61 and the batch ends inside the file.
                buf = self._pread(min(_RECOVERY_BLOCK_BYTES, file_size - position), position)
                view = memoryview(buf)
                buf_start = position
                buf_length = len(buf)
                relative = 0
                if buf_length < RECORD_BATCH_OVERHEAD:
                    return  # the file shrank under us
            if relative + size <= buf_length:
                actual = crc_of(view[relative + _ATTRIBUTES_OFFSET : relative + size])
            else:
                actual = self._crc_of_range(position + _ATTRIBUTES_OFFSET, position + size)
            (stored,) = unpack_uint32(buf, relative + _CRC_OFFSET)
            if actual != stored:
                log.warning(
                    "found a batch of %d bytes failing its CRC (stored 0x%08x, computed 0x%08x) "
                    "at %s", size, stored, actual, where(),
                )
                return
            fields = unpack_header(buf, relative)
            # BatchHeader's order: base_offset 0, last_offset_delta 6, max_timestamp 8.
            yield position, size, fields[0] + fields[6], fields[8]
            position += size

    def _crc_of_range(self, start: int, end: int) -> int:
        crc = 0
        position = start
        while position < end:
            chunk = self._pread(min(_CRC_CHUNK_BYTES, end - position), position)
            if not chunk:
                break
            crc = crc32c(chunk, crc)
            position += len(chunk)
        return crc

    def _reject_legacy_batch(self, buf: bytes, relative: int, position: int, size: int) -> None:
        """A v0/v1 message: raise if its (zlib CRC-32) checksum holds, else it is corruption."""
        if relative + size <= len(buf):
            body = buf[relative + 16 : relative + size]
        else:
            body = self._pread(size - 16, position + 16)
        (stored,) = _UINT32.unpack_from(buf, relative + LOG_OVERHEAD)
        if zlib.crc32(body) == stored:
            raise InvalidRecordError(
                f"segment {self._log_path} holds a message in the legacy format v"
                f"{buf[relative + 16]} at position {position}; only RecordBatch v2 is supported"
            )
        log.warning("found a corrupt legacy-looking batch at position %d of %s", position,
                    self._log_path)

    def has_overflow(self) -> bool:
        """Whether the last batch's offset is too far from the base offset to be indexed."""
        next_offset = self.read_next_offset()
        return next_offset > self._base_offset and not self.offset_index.can_append_offset(
            next_offset - 1
        )

    # ---------------------------------------------------------------- durability and files

    def flush(self) -> None:
        """fsync the ``.log`` and both mapped indexes and the txn index ([B-67])."""
        fd = self._require_fd()
        try:
            os.fsync(fd)
        except OSError as exc:
            raise StorageIOError(f"failed to fsync segment {self._log_path}: {exc}") from exc
        self.offset_index.flush()
        self.time_index.flush()
        if self._txn_index is not None:  # never opened: nothing was appended to it
            self._txn_index.flush()

    def close(self, *, flush: bool = True) -> None:
        """Final time entry, trim and close the indexes, fsync and trim the ``.log`` ([B-68]).

        ``flush=False`` skips the fsync of the ``.log``, for a caller that knows it is durable
        already (the log closes segments below its recovery point so after flushing them: an
        fsync each would cost a clean shutdown of 10,000 segments seconds). Idempotent.
        """
        if self._fd is None:
            return
        try:
            if self._max_timestamp_and_offset is not None and self._time_index is not None:
                max_so_far = self._max_timestamp_and_offset
                try:
                    self._time_index.maybe_append(
                        max_so_far.timestamp, max_so_far.offset, skip_full_check=True
                    )
                except Exception:  # Kafka swallows it too: closing must go on
                    log.warning("could not append the final time index entry of %s",
                                self.time_index_path, exc_info=True)
            if self._offset_index is not None:
                self._offset_index.close()
            if self._time_index is not None:
                self._time_index.close()
            if self._txn_index is not None:
                self._txn_index.close()
            if flush:
                try:
                    os.fsync(self._fd)
                except OSError as exc:
                    raise StorageIOError(
                        f"failed to fsync segment {self._log_path} on close: {exc}"
                    ) from exc
            self._trim_log()
        finally:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)

    def close_handlers(self) -> None:
        """Close the files without writing anything (the disk may have failed)."""
        for index in (self._offset_index, self._time_index):
            if index is not None:
                try:
                    index._close_handler()
                except Exception:
                    log.warning("could not close %s", index.path, exc_info=True)
        if self._txn_index is not None:
            self._txn_index.close()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def delete(self) -> None:
        """Close the files and delete the four of them (missing ones are fine)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        try:
            self._log_path.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageIOError(f"failed to delete segment file {self._log_path}: {exc}") from exc
        for index, path in (
            (self._offset_index, self.offset_index_path),
            (self._time_index, self.time_index_path),
            (self._txn_index, self.txn_index_path),
        ):
            if index is not None:
                index.delete_if_exists()
            else:
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    raise StorageIOError(f"failed to delete segment file {path}: {exc}") from exc

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the segment's files from ``<name><old_suffix>`` to ``<name><new_suffix>``.

        Used to mark a segment ``.deleted`` before its asynchronous deletion. Index files that
        were never created are not an error ([B-18]). Open descriptors stay valid.
        """

        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix and not name.endswith(old_suffix):
                raise ValueError(f"{path} does not end with {old_suffix!r}")
            stem = name[: len(name) - len(old_suffix)] if old_suffix else name
            return path.with_name(stem + new_suffix)

        new_log_path = renamed(self._log_path)
        try:
            os.replace(self._log_path, new_log_path)
        except OSError as exc:
            raise StorageIOError(
                f"failed to rename segment file {self._log_path} to {new_log_path}: {exc}"
            ) from exc
        self._log_path = new_log_path
        with self._index_lock:
            for attr, path_property, path_attr in (
                ("_offset_index", "offset_index_path", "_offset_index_path"),
                ("_time_index", "time_index_path", "_time_index_path"),
                ("_txn_index", "txn_index_path", "_txn_index_path"),
            ):
                index = getattr(self, attr)
                old_path = getattr(self, path_property)
                new_path = renamed(old_path)
                if index is not None:
                    index.rename_to(new_path)
                else:
                    with contextlib.suppress(FileNotFoundError):  # never created ([B-18])
                        os.replace(old_path, new_path)
                setattr(self, path_attr, new_path)
            kept = self._file_suffix[: len(self._file_suffix) - len(old_suffix)]
            self._file_suffix = kept + new_suffix

    def _require_fd(self) -> int:
        fd = self._fd
        if fd is None:
            raise LogClosedError(f"segment {self._log_path} is closed")
        return fd

    def __repr__(self) -> str:
        return (
            f"Segment(base_offset={self._base_offset}, size_bytes={self._size}, "
            f"path={str(self._log_path)!r})"
        )


# Linux's IOV_MAX: the most buffers one pwritev takes.
_IOV_MAX = 1024


def _pwrite_all(fd: int, views: list[memoryview], position: int) -> int:
    """Write ``views`` back to back at ``position``; returns the bytes written (all of them).

    Gathered writes (``pwritev``, at most ``_IOV_MAX`` buffers each), continued after a short
    write where it stopped; one joined ``pwrite`` where the platform has no ``pwritev``.
    ``views`` is consumed. Raises OSError (a write returning 0 included).
    """
    if not hasattr(os, "pwritev"):
        views = [memoryview(b"".join(views))]
    written = 0
    index = 0
    while index < len(views):
        if index == len(views) - 1:
            count = os.pwrite(fd, views[index], position + written)
        else:
            count = os.pwritev(fd, views[index : index + _IOV_MAX], position + written)
        if count <= 0:
            raise OSError(f"write returned {count}")
        written += count
        # Step over the buffers written whole; keep the rest of a partly written one.
        while index < len(views) and count >= len(views[index]):
            count -= len(views[index])
            index += 1
        if count:
            views[index] = views[index][count:]
    return written
