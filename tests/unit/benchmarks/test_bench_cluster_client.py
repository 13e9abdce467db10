"""The pure parts of benchmarks/bench_cluster_client.py: its percentile and its records. Nothing
here starts etcd or a server (that is the benchmark's run, after issue 17's merge)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[3]
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks.bench_cluster_client import VALUE_SIZE_BYTES, make_values, percentile  # noqa: E402


@pytest.mark.parametrize(("fraction", "expected"), [(0.5, 50), (0.99, 99), (1.0, 100), (0.0, 1)])
def test_nearest_rank_percentile(fraction: float, expected: int) -> None:
    values = [float(v) for v in range(100, 0, -1)]  # unsorted on purpose
    assert percentile(values, fraction) == expected


def test_values_are_distinct_and_of_the_documented_size() -> None:
    values = make_values(1000)
    assert len(set(values)) == 1000
    assert {len(v) for v in values} == {VALUE_SIZE_BYTES}
