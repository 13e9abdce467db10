"""Prometheus metrics of a running server, and the HTTP endpoint that serves them.

What an operator watches, in Prometheus's text format at ``http://HOST:metrics_port/metrics``::

    stratalog_records_in_total{topic}          records appended (Produce)
    stratalog_bytes_in_total{topic}            batch bytes appended, as stored
    stratalog_records_out_total{topic}         records sent (fetches and Subscribe; for raw
                                               batches, every record of every batch sent)
    stratalog_bytes_out_total{topic}           batch bytes read for clients
    stratalog_request_duration_seconds{rpc}    histogram of unary RPC latency (a Subscribe's
                                               whole life is not a latency: it is not observed)
    stratalog_requests_total{rpc,code}         RPCs finished, by gRPC status code name
    stratalog_subscribers                      Subscribe streams open now
    stratalog_log_size_bytes{topic,partition}  bytes of the partition's .log files
    stratalog_log_segments{topic,partition}    segment count
    stratalog_log_start_offset{topic,partition}, stratalog_log_end_offset{topic,partition}
    process_*                                  RSS, CPU, open files (prometheus-client's collector)

The ``log_*`` gauges come from a snapshot of the LogManager's topic descriptions that the
maintenance task refreshes after each pass (see app.py); a scrape reads that snapshot and never
touches the storage engine from the HTTP thread.

Each :class:`ServerMetrics` has its own registry, so tests may run several servers in one
process. Counters and histograms are thread-safe (prometheus-client locks them).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from stratalog.server.storage.log_manager import TopicDescription

__all__ = ["LATENCY_BUCKETS_SECONDS", "LogSnapshotCollector", "MetricsEndpoint", "ServerMetrics"]

#: Histogram buckets for unary RPC latency: 50 µs to 10 s, denser where a local RPC lands.
LATENCY_BUCKETS_SECONDS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0,
)


class LogSnapshotCollector(Collector):
    """Exports per-partition gauges from the last snapshot of topic descriptions.

    Holds one immutable tuple of rows, replaced whole by :meth:`update` (a reference swap, so
    a concurrent scrape sees the old or the new snapshot, never half of each).
    """

    def __init__(self) -> None:
        self._rows: tuple[tuple[str, str, int, int, int, int], ...] = ()

    def update(self, topics: Iterable[TopicDescription]) -> None:
        """Replace the snapshot with ``topics`` (LogManager.list_topics() output)."""
        self._rows = tuple(
            (
                topic.name,
                str(p.partition),
                p.size_bytes,
                p.segment_count,
                p.log_start_offset,
                p.log_end_offset,
            )
            for topic in topics
            for p in topic.partitions
        )

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = self._rows
        families = (
            ("stratalog_log_size_bytes", "Bytes of the partition's .log files", 2),
            ("stratalog_log_segments", "Segments of the partition", 3),
            ("stratalog_log_start_offset", "First offset readable in the partition", 4),
            ("stratalog_log_end_offset", "Offset the next appended record gets", 5),
        )
        for name, documentation, column in families:
            family = GaugeMetricFamily(name, documentation, labels=("topic", "partition"))
            for row in rows:
                family.add_metric(row[:2], row[column])
            yield family


class ServerMetrics:
    """The metrics of one server, in a registry of their own.

    Concurrency: every method may be called from any thread (prometheus-client's metrics lock
    internally; the log snapshot is swapped whole).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.records_in = Counter(
            "stratalog_records_in", "Records appended by Produce", ("topic",), registry=r
        )
        self.bytes_in = Counter(
            "stratalog_bytes_in", "Record batch bytes appended by Produce", ("topic",), registry=r
        )
        self.records_out = Counter(
            "stratalog_records_out", "Records sent by fetches and Subscribe", ("topic",),
            registry=r,
        )
        self.bytes_out = Counter(
            "stratalog_bytes_out", "Record batch bytes read for fetches and Subscribe",
            ("topic",), registry=r,
        )
        self.request_seconds = Histogram(
            "stratalog_request_duration_seconds", "Latency of unary RPCs", ("rpc",),
            buckets=LATENCY_BUCKETS_SECONDS, registry=r,
        )
        self.requests = Counter(
            "stratalog_requests", "RPCs finished, by status code", ("rpc", "code"), registry=r
        )
        self.subscribers = Gauge(
            "stratalog_subscribers", "Subscribe streams open now", registry=r
        )
        # Labelled children by (metric, label values), so the hot path skips labels().
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self.logs = LogSnapshotCollector()
        r.register(self.logs)
        ProcessCollector(registry=r)

    def observe_request(self, rpc: str, code_name: str, seconds: float | None) -> None:
        """Count one finished RPC; ``seconds`` None for streams (no latency observed)."""
        self._child(self.requests, (rpc, code_name)).inc()
        if seconds is not None:
            self._child(self.request_seconds, (rpc,)).observe(seconds)

    def _child(self, metric: Any, label_values: tuple[str, ...]) -> Any:
        # labels() hashes and locks on every call (~10 µs); a request should not pay it.
        # A plain dict: a lost race only looks the same child up twice (labels() returns it).
        key = (metric, label_values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*label_values)
        return child

    def observe_produce(self, topic: str, records: int, size_bytes: int) -> None:
        self._child(self.records_in, (topic,)).inc(records)
        self._child(self.bytes_in, (topic,)).inc(size_bytes)

    def observe_fetch(self, topic: str, records: int, size_bytes: int) -> None:
        if records or size_bytes:
            self._child(self.records_out, (topic,)).inc(records)
            self._child(self.bytes_out, (topic,)).inc(size_bytes)

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's label sets, so that deleted topics do not pile up."""
        for counter in (self.records_in, self.bytes_in, self.records_out, self.bytes_out):
            self._children.pop((counter, (topic,)), None)
            # KeyError: the topic was never produced to or fetched from.
            with contextlib.suppress(KeyError):
                counter.remove(topic)

    def update_logs(self, topics: Sequence[TopicDescription]) -> None:
        self.logs.update(topics)

    def render(self) -> bytes:
        """The text exposition of every metric (what /metrics serves)."""
        return generate_latest(self.registry)


class MetricsEndpoint:
    """The HTTP server of ``/metrics`` on a daemon thread (prometheus-client's WSGI server).

    Holds the listening socket from :meth:`start` until :meth:`close`. Blocking calls; the
    server calls them outside the event loop's hot path (once at start and stop).
    """

    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0 = any free port) and return the bound port.

        Raises:
            OSError: the address cannot be bound (in use, not local).
        """
        httpd, thread = start_http_server(port, addr=host, registry=self._metrics.registry)
        self._httpd, self._thread = httpd, thread
        bound: Any = httpd.server_address[1]
        return int(bound)

    def close(self) -> None:
        """Stop serving and release the port. Idempotent."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
