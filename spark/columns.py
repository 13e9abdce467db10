"""From stored record batches to Arrow columns: what every read task of the connector runs.

Intuition: a Spark task gets bytes exactly as the log stores them (Kafka v2 batches, from a
FETCH_FORMAT_RECORD_BATCHES fetch or from a segment file) and must hand Spark Arrow record
batches. Building a Python object per record and then converting rows would cost most of the
time. With the codec's C loops built, each batch is decoded straight into Arrow's buffers
(:func:`stratalog.records.accel.decode_arrow`: no Python object per record), which pyarrow wraps
without a copy; without them, records go into per-column lists (the codec's columnar decoder)
that pyarrow converts. Topic and partition are constants, so their columns are built by
repetition, not per record.

Walking a buffer of batches (``RecordColumns.append_batches``):

* every batch holding records in range is checked whole, with its CRC-32C
  (:func:`stratalog.records.validate_batch`), then decompressed (bounded) and decoded;
* control batches (transaction markers) are skipped, as Kafka's consumer skips them, and so are
  batches wholly before the range, both on their header alone;
* under read_committed the caller passes the aborted transactions that overlap the bytes (a
  fetch's ``aborted_transactions``, or those of the ``.txnindex`` files) as a
  :class:`stratalog.records.AbortedTransactionFilter`; it sees every transactional batch in
  range, in offset order, and the batches of aborted transactions are skipped whole (Kafka's
  ``CompletedFetch``). Non-transactional batches never reach it, so they cost nothing more;
* records outside ``[from_offset, until_offset)`` are dropped (the first batch of a fetch may
  start before the offset asked for; the last may run past the range's end);
* a partial batch at the end of the buffer ends the walk when the caller allows it (an active
  segment being written, a fetch response cut at its size limit), as do zero bytes where the
  next batch's length should be (the preallocated tail of a segment file).

Errors in the bytes raise :class:`stratalog.records.CorruptRecordError` (or another
``RecordError``) with the source (fetch or file) and the batch position in the message. A
record timestamp past int64 (base + delta; stored before the server refused them) is not an
error: it is wrapped to 64 bits as Kafka's reader computes it (the server answers the same), and
a timestamp Spark's microseconds cannot hold, that one included, is a null ``timestamp``
(docs/spark.md).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from stratalog.records import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    RECORD_BATCH_OVERHEAD,
    AbortedTransactionFilter,
    BatchHeader,
    Compression,
    RecordError,
    TimestampType,
    accel,
    decode_batch_columns,
    decompress,
    iter_batch_headers,
    validate_batch,
    wrap_int64,
)
from stratalog.records.accel import ArrowColumns

from .schema import HEADERS_ARROW_TYPE, arrow_schema

__all__ = ["BatchWalk", "RecordColumns", "control_first_key", "decode_columns", "iter_headers"]

#: ``decode_columns(data, count, base_offset, base_timestamp, timestamp_override=None)``: the
#: codec's columnar decode (its C loop when built, its pure-Python reference otherwise).
decode_columns = accel.decode_columns

# The codec's decode straight into Arrow buffers, when its C loops are built (no Python object
# per record: about 4 times less work per record than the lists); the lists otherwise (the
# reference decode_arrow builds them anyway, so it would only add a step).
_decode_arrow = accel.decode_arrow if accel.ACCELERATED else None

_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# The milliseconds Spark's timestamps (int64 microseconds) can hold.
_SPARK_TIMESTAMP_MS_MIN = -(_INT64_MAX // 1000)
_SPARK_TIMESTAMP_MS_MAX = _INT64_MAX // 1000


def _int64_buffer_array(data: bytes, count: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(data)])


def _binary_buffer_array(
    count: int, validity: bytes | None, nulls: int, offsets: bytes, data: bytes
) -> pa.Array:
    return pa.Array.from_buffers(
        pa.binary(), count,
        [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets),
         pa.py_buffer(data)],
        null_count=nulls,
    )


def _int64_array(values: list[int]) -> pa.Array:
    # array("q") converts a list of ints in one C loop, faster than pa.array's per-item path.
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(array("q", values))])


class BatchWalk(NamedTuple):
    """Where :meth:`RecordColumns.append_batches` stopped.

    ``position``: the first byte not consumed. ``next_offset``: the offset after the last batch
    consumed (where reading continues; -1 if no batch was consumed). ``done``: a batch at or
    past ``until_offset`` was reached, so the range is complete. ``end``: the buffer (or its
    readable part) is exhausted.
    """

    position: int
    next_offset: int
    done: bool
    end: bool


class RecordColumns:
    """The records of one topic-partition, column by column, until turned into one Arrow batch.

    Holds, per decoded batch, one Arrow array per column (converted while the batch's Python
    values are fresh in the CPU cache; concatenated by :meth:`to_arrow`). Invariant: every
    column holds ``len(self)`` records in total. Not thread-safe; one per read task. Holds
    nothing on disk.
    """

    __slots__ = (
        "_count",
        "_headers",
        "_include_headers",
        "_keys",
        "_offsets",
        "_partition",
        "_timestamp_types",
        "_timestamps",
        "_topic",
        "_values",
    )

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self._topic = topic
        self._partition = partition
        self._include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self._count = 0
        self._offsets: list[pa.Array] = []
        self._timestamps: list[pa.Array] = []  # ms, int64
        self._keys: list[pa.Array] = []
        self._values: list[pa.Array] = []
        self._headers: list[pa.Array] = []
        self._timestamp_types: list[pa.Array] = []

    def __len__(self) -> int:
        return self._count

    def append_batches(
        self,
        buf: bytes | bytearray | memoryview,
        position: int,
        from_offset: int,
        until_offset: int | None,
        *,
        source: str,
        records_max: int | None = None,
        partial_tail_ok: bool = True,
        aborted: AbortedTransactionFilter | None = None,
    ) -> BatchWalk:
        """Decode the batches of ``buf`` from ``position`` and keep their records in range.

        Stops at the end of the buffer, at a partial batch (an error unless
        ``partial_tail_ok``), at a batch starting at or after ``until_offset`` (None: no end),
        or once at least ``records_max`` records are held. ``source`` names the bytes in
        error messages (a file path, or "fetch of topic-partition at offset N"). ``aborted``
        (read_committed only): the filter that drops the batches of aborted transactions; it
        is given the transactional batches in range, in order, across calls.

        Raises:
            CorruptRecordError, InvalidRecordError, UnsupportedCompressionError: bad bytes.
        """
        next_offset = -1
        with memoryview(buf) as view:
            for header in iter_headers(
                view, position, source=source, partial_tail_ok=partial_tail_ok
            ):
                if records_max is not None and self._count >= records_max:
                    return BatchWalk(position, next_offset, False, False)
                if until_offset is not None and header.base_offset >= until_offset:
                    return BatchWalk(position, next_offset, True, False)
                try:
                    # Batches before the range (a task scanning to its start) and control
                    # batches are stepped over on their header; the others are checked whole.
                    keep = header.next_offset > from_offset
                    if keep and aborted is not None and header.is_transactional:
                        first_key = control_first_key(view, header) if header.is_control else None
                        keep = not aborted.skips(header, first_key)
                    if keep and not header.is_control:
                        self._append_batch(
                            view, validate_batch(view, header.position), from_offset, until_offset
                        )
                except RecordError as exc:
                    raise type(exc)(f"{source}: {exc}") from None
                position = header.end_position
                next_offset = header.next_offset
                if until_offset is not None and next_offset >= until_offset:
                    return BatchWalk(position, next_offset, True, position >= len(view))
        return BatchWalk(position, next_offset, False, True)

    def _append_batch(
        self, view: memoryview, header: object, from_offset: int, until_offset: int | None
    ) -> None:
        start = header.position + RECORD_BATCH_OVERHEAD  # type: ignore[attr-defined]
        stop = header.end_position  # type: ignore[attr-defined]
        codec = header.compression  # type: ignore[attr-defined]
        if codec == Compression.NONE:
            data: bytes | memoryview = view[start:stop]  # the decoder copies keys and values
        else:
            data = decompress(codec, view[start:stop], max_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES)
        timestamp_type = header.timestamp_type  # type: ignore[attr-defined]
        override = (
            header.max_timestamp  # type: ignore[attr-defined]
            if timestamp_type is TimestampType.LOG_APPEND_TIME else None
        )
        count = header.records_count  # type: ignore[attr-defined]
        if _decode_arrow is not None:
            self._append_buffers(_decode_arrow(
                data, count, header.base_offset,  # type: ignore[attr-defined]
                header.base_timestamp,  # type: ignore[attr-defined]
                override, from_offset, until_offset, self._include_headers,
            ), timestamp_type)
            return
        offsets, timestamps, keys, values, headers = decode_columns(
            data,
            count,
            header.base_offset,  # type: ignore[attr-defined]
            header.base_timestamp,  # type: ignore[attr-defined]
            override,
        )
        if timestamps and not _INT64_MIN <= min(timestamps) <= max(timestamps) <= _INT64_MAX:
            # base + delta past int64: Kafka's reader wraps the sum, as decode_arrow does.
            timestamps = [wrap_int64(timestamp) for timestamp in timestamps]
        if offsets and (
            offsets[0] < from_offset or (until_offset is not None and offsets[-1] >= until_offset)
        ):
            # Offsets rise within a batch (gaps only after compaction): slice the range.
            low = bisect_left(offsets, from_offset)
            high = len(offsets) if until_offset is None else bisect_left(offsets, until_offset)
            offsets, timestamps = offsets[low:high], timestamps[low:high]
            keys, values, headers = keys[low:high], values[low:high], headers[low:high]
        count = len(offsets)
        if not count:
            return
        self._count += count
        self._offsets.append(_int64_array(offsets))
        self._timestamps.append(_int64_array(timestamps))
        # Unkeyed topics are common: all-null needs no per-record conversion.
        self._keys.append(
            pa.nulls(count, pa.binary()) if keys.count(None) == count
            else pa.array(keys, pa.binary())
        )
        self._values.append(pa.array(values, pa.binary()))
        if self._include_headers:
            self._headers.append(pa.array(headers, HEADERS_ARROW_TYPE))
        self._timestamp_types.append(pa.repeat(pa.scalar(int(timestamp_type), pa.int32()), count))

    def _append_buffers(self, columns: ArrowColumns, timestamp_type: TimestampType) -> None:
        # The codec laid the records out as Arrow buffers: the arrays wrap them, no copy.
        count = columns.count
        if not count:
            return
        self._count += count
        self._offsets.append(_int64_buffer_array(columns.offsets, count))
        self._timestamps.append(_int64_buffer_array(columns.timestamps, count))
        self._keys.append(_binary_buffer_array(
            count, columns.key_validity, columns.key_nulls, columns.key_offsets, columns.key_data
        ))
        self._values.append(_binary_buffer_array(
            count, columns.value_validity, columns.value_nulls, columns.value_offsets,
            columns.value_data,
        ))
        if self._include_headers:
            self._headers.append(pa.array(columns.headers, HEADERS_ARROW_TYPE))
        self._timestamp_types.append(pa.repeat(pa.scalar(int(timestamp_type), pa.int32()), count))

    def to_arrow(self) -> pa.RecordBatch:
        """The records held as one Arrow batch (schema: :func:`arrow_schema`); then empty.

        A record whose timestamp does not fit Spark's (microseconds in an int64: about
        ±292,000 years) gets a null ``timestamp``; its other columns are as stored.
        """
        count = self._count
        timestamps_ms = _concat(self._timestamps, pa.int64())
        try:
            timestamps = pc.multiply_checked(timestamps_ms, 1000)
        except pa.ArrowInvalid:
            # Rare (a record written with such a timestamp, or one wrapped past int64's ends):
            # the read goes on, as Kafka's consumer reads the record; Spark's Kafka source
            # would fail the task (ArithmeticException) instead. docs/spark.md.
            fits = pc.and_(pc.greater_equal(timestamps_ms, _SPARK_TIMESTAMP_MS_MIN),
                           pc.less_equal(timestamps_ms, _SPARK_TIMESTAMP_MS_MAX))
            timestamps = pc.multiply(
                pc.if_else(fits, timestamps_ms, pa.scalar(None, pa.int64())), 1000
            )
        columns = [
            _concat(self._keys, pa.binary()),
            _concat(self._values, pa.binary()),
            pa.repeat(pa.scalar(self._topic, pa.string()), count),
            pa.repeat(pa.scalar(self._partition, pa.int32()), count),
            _concat(self._offsets, pa.int64()),
            timestamps.view(_TIMESTAMP_TYPE),
            _concat(self._timestamp_types, pa.int32()),
        ]
        if self._include_headers:
            columns.append(_concat(self._headers, HEADERS_ARROW_TYPE))
        batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(self._include_headers))
        self._reset()
        return batch


def iter_headers(
    view: memoryview, position: int, *, source: str, partial_tail_ok: bool
) -> Iterator[BatchHeader]:
    """The headers of the whole batches in ``view`` from ``position`` on, in order.

    Ends at the end of the buffer, at a partial batch (allowed only with ``partial_tail_ok``:
    an active segment being written, a fetch response cut at its size limit), or at zeros
    where the next batch's length should be (the preallocated tail of a segment file). CRCs
    are not checked here (:func:`stratalog.records.validate_batch` does it for the batches
    decoded). ``source`` names the bytes in errors. The walk and its tail rules are the one
    walk of batches, :func:`stratalog.records.iter_batch_headers` (``zeros_end``).

    Raises:
        CorruptRecordError: a partial batch without ``partial_tail_ok``, or a malformed header.
        InvalidRecordError: a batch of another magic than 2.
    """
    try:
        yield from iter_batch_headers(
            view, position, partial_tail_ok=partial_tail_ok, zeros_end=True
        )
    except RecordError as exc:
        raise type(exc)(f"{source}: {exc}") from None


def control_first_key(view: memoryview, header: BatchHeader) -> bytes | None:
    """The key of a control batch's first record (its marker type), the batch checked whole.

    Raises:
        CorruptRecordError, InvalidRecordError: the batch does not decode.
    """
    _, columns = decode_batch_columns(view, header.position)
    return columns.keys[0] if columns.keys else None


def _concat(arrays: list[pa.Array], arrow_type: pa.DataType) -> pa.Array:
    if not arrays:
        return pa.array([], arrow_type)
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
