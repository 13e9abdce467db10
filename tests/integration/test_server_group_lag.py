"""The consumer lag metrics of a real server process (issue 27 item 7; docs/groups.md, "Lag"):
``stratalog_group_lag{group,topic,partition}`` (log end - committed offset, computed when
/metrics is scraped), ``stratalog_group_lag_total{group}`` and the bound
(``--group-lag-metrics-max-series``: the largest lags kept, ``stratalog_group_lag_series_omitted``
counting the rest), before and after a kill -9 and the load of the offsets back."""

from __future__ import annotations

import urllib.request

import grpc
from prometheus_client.parser import text_string_to_metric_families

from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import CALL_TIMEOUT_S, ServerProcess, wait_until

T = CALL_TIMEOUT_S
FLAGS = ("--offsets-topic-num-partitions", "3", "--group-lag-metrics-max-series", "3")


def lag_metrics(server: ServerProcess) -> dict[tuple[str, ...], float]:
    """The lag samples of one scrape, by (metric name, group, topic, partition) (the labels
    the sample has)."""
    with urllib.request.urlopen(server.metrics_url, timeout=T) as response:
        text = response.read().decode()
    return {
        (sample.name, *(sample.labels[name] for name in ("group", "topic", "partition")
                        if name in sample.labels)): sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("stratalog_group_lag")
        for sample in family.samples
    }


def produce(stub: broker_pb2_grpc.BrokerStub, partition: int, count: int) -> None:
    stub.Produce(pb.ProduceRequest(topic="lagged", partition=partition, records=[
        pb.Record(value=b"v%d" % i) for i in range(count)]), timeout=T)


def commit(stub: broker_pb2_grpc.BrokerStub, group: str, offsets: dict[int, int]) -> None:
    stub.OffsetCommit(pb.OffsetCommitRequest(group_id=group, generation_id=-1, offsets=[
        pb.CommittedOffset(topic="lagged", partition=p, offset=o) for p, o in offsets.items()
    ]), timeout=T)


EXPECTED = {
    # group "a" lags 8, 6, 4 and 2 on partitions 0-3; "b" is at the end of partition 0. Three
    # series at most: the three largest lags; the other two are counted as omitted.
    ("stratalog_group_lag", "a", "lagged", "0"): 8.0,
    ("stratalog_group_lag", "a", "lagged", "1"): 6.0,
    ("stratalog_group_lag", "a", "lagged", "2"): 4.0,
    ("stratalog_group_lag_total", "a"): 20.0,
    ("stratalog_group_lag_total", "b"): 0.0,
    ("stratalog_group_lag_series_omitted",): 2.0,
}


def test_lag_per_group_and_partition_is_read_at_scrape_time_and_bounded(
    start_server, tmp_path
) -> None:
    data = tmp_path / "data"
    server = start_server(data, *FLAGS)
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        assert lag_metrics(server) == {("stratalog_group_lag_series_omitted",): 0.0}
        stub.CreateTopic(pb.CreateTopicRequest(name="lagged", partitions=4), timeout=T)
        for partition in range(4):
            produce(stub, partition, 10)
        commit(stub, "a", {0: 2, 1: 4, 2: 6, 3: 8})
        commit(stub, "b", {0: 10})
        assert lag_metrics(server) == EXPECTED
        produce(stub, 0, 5)  # the next scrape reads the new log end
        assert lag_metrics(server) == {
            ("stratalog_group_lag", "a", "lagged", "0"): 13.0,
            ("stratalog_group_lag", "a", "lagged", "1"): 6.0,
            ("stratalog_group_lag", "b", "lagged", "0"): 5.0,  # now among the three largest
            ("stratalog_group_lag_total", "a"): 25.0,
            ("stratalog_group_lag_total", "b"): 5.0,
            ("stratalog_group_lag_series_omitted",): 2.0,
        }
        commit(stub, "a", {0: 15})
    server.kill()

    # The committed offsets come back with the load (through the C reader of the commits).
    server = start_server(data, *FLAGS)
    wait_until(lambda: ("stratalog_group_lag_total", "a") in lag_metrics(server),
               "the offsets to load")
    assert lag_metrics(server) == {
        ("stratalog_group_lag", "b", "lagged", "0"): 5.0,
        ("stratalog_group_lag", "a", "lagged", "1"): 6.0,
        ("stratalog_group_lag", "a", "lagged", "2"): 4.0,
        ("stratalog_group_lag_total", "a"): 12.0,  # 0 + 6 + 4 + 2
        ("stratalog_group_lag_total", "b"): 5.0,
        ("stratalog_group_lag_series_omitted",): 2.0,  # a/3 (2) and a/0 (0)
    }
    assert server.stop() == 0
