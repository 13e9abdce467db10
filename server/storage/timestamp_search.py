"""The first record at or after a timestamp inside one batch: a time lookup's last step.

A lookup by time (``ListOffsets``, ``FetchByTimestamp``) narrows the search to one segment by
its largest timestamp, to a position by the time index, to one batch by the batch headers'
max timestamps (``segment.py``); inside that batch the answer is the first record, in record
order, whose timestamp is ``>= target`` and whose offset is ``>= starting_offset``: Kafka's
``FileRecords.searchForTimestamp`` followed by its record loop
(``clients/src/main/java/org/apache/kafka/common/record/FileRecords.java``).

:func:`first_record_at` walks the records' framing only (lengths, timestamp and offset deltas:
the C walker of ``records/accel``), never copying a key, value or header; when base + delta
leaves int64's range it falls back to decoding every record, wrapping each timestamp as
Kafka's reader does. No I/O: bytes in, a :class:`TimestampOffset` or None out. Thread-safe
(pure functions).
"""

from __future__ import annotations

from stratalog.records.accel import find_records
from stratalog.records.batch import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    Compression,
    validate_batch,
)
from stratalog.records.compression import decompress
from stratalog.records.errors import CorruptRecordError
from stratalog.records.reader import DEFAULT_MAX_DECOMPRESSED_BYTES, decode_batch_columns
from stratalog.records.record import wrap_int64

from .time_index import TimestampOffset

__all__ = ["first_record_at"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def first_record_at(
    batch: bytes | memoryview, timestamp: int, starting_offset: int
) -> TimestampOffset | None:
    """The first record of ``batch`` (one whole batch at position 0), in record order, with
    timestamp ``>= timestamp`` and offset ``>= starting_offset``: its own (timestamp, offset),
    or None.

    The batch is checked whole and by its CRC, then only its records' framing is walked
    (:func:`~stratalog.records.accel.find_records`: lengths, timestamp and offset deltas; no
    key, value or header is copied), so a lookup in a batch of thousands of records costs a
    walk of their lengths. Records out of timestamp order cost nothing more: the walk is in
    record order anyway. A LogAppendTime batch's records all read as its max timestamp.

    Raises:
        CorruptRecordError, InvalidRecordError, UnsupportedCompressionError: the batch is
            damaged (positions relative to it).
    """
    header = validate_batch(batch)
    count = header.records_count
    if count < 0:
        raise CorruptRecordError(f"record batch at position 0 declares {count} records")
    log_append_time = header.attributes & TIMESTAMP_TYPE_MASK
    if log_append_time:
        if header.max_timestamp < timestamp:
            return None
        from_timestamp_delta = _INT64_MIN
    else:
        if header.base_timestamp < 0 or timestamp < 0:
            # base + delta may wrap below int64 (or a negative target may meet a value that
            # wrapped above it): only a decode compares as Kafka's reader does.
            return _first_record_at_wrapping(batch, timestamp, starting_offset)
        # Deltas are int64s: a target beyond every base + delta matches nothing.
        from_timestamp_delta = max(timestamp - header.base_timestamp, _INT64_MIN)
        if from_timestamp_delta > _INT64_MAX:
            return None
    from_offset_delta = min(max(starting_offset - header.base_offset, _INT64_MIN), _INT64_MAX)
    with memoryview(batch) as view:
        region = view[RECORD_BATCH_OVERHEAD : header.length + LOG_OVERHEAD]
        try:
            codec = header.compression
            if codec != Compression.NONE:
                region = decompress(codec, region, max_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES)
            span = find_records(region, count, from_offset_delta, 1, 0, from_timestamp_delta)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"record batch at position 0: {exc}") from None
        finally:
            if isinstance(region, memoryview):
                region.release()
    if span.count == 0:
        return None
    if log_append_time:
        record_timestamp = header.max_timestamp
    else:
        record_timestamp = header.base_timestamp + span.max_timestamp_delta
        if record_timestamp > _INT64_MAX:
            # Stored before validation refused it (issue 13): Kafka's reader wraps this
            # record's time below every target, and a later record may be the answer.
            return _first_record_at_wrapping(batch, timestamp, starting_offset)
    return TimestampOffset(record_timestamp, header.base_offset + span.first_offset_delta)


def _first_record_at_wrapping(
    batch: bytes | memoryview, timestamp: int, starting_offset: int
) -> TimestampOffset | None:
    """:func:`first_record_at` by decoding every offset and timestamp, each timestamp wrapped
    to int64 as Kafka's reader does: the exact answer for batches whose base + delta leaves
    int64's range, which the framing walk compares unwrapped."""
    _, columns = decode_batch_columns(batch)
    for offset, unwrapped in zip(columns.offsets, columns.timestamps, strict=True):
        record_timestamp = wrap_int64(unwrapped)
        if offset >= starting_offset and record_timestamp >= timestamp:
            return TimestampOffset(record_timestamp, offset)
    return None
