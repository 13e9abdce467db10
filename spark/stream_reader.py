"""The streaming reader: ``spark.readStream.format("stratalog")``, micro-batch by micro-batch.

Spark drives a stream by offsets, and this source's offsets are those of Spark's Kafka source:
``{"topic": {"partition": next_offset}}`` (JSON), the next offset to read of every partition.
Spark writes each micro-batch's end offsets to the query's checkpoint before running it, so a
restarted query asks :meth:`~StratalogStreamReader.latestOffset` to go on from the last
checkpointed end; :meth:`~StratalogStreamReader.initialOffset` (the ``startingOffsets`` /
``startingTimestamp`` / ... options) is used only by a query with no checkpoint yet.

One trigger (Spark's calls, in order):

1. ``latestOffset(start, limit)``: the end of the next micro-batch. Spark passes the limit it
   got from :meth:`~StratalogStreamReader.getDefaultReadLimit`: ``ReadMaxRows`` for
   ``maxOffsetsPerTrigger`` (records shared between partitions in proportion to their lag,
   :func:`~stratalog.spark.ranges.rate_limit`), ``ReadMinRows`` for ``minOffsetsPerTrigger``
   (no micro-batch until that many records are waiting, or ``maxTriggerDelay`` has passed since
   the last one; ``maxOffsetsPerTrigger`` still caps it), or ``ReadAllAvailable``. Returning
   ``start`` means "no new data".
2. ``partitions(start, end)``: the ranges ``[start, end)`` split like a batch query's.
3. ``read(partition)`` on executors: :func:`~stratalog.spark.server_read.read_range`.

Under ``isolationLevel=read_committed`` (the default) the end of every micro-batch is at most
each partition's last stable offset (ListOffsets latest, READ_COMMITTED), so a micro-batch never
holds a record that may still be aborted; a transaction open at one trigger is read by a later
micro-batch, once its commit moved the LSO past it (its aborted records never are).

``Trigger.AvailableNow``: :meth:`~StratalogStreamReader.prepareForTriggerAvailableNow` records
the latest offsets (log end, or LSO) once; later triggers never go past them (limits still
apply, so a large backlog is read in several micro-batches), and the query stops when they are
reached.
``minOffsetsPerTrigger`` is ignored then, since waiting for records would never end.

Partitions appear (new topics matching ``subscribePattern``) and are read from their log start;
partitions that disappear, or whose offsets go backwards (a recreated topic), are data loss
(``failOnDataLoss``). The reader runs in one long-lived Python process on the driver; its state
(the AvailableNow target, the time of the last micro-batch) lives there. It is pickled to the
executors for ``read()``, without its connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from stratalog.client import SyncClient, TopicPartition

from .errors import report_data_loss
from .offsets import (
    PartitionBounds,
    describe_partitions,
    offsets_from_json,
    offsets_to_json,
    resolve_offsets,
    sorted_partitions,
)
from .options import ReadOptions
from .ranges import OffsetRange, rate_limit
from .server_read import RangePartition, range_partitions, read_range

__all__ = ["StratalogStreamReader"]

logger = logging.getLogger(__name__)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class StratalogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets, micro-batch planning and reading for one streaming query (server mode only).

    Holds the checked options, a lazily opened :class:`~stratalog.client.SyncClient` (driver
    only; not pickled), the AvailableNow target offsets (None unless that trigger is used) and
    the time of the last micro-batch (for ``maxTriggerDelay``). Spark calls it from one thread.
    """

    def __init__(self, options: ReadOptions) -> None:
        assert options.connection is not None and options.subscription is not None
        self._options = options
        self._client: SyncClient | None = None
        self._available_now_target: dict[TopicPartition, int] | None = None
        # As Kafka's source: 0, so the first micro-batch never waits for minOffsetsPerTrigger.
        self._last_trigger_ms = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None  # a channel does not travel; executors open their own
        return state

    def _connection(self) -> SyncClient:
        if self._client is None:
            assert self._options.connection is not None
            self._client = self._options.connection.sync_client()
        return self._client

    def _bounds(self, *, missing_ok: bool) -> dict[TopicPartition, PartitionBounds]:
        assert self._options.subscription is not None
        return describe_partitions(
            self._connection(), self._options.subscription,
            isolation_level=self._options.isolation_level, missing_ok=missing_ok,
        )

    # --- offsets ---------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        partitions = self._bounds(missing_ok=False)
        offsets = resolve_offsets(
            self._connection(), self._options.starting, partitions,
            starting=True, strategy=self._options.starting_strategy,
            isolation_level=self._options.isolation_level,
        )
        return offsets_to_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark's Python sources have no composite limit: with both options the minimum
        # travels as the limit and the maximum is applied from the options in latestOffset.
        options = self._options
        if options.min_offsets_per_trigger is not None:
            return ReadMinRows(options.min_offsets_per_trigger)
        if options.max_offsets_per_trigger is not None:
            return ReadMaxRows(options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        bounds = self._bounds(missing_ok=True)
        self._available_now_target = {tp: b.latest_offset for tp, b in bounds.items()}
        logger.info("Trigger.AvailableNow: reading up to %s",
                    offsets_to_json(self._available_now_target))

    def _begin_offsets(
        self, start: Mapping[TopicPartition, int], bounds: Mapping[TopicPartition, PartitionBounds]
    ) -> dict[TopicPartition, int]:
        """Where each current partition goes on from: its start offset, or for a partition
        new since then its log start; partitions gone are data loss."""
        gone = [tp for tp in start if tp not in bounds]
        if gone:
            message = "partitions " + ", ".join(f"{t}-{p}" for t, p in gone) + (
                " were read by this query but no longer exist"
            )
            report_data_loss(message, self._options.fail_on_data_loss, "go on without them")
        return {
            tp: start.get(tp, b.log_start_offset) for tp, b in bounds.items()
        }

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin_json = offsets_from_json(start, "the micro-batch start offset")
        bounds = self._bounds(missing_ok=True)
        target = self._available_now_target
        if target is not None:
            # Partitions that appeared after the AvailableNow target was taken are not read.
            bounds = {tp: b for tp, b in bounds.items() if tp in target or tp in begin_json}
        begin = self._begin_offsets(begin_json, bounds)
        latest = {}
        for tp, b in bounds.items():
            end = b.latest_offset if target is None else min(b.latest_offset, target.get(tp, 0))
            if end < begin[tp] <= b.log_end_offset:
                # Under read_committed the LSO can be below where the stream is (its checkpoint
                # was written reading uncommitted): the records are there, so wait for the LSO.
                end = begin[tp]
            latest[tp] = end
        # An end below the start (a recreated topic) is kept: partitions() reports the loss.
        if isinstance(limit, ReadAllAvailable):
            return offsets_to_json(latest)
        options = self._options
        if isinstance(limit, ReadMinRows) and target is None:
            available = sum(max(latest[tp] - begin[tp], 0) for tp in latest)
            now = _now_ms()
            if now - self._last_trigger_ms < options.max_trigger_delay_ms and (
                available < limit.min_rows
            ):
                return offsets_to_json(begin)
            self._last_trigger_ms = now
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else (
            options.max_offsets_per_trigger
        )
        if max_rows is not None:
            latest = rate_limit(max_rows, begin, latest)
        return offsets_to_json(latest)

    def reportLatestOffset(self) -> dict | None:
        bounds = self._bounds(missing_ok=True)
        return offsets_to_json({tp: b.latest_offset for tp, b in bounds.items()})

    # --- planning and reading --------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        options = self._options
        assert options.connection is not None
        begin_json = offsets_from_json(start, "the micro-batch start offset")
        end_offsets = offsets_from_json(end, "the micro-batch end offset")
        new = [tp for tp in end_offsets if tp not in begin_json]
        if new:
            bounds = self._bounds(missing_ok=True)
            for tp in new:
                begin_json[tp] = bounds[tp].log_start_offset if tp in bounds else end_offsets[tp]
        ranges = []
        for tp in sorted_partitions(end_offsets):
            from_offset, until_offset = begin_json[tp], end_offsets[tp]
            if until_offset < from_offset:
                message = (
                    f"the offsets of {tp.topic}-{tp.partition} went back from {from_offset} to "
                    f"{until_offset} (was the topic deleted and recreated?)"
                )
                report_data_loss(message, options.fail_on_data_loss, "skip these offsets")
                continue
            ranges.append(OffsetRange(tp.topic, tp.partition, from_offset, until_offset))
        return list(range_partitions(ranges, options))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(partition)

    def commit(self, end: dict) -> None:
        # Nothing to do: the log keeps records until retention, whatever the query read.
        pass

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
