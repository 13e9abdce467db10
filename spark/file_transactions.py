"""File mode under read_committed: which offsets of a partition's files are committed.

Intuition: a read_committed reader sees the records below the partition's last stable offset
(LSO), minus those of aborted transactions. A server knows both from its producer state; a
directory of files says them too, in the files Kafka keeps for its own recovery:

* **Aborted transactions** are listed in the ``.txnindex`` of the segment their ABORT marker
  went into (:mod:`stratalog.records.txn_index_file`: producer id, first offset, the marker's
  offset, the LSO then).
* **The LSO** is the first offset of the earliest transaction that has no marker in the files:
  one still open when the files were written or copied (or whose marker was lost in a crash
  before the server recovered the log). Its records cannot be known committed, and nothing
  after its first batch is read, as a read_committed fetch stops there. It is found the way
  Kafka's log recovery rebuilds producer state: from the newest producer snapshot
  (``.snapshot``: each producer's ``current_txn_first_offset``) at or below the log end, then
  a walk of the batch headers after it: a transactional data batch opens its producer's
  transaction if none is open, and a control batch (COMMIT or ABORT) closes it
  (:class:`stratalog.records.transaction_replay.TransactionReplay`, the replay the server's
  recovery runs). With no usable snapshot the walk starts at the first segment, with no
  transaction open.

Example (one producer, 7)::

    .snapshot at 100: producer 7, current_txn_first_offset 96
    offset 100 data  pid 7 transactional       (the transaction from 96 goes on)
    offset 104 ABORT pid 7                     aborted: (7, first 96, marker 104)
    offset 105 data  pid 7 transactional       opens a transaction at 105
    end of the files at 110                    LSO = 105

The walk also yields the aborted transactions whose marker lies at or after the snapshot (the
ABORT markers it meets). An ABORT marker and its ``.txnindex`` entry are two writes (stratalog
writes the entry first, Kafka the marker), so in the segment being written one may be on disk
without the other (a crash between them, a copy taken between them). Below the snapshot both
are (the snapshot was taken after them), so ``.txnindex`` entries are taken only there.

Cost, on the planner: the ``.txnindex`` and ``.snapshot`` files (small), plus the batch headers
after the snapshot: the active segment of a running server's directory (it writes a snapshot at
each roll), nothing after a clean shutdown (a snapshot at the log end), every segment when no
snapshot is there (a few microseconds per batch; the pages touched are one per batch).

Read-only. A snapshot that does not parse (CRC, truncation), or that lies past the end of the
log or inside a batch, is skipped with a warning and an older one (or none) is used, as Kafka's
recovery does. A ``.txnindex`` entry of an unknown version fails the query (Kafka refuses it too).
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from stratalog.records import ControlRecordType, RecordError, decode_control_key
from stratalog.records.errors import (
    CorruptIndexEntryError,
    CorruptSnapshotError,
    InvalidFileNameError,
)
from stratalog.records.file_names import (
    SNAPSHOT_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    offset_from_file_name,
    segment_file_name,
)
from stratalog.records.producer_snapshot import unpack_producer_snapshot
from stratalog.records.transaction_replay import TransactionReplay
from stratalog.records.txn_index_file import TXN_INDEX_ENTRY, unpack_txn_index_entry

from .columns import control_first_key, iter_headers

__all__ = ["AbortedTxn", "PartitionTransactions", "scan_transactions"]

logger = logging.getLogger(__name__)


class AbortedTxn(NamedTuple):
    """An aborted transaction: its producer, its first offset and its ABORT marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int


class PartitionTransactions(NamedTuple):
    """What the files of one partition say a read_committed reader may see.

    ``last_stable_offset``: nothing at or above it is read (the log end when no transaction is
    open). ``aborted``: every aborted transaction found, by first offset.
    """

    last_stable_offset: int
    aborted: tuple[AbortedTxn, ...]

    def aborted_overlapping(
        self, from_offset: int, until_offset: int
    ) -> tuple[tuple[int, int], ...]:
        """``(producer_id, first_offset)`` of the aborted transactions with records in
        ``[from_offset, until_offset)``: the list a fetch of that range would carry (Kafka's
        ``collectAbortedTransactions``), for an AbortedTransactionFilter."""
        return tuple(
            (a.producer_id, a.first_offset)
            for a in self.aborted
            if a.last_offset >= from_offset and a.first_offset < until_offset
        )


@contextmanager
def _mapped(path: str) -> Iterator[memoryview]:
    """The bytes of a file, memory-mapped (an empty view for an empty file)."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            yield memoryview(b"")
            return
        with mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                yield view
            finally:
                view.release()


def _snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the directory's ``.snapshot`` files, newest first."""
    found = []
    for entry in os.scandir(directory):
        if not entry.name.endswith(SNAPSHOT_FILE_SUFFIX):
            continue
        try:
            offset = offset_from_file_name(entry.name)
        except InvalidFileNameError:
            continue
        if entry.name == segment_file_name(offset, SNAPSHOT_FILE_SUFFIX):
            found.append(offset)
    return sorted(found, reverse=True)


def _open_transactions(path: Path) -> dict[int, int] | None:
    """``{producer_id: current_txn_first_offset}`` of a snapshot's open transactions; None
    (with a warning) if the file cannot be read or does not parse."""
    try:
        snapshot = unpack_producer_snapshot(path.read_bytes(), verify_crc=True)
    except (OSError, CorruptSnapshotError) as exc:
        logger.warning("ignoring producer snapshot %s: %s", path, exc)
        return None
    return {
        e.producer_id: e.current_txn_first_offset
        for e in snapshot.entries
        if e.current_txn_first_offset >= 0
    }


class _Walk(NamedTuple):
    last_stable_offset: int
    aborted: list[AbortedTxn]


def _walk(
    segments: list[tuple[int, str]], start: int, open_txns: dict[int, int]
) -> _Walk | None:
    """Follow the transactions from ``start`` (with ``open_txns`` open there) to the end of
    the files. None if ``start`` is not where a batch begins or the log ends (a snapshot
    that does not belong to these files)."""
    first = max(i for i, (base, _) in enumerate(segments) if base <= start)
    at_boundary = segments[first][0] == start
    log_end = start
    aborted: list[AbortedTxn] = []
    # Open on data, close on marker: the replay recovery runs on the server's log.
    replay = TransactionReplay()
    for producer_id, first_offset in open_txns.items():
        replay.begin(producer_id, first_offset)
    for i in range(first, len(segments)):
        path = segments[i][1]
        with _mapped(path) as view:
            for header in iter_headers(
                view, 0, source=path, partial_tail_ok=i == len(segments) - 1
            ):
                if header.next_offset <= start:
                    at_boundary = at_boundary or header.next_offset == start
                    continue
                if header.base_offset < start:
                    logger.warning(
                        "ignoring the producer snapshot at offset %d: the batch at position %d "
                        "of %s holds offsets %d..%d across it", start, header.position, path,
                        header.base_offset, header.last_offset,
                    )
                    return None
                at_boundary = True
                log_end = header.next_offset
                if not header.is_transactional:
                    continue
                producer_id = header.producer_id
                if not header.is_control:
                    replay.begin(producer_id, header.base_offset)
                    continue
                if replay.first_offset(producer_id) is None:
                    continue  # a marker with no transaction open: nothing to end (Kafka's rule)
                try:
                    _, marker = decode_control_key(control_first_key(view, header))
                except RecordError as exc:
                    raise type(exc)(f"{path}: control batch at position {header.position}: "
                                    f"{exc}") from None
                # (Any other control type closes the transaction too, as it always did here.)
                txn = replay.end(producer_id, header.base_offset,
                                 marker == ControlRecordType.ABORT)
                assert txn is not None  # (it was open)
                if txn.is_aborted:
                    aborted.append(AbortedTxn(producer_id, txn.first_offset, txn.last_offset))
    if not at_boundary:
        logger.warning("ignoring the producer snapshot at offset %d: the log ends before it", start)
        return None
    return _Walk(replay.last_stable_offset(log_end), aborted)


def _txn_index_entries(
    segments: list[tuple[int, str]], below: int
) -> list[AbortedTxn]:
    """The ``.txnindex`` entries (beside each segment) whose marker is below ``below``.

    Raises:
        CorruptIndexEntryError: an entry of a version above 0 (the message names the file).
    """
    found = []
    size = TXN_INDEX_ENTRY.size
    for base, log_path in segments:
        if base >= below:
            break
        path = Path(log_path).with_name(segment_file_name(base, TXN_INDEX_FILE_SUFFIX))
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue  # Kafka creates the file with the first entry only
        # A partial entry at the end (a torn append) is ignored, as Kafka's reader does.
        for position in range(0, len(data) - len(data) % size, size):
            try:
                entry = unpack_txn_index_entry(data, position)
            except CorruptIndexEntryError as exc:
                raise CorruptIndexEntryError(
                    f"{path}: entry at position {position}: {exc}", version=exc.version
                ) from None
            if entry.last_offset < below:
                found.append(AbortedTxn(entry.producer_id, entry.first_offset, entry.last_offset))
    return found


def scan_transactions(segments: list[tuple[int, str]]) -> PartitionTransactions:
    """The last stable offset and aborted transactions of a partition's segment files.

    ``segments``: ``(base_offset, path of the .log)`` in offset order, all in one directory
    (:class:`~stratalog.spark.segment_files.PartitionFiles`). Blocking file I/O.

    Raises:
        stratalog.records.RecordError: a batch header or marker that does not decode, or a
            partial batch in a segment that is not the last (the message names the file).
        OSError: a segment cannot be read.
    """
    if not segments:
        return PartitionTransactions(0, ())
    first_base = segments[0][0]
    directory = Path(segments[0][1]).parent
    walk = None
    start = first_base
    for offset in _snapshot_offsets(directory):
        if offset < first_base:
            break  # below the first segment: nothing to walk from (Kafka deletes these)
        open_txns = _open_transactions(directory / segment_file_name(offset, SNAPSHOT_FILE_SUFFIX))
        if open_txns is None:
            continue
        walk = _walk(segments, offset, open_txns)
        if walk is not None:
            start = offset
            break
    if walk is None:
        start = first_base
        walk = _walk(segments, start, {})
        assert walk is not None, "the first segment's base is always where the walk can start"
    aborted = sorted(
        _txn_index_entries(segments, start) + walk.aborted,
        key=lambda a: (a.first_offset, a.last_offset),
    )
    return PartitionTransactions(walk.last_stable_offset, tuple(aborted))
