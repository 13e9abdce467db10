"""Server metrics: what the registry holds after observations (test_metrics_endpoint.py has the
HTTP endpoint)."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from stratalog.server.metrics import (
    LATENCY_BUCKETS_SECONDS,
    CleanerSnapshot,
    ServerMetrics,
)
from stratalog.server.storage.cleaner_manager import CleanerPartitionStatus, CleanerStats
from stratalog.server.storage.log_manager import PartitionDescription, TopicDescription


def _samples(metrics: ServerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_produce_and_fetch_counters_per_topic() -> None:
    metrics = ServerMetrics()
    metrics.observe_produce("orders", 10, 1000)
    metrics.observe_produce("orders", 5, 500)
    metrics.observe_produce("clicks", 1, 70)
    metrics.observe_fetch("orders", 15, 1500)
    metrics.observe_fetch("clicks", 0, 0)  # an empty fetch creates no label set
    samples = _samples(metrics)
    assert samples[("stratalog_records_in_total", (("topic", "orders"),))] == 15
    assert samples[("stratalog_bytes_in_total", (("topic", "orders"),))] == 1500
    assert samples[("stratalog_records_in_total", (("topic", "clicks"),))] == 1
    assert samples[("stratalog_records_out_total", (("topic", "orders"),))] == 15
    assert samples[("stratalog_bytes_out_total", (("topic", "orders"),))] == 1500
    assert ("stratalog_records_out_total", (("topic", "clicks"),)) not in samples


def test_security_counters_by_reason_operation_and_quota() -> None:
    metrics = ServerMetrics()
    metrics.observe_authentication_failure("wrong_credentials")
    metrics.observe_authentication_failure("wrong_credentials")
    metrics.observe_authentication_failure("credentials_required")
    metrics.observe_authorization_denial("WRITE")
    metrics.observe_throttle("produce", 250)
    metrics.observe_throttle("produce", 1500)
    metrics.observe_throttle("fetch", 40)
    samples = _samples(metrics)
    assert samples[("stratalog_authentication_failures_total",
                    (("reason", "wrong_credentials"),))] == 2
    assert samples[("stratalog_authentication_failures_total",
                    (("reason", "credentials_required"),))] == 1
    assert samples[("stratalog_authorization_denials_total", (("operation", "WRITE"),))] == 1
    assert samples[("stratalog_quota_throttles_total", (("quota", "produce"),))] == 2
    assert samples[("stratalog_quota_throttle_seconds_total", (("quota", "produce"),))] == 1.75
    assert samples[("stratalog_quota_throttles_total", (("quota", "fetch"),))] == 1
    assert samples[("stratalog_quota_throttle_seconds_total", (("quota", "fetch"),))] == 0.04


def test_request_latency_histogram_and_codes() -> None:
    metrics = ServerMetrics()
    metrics.observe_request("Produce", "OK", 0.0003)
    metrics.observe_request("Produce", "OK", 0.02)
    metrics.observe_request("Produce", "INVALID_ARGUMENT", 0.0001)
    metrics.observe_request("Subscribe", "CANCELLED", None)
    samples = _samples(metrics)
    assert samples[("stratalog_requests_total", (("code", "OK"), ("rpc", "Produce")))] == 2
    assert samples[
        ("stratalog_requests_total", (("code", "INVALID_ARGUMENT"), ("rpc", "Produce")))
    ] == 1
    assert samples[("stratalog_request_duration_seconds_count", (("rpc", "Produce"),))] == 3
    # 0.0001 and 0.0003 are at or under the 0.0005 s bucket; 0.02 is not.
    assert samples[
        ("stratalog_request_duration_seconds_bucket", (("le", "0.0005"), ("rpc", "Produce")))
    ] == 2
    # A stream's life is not a latency.
    assert ("stratalog_request_duration_seconds_count", (("rpc", "Subscribe"),)) not in samples
    assert samples[("stratalog_requests_total", (("code", "CANCELLED"), ("rpc", "Subscribe")))] == 1


def test_histogram_buckets_are_cumulative_with_count_sum_and_created() -> None:
    # What prometheus-client's Histogram and Counter export, sample for sample.
    metrics = ServerMetrics()
    latencies = [0.00001, 0.00005, 0.00007, 0.0003, 0.004, 0.9, 2.0, 11.0, 30.0]
    for seconds in latencies:
        metrics.observe_request("FetchByOffset", "OK", seconds)
    metrics.observe_fetch("orders", 3, 30)
    samples = _samples(metrics)
    rpc = ("rpc", "FetchByOffset")
    for bound in LATENCY_BUCKETS_SECONDS:
        expected = sum(1 for seconds in latencies if seconds <= bound)
        le = ("le", floatToGoString(bound))
        assert samples[("stratalog_request_duration_seconds_bucket", (le, rpc))] == expected
    assert samples[("stratalog_request_duration_seconds_bucket", (("le", "+Inf"), rpc))] == 9
    assert samples[("stratalog_request_duration_seconds_count", (rpc,))] == 9
    assert samples[("stratalog_request_duration_seconds_sum", (rpc,))] == pytest.approx(
        sum(latencies)
    )
    started = time.time()
    for name, labels in (
        ("stratalog_request_duration_seconds_created", (rpc,)),
        ("stratalog_requests_created", (("code", "OK"), rpc)),
        ("stratalog_records_out_created", (("topic", "orders"),)),
        ("stratalog_bytes_out_created", (("topic", "orders"),)),
    ):
        assert started - 60 < samples[(name, labels)] <= started, name


def test_observations_from_many_threads_are_all_counted() -> None:
    metrics = ServerMetrics()

    def observe() -> None:
        for _ in range(5000):
            metrics.observe_fetch("orders", 2, 10)
            metrics.observe_produce("orders", 1, 5)
            metrics.observe_request("FetchByOffset", "OK", 0.001)

    threads = [threading.Thread(target=observe) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    samples = _samples(metrics)
    assert samples[("stratalog_records_out_total", (("topic", "orders"),))] == 40_000
    assert samples[("stratalog_bytes_out_total", (("topic", "orders"),))] == 200_000
    assert samples[("stratalog_records_in_total", (("topic", "orders"),))] == 20_000
    assert samples[("stratalog_bytes_in_total", (("topic", "orders"),))] == 100_000
    rpc = ("rpc", "FetchByOffset")
    assert samples[("stratalog_requests_total", (("code", "OK"), rpc))] == 20_000
    assert samples[("stratalog_request_duration_seconds_count", (rpc,))] == 20_000


def test_forget_topic_drops_its_label_sets() -> None:
    metrics = ServerMetrics()
    metrics.observe_produce("gone", 1, 10)
    metrics.observe_produce("kept", 1, 10)
    metrics.forget_topic("gone")
    metrics.forget_topic("never-seen")
    samples = _samples(metrics)
    assert ("stratalog_records_in_total", (("topic", "gone"),)) not in samples
    assert ("stratalog_records_in_total", (("topic", "kept"),)) in samples
    # A topic created again under the name counts from zero.
    metrics.observe_produce("gone", 2, 20)
    assert _samples(metrics)[("stratalog_records_in_total", (("topic", "gone"),))] == 2


def test_two_servers_have_separate_registries() -> None:
    first, second = ServerMetrics(), ServerMetrics()
    first.observe_produce("t", 3, 30)
    assert ("stratalog_records_in_total", (("topic", "t"),)) not in _samples(second)


def test_log_gauges_come_from_the_last_snapshot() -> None:
    metrics = ServerMetrics()

    def partition(number: int, size_bytes: int, end: int) -> PartitionDescription:
        return PartitionDescription(partition=number, log_start_offset=2, log_end_offset=end,
                                    size_bytes=size_bytes, segment_count=3, log_dir="/d",
                                    max_timestamp=-1)

    metrics.update_logs([
        TopicDescription("orders", {}, [partition(0, 1000, 10), partition(1, 2000, 20)]),
        TopicDescription("empty", {}, []),
    ])
    samples = _samples(metrics)
    labels = (("partition", "1"), ("topic", "orders"))
    assert samples[("stratalog_log_size_bytes", labels)] == 2000
    assert samples[("stratalog_log_segments", labels)] == 3
    assert samples[("stratalog_log_start_offset", labels)] == 2
    assert samples[("stratalog_log_end_offset", labels)] == 20
    # A new snapshot replaces the old one whole: a deleted topic's gauges disappear.
    metrics.update_logs([TopicDescription("orders", {}, [partition(0, 5, 1)])])
    samples = _samples(metrics)
    assert ("stratalog_log_size_bytes", labels) not in samples
    assert samples[("stratalog_log_size_bytes", (("partition", "0"), ("topic", "orders")))] == 5


_PRODUCE = (("grpc_method", "Produce"), ("grpc_service", "stratalog.v1.Broker"),
            ("grpc_type", "unary"))


def test_grpc_server_metrics_are_named_and_labelled_as_go_grpc_prometheus() -> None:
    metrics = ServerMetrics()
    labels = ("unary", "stratalog.v1.Broker", "Produce")
    for seconds in (0.0001, 0.003):
        metrics.grpc_server.observe_started(labels)
        metrics.grpc_server.observe_handled(labels, "OK", seconds)
    metrics.grpc_server.observe_started(labels)
    metrics.grpc_server.observe_handled(labels, "ResourceExhausted", 20.0)
    metrics.grpc_server.observe_started(labels)  # still running: started, not handled
    samples = _samples(metrics)
    assert samples[("grpc_server_started_total", _PRODUCE)] == 4
    assert samples[("grpc_server_handled_total", (("grpc_code", "OK"), *_PRODUCE))] == 2
    assert samples[("grpc_server_handled_total",
                    (("grpc_code", "ResourceExhausted"), *_PRODUCE))] == 1
    assert samples[("grpc_server_handling_seconds_count", _PRODUCE)] == 3
    assert samples[("grpc_server_handling_seconds_sum", _PRODUCE)] == pytest.approx(20.0031)
    assert samples[("grpc_server_handling_seconds_bucket", (*_PRODUCE, ("le", "0.005")))] == 2
    assert samples[("grpc_server_handling_seconds_bucket", (*_PRODUCE, ("le", "+Inf")))] == 3


def test_grpc_code_names_are_go_s() -> None:
    import grpc

    from stratalog.server.metrics import GRPC_CODE_NAMES

    assert GRPC_CODE_NAMES[grpc.StatusCode.OK] == "OK"
    assert GRPC_CODE_NAMES[grpc.StatusCode.CANCELLED] == "Canceled"
    assert GRPC_CODE_NAMES[grpc.StatusCode.INVALID_ARGUMENT] == "InvalidArgument"
    assert GRPC_CODE_NAMES[grpc.StatusCode.DEADLINE_EXCEEDED] == "DeadlineExceeded"
    assert GRPC_CODE_NAMES[grpc.StatusCode.UNAUTHENTICATED] == "Unauthenticated"
    assert len(set(GRPC_CODE_NAMES.values())) == len(grpc.StatusCode)


def test_build_info_is_one_with_the_versions() -> None:
    import platform

    import grpc

    import stratalog

    samples = _samples(ServerMetrics())
    labels = (("grpc", grpc.__version__), ("python", platform.python_version()),
              ("version", stratalog.__version__))
    assert samples[("stratalog_build_info", labels)] == 1


def _cleaner_status(cleaned_offset: int, dirty_ratio: float, last_clean_ms: int
                    ) -> CleanerPartitionStatus:
    return CleanerPartitionStatus(cleaned_offset=cleaned_offset, dirty_ratio=dirty_ratio,
                                  dirty_bytes=100, cleanable_bytes=400,
                                  last_clean_ms=last_clean_ms, in_progress=False)


def test_cleaner_metrics_are_read_from_the_source_at_each_scrape() -> None:
    metrics = ServerMetrics()
    assert not [k for k in _samples(metrics) if k[0].startswith("stratalog_cleaner")]
    snapshot = CleanerSnapshot(
        CleanerStats(bytes_read=4000, bytes_written=1000, records_removed=90, cleanings=2,
                     last_run_ms=1_700_000_000_500, max_dirty_ratio=0.75),
        [("changelog", 0, _cleaner_status(120, 0.25, 1_700_000_000_000)),
         ("changelog", 1, _cleaner_status(0, 0.75, -1))],
    )
    reads = []
    metrics.cleaner.bind(lambda: reads.append(1) or snapshot)
    samples = _samples(metrics)
    assert len(reads) == 1
    assert samples[("stratalog_cleaner_bytes_read_total", ())] == 4000
    assert samples[("stratalog_cleaner_bytes_written_total", ())] == 1000
    assert samples[("stratalog_cleaner_records_removed_total", ())] == 90
    assert samples[("stratalog_cleaner_cleanings_total", ())] == 2
    assert samples[("stratalog_cleaner_last_run_timestamp_seconds", ())] == 1_700_000_000.5
    assert samples[("stratalog_cleaner_max_dirty_ratio", ())] == 0.75
    first = (("partition", "0"), ("topic", "changelog"))
    second = (("partition", "1"), ("topic", "changelog"))
    assert samples[("stratalog_cleaner_dirty_ratio", first)] == 0.25
    assert samples[("stratalog_cleaner_dirty_ratio", second)] == 0.75
    assert samples[("stratalog_cleaner_cleaned_offset", first)] == 120
    assert samples[("stratalog_cleaner_last_clean_timestamp_seconds", first)] == 1_700_000_000
    # Never cleaned: no sample rather than a time of -1 ms.
    assert ("stratalog_cleaner_last_clean_timestamp_seconds", second) not in samples
    _samples(metrics)
    assert len(reads) == 2  # read at each scrape, never cached


def test_a_failing_cleaner_source_leaves_the_other_metrics() -> None:
    metrics = ServerMetrics()
    metrics.observe_produce("orders", 1, 10)

    def closed() -> CleanerSnapshot:
        raise RuntimeError("the log manager is closed")

    metrics.cleaner.bind(closed)
    samples = _samples(metrics)
    assert samples[("stratalog_records_in_total", (("topic", "orders"),))] == 1
    assert not [k for k in samples if k[0].startswith("stratalog_cleaner")]
    metrics.bind_cleaner(None)
    assert not [k for k in _samples(metrics) if k[0].startswith("stratalog_cleaner")]


def _lag_samples(metrics: ServerMetrics) -> dict[tuple[str, ...], float]:
    return {
        tuple(v for _, v in labels): value
        for (name, labels), value in _samples(metrics).items() if name == "stratalog_group_lag"
    }


def test_group_lag_is_log_end_minus_committed_read_at_each_scrape() -> None:
    metrics = ServerMetrics()
    assert "stratalog_group_lag" not in metrics.render().decode()  # nothing bound yet
    committed = [("g", "t", 0, 40), ("g", "t", 1, 90), ("h", "t", 0, 100), ("h", "gone", 0, 5),
                 ("h", "t", 2, 130)]
    ends = {("t", 0): 100, ("t", 1): 100, ("t", 2): 120}
    reads: list[tuple[str, int]] = []

    def log_end(topic: str, partition: int) -> int | None:
        reads.append((topic, partition))
        return ends.get((topic, partition))

    metrics.bind_group_lag(lambda: iter(committed), log_end)
    samples = _samples(metrics)
    assert _lag_samples(metrics) == {
        ("g", "0", "t"): 60, ("g", "1", "t"): 10, ("h", "0", "t"): 0,
        ("h", "2", "t"): 0,  # committed beyond the end (a truncated partition): 0, not -10
    }  # ("h", "gone", 0): no replica here, no sample
    assert samples[("stratalog_group_lag_total", (("group", "g"),))] == 70
    assert samples[("stratalog_group_lag_total", (("group", "h"),))] == 0
    assert samples[("stratalog_group_lag_series_omitted", ())] == 0
    reads.clear()
    metrics.render()
    assert sorted(reads) == [("gone", 0), ("t", 0), ("t", 1), ("t", 2)]  # once per partition
    ends[("t", 1)] = 150  # the next scrape reads the partition again
    assert _lag_samples(metrics)[("g", "1", "t")] == 60
    metrics.bind_group_lag(None, None)
    assert "stratalog_group_lag" not in metrics.render().decode()


def test_group_lag_keeps_the_largest_series_and_says_how_many_it_left_out() -> None:
    metrics = ServerMetrics(group_lag_max_series=3)
    # 10 groups x 5 partitions, lag = group * 10 + partition; the end is 1000 everywhere.
    committed = [(f"g{g}", "t", p, 1000 - (g * 10 + p)) for g in range(10) for p in range(5)]
    metrics.bind_group_lag(lambda: iter(committed), lambda topic, partition: 1000)
    samples = _samples(metrics)
    assert _lag_samples(metrics) == {("g9", "4", "t"): 94, ("g9", "3", "t"): 93,
                                     ("g9", "2", "t"): 92}
    totals = {labels[0][1]: value for (name, labels), value in samples.items()
              if name == "stratalog_group_lag_total"}
    # Every partition counts in its group's total; the three largest groups are exported.
    assert totals == {"g9": 90 * 5 + 10, "g8": 80 * 5 + 10, "g7": 70 * 5 + 10}
    assert samples[("stratalog_group_lag_series_omitted", ())] == 50 - 3


def test_group_lag_off_and_a_failing_source_leave_the_other_metrics() -> None:
    off = ServerMetrics(group_lag_max_series=0)
    off.bind_group_lag(lambda: iter([("g", "t", 0, 1)]), lambda topic, partition: 5)
    assert "stratalog_group_lag" not in off.render().decode()

    def failing() -> list[tuple[str, str, int, int]]:
        raise RuntimeError("closing")

    metrics = ServerMetrics()
    metrics.bind_group_lag(failing, lambda topic, partition: 5)
    text = metrics.render().decode()
    assert "stratalog_group_lag" not in text and "stratalog_build_info" in text
