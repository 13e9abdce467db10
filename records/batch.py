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

This module never decodes records: the produce path of the server (validate, assign offsets,
append) and the scans of the storage engine (find a batch by offset, rebuild an index) need only
headers and checksums. Records are decoded by :mod:`stratalog.records.record`.

Sans-IO: functions take ``bytes``/``bytearray``/``memoryview`` and positions, and return values
or raise :class:`~stratalog.records.errors.RecordError` subclasses.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from typing import NamedTuple

from .crc import crc32c
from .errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError

__all__ = [
    "ATTRIBUTES_OFFSET",
    "CRC_OFFSET",
    "HEADER_SIZE_UP_TO_MAGIC",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "RECORD_BATCH_OVERHEAD",
    "BatchHeader",
    "Compression",
    "TimestampType",
    "check_crc",
    "check_whole",
    "compute_crc",
    "iter_batch_headers",
    "parse_header",
    "rewrite_crc",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "validate_batch",
]

# The header, written once. Field order and widths are Kafka's; see the table above.
_HEADER = struct.Struct(
    ">"
    "q"  # base_offset
    "i"  # length
    "i"  # partition_leader_epoch
    "b"  # magic
    "I"  # crc (unsigned)
    "h"  # attributes
    "i"  # last_offset_delta
    "q"  # base_timestamp
    "q"  # max_timestamp
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # base_sequence
    "i"  # records_count
)
RECORD_BATCH_OVERHEAD = _HEADER.size  # 61
assert RECORD_BATCH_OVERHEAD == 61

# Offsets of the fields we read or patch on their own, derived from the layout.
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = struct.calcsize(">q")  # 8
PARTITION_LEADER_EPOCH_OFFSET = struct.calcsize(">qi")  # 12
MAGIC_OFFSET = struct.calcsize(">qii")  # 16
CRC_OFFSET = struct.calcsize(">qiib")  # 17
ATTRIBUTES_OFFSET = struct.calcsize(">qiibI")  # 21
MAX_TIMESTAMP_OFFSET = struct.calcsize(">qiibIhiq")  # 35
RECORDS_COUNT_OFFSET = struct.calcsize(">qiibIhiqqqhi")  # 57

LOG_OVERHEAD = LENGTH_OFFSET + 4  # 12: base_offset + length, the part before `length` counts from
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1  # 17: enough to learn a batch's size and magic
# Kafka rejects a size field below the legacy v0 record overhead before looking at the magic.
MIN_SIZE_FIELD = 14
MAGIC = 2

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

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
    header = BatchHeader(*_HEADER.unpack_from(buf, position), position)
    if header.magic != MAGIC:
        raise InvalidRecordError(
            f"record batch at position {position} has magic {header.magic}; "
            f"only magic {MAGIC} (RecordBatch v2) is supported"
        )
    if header.length + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"record batch at position {position} declares length {header.length}: "
            f"a batch is at least {RECORD_BATCH_OVERHEAD} bytes"
        )
    return header


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


def iter_batch_headers(
    buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None
) -> Iterator[BatchHeader]:
    """Yield the header of every whole batch in ``buf[start:end]``, as Kafka reads a log file.

    Follows ``FileLogInputStream.nextBatch``: iteration stops quietly at a partial tail (17 bytes
    or fewer left, or a batch extending past ``end``), because the tail of an active segment may
    be a write in progress or the torn end of a crash. CRCs are not checked (call
    :func:`validate_batch`); callers that rebuild indexes do.

    Raises:
        CorruptRecordError: a size field below 14 or below the v2 header size.
        InvalidRecordError: a batch with magic other than 2.
    """
    if end is None:
        end = len(buf)
    position = start
    while position < end - HEADER_SIZE_UP_TO_MAGIC:
        _, length = _OFFSET_AND_LENGTH.unpack_from(buf, position)
        if length < MIN_SIZE_FIELD:
            raise CorruptRecordError(
                f"found record size {length} at position {position}, smaller than the "
                f"minimum record overhead ({MIN_SIZE_FIELD})"
            )
        if position > end - LOG_OVERHEAD - length:
            return
        header = parse_header(buf, position)
        yield header
        position += length + LOG_OVERHEAD


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


def set_log_append_time(
    buf: bytearray | memoryview, position: int, size_bytes: int, timestamp_ms: int
) -> None:
    """Stamp the batch at ``position`` with LogAppendTime ``timestamp_ms``, as a broker does.

    Sets the timestamp-type attribute bit, writes ``max_timestamp`` and recomputes the CRC (both
    fields are covered by it). Record timestamp deltas are left as they are: readers of a
    LogAppendTime batch take every record's timestamp from ``max_timestamp``.
    """
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    rewrite_crc(buf, position, size_bytes)
