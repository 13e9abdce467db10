"""Kafka's murmur2 partitioner and sticky partitioning (stratalog.client.partitioner).

The sticky partitioner's tests state its invariant (partitions never trail by more than a stint
and a record) over random operations, and the issue 15 case (100,000 records, 3 partitions).

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
    STINT_BYTES_MIN,
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


def test_sticky_partition_stays_for_a_stint_then_moves() -> None:
    sticky = StickyPartitioner(5, stint_bytes_max=1000, rng=random.Random(1))
    first = sticky.partition(100)
    # 1000 bytes in all: this record and nine more stay; the eleventh moves on.
    assert all(sticky.partition(100) == first for _ in range(9))
    second = sticky.partition(100)
    assert second != first
    assert all(sticky.partition(100) == second for _ in range(9))


def test_a_record_larger_than_the_stint_goes_whole_and_ends_it() -> None:
    sticky = StickyPartitioner(3, stint_bytes_max=100, rng=random.Random(2))
    first = sticky.partition(5000)
    assert sticky.stint_left_bytes < 0
    assert sticky.partition(1) != first
    assert sticky.sent_bytes()[first] == 5000


def test_spend_counts_a_run_of_appends_against_the_stint() -> None:
    sticky = StickyPartitioner(2, stint_bytes_max=1000, rng=random.Random(3))
    first = sticky.partition(10)
    room = sticky.stint_left_bytes
    assert room == 990
    sticky.spend(room)
    assert sticky.partition(10) != first
    assert sorted(sticky.sent_bytes()) == [10, 1000]


def test_the_next_partition_is_one_with_the_fewest_bytes() -> None:
    sticky = StickyPartitioner(3, stint_bytes_max=100, rng=random.Random(4))
    first = sticky.partition(300)  # one record: three stints' worth
    second = sticky.partition(100)
    third = sticky.partition(100)
    assert len({first, second, third}) == 3
    sizes = sticky.sent_bytes()
    assert sizes[first] == 300 and sizes[second] == sizes[third] == 100
    # The first partition is ahead by 200: the next two stints go to the other two.
    assert {sticky.partition(100), sticky.partition(100)} == {second, third}


def test_stints_grow_with_the_run_from_16_kib_to_the_most() -> None:
    sticky = StickyPartitioner(4, stint_bytes_max=1 << 20, rng=random.Random(5))
    sticky.partition(100)
    assert sticky.stint_bytes == STINT_BYTES_MIN  # Kafka's batch.size to begin with
    lengths = []
    for _ in range(400_000):
        sticky.partition(100)
        if sticky.stint_bytes not in lengths:
            lengths.append(sticky.stint_bytes)
    # 40 MB sent, an eighth of a partition's share is over 1 MiB: a batch at a time.
    assert lengths == sorted(lengths) and lengths[-1] == 1 << 20
    assert sum(sticky.sent_bytes()) == 400_001 * 100


def test_ties_are_broken_at_random() -> None:
    firsts = {StickyPartitioner(6, rng=random.Random(seed)).partition() for seed in range(200)}
    assert firsts == set(range(6))


@pytest.mark.parametrize("records", [30_000, 100_000, 1_000_000])
def test_unkeyed_records_fill_three_partitions_evenly(records: int) -> None:
    # Issue 15: 100,000 unkeyed records landed 80,692 / 0 / 19,308 under the old partitioner.
    # (A run of a few stints of 16 KiB, Kafka's batch.size, is as even as a stint allows.)
    rng = random.Random(records)
    sticky = StickyPartitioner(3, rng=rng)
    counts: collections.Counter[int] = collections.Counter()
    for _ in range(records):
        counts[sticky.partition(36 + rng.randrange(5, 60))] += 1
    third = records / 3
    assert all(0.8 * third <= counts[p] <= 1.2 * third for p in range(3)), counts


@settings(max_examples=300)
@given(
    st.integers(min_value=1, max_value=12),
    st.integers(min_value=1, max_value=50_000),
    st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=3000)), max_size=400),
    st.integers(min_value=0, max_value=2**32),
)
def test_partitions_never_trail_by_more_than_a_stint_and_a_record(
    count: int, stint_bytes_max: int, operations: list[tuple[bool, int]], seed: int
) -> None:
    """Random records, one at a time (partition) or as runs (partition, then spend up to what
    the stint has left, as the accumulator's append_values does): the invariant holds
    throughout, and the counts agree with a model that adds up what each call was told."""
    sticky = StickyPartitioner(count, stint_bytes_max=stint_bytes_max, rng=random.Random(seed))
    model = [0] * count
    largest = 0
    for as_run, size in operations:
        target = sticky.partition(size)
        assert 0 <= target < count
        model[target] += size
        largest = max(largest, size)
        if as_run and sticky.stint_left_bytes > 0:
            extra = min(sticky.stint_left_bytes, size)
            sticky.spend(extra)
            model[target] += extra
            largest = max(largest, extra)
        sent = sticky.sent_bytes()
        assert sent == model
        stint_max = min(stint_bytes_max, max(STINT_BYTES_MIN, sum(sent) // (8 * count)))
        assert max(sent) - min(sent) <= stint_max + largest


def test_sticky_single_partition() -> None:
    sticky = StickyPartitioner(1, stint_bytes_max=10)
    assert all(sticky.partition(7) == 0 for _ in range(10))
    with pytest.raises(ValueError, match="num_partitions"):
        StickyPartitioner(0)
    with pytest.raises(ValueError, match="stint_bytes_max"):
        StickyPartitioner(2, stint_bytes_max=0)
