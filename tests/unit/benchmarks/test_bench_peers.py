"""The pure parts of benchmarks/bench_peers.py: percentiles, the systems' rotation, NATS's times,
the server CPU estimate and the ratios' format. Nothing here starts a server or needs the peers'
clients (bench_peers imports nats and redis only inside the methods that talk to them)."""

from __future__ import annotations

import random
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

# benchmarks/ is a folder of scripts run from the repository root, not an installed package.
PROJECT_ROOT = Path(__file__).resolve().parents[3]
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks.bench_peers import format_ratio  # noqa: E402
from benchmarks.peer_harness import (  # noqa: E402
    Measurement,
    format_rfc3339_ns,
    percentile,
    rfc3339_ns,
    rotation,
    server_cpu_delta_s,
)
from benchmarks.peer_systems import _last_batch_start  # noqa: E402


def nearest_rank(values: list[float], fraction: float) -> float:
    """The definition, by brute force: the smallest value with at least ``fraction`` of the
    values at or below it."""
    return min(v for v in values if sum(x <= v for x in values) >= fraction * len(values))


def test_percentile_of_one_to_a_hundred() -> None:
    values = list(range(1, 101))
    assert percentile(values, 0.50) == 50
    assert percentile(values, 0.99) == 99  # 0.99 * 100 is 99.00000000000001 in floats
    assert percentile(values, 1.0) == 100
    assert percentile(values, 0.001) == 1


def test_percentile_of_two_thousand_is_the_1980th() -> None:
    values = [float(i) for i in range(2000)]
    assert percentile(values, 0.99) == 1979.0
    assert percentile(values, 0.50) == 999.0


@pytest.mark.parametrize("count", [1, 2, 3, 7, 100, 101, 999])
def test_percentile_matches_the_definition(count: int) -> None:
    rng = random.Random(count)
    values = sorted(rng.choice([rng.random(), 0.5]) for _ in range(count))  # with ties
    for fraction in (0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0):
        assert percentile(values, fraction) == nearest_rank(values, fraction), fraction


def test_percentile_refuses_no_values_and_fractions_outside_0_1() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)
    for fraction in (0.0, -0.1, 1.01):
        with pytest.raises(ValueError, match="fraction"):
            percentile([1.0], fraction)


def test_rotation_puts_each_system_once_in_each_position() -> None:
    names = ["stratalog", "NATS JetStream", "Redis Streams"]
    orders = [rotation(names, r) for r in range(3)]
    assert orders[0] == names
    assert orders[1] == ["NATS JetStream", "Redis Streams", "stratalog"]
    for position in range(3):
        assert sorted(order[position] for order in orders) == sorted(names)
    assert rotation(names, 3) == names  # and then again
    assert rotation(names[:1], 5) == names[:1]
    assert rotation([], 2) == []


def test_rfc3339_ns_reads_what_go_writes() -> None:
    base = int(datetime(2026, 11, 26, 13, 15, 7, tzinfo=UTC).timestamp()) * 1_000_000_000
    assert rfc3339_ns("2026-11-26T13:15:07.373018471Z") == base + 373_018_471
    assert rfc3339_ns("2026-11-26T13:15:07.37Z") == base + 370_000_000  # trailing zeros cut
    assert rfc3339_ns("2026-11-26T13:15:07Z") == base  # a zero fraction left out
    assert format_rfc3339_ns(base + 5) == "2026-11-26T13:15:07.000000005Z"


def test_rfc3339_ns_round_trips_and_refuses_other_zones() -> None:
    rng = random.Random(14)
    for _ in range(1000):
        ns = rng.randrange(0, 4_000_000_000 * 1_000_000_000)
        assert rfc3339_ns(format_rfc3339_ns(ns)) == ns
    for text in ("2026-11-26T13:15:07+00:00", "2026-11-26 13:15:07Z",
                 "2026-11-26T13:15:07.1234567890Z", ""):
        with pytest.raises(ValueError, match="RFC 3339"):
            rfc3339_ns(text)


def test_server_cpu_prefers_the_threads_nanoseconds() -> None:
    tick = 0.01
    # 23 ms by the threads; the ticks say 20 or 40: within their rounding, the threads win.
    assert server_cpu_delta_s((1.00, 5.000), (1.02, 5.023), tick) == pytest.approx(0.023)
    assert server_cpu_delta_s((1.00, 5.000), (1.04, 5.023), tick) == pytest.approx(0.023)
    # A thread that exited took its time out of the threads' sum: the ticks are the truth.
    assert server_cpu_delta_s((1.00, 5.000), (1.30, 4.900), tick) == pytest.approx(0.30)
    # Never negative.
    assert server_cpu_delta_s((1.00, 5.000), (1.00, 4.990), tick) == 0.0


def test_measurement_figures() -> None:
    m = Measurement(requests=4, wall_s=2.0, client_cpu_s=0.004, server_cpu_s=0.008,
                    latencies_s=[0.001, 0.002, 0.003, 0.004])
    figures = m.figures()
    assert figures["rate_per_s"] == 2.0
    assert figures["client_cpu_us"] == pytest.approx(1000.0)
    assert figures["server_cpu_us"] == pytest.approx(2000.0)
    assert figures["p50_us"] == pytest.approx(2000.0)
    assert figures["p99_us"] == pytest.approx(4000.0)
    assert "p50_us" not in Measurement(1, 1.0, 0.0, 0.0).figures()
    assert "mb_per_s" not in figures
    assert Measurement(10, 2.0, 0.0, 0.0, size_bytes=4_000_000).figures()["mb_per_s"] == 2.0


def test_the_kafka_rows_find_the_last_batch_and_a_record_in_whole_batches() -> None:
    from benchmarks.kafka_wire import first_value_at
    from stratalog.records.builder import build_batch

    batches = [build_batch([(0, None, b"%d" % (b * 10 + i), ()) for i in range(10)],
                           base_offset=b * 10) for b in range(5)]
    records = b"".join(batches)
    assert _last_batch_start(records) == len(records) - len(batches[-1])
    assert first_value_at(records, 37) == b"37"
    with pytest.raises(LookupError):
        first_value_at(records, 50)


@pytest.mark.parametrize(("ratio", "text"), [
    (1234.5, "1,234"), (76.74, "76.7"), (7.7, "7.70"), (0.134, "0.13"), (0.0123, "0.012"),
])
def test_format_ratio(ratio: float, text: str) -> None:
    assert format_ratio(ratio) == text
