"""Prometheus metrics of a running server (server/metrics_endpoint.py serves them over HTTP).

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
    stratalog_groups{state}                    consumer groups coordinated here, by state
                                               (Empty, PreparingRebalance, CompletingRebalance,
                                               Stable, Dead): never a label per group
    stratalog_group_members                    members of those groups
    stratalog_group_rebalances_total           rebalances completed (a generation's leader
                                               answered)
    stratalog_offset_commits_total             partition offsets committed and acknowledged
    stratalog_group_lag{group,topic,partition}  consumer lag (log end - committed offset),
                                               computed at scrape time; the largest
                                               group_lag_metrics_max_series only
    stratalog_group_lag_total{group}           a group's lag over all its partitions (the
                                               largest group_lag_metrics_max_series groups)
    stratalog_group_lag_series_omitted         group_lag series a scrape left out (beyond
                                               the bound)
    stratalog_group_coordinator_load_seconds   histogram: one __consumer_offsets partition's
                                               load at start
    stratalog_waiting_rpcs{kind}               RPCs admitted by the per-client limits and
                                               holding a slot: kind "subscribe" or "session"
                                               (streams, for their life), "long_poll" (while
                                               waiting, unary or on a session) or
                                               "group_rebalance" (a JoinGroup or SyncGroup),
                                               "held_heartbeat" (a Heartbeat held)
    stratalog_sessions                         Session streams open now
    stratalog_session_requests                 requests on Session streams being served or
                                               answered now, all streams (each one is counted
                                               in requests_total and request_duration_seconds
                                               under its unary RPC's name, as a unary call)
    stratalog_waiting_rpcs_refused_total{limit}  waiting RPCs refused, by the setting whose
                                               limit was reached (never by client: a label
                                               per principal would grow without bound)
    stratalog_subscribe_buffer_bytes           bytes of Subscribe messages read and not yet
                                               taken by gRPC's flow control (the budget's use)
    stratalog_kafka_connections                Kafka-protocol connections open now
                                               (server/kafka/listener.py)
    stratalog_kafka_request_bytes              bytes of Kafka requests read and not yet
                                               answered, all connections (the budget
                                               kafka_queued_request_bytes_max bounds)
    stratalog_authentication_failures_total{reason}  calls refused UNAUTHENTICATED, by what was
                                               wrong: wrong_credentials, malformed_credentials,
                                               credentials_not_accepted, credentials_required
    stratalog_authorization_denials_total{operation}  calls refused by the ACLs, by the
                                               operation refused (READ, WRITE, ...)
    stratalog_quota_throttles_total{quota}     answers delayed by a byte-rate quota (quota
                                               "produce" or "fetch"; Subscribe messages count
                                               as fetch)
    stratalog_quota_throttle_seconds_total{quota}  the delays of those answers, summed
    stratalog_log_size_bytes{topic,partition}  bytes of the partition's .log files
    stratalog_log_segments{topic,partition}    segment count
    stratalog_log_start_offset{topic,partition}, stratalog_log_end_offset{topic,partition}
    stratalog_cleaner_bytes_read_total         the log cleaner (issue 16): bytes of log read
                                               (both passes: offset map and rewrite)
    stratalog_cleaner_bytes_written_total      bytes of cleaned segments written
    stratalog_cleaner_records_removed_total    records the cleanings removed
    stratalog_cleaner_cleanings_total          cleanings finished (background and RPC)
    stratalog_cleaner_last_run_timestamp_seconds  when the last cleaning ended (no sample
                                               before the first)
    stratalog_cleaner_max_dirty_ratio          the dirtiest compacted partition's dirty ratio
                                               (Kafka's max-dirty-percent, as a ratio)
    stratalog_cleaner_dirty_ratio{topic,partition}      bytes past the cleaner's position
                                               over the cleanable bytes (0..1), compacted
                                               topics only
    stratalog_cleaner_cleaned_offset{topic,partition}   the cleaner's position (first dirty
                                               offset)
    stratalog_cleaner_last_clean_timestamp_seconds{topic,partition}  the partition's last
                                               cleaning (no sample before its first)
    stratalog_leader_partitions                replicated partitions this server leads now
                                               (cluster mode, issue 17; Kafka's LeaderCount)
    stratalog_under_replicated_partitions      of those, the ones whose ISR is smaller than
                                               their replicas (Kafka's UnderReplicatedPartitions)
    stratalog_isr_shrinks_total, stratalog_isr_expands_total   ISR changes this server wrote
                                               as leader (Kafka's IsrShrinksPerSec/ExpandsPerSec)
    stratalog_active_controller                1 on the controller (Kafka's ActiveControllerCount)
    stratalog_offline_partitions               partitions with no live leader, counted by the
                                               controller (Kafka's OfflinePartitionsCount)
    stratalog_under_min_isr_partitions         partitions led here with an ISR below their
                                               min.insync.replicas (Kafka's UnderMinIsr)
    stratalog_live_brokers                     brokers registered in etcd as last read
                                               (server/cluster/cluster_metrics.py)
    stratalog_metrics_connections              connections to the metrics endpoint open now
    stratalog_metrics_connections_refused_total{reason}  connections the metrics endpoint
                                               closed early, by why: connections_max, idle,
                                               request_timeout, request_too_large,
                                               bad_request, unauthenticated
                                               (server/metrics_endpoint.py)
    process_*                                  RSS, CPU, open files (prometheus-client's collector)
    stratalog_build_info{version,python,grpc}  1, labelled with what the server runs

The standard gRPC server metrics too, named and labelled as go-grpc-prometheus (and
py-grpc-prometheus) name them, so that the dashboards and alerts written for those work as they
are; counted by the outermost server interceptor (server/rpc/metrics_interceptor.py), so every call
that reached a method is counted, refused ones (authentication, ACLs, limits) included, and
each request on a Session stream once more under its own RPC's name as a unary call::

    grpc_server_started_total{grpc_type,grpc_service,grpc_method}    calls started
    grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}  calls finished
    grpc_server_handling_seconds{grpc_type,grpc_service,grpc_method}  histogram of their time
                                               (streams: their whole life, as go-grpc-prometheus)

``grpc_type`` is ``unary``, ``client_stream``, ``server_stream`` or ``bidi_stream`` and
``grpc_code`` a code as Go spells it (``OK``, ``InvalidArgument``, ``Canceled`` ...), as
go-grpc-prometheus labels them (py-grpc-prometheus writes Java's ``UNARY`` ...); the histogram
has this module's buckets (:data:`LATENCY_BUCKETS_SECONDS`), not Prometheus's default ones.
Methods are the server's own (a call to an unknown method is not counted), so the label sets
are bounded.

Labels come from fixed sets only (RPC names, status codes, kinds, setting names, operations,
reasons), and topics (and, for the lag alone, group ids, in a number of series a setting
bounds: :class:`GroupLagCollector`): never a principal or a client's address, which would
grow the series without bound (a client choosing its user name or port would choose the
server's memory). A counter without a sample has not been incremented yet: read it as 0.

The ``log_*`` gauges come from a snapshot of the LogManager's topic descriptions that the
maintenance task refreshes after each pass (see app.py); a scrape reads that snapshot and never
touches the storage engine from the endpoint's rendering thread. The ``cleaner_*`` metrics are
the exception, read at scrape time by :class:`CleanerCollector` from the LogManager's cleaner
(``cleaner_stats()``, ``cleaner_status()``): counters and segment sizes the cleaner and the logs
keep in memory (a topic with ``min.compaction.lag.ms`` set also has its dirty segments' largest
timestamps read, from their cached indexes), so a scrape shows a cleaning's figures the moment
it ends instead of a pass later.

Each :class:`ServerMetrics` has its own registry, so tests may run several servers in one
process. The counters and the histogram are plain numbers under one lock
(:class:`TrafficCollector`), exported at scrape time: cheaper per request than
prometheus-client's metric objects, and thread-safe as they are.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import logging
import platform
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from stratalog.server.storage.errors import UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from stratalog.server.storage.cleaner_manager import CleanerPartitionStatus, CleanerStats
    from stratalog.server.storage.log_manager import LogManager, TopicDescription

__all__ = [
    "GRPC_CODE_NAMES",
    "LATENCY_BUCKETS_SECONDS",
    "CleanerCollector",
    "CleanerSnapshot",
    "GrpcServerCollector",
    "LogSnapshotCollector",
    "ServerMetrics",
    "TrafficCollector",
]

_logger = logging.getLogger(__name__)

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


class CleanerSnapshot(NamedTuple):
    """The log cleaner's figures at one moment: its cumulative ``stats`` (the LogManager's
    ``CleanerStats``) and ``(topic, partition, status)`` for every partition of a compacted
    topic (its ``CleanerPartitionStatus``)."""

    stats: CleanerStats
    partitions: Sequence[tuple[str, int, CleanerPartitionStatus]]


def cleaner_snapshot(log_manager: LogManager) -> CleanerSnapshot:
    """The cleaner's figures, read from ``log_manager`` (mostly in memory: see the module
    docstring). A partition deleted between the listing and its status is left out."""
    partitions = []
    for (topic, partition), partition_log in sorted(log_manager.logs().items()):
        if not partition_log.config.is_compacted:
            continue
        try:
            status = log_manager.cleaner_status(topic, partition)
        except UnknownTopicOrPartitionError:
            continue
        partitions.append((topic, partition, status))
    return CleanerSnapshot(log_manager.cleaner_stats(), partitions)


class CleanerCollector(Collector):
    """Exports the log cleaner's counters and per-partition gauges, read at scrape time.

    Holds the function that reads them (:func:`cleaner_snapshot` bound to the server's
    LogManager once it is open, by :meth:`bind`); exports nothing before, or when the read fails
    (a LogManager closing under the scrape), which is logged at DEBUG.

    Concurrency: :meth:`collect` runs on the scrape's thread; the LogManager's cleaner calls are
    thread-safe.
    """

    def __init__(self) -> None:
        self._source: Callable[[], CleanerSnapshot] | None = None

    def bind(self, source: Callable[[], CleanerSnapshot] | None) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        source = self._source
        if source is None:
            return
        try:
            stats, partitions = source()
        except Exception:  # a closing LogManager: no cleaner figures in this scrape
            _logger.debug("cannot read the cleaner's figures for a scrape", exc_info=True)
            return
        for name, documentation, value in (
            ("bytes_read", "Bytes of log the cleaner read (offset map and rewrite passes)",
             stats.bytes_read),
            ("bytes_written", "Bytes of cleaned segments the cleaner wrote", stats.bytes_written),
            ("records_removed", "Records the cleaner removed", stats.records_removed),
            ("cleanings", "Cleanings finished, background and CleanPartition", stats.cleanings),
        ):
            yield CounterMetricFamily(f"stratalog_cleaner_{name}", documentation, value=value)
        last_run = GaugeMetricFamily(
            "stratalog_cleaner_last_run_timestamp_seconds", "When the last cleaning ended"
        )
        if stats.last_run_ms >= 0:
            last_run.add_metric((), stats.last_run_ms / 1000)
        yield last_run
        yield GaugeMetricFamily(
            "stratalog_cleaner_max_dirty_ratio",
            "Dirty ratio of the dirtiest compacted partition",
            value=stats.max_dirty_ratio,
        )
        labels = ("topic", "partition")
        dirty = GaugeMetricFamily(
            "stratalog_cleaner_dirty_ratio",
            "Bytes past the cleaner's position over the cleanable bytes", labels=labels,
        )
        cleaned = GaugeMetricFamily(
            "stratalog_cleaner_cleaned_offset", "First offset the cleaner has not cleaned",
            labels=labels,
        )
        last_clean = GaugeMetricFamily(
            "stratalog_cleaner_last_clean_timestamp_seconds",
            "When the partition was last cleaned", labels=labels,
        )
        for topic, partition, status in partitions:
            key = (topic, str(partition))
            dirty.add_metric(key, status.dirty_ratio)
            cleaned.add_metric(key, status.cleaned_offset)
            if status.last_clean_ms >= 0:
                last_clean.add_metric(key, status.last_clean_ms / 1000)
        yield dirty
        yield cleaned
        yield last_clean


#: What a scrape reads of the consumer groups: groups by state name, and members in all.
GroupCounts = tuple[dict[str, int], int]


class GroupsCollector(Collector):
    """Exports the consumer groups by state and their members, read at scrape time.

    Holds the function that counts them (``GroupService.group_counts``, bound by the server
    once it serves groups, :meth:`bind`); exports nothing before. Labels: the five state names
    only (bounded), never a group id.

    Concurrency: :meth:`collect` runs on the scrape's thread; the count copies each
    coordinator's groups with one ``list()`` (atomic under the GIL) before reading them.
    """

    def __init__(self) -> None:
        self._source: Callable[[], GroupCounts] | None = None

    def bind(self, source: Callable[[], GroupCounts] | None) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        source = self._source
        if source is None:
            return
        try:
            by_state, members = source()
        except Exception:  # a service closing under the scrape: no group figures this time
            _logger.debug("cannot count the groups for a scrape", exc_info=True)
            return
        groups = GaugeMetricFamily(
            "stratalog_groups", "Consumer groups this server coordinates, by state",
            labels=("state",),
        )
        for state, count in sorted(by_state.items()):
            groups.add_metric((state,), count)
        yield groups
        yield GaugeMetricFamily(
            "stratalog_group_members", "Members of the groups this server coordinates",
            value=members,
        )


#: One committed offset a scrape reads: (group id, topic, partition, committed offset).
CommittedOffsetRow = tuple[str, str, int, int]


class GroupLagCollector(Collector):
    """Exports the consumer lag (log end offset - committed offset) of every group and
    partition this server coordinates, computed at scrape time, in at most ``max_series``
    series of each kind (issue 27, item 7; docs/groups.md, "Lag")::

        stratalog_group_lag{group,topic,partition}   the largest max_series lags
        stratalog_group_lag_total{group}             the largest max_series groups' sums
        stratalog_group_lag_series_omitted           per-partition series left out

    A group id is chosen by clients, so the series are bounded: beyond ``max_series`` the
    largest lags are kept (a bounded heap: the scrape holds ``max_series`` rows, not one per
    committed offset), and the omitted gauge says how many were not exported (0 when none
    were). A group's total counts all its partitions, exported or not. The log end offset is
    the partition's high watermark where this server has a replica of it (a consumer reads no
    further); a committed offset of a partition without one here (another server's, or a
    deleted topic) has no lag sample. A lag below 0 (a commit beyond the end: a truncated or
    recreated partition) is exported as 0.

    Holds two functions, bound by the server (:meth:`bind`): the committed offsets
    (``GroupService.committed_offsets``) and the log end of a partition (None: no replica
    here); exports nothing before, and nothing when ``max_series`` is 0.

    Cost: O(committed offsets x log max_series) per scrape, with one log end read per
    partition. Concurrency: :meth:`collect` runs on the scrape's thread; the source copies
    each coordinator's tables with one ``list()`` (atomic under the GIL) before reading them.
    """

    def __init__(self, max_series: int) -> None:
        assert max_series >= 0
        self.max_series = max_series
        self._offsets: Callable[[], Iterable[CommittedOffsetRow]] | None = None
        self._log_end: Callable[[str, int], int | None] | None = None

    def bind(self, offsets: Callable[[], Iterable[CommittedOffsetRow]] | None,
             log_end: Callable[[str, int], int | None] | None) -> None:
        self._offsets, self._log_end = offsets, log_end

    def collect(self) -> Iterator[Metric]:
        offsets, log_end = self._offsets, self._log_end
        if offsets is None or log_end is None or self.max_series == 0:
            return
        try:
            largest, totals, count = self._lags(offsets(), log_end)
        except Exception:  # a service closing under the scrape: no lag figures this time
            _logger.debug("cannot read the committed offsets for a scrape", exc_info=True)
            return
        lag = GaugeMetricFamily(
            "stratalog_group_lag",
            "Consumer lag: the partition's log end offset minus the group's committed offset"
            " (the largest group_lag_metrics_max_series of them)",
            labels=("group", "topic", "partition"),
        )
        for value, group_id, topic, partition in sorted(largest, reverse=True):
            lag.add_metric((group_id, topic, str(partition)), value)
        yield lag
        total = GaugeMetricFamily(
            "stratalog_group_lag_total",
            "Consumer lag of a group over all its partitions (the largest"
            " group_lag_metrics_max_series groups)",
            labels=("group",),
        )
        for group_id, value in heapq.nlargest(self.max_series, totals.items(),
                                              key=lambda item: (item[1], item[0])):
            total.add_metric((group_id,), value)
        yield total
        yield GaugeMetricFamily(
            "stratalog_group_lag_series_omitted",
            "stratalog_group_lag series this scrape left out (beyond"
            " group_lag_metrics_max_series; their groups' totals still count them)",
            value=count - len(largest),
        )

    def _lags(
        self, rows: Iterable[CommittedOffsetRow], log_end: Callable[[str, int], int | None]
    ) -> tuple[list[tuple[int, str, str, int]], dict[str, int], int]:
        """The largest ``max_series`` (lag, group, topic, partition), every group's total, and
        how many lags there were."""
        ends: dict[tuple[str, int], int | None] = {}  # one read per partition per scrape
        largest: list[tuple[int, str, str, int]] = []  # a min-heap of the largest lags
        totals: dict[str, int] = {}
        count = 0
        for group_id, topic, partition, committed in rows:
            key = (topic, partition)
            if key in ends:
                end = ends[key]
            else:
                end = ends[key] = log_end(topic, partition)
            if end is None:
                continue
            value = max(end - committed, 0)
            totals[group_id] = totals.get(group_id, 0) + value
            count += 1
            entry = (value, group_id, topic, partition)
            if len(largest) < self.max_series:
                heapq.heappush(largest, entry)
            elif entry > largest[0]:
                heapq.heapreplace(largest, entry)
        return largest, totals, count


class TrafficCollector(Collector):
    """The traffic counters and the request histogram, as plain numbers under one lock.

    Holds, per topic, records and bytes in (Produce) and out (fetches, Subscribe); per (rpc,
    code) the RPCs finished; per rpc the latency histogram (a count per bucket of
    :data:`LATENCY_BUCKETS_SECONDS`, one for above them, and the sum); and when each label set
    was first seen. :meth:`collect` exports them exactly as prometheus-client's ``Counter`` and
    ``Histogram`` would (``_total``, ``_created``, cumulative ``_bucket``, ``_count``,
    ``_sum``).

    Why not those classes: each of their increments runs checks and takes a lock of its own,
    about 1 µs; a fetch made five (request count, two histogram parts, records and bytes out),
    a tenth of the server's CPU for a small fetch. Here an observation is one lock and a few
    additions.

    Concurrency: every method may be called from any thread; the lock makes each observation
    and each scrape's copy atomic.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # topic -> [records, bytes, created (seconds since the epoch)]
        self._in: dict[str, list[float]] = {}
        self._out: dict[str, list[float]] = {}
        # (rpc, code) -> [count, created]
        self._requests: dict[tuple[str, str], list[float]] = {}
        # rpc -> [one count per bucket, the count above the last bucket, sum, created]
        self._latency: dict[str, list[float]] = {}

    def observe_request(self, rpc: str, code_name: str, seconds: float | None) -> None:
        with self._lock:
            key = (rpc, code_name)
            counted = self._requests.get(key)
            if counted is None:
                counted = self._requests[key] = [0, time.time()]
            counted[0] += 1
            if seconds is not None:
                latency = self._latency.get(rpc)
                if latency is None:
                    latency = self._latency[rpc] = [0] * (_BUCKETS + 1) + [0.0, time.time()]
                # Buckets are upper bounds, inclusive (Prometheus's "le").
                latency[_bisect_left(LATENCY_BUCKETS_SECONDS, seconds)] += 1
                latency[_SUM_AT] += seconds

    def observe_traffic(self, inbound: bool, topic: str, records: int, size_bytes: int) -> None:
        with self._lock:
            per_topic = self._in if inbound else self._out
            counted = per_topic.get(topic)
            if counted is None:
                counted = per_topic[topic] = [0, 0, time.time()]
            counted[0] += records
            counted[1] += size_bytes

    def observe_metrics_refusal(self, reason: str) -> None:
        """Count a metrics connection closed early; ``reason`` one of
        :data:`~stratalog.server.metrics_endpoint.REFUSAL_REASONS`."""
        self.metrics_connections_refused.labels(reason).inc()

    def forget_topic(self, topic: str) -> None:
        with self._lock:
            self._in.pop(topic, None)
            self._out.pop(topic, None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            inbound = [(topic, *counted) for topic, counted in self._in.items()]
            outbound = [(topic, *counted) for topic, counted in self._out.items()]
            requests = [(*key, *counted) for key, counted in self._requests.items()]
            latency = [(rpc, list(counts)) for rpc, counts in self._latency.items()]
        for direction, rows, verb in (("in", inbound, "appended by Produce"),
                                      ("out", outbound, "sent by fetches and Subscribe")):
            record_family = CounterMetricFamily(
                f"stratalog_records_{direction}", f"Records {verb}", labels=("topic",)
            )
            byte_family = CounterMetricFamily(
                f"stratalog_bytes_{direction}",
                "Record batch bytes appended by Produce" if direction == "in"
                else "Record batch bytes read for fetches and Subscribe",
                labels=("topic",),
            )
            for topic, records, size_bytes, created in rows:
                record_family.add_metric((topic,), records, created=created)
                byte_family.add_metric((topic,), size_bytes, created=created)
            yield record_family
            yield byte_family
        histogram = HistogramMetricFamily(
            "stratalog_request_duration_seconds", "Latency of unary RPCs", labels=("rpc",)
        )
        for rpc, counts in latency:
            cumulative = list(itertools.accumulate(counts[: _BUCKETS + 1]))
            histogram.add_metric(
                (rpc,), list(zip(_BUCKET_NAMES, cumulative, strict=True)), counts[_SUM_AT]
            )
            histogram.samples.append(
                Sample(f"{histogram.name}_created", {"rpc": rpc}, counts[_SUM_AT + 1])
            )
        yield histogram
        request_family = CounterMetricFamily(
            "stratalog_requests", "RPCs finished, by status code", labels=("rpc", "code")
        )
        for rpc, code_name, count, created in requests:
            request_family.add_metric((rpc, code_name), count, created=created)
        yield request_family


_BUCKETS = len(LATENCY_BUCKETS_SECONDS)
_bisect_left = bisect.bisect_left
_SUM_AT = _BUCKETS + 1
_BUCKET_NAMES = (*(floatToGoString(bound) for bound in LATENCY_BUCKETS_SECONDS), "+Inf")


#: grpc.StatusCode -> the name go-grpc-prometheus gives it in ``grpc_code`` (Go's
#: ``codes.Code.String()``: ``OK``, ``Canceled``, ``InvalidArgument`` ...).
GRPC_CODE_NAMES: dict[grpc.StatusCode, str] = {
    code: {"OK": "OK", "CANCELLED": "Canceled"}.get(
        code.name, "".join(part.capitalize() for part in code.name.split("_"))
    )
    for code in grpc.StatusCode
}


class GrpcServerCollector(Collector):
    """The standard gRPC server metrics (``grpc_server_*``), as plain numbers under one lock.

    Holds, per (grpc_type, grpc_service, grpc_method), the calls started and the histogram of
    their handling time (a count per bucket of :data:`LATENCY_BUCKETS_SECONDS`, one above them,
    the sum), and per (those, grpc_code) the calls handled; when each label set was first seen.
    Exported as prometheus-client's ``Counter`` and ``Histogram`` would be (see
    :class:`TrafficCollector`, which does the same for the same reason: one lock and a few
    additions per call). Concurrency: any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # labels -> [count, created]
        self._started: dict[tuple[str, str, str], list[float]] = {}
        self._handled: dict[tuple[str, str, str, str], list[float]] = {}
        # labels -> [one count per bucket, the count above the last bucket, sum, created]
        self._handling: dict[tuple[str, str, str], list[float]] = {}

    def observe_started(self, labels: tuple[str, str, str]) -> None:
        """A call of ``labels`` (grpc_type, grpc_service, grpc_method) started."""
        with self._lock:
            counted = self._started.get(labels)
            if counted is None:
                counted = self._started[labels] = [0, time.time()]
            counted[0] += 1

    def observe_handled(self, labels: tuple[str, str, str], code: str, seconds: float) -> None:
        """A call of ``labels`` finished with ``code`` (a :data:`GRPC_CODE_NAMES` value)
        after ``seconds``."""
        with self._lock:
            key = (*labels, code)
            counted = self._handled.get(key)
            if counted is None:
                counted = self._handled[key] = [0, time.time()]
            counted[0] += 1
            latency = self._handling.get(labels)
            if latency is None:
                latency = self._handling[labels] = [0] * (_BUCKETS + 1) + [0.0, time.time()]
            latency[_bisect_left(LATENCY_BUCKETS_SECONDS, seconds)] += 1
            latency[_SUM_AT] += seconds

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            started = [(key, *counted) for key, counted in self._started.items()]
            handled = [(key, *counted) for key, counted in self._handled.items()]
            handling = [(key, list(counts)) for key, counts in self._handling.items()]
        names = ("grpc_type", "grpc_service", "grpc_method")
        family = CounterMetricFamily(
            "grpc_server_started", "Total number of RPCs started on the server.", labels=names
        )
        for key, count, created in started:
            family.add_metric(key, count, created=created)
        yield family
        family = CounterMetricFamily(
            "grpc_server_handled",
            "Total number of RPCs completed on the server, regardless of success or failure.",
            labels=(*names, "grpc_code"),
        )
        for key, count, created in handled:
            family.add_metric(key, count, created=created)
        yield family
        histogram = HistogramMetricFamily(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level "
            "handled by the server.",
            labels=names,
        )
        for key, counts in handling:
            cumulative = list(itertools.accumulate(counts[: _BUCKETS + 1]))
            histogram.add_metric(
                key, list(zip(_BUCKET_NAMES, cumulative, strict=True)), counts[_SUM_AT]
            )
            histogram.samples.append(Sample(
                f"{histogram.name}_created", dict(zip(names, key, strict=True)),
                counts[_SUM_AT + 1],
            ))
        yield histogram


def build_labels() -> tuple[str, str, str]:
    """(version, python, grpc) of ``stratalog_build_info``."""
    from stratalog import __version__

    return __version__, platform.python_version(), grpc.__version__


class ServerMetrics:
    """The metrics of one server, in a registry of their own.

    Holds the registry, the :class:`TrafficCollector` (traffic counters and the request
    histogram), the ``subscribers`` gauge, the per-client limits' ``waiting_rpcs`` gauge and
    ``waiting_rpcs_refused`` counter, the ``subscribe_buffer_bytes`` gauge (bound to the
    servicer's budget by the server), the security interceptors' counters (authentication
    failures, ACL denials, quota throttles and their delays), the
    :class:`LogSnapshotCollector`, the :class:`GrpcServerCollector` (``grpc_server_*``, fed by
    the metrics interceptor), the ``build_info`` gauge and the process collector.

    Concurrency: every method may be called from any thread (the traffic collector and the
    gauge lock internally; the log snapshot is swapped whole).
    """

    def __init__(self, registry: CollectorRegistry | None = None,
                 group_lag_max_series: int = 1000) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.traffic = TrafficCollector()
        r.register(self.traffic)
        self.subscribers = Gauge(
            "stratalog_subscribers", "Subscribe streams open now", registry=r
        )
        # Labels from fixed sets only (kinds, setting names): never a client's name.
        self.waiting_rpcs = Gauge(
            "stratalog_waiting_rpcs",
            "Subscribe streams, Session streams and waiting long polls admitted by the"
            " per-client limits",
            labelnames=("kind",), registry=r,
        )
        self.waiting_rpcs_refused = Counter(
            "stratalog_waiting_rpcs_refused",
            "Subscribe streams, Session streams and long polls refused, by the limit reached",
            labelnames=("limit",), registry=r,
        )
        self.sessions = Gauge("stratalog_sessions", "Session streams open now", registry=r)
        # Read at scrape time from the server's session count (set_function): nothing per
        # request.
        self.session_requests = Gauge(
            "stratalog_session_requests",
            "Requests on Session streams being served or answered now, all streams",
            registry=r,
        )
        self.subscribe_buffer_bytes = Gauge(
            "stratalog_subscribe_buffer_bytes",
            "Bytes of Subscribe messages read and not yet taken by gRPC flow control",
            registry=r,
        )
        # Security (server/security/): totals by reason, operation or quota, never by principal.
        self.authentication_failures = Counter(
            "stratalog_authentication_failures",
            "Calls refused UNAUTHENTICATED, by what was wrong with their credentials",
            labelnames=("reason",), registry=r,
        )
        self.authorization_denials = Counter(
            "stratalog_authorization_denials",
            "Calls refused PERMISSION_DENIED by the ACLs, by the operation refused",
            labelnames=("operation",), registry=r,
        )
        self.quota_throttles = Counter(
            "stratalog_quota_throttles",
            "Answers delayed by a byte-rate quota, by quota (produce, fetch)",
            labelnames=("quota",), registry=r,
        )
        self.quota_throttle_seconds = Counter(
            "stratalog_quota_throttle_seconds",
            "Delays of the answers held back by a byte-rate quota, summed, by quota",
            labelnames=("quota",), registry=r,
        )
        # Replication (cluster mode, server/cluster/replica_roles.py): the gauges are bound
        # to the replica manager once it starts; no sample is 0.
        self.leader_partitions = Gauge(
            "stratalog_leader_partitions", "Replicated partitions this server leads now",
            registry=r,
        )
        self.under_replicated_partitions = Gauge(
            "stratalog_under_replicated_partitions",
            "Replicated partitions led here whose ISR is smaller than their replicas",
            registry=r,
        )
        self.isr_shrinks = Counter(
            "stratalog_isr_shrinks", "ISR shrinks this server wrote as leader", registry=r
        )
        self.isr_expands = Counter(
            "stratalog_isr_expands", "ISR expansions this server wrote as leader", registry=r
        )
        # The cluster's health (server/cluster/cluster_metrics.py), bound once the server
        # joined its cluster; no sample is 0.
        self.active_controller = Gauge(
            "stratalog_active_controller", "1 on the cluster's controller, 0 elsewhere",
            registry=r,
        )
        self.offline_partitions = Gauge(
            "stratalog_offline_partitions",
            "Partitions with no live leader (counted by the controller only)", registry=r,
        )
        self.under_min_isr_partitions = Gauge(
            "stratalog_under_min_isr_partitions",
            "Partitions led here whose ISR is smaller than their min.insync.replicas",
            registry=r,
        )
        self.live_brokers = Gauge(
            "stratalog_live_brokers", "Brokers registered in etcd, as this server last read them",
            registry=r,
        )
        self.logs = LogSnapshotCollector()
        r.register(self.logs)
        self.grpc_server = GrpcServerCollector()
        r.register(self.grpc_server)
        self.build_info = Gauge(
            "stratalog_build_info",
            "1, labelled with the stratalog, Python and gRPC versions the server runs",
            labelnames=("version", "python", "grpc"), registry=r,
        )
        self.build_info.labels(*build_labels()).set(1)
        self.cleaner = CleanerCollector()
        r.register(self.cleaner)
        # The endpoint's own (server/metrics_endpoint.py): read from it at scrape time.
        self.metrics_connections = Gauge(
            "stratalog_metrics_connections", "Connections to the metrics endpoint open now",
            registry=r,
        )
        self.metrics_connections_refused = Counter(
            "stratalog_metrics_connections_refused",
            "Connections the metrics endpoint closed early, by why (connections_max, idle,"
            " request_timeout, request_too_large, bad_request, unauthenticated)",
            labelnames=("reason",), registry=r,
        )
        # The Kafka listener (issue 28, server/kafka/): labels are API names and fixed reasons.
        self.kafka_requests = Counter(
            "stratalog_kafka_requests", "Kafka requests answered, by API (Kafka's request name)",
            labelnames=("api",), registry=r,
        )
        self.kafka_request_seconds = Histogram(
            "stratalog_kafka_request_seconds",
            "Time from a Kafka request's decoding to its answer being written, by API (a long"
            " poll's wait included)",
            labelnames=("api",), registry=r,
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                     0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        )
        self.kafka_connections = Gauge(
            "stratalog_kafka_connections", "Kafka connections open now", registry=r,
        )
        # The listener's request-byte budget (server/kafka/listener.py), read at scrape time.
        self.kafka_request_bytes = Gauge(
            "stratalog_kafka_request_bytes",
            "Bytes of Kafka requests read and not yet answered, all connections", registry=r,
        )
        # Fetch sessions (KIP-227, server/kafka/fetch_sessions.py): Kafka's
        # NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached (read at scrape time)
        # and IncrementalFetchSessionEvictionsPerSec, and each Fetch by how it was served.
        self.kafka_fetch_sessions = Gauge(
            "stratalog_kafka_fetch_sessions", "Kafka fetch sessions (KIP-227) cached now",
            registry=r,
        )
        self.kafka_fetch_session_partitions = Gauge(
            "stratalog_kafka_fetch_session_partitions",
            "Partitions cached by all Kafka fetch sessions now", registry=r,
        )
        self.kafka_fetch_session_evictions = Counter(
            "stratalog_kafka_fetch_session_evictions",
            "Kafka fetch sessions evicted to make room for a new one", registry=r,
        )
        self.kafka_fetch_requests = Counter(
            "stratalog_kafka_fetch_requests",
            "Kafka Fetch requests (v7+) by how their fetch session served them (sessionless,"
            " full, incremental, session_error)",
            labelnames=("session",), registry=r,
        )
        # Made once: labels() per Fetch would cost the hot path a lock and a lookup.
        self._kafka_fetch_request_kinds = {
            kind: self.kafka_fetch_requests.labels(kind)
            for kind in ("sessionless", "full", "incremental", "session_error")}
        self.kafka_connections_closed = Counter(
            "stratalog_kafka_connections_closed",
            "Kafka connections the server closed, by why (bad_request: a frame that is not"
            " Kafka's or a version not served; unauthenticated; connections_max; idle;"
            " server_error; session_expired: its SASL session ended without a"
            " re-authentication)",
            labelnames=("reason",), registry=r,
        )
        # Consumer groups (issue 27, server/group_service/): no label is a group id.
        self.groups = GroupsCollector()
        r.register(self.groups)
        self.group_lag = GroupLagCollector(group_lag_max_series)
        r.register(self.group_lag)
        self.group_rebalances = Counter(
            "stratalog_group_rebalances",
            "Rebalances completed (a generation handed to its leader) by this server's groups",
            registry=r,
        )
        self.offset_commits = Counter(
            "stratalog_offset_commits",
            "Partition offsets committed (written to __consumer_offsets and acknowledged)",
            registry=r,
        )
        self.group_load_seconds = Histogram(
            "stratalog_group_coordinator_load_seconds",
            "Time one __consumer_offsets partition took to load (replay) at start",
            buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0), registry=r,
        )
        ProcessCollector(registry=r)

    def bind_groups(self, source: Callable[[], GroupCounts] | None) -> None:
        """Read the groups by state and their members from ``source`` at each scrape."""
        self.groups.bind(source)

    def bind_group_lag(self, offsets: Callable[[], Iterable[CommittedOffsetRow]] | None,
                       log_end: Callable[[str, int], int | None] | None) -> None:
        """Compute the lag from these at each scrape (:class:`GroupLagCollector`)."""
        self.group_lag.bind(offsets, log_end)

    def observe_rebalance(self) -> None:
        self.group_rebalances.inc()

    def observe_offset_commits(self, partitions: int) -> None:
        self.offset_commits.inc(partitions)

    def observe_group_load(self, seconds: float) -> None:
        self.group_load_seconds.observe(seconds)

    def observe_request(self, rpc: str, code_name: str, seconds: float | None) -> None:
        """Count one finished RPC; ``seconds`` None for streams (no latency observed)."""
        self.traffic.observe_request(rpc, code_name, seconds)

    def observe_produce(self, topic: str, records: int, size_bytes: int) -> None:
        self.traffic.observe_traffic(True, topic, records, size_bytes)

    def observe_fetch(self, topic: str, records: int, size_bytes: int) -> None:
        """Count what a fetch sent; an empty fetch creates no label set."""
        if records or size_bytes:
            self.traffic.observe_traffic(False, topic, records, size_bytes)

    def observe_kafka_fetch(self, session: str) -> None:
        """Count a Kafka Fetch (v7+) by how its fetch session served it (the label)."""
        self._kafka_fetch_request_kinds[session].inc()

    def observe_authentication_failure(self, reason: str) -> None:
        """Count a call refused UNAUTHENTICATED; ``reason`` one of
        :data:`~stratalog.server.security.errors.AUTHENTICATION_FAILURES`."""
        self.authentication_failures.labels(reason).inc()

    def observe_authorization_denial(self, operation: str) -> None:
        """Count a call the ACLs refused; ``operation`` is the AclOperation's name."""
        self.authorization_denials.labels(operation).inc()

    def observe_throttle(self, quota: str, throttle_ms: int) -> None:
        """Count an answer held back ``throttle_ms`` by the ``quota`` ("produce" or "fetch")."""
        self.quota_throttles.labels(quota).inc()
        self.quota_throttle_seconds.labels(quota).inc(throttle_ms / 1000)

    def observe_metrics_refusal(self, reason: str) -> None:
        """Count a metrics connection closed early; ``reason`` one of
        :data:`~stratalog.server.metrics_endpoint.REFUSAL_REASONS`."""
        self.metrics_connections_refused.labels(reason).inc()

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's label sets, so that deleted topics do not pile up."""
        self.traffic.forget_topic(topic)

    def update_logs(self, topics: Sequence[TopicDescription]) -> None:
        self.logs.update(topics)

    def bind_cleaner(self, log_manager: LogManager | None) -> None:
        """Read the cleaner's figures from ``log_manager`` at each scrape (None: stop)."""
        self.cleaner.bind(
            None if log_manager is None else functools.partial(cleaner_snapshot, log_manager)
        )

    def render(self) -> bytes:
        """The text exposition of every metric (what /metrics serves)."""
        return generate_latest(self.registry)
