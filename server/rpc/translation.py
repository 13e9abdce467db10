"""broker.proto's messages to the engine's values and back: records, batches, topics.

The storage engine speaks Kafka's record batches and its own description objects; clients speak
broker.proto. Everything that turns one into the other lives here, with no I/O and no event
loop, so that each translation is tested on its own (tests/unit/server/test_translation.py)::

    Produce.records (proto Records)  --encode_records-->      one Kafka v2 batch, base offset 0
                                                              (with the producer fields if set)
    stored batches (bytes)           --decode_records_into--> FetchResponse.records, bounded
                                                              (aborted records dropped for
                                                              READ_COMMITTED)
    TopicDescription (engine)        --topic_message-->       broker_pb2.TopicDescription
    TimestampType (records)          --PROTO_TIMESTAMP_TYPES--> broker_pb2.TimestampType

A request that cannot be translated (an unknown codec, a record the format cannot hold) raises
:class:`BadRequestError`, which names the request's field; the servicer's ``_rpc`` wrapper turns
it into ``INVALID_ARGUMENT``. A stored batch that does not decode is damage on disk:
:class:`~stratalog.server.storage.errors.StorageError`.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from os import PathLike
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import grpc

from stratalog.records.aborted_filter import AbortedTransactionFilter
from stratalog.records.batch import Compression, TimestampType
from stratalog.records.builder import BatchBuilder
from stratalog.records.errors import RecordError
from stratalog.records.reader import decode_batch_columns
from stratalog.records.record import wrap_int64
from stratalog.server.rpc import status
from stratalog.server.storage.errors import StorageError
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.metadata import ClusterMetadata
    from stratalog.server.storage.log_manager import TopicDescription
    from stratalog.server.storage.txn_index import AbortedTxn

__all__ = [
    "PRODUCER_EPOCH_MAX",
    "PROTO_TIMESTAMP_TYPES",
    "BadRequestError",
    "CleanerPosition",
    "CleanerPositions",
    "DecodedRecords",
    "ProducerFields",
    "decode_records_into",
    "encode_records",
    "metadata_message",
    "topic_message",
]

#: A producer epoch is an int16 in the batch header (Kafka's Short.MAX_VALUE).
PRODUCER_EPOCH_MAX = 32767

#: Records' TimestampType (Kafka's attribute bit: 0 CreateTime, 1 LogAppendTime) to the proto's
#: enum, which keeps 0 for "unspecified".
PROTO_TIMESTAMP_TYPES = {
    TimestampType.CREATE_TIME: broker_pb2.CREATE_TIME,
    TimestampType.LOG_APPEND_TIME: broker_pb2.LOG_APPEND_TIME,
}
_Header = broker_pb2.Header


class BadRequestError(Exception):
    """A request whose shape is wrong: becomes INVALID_ARGUMENT naming ``field``.

    ``reason`` is an ErrorReason sent with INVALID_ARGUMENT (INVALID_REQUEST by default).
    """

    def __init__(self, field: str, message: str, reason: str = "INVALID_REQUEST") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = reason

    def to_status(self) -> grpc.Status:
        return status.invalid_request(str(self), self.reason, {"field": self.field})


# ------------------------------------------------------------------------ produce


class ProducerFields(NamedTuple):
    """The producer fields of a records-form Produce, for the batch header (Kafka's names)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool

    @classmethod
    def of_request(
        cls, producer_id: int | None, producer_epoch: int, base_sequence: int, transactional: bool
    ) -> ProducerFields | None:
        """The fields of a ProduceRequest (None for a plain produce: ``producer_id`` unset),
        range-checked against what a batch header holds.

        Raises:
            BadRequestError: naming the field: a negative producer id, an epoch outside
                0..32767, a negative base sequence, or epoch, sequence or the transactional
                flag set without a producer id.
        """
        if producer_id is None:
            for name, value in (("producer_epoch", producer_epoch),
                                ("base_sequence", base_sequence),
                                ("transactional", transactional)):
                if value:
                    raise BadRequestError(
                        name, f"is set ({value}) but producer_id is not: an idempotent or "
                        "transactional produce sets producer_id (from InitProducerId)"
                    )
            return None
        if producer_id < 0:
            raise BadRequestError("producer_id", f"must be >= 0, got {producer_id}")
        if not 0 <= producer_epoch <= PRODUCER_EPOCH_MAX:
            raise BadRequestError(
                "producer_epoch", f"must be in 0..{PRODUCER_EPOCH_MAX} (an int16), got "
                f"{producer_epoch}"
            )
        if base_sequence < 0:
            raise BadRequestError("base_sequence", f"must be >= 0, got {base_sequence}")
        return cls(producer_id, producer_epoch, base_sequence, transactional)


def encode_records(
    records: Sequence[broker_pb2.Record],
    compression: int,
    now_ms: int,
    producer: ProducerFields | None = None,
) -> bytes:
    """The Produce ``records`` form as one Kafka v2 batch (base offset 0), as a client would.

    A record without a timestamp gets ``now_ms`` (the server's clock at the append); a key,
    value or header value left unset is null. With ``producer`` the batch carries its producer
    id, epoch, base sequence and transactional flag, as a producer's batch does (the log then
    deduplicates and orders it); without, none (-1s). ~1 µs a record plus the codec's work: the
    servicer's placement (``append_placement.py``) decides whether this runs on the loop.

    Raises:
        BadRequestError: an unknown codec (field ``compression``), or a record the format
            cannot hold (field ``records[i]``, reason INVALID_RECORD).
    """
    try:
        codec = Compression(compression)
    except ValueError:
        raise BadRequestError(
            "compression", f"unknown codec {compression}; one of {[int(c) for c in Compression]}"
        ) from None
    if producer is None:
        builder = BatchBuilder(compression=codec)
    else:
        builder = BatchBuilder(compression=codec, **producer._asdict())
    append = builder.append
    for index, record in enumerate(records):
        timestamp = record.timestamp if record.HasField("timestamp") else now_ms
        key = record.key if record.HasField("key") else None
        value = record.value if record.HasField("value") else None
        headers = [
            (header.key, header.value if header.HasField("value") else None)
            for header in record.headers
        ]
        try:
            append(timestamp, key, value, headers)
        except ValueError as exc:
            raise BadRequestError(f"records[{index}]", str(exc), "INVALID_RECORD") from None
    return builder.build()


# ------------------------------------------------------------------------ fetch


class DecodedRecords(NamedTuple):
    """What :func:`decode_records_into` added, and where the next fetch starts."""

    next_offset: int  # one past the last batch decoded (the offset asked for if none was)
    records_added: int
    bytes_used: int  # bytes of the stored batches decoded, from the start of the data


def decode_records_into(
    out: Any,
    data: bytes,
    offset: int,
    max_decoded_bytes: int,
    aborted_transactions: Sequence[AbortedTxn] | None = None,
    *,
    positions: Sequence[int] | None = None,
) -> DecodedRecords:
    """Append the records of the stored batches ``data`` with offset >= ``offset`` to ``out``
    (a repeated ``broker_pb2.Record``, such as ``FetchResponse.records``).

    ``positions``: where each batch of ``data`` starts, when the walk that produced ``data``
    found them (:func:`~stratalog.records.batch_walk.slice_below`); the batches are decoded
    from there. Without, each batch starts where the one before ends.

    Control batches (transaction markers) are skipped, as Kafka's consumers skip them. With
    ``aborted_transactions`` (a READ_COMMITTED fetch's, from the ``.txnindex``; an empty
    sequence counts) the batches of aborted transactions are skipped too, by Kafka's consumer
    algorithm (:class:`~stratalog.records.AbortedTransactionFilter`). Decoding stops after the
    batch whose keys and values took the records added past ``max_decoded_bytes``: compressed
    batches may decode to far more than they store, and a response must stay under the gRPC
    message limit. The first batch with records is always whole. A null key, value or header
    value leaves the optional field unset. A stored timestamp outside int64 (a log written
    before validation refused them) is wrapped to 64 bits, the value Kafka's reader sees.

    Raises:
        StorageError: a batch does not decode (it passed validation when it was written:
            damage on disk), naming its position in ``data``.
    """
    next_offset = offset
    added = 0
    decoded_bytes = 0
    position = 0
    end = len(data)
    add = out.add
    skips = (None if aborted_transactions is None else AbortedTransactionFilter(
        (txn.producer_id, txn.first_offset) for txn in aborted_transactions).skips)
    next_start = iter(positions).__next__ if positions is not None else None
    while position < end and (added == 0 or decoded_bytes <= max_decoded_bytes):
        if next_start is not None:
            position = next_start()
        try:
            header, columns = decode_batch_columns(data, position)
            offsets, timestamps, keys, values, headers = columns
            # Under READ_COMMITTED control batches go through the filter too: an ABORT marker
            # ends its producer's aborted transaction.
            skipped = header.is_control if skips is None else skips(
                header, keys[0] if header.is_control and keys else None)
        except RecordError as exc:
            raise StorageError(f"stored batch at fetch position {position}: {exc}") from exc
        position = header.end_position
        next_offset = header.last_offset + 1
        if skipped:
            continue
        timestamp_type = PROTO_TIMESTAMP_TYPES[header.timestamp_type]
        # Only the first batch may start below the offset; offsets increase within a batch.
        first = bisect.bisect_left(offsets, offset) if offsets and offsets[0] < offset else 0
        start = len(out)
        try:
            decoded_bytes += _add_records(
                add, first, offsets, timestamps, keys, values, headers, timestamp_type
            )
        except ValueError:
            # A timestamp outside int64 (base + delta): validation refuses them, but a log
            # written before it did, or by another writer, may hold one. Kafka's reader adds
            # the two as Java longs, which wrap around; the answer gives what it would read
            # (docs/api.md), instead of failing every read of the partition.
            del out[start:]
            decoded_bytes += _add_records(
                add, first, offsets, [wrap_int64(t) for t in timestamps], keys, values,
                headers, timestamp_type,
            )
        added += len(offsets) - first
    return DecodedRecords(next_offset, added, position)


def _add_records(
    add: Any,
    first: int,
    offsets: Sequence[int],
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Any],
    timestamp_type: int,
) -> int:
    """Add records ``first`` onwards of one batch's columns with ``add``; returns the bytes
    of their keys and values. ValueError (from protobuf): a value outside its field's range;
    the records added before it stay added."""
    decoded_bytes = 0
    for i in range(first, len(offsets)):
        key = keys[i]
        value = values[i]
        decoded_bytes += (len(key) if key else 0) + (len(value) if value else 0)
        record_headers = headers[i]
        # None leaves an optional field unset: a null key, value or header value.
        add(
            offset=offsets[i],
            timestamp=timestamps[i],
            key=key,
            value=value,
            headers=[_Header(key=k, value=v) for k, v in record_headers]
            if record_headers else None,
            timestamp_type=timestamp_type,
        )
    return decoded_bytes


# ------------------------------------------------------------------------ topics


class CleanerPosition(Protocol):
    """What a partition description says of the log cleaner (the engine's
    ``CleanerPartitionStatus`` has these fields and more)."""

    @property
    def cleaned_offset(self) -> int: ...
    @property
    def dirty_ratio(self) -> float: ...
    @property
    def last_clean_ms(self) -> int: ...


#: Partition -> the cleaner's position in it, for the partitions of a compacted topic.
CleanerPositions = Mapping[int, CleanerPosition]


def topic_message(
    description: TopicDescription,
    log_dirs: Sequence[str | PathLike[str]],
    cleaner: CleanerPositions | None = None,
) -> broker_pb2.TopicDescription:
    """The engine's description of a topic and its partitions as broker.proto's message.

    ``log_dir`` says which of the server's log directories holds a partition without naming
    its path, which clients must not learn (docs/api.md): the index of the directory in
    ``log_dirs`` (the server's ``log_dirs`` setting, in its order; the engine's paths), as a
    decimal string, "0" for the first. ``cleaner`` gives the partitions of a compacted topic
    their ``cleaned_offset``, ``dirty_ratio`` and ``last_clean_ms``; a partition without a
    position leaves ``cleaned_offset`` unset.
    """
    index_of = {str(directory): str(index) for index, directory in enumerate(log_dirs)}
    message = broker_pb2.TopicDescription(
        name=description.name,
        configs=dict(description.configs),
        partitions=[
            broker_pb2.PartitionDescription(
                partition=p.partition,
                log_start_offset=p.log_start_offset,
                log_end_offset=p.log_end_offset,
                size_bytes=p.size_bytes,
                segment_count=p.segment_count,
                # "": a partition of a cluster topic that this server does not hold.
                log_dir=index_of[str(p.log_dir)] if p.log_dir else "",
                max_timestamp=p.max_timestamp,
            )
            for p in description.partitions
        ],
        overridden_configs=list(description.overridden_configs),
    )
    for partition_message in message.partitions if cleaner else ():
        position = cleaner.get(partition_message.partition)
        if position is not None:
            partition_message.cleaned_offset = position.cleaned_offset
            partition_message.dirty_ratio = position.dirty_ratio
            partition_message.last_clean_ms = position.last_clean_ms
    return message


def metadata_message(metadata: ClusterMetadata) -> broker_pb2.MetadataResponse:
    """The serving layer's Metadata answer (server/metadata.py) as broker.proto's message,
    field for field."""
    return broker_pb2.MetadataResponse(
        node_id=metadata.node_id,
        controller_id=metadata.controller.node_id,
        controller_epoch=metadata.controller.epoch,
        brokers=[broker_pb2.BrokerMetadata(node_id=b.node_id, address=b.address, rack=b.rack)
                 for b in metadata.brokers],
        topics=[
            broker_pb2.TopicMetadata(name=topic.name, partitions=[
                broker_pb2.PartitionMetadata(
                    partition=p.partition, leader=p.leader, leader_epoch=p.leader_epoch,
                    replicas=p.replicas, isr=p.isr,
                )
                for p in topic.partitions
            ])
            for topic in metadata.topics
        ],
    )
