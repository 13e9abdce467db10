"""Part of a record batch as a batch of its own: what a point read answers with.

Kafka's fetch returns whole batches, so reading one record of a batch of thousands ships all of
them. A slice is the records a read asks for (from an offset on, at most a count and a byte
budget) re-framed as one valid v2 batch that any Kafka reader reads, the same way Kafka's log
cleaner re-frames the records a compaction keeps (``MemoryRecords.filterTo``)::

    stored batch  base_offset 100, 8 records, lz4          slice from 103, 2 records
    +--------------------------------------------+         +-------------------------------+
    | header: base 100, last_offset_delta 7,     |         | header: base 100 (kept),      |
    |   base_timestamp T, max_timestamp M,       |  ---->  |   last_offset_delta 4,        |
    |   producer 7/0/seq 40, attributes lz4|txn  |         |   base_timestamp T (kept),    |
    | records (compressed): deltas 0 1 2 3 4 ... |         |   max_timestamp max(T+d3,T+d4)|
    +--------------------------------------------+         |   producer 7/0/seq 40 (kept), |
                                                           |   attributes none|txn, count 2|
                                                           | records 3 and 4, byte for byte|
                                                           +-------------------------------+

What is kept, and why:

* **The base offset and base timestamp**, so that the records' offset and timestamp deltas stay
  right and the records are copied as they are (no record is re-encoded). Their first offset
  delta is then above 0, as in a compacted batch: readers compute ``base + delta``.
* **The producer id, epoch and base sequence, the transactional and control flags, the
  timestamp type and the delete-horizon flag, the partition leader epoch**: a READ_COMMITTED
  reader matches the batch against the aborted transactions by its producer id and
  transactional flag, and a record's sequence stays ``base_sequence + offset delta``.
* **LogAppendTime**: ``max_timestamp`` is the append time every record reads as, kept as is.

What changes: ``last_offset_delta`` is the last record taken (a reader that resumes from a
batch's last offset + 1 resumes right after the slice), ``records_count`` the records taken,
``max_timestamp`` their largest timestamp (CreateTime), the codec none (a compressed batch is
decompressed once and its records copied out uncompressed), the length, and the CRC, computed
anew over the new bytes. A slice that takes every record of the batch is the stored batch
itself, bytes unchanged (compressed ones too).

The stored batch's CRC is checked before it is sliced: the slice gets a valid CRC of its own,
which would otherwise hide damage on disk from the reader.

Sans-IO: bytes in, bytes out; errors from :mod:`.errors`. Thread-safe (no state).
"""

from __future__ import annotations

from typing import NamedTuple

from .accel import find_records
from .batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CRC_OFFSET,
    HEADER,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
    check_crc,
    check_whole,
    field_struct,
)
from .compression import decompress
from .crc import crc32c
from .errors import CorruptRecordError

__all__ = ["SlicedBatch", "slice_batch"]

_CRC_FIELD = field_struct("crc")


class SlicedBatch(NamedTuple):
    """The records a read takes from one stored batch, as one whole v2 batch."""

    data: bytes  # a whole batch: the stored one when every record was taken, else a new one
    records_count: int  # records in ``data``
    next_offset: int  # where a read continues: after the last record taken, or after the
    # stored batch when its last record was taken (its last offset may lie past that record)


def slice_batch(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    from_offset: int,
    max_records: int,
    max_bytes: int,
    max_decompressed_bytes: int,
) -> SlicedBatch | None:
    """The records of the batch of ``header`` (parsed at ``header.position`` of ``buf``) from
    ``from_offset`` on: the first whose offset is >= ``from_offset``, then the following ones,
    at most ``max_records`` and, after the first, at most ``max_bytes`` bytes of records.

    None when no record of the batch is at or after ``from_offset``. The batch is checked
    whole and by its CRC first. O(bytes of the records walked) after decompression, which
    decompresses the whole batch (at most ``max_decompressed_bytes``).

    Raises:
        CorruptRecordError: the batch is truncated, fails its CRC, its records' framing does
            not decode, or it decompresses past ``max_decompressed_bytes``.
        UnsupportedCompressionError: an unknown codec.
        ValueError: ``max_records`` below 1 or ``max_bytes`` negative.
    """
    check_whole(buf, header)
    check_crc(buf, header)
    count = header.records_count
    if count < 0:
        raise CorruptRecordError(
            f"record batch at position {header.position} declares {count} records"
        )
    position = header.position
    start = position + RECORD_BATCH_OVERHEAD
    end = header.end_position
    codec = header.compression
    with memoryview(buf) as view:
        if codec == Compression.NONE:
            region: bytes | memoryview = view[start:end]
        else:
            try:
                region = decompress(codec, view[start:end], max_bytes=max_decompressed_bytes)
            except CorruptRecordError as exc:
                raise type(exc)(f"record batch at position {position}: {exc}") from None
        try:
            span = find_records(
                region, count, from_offset - header.base_offset, max_records, max_bytes
            )
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"record batch at position {position}: {exc}") from None
        if span.count == 0:
            return None
        if span.count == count:
            # Every record: the stored batch as it is, compressed or not.
            return SlicedBatch(bytes(view[position:end]), count, header.next_offset)
        records = region[span.start : span.end]
        next_offset = (header.next_offset if span.through_last
                       else header.base_offset + span.last_offset_delta + 1)
        max_timestamp = (header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK
                         else header.base_timestamp + span.max_timestamp_delta)
        batch = bytearray(RECORD_BATCH_OVERHEAD + len(records))
        HEADER.pack_into(
            batch,
            0,
            header.base_offset,
            len(batch) - LOG_OVERHEAD,
            header.partition_leader_epoch,
            header.magic,
            0,  # the CRC, packed below
            header.attributes & ~COMPRESSION_CODEC_MASK,
            span.last_offset_delta,
            header.base_timestamp,
            max_timestamp,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            span.count,
        )
        batch[RECORD_BATCH_OVERHEAD:] = records
        if isinstance(records, memoryview):
            records.release()
        if isinstance(region, memoryview):
            region.release()
    with memoryview(batch) as out:
        _CRC_FIELD.pack_into(batch, CRC_OFFSET, crc32c(out[ATTRIBUTES_OFFSET:]))
    return SlicedBatch(bytes(batch), span.count, next_offset)
