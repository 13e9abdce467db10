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
start below the bound. The cut walks the headers of the bytes read (``records/batch_walk.py``);
the aborted transactions come from the ``.txnindex`` files (:meth:`LocalLog.collect_aborted_txns`).

No state; crash behaviour: none (reads only). Thread-safe: the functions read the
:class:`FetchedBatches` given and the segments' published sizes, as any read does.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from stratalog.records.batch_walk import batches_below

from .segment import FetchedBatches

if TYPE_CHECKING:
    from .local_log import LocalLog

__all__ = ["IsolationLevel", "batches_before_bound", "committed_part"]


class IsolationLevel(enum.IntEnum):
    """Kafka's fetch isolation levels (the values of its FetchRequest)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


def batches_before_bound(fetched: FetchedBatches, offset: int, upper_bound: int) -> FetchedBatches:
    """The whole batches of ``fetched`` (read at ``offset``) starting below
    ``upper_bound``; empty at ``offset`` when none is left."""
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
    ``local``): the whole batches starting below ``stable`` (an LSO read before the data), with
    the aborted transactions overlapping them, from the segment holding ``offset`` on
    (:meth:`LocalLog.collect_aborted_txns`). Empty at ``offset`` when none is left."""
    if offset >= stable:
        return FetchedBatches(b"", offset, 0)
    data, next_offset, records_count = fetched.data, fetched.next_offset, fetched.records_count
    if next_offset > stable:
        data, next_offset, records_count = batches_below(data, stable, offset)
        if not data:
            return FetchedBatches(b"", offset, 0)
    aborted = local.collect_aborted_txns(offset, next_offset)
    return FetchedBatches(data, next_offset, records_count, aborted)
