"""The arithmetic of benchmarks/bench_group_consumer.py: percentiles, gaps, and a rebalance's
figures from members' reports. Nothing here starts a server or a member process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[3]
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks.bench_group_consumer import (  # noqa: E402
    VALUE_SIZE_BYTES,
    WINDOW_S,
    MemberReport,
    ReadFigures,
    RebalanceFigures,
    first_after,
    largest_gap,
    make_values,
    median_of,
    median_read,
    percentile,
    read_figures,
    rebalance_figures,
)


@pytest.mark.parametrize(("fraction", "expected"),
                         [(0.5, 50), (0.99, 99), (1.0, 100), (0.0, 1), (0.011, 2)])
def test_nearest_rank_percentile(fraction: float, expected: int) -> None:
    values = [float(v) for v in range(100, 0, -1)]  # unsorted on purpose
    assert percentile(values, fraction) == expected


def test_percentile_of_one_sample_is_that_sample() -> None:
    assert percentile([7.0], 0.99) == 7.0


def test_largest_gap_counts_the_window_edges() -> None:
    times = [0.5, 1.0, 1.1, 3.0, 9.0]
    assert largest_gap(times, 1.0, 4.0) == pytest.approx(1.9)  # 1.1 -> 3.0
    assert largest_gap(times, 0.0, 1.2) == pytest.approx(0.5)  # start -> 0.5, 0.5 -> 1.0
    assert largest_gap(times, 3.0, 8.0) == pytest.approx(5.0)  # 3.0 -> the window's end
    assert largest_gap([], 2.0, 2.5) == pytest.approx(0.5)  # nothing: the whole window


def test_first_after_is_strictly_after() -> None:
    assert first_after([3.0, 1.0, 2.0], 1.0) == 2.0
    assert first_after([1.0], 1.0) is None


def _report(events: list[tuple[float, str, set[int]]], times: dict[int, list[float]]
            ) -> MemberReport:
    return MemberReport([(t, k, frozenset(p)) for t, k, p in events], times)


def test_owned_at_follows_assigned_and_revoked() -> None:
    member = _report([(1.0, "ASSIGNED", {0, 1}), (5.0, "REVOKED", {1}),
                      (6.0, "ASSIGNED", set())], {})
    assert member.owned_at(0.5) == frozenset()
    assert member.owned_at(1.0) == {0, 1}
    assert member.owned_at(5.5) == {0}
    assert member.owned_at(float("inf")) == {0}


def test_rebalance_figures_from_reports() -> None:
    t0 = 10.0
    # An old member keeps 0, gives 1 away at 10.3, its (empty) assignment at 10.5; partition 0
    # has a gap of 0.4 s after t0 (10.6 to the end, 11.0) and one of 0.6 s before (9.2 to 9.8).
    old = _report([(1.0, "ASSIGNED", {0, 1}), (10.3, "REVOKED", {1}),
                   (10.5, "ASSIGNED", set())],
                  {0: [9.0, 9.2, 9.8, 10.1, 10.4, 10.6, 11.0], 1: [9.9, 10.2]})
    # The joiner is given 1 at 10.6 and reads it at 10.9.
    joiner = _report([(10.2, "ASSIGNED", set()), (10.6, "ASSIGNED", {1})], {1: [10.9, 11.0]})
    figures = rebalance_figures([old], joiner, t0, end=11.0)
    assert figures.joiner_first_record_s == pytest.approx(0.9)
    assert figures.all_consuming_s == pytest.approx(0.9)  # old: 10.6 after 10.5
    assert figures.last_event_s == pytest.approx(0.6)
    assert figures.kept_gap_s == pytest.approx(0.4)  # 10.6 -> 11.0, partition 0 only (1 moved)
    assert figures.kept_gap_before_s == pytest.approx(0.6)  # 9.2 -> 9.8 in [9.0, 10.0]
    assert figures.first_revoke_s == pytest.approx(0.3)
    assert WINDOW_S == 1.0  # the "before" window above assumes it


def test_an_old_member_slower_than_the_joiner_sets_every_member_consuming() -> None:
    old = _report([(0.0, "ASSIGNED", {0, 1}), (10.15, "REVOKED", {1}),
                   (10.2, "ASSIGNED", set())], {0: [10.1, 12.0]})
    joiner = _report([(10.1, "ASSIGNED", {1})], {1: [10.3]})
    figures = rebalance_figures([old], joiner, 10.0, end=13.0)
    assert figures.joiner_first_record_s == pytest.approx(0.3)
    assert figures.all_consuming_s == pytest.approx(2.0)


def test_a_member_without_an_event_or_a_record_is_an_error() -> None:
    quiet = _report([(0.0, "ASSIGNED", {0})], {0: [10.5]})
    joiner = _report([(10.1, "ASSIGNED", {1})], {1: [10.3]})
    with pytest.raises(ValueError, match="no rebalance event"):
        rebalance_figures([quiet], joiner, 10.0, end=11.0)
    starved = _report([(10.1, "ASSIGNED", {1})], {})
    old = _report([(0.0, "ASSIGNED", {0, 1}), (10.15, "REVOKED", {1}),
                   (10.2, "ASSIGNED", set())], {0: [10.5]})
    with pytest.raises(ValueError, match="consumed nothing"):
        rebalance_figures([old], starved, 10.0, end=11.0)
    kept_all = _report([(0.0, "ASSIGNED", {0}), (10.2, "ASSIGNED", set())], {0: [10.5]})
    with pytest.raises(ValueError, match="no old member revoked"):
        rebalance_figures([kept_all], joiner, 10.0, end=11.0)


def test_median_of_takes_each_field_alone() -> None:
    runs = [RebalanceFigures(1, 5, 3, 0.1, 0.2, 9), RebalanceFigures(2, 4, 1, 0.3, 0.1, 7),
            RebalanceFigures(3, 6, 2, 0.2, 0.3, 8)]
    assert median_of(runs) == RebalanceFigures(2, 5, 2, 0.2, 0.2, 8)


def test_values_are_distinct_and_of_the_documented_size() -> None:
    values = make_values(1000)
    assert len(set(values)) == 1000
    assert {len(v) for v in values} == {VALUE_SIZE_BYTES}


def test_read_figures_whole_and_after_the_first_hand_over() -> None:
    # 1,000 records from 10.0 to 12.0; the first batch of 100 handed over at 11.0.
    figures = read_figures(1000, 100, started=10.0, first_at=11.0, ended=12.0, cpu_s=0.5,
                           cpu_after_first_s=0.09)
    assert figures.rate == pytest.approx(500.0)
    assert figures.rate_after_first == pytest.approx(900.0)
    assert figures.cpu_us == pytest.approx(500.0)
    assert figures.cpu_us_after_first == pytest.approx(100.0)


def test_median_read_takes_each_field_alone() -> None:
    runs = [ReadFigures(1, 30, 0.2, 5), ReadFigures(3, 10, 0.3, 4), ReadFigures(2, 20, 0.1, 6)]
    assert median_read(runs) == ReadFigures(2, 20, 0.2, 5)
