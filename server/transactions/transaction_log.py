"""The records of ``__transaction_state``: Kafka's ``TransactionLog`` key and value formats.

Sans-IO: bytes in, values out. The coordinator's state log is an ordinary partition log (Kafka
v2 record batches); each record's key says what it is about and its value what that is now.
Big-endian throughout; a *string* is ``int16 length | UTF-8 bytes``; an *array* is
``int32 count | elements``, count -1 for null.

Transaction records, byte for byte Kafka's ``TransactionLogKey`` v0 and ``TransactionLogValue``
v0 (so ``kafka-dump-log.sh --transaction-log-decoder`` reads them)::

    key     int16  version = 0
            string transactional_id
    value   int16  version = 0
            int64  producer_id
            int16  producer_epoch
            int32  transaction_timeout_ms
            int8   transaction_status              TransactionState id (0 Empty .. 5 CompleteAbort)
            array  transaction_partitions          null when the state is Empty
                     string topic
                     array  partition_ids: int32
            int64  transaction_last_update_timestamp_ms
            int64  transaction_start_timestamp_ms  -1 before the first transaction
    a null value (tombstone): the id expired (state Dead)

Worked example: ``"t"`` Ongoing with producer 7 epoch 2, timeout 60000 ms, partition ``a``-0,
updated at 1000, started at 900::

    key   0000 0001 74
    value 0000 0000000000000007 0002 0000ea60 01
          00000001 0001 61 00000001 00000000 00000000000003e8 0000000000000384

The producer id block record is stratalog's own (Kafka keeps it in its metadata log, as
``ProducerIdsRecord``; a single server has no metadata log, so it lives here, with that
record's fields)::

    key     int16  version = 32767                 PRODUCER_IDS_KEY_VERSION: the largest int16,
                                                   a key version Kafka's TransactionLogKey never
                                                   takes; nothing follows
    value   int16  version = 0
            int32  broker_id
            int64  broker_epoch                    -1: no broker epochs on a single server
            int64  next_producer_id                first id of the block after the allocated one

Decoders raise :class:`~.errors.CorruptTransactionLogError` naming what is wrong; the caller
adds where (log and offset).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import CorruptTransactionLogError
from .transaction_metadata import TopicPartition, TransactionMetadata, TransactionState

__all__ = [
    "PRODUCER_IDS_KEY_VERSION",
    "TRANSACTIONAL_ID_BYTES_MAX",
    "TRANSACTION_KEY_VERSION",
    "TRANSACTION_VALUE_VERSION",
    "ProducerIdsKey",
    "ProducerIdsValue",
    "TransactionKey",
    "decode_key",
    "decode_producer_ids_value",
    "decode_transaction_value",
    "encode_producer_ids_key",
    "encode_producer_ids_value",
    "encode_transaction_key",
    "encode_transaction_value",
]

TRANSACTION_KEY_VERSION = 0
TRANSACTION_VALUE_VERSION = 0
PRODUCER_IDS_KEY_VERSION = 32767
PRODUCER_IDS_VALUE_VERSION = 0
#: A string's length is an int16.
TRANSACTIONAL_ID_BYTES_MAX = 32767

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# TransactionLogValue v0, the fields before the partitions array.
_VALUE_HEAD = struct.Struct(
    ">h"  # version
    "q"   # producer_id
    "h"   # producer_epoch
    "i"   # transaction_timeout_ms
    "b"   # transaction_status
)
# ... and after it.
_VALUE_TAIL = struct.Struct(
    ">q"  # transaction_last_update_timestamp_ms
    "q"   # transaction_start_timestamp_ms
)
_PRODUCER_IDS_VALUE = struct.Struct(
    ">h"  # version
    "i"   # broker_id
    "q"   # broker_epoch
    "q"   # next_producer_id
)
# States a value may carry: Dead is a tombstone, PrepareEpochFence is never logged.
_LOGGED_STATES = frozenset(TransactionState) - {
    TransactionState.DEAD, TransactionState.PREPARE_EPOCH_FENCE
}


@dataclass(frozen=True, slots=True)
class TransactionKey:
    """The key of a transaction record."""

    transactional_id: str


@dataclass(frozen=True, slots=True)
class ProducerIdsKey:
    """The key of the producer id block record (there is one key: the latest value wins)."""


@dataclass(frozen=True, slots=True)
class ProducerIdsValue:
    """Kafka's ``ProducerIdsRecord``: the ids below ``next_producer_id`` are allocated."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    assert len(data) <= TRANSACTIONAL_ID_BYTES_MAX, f"string of {len(data)} bytes > int16"
    return _INT16.pack(len(data)) + data


class _Reader:
    """Bounds-checked reads from a record's key or value."""

    __slots__ = ("_data", "_position", "_what")

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._position = 0
        self._what = what

    def take(self, layout: struct.Struct) -> tuple:
        end = self._position + layout.size
        if end > len(self._data):
            raise CorruptTransactionLogError(
                f"{self._what} of {len(self._data)} bytes ends at byte {self._position}, "
                f"{layout.size} more needed"
            )
        fields = layout.unpack_from(self._data, self._position)
        self._position = end
        return fields

    def string(self) -> str:
        (length,) = self.take(_INT16)
        if length < 0 or self._position + length > len(self._data):
            raise CorruptTransactionLogError(
                f"{self._what}: string of length {length} at byte {self._position - 2} does not "
                f"fit in {len(self._data)} bytes"
            )
        raw = self._data[self._position:self._position + length]
        self._position += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptTransactionLogError(f"{self._what}: string is not UTF-8: {exc}") from exc

    def count(self) -> int:
        (count,) = self.take(_INT32)
        # Each element takes at least 2 bytes: a count beyond that is corrupt, not a huge array.
        if count < -1 or count > (len(self._data) - self._position) // 2:
            raise CorruptTransactionLogError(
                f"{self._what}: array count {count} at byte {self._position - 4} is impossible "
                f"in {len(self._data)} bytes"
            )
        return count

    def end(self) -> None:
        if self._position != len(self._data):
            raise CorruptTransactionLogError(
                f"{self._what}: {len(self._data) - self._position} bytes left after byte "
                f"{self._position}"
            )


# ---------------------------------------------------------------- keys


def encode_transaction_key(transactional_id: str) -> bytes:
    """The key of ``transactional_id``'s records."""
    return _INT16.pack(TRANSACTION_KEY_VERSION) + _string(transactional_id)


def encode_producer_ids_key() -> bytes:
    """The key of the producer id block record."""
    return _INT16.pack(PRODUCER_IDS_KEY_VERSION)


def decode_key(key: bytes | None) -> TransactionKey | ProducerIdsKey:
    """What a record is about.

    Raises:
        CorruptTransactionLogError: no key, an unknown key version, a malformed id.
    """
    if key is None:
        raise CorruptTransactionLogError("record has a null key")
    reader = _Reader(key, "key")
    (version,) = reader.take(_INT16)
    if version == TRANSACTION_KEY_VERSION:
        transactional_id = reader.string()
        reader.end()
        return TransactionKey(transactional_id)
    if version == PRODUCER_IDS_KEY_VERSION:
        reader.end()
        return ProducerIdsKey()
    raise CorruptTransactionLogError(f"unknown key version {version}")


# ---------------------------------------------------------------- transaction values


def encode_transaction_value(metadata: TransactionMetadata) -> bytes:
    """``metadata`` as a TransactionLogValue v0 (partitions grouped by topic, both sorted)."""
    assert metadata.state in _LOGGED_STATES, f"{metadata.state.kafka_name} is never logged"
    parts = [_VALUE_HEAD.pack(TRANSACTION_VALUE_VERSION, metadata.producer_id,
                              metadata.producer_epoch, metadata.txn_timeout_ms,
                              int(metadata.state))]
    if metadata.state is TransactionState.EMPTY:
        assert not metadata.partitions, "an Empty transaction has no partitions"
        parts.append(_INT32.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in metadata.partitions:
            by_topic.setdefault(topic, []).append(partition)
        parts.append(_INT32.pack(len(by_topic)))
        for topic in sorted(by_topic):
            partitions = sorted(by_topic[topic])
            parts.append(_string(topic))
            parts.append(struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
    parts.append(_VALUE_TAIL.pack(metadata.txn_last_update_timestamp_ms,
                                  metadata.txn_start_timestamp_ms))
    return b"".join(parts)


def decode_transaction_value(transactional_id: str, value: bytes) -> TransactionMetadata:
    """The metadata a TransactionLogValue v0 holds for ``transactional_id``.

    Raises:
        CorruptTransactionLogError: an unknown version, a state a value cannot hold, a
            negative partition, a truncated or overlong value.
    """
    reader = _Reader(value, f"value of transactional id {transactional_id!r}")
    version, producer_id, producer_epoch, timeout_ms, status = reader.take(_VALUE_HEAD)
    if version != TRANSACTION_VALUE_VERSION:
        raise CorruptTransactionLogError(
            f"value of transactional id {transactional_id!r}: unknown version {version}"
        )
    try:
        state = TransactionState(status)
    except ValueError:
        state = None
    if state not in _LOGGED_STATES:
        raise CorruptTransactionLogError(
            f"value of transactional id {transactional_id!r}: state {status} cannot be logged"
        )
    assert state is not None
    partitions: set[TopicPartition] = set()
    topics = reader.count()
    for _ in range(max(topics, 0)):
        topic = reader.string()
        count = reader.count()
        for _ in range(max(count, 0)):
            (partition,) = reader.take(_INT32)
            if partition < 0:
                raise CorruptTransactionLogError(
                    f"value of transactional id {transactional_id!r}: partition {partition} of "
                    f"topic {topic!r}"
                )
            partitions.add((topic, partition))
    last_update_ms, start_ms = reader.take(_VALUE_TAIL)
    reader.end()
    if partitions and state.is_complete_or_empty:
        raise CorruptTransactionLogError(
            f"value of transactional id {transactional_id!r}: state {state.kafka_name} with "
            f"{len(partitions)} partitions"
        )
    return TransactionMetadata(transactional_id, producer_id, producer_epoch, timeout_ms, state,
                               frozenset(partitions), start_ms, last_update_ms)


# ---------------------------------------------------------------- producer id blocks


def encode_producer_ids_value(value: ProducerIdsValue) -> bytes:
    """The producer id block record's value."""
    return _PRODUCER_IDS_VALUE.pack(PRODUCER_IDS_VALUE_VERSION, value.broker_id,
                                    value.broker_epoch, value.next_producer_id)


def decode_producer_ids_value(value: bytes) -> ProducerIdsValue:
    """Raises CorruptTransactionLogError: unknown version, wrong size, negative next id."""
    reader = _Reader(value, "producer id block value")
    version, broker_id, broker_epoch, next_producer_id = reader.take(_PRODUCER_IDS_VALUE)
    reader.end()
    if version != PRODUCER_IDS_VALUE_VERSION:
        raise CorruptTransactionLogError(f"producer id block value: unknown version {version}")
    if next_producer_id < 0:
        raise CorruptTransactionLogError(
            f"producer id block value: negative next producer id {next_producer_id}"
        )
    return ProducerIdsValue(broker_id, broker_epoch, next_producer_id)
