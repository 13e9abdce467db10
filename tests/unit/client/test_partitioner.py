"""Kafka's murmur2 partitioner and sticky partitioning (stratalog.client.partitioner).

kafka-python's ``murmur2`` (a port of Kafka's ``Utils.murmur2``) is the oracle; the fixed vectors
are the ones Kafka's own ``UtilsTest.testMurmur2`` asserts.
"""

from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import DefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_murmur2

from stratalog.client.partitioner import (
    StickyPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)

# Kafka's UtilsTest.testMurmur2: key -> the Java int Utils.murmur2 returns.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), sorted(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafka_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def _as_java_int(unsigned: int) -> int:
    return unsigned - (1 << 32) if unsigned >= 1 << 31 else unsigned


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_murmur2_equals_kafka_python(key: bytes) -> None:
    assert murmur2(key) == _as_java_int(kafka_murmur2(key))


class _Cluster:
    """The three questions kafka-python's DefaultPartitioner asks its cluster metadata."""

    def __init__(self, count: int) -> None:
        self._partitions = set(range(count))

    def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions


@settings(max_examples=300)
@given(st.binary(max_size=40), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_equals_kafka_default_partitioner(key: bytes, count: int) -> None:
    expected = DefaultPartitioner().partition("t", key, key, None, None, _Cluster(count))
    assert partition_for_key(key, count) == expected


def test_bytes_like_keys_hash_like_bytes() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


def test_empty_key_is_a_key() -> None:
    # Only None means "no key"; b"" hashes (Kafka: serialized key of length 0).
    assert murmur2(b"") == _as_java_int(kafka_murmur2(b""))
    assert 0 <= partition_for_key(b"", 7) < 7


def test_to_positive_clears_only_the_sign_bit() -> None:
    assert to_positive(-(2**31)) == 0  # Integer.MIN_VALUE: abs() would stay negative in Java
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF


def test_partition_for_key_argument_errors() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"k", 0)
    with pytest.raises(TypeError, match="bytes"):
        partition_for_key("k", 3)  # type: ignore[arg-type]


def test_sticky_partition_stays_until_next_batch() -> None:
    sticky = StickyPartitioner(5, rng=random.Random(1))
    first = sticky.partition()
    assert all(sticky.partition() == first for _ in range(100))
    sticky.next_batch(first)
    second = sticky.partition()
    assert second != first
    assert all(sticky.partition() == second for _ in range(100))


def test_sticky_next_batch_of_another_partition_does_not_move() -> None:
    # Kafka's StickyPartitionCache.nextPartition only switches if the full batch was the sticky one.
    sticky = StickyPartitioner(4, rng=random.Random(2))
    current = sticky.partition()
    sticky.next_batch((current + 1) % 4)
    assert sticky.partition() == current


def test_sticky_never_repeats_and_spreads_evenly() -> None:
    sticky = StickyPartitioner(6, rng=random.Random(3))
    counts: collections.Counter[int] = collections.Counter()
    previous = sticky.partition()
    for _ in range(6000):
        sticky.next_batch(previous)
        current = sticky.partition()
        assert current != previous
        assert 0 <= current < 6
        counts[current] += 1
        previous = current
    # Uniform over the other five each time: every partition gets about 1000 of 6000 switches.
    assert set(counts) == set(range(6))
    assert all(800 < n < 1200 for n in counts.values()), counts


def test_sticky_single_partition() -> None:
    sticky = StickyPartitioner(1)
    assert sticky.partition() == 0
    sticky.next_batch(0)
    assert sticky.partition() == 0
    with pytest.raises(ValueError, match="num_partitions"):
        StickyPartitioner(0)
