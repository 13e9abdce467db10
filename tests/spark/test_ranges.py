"""Range splitting (Spark's KafkaOffsetRangeCalculator rules) and rate limiting, without Spark."""

from __future__ import annotations

import itertools
import random

import pytest

from stratalog.client import TopicPartition
from stratalog.spark.ranges import OffsetRange, rate_limit, split_ranges

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def covered(ranges: list[OffsetRange]) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for r in ranges:
        out.setdefault((r.topic, r.partition), []).extend(range(r.from_offset, r.until_offset))
    return out


def test_no_options_one_task_per_non_empty_partition():
    ranges = [OffsetRange("a", 0, 0, 10), OffsetRange("a", 1, 5, 5), OffsetRange("b", 0, 3, 4)]
    assert split_ranges(ranges) == [ranges[0], ranges[2]]
    # minPartitions already met: no splitting.
    assert split_ranges(ranges, min_partitions=2) == [ranges[0], ranges[2]]


def test_min_partitions_splits_the_large_ranges_only():
    big, small = OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 0, 7)
    # 7 of 107 records round to one task: it stays whole; the other 4 tasks split 100.
    assert split_ranges([big, small], min_partitions=5) == [
        OffsetRange("a", 0, 0, 25), OffsetRange("a", 0, 25, 50), OffsetRange("a", 0, 50, 75),
        OffsetRange("a", 0, 75, 100), small,
    ]
    # One range into four near-equal parts; the last takes what the divisions left.
    assert split_ranges([OffsetRange("a", 0, 1, 18)], min_partitions=4) == [
        OffsetRange("a", 0, 1, 5), OffsetRange("a", 0, 5, 9), OffsetRange("a", 0, 9, 13),
        OffsetRange("a", 0, 13, 18),
    ]


def test_max_records_per_partition_then_min_partitions():
    big, small = OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 0, 7)
    assert split_ranges([big, small], max_records_per_partition=30) == [
        OffsetRange("a", 0, 0, 25), OffsetRange("a", 0, 25, 50), OffsetRange("a", 0, 50, 75),
        OffsetRange("a", 0, 75, 100), small,
    ]
    # 50+50+7 after the cap; 10 tasks wanted: the two halves take 5 each, the small one 1.
    both = split_ranges([big, small], min_partitions=10, max_records_per_partition=50)
    assert len(both) == 11
    assert [r.size for r in both] == [10] * 10 + [7]


def test_unbounded_ranges_stay_whole():
    open_ended = OffsetRange("a", 0, 10, None)
    assert split_ranges([open_ended, OffsetRange("a", 1, 0, 50)], min_partitions=4,
                        max_records_per_partition=20)[0] == open_ended


@pytest.mark.parametrize("seed", range(30))
def test_splitting_keeps_every_offset_exactly_once(seed):
    rng = random.Random(seed)
    ranges = []
    for partition in range(rng.randint(1, 6)):
        start = rng.randint(0, 1000)
        ranges.append(OffsetRange("t", partition, start, start + rng.randint(0, 5000)))
    min_partitions = rng.choice([None, 1, 3, 17, 64])
    max_records = rng.choice([None, 1 + rng.randint(0, 3000)])
    out = split_ranges(ranges, min_partitions, max_records)
    assert covered(out) == {k: v for k, v in covered(ranges).items() if v}
    assert all(r.size > 0 for r in out)
    if max_records is not None and min_partitions is None:
        assert all(r.size <= max_records for r in out)
    # Ranges of a partition follow each other in offset order.
    for partition in {r.partition for r in out}:
        parts = [r for r in out if r.partition == partition]
        assert all(a.until_offset == b.from_offset for a, b in itertools.pairwise(parts))


def test_rate_limit_prorates_by_lag():
    start = {A0: 0, A1: 0, B0: 50}
    latest = {A0: 90, A1: 10, B0: 50}
    assert rate_limit(10, start, latest) == {A0: 9, A1: 1, B0: 50}
    # A share below one record rounds up: no partition starves.
    assert rate_limit(5, start, latest) == {A0: 4, A1: 1, B0: 50}
    # More allowed than available: everything.
    assert rate_limit(1000, start, latest) == latest
    # Nothing new: the latest offsets as they are.
    assert rate_limit(10, latest, latest) == latest
    # A partition without a start offset keeps its latest offset.
    assert rate_limit(10, {A0: 0}, {A0: 100, A1: 7}) == {A0: 10, A1: 7}
