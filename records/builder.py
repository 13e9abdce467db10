"""Building one RecordBatch v2 from records: what a producer (or a broker writing markers) does.

Records are encoded one by one into a growing records region (offset delta = append order,
timestamp delta = timestamp - first record's timestamp). ``build()`` then compresses the region
if asked, packs the 61-byte header in front (layout in :mod:`stratalog.records.batch`) and
stores the CRC-32C of bytes [21, end). The result is byte-for-byte what Kafka's
``MemoryRecordsBuilder`` writes for the same inputs (uncompressed; compressed streams depend on
the library and level, and any Kafka reader reads them).

Header fields a builder fills in:

* ``base_timestamp`` = the first record's timestamp, ``max_timestamp`` = the largest one;
* ``last_offset_delta`` = records - 1, ``records_count`` = records;
* attributes = codec | timestamp type << 3 | transactional << 4 | control << 5.

An empty builder refuses to build: Kafka's clients never write an empty batch (empty batches
only appear after compaction, and brokers reject client batches without records).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .accel import RecordsWriter
from .batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    HEADER,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    Compression,
    TimestampType,
    field_struct,
)
from .compression import compress, max_compressed_size
from .crc import crc32c
from .record import Header

__all__ = ["BatchBuilder", "build_batch"]

# The CRC is packed last, over the header tail and the payload: batch.py's HEADER is written
# with a CRC of 0, then this struct puts the real one in place.
_CRC_FIELD = field_struct("crc")
_INT32_MAX = (1 << 31) - 1


class BatchBuilder(RecordsWriter):
    """Accumulates records for one batch and builds its bytes.

    Holds the encoded records region (uncompressed) and the running count and timestamps: the
    state of its base :class:`~stratalog.records.accel.RecordsWriter`, which also provides
    :meth:`append` (in C when the extension is built, so appending costs no Python frame).
    Invariant: the region holds ``records_count`` encoded records with offset deltas
    0 .. records_count - 1. ``build()`` does not consume the builder: appending more and building
    again gives the larger batch. Pure in-memory; not thread-safe (one producer task owns it).

    ``append(timestamp, key, value, headers=()) -> int`` encodes one record at the next offset
    delta and returns that delta. ``timestamp`` is in ms, an int64 (the delta from the first
    record's must fit int64). Raises ``ValueError`` if the batch would exceed 2**31 - 1 records
    or a field exceeds what the format holds, leaving the builder unchanged. O(size of the
    record).
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_compression",
        "_compression_level",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
    )

    def __init__(
        self,
        *,
        compression: Compression = Compression.NONE,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        compression_level: int | None = None,
    ) -> None:
        super().__init__()
        self._compression = Compression(compression)
        self._compression_level = compression_level
        self._attributes = (
            int(self._compression)
            | (int(TimestampType(timestamp_type)) << 3)
            | (TRANSACTIONAL_FLAG_MASK if is_transactional else 0)
            | (CONTROL_FLAG_MASK if is_control else 0)
        )
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int
    ) -> None:
        """The producer id, epoch and base sequence the next :meth:`build` writes (Kafka's
        ``MemoryRecordsBuilder.setProducerState``): an idempotent producer knows a batch's base
        sequence only when the batch is drained, after its records were appended. O(1)."""
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence

    @property
    def estimated_size_bytes(self) -> int:
        """An upper bound of ``len(self.build())`` (exact when uncompressed). O(1).

        For compressed batches this is the worst case of the codec (incompressible records),
        so a producer that caps batches by it never builds a batch over its cap.
        """
        return RECORD_BATCH_OVERHEAD + max_compressed_size(self._compression, len(self._records))

    @property
    def uncompressed_records_bytes(self) -> int:
        """Bytes of the encoded records region before compression."""
        return len(self._records)

    def build(self) -> bytes:
        """The whole batch: header, (compressed) records, CRC. O(size of the records).

        Raises:
            ValueError: no records were appended, or the batch would exceed 2 GiB.
        """
        if self.records_count == 0:
            raise ValueError("cannot build an empty record batch: append at least one record")
        if self._compression == Compression.NONE:
            payload: bytes | bytearray = self._records
        else:
            payload = compress(self._compression, self._records, level=self._compression_level)
        size_bytes = RECORD_BATCH_OVERHEAD + len(payload)
        if size_bytes - LOG_OVERHEAD > _INT32_MAX:
            raise ValueError(f"record batch of {size_bytes} bytes exceeds the int32 length field")
        header = bytearray(RECORD_BATCH_OVERHEAD)
        HEADER.pack_into(
            header,
            0,
            self._base_offset,
            size_bytes - LOG_OVERHEAD,
            self._partition_leader_epoch,
            MAGIC,
            0,  # the CRC, packed below once computed
            self._attributes,
            self.records_count - 1,
            self._base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            self.records_count,
        )
        # The CRC runs over the header tail and then the payload, so the two are never copied
        # into one buffer before the final join.
        with memoryview(header) as view:
            crc = crc32c(payload, crc32c(view[ATTRIBUTES_OFFSET:]))
        _CRC_FIELD.pack_into(header, CRC_OFFSET, crc)
        return b"".join((header, payload))


def build_batch(
    records: Iterable[tuple[int, bytes | None, bytes | None, Sequence[Header]]],
    **builder_kwargs: object,
) -> bytes:
    """Build one batch from ``(timestamp, key, value, headers)`` tuples in one call.

    ``builder_kwargs`` are :class:`BatchBuilder`'s keyword arguments. Raises ``ValueError`` for
    no records.
    """
    builder = BatchBuilder(**builder_kwargs)  # type: ignore[arg-type]
    append = builder.append
    for timestamp, key, value, headers in records:
        append(timestamp, key, value, headers)
    return builder.build()
