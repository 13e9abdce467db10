"""Choosing a partition for a record: Kafka's murmur2 for keyed records, sticky for the rest.

A keyed record goes where a Kafka producer would send it, so that a topic written by both
stratalog and Kafka clients keeps each key in one partition. Kafka's ``BuiltInPartitioner``
(and the older ``DefaultPartitioner``) compute::

    partition = toPositive(murmur2(key_bytes)) % num_partitions
    toPositive(n) = n & 0x7fffffff          # not abs(): abs(MIN_VALUE) is negative in Java

where ``murmur2`` is ``org.apache.kafka.common.utils.Utils.murmur2``: MurmurHash2 (32 bits) with
seed ``0x9747b28c``, reading the key as little-endian 4-byte words, and returning a Java ``int``
(signed). An empty key ``b""`` is a key (it hashes); only ``None`` means "no key".

Unkeyed records are partitioned *stickily*: all of them go to one partition for a *stint*, then
to another (KIP-794's uniform sticky partitioner, which switches after ``batch.size`` bytes).
Batches fill up faster than with round-robin, which means fewer, larger requests. The next
partition is the one that got the fewest bytes of this partitioner so far (ties broken at
random), and a stint is at most an eighth of a partition's share so far (at least 16 KiB, at
most a batch), so partitions fill evenly over a run however short: none ever trails another
by more than an eighth of its share and a record. Long runs stick for a whole batch at a time,
as if all their records went to one partition.

Where this differs from Kafka: KIP-480's first sticky partitioner moved on when a batch was
sent, to a partition drawn at random, which left partitions uneven over short runs (a Python
producer's batches are large: 100,000 small records made a handful of batches and landed
80,692 / 0 / 19,308 on three partitions); KIP-794 draws the next partition at random weighted
by the queue sizes of the partitions' brokers, to steer around a slow broker, and its stints
are always ``batch.size``. One server holds every partition here, so the choice is by bytes
sent, deterministic but for ties; and a stint grows with the run, because a fixed one must be
either short (a long run's batches then split three ways: smaller requests) or long (a short
run lands unevenly).
"""

from __future__ import annotations

import random
import struct

__all__ = [
    "STINT_BYTES_MAX",
    "STINT_BYTES_MIN",
    "STINT_SHARE_FRACTION",
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


#: The shortest stint: Kafka's batch.size, after which KIP-794 switches.
STINT_BYTES_MIN = 16 * 1024
#: A stint is at most this fraction of a partition's share of the bytes sent so far: no
#: partition trails another by more than 1/8 of its share (+ a record).
STINT_SHARE_FRACTION = 8
#: The longest stint unless the Producer says otherwise (it passes its ``batch_bytes_max``).
STINT_BYTES_MAX = 1024 * 1024


class StickyPartitioner:
    """Picks the partition of unkeyed records for one topic: the same one for a stint, then
    the one that got the fewest bytes so far.

    A stint is an eighth of a partition's share of the bytes sent so far, at least
    :data:`STINT_BYTES_MIN` (or ``stint_bytes_max`` if smaller) and at most
    ``stint_bytes_max``: short runs switch often and still come out even, long runs stick for
    a whole batch at a time, so that their batches are as large as if all went to one
    partition.

    Holds the current partition (``None`` until first asked), its stint's length and the bytes
    left in it, per partition the bytes of the stints it finished, and their sum.
    Invariant: the bytes given to any two partitions differ by at most the longest stint so far
    plus the largest record (each stint goes to a partition with the fewest, and adds at most
    that much), so by at most max(``STINT_BYTES_MIN``, total / (8 * partitions)) + a record.
    O(1) per record, O(partitions) per switch. In-memory only; not thread-safe (one Producer,
    one event loop, owns it).
    """

    __slots__ = ("_current", "_num_partitions", "_random", "_sent_bytes", "_stint_bytes",
                 "_stint_bytes_max", "_stint_bytes_min", "_total_bytes", "stint_left_bytes")

    def __init__(
        self,
        num_partitions: int,
        *,
        stint_bytes_max: int = STINT_BYTES_MAX,
        rng: random.Random | None = None,
    ) -> None:
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
        if stint_bytes_max < 1:
            raise ValueError(f"stint_bytes_max must be >= 1, got {stint_bytes_max}")
        self._num_partitions = num_partitions
        self._stint_bytes_max = stint_bytes_max
        self._stint_bytes_min = min(STINT_BYTES_MIN, stint_bytes_max)
        self._random = rng or random.Random()
        self._current: int | None = None
        self._sent_bytes = [0] * num_partitions
        self._total_bytes = 0  # sum of _sent_bytes
        self._stint_bytes = 0
        #: Bytes the current partition may still take before the next record moves on (may go
        #: below 0 by the last record: a record is never split). The accumulator reads it to
        #: size a run of appends and reports what it appended with :meth:`spend`.
        self.stint_left_bytes = 0

    @property
    def num_partitions(self) -> int:
        """How many partitions the topic has."""
        return self._num_partitions

    @property
    def stint_bytes(self) -> int:
        """Bytes of the current stint (0 before the first record)."""
        return self._stint_bytes

    def sent_bytes(self) -> list[int]:
        """Bytes given to each partition so far, the current stint included (a copy)."""
        sent = list(self._sent_bytes)
        if self._current is not None:
            sent[self._current] += self._stint_bytes - self.stint_left_bytes
        return sent

    def partition(self, size_bytes: int = 0) -> int:
        """The partition of the next unkeyed record, of ``size_bytes`` bytes, counted against
        the stint: moves on first if the current stint is spent. O(1) but at a switch."""
        current = self._current
        if current is None or self.stint_left_bytes <= 0:
            current = self._switch()
        self.stint_left_bytes -= size_bytes
        return current

    def spend(self, size_bytes: int) -> None:
        """``size_bytes`` more bytes went to the current partition (records appended in a run
        after the :meth:`partition` call that chose it)."""
        self.stint_left_bytes -= size_bytes

    def _switch(self) -> int:
        """Close the current stint and start one on a partition with the fewest bytes
        (at random among equals)."""
        sent = self._sent_bytes
        current = self._current
        if current is not None:
            spent = self._stint_bytes - self.stint_left_bytes
            sent[current] += spent
            self._total_bytes += spent
        fewest = min(sent)
        candidates = [p for p, n in enumerate(sent) if n == fewest]
        choice = candidates[0] if len(candidates) == 1 else self._random.choice(candidates)
        self._current = choice
        share_part = self._total_bytes // (STINT_SHARE_FRACTION * self._num_partitions)
        stint = max(self._stint_bytes_min, min(self._stint_bytes_max, share_part))
        self._stint_bytes = self.stint_left_bytes = stint
        return choice
