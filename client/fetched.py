"""Decoding fetched record batches on the client: what a consumer does with RECORD_BATCHES.

A fetch in FETCH_FORMAT_RECORD_BATCHES returns Kafka v2 batches byte for byte as the log stores
them. The client decodes them with the shared codec (:mod:`stratalog.records`), which verifies
each batch's CRC-32C, so the records a consumer sees are exactly what was appended, checked end
to end. On the way, as Kafka's consumer (``CompletedFetch``) does, it:

* skips records below the requested offset (the first batch may start before it);
* skips control batches (transaction markers are not application records);
* with READ_COMMITTED, skips the batches of aborted transactions: a transactional batch whose
  producer id has an aborted transaction starting at or before the batch's last offset is
  dropped, until that producer's ABORT marker is passed
  (:class:`stratalog.records.AbortedTransactionFilter`, which the server's decoded fetches use
  too).

The result is one :class:`ConsumedBatch` per data batch: the batch-level view that a fast
consumer iterates (records are :class:`stratalog.records.Record` values, no per-record wrapper),
with column accessors for code that wants lists of values or offsets.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from itertools import repeat

from stratalog.records import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    AbortedTransactionFilter,
    Header,
    Record,
    TimestampType,
    accel,
    decode_batch,
)
from stratalog.records.batch_walk import iter_batch_headers
from stratalog.records.errors import RecordError
from stratalog.records.reader import decode_batch_columns

from .types import AbortedTransaction, ConsumerRecord

__all__ = ["ConsumedBatch", "decode_fetched"]


# offsets, timestamps, keys, values, headers: parallel lists.
_Columns = tuple[list[int], list[int], list[bytes | None], list[bytes | None], list[tuple]]

# With the compiled codec, batches are decoded into the five lists without building a Record per
# record (records.reader.decode_batch_columns); without it, decode_batch builds Records (as
# cheap as the pure-Python column decoder) and columns are derived only when asked for.
_COLUMNAR = accel.ACCELERATED


class ConsumedBatch:
    """The records of one fetched batch that a consumer should see, in offset order.

    Holds them column-wise: ``offsets``, ``timestamps``, ``keys``, ``values``, ``headers`` are
    parallel lists (``None`` for null keys and values), so a consumer that wants values or
    offsets gets them without one Python object per record. ``records`` builds
    :class:`stratalog.records.Record` values and :meth:`consumer_records` builds
    :class:`ConsumerRecord` tuples when asked. ``timestamp_type`` is the batch's;
    ``next_offset`` is the offset after the batch's last record (where reading continues, even
    when trailing records were skipped); ``high_watermark`` is the partition's end as the fetch
    saw it. Built from either representation (decoded ``Record`` values or columns); the other
    is derived on first use. Not thread-safe (plain data).
    """

    __slots__ = (
        "_columns",
        "_records",
        "high_watermark",
        "next_offset",
        "partition",
        "timestamp_type",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        timestamp_type: TimestampType,
        next_offset: int,
        high_watermark: int,
        records: list[Record] | None = None,
        *,
        columns: _Columns | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.timestamp_type = timestamp_type
        self.next_offset = next_offset
        self.high_watermark = high_watermark
        if records is None and columns is None:
            records = []
        self._records = records
        self._columns = columns

    def __repr__(self) -> str:
        return (
            f"ConsumedBatch({self.topic!r}, {self.partition}, {len(self)} records, "
            f"next_offset={self.next_offset})"
        )

    def __len__(self) -> int:
        if self._columns is not None:
            return len(self._columns[0])
        return len(self._records)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def _column(self, index: int) -> list:  # type: ignore[type-arg]
        columns = self._columns
        if columns is None:
            records = self._records or []
            columns = self._columns = (
                [r.offset for r in records],
                [r.timestamp for r in records],
                [r.key for r in records],
                [r.value for r in records],
                [r.headers for r in records],
            )
        return columns[index]

    @property
    def offsets(self) -> list[int]:
        """The records' offsets."""
        return self._column(0)

    @property
    def timestamps(self) -> list[int]:
        """The records' timestamps in ms."""
        return self._column(1)

    @property
    def keys(self) -> list[bytes | None]:
        """The records' keys (``None`` for null keys)."""
        return self._column(2)

    @property
    def values(self) -> list[bytes | None]:
        """The records' values (``None`` for tombstones)."""
        return self._column(3)

    @property
    def headers(self) -> list[tuple[Header, ...]]:
        """The records' headers."""
        return self._column(4)

    @property
    def records(self) -> list[Record]:
        """The records as :class:`stratalog.records.Record` values."""
        if self._records is None:
            self._records = [
                Record(o, t, k, v, h)
                for o, t, k, v, h in zip(*self._columns, strict=True)  # type: ignore[misc]
            ]
        return self._records

    def from_offset(self, offset: int) -> ConsumedBatch:
        """The same batch without its records below ``offset``. O(log n + kept records)."""
        if self._columns is not None:
            offsets = self._columns[0]
            # Offsets within a batch are ascending, even with compaction gaps.
            start = bisect.bisect_left(offsets, offset)
            columns = tuple(column[start:] for column in self._columns)
            return ConsumedBatch(
                self.topic, self.partition, self.timestamp_type, self.next_offset,
                self.high_watermark, columns=columns,  # type: ignore[arg-type]
            )
        return ConsumedBatch(
            self.topic, self.partition, self.timestamp_type, self.next_offset,
            self.high_watermark, [r for r in self._records or () if r.offset >= offset],
        )

    def iter_consumer_records(self) -> Iterator[ConsumerRecord]:
        """The records as :class:`ConsumerRecord` tuples, built one at a time.

        Cheaper than :meth:`consumer_records` when each record is dropped before the next:
        a record freed before the next is built never reaches the cyclic garbage collector,
        whereas a whole list of them makes it run (and walk them) every few hundred records.
        From columns the iterator is ``map`` over ``zip`` (C loops, no Python frame per record:
        about half the cost of a generator).
        """
        new = tuple.__new__
        topic, partition, timestamp_type = self.topic, self.partition, self.timestamp_type
        if self._records is None:
            offsets, timestamps, keys, values, headers = self._columns  # type: ignore[misc]
            return map(new, repeat(ConsumerRecord), zip(
                repeat(topic), repeat(partition), offsets, timestamps, repeat(timestamp_type),
                keys, values, headers,
            ))
        return (
            new(
                ConsumerRecord,
                (topic, partition, r.offset, r.timestamp, timestamp_type, r.key, r.value,
                 r.headers),
            )
            for r in self._records
        )

    def consumer_records(self) -> list[ConsumerRecord]:
        """The records as :class:`ConsumerRecord` tuples (with topic and partition)."""
        new = tuple.__new__
        topic, partition, timestamp_type = self.topic, self.partition, self.timestamp_type
        if self._records is None:
            offsets, timestamps, keys, values, headers = self._columns  # type: ignore[misc]
            return [
                new(ConsumerRecord, (topic, partition, o, t, timestamp_type, k, v, h))
                for o, t, k, v, h in zip(offsets, timestamps, keys, values, headers, strict=True)
            ]
        return [
            new(
                ConsumerRecord,
                (topic, partition, r.offset, r.timestamp, timestamp_type, r.key, r.value,
                 r.headers),
            )
            for r in self._records
        ]


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
    filt = (AbortedTransactionFilter((a.producer_id, a.first_offset) for a in aborted_transactions)
            if read_committed else None)
    skipped_next_offset = -1
    # The one walk of batch headers (records/batch_walk.py): a partial tail (a server cut the
    # response) ends it quietly; a malformed header raises, named with the partition.
    walk = iter_batch_headers(data)
    while True:
        try:
            header = next(walk, None)
        except RecordError as exc:
            raise type(exc)(f"fetched batch of {topic}-{partition}: {exc}") from exc
        if header is None:
            break
        next_offset = header.next_offset
        if next_offset <= from_offset and filt is None:
            # Wholly before the requested offset (a fetch may start mid-log): not even decoded.
            # (READ_COMMITTED decodes it anyway: its ABORT markers update the aborted set.)
            skipped_next_offset = next_offset
            continue
        if _COLUMNAR:
            header, columns = decode_batch_columns(
                data, header.position, verify_crc=verify_crc,
                max_decompressed_bytes=max_decompressed_bytes,
            )
            batch = ConsumedBatch(
                topic, partition, header.timestamp_type, next_offset, high_watermark,
                columns=columns,
            )
        else:
            header, records = decode_batch(
                data, header.position, verify_crc=verify_crc,
                max_decompressed_bytes=max_decompressed_bytes,
            )
            batch = ConsumedBatch(
                topic, partition, header.timestamp_type, next_offset, high_watermark, records
            )
        if (
            (filt is not None
             and filt.skips(header, batch.keys[0] if header.is_control and len(batch) else None))
            or header.is_control
            or next_offset <= from_offset
        ):
            skipped_next_offset = next_offset
            continue
        if header.base_offset < from_offset:
            batch = batch.from_offset(from_offset)
        out.append(batch)
        skipped_next_offset = -1
    if skipped_next_offset >= 0:
        # Trailing skipped batches still move the position forward.
        out.append(
            ConsumedBatch(
                topic, partition, TimestampType.CREATE_TIME, skipped_next_offset, high_watermark
            )
        )
    return out
