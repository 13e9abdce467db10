"""Lookups by timestamp over a partition log: ListOffsets, and a fetch from a timestamp.

Kafka's ``UnifiedLog.fetchOffsetByTimestamp``
(``storage/src/main/java/org/apache/kafka/storage/internals/log/UnifiedLog.java``) with the
filter ``Partition.fetchOffsetForTimestamp`` applies
(``core/src/main/scala/kafka/cluster/Partition.scala``): a timestamp, or one of ListOffsets' special targets, is turned into an offset of the log, and
only what the reader may read counts (:mod:`~stratalog.server.storage.fetch_isolation`)::

    target       answer
    -2, -4       (-1, log start offset)            earliest, earliest local
    -1           (-1, log end offset)              latest: the high watermark of a replicated
                                                   log, the LSO for READ_COMMITTED
    -3           the first record holding the log's largest timestamp
    -5           None                              latest tiered: no tiered storage
    t >= 0       the earliest record with timestamp >= t, offset >= log start offset

The search itself (which segment, which batch, which record) is the local log's
(:meth:`LocalLog.find_offset_by_timestamp`, :meth:`LocalLog.fetch_by_timestamp`); this module
bounds it by the log start offset, the high watermark and the LSO, which the
:class:`~stratalog.server.storage.partition_log.PartitionLog` keeps and hands in as a
:class:`LogBounds`. A fetch from a timestamp cuts the batches read at the bound
(:func:`fetch_by_timestamp`); with ``max_records`` the cut is made inside the walk that takes
the records (:func:`take_records_by_timestamp`, as :func:`~.fetch_isolation.take_records`).

No state; crash behaviour: none (reads only). Thread-safe against a concurrent append, as the
reads below are: each bound is read once, from values the log publishes whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from stratalog.records.batch import NO_TIMESTAMP

from .fetch_isolation import (
    IsolationLevel,
    SlicedWalk,
    batches_before_bound,
    committed_part,
    take_records,
)
from .segment import FetchedBatches
from .time_index import TimestampOffset

if TYPE_CHECKING:
    from .local_log import LocalLog

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "LogBounds",
    "fetch_by_timestamp",
    "offset_for_timestamp",
    "take_records_by_timestamp",
]

# ListOffsets special targets (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class LogBounds(Protocol):
    """The offsets that bound what a reader may read: a :class:`PartitionLog`'s."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def tracks_high_watermark(self) -> bool: ...

    @property
    def last_stable_offset(self) -> int: ...


def _tracked_high_watermark(bounds: LogBounds) -> int | None:
    """The high watermark a replication layer set, or None (a single server's log)."""
    return bounds.high_watermark if bounds.tracks_high_watermark else None


def fetch_by_timestamp(
    local: LocalLog,
    bounds: LogBounds,
    timestamp: int,
    max_bytes: int,
    min_one_message: bool,
    isolation_level: IsolationLevel,
    max_records: int,
) -> tuple[TimestampOffset | None, FetchedBatches]:
    """:func:`offset_for_timestamp` for a timestamp ``>= 0``, then a fetch there
    (``max_records`` as for a fetch, from the record found).

    Returns the record found (its timestamp and offset) and the whole batches from the one
    holding it, as :meth:`PartitionLog.fetch` at its offset returns them; the batch searched is
    read once. Only records below the log end published when the call started are searched.
    When none qualifies: ``(None, empty batches at the log end offset)``. A log that tracks a
    high watermark (replication) searches and returns only records below it, as a fetch with
    ``upper_bound``. Thread-safe against a concurrent append.

    With ``isolation_level`` READ_COMMITTED only a record below the last stable offset
    matches (Kafka's ``fetchOffsetForTimestamp`` filters the lookup by the last fetchable
    offset); when none does: ``(None, empty batches at the LSO)``, where a READ_COMMITTED
    reader's "latest" is. The batches are cut at the LSO and carry the aborted transactions
    overlapping them, as a READ_COMMITTED fetch returns them.

    Raises:
        ValueError: ``timestamp`` or ``max_bytes`` negative (the special ListOffsets targets
            are :func:`offset_for_timestamp`'s).
        LogDirOfflineError: the log is offline.
        CorruptRecordError, InvalidRecordError: a malformed or corrupt batch on the way.
    """
    record, fetched, bound = _found_and_bound(
        local, bounds, timestamp, max_bytes, min_one_message, isolation_level, max_records
    )
    if record is None or bound is None:
        return record, fetched
    if isolation_level == IsolationLevel.READ_COMMITTED:
        return record, committed_part(local, fetched, record.offset, bound)
    if fetched.next_offset > bound:
        fetched = batches_before_bound(fetched, record.offset, bound)
    return record, fetched


def take_records_by_timestamp(
    local: LocalLog,
    bounds: LogBounds,
    timestamp: int,
    max_bytes: int,
    max_records: int,
    isolation_level: IsolationLevel,
) -> tuple[TimestampOffset | None, SlicedWalk]:
    """:func:`fetch_by_timestamp` with ``max_records`` (> 0), the records taken as a reader
    delivers them (:func:`~stratalog.server.storage.fetch_isolation.take_records`): the cut at
    the high watermark or the LSO, the reader's filter and the slicing are one walk of the
    batches read, from the record found; when none qualifies, from where
    :func:`fetch_by_timestamp`'s empty answer is (nothing taken). The same answer as
    :func:`fetch_by_timestamp`, then ``take_records`` of its batches (the model test in
    tests/unit/storage/test_fetch_isolation.py checks it on random logs).

    Raises: what :func:`fetch_by_timestamp` raises, and StorageError for a stored batch that
    does not decode.
    """
    record, fetched, bound = _found_and_bound(
        local, bounds, timestamp, max_bytes, True, isolation_level, max_records
    )
    committed = isolation_level == IsolationLevel.READ_COMMITTED
    if record is None:
        return None, take_records(
            fetched.data, fetched.next_offset, max_records, max_bytes, () if committed else None
        )
    if bound is not None and fetched.next_offset <= bound:
        bound = None  # nothing to cut: the walk stops at the last record taken
    # Over the read before its cut: the transactions starting past it change nothing
    # (take_records says why).
    aborted = (
        local.collect_aborted_txns(record.offset, fetched.next_offset) if committed else None
    )
    return record, take_records(fetched.data, record.offset, max_records, max_bytes, aborted, bound)


def _found_and_bound(
    local: LocalLog,
    bounds: LogBounds,
    timestamp: int,
    max_bytes: int,
    min_one_message: bool,
    isolation_level: IsolationLevel,
    max_records: int,
) -> tuple[TimestampOffset | None, FetchedBatches, int | None]:
    """The search of :func:`fetch_by_timestamp`: the record found, the whole batches read
    from the one holding it (not yet cut), and the bound they are to be cut at (the LSO for
    READ_COMMITTED, the high watermark of a log that tracks one, else None); when no record
    qualifies, ``(None, the empty answer, None)``."""
    if timestamp < 0:
        raise ValueError(f"timestamp must not be negative, got {timestamp}")
    if max_bytes < 0:
        raise ValueError(f"max_bytes must not be negative, got {max_bytes}")
    if local.is_offline:
        raise local.offline_error()
    committed = isolation_level == IsolationLevel.READ_COMMITTED
    # The LSO before the end: the end read next is never below it.
    stable = bounds.last_stable_offset if committed else -1
    end = local.end
    found = local.fetch_by_timestamp(
        timestamp, bounds.log_start_offset, max_bytes, end, min_one_message, max_records
    )
    if not committed:
        high_watermark = _tracked_high_watermark(bounds)
        if high_watermark is not None:
            # Replicated: a consumer reads below the high watermark only (as fetch's
            # upper_bound), so a record at or above it is not found yet.
            if found is None or found[0].offset >= high_watermark:
                return None, FetchedBatches(b"", min(high_watermark, end.offset), 0), None
            return found[0], found[1], high_watermark
        if found is None:
            return None, FetchedBatches(b"", end.offset, 0), None
        return found[0], found[1], None
    if found is None or found[0].offset >= stable:
        return None, FetchedBatches(b"", stable, 0), None
    return found[0], found[1], stable


def offset_for_timestamp(
    local: LocalLog,
    bounds: LogBounds,
    timestamp: int,
    isolation_level: IsolationLevel,
) -> TimestampOffset | None:
    """ListOffsets: the offset for a timestamp or a special target (Kafka
    UnifiedLog.fetchOffsetByTimestamp; docs/kafka-behaviours.md#timestamp-lookup).

    * ``-2`` (earliest) and ``-4`` (earliest local): ``(-1, log_start_offset)``;
    * ``-1`` (latest): ``(-1, log_end_offset)``, or the high watermark of a log that
      tracks one (a replicated partition's; consumers read below it only, and no
      record at or above it is found for the targets below);
    * ``-3`` (max timestamp): the first record holding the largest timestamp of the log,
      in the first segment holding it; None for a log without timestamps;
    * ``-5`` (latest tiered): None (no tiered storage);
    * otherwise the earliest record (offset ``>= log_start_offset``) whose timestamp is
      ``>= timestamp``, searched in the first segment whose largest timestamp (or, with no
      timestamps, its file's mtime) is ``>= timestamp``; returns that record's own
      timestamp. None when there is none.

    With ``isolation_level`` READ_COMMITTED, latest is the last stable offset, and a record
    found at or above it for a timestamp or max timestamp is not returned (Kafka's
    ``Partition.fetchOffsetForTimestamp``: every target but latest and earliest is filtered
    by the last fetchable offset).

    Thread-safe against a concurrent append.

    Raises:
        LogDirOfflineError: the log is offline.
    """
    if local.is_offline:
        raise local.offline_error()
    if isolation_level == IsolationLevel.READ_COMMITTED:
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(NO_TIMESTAMP, bounds.last_stable_offset)
        stable = bounds.last_stable_offset
        found = offset_for_timestamp(local, bounds, timestamp, IsolationLevel.READ_UNCOMMITTED)
        if (found is not None and found.offset >= stable
                and timestamp not in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP)):
            return None
        return found
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return TimestampOffset(NO_TIMESTAMP, bounds.log_start_offset)
    if timestamp == LATEST_TIMESTAMP:
        # The log end, or the high watermark of a replicated log (equal otherwise).
        return TimestampOffset(NO_TIMESTAMP, bounds.high_watermark)
    if timestamp == LATEST_TIERED_TIMESTAMP:
        return None
    high_watermark = _tracked_high_watermark(bounds)
    if high_watermark is not None:
        # Replicated: only records below the high watermark are found (Kafka's
        # fetchOffsetForTimestamp filters by the last fetchable offset).
        found = _offset_below_end(local, bounds, timestamp)
        return found if found is None or found.offset < high_watermark else None
    return _offset_below_end(local, bounds, timestamp)


def _offset_below_end(
    local: LocalLog, bounds: LogBounds, timestamp: int
) -> TimestampOffset | None:
    """:func:`offset_for_timestamp` of a timestamp or max timestamp, up to the log end."""
    if timestamp == MAX_TIMESTAMP:
        return local.max_timestamp_record()
    return local.find_offset_by_timestamp(timestamp, bounds.log_start_offset)
