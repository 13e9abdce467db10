"""The RecordBatch v2 header: its byte layout, a parsed view, validation and in-place patches.

A record batch (Kafka's ``DefaultRecordBatch``, magic 2) is a 61-byte header followed by the
records region (plain, or one compressed stream). Every integer is big-endian::

    offset size field
         0    8 base_offset            first offset of the batch (0 from clients; set by the log)
         8    4 length                 bytes after this field: batch size - 12
        12    4 partition_leader_epoch not covered by the CRC, so the broker may rewrite it
        16    1 magic                  always 2 here
        17    4 crc                    CRC-32C of bytes [21, end of batch), unsigned
        21    2 attributes             bits 0-2 codec, 3 timestamp type, 4 transactional,
                                       5 control, 6 has delete horizon
        23    4 last_offset_delta      last offset - base offset
        27    8 base_timestamp         timestamp of the first record (-1 if none)
        35    8 max_timestamp          max record timestamp, or the append time (LogAppendTime)
        43    8 producer_id            -1 = none
        51    2 producer_epoch         -1 = none
        53    4 base_sequence          -1 = none
        57    4 records_count          number of records (before compression)
        61    … records

The table is written once, as :data:`_FIELDS`; the header struct (:data:`HEADER`), the field
offsets (``*_OFFSET``) and the partial struct a log walk unpacks (:data:`SCAN_FIELDS`) are
derived from it. The storage engine, the CLI and the clients import them from here.

Framing (Kafka's ``FileLogInputStream.nextBatch``): a reader of batches laid back to back, in a
buffer or a ``.log``, applies :func:`check_framing` to each: a size field below 14 is corrupt, a
batch running past the end is a partial tail (a write in progress, or a torn end after a crash),
a magic other than 2 is invalid, a v2 batch below its 61-byte header is corrupt. The walks
themselves, and their tail rules, are :mod:`stratalog.records.batch_walk`'s: every reader of
batches steps through them, so a malformed header gives the same error from any.

This module never decodes records: the produce path of the server (validate, assign offsets,
append) and the walks of the storage engine (find a batch by offset, rebuild an index) need only
headers and checksums. Records are decoded by :mod:`stratalog.records.record`.

Sans-IO: functions take ``bytes``/``bytearray``/``memoryview`` and positions, and return values
or raise :class:`~stratalog.records.errors.RecordError` subclasses.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import TYPE_CHECKING, NamedTuple

from .crc import crc32c
from .errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_FIELD",
    "BASE_OFFSET_OFFSET",
    "COMPRESSION_CODEC_MASK",
    "CONTROL_FLAG_MASK",
    "CRC_OFFSET",
    "DELETE_HORIZON_FLAG_MASK",
    "HEADER",
    "HEADER_SIZE_UP_TO_MAGIC",
    "LENGTH_FIELD",
    "LENGTH_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "MIN_SIZE_FIELD",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "SCAN_FIELDS",
    "SCAN_FIELD_NAMES",
    "SEQUENCE_MAX",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG_MASK",
    "BatchHeader",
    "Compression",
    "TimestampType",
    "check_crc",
    "check_framing",
    "check_whole",
    "compute_crc",
    "decrement_sequence",
    "field_struct",
    "header_struct",
    "increment_sequence",
    "is_intact_legacy_message",
    "parse_header",
    "rewrite_crc",
    "set_base_offset",
    "set_log_append_time",
    "set_max_timestamp",
    "set_partition_leader_epoch",
    "set_producer_state",
    "validate_batch",
]

# The header, written once: (field, struct code) in Kafka's order and widths; see the table
# above. BatchHeader's fields, HEADER, the *_OFFSET constants and SCAN_FIELDS all follow it.
_FIELDS = (
    ("base_offset", "q"),  # first offset of the batch
    ("length", "i"),  # bytes after this field: batch size - LOG_OVERHEAD
    ("partition_leader_epoch", "i"),  # outside the CRC: the broker may rewrite it
    ("magic", "b"),  # 2
    ("crc", "I"),  # CRC-32C of [ATTRIBUTES_OFFSET, end of batch), unsigned
    ("attributes", "h"),  # codec, timestamp type, transactional, control, delete horizon
    ("last_offset_delta", "i"),  # last offset - base offset
    ("base_timestamp", "q"),  # first record's timestamp (-1: none)
    ("max_timestamp", "q"),  # max record timestamp, or the append time (LogAppendTime)
    ("producer_id", "q"),  # -1: none
    ("producer_epoch", "h"),  # -1: none
    ("base_sequence", "i"),  # -1: none
    ("records_count", "i"),  # records in the batch (before compression)
)
_FIELD_CODES = dict(_FIELDS)
_FIELD_OFFSETS = {}
_offset = 0
for _name, _code in _FIELDS:
    _FIELD_OFFSETS[_name] = _offset
    _offset += struct.calcsize(">" + _code)
del _name, _code, _offset

# Every field, in one unpack: what BatchHeader is built from.
HEADER = struct.Struct(">" + "".join(code for _, code in _FIELDS))
RECORD_BATCH_OVERHEAD = HEADER.size  # 61
assert RECORD_BATCH_OVERHEAD == 61


def header_struct(*names: str) -> struct.Struct:
    """A struct that unpacks only the header fields ``names`` (in layout order), skipping the
    others with pad bytes: one ``unpack_from`` at a batch's position reads what a caller needs.

    Raises:
        ValueError: a name that is no header field, or names out of layout order.
    """
    codes = []
    position = 0
    for name in names:
        if name not in _FIELD_OFFSETS:
            raise ValueError(f"{name!r} is not a field of the batch header")
        offset = _FIELD_OFFSETS[name]
        if offset < position:
            raise ValueError(f"header fields must be named in layout order: {names}")
        if offset > position:
            codes.append(f"{offset - position}x")
        code = _FIELD_CODES[name]
        codes.append(code)
        position = offset + struct.calcsize(">" + code)
    if position < RECORD_BATCH_OVERHEAD:
        codes.append(f"{RECORD_BATCH_OVERHEAD - position}x")
    return struct.Struct(">" + "".join(codes))


# What a walk of a log reads of each batch header, in one unpack (the 61 bytes; the others
# skipped), in this order.
SCAN_FIELD_NAMES = (
    "base_offset",  # the batch's first offset: offset searches, the base offset guess of a read
    "length",  # the batch's size, and the framing rules
    "magic",  # must be 2
    "crc",  # recovery checks it
    "last_offset_delta",  # last offset = base_offset + last_offset_delta
    "max_timestamp",  # timestamp searches, the time index
    "records_count",  # what a fetch response reports
)
SCAN_FIELDS = header_struct(*SCAN_FIELD_NAMES)
assert SCAN_FIELDS.size == RECORD_BATCH_OVERHEAD


def field_struct(name: str) -> struct.Struct:
    """The struct of the one header field ``name``, to unpack at its ``*_OFFSET``."""
    return struct.Struct(">" + _FIELD_CODES[name])


# The fields read on their own, and their offsets.
BASE_OFFSET_FIELD = field_struct("base_offset")
LENGTH_FIELD = field_struct("length")
_MAGIC_FIELD = field_struct("magic")
BASE_OFFSET_OFFSET = _FIELD_OFFSETS["base_offset"]  # 0
LENGTH_OFFSET = _FIELD_OFFSETS["length"]  # 8
PARTITION_LEADER_EPOCH_OFFSET = _FIELD_OFFSETS["partition_leader_epoch"]  # 12
MAGIC_OFFSET = _FIELD_OFFSETS["magic"]  # 16
CRC_OFFSET = _FIELD_OFFSETS["crc"]  # 17
ATTRIBUTES_OFFSET = _FIELD_OFFSETS["attributes"]  # 21: the CRC covers the batch from here
MAX_TIMESTAMP_OFFSET = _FIELD_OFFSETS["max_timestamp"]  # 35
PRODUCER_ID_OFFSET = _FIELD_OFFSETS["producer_id"]  # 43: then producer_epoch, base_sequence
RECORDS_COUNT_OFFSET = _FIELD_OFFSETS["records_count"]  # 57

LOG_OVERHEAD = LENGTH_OFFSET + LENGTH_FIELD.size  # 12: the bytes `length` does not count
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1  # 17: enough to learn a batch's size and magic
# Kafka rejects a size field below the legacy v0 record overhead (LegacyRecord.RECORD_OVERHEAD_V0)
# before looking at the magic.
MIN_SIZE_FIELD = 14
MAGIC = 2

# A legacy (v0/v1) message, which shares the first 17 bytes' layout with a batch: offset (8),
# size (4), crc (4: zlib CRC-32 of everything after it), magic (1), ...
_LEGACY_CRC_OFFSET = LOG_OVERHEAD  # 12
_LEGACY_MAGICS = (0, 1)

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
# producer_id, producer_epoch, base_sequence: adjacent in the layout, patched together.
_PRODUCER_STATE = struct.Struct(
    ">" + "".join(_FIELD_CODES[name] for name in ("producer_id", "producer_epoch", "base_sequence"))
)
assert _FIELD_OFFSETS["records_count"] == PRODUCER_ID_OFFSET + _PRODUCER_STATE.size

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
#: The largest sequence number: a batch's base_sequence is an int32, and 0 follows this one.
SEQUENCE_MAX = (1 << 31) - 1

# Attribute bits (low byte; the high byte is written 0).
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40


class Compression(enum.IntEnum):
    """Codec ids of attribute bits 0-2 (Kafka's ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    """Attribute bit 3. (The gRPC API numbers these 1 and 2; the servicer translates.)"""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


# The enum members by value, indexed: an Enum call per header property costs a few µs of every
# append (three timestamp_type reads per batch validated).
_COMPRESSIONS = tuple(Compression)
_TIMESTAMP_TYPES = tuple(TimestampType)


class BatchHeader(NamedTuple):
    """A parsed batch header, plus the position it was read from.

    A plain tuple so that parsing costs one ``struct.unpack_from`` and one tuple build: headers are
    parsed on every fetch scan and every append.
    """

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @property
    def size_bytes(self) -> int:
        """Whole batch size in bytes, header included."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def end_position(self) -> int:
        """Position just past this batch."""
        return self.position + self.length + LOG_OVERHEAD

    @property
    def compression(self) -> Compression:
        codec = self.attributes & COMPRESSION_CODEC_MASK
        try:
            return _COMPRESSIONS[codec]
        except IndexError:
            raise UnsupportedCompressionError(
                f"batch at position {self.position} names compression codec id {codec}; "
                "Kafka defines 0 (none), 1 (gzip), 2 (snappy), 3 (lz4) and 4 (zstd)"
            ) from None

    @property
    def timestamp_type(self) -> TimestampType:
        return _TIMESTAMP_TYPES[(self.attributes & TIMESTAMP_TYPE_MASK) >> 3]

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)


assert BatchHeader._fields[:-1] == tuple(name for name, _ in _FIELDS)


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping past :data:`SEQUENCE_MAX` to 0 (Kafka's
    ``DefaultRecordBatch.incrementSequence``): the sequence of a batch's last record, or the
    next sequence a producer sends. Producers and the broker must wrap alike. O(1)."""
    if sequence > SEQUENCE_MAX - increment:
        return increment - (SEQUENCE_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement``, wrapping below 0 to :data:`SEQUENCE_MAX` (Kafka's
    ``DefaultRecordBatch.decrementSequence``; for a last sequence of -1 it gives
    ``SEQUENCE_MAX``, as Kafka's does). O(1)."""
    if sequence < decrement:
        return SEQUENCE_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _of(where: str) -> str:
    return f" of {where}" if where else ""


def _magic_error(position: int, magic: int, where: str) -> InvalidRecordError:
    return InvalidRecordError(
        f"record batch at position {position}{_of(where)} has magic {magic}; "
        f"only magic {MAGIC} (RecordBatch v2) is supported"
    )


def _undersized_error(position: int, size_bytes: int, where: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"record batch at position {position}{_of(where)} declares {size_bytes} bytes, less than "
        f"the {RECORD_BATCH_OVERHEAD}-byte batch header"
    )


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the v2 header at ``position`` of ``buf``; does not check the CRC.

    Raises:
        CorruptRecordError: fewer than 61 bytes are left, or the length field is impossible.
        InvalidRecordError: the magic is not 2.
    """
    available = len(buf) - position
    if position < 0 or available < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"record batch header at position {position} is truncated: "
            f"{max(available, 0)} bytes available, {RECORD_BATCH_OVERHEAD} needed"
        )
    header = BatchHeader(*HEADER.unpack_from(buf, position), position)
    if header.magic != MAGIC:
        raise _magic_error(position, header.magic, "")
    if header.length + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD:
        raise _undersized_error(position, header.length + LOG_OVERHEAD, "")
    return header


def check_framing(
    buf: bytes | bytearray | memoryview,
    position: int,
    end: int,
    buf_start: int = 0,
    where: str = "",
) -> bool:
    """Kafka's framing rules for the batch at ``position`` of a log or buffer ending at ``end``.

    ``buf`` holds the bytes from position ``buf_start`` on (0: the buffer is the whole log), at
    least the 17 bytes at ``position``, and the whole batch if it ends by ``end``. ``where``
    names the log in error messages ("at position 90 of <where>").

    Returns True when a whole batch of magic 2 and at least 61 bytes lies in ``[position,
    end)``; False when the batch runs past ``end``: a partial tail, which ends a walk quietly (a
    write in progress, a torn end, a file that shrank). Rules, in Kafka's order
    (``FileLogInputStream.nextBatch``, then ``DefaultRecordBatch``): size field, end, magic,
    header size.

    Raises:
        CorruptRecordError: a size field below 14, or a v2 batch smaller than its 61-byte header.
        InvalidRecordError: a magic other than 2 (legacy v0/v1 messages included).
    """
    relative = position - buf_start
    (length,) = LENGTH_FIELD.unpack_from(buf, relative + LENGTH_OFFSET)
    if length < MIN_SIZE_FIELD:
        raise CorruptRecordError(
            f"found record size {length} at position {position}{_of(where)}, smaller than the "
            f"minimum record overhead ({MIN_SIZE_FIELD})"
        )
    size_bytes = length + LOG_OVERHEAD
    if position > end - size_bytes:
        return False
    (magic,) = _MAGIC_FIELD.unpack_from(buf, relative + MAGIC_OFFSET)
    if magic != MAGIC:
        raise _magic_error(position, magic, where)
    if size_bytes < RECORD_BATCH_OVERHEAD:
        raise _undersized_error(position, size_bytes, where)
    return True


def is_intact_legacy_message(message: bytes | bytearray | memoryview) -> bool:
    """Whether ``message`` (from its offset field to its end) is a legacy v0/v1 message whose
    zlib CRC-32 holds: data in an older format, not corruption to cut away.
    """
    if len(message) <= HEADER_SIZE_UP_TO_MAGIC:
        return False
    with memoryview(message) as view:
        if view[MAGIC_OFFSET] not in _LEGACY_MAGICS:
            return False
        (stored,) = _UINT32.unpack_from(view, _LEGACY_CRC_OFFSET)
        return zlib.crc32(view[MAGIC_OFFSET:]) == stored


def compute_crc(buf: bytes | bytearray | memoryview, position: int, size_bytes: int) -> int:
    """CRC-32C of the batch at ``position``: bytes [position + 21, position + size_bytes)."""
    with memoryview(buf) as view:
        return crc32c(view[position + ATTRIBUTES_OFFSET : position + size_bytes])


def validate_batch(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the batch at ``position`` and check that it is whole and its CRC matches.

    This is Kafka's ``ensureValid``: size and checksum only; records are not decoded.

    Raises:
        CorruptRecordError: truncated, impossible length, or CRC mismatch.
        InvalidRecordError: magic other than 2.
    """
    header = parse_header(buf, position)
    check_whole(buf, header)
    check_crc(buf, header)
    return header


def check_whole(buf: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """Check that the batch of an already parsed ``header`` lies whole in ``buf``.

    Raises:
        CorruptRecordError: ``buf`` ends before the batch does.
    """
    available = len(buf) - header.position
    if header.size_bytes > available:
        raise CorruptRecordError(
            f"record batch at position {header.position} declares {header.size_bytes} bytes "
            f"but only {available} are present"
        )


def check_crc(buf: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """Check the CRC of the whole batch of an already parsed ``header`` (no second parse).

    Raises:
        CorruptRecordError: the stored and the computed CRC-32C differ.
    """
    actual = compute_crc(buf, header.position, header.size_bytes)
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at position {header.position} ({header.size_bytes} bytes) fails its "
            f"CRC-32C check: stored 0x{header.crc:08x}, computed 0x{actual:08x}"
        )


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Write ``base_offset`` into the batch at ``position``. Not covered by the CRC."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Write the partition leader epoch of the batch at ``position``. Not covered by the CRC."""
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def rewrite_crc(buf: bytearray | memoryview, position: int, size_bytes: int) -> int:
    """Recompute and store the CRC of the batch at ``position``; returns the new CRC."""
    crc = compute_crc(buf, position, size_bytes)
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)
    return crc


def set_producer_state(
    buf: bytearray | memoryview,
    position: int,
    size_bytes: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    """Write the producer id, epoch and base sequence of the batch at ``position`` and
    recompute the CRC (the three fields are covered by it): Kafka's
    ``MemoryRecordsBuilder.reopenAndRewriteProducerState``, what an idempotent producer does to
    a batch it sends again under a new producer id or epoch, its sequences restarted."""
    _PRODUCER_STATE.pack_into(
        buf, position + PRODUCER_ID_OFFSET, producer_id, producer_epoch, base_sequence
    )
    rewrite_crc(buf, position, size_bytes)


def set_max_timestamp(
    buf: bytearray | memoryview,
    position: int,
    size_bytes: int,
    timestamp_type: TimestampType,
    max_timestamp: int,
) -> None:
    """Kafka's ``setMaxTimestamp``: the timestamp-type attribute bit, ``max_timestamp`` and the
    CRC (both fields are covered by it) of the batch at ``position``."""
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    rewrite_crc(buf, position, size_bytes)


def set_log_append_time(
    buf: bytearray | memoryview, position: int, size_bytes: int, timestamp_ms: int
) -> None:
    """Stamp the batch at ``position`` with LogAppendTime ``timestamp_ms``, as a broker does.

    Sets the timestamp-type attribute bit, writes ``max_timestamp`` and recomputes the CRC.
    Record timestamp deltas are left as they are: readers of a LogAppendTime batch take every
    record's timestamp from ``max_timestamp``.
    """
    set_max_timestamp(buf, position, size_bytes, TimestampType.LOG_APPEND_TIME, timestamp_ms)


if TYPE_CHECKING:
    from .batch_walk import iter_batch_headers  # noqa: F401 (the re-export below, for checkers)


def __getattr__(name: str) -> object:
    # iter_batch_headers moved to batch_walk.py (which imports this module); imports of it from
    # here keep working.
    if name == "iter_batch_headers":
        from .batch_walk import iter_batch_headers

        return iter_batch_headers
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
