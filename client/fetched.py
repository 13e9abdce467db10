"""Decoding fetched record batches on the client: what a consumer does with RECORD_BATCHES.

A fetch in FETCH_FORMAT_RECORD_BATCHES returns Kafka v2 batches byte for byte as the log stores
them. The client decodes them with the shared codec (:mod:`stratalog.records`), which verifies
each batch's CRC-32C, so the records a consumer sees are exactly what was appended, checked end
to end. On the way, as Kafka's consumer (``CompletedFetch``) does, it:

* skips records below the requested offset (the first batch may start before it);
* skips control batches (transaction markers are not application records);
* with READ_COMMITTED, skips the batches of aborted transactions: a transactional batch whose
  producer id has an aborted transaction starting at or before the batch's last offset is
  dropped, until that producer's ABORT marker is passed.

The result is one :class:`ConsumedBatch` per data batch: the batch-level view that a fast
consumer iterates (records are :class:`stratalog.records.Record` values, no per-record wrapper),
with column accessors for code that wants lists of values or offsets.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from stratalog.records import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    LOG_OVERHEAD,
    ControlRecordType,
    Header,
    Record,
    TimestampType,
    decode_batch,
    decode_control_key,
)
from stratalog.records import CorruptRecordError as RecordCorruptError

from .types import AbortedTransaction, ConsumerRecord

__all__ = ["ConsumedBatch", "decode_fetched"]

_LENGTH_END = LOG_OVERHEAD  # base offset (8) + length (4): enough to find the batch's end


@dataclass(slots=True)
class ConsumedBatch:
    """The records of one fetched batch that a consumer should see, in offset order.

    ``records`` holds :class:`stratalog.records.Record` values (offset, timestamp, key, value,
    headers); ``timestamp_type`` is the batch's. ``next_offset`` is the offset after the batch's
    last record (where reading continues, even when trailing records were skipped).
    ``high_watermark`` is the partition's end as the fetch saw it. Not thread-safe (plain data).
    """

    topic: str
    partition: int
    timestamp_type: TimestampType
    next_offset: int
    high_watermark: int
    records: list[Record] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    @property
    def offsets(self) -> list[int]:
        """The records' offsets."""
        return [r.offset for r in self.records]

    @property
    def timestamps(self) -> list[int]:
        """The records' timestamps in ms."""
        return [r.timestamp for r in self.records]

    @property
    def keys(self) -> list[bytes | None]:
        """The records' keys (``None`` for null keys)."""
        return [r.key for r in self.records]

    @property
    def values(self) -> list[bytes | None]:
        """The records' values (``None`` for tombstones)."""
        return [r.value for r in self.records]

    @property
    def headers(self) -> list[tuple[Header, ...]]:
        """The records' headers."""
        return [r.headers for r in self.records]

    def consumer_records(self) -> list[ConsumerRecord]:
        """The records as :class:`ConsumerRecord` tuples (with topic and partition)."""
        new = tuple.__new__
        topic, partition, timestamp_type = self.topic, self.partition, self.timestamp_type
        return [
            new(
                ConsumerRecord,
                (topic, partition, r.offset, r.timestamp, timestamp_type, r.key, r.value,
                 r.headers),
            )
            for r in self.records
        ]


class _AbortedFilter:
    """Kafka's consumer-side READ_COMMITTED filter over one fetch response's batches."""

    __slots__ = ("_aborted_producer_ids", "_pending")

    def __init__(self, aborted: Iterable[AbortedTransaction]) -> None:
        self._pending = [(a.first_offset, a.producer_id) for a in aborted]
        heapq.heapify(self._pending)
        self._aborted_producer_ids: set[int] = set()

    def skip(self, header: object, records: Sequence[Record]) -> bool:
        """Whether the batch is dropped; a control batch updates the aborted set."""
        last_offset = header.last_offset  # type: ignore[attr-defined]
        pending = self._pending
        while pending and pending[0][0] <= last_offset:
            self._aborted_producer_ids.add(heapq.heappop(pending)[1])
        producer_id = header.producer_id  # type: ignore[attr-defined]
        if header.is_control:  # type: ignore[attr-defined]
            if records and producer_id in self._aborted_producer_ids:
                _, control_type = decode_control_key(records[0].key)
                if control_type == ControlRecordType.ABORT:
                    self._aborted_producer_ids.discard(producer_id)
            return True
        return header.is_transactional and producer_id in self._aborted_producer_ids  # type: ignore[attr-defined]


def decode_fetched(
    topic: str,
    partition: int,
    data: bytes,
    from_offset: int,
    high_watermark: int,
    *,
    aborted_transactions: Sequence[AbortedTransaction] = (),
    read_committed: bool = False,
    verify_crc: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[ConsumedBatch]:
    """Decode the concatenated batches of one fetch response into consumable batches.

    Batches with nothing left to show (all below ``from_offset``, control, aborted) still count
    for the returned batches' ``next_offset``: the last element's ``next_offset`` is where the
    next fetch starts; when every batch was skipped an empty ConsumedBatch carries it.
    A partial batch at the end (a server cut the response) is ignored, as Kafka's readers do.

    Raises:
        stratalog.records.CorruptRecordError: CRC mismatch, truncated or malformed batch
            (``verify_crc=False`` skips only the CRC check).
        stratalog.records.InvalidRecordError, UnsupportedCompressionError: as decode_batch.
    """
    out: list[ConsumedBatch] = []
    filt = _AbortedFilter(aborted_transactions) if read_committed else None
    end = len(data)
    position = 0
    skipped_next_offset = -1
    while end - position >= _LENGTH_END:
        length = int.from_bytes(data[position + 8 : position + 12], "big", signed=True)
        if length < 0:
            raise RecordCorruptError(
                f"fetched batch at position {position} of {topic}-{partition} declares "
                f"length {length}"
            )
        if position + LOG_OVERHEAD + length > end:
            break  # partial tail
        header, records = decode_batch(
            data, position, verify_crc=verify_crc, max_decompressed_bytes=max_decompressed_bytes
        )
        position = header.end_position
        next_offset = header.next_offset
        if next_offset <= from_offset or (filt is not None and filt.skip(header, records)):
            skipped_next_offset = next_offset
            continue
        if header.is_control:
            skipped_next_offset = next_offset
            continue
        if header.base_offset < from_offset:
            records = [r for r in records if r.offset >= from_offset]
        out.append(
            ConsumedBatch(
                topic, partition, header.timestamp_type, next_offset, high_watermark, records
            )
        )
        skipped_next_offset = -1
    if skipped_next_offset >= 0:
        # Trailing skipped batches still move the position forward.
        out.append(
            ConsumedBatch(
                topic, partition, TimestampType.CREATE_TIME, skipped_next_offset, high_watermark
            )
        )
    return out
