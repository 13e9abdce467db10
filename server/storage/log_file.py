"""The ``.log`` file of a segment: record batches back to back, and the one way to read them.

This is Kafka's ``FileRecords`` with ``FileLogInputStream``. A :class:`LogFile` owns the file:
its descriptor, its path, and its *published size*, the end of the last whole batch written,
where every read stops. Appends are gathered ``pwrite`` calls at the published end, which moves
only once the bytes are written; reads are ``pread`` calls. No file position is shared, so reads
need no lock.

Every reader of batch headers goes through one walker, :meth:`LogFile.walk`. It reads the file
in blocks; within a block, the batches are walked by the records package's block walks
(:func:`~stratalog.records.batch_walk.find_in_block`,
:func:`~stratalog.records.batch_walk.collect_in_block`: one header unpack per batch, the same
framing and tail rules as every other walk of batches), stopping at the first batch that meets
its stop condition::

    stop at the first batch whose last offset >= o   and   max timestamp >= t

(``ANY_OFFSET``, ``ANY_TIMESTAMP``: the first batch). Given a list, it collects every batch of
one block instead (the header tuples it unpacked, nothing built per batch) and says where to go
on. The callers' questions are walks: a read by offset or time, a segment's first batch, its
last (:meth:`LogFile.last_batch`), every batch (:meth:`LogFile.batches`,
:meth:`LogFile.headers`), the whole batches of a fetched range, and recovery
(:meth:`LogFile.valid_batches`).

Framing rules, the same in every walk (:func:`~stratalog.records.batch.check_framing`, Kafka's
``FileLogInputStream.nextBatch``): 17 bytes or fewer left is the end; a size field below 14 is
corrupt; a batch running past the end is a partial tail (a write in progress, a torn end, or a
file that shrank under the walk: a short read makes the end where the read stopped), which ends
the walk quietly; a magic other than 2 is invalid; a v2 batch below 61 bytes is corrupt. What a
walk does with a malformed header depends on its *mode*:

    STRICT     raise CorruptRecordError / InvalidRecordError naming the file and position (reads)
    LENIENT    stop before it, quietly (the rest of a fetch: the next read at its offset raises)
    RECOVERY   also check each batch's CRC-32C and max.message.bytes; stop at the first batch
               failing a rule with a warning, except a legacy v0/v1 message whose own CRC holds,
               which raises InvalidRecordError (data in a format stratalog cannot read is not
               corruption to cut away)

Blocks: a walk first reads ``read_bytes`` (4 KiB unless the caller knows better), then, per
refill, the size of the batch it just stepped over (batches of one producer are alike, so the
one wanted then arrives whole with its header) or its current block size, doubling per refill
up to 256 KiB for long walks; a collecting walk reads one block per call, growing as its caller
asks. Recovery reads 1 MiB blocks and checksums batches in place (a batch larger than a block
in 8 MiB pieces, never read whole).

Crash behaviour: an append is all or nothing (a failed or short write is cut back). A crash
can leave a torn last batch or a preallocated tail of zeros; walks end quietly there and
recovery cuts it off.

Concurrency: one writer (the segment's owner serialises append, truncate, trim, rename,
close). Walks and reads may run in other threads meanwhile: they stop at the size published
when they started, so they never see a half-written batch. They must not overlap
:meth:`LogFile.close` or :meth:`LogFile.delete`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from operator import itemgetter
from pathlib import Path

from crc32c import crc32c as _crc32c  # the C function: recovery's hot loop skips our wrapper

from stratalog.records.batch import (
    ATTRIBUTES_OFFSET,
    HEADER,
    LOG_OVERHEAD,
    SCAN_FIELD_NAMES,
    BatchHeader,
    check_framing,
    is_intact_legacy_message,
)
from stratalog.records.batch_walk import (
    READ_ON,
    STOP,
    FoundBatch,
    ScannedBatch,
    at_tail,
    collect_in_block,
    find_in_block,
)
from stratalog.records.crc import crc32c
from stratalog.records.errors import CorruptRecordError, InvalidRecordError, RecordError

from . import space
from .errors import LogClosedError, StorageIOError
from .file_region import FileRegion, open_region
from .index import INT32_MAX

__all__ = [
    "ANY_OFFSET",
    "ANY_TIMESTAMP",
    "FIRST_BLOCK_BYTES",
    "LENIENT",
    "MAX_BLOCK_BYTES",
    "RECOVERY",
    "RECOVERY_BLOCK_BYTES",
    "STRICT",
    "FoundBatch",
    "LogFile",
    "ScannedBatch",
    "Walked",
    "summarize",
]

log = logging.getLogger(__name__)

# Below every int64: a walk with these stops at the first batch whatever its offsets and
# timestamps.
ANY_OFFSET = -(2**63) - 1
ANY_TIMESTAMP = -(2**63) - 1

# A read walk's first block (an index lookup usually lands on or just before the batch wanted)
# and the most a refill takes.
FIRST_BLOCK_BYTES = 4 * 1024
MAX_BLOCK_BYTES = 256 * 1024
# Recovery reads the log in blocks of this size and checksums batches in place.
RECOVERY_BLOCK_BYTES = 1024 * 1024
# A batch larger than a recovery block is checksummed in pieces of this size, not read whole.
CRC_CHUNK_BYTES = 8 * 1024 * 1024

# What a walk does with a malformed header (see the module docstring).
STRICT = 0
LENIENT = 1
RECOVERY = 2

# A batch a walk found is a FoundBatch (stratalog.records.batch_walk): (position, size_bytes,
# last_offset, records_count, max_timestamp, block, block_start); ``block`` is the bytes the
# walk had read last, from position ``block_start`` of the file; it holds the batch's header.
# A batch a walk collected is a ScannedBatch (stratalog.records.batch_walk): its header fields
# as SCAN_FIELDS unpacks them.
# What a collecting walk returns: (where to go on from, None when the walk is over; the block
# walked; its position in the file).
Walked = tuple[int | None, bytes, int]

# Linux's IOV_MAX: the most buffers one pwritev takes.
_IOV_MAX = 1024


class LogFile:
    """One segment's ``.log``: the descriptor, the path and the published size (the attribute
    ``size_bytes``, read by anyone, changed by this class's methods only).

    Invariants: ``size_bytes`` is the end of the last whole batch written through this object
    (for a file opened from disk, its length until recovery says otherwise); the file may be
    longer (a preallocated tail, blocks being written), never read past ``size_bytes``.

    ``truncations`` counts the cuts of the file (:meth:`truncate_to`, :meth:`cut_at`), each
    made under ``truncation_lock``: a :class:`~stratalog.server.storage.file_region.FileRegion`
    being sent checks it under the same lock, so that no byte of a region is sent once the
    bytes at its positions may have been rewritten.
    """

    __slots__ = ("_allocate_appends", "_fd", "_name", "_path", "size_bytes", "truncation_lock",
                 "truncations")

    def __init__(self, name: str, fd: int, size_bytes: int, *, allocate_appends: bool) -> None:
        """Use :meth:`open`; this takes an opened descriptor and the file's path as a string."""
        self._name = name
        self._path: Path | None = None  # built on first use: most segments never need it
        self._fd: int | None = fd
        # The published size: bytes of whole batches, where reads stop. An attribute, not a
        # property, for the read path; only this class's methods change it.
        self.size_bytes = size_bytes
        # Large appends allocate their blocks first (space.py), until the file system says it
        # cannot (or the file was sized in advance: preallocate).
        self._allocate_appends = allocate_appends
        self.truncations = 0
        self.truncation_lock = threading.Lock()

    @classmethod
    def open(
        cls,
        name: str,
        create: bool = False,
        preallocate_bytes: int = 0,
        allocate_appends: bool = True,
    ) -> LogFile:
        """Open the ``.log`` at path ``name``, or create it (``create``; it must not exist).

        A created file is preallocated to ``preallocate_bytes`` when that is positive (Kafka's
        ``FileRecords.open`` with ``preallocate``); its size is 0 all the same.
        ``allocate_appends``: allocate the blocks of a large append before writing it (not for
        a file sized in advance).

        Raises:
            StorageIOError: the file is missing (or present, when creating), cannot be opened,
                or is longer than a segment can be (2^31 - 1 bytes).
            InsufficientSpaceError: the file system has fewer than ``preallocate_bytes`` free
                (nothing was created).
        """
        if create and preallocate_bytes > 0:
            space.check_free_space(
                os.path.dirname(name) or ".", preallocate_bytes, "a new segment"
            )
        try:
            if create:
                # O_EXCL: the log deletes stale files before it creates a segment (Kafka
                # LocalLog.roll; docs/kafka-behaviours.md#roll); an existing file here would be
                # someone's data, never to be overwritten silently.
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                size = 0
                if preallocate_bytes > 0:
                    try:
                        os.posix_fallocate(fd, 0, preallocate_bytes)
                    except OSError:
                        # Not every file system allocates; a sparse length does as well.
                        os.ftruncate(fd, preallocate_bytes)
            else:
                fd = os.open(name, os.O_RDWR)
                size = os.fstat(fd).st_size
        except OSError as exc:
            action = "create" if create else "open"
            raise StorageIOError(f"failed to {action} segment file {name}: {exc}") from exc
        if size > INT32_MAX:
            os.close(fd)
            raise StorageIOError(
                f"segment file {name} is {size} bytes; a segment holds at most {INT32_MAX}"
            )
        return cls(name, fd, size, allocate_appends=allocate_appends)

    # ---------------------------------------------------------------- properties

    @property
    def path(self) -> Path:
        path = self._path
        if path is None:
            path = self._path = Path(self._name)
        return path

    @property
    def is_closed(self) -> bool:
        return self._fd is None

    def file_size(self) -> int:
        """The file's length on disk (``fstat``), which may exceed the published size."""
        fd = self._require_fd()
        try:
            return os.fstat(fd).st_size
        except OSError as exc:
            raise StorageIOError(f"failed to stat segment file {self._name}: {exc}") from exc

    # ---------------------------------------------------------------- reads and writes

    def read(self, size_bytes: int, position: int) -> bytes:
        """Up to ``size_bytes`` bytes at ``position`` (fewer at the end of the file).

        Raises:
            StorageIOError: the read failed. LogClosedError: the file is closed.
        """
        fd = self._require_fd()
        try:
            return os.pread(fd, size_bytes, position)
        except OSError as exc:
            raise self._read_error(size_bytes, position, exc) from exc

    def open_region(self, position: int, size_bytes: int, truncations: int) -> FileRegion | None:
        """``size_bytes`` at ``position`` as a region with a descriptor of its own, for a read
        that began when the file had been truncated ``truncations`` times (file_region.py);
        None when the process has as many regions open as it may, or no descriptor left.

        Raises:
            LogClosedError: the file is closed.
        """
        return open_region(self, self._require_fd(), truncations, position, size_bytes)

    def append(self, pieces: Sequence[bytes | bytearray | memoryview], size_bytes: int) -> int:
        """Write ``pieces`` (``size_bytes`` in all) back to back at the published end, then
        publish the new end. Returns the position written at.

        All or nothing: on a failed or short write the file is cut back to where it was and
        the published size does not move.

        Raises:
            StorageIOError: the write failed (the file is unchanged).
        """
        fd = self._require_fd()
        position = self.size_bytes
        views = [memoryview(piece) for piece in pieces]
        if self._allocate_appends and size_bytes >= space.ALLOCATE_MIN_BYTES:
            self._allocate_appends = space.allocate(fd, position, size_bytes)
        try:
            _pwrite_all(fd, views, position)
        except OSError as exc:
            try:
                os.ftruncate(fd, position)
            except OSError:
                log.exception("could not cut %s back to %d bytes", self._name, position)
            raise StorageIOError(
                f"failed to append {size_bytes} bytes at position {position} of segment "
                f"{self._name} (cut back to {position}): {exc}"
            ) from exc
        # Published only now: readers stop at this size, so they never see a partial batch.
        self.size_bytes = position + size_bytes
        return position

    def truncate_to(self, size_bytes: int) -> int:
        """Cut the file to ``size_bytes`` (at most the published size); returns the bytes
        removed. The smaller size is published first, so no read starts past it.

        Raises:
            ValueError: ``size_bytes`` is negative or above the published size.
            StorageIOError: the file could not be truncated.
        """
        original = self.size_bytes
        if not 0 <= size_bytes <= original:
            raise ValueError(
                f"cannot truncate segment {self._name} of {original} bytes to {size_bytes}"
            )
        fd = self._require_fd()
        with self.truncation_lock:
            self.truncations += 1
        self.size_bytes = size_bytes
        try:
            if os.fstat(fd).st_size > size_bytes:
                os.ftruncate(fd, size_bytes)
        except OSError as exc:
            raise StorageIOError(
                f"failed to truncate segment {self._name} to {size_bytes} bytes: {exc}"
            ) from exc
        return original - size_bytes

    def cut_at(self, size_bytes: int) -> None:
        """Publish ``size_bytes`` and cut the file there, even if it is that long already: a
        cut also frees blocks allocated past the end (space.py). Recovery's last step.

        Raises:
            StorageIOError: the file could not be truncated.
        """
        fd = self._require_fd()
        with self.truncation_lock:
            self.truncations += 1
        self.size_bytes = size_bytes
        try:
            os.ftruncate(fd, size_bytes)
        except OSError as exc:
            raise StorageIOError(
                f"failed to truncate segment {self._name} to {size_bytes} bytes: {exc}"
            ) from exc

    def trim(self) -> None:
        """Cut a preallocated file down to the published size."""
        fd = self._require_fd()
        try:
            if os.fstat(fd).st_size > self.size_bytes:
                os.ftruncate(fd, self.size_bytes)
        except OSError as exc:
            raise StorageIOError(
                f"failed to trim segment {self._name} to {self.size_bytes} bytes: {exc}"
            ) from exc

    def flush(self) -> None:
        """fsync the file."""
        fd = self._require_fd()
        try:
            os.fsync(fd)
        except OSError as exc:
            raise StorageIOError(f"failed to fsync segment {self._name}: {exc}") from exc

    def close(self, *, flush: bool = True) -> None:
        """fsync (unless ``flush=False``), trim and close the file (Kafka LogSegment.close;
        docs/kafka-behaviours.md#flush). Idempotent; the descriptor is closed even when the fsync or
        the trim fails."""
        if self._fd is None:
            return
        try:
            if flush:
                self.flush()
            self.trim()
        finally:
            self.close_handler()

    def close_handler(self) -> None:
        """Close the descriptor without writing anything (the disk may have failed)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def reopen(self) -> None:
        """Open the file again after :meth:`close_handler` (its segment's files were closed to
        save descriptors); the published size is kept. A no-op while open.

        Raises:
            StorageIOError: the file cannot be opened (gone, or no descriptor left: EMFILE).
        """
        if self._fd is not None:
            return
        try:
            self._fd = os.open(self._name, os.O_RDWR)
        except OSError as exc:
            raise StorageIOError(f"failed to reopen segment file {self._name}: {exc}") from exc

    def delete(self) -> None:
        """Close the file and delete it (a missing file is fine)."""
        self.close_handler()
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageIOError(f"failed to delete segment file {self._name}: {exc}") from exc

    def rename_to(self, path: Path) -> None:
        """Rename the file to ``path``; the open descriptor stays valid.

        Raises:
            StorageIOError: the rename failed (the file keeps its name).
        """
        try:
            os.replace(self._name, path)
        except OSError as exc:
            raise StorageIOError(
                f"failed to rename segment file {self._name} to {path}: {exc}"
            ) from exc
        self._name = str(path)
        self._path = path

    # ---------------------------------------------------------------- walks

    def walk(
        self,
        start: int,
        end: int,
        offset: int = ANY_OFFSET,
        timestamp: int = ANY_TIMESTAMP,
        block: bytes = b"",
        block_start: int = 0,
        read_bytes: int = FIRST_BLOCK_BYTES,
        into: list[ScannedBatch] | None = None,
        mode: int = STRICT,
        max_message_bytes: int = INT32_MAX,
    ) -> FoundBatch | Walked | None:
        """Walk the batches of ``[start, end)`` (``start`` a batch boundary).

        Find (no ``into``): returns the first batch whose last offset is ``>= offset`` and max
        timestamp ``>= timestamp`` as a :data:`FoundBatch` (the block holding its header
        included, so a caller whose bytes are in it needs no second read), or None when no
        batch before ``end`` qualifies. Reads block after block as needed.

        Collect (a list ``into``): appends every batch of one block, from ``start`` on, to
        ``into`` as its :data:`ScannedBatch` (the batches are consecutive: their positions
        follow from their sizes), and returns :data:`Walked`: where to go on from (the first
        batch not in the block; in RECOVERY, not whole in it), or None when the walk is over,
        and the block. ``offset`` and ``timestamp`` are not used.

        ``block``, if given, holds bytes already read from position ``block_start``
        (``<= start``), and ends by ``end``; otherwise the first read takes ``read_bytes``.
        ``mode``: STRICT, LENIENT or RECOVERY (module docstring); RECOVERY collects, and
        ``max_message_bytes`` is its batch size limit.

        O(batches walked) header unpacks and O(bytes walked / block size) reads. Thread-safe
        against appends (``end`` must not exceed the published size the caller read).

        Raises:
            CorruptRecordError, InvalidRecordError: a malformed header (STRICT), a legacy
                message (RECOVERY).
            StorageIOError: a read failed. LogClosedError: the file is closed.
        """
        # A loop over blocks (the reads, and what a mode does with a malformed header) around
        # the walk of the batches whose header lies in a block, which is the records package's
        # (one walker, one set of rules: stratalog.records.batch_walk). A find walks a few
        # batches and reads one or two blocks; a collecting walk (the rest of a 1 MiB fetch,
        # recovery: a million batches per GiB of 1 KiB batches) takes thousands of batches a
        # block, appending the tuples it unpacked.
        fd = self._fd
        if fd is None:
            raise LogClosedError(f"segment {self._name} is closed")
        buf = block
        buf_start = block_start  # (without a block, the first read sets it)
        block_bytes = FIRST_BLOCK_BYTES
        size = 0
        position = start
        check = None
        if into is not None and mode == RECOVERY:
            def check(relative: int, size_bytes: int, crc: int) -> bool:
                # The block's batch at ``relative``: its size limit, and its CRC in pieces when
                # it is larger than the block (``buf`` is the block being walked).
                return self._valid(
                    buf, relative, buf_start + relative, size_bytes, crc, max_message_bytes
                )
        while True:
            if buf:
                if into is None:
                    step = find_in_block(buf, buf_start, position, end, offset, timestamp, size)
                    if len(step) != 3:
                        return step  # type: ignore[return-value]  # a FoundBatch
                    how, position, size = step  # type: ignore[misc]
                else:
                    how, position, _ = collect_in_block(
                        buf, buf_start, position, end, into, check, max_message_bytes
                    )
                    if how == READ_ON:
                        return position, buf, buf_start  # the block is walked
                if how == STOP:
                    self._stop(buf, buf_start, position, end, mode)
                if how != READ_ON:
                    break
                # A batch larger than a block would not help the guess: its header is enough.
                read_bytes = size if block_bytes < size <= MAX_BLOCK_BYTES else block_bytes
            elif at_tail(position, end):
                break  # 17 bytes or fewer: nothing to walk
            if read_bytes > end - position:
                read_bytes = end - position
            try:
                buf = os.pread(fd, read_bytes, position)
            except OSError as exc:
                raise self._read_error(read_bytes, position, exc) from exc
            if block_bytes < MAX_BLOCK_BYTES:
                block_bytes *= 2
            buf_start = position
            if len(buf) < read_bytes:
                # The file shrank under the walk (a truncation): it ends where the read did.
                end = position + len(buf)
        return None if into is None else (None, buf, buf_start)

    def batches(self, start: int, end: int) -> Iterator[FoundBatch]:
        """Every whole batch in ``[start, end)`` (STRICT), as :data:`FoundBatch` tuples."""
        position = start
        read_bytes = FIRST_BLOCK_BYTES
        while True:
            scanned: list[ScannedBatch] = []
            next_position, block, block_start = self.walk(  # type: ignore[misc]
                position, end, read_bytes=read_bytes, into=scanned
            )
            for base_offset, length, _, _, last_offset_delta, max_timestamp, count in scanned:
                size = length + LOG_OVERHEAD
                last_offset = base_offset + last_offset_delta
                yield position, size, last_offset, count, max_timestamp, block, block_start
                position += size
            if next_position is None:
                return
            read_bytes = min(2 * read_bytes, MAX_BLOCK_BYTES)

    def headers(self, start: int, end: int) -> Iterator[BatchHeader]:
        """The header of every whole batch in ``[start, end)`` (STRICT)."""
        for position, _, _, _, _, block, block_start in self.batches(start, end):
            yield BatchHeader(*HEADER.unpack_from(block, position - block_start), position)

    def last_batch(self, start: int, end: int) -> FoundBatch | None:
        """The last whole batch in ``[start, end)`` (STRICT), or None."""
        last = None
        for last in self.batches(start, end):  # noqa: B007 (the last one is the answer)
            pass
        return last

    def valid_batches(
        self, end: int, max_message_bytes: int | None = None
    ) -> Iterator[list[ScannedBatch]]:
        """Recovery's walk from position 0: per block read, the valid batches in it (their
        positions follow from their sizes), up to the first invalid batch (RECOVERY: logged,
        not raised).

        Raises:
            InvalidRecordError: a legacy v0/v1 message whose CRC holds.
            StorageIOError: a read failed.
        """
        limit = INT32_MAX if max_message_bytes is None else max_message_bytes
        position: int | None = 0
        while position is not None:
            scanned: list[ScannedBatch] = []
            position, _, _ = self.walk(  # type: ignore[misc]
                position, end, read_bytes=RECOVERY_BLOCK_BYTES, into=scanned, mode=RECOVERY,
                max_message_bytes=limit,
            )
            if scanned:
                yield scanned

    def _stop(self, buf: bytes, buf_start: int, position: int, end: int, mode: int) -> None:
        """The batch at ``position`` breaks a framing rule or runs past ``end``: raise (STRICT),
        return (a partial tail; LENIENT), or warn and return (RECOVERY), which raises for an
        intact legacy message only."""
        try:
            whole = check_framing(buf, position, end, buf_start, self._name)
        except InvalidRecordError as exc:
            if mode == RECOVERY:
                self._reject_legacy(buf, buf_start, position, exc)
            elif mode == STRICT:
                raise
            return
        except CorruptRecordError as exc:
            if mode == RECOVERY:
                log.warning("recovery stops: %s", exc)
            elif mode == STRICT:
                raise
            return
        assert not whole, f"a whole batch at position {position} of {self._name} reached _stop"
        if mode == RECOVERY:
            log.warning("recovery stops at a partial batch at position %d of segment %s",
                        position, self._name)

    def _valid(
        self,
        buf: bytes,
        relative: int,
        position: int,
        size: int,
        stored_crc: int,
        max_message_bytes: int,
    ) -> bool:
        """RECOVERY's checks of the well-framed batch at ``position`` (``relative`` in ``buf``,
        whole in it unless larger than a block): its size limit and its CRC, computed in place
        (in pieces, for a batch larger than the block). A batch failing one is logged."""
        if size > max_message_bytes:
            log.warning(
                "recovery stops at a batch of %d bytes at position %d of segment %s, larger "
                "than max.message.bytes (%d)", size, position, self._name, max_message_bytes,
            )
            return False
        if relative + size <= len(buf):
            with memoryview(buf) as view:
                actual = _crc32c(view[relative + ATTRIBUTES_OFFSET : relative + size])
        else:  # larger than a block: in pieces, never read whole
            actual = self._crc_of_range(position + ATTRIBUTES_OFFSET, position + size)
        if actual != stored_crc:
            log.warning(
                "recovery stops at a batch of %d bytes at position %d of segment %s failing "
                "its CRC (stored 0x%08x, computed 0x%08x)", size, position, self._name,
                stored_crc, actual,
            )
            return False
        return True

    def _crc_of_range(self, start: int, end: int) -> int:
        crc = 0
        position = start
        while position < end:
            chunk = self.read(min(CRC_CHUNK_BYTES, end - position), position)
            if not chunk:
                break
            crc = crc32c(chunk, crc)
            position += len(chunk)
        return crc

    def _reject_legacy(
        self, buf: bytes, buf_start: int, position: int, exc: RecordError
    ) -> None:
        """RECOVERY at a batch of magic other than 2: a v0/v1 message whose checksum holds
        raises; anything else is corruption, cut away after a warning."""
        relative = position - buf_start
        length = int.from_bytes(buf[relative + 8 : relative + LOG_OVERHEAD], "big", signed=True)
        size = length + LOG_OVERHEAD
        if relative + size <= len(buf):
            message = buf[relative : relative + size]
        else:
            message = self.read(size, position)
        if is_intact_legacy_message(message):
            raise InvalidRecordError(
                f"segment {self._name} holds a message in the legacy format "
                f"v{message[16]} at position {position}; only RecordBatch v2 is supported"
            )
        log.warning("recovery stops: %s", exc)

    def _require_fd(self) -> int:
        fd = self._fd
        if fd is None:
            raise LogClosedError(f"segment {self._name} is closed")
        return fd

    def _read_error(self, size_bytes: int, position: int, exc: OSError) -> StorageIOError:
        return StorageIOError(
            f"failed to read {size_bytes} bytes at position {position} of segment "
            f"{self._name}: {exc}"
        )

    def __repr__(self) -> str:
        return f"LogFile({self._name!r}, size_bytes={self.size_bytes})"


_LENGTH = SCAN_FIELD_NAMES.index("length")
_RECORDS_COUNT = SCAN_FIELD_NAMES.index("records_count")


def summarize(scanned: list[ScannedBatch]) -> tuple[int, int, int]:
    """(bytes, next offset, records) of consecutive batches a walk collected (not empty): their
    total size, the last one's last offset + 1 and the sum of their records counts."""
    base_offset, _, _, _, last_offset_delta, _, _ = scanned[-1]
    size_bytes = sum(map(itemgetter(_LENGTH), scanned)) + LOG_OVERHEAD * len(scanned)
    records_count = sum(map(itemgetter(_RECORDS_COUNT), scanned))
    return size_bytes, base_offset + last_offset_delta + 1, records_count


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
