"""Reading record batches: from bytes to headers and records, checking everything on the way.

A reader takes the batch at a position, checks that all of it is present and (by default) that
its CRC-32C matches, decompresses the records region if the attributes name a codec (bounded by
``max_decompressed_bytes``), and decodes exactly ``records_count`` records from it. Structure
checks follow Kafka's ``DefaultRecordBatch``/``DefaultRecord`` readers
(docs/kafka-behaviours.md#records):

* every record consumes exactly the bytes its length field declares;
* lengths and counts are not negative (except the -1 of a null key, value or header value);
* ``records_count`` records must be present, and no bytes may be left after them
  ("Incorrect declared batch size, records still remaining");

each failure is a :class:`~stratalog.records.errors.CorruptRecordError` naming the batch
position and the record. Offsets are absolute (``base_offset + offset_delta``); timestamps are
``base_timestamp + timestamp_delta``, or the batch ``max_timestamp`` for LogAppendTime batches.

:func:`summarize_records` walks the same structure without building records: the server uses it
to validate client batches (and additionally requires offset deltas 0..n-1 in order).
:func:`decode_batch_columns` decodes a batch into five lists (offsets, timestamps, keys, values,
headers) instead of ``Record`` objects, for consumers that work by column (Arrow, gRPC).

The per-record loops run in C when the extension is built (:mod:`stratalog.records.accel`; same
results and errors as the pure-Python reference in :mod:`stratalog.records.record`). The C loops
read an uncompressed records region in place; the pure-Python ones get a copy of it.

Sans-IO: every function takes a buffer (``bytes``, ``bytearray``, ``memoryview``) and positions.
A batch is decoded all at once (a batch is bounded by the batch size limit), so an error means
no record of that batch was returned.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from .accel import ACCELERATED, RecordColumns, decode_columns, decode_records, walk_records
from .batch import (
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    Compression,
    TimestampType,
    check_crc,
    check_whole,
    parse_header,
)
from .batch_walk import iter_batch_headers
from .compression import decompress
from .errors import CorruptRecordError, InvalidRecordError
from .record import Record

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "RecordsSummary",
    "decode_batch",
    "decode_batch_columns",
    "iter_batches",
    "iter_records",
    "summarize_records",
]

# The most bytes one batch may decompress to. Kafka bounds batches by message.max.bytes (1 MiB
# by default) compressed, not decompressed; 64 MiB leaves room for highly compressible batches
# at the largest sizes operators configure while stopping decompression bombs.
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


class RecordsSummary(NamedTuple):
    """What :func:`summarize_records` learns about one batch without building records.

    Timestamps are as a reader sees them (LogAppendTime: every record has ``max_timestamp``);
    offsets are absolute. For an empty batch (possible after compaction) timestamps and offsets
    are -1.
    """

    count: int
    min_timestamp: int
    max_timestamp: int
    offset_of_max_timestamp: int  # first record holding max_timestamp
    last_offset: int  # offset of the last record
    has_null_key: bool  # compacted topics refuse records without keys
    offset_deltas_contiguous: bool  # deltas are 0, 1, ..., count - 1
    records_size_bytes: int  # the records region, after decompression


def _checked_header(
    buf: bytes | bytearray | memoryview,
    position: int,
    verify_crc: bool,
    header: BatchHeader | None = None,
) -> BatchHeader:
    """The header at ``position`` (parsed unless given), its batch checked whole in ``buf``,
    its CRC when ``verify_crc``, and its record count."""
    if header is None:
        header = parse_header(buf, position)
    check_whole(buf, header)
    if verify_crc:
        check_crc(buf, header)
    if header.records_count < 0:
        raise CorruptRecordError(
            f"record batch at position {position} declares {header.records_count} records"
        )
    return header


def _records_region(
    buf: bytes | bytearray | memoryview, header: BatchHeader, max_decompressed_bytes: int
) -> bytes | memoryview:
    """The batch's records region, decompressed: a view into ``buf`` or new bytes.

    A view only when uncompressed and the C loops run (they copy keys and values out as bytes;
    the pure-Python ones would hand out slices of the view): the caller releases it with
    :func:`_release`, so that a ``bytearray`` buffer is not left locked against resizing.
    """
    start = header.position + RECORD_BATCH_OVERHEAD
    end = header.end_position
    codec = header.compression
    if codec == Compression.NONE and ACCELERATED:
        return memoryview(buf)[start:end]
    with memoryview(buf) as view:
        if codec == Compression.NONE:
            return bytes(view[start:end])
        try:
            return decompress(codec, view[start:end], max_bytes=max_decompressed_bytes)
        except CorruptRecordError as exc:
            # The same class (a DecompressionLimitError stays one: callers with a budget of
            # their own tell it from corruption), with the batch's position.
            raise type(exc)(f"record batch at position {header.position}: {exc}") from None


def _release(data: bytes | memoryview) -> None:
    if isinstance(data, memoryview):
        data.release()


def _decode(
    buf: bytes | bytearray | memoryview,
    position: int,
    verify_crc: bool,
    max_decompressed_bytes: int,
    header: BatchHeader | None = None,
) -> tuple[BatchHeader, list[Record]]:
    header = _checked_header(buf, position, verify_crc, header)
    data = _records_region(buf, header, max_decompressed_bytes)
    override = (
        header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME else None
    )
    try:
        records = decode_records(
            data, header.records_count, header.base_offset, header.base_timestamp, override
        )
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"record batch at position {position}: {exc}") from None
    finally:
        _release(data)
    return header, records


def iter_records(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    verify_crc: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[Record]:
    """Yield the records of the one batch at ``position``.

    The batch is checked and decoded when iteration starts; see :func:`decode_batch`.
    """
    yield from _decode(buf, position, verify_crc, max_decompressed_bytes)[1]


def decode_batch(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    verify_crc: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at ``position``: its header and all its records.

    O(batch size). Bytes after the batch are not looked at.

    Raises:
        CorruptRecordError: truncated batch, CRC mismatch (when ``verify_crc``), corrupt or
            oversized compressed data, or records that do not fit the structure rules above.
        InvalidRecordError: magic other than 2.
        UnsupportedCompressionError: codec id 5-7.
    """
    return _decode(buf, position, verify_crc, max_decompressed_bytes)


def decode_batch_columns(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    verify_crc: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[BatchHeader, RecordColumns]:
    """Decode the batch at ``position`` into its header and five parallel lists.

    The columns (:class:`~stratalog.records.accel.RecordColumns`: ``offsets``, ``timestamps``,
    ``keys``, ``values``, ``headers``) hold what :func:`decode_batch`'s records hold, field by
    field (``columns.offsets[i] == records[i].offset``; keys and values are ``bytes``), without
    creating a ``Record`` per record: the form Arrow arrays, Spark rows and gRPC messages are
    built from, and cheaper than :func:`decode_batch` when the C loops run.
    Same checks and errors as :func:`decode_batch`. O(batch size).

    Raises:
        CorruptRecordError, InvalidRecordError, UnsupportedCompressionError: as decode_batch.
    """
    header = _checked_header(buf, position, verify_crc)
    data = _records_region(buf, header, max_decompressed_bytes)
    override = (
        header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME else None
    )
    try:
        columns = decode_columns(
            data, header.records_count, header.base_offset, header.base_timestamp, override
        )
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"record batch at position {position}: {exc}") from None
    finally:
        _release(data)
    return header, columns


def iter_batches(
    buf: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    allow_partial_tail: bool = False,
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Decode every batch of ``buf``, a concatenation of batches (a fetch response, a segment).

    A partial batch at the end (17 bytes or fewer, or a length field running past the end) is
    an error unless ``allow_partial_tail``, in which case iteration stops before it, as Kafka's
    readers do for the tail of a fetch response or of an active segment. Other errors are those
    of :func:`decode_batch`.
    """
    for header in iter_batch_headers(buf, partial_tail_ok=allow_partial_tail):
        yield _decode(buf, header.position, verify_crc, max_decompressed_bytes, header)


def summarize_records(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    verify_crc: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    require_contiguous_offsets: bool = True,
    header: BatchHeader | None = None,
) -> RecordsSummary:
    """Check every record of the batch at ``position`` and summarize it, without building records.

    ``header``: the batch's header when the caller parsed it already (it is not parsed again;
    the server's validation parses each batch once).

    Applies all the checks of :func:`decode_batch`. With ``require_contiguous_offsets`` (the
    rule for batches from clients) it also requires offset deltas 0, 1, ..., count - 1 and
    ``last_offset_delta == count - 1``; compacted batches from a log have gaps and need False.

    Raises:
        CorruptRecordError, InvalidRecordError, UnsupportedCompressionError: as decode_batch.
        InvalidRecordError: offset deltas not contiguous (only ``require_contiguous_offsets``).
    """
    header = _checked_header(buf, position, verify_crc, header)
    data = _records_region(buf, header, max_decompressed_bytes)
    records_size_bytes = len(data)
    try:
        walk = walk_records(data, header.records_count)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"record batch at position {position}: {exc}") from None
    finally:
        _release(data)
    if require_contiguous_offsets:
        if not walk.offset_deltas_contiguous:
            raise InvalidRecordError(
                f"record batch at position {position}: record offset deltas are not "
                f"0..{walk.count - 1} in order"
            )
        if header.last_offset_delta != walk.count - 1:
            raise InvalidRecordError(
                f"record batch at position {position}: last_offset_delta "
                f"{header.last_offset_delta} does not match {walk.count} records"
            )
    base_offset = header.base_offset
    if walk.count == 0:
        return RecordsSummary(
            0, NO_TIMESTAMP, NO_TIMESTAMP, -1, -1, False, True, records_size_bytes
        )
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        # Every record reads as the append time; the first record is the first to hold it.
        return RecordsSummary(
            walk.count,
            header.max_timestamp,
            header.max_timestamp,
            base_offset + walk.first_offset_delta,
            base_offset + walk.last_offset_delta,
            walk.has_null_key,
            walk.offset_deltas_contiguous,
            records_size_bytes,
        )
    base_timestamp = header.base_timestamp
    return RecordsSummary(
        walk.count,
        base_timestamp + walk.min_timestamp_delta,
        base_timestamp + walk.max_timestamp_delta,
        base_offset + walk.offset_delta_of_max_timestamp,
        base_offset + walk.last_offset_delta,
        walk.has_null_key,
        walk.offset_deltas_contiguous,
        records_size_bytes,
    )
