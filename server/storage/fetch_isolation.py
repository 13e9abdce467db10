"""How far a fetch may read: the isolation levels and the cuts of whole batches at a bound.

A read of the log (:meth:`LocalLog.read`) returns whole batches up to the published log end.
What a reader may see of them depends on who reads (Kafka's ``FetchIsolation``,
``storage/src/main/java/org/apache/kafka/storage/internals/log/FetchIsolation.java``)::

    log start            LSO (read_committed)   high watermark        log end
    |                    |                      |                     |
    [batch][batch][batch][open txn ...][batch  ][batch not replicated]
     ^ a follower reads up to the log end; a consumer below the high watermark
       (upper_bound); a READ_COMMITTED consumer below the last stable offset, and is told
       of the aborted transactions overlapping what it got

A bound is expected at a batch boundary (a high watermark is a follower's log end; the LSO is
the first offset of a transaction's first batch), so a cut keeps whole batches: those that
start below the bound. The cut walks the headers of the bytes read once, building nothing per
batch (:func:`~stratalog.records.batch_walk.batches_below`), and keeps a ``memoryview`` of the
read's start, not a copy: a RECORD_BATCHES answer hands it to gRPC as it is
(``server/rpc/fetch_answer.py``), a RECORDS answer decodes from it. The aborted transactions come
from the ``.txnindex`` files (:meth:`LocalLog.collect_aborted_txns`).

A ``max_records`` read (:func:`take_records`) takes only the records a reader delivers: the
cut, the reader's filter (control batches, and for READ_COMMITTED the aborted transactions'
batches) and the slicing of the records asked for (``records/slicing.py``) are one walk of the
headers (:func:`~stratalog.records.batch_walk.slice_below`), which stops at the last record
taken (and goes on over the headers only as far as the cut).

No state; crash behaviour: none (reads only). Thread-safe: the functions read the
:class:`FetchedBatches` given and the segments' published sizes, as any read does.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from stratalog.records.aborted_filter import AbortedTransactionFilter
from stratalog.records.batch import BatchHeader
from stratalog.records.batch_walk import SlicedWalk, SliceError, batches_below, slice_below
from stratalog.records.reader import DEFAULT_MAX_DECOMPRESSED_BYTES, decode_batch_columns

from .errors import StorageError
from .segment import FetchedBatches

if TYPE_CHECKING:
    from .local_log import LocalLog
    from .txn_index import AbortedTxn

__all__ = [
    "IsolationLevel",
    "SlicedWalk",
    "batches_before_bound",
    "committed_part",
    "take_records",
]


class IsolationLevel(enum.IntEnum):
    """Kafka's fetch isolation levels (the values of its FetchRequest)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


def batches_before_bound(fetched: FetchedBatches, offset: int, upper_bound: int) -> FetchedBatches:
    """The whole batches of ``fetched`` (read at ``offset``) starting below
    ``upper_bound`` (a view of ``fetched.data`` when some are cut off); empty at ``offset``
    when none is left."""
    if offset >= upper_bound:
        return FetchedBatches(b"", offset, 0)
    data, next_offset, records_count = batches_below(fetched.data, upper_bound, offset)
    if not data:
        return FetchedBatches(b"", offset, 0)
    return FetchedBatches(data, next_offset, records_count)


def committed_part(
    local: LocalLog, fetched: FetchedBatches, offset: int, stable: int
) -> FetchedBatches:
    """What a READ_COMMITTED reader may see of ``fetched`` (read at ``offset`` from
    ``local``): the whole batches starting below ``stable`` (an LSO read before the data; a
    view of ``fetched.data`` when some are cut off), with the aborted transactions overlapping
    them, from the segment holding ``offset`` on (:meth:`LocalLog.collect_aborted_txns`).
    Empty at ``offset`` when none is left."""
    if offset >= stable:
        return FetchedBatches(b"", offset, 0)
    data, next_offset, records_count = fetched.data, fetched.next_offset, fetched.records_count
    if next_offset > stable:
        data, next_offset, records_count = batches_below(data, stable, offset)
        if not data:
            return FetchedBatches(b"", offset, 0)
    aborted = local.collect_aborted_txns(offset, next_offset)
    return FetchedBatches(data, next_offset, records_count, aborted)


def take_records(
    data: bytes | memoryview,
    offset: int,
    max_records: int,
    max_bytes: int,
    aborted_transactions: Sequence[AbortedTxn] | None = None,
    upper_bound: int | None = None,
    whole_bytes_enough: int | None = None,
) -> SlicedWalk:
    """The records a read of at most ``max_records`` (> 0) records from ``offset`` takes from
    the whole batches ``data`` (a fetch's, starting with the batch holding ``offset``), cut at
    ``upper_bound`` (None: nothing to cut), in one walk
    (:func:`~stratalog.records.batch_walk.slice_below` says what is taken, where the next
    read starts, and how far ``whole_bytes`` is counted: ``whole_bytes_enough``).

    The answer holds only records a reader delivers: control batches are left out, and with
    ``aborted_transactions`` (a READ_COMMITTED read's, from the ``.txnindex``; an empty sequence
    counts) the batches of aborted transactions too, found by Kafka's consumer algorithm
    (:class:`~stratalog.records.AbortedTransactionFilter`, which needs the ABORT markers: they
    are read, not returned). So the answer carries no aborted transactions: a client that
    applies its own filter to it keeps every record. Aborted transactions starting at or past
    the cut change nothing (the filter reaches a transaction only at a batch whose last offset
    reaches its first offset, and every batch walked ends below the cut), so they may be
    collected over the read before its cut.

    Raises:
        StorageError: a stored batch does not decode (damage on disk), naming its position.
    """
    try:
        return slice_below(
            data, offset, max_records, max_bytes, DEFAULT_MAX_DECOMPRESSED_BYTES, upper_bound,
            None if aborted_transactions is None else _reader_skip(aborted_transactions),
            whole_bytes_enough,
        )
    except SliceError as exc:
        raise StorageError(
            f"stored batch at fetch position {exc.position}: {exc.error}"
        ) from exc.error


def _reader_skip(
    aborted_transactions: Sequence[AbortedTxn],
) -> Callable[[bytes | memoryview, BatchHeader], bool]:
    """What a READ_COMMITTED reader drops, for :func:`slice_below` (whose default, for a
    READ_UNCOMMITTED one, is the control batches)."""
    skips = AbortedTransactionFilter(
        (txn.producer_id, txn.first_offset) for txn in aborted_transactions).skips

    def skip(buf: bytes | memoryview, header: BatchHeader) -> bool:
        if header.is_control:
            # An ABORT marker ends its producer's aborted transaction for the filter.
            _, columns = decode_batch_columns(buf, header.position)
            return skips(header, columns.keys[0] if columns.keys else None)
        return skips(header)

    return skip
