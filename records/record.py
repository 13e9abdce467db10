"""One record of a v2 batch: the value a reader sees, and the record-level encoder and decoder.

Inside a batch, a record stores only what differs from the batch header: its offset and
timestamp are deltas from the batch's base offset and base timestamp, and every integer is a
zig-zag varint (:mod:`stratalog.records.varint`), so a small record costs a few bytes of framing::

    Record =>
      length             varint   bytes after this field
      attributes         int8     unused, written 0 (ignored on read, as Kafka does)
      timestamp_delta    varlong  timestamp - batch base_timestamp
      offset_delta       varint   offset - batch base_offset
      key_length         varint   -1 = null key
      key                bytes
      value_length       varint   -1 = null value
      value              bytes
      headers_count      varint   >= 0
      headers            headers_count x {
                           header_key_length    varint  >= 0 (a header key is never null)
                           header_key           UTF-8
                           header_value_length  varint  -1 = null value
                           header_value         bytes }

Decoding is strict where Kafka's ``DefaultRecord.readFrom`` is: a record must consume exactly
``length`` bytes, counts and lengths may not be negative (other than the -1 of a null), and no
field may run past its record. Header keys that are not valid UTF-8 decode with U+FFFD
replacement characters, as Java's ``new String(bytes, UTF_8)`` does; Kafka never rejects them.

This module works on the records region of one batch (plain bytes, after decompression). Batch
framing, compression and CRCs belong to :mod:`~stratalog.records.builder` and
:mod:`~stratalog.records.reader`. The loops here are the codec's hot path: fields are read
with an inlined one-byte varint fast path and records are built without per-field calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .errors import CorruptRecordError
from .varint import (
    SMALL_VARINT_BYTES,
    SMALL_VARINT_LIMIT,
    read_varint,
    read_varlong,
    varint_bytes,
    varlong_bytes,
)

__all__ = [
    "Header",
    "Record",
    "RecordsSpan",
    "RecordsWalk",
    "decode_records",
    "encode_record",
    "encoded_record_size",
    "find_records",
    "walk_records",
    "wrap_int64",
]

Header = tuple[str, bytes | None]

# Zig-zag decoding of every 1- and 2-byte varint payload (the 7- or 14-bit unsigned value):
# one list index in the hot loops instead of the arithmetic (raw >> 1) ^ -(raw & 1).
_ZIGZAG_14_BITS: list[int] = [(raw >> 1) ^ -(raw & 1) for raw in range(1 << 14)]


_UINT64_MASK = (1 << 64) - 1
_INT64_SIGN = 1 << 63


def wrap_int64(value: int) -> int:
    """``value`` as Java's long arithmetic leaves it: its low 64 bits, two's complement; the
    identity within int64. A record's timestamp is its batch's base timestamp plus its delta,
    both int64s: Kafka's reader (``DefaultRecord.readFrom``) adds them as longs, so a sum past
    int64's ends wraps around. Writers never store such a record (stratalog's validation
    refuses them since issue 13), but a log may hold one; readers that hand timestamps on as
    int64s (protobuf, Arrow) give this value, as a Kafka consumer would see. O(1)."""
    value &= _UINT64_MASK
    return value - (1 << 64) if value >= _INT64_SIGN else value


@dataclass(frozen=True, slots=True)
class Record:
    """A record as a reader sees it: absolute offset and timestamp, key, value and headers.

    ``timestamp`` is the record's own (base timestamp + delta) in CreateTime batches and the
    batch's ``max_timestamp`` in LogAppendTime batches. ``key``/``value`` are ``None`` for
    nulls, distinct from ``b""``. ``headers`` keeps the stored order and duplicates. Immutable
    and hashable; safe to share between threads.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


# Building a frozen dataclass through __init__ costs one object.__setattr__ call per field;
# decoding fills the slots through their descriptors instead, the same end state at half the cost.
_new_record = object.__new__
_set_offset = Record.__dict__["offset"].__set__
_set_timestamp = Record.__dict__["timestamp"].__set__
_set_key = Record.__dict__["key"].__set__
_set_value = Record.__dict__["value"].__set__
_set_headers = Record.__dict__["headers"].__set__


def _headers_bytes(headers: Sequence[Header]) -> bytes:
    out = bytearray(varint_bytes(len(headers)))
    for header_key, header_value in headers:
        key_bytes = header_key.encode("utf-8")
        out += varint_bytes(len(key_bytes))
        out += key_bytes
        if header_value is None:
            out += b"\x01"  # varint -1
        else:
            out += varint_bytes(len(header_value))
            out += header_value
    return bytes(out)


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[Header] = (),
    *,
    _small: list[bytes] = SMALL_VARINT_BYTES,
    _limit: int = SMALL_VARINT_LIMIT,
) -> int:
    """Append one encoded record to ``out``; return the number of bytes appended.

    Raises ``ValueError`` for values the format cannot hold (a delta outside int32/int64, a key,
    value or header over 2 GiB) and ``UnicodeEncodeError`` for header keys that are not valid
    Unicode (lone surrogates); ``out`` is untouched then. O(size of the record).
    ``_small``/``_limit`` only bind the varint table as fast locals; never pass them.
    """
    # The producer's hot path. Small varints come straight from the precomputed table (bound
    # as default arguments: fast local lookups); the body is joined once, then its length and
    # the body are appended, so ``out`` changes only after every field encoded.
    body = b"".join(
        (
            b"\x00",  # attributes
            _small[timestamp_delta + _limit]
            if -_limit <= timestamp_delta < _limit
            else varlong_bytes(timestamp_delta),
            _small[offset_delta + _limit]
            if -_limit <= offset_delta < _limit
            else varint_bytes(offset_delta),
            b"\x01" if key is None else varint_bytes(len(key)) + key,  # -1: null
            b"\x01" if value is None else varint_bytes(len(value)),
            b"" if value is None else value,
            _headers_bytes(headers) if headers else b"\x00",
        )
    )
    size = len(body)
    length_bytes = _small[size + _limit] if size < _limit else varint_bytes(size)
    out += length_bytes
    out += body
    return len(length_bytes) + size


def encoded_record_size(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> int:
    """The exact number of bytes :func:`encode_record` appends for these fields."""
    body_size = (
        1
        + len(varlong_bytes(timestamp_delta))
        + len(varint_bytes(offset_delta))
        + (1 if key is None else len(varint_bytes(len(key))) + len(key))
        + (1 if value is None else len(varint_bytes(len(value))) + len(value))
        + (len(_headers_bytes(headers)) if headers else 1)
    )
    return len(varint_bytes(body_size)) + body_size


def _corrupt(index: int, start: int, what: str) -> CorruptRecordError:
    return CorruptRecordError(f"record {index} (at records position {start}): {what}")


def _ran_out(index: int, start: int, end: int, count: int) -> CorruptRecordError:
    """The error for a read past the end of the records region while reading record ``index``."""
    if start >= end:
        return _corrupt(
            index,
            start,
            f"missing: the batch declares {count} records but its {end} bytes of records "
            f"end after {index}",
        )
    return _corrupt(index, start, f"truncated: the records region ends at {end}")


def _read_headers(
    data: bytes, position: int, record_end: int, index: int, start: int
) -> tuple[tuple[Header, ...], int]:
    """Decode the headers block at ``position`` (the count included); returns (headers, next)."""
    count, position = read_varint(data, position)
    if count < 0 or count > record_end - position:
        # Each header takes at least two bytes, so a count above the bytes left is impossible.
        raise _corrupt(
            index, start, f"invalid header count {count} with {record_end - position} bytes left"
        )
    headers = []
    for _ in range(count):
        key_size, position = read_varint(data, position)
        if key_size < 0 or key_size > record_end - position:
            raise _corrupt(index, start, f"invalid header key length {key_size}")
        header_key = data[position : position + key_size].decode("utf-8", "replace")
        position += key_size
        value_size, position = read_varint(data, position)
        if value_size < 0:
            if value_size != -1:
                raise _corrupt(index, start, f"invalid header value length {value_size}")
            header_value = None
        else:
            if value_size > record_end - position:
                raise _corrupt(index, start, f"header value length {value_size} runs past record")
            header_value = data[position : position + value_size]
            position += value_size
        headers.append((header_key, header_value))
    return tuple(headers), position


def decode_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    timestamp_override: int | None = None,
    *,
    zigzag: list[int] = _ZIGZAG_14_BITS,
    new_record: Callable[[type[Record]], Record] = _new_record,
    set_offset: Callable[[Record, int], None] = _set_offset,
    set_timestamp: Callable[[Record, int], None] = _set_timestamp,
    set_key: Callable[[Record, bytes | None], None] = _set_key,
    set_value: Callable[[Record, bytes | None], None] = _set_value,
    set_headers: Callable[[Record, tuple[Header, ...]], None] = _set_headers,
) -> list[Record]:
    """Decode exactly ``count`` records filling all of ``data`` (a batch's records region).

    ``timestamp_override`` replaces every record timestamp (LogAppendTime batches).
    O(len(data)); never reads past ``data``, never allocates in proportion to ``count``.
    The keyword-only parameters only bind module globals as fast locals; never pass them.

    Raises:
        CorruptRecordError: a record is truncated, over-long, has a bad length or count,
            fewer than ``count`` records fit, or bytes remain after the last one. The message
            names the record index and its position in ``data``.
    """
    records: list[Record] = []
    append = records.append
    end = len(data)
    position = 0
    index = 0
    start = 0
    try:
        for index in range(count):
            start = position  # a read at ``end`` here means a missing record (see below)
            # Each varint below is decoded inline when it takes one or two bytes (lengths under
            # 8 KiB, deltas under 8192: nearly all of them), zig-zag decoding by table lookup.
            # Longer ones go through read_varint/read_varlong.
            b = data[position]
            if b < 0x80:
                size = zigzag[b]
                position += 1
            elif (c := data[position + 1]) < 0x80:
                size = zigzag[(b & 0x7F) | (c << 7)]
                position += 2
            else:
                size, position = read_varint(data, position)
            record_end = position + size
            if size < 0 or record_end > end:
                raise _corrupt(
                    index, start, f"length {size} but {end - position} bytes remain in the batch"
                )
            position += 1  # attributes: unused, ignored as Kafka does
            b = data[position]
            if b < 0x80:
                timestamp_delta = zigzag[b]
                position += 1
            elif (c := data[position + 1]) < 0x80:
                timestamp_delta = zigzag[(b & 0x7F) | (c << 7)]
                position += 2
            else:
                timestamp_delta, position = read_varlong(data, position)
            b = data[position]
            if b < 0x80:
                offset_delta = zigzag[b]
                position += 1
            elif (c := data[position + 1]) < 0x80:
                offset_delta = zigzag[(b & 0x7F) | (c << 7)]
                position += 2
            else:
                offset_delta, position = read_varint(data, position)
            b = data[position]
            if b < 0x80:
                key_size = zigzag[b]
                position += 1
            elif (c := data[position + 1]) < 0x80:
                key_size = zigzag[(b & 0x7F) | (c << 7)]
                position += 2
            else:
                key_size, position = read_varint(data, position)
            if key_size < 0:
                if key_size != -1:
                    raise _corrupt(index, start, f"invalid key length {key_size}")
                key = None
            else:
                if key_size > record_end - position:
                    raise _corrupt(index, start, f"key length {key_size} runs past the record")
                key = data[position : position + key_size]
                position += key_size
            b = data[position]
            if b < 0x80:
                value_size = zigzag[b]
                position += 1
            elif (c := data[position + 1]) < 0x80:
                value_size = zigzag[(b & 0x7F) | (c << 7)]
                position += 2
            else:
                value_size, position = read_varint(data, position)
            if value_size < 0:
                if value_size != -1:
                    raise _corrupt(index, start, f"invalid value length {value_size}")
                value = None
            else:
                if value_size > record_end - position:
                    raise _corrupt(index, start, f"value length {value_size} runs past the record")
                value = data[position : position + value_size]
                position += value_size
            if data[position] == 0:  # no headers: the common case
                headers: tuple[Header, ...] = ()
                position += 1
            else:
                headers, position = _read_headers(data, position, record_end, index, start)
            if position != record_end:
                raise _corrupt(
                    index,
                    start,
                    f"consumed {position - start} bytes but its length field "
                    f"says {record_end - start}",
                )
            record = new_record(Record)
            set_offset(record, base_offset + offset_delta)
            set_timestamp(
                record,
                base_timestamp + timestamp_delta
                if timestamp_override is None
                else timestamp_override,
            )
            set_key(record, key)
            set_value(record, value)
            set_headers(record, headers)
            append(record)
    except IndexError:
        # Only a read past the end of ``data`` gets here; lengths were checked against it.
        raise _ran_out(index, start, end, count) from None
    if position != end:
        raise CorruptRecordError(
            f"incorrect declared batch size: {end - position} bytes remain after the {count} "
            f"declared records (records region of {end} bytes)"
        )
    return records


class RecordsWalk(NamedTuple):
    """What :func:`walk_records` learns about a records region without building records."""

    count: int
    first_offset_delta: int  # -1 when count == 0
    min_timestamp_delta: int  # 0 when count == 0
    max_timestamp_delta: int  # 0 when count == 0
    offset_delta_of_max_timestamp: int  # first record holding the max; -1 when count == 0
    last_offset_delta: int  # -1 when count == 0
    has_null_key: bool
    offset_deltas_contiguous: bool  # deltas are exactly 0, 1, ..., count - 1


def walk_records(data: bytes, count: int, *, zigzag: list[int] = _ZIGZAG_14_BITS) -> RecordsWalk:
    """Check the structure of ``count`` records filling ``data`` without building ``Record``s.

    Same checks and errors as :func:`decode_records` (header keys are not decoded), for the
    server's validation of client batches. O(len(data)). ``zigzag`` is a fast-local binding.
    """
    end = len(data)
    position = 0
    index = 0
    start = 0
    min_ts = max_ts = 0
    offset_of_max = -1
    offset_delta = first_offset_delta = -1
    has_null_key = False
    contiguous = True
    try:
        for index in range(count):
            start = position  # a read at ``end`` here means a missing record (see below)
            b = data[position]
            if b < 0x80:
                size = zigzag[b]
                position += 1
            elif (c := data[position + 1]) < 0x80:
                size = zigzag[(b & 0x7F) | (c << 7)]
                position += 2
            else:
                size, position = read_varint(data, position)
            record_end = position + size
            if size < 0 or record_end > end:
                raise _corrupt(
                    index, start, f"length {size} but {end - position} bytes remain in the batch"
                )
            position += 1  # attributes
            b = data[position]
            if b < 0x80:
                timestamp_delta = zigzag[b]
                position += 1
            elif (c := data[position + 1]) < 0x80:
                timestamp_delta = zigzag[(b & 0x7F) | (c << 7)]
                position += 2
            else:
                timestamp_delta, position = read_varlong(data, position)
            b = data[position]
            if b < 0x80:
                offset_delta = zigzag[b]
                position += 1
            elif (c := data[position + 1]) < 0x80:
                offset_delta = zigzag[(b & 0x7F) | (c << 7)]
                position += 2
            else:
                offset_delta, position = read_varint(data, position)
            if offset_delta != index:
                contiguous = False
            if index == 0:
                min_ts = max_ts = timestamp_delta
                offset_of_max = first_offset_delta = offset_delta
            elif timestamp_delta > max_ts:
                max_ts = timestamp_delta
                offset_of_max = offset_delta
            elif timestamp_delta < min_ts:
                min_ts = timestamp_delta
            b = data[position]
            if b < 0x80:
                key_size = zigzag[b]
                position += 1
            elif (c := data[position + 1]) < 0x80:
                key_size = zigzag[(b & 0x7F) | (c << 7)]
                position += 2
            else:
                key_size, position = read_varint(data, position)
            if key_size < 0:
                if key_size != -1:
                    raise _corrupt(index, start, f"invalid key length {key_size}")
                has_null_key = True
            elif key_size > record_end - position:
                raise _corrupt(index, start, f"key length {key_size} runs past the record")
            else:
                position += key_size
            b = data[position]
            if b < 0x80:
                value_size = zigzag[b]
                position += 1
            elif (c := data[position + 1]) < 0x80:
                value_size = zigzag[(b & 0x7F) | (c << 7)]
                position += 2
            else:
                value_size, position = read_varint(data, position)
            if value_size < 0:
                if value_size != -1:
                    raise _corrupt(index, start, f"invalid value length {value_size}")
            elif value_size > record_end - position:
                raise _corrupt(index, start, f"value length {value_size} runs past the record")
            else:
                position += value_size
            if data[position] == 0:
                position += 1
            else:
                _, position = _read_headers(data, position, record_end, index, start)
            if position != record_end:
                raise _corrupt(
                    index,
                    start,
                    f"consumed {position - start} bytes but its length field "
                    f"says {record_end - start}",
                )
    except IndexError:
        raise _ran_out(index, start, end, count) from None
    if position != end:
        raise CorruptRecordError(
            f"incorrect declared batch size: {end - position} bytes remain after the {count} "
            f"declared records (records region of {end} bytes)"
        )
    return RecordsWalk(
        count,
        first_offset_delta,
        min_ts,
        max_ts,
        offset_of_max,
        offset_delta,
        has_null_key,
        contiguous,
    )


class RecordsSpan(NamedTuple):
    """Where :func:`find_records` found the records asked for, in a records region."""

    start: int  # position of the first record taken; where the walk stopped when none was
    end: int  # position after the last record taken (== start when none was)
    count: int  # records taken; 0 when no record has an offset delta >= the one asked for
    first_offset_delta: int  # -1 when count == 0
    last_offset_delta: int  # -1 when count == 0
    max_timestamp_delta: int  # the largest of the records taken; 0 when count == 0
    through_last: bool  # the region's last record was taken (or no record was left to take)


def _span_field(data: bytes, position: int, read: Callable[[bytes, int], tuple[int, int]],
                index: int, start: int, record_end: int) -> tuple[int, int]:
    """One framing field of record ``index`` (at ``start``), checked to end inside it."""
    try:
        value, position = read(data, position)
    except CorruptRecordError as exc:
        raise _corrupt(index, start, str(exc)) from None
    if position > record_end:
        raise _corrupt(index, start, "its framing runs past its length")
    return value, position


def find_records(
    data: bytes | memoryview, count: int, from_offset_delta: int, max_records: int,
    max_bytes: int, from_timestamp_delta: int = -(1 << 63),
) -> RecordsSpan:
    """The span of the records of ``data`` (a records region declaring ``count`` records) that
    a read from ``from_offset_delta`` takes: the first record whose offset delta is >= it, and
    the records after it (offset deltas increase in a batch), at most ``max_records`` in all
    and, after the first, no more than ``max_bytes`` bytes of records (the first is taken
    whatever its size). With ``from_timestamp_delta`` the first record must also have a
    timestamp delta >= it: a lookup by time, in record order (timestamps may be out of order).

    Only each record's framing is read (its length, timestamp delta and offset delta), never
    its key, value or headers: a point read in a batch of thousands of records walks their
    lengths, and the records taken are copied as they are (:mod:`~stratalog.records.slicing`).
    The walk stops after the last record taken; when it reaches the region's last record, the
    region must end there. O(bytes walked).

    Raises:
        CorruptRecordError: a record's framing does not decode, runs past the record or the
            region, fewer than ``count`` records fill the region, or bytes follow the last.
        ValueError: ``max_records`` below 1 or ``max_bytes`` negative (a programming error).
    """
    if max_records < 1 or max_bytes < 0:
        raise ValueError(f"max_records must be >= 1 and max_bytes >= 0, got {max_records}, "
                         f"{max_bytes}")
    end = len(data)
    position = 0
    taken = 0
    first_delta = last_delta = -1
    max_ts = 0
    span_start = 0
    for index in range(count):
        start = position
        if position >= end:
            raise _corrupt(
                index, start, f"missing: the batch declares {count} records but its {end} bytes "
                f"of records end after {index}"
            )
        size, position = _span_field(data, position, read_varint, index, start, end)
        record_end = position + size
        if size < 0 or record_end > end:
            raise _corrupt(
                index, start, f"length {size} but {end - position} bytes remain in the batch"
            )
        timestamp_delta, position = _span_field(
            data, position + 1, read_varlong, index, start, record_end
        )
        offset_delta, _ = _span_field(data, position, read_varint, index, start, record_end)
        position = record_end
        if taken == 0 and (offset_delta < from_offset_delta
                           or timestamp_delta < from_timestamp_delta):
            continue
        if taken == 0:
            span_start = start
            first_delta = offset_delta
            max_ts = timestamp_delta
        elif record_end - span_start > max_bytes:
            return RecordsSpan(span_start, start, taken, first_delta, last_delta, max_ts, False)
        elif timestamp_delta > max_ts:
            max_ts = timestamp_delta
        taken += 1
        last_delta = offset_delta
        if taken == max_records and index + 1 < count:
            return RecordsSpan(span_start, position, taken, first_delta, last_delta, max_ts,
                               False)
    if position != end:
        raise CorruptRecordError(
            f"incorrect declared batch size: {end - position} bytes remain after the {count} "
            f"declared records (records region of {end} bytes)"
        )
    if taken == 0:
        return RecordsSpan(end, end, 0, -1, -1, 0, True)
    return RecordsSpan(span_start, end, taken, first_delta, last_delta, max_ts, True)
