"""The transaction index (``.txnindex``): the aborted transactions whose ABORT marker is in a segment.

A read_committed consumer must drop the records of aborted transactions. For each fetch the log
collects, from the segment read and the ones after it, every aborted transaction that overlaps
the fetched offsets and sends their ``(producer_id, first_offset)`` with the data; the consumer
skips those producers' records from ``first_offset`` up to the marker. A transaction may start
in an earlier segment, so ``first_offset`` may be below the segment's base offset; its entry
lives in the segment of its ABORT marker (``last_offset``). ``last_stable_offset`` (the LSO when
the marker was written) lets a search stop early: once an entry's LSO reaches the upper bound of
the fetch, no later segment can hold a transaction that overlaps it.

Byte layout: entries of 34 bytes, big-endian, no header, no checksum, not preallocated; the file
exists only once a first entry is appended (Kafka's ``TransactionIndex`` and ``AbortedTxn``)::

    offset size field
         0    2 version             int16, 0 (Kafka reads only byte 0 and rejects > 0)
         2    8 producer_id         int64
        10    8 first_offset        int64, first offset of the aborted transaction
        18    8 last_offset         int64, offset of the ABORT marker
        26    8 last_stable_offset  int64

    AbortedTxn(983493, 137, 299, 200) ->
        0000 00000000000f01c5 0000000000000089 000000000000012b 00000000000000c8

Entries are appended in strictly increasing ``last_offset`` order. Trailing bytes that do not
make a whole entry are ignored when reading. The layout and the version rule are defined once, in
:mod:`stratalog.records.txn_index_file`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from stratalog.records.errors import CorruptIndexEntryError
from stratalog.records.txn_index_file import (
    TXN_INDEX_ENTRY,
    TXN_INDEX_VERSION,
    pack_txn_index_entry,
    unpack_txn_index_entry,
)

from .errors import CorruptIndexError, InvalidOffsetError, StorageIOError

__all__ = ["ABORTED_TXN_SIZE_BYTES", "AbortedTxn", "TransactionIndex", "TxnIndexSearchResult"]

log = logging.getLogger(__name__)

ABORTED_TXN_SIZE_BYTES = TXN_INDEX_ENTRY.size  # 34
# Entries read per pread while scanning (a bound on the memory a scan holds).
_READ_CHUNK_ENTRIES = 4096


class AbortedTxn(NamedTuple):
    """One aborted transaction: its producer, its offset range and the LSO at its abort."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        """The 34-byte entry (version 0).

        Raises:
            ValueError: a field does not fit an int64.
        """
        return pack_txn_index_entry(*self)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, path: Path | str = "") -> AbortedTxn:
        """Parse one 34-byte entry.

        Raises:
            CorruptIndexError: fewer than 34 bytes, or a version above 0 (Kafka checks byte 0 as
                a signed byte, so this does too).
        """
        if len(data) < ABORTED_TXN_SIZE_BYTES:
            raise CorruptIndexError(
                f"aborted transaction entry of {len(data)} bytes in {path or '<buffer>'}, "
                f"need {ABORTED_TXN_SIZE_BYTES}"
            )
        return _parse_entry(memoryview(data), 0, path)


class TxnIndexSearchResult(NamedTuple):
    """What :meth:`TransactionIndex.collect_aborted_txns` found, and whether the search is done.

    ``is_complete`` is True when an entry's LSO reached the upper bound: later segments need not
    be searched.
    """

    aborted_txns: list[AbortedTxn]
    is_complete: bool


def _parse_entry(
    buffer: memoryview, start: int, path: Path | str, file_position: int | None = None
) -> AbortedTxn:
    """Parse the entry at ``start`` of ``buffer``; ``file_position`` (default ``start``) is where
    it lies in the file, for the error message."""
    try:
        _, producer_id, first_offset, last_offset, lso = unpack_txn_index_entry(buffer, start)
    except CorruptIndexEntryError as exc:
        where = start if file_position is None else file_position
        raise CorruptIndexError(
            f"{exc} at byte {where} of transaction index {path}, current version is "
            f"{TXN_INDEX_VERSION}"
        ) from exc
    return AbortedTxn(producer_id, first_offset, last_offset, lso)


class TransactionIndex:
    """The ``.txnindex`` file of one segment: :class:`AbortedTxn` entries, no preallocation.

    Holds the path, the segment's ``base_offset``, a file descriptor (opened when the file exists
    or on the first append), the end of the whole entries written (``_end_bytes``) and the last
    entry's ``last_offset`` (None when empty). The file is the source of truth: reads go to it.

    Invariants: entries have strictly increasing ``last_offset``; every ``last_offset`` is at
    least ``base_offset`` (checked by :meth:`sanity_check`, not on append).

    Crash behaviour: appends are plain writes, durable after :meth:`flush` (fsync). A crash may
    leave a partial last entry; reads ignore it and the next append cuts it off first, so entries
    stay aligned. Recovery rebuilds the file from the ``.log`` (:meth:`reset`, then appends).
    Differences from Kafka, both deliberate: a reopened index knows its last ``last_offset`` (Kafka
    forgets it and would accept a non-increasing append after reopening), and a partial tail is
    cut before an append (Kafka would append after it, misaligning every later entry).

    Concurrency: single writer (PartitionLog serialises append, truncation, reset, rename,
    delete and close). :meth:`collect_aborted_txns` and :meth:`all_aborted_txns` may run
    concurrently from reader threads: they read the entry count once, and an append writes the
    bytes before it counts them.
    """

    def __init__(self, path: Path | str, base_offset: int) -> None:
        """Open the index at ``path`` if the file exists; otherwise create nothing yet."""
        self._path = Path(path)
        self._base_offset = base_offset
        self._lock = threading.Lock()  # guards _fd against a concurrent close
        self._fd: int | None = None
        self._end_bytes = 0
        self._last_offset: int | None = None
        if self._path.exists():
            self._open()
            try:
                self._last_offset = self._read_last_offset()
            except CorruptIndexError:
                # Opening must not fail on a bad entry (Kafka's constructor reads nothing):
                # sanity_check() reports it, and the segment's recovery rebuilds the index.
                log.warning("transaction index %s has a corrupt last entry", self._path)

    # ---------------------------------------------------------------------------- properties

    @property
    def path(self) -> Path:
        """The file that backs this index (changes on :meth:`rename_to`)."""
        return self._path

    @property
    def base_offset(self) -> int:
        """The base offset of the segment this index belongs to."""
        return self._base_offset

    @property
    def last_offset(self) -> int | None:
        """The ``last_offset`` of the last entry, or None if there is none."""
        return self._last_offset

    @property
    def entries(self) -> int:
        """Whole entries in the file."""
        return self._end_bytes // ABORTED_TXN_SIZE_BYTES

    @property
    def is_empty(self) -> bool:
        """True iff the index holds no whole entry (or its file does not exist)."""
        return self._end_bytes < ABORTED_TXN_SIZE_BYTES

    @property
    def size_bytes(self) -> int:
        """Bytes of whole entries (a partial tail left by a crash is not counted)."""
        return self._end_bytes

    # -------------------------------------------------------------------------------- writes

    def append(self, aborted_txn: AbortedTxn) -> None:
        """Append ``aborted_txn``, creating the file on the first append.

        Raises:
            InvalidOffsetError: its ``last_offset`` is not above the last entry's.
            ValueError: a field does not fit an int64.
            StorageIOError: the file cannot be created or written.
        """
        if self._last_offset is not None and aborted_txn.last_offset <= self._last_offset:
            raise InvalidOffsetError(
                f"the last offset of appended transactions must increase: "
                f"{aborted_txn.last_offset} is not above the current last offset "
                f"{self._last_offset} of transaction index {self._path}"
            )
        entry = aborted_txn.to_bytes()
        fd = self._channel()
        with self._io_errors("append to"):
            size = os.fstat(fd).st_size
            if size != self._end_bytes:
                # A partial entry left by a crash (or bytes written behind our back): cut it so
                # that this entry starts on an entry boundary.
                log.warning(
                    "transaction index %s has %d bytes past its last whole entry at %d; "
                    "truncating them before appending",
                    self._path,
                    size - self._end_bytes,
                    self._end_bytes,
                )
                os.ftruncate(fd, self._end_bytes)
            written = os.pwrite(fd, entry, self._end_bytes)
            if written != len(entry):
                raise OSError(f"short write of {written} of {len(entry)} bytes")
        # Bytes first, count second: a concurrent reader reads _end_bytes once.
        self._end_bytes += len(entry)
        self._last_offset = aborted_txn.last_offset

    def truncate_to(self, offset: int) -> None:
        """Remove every entry from the first one whose ``last_offset >= offset`` on (Kafka
        TransactionIndex.truncateTo; docs/kafka-behaviours.md#truncation)."""
        new_last: int | None = None
        for position, txn in self._iter_with_positions():
            if txn.last_offset >= offset:
                self._truncate_file(position)
                self._last_offset = new_last
                return
            new_last = txn.last_offset

    def reset(self) -> None:
        """Remove every entry (the file, if it exists, is left empty)."""
        self._truncate_file(0)
        self._last_offset = None

    # --------------------------------------------------------------------------------- reads

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry, in file order.

        Raises:
            CorruptIndexError: an entry has a version above 0.
        """
        return [txn for _, txn in self._iter_with_positions()]

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """The aborted transactions that overlap the offsets ``[fetch_offset, upper_bound_offset)``.

        Those are the entries with ``last_offset >= fetch_offset`` and ``first_offset <
        upper_bound_offset`` (Kafka TransactionIndex.collectAbortedTxns;
        docs/kafka-behaviours.md#aborted-transactions). The search stops, complete, at the first
        entry whose ``last_stable_offset >= upper_bound_offset`` (that entry itself is still
        collected if it overlaps); otherwise it is incomplete and the next segment's index must be
        searched.

        Raises:
            CorruptIndexError: an entry has a version above 0.
        """
        found: list[AbortedTxn] = []
        for _, txn in self._iter_with_positions():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """Kafka's check (Kafka TransactionIndex.sanityCheck;
        docs/kafka-behaviours.md#sanity-checks): no entry's ``last_offset`` is below the base
        offset.

        Raises:
            CorruptIndexError: such an entry, or an entry with a version above 0.
        """
        for position, txn in self._iter_with_positions():
            if txn.last_offset < self._base_offset:
                raise CorruptIndexError(
                    f"last offset of aborted transaction {txn} at byte {position} of transaction "
                    f"index {self._path} is less than the start offset {self._base_offset}"
                )

    # ------------------------------------------------------------------------ file handling

    def flush(self) -> None:
        """fsync the file if it is open."""
        with self._lock:
            if self._fd is not None:
                with self._io_errors("fsync"):
                    os.fsync(self._fd)

    def close(self) -> None:
        """Close the descriptor. A later append or read reopens the file; idempotent."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def rename_to(self, path: Path | str) -> None:
        """Rename the file if it exists; the index follows the new name either way."""
        target = Path(path)
        try:
            if self._path.exists():
                with self._io_errors(f"rename to {target}"):
                    os.replace(self._path, target)
        finally:
            self._path = target

    def update_parent_dir(self, parent_dir: Path | str) -> None:
        """Point at the same file name in ``parent_dir`` (after the directory was renamed)."""
        self._path = Path(parent_dir) / self._path.name

    def delete_if_exists(self) -> bool:
        """Close, then delete the file; True if this call deleted it."""
        self.close()
        self._end_bytes = 0
        self._last_offset = None
        with self._io_errors("delete"):
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
        return True

    # ------------------------------------------------------------------------------ private

    @contextmanager
    def _io_errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise StorageIOError(
                f"failed to {action} transaction index {self._path}: {exc}"
            ) from exc

    def _open(self, create: bool = True) -> int:
        """Open the file (the caller holds the lock or is the constructor)."""
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        with self._io_errors("open"):
            fd = os.open(self._path, flags, 0o644)
            size = os.fstat(fd).st_size
        self._fd = fd
        self._end_bytes = size - size % ABORTED_TXN_SIZE_BYTES
        return fd

    def _channel(self) -> int:
        """The open descriptor, (re)opening or creating the file if needed (writer only)."""
        with self._lock:
            if self._fd is None:
                return self._open()
            return self._fd

    def _pread(self, size_bytes: int, position: int) -> bytes:
        """Read under the lock, so that a concurrent close cannot hand the descriptor number
        to another file in between; reopen a closed index, but never create a missing file."""
        with self._lock:
            if self._fd is None:
                if not self._path.exists():
                    return b""
                self._open(create=False)
            assert self._fd is not None
            with self._io_errors("read"):
                return os.pread(self._fd, size_bytes, position)

    def _truncate_file(self, size_bytes: int) -> None:
        # Like Kafka, truncating an index whose file was never created creates nothing.
        if self._fd is None and not self._path.exists():
            self._end_bytes = 0
            return
        fd = self._channel()
        with self._io_errors(f"truncate to {size_bytes} bytes"):
            os.ftruncate(fd, size_bytes)
        self._end_bytes = min(self._end_bytes, size_bytes)

    def _read_last_offset(self) -> int | None:
        end = self._end_bytes
        if end == 0:
            return None
        position = end - ABORTED_TXN_SIZE_BYTES
        data = self._pread(ABORTED_TXN_SIZE_BYTES, position)
        if len(data) < ABORTED_TXN_SIZE_BYTES:
            return None  # cut short behind our back; treat as empty, as a reader would
        return _parse_entry(memoryview(data), 0, self._path, position).last_offset

    def _iter_with_positions(self) -> Iterator[tuple[int, AbortedTxn]]:
        """Yield (byte position, entry) for the whole entries present when the scan starts."""
        if self._fd is None and not self._path.exists():
            return
        if self._fd is None:
            self._pread(0, 0)  # reopen a closed index to learn its length
        end = self._end_bytes  # read once: entries appended during the scan are not seen
        chunk_bytes = _READ_CHUNK_ENTRIES * ABORTED_TXN_SIZE_BYTES
        position = 0
        while position < end:
            want = min(chunk_bytes, end - position)
            data = self._pread(want, position)
            # A concurrent truncation may shorten the file under us: stop at what is there.
            usable = len(data) - len(data) % ABORTED_TXN_SIZE_BYTES
            view = memoryview(data)
            for start in range(0, usable, ABORTED_TXN_SIZE_BYTES):
                yield position + start, _parse_entry(view, start, self._path, position + start)
            if usable < want:
                return
            position += usable

    def __repr__(self) -> str:
        return (
            f"TransactionIndex(path={str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={self.entries})"
        )
