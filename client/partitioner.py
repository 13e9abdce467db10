"""Choosing a partition for a record: Kafka's murmur2 for keyed records, sticky for the rest.

A keyed record goes where a Kafka producer would send it, so that a topic written by both
stratalog and Kafka clients keeps each key in one partition. Kafka's ``BuiltInPartitioner``
(and the older ``DefaultPartitioner``) compute::

    partition = toPositive(murmur2(key_bytes)) % num_partitions
    toPositive(n) = n & 0x7fffffff          # not abs(): abs(MIN_VALUE) is negative in Java

where ``murmur2`` is ``org.apache.kafka.common.utils.Utils.murmur2``: MurmurHash2 (32 bits) with
seed ``0x9747b28c``, reading the key as little-endian 4-byte words, and returning a Java ``int``
(signed). An empty key ``b""`` is a key (it hashes); only ``None`` means "no key".

Unkeyed records are partitioned *stickily* (KIP-480): all of them go to one partition until the
batch for it is sent, then another partition is chosen at random. Batches fill up faster than
with round-robin, which means fewer, larger requests, while over time the load spreads evenly.
"""

from __future__ import annotations

import random
import struct

__all__ = [
    "StickyPartitioner",
    "murmur2",
    "partition_for_key",
    "to_positive",
]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as the signed 32-bit int Java returns. O(len).

    Raises ``TypeError`` if ``data`` is not a bytes-like object.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"murmur2 needs bytes, got {type(data).__name__}")
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    body_length = length & ~3
    # Java multiplies in 32-bit ints that wrap; masking after each product gives the same bits.
    for (k,) in struct.iter_unpack("<I", data[:body_length]):
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        # Java's switch falls through: 3 mixes bytes 2, 1, 0; 2 mixes 1, 0; 1 mixes 0.
        if tail == 3:
            h ^= data[body_length + 2] << 16
        if tail >= 2:
            h ^= data[body_length + 1] << 8
        h ^= data[body_length]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (``Integer.MIN_VALUE`` maps to 0)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition a Kafka producer picks for ``key`` among ``num_partitions``.

    Raises ``ValueError`` if ``num_partitions < 1`` and ``TypeError`` for a key that is not bytes.
    """
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Picks the partition of unkeyed records for one topic: the same one until told to move.

    Holds the current partition (``None`` until first asked) and the topic's partition count.
    :meth:`next_batch` moves to another random partition (never the same one again when there
    are two or more); the Producer calls it when the batch of the current partition is sent.
    In-memory only; not thread-safe (one Producer, one event loop, owns it).
    """

    __slots__ = ("_current", "_num_partitions", "_random")

    def __init__(self, num_partitions: int, *, rng: random.Random | None = None) -> None:
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
        self._num_partitions = num_partitions
        self._random = rng or random.Random()
        self._current: int | None = None

    @property
    def num_partitions(self) -> int:
        """How many partitions the topic has."""
        return self._num_partitions

    def partition(self) -> int:
        """The current sticky partition, choosing one at random the first time. O(1)."""
        current = self._current
        if current is None:
            current = self._current = self._random.randrange(self._num_partitions)
        return current

    def next_batch(self, sent_partition: int) -> None:
        """The batch of ``sent_partition`` is full or sent: stick to another partition.

        Does nothing if the sticky partition moved already (another batch triggered it), as
        Kafka's ``StickyPartitionCache.nextPartition`` compares before switching.
        """
        if self._current is not None and self._current != sent_partition:
            return
        count = self._num_partitions
        current = self._current
        if current is None or count == 1:
            self._current = self._random.randrange(count)
            return
        # A uniform choice among the other count - 1 partitions: skip over the current one.
        choice = self._random.randrange(count - 1)
        self._current = choice + 1 if choice >= current else choice
