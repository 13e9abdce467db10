"""The batch reader: ``spark.read.format("stratalog")`` planned into tasks and read.

Planning (:meth:`StratalogBatchReader.partitions`, on the driver, once per query):

* server mode: DescribeTopic gives the partitions and their bounds (under read_committed,
  ListOffsets gives each one's last stable offset, which "latest" then means); the start and
  end options are resolved to one offset per partition (:mod:`stratalog.spark.offsets`:
  timestamps through ListOffsets), checked (data loss below the log start, an end past the log
  end, a start after the end; an end above the LSO comes down to it), and each partition's range
  is split into tasks by ``minPartitions`` / ``maxRecordsPerPartition``
  (:func:`stratalog.spark.ranges.split_ranges`);
* file mode (``path``): one task per segment file (:mod:`stratalog.spark.segment_files`).

Reading (:meth:`StratalogBatchReader.read`, on an executor, once per task) yields Arrow record
batches: :func:`stratalog.spark.server_read.read_range` or
:func:`stratalog.spark.segment_files.read_segment`.

Since the ranges are fixed before any task runs, a retried task reads exactly the same records,
and records appended while the query runs are not read (the end was resolved at planning).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .offsets import check_range, describe_partitions, resolve_offsets
from .options import ReadOptions
from .ranges import OffsetRange
from .segment_files import SegmentPartition, plan_segments, read_segment
from .server_read import RangePartition, range_partitions, read_range

__all__ = ["StratalogBatchReader", "plan_server_ranges"]


def plan_server_ranges(options: ReadOptions) -> list[OffsetRange]:
    """The offset ranges (before splitting) of a server-mode batch query.

    Raises:
        OptionError, DataLossError: see :mod:`stratalog.spark.offsets`.
        stratalog.client.StratalogError: the server could not answer.
    """
    assert options.connection is not None and options.subscription is not None
    assert options.ending is not None
    with options.connection.sync_client() as client:
        partitions = describe_partitions(
            client, options.subscription, isolation_level=options.isolation_level
        )
        starts = resolve_offsets(
            client, options.starting, partitions, starting=True,
            strategy=options.starting_strategy, isolation_level=options.isolation_level,
        )
        ends = resolve_offsets(
            client, options.ending, partitions, starting=False,
            isolation_level=options.isolation_level,
        )
    ranges = []
    for tp, bounds in partitions.items():
        start, end = check_range(
            tp, starts[tp], ends[tp], bounds,
            fail_on_data_loss=options.fail_on_data_loss,
            starting_option=options.starting.option,
            ending_option=options.ending.option,
        )
        ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
    return ranges


class StratalogBatchReader(DataSourceReader):
    """Plans and reads one batch query. Holds only its checked options (picklable); every
    task opens its own connection or file. Partitions are planned once per reader."""

    def __init__(self, options: ReadOptions) -> None:
        self._options = options

    def partitions(self) -> list[InputPartition]:
        options = self._options
        if options.path is not None:
            return list(plan_segments(options))
        return list(range_partitions(plan_server_ranges(options), options))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            return read_range(partition)
        if isinstance(partition, SegmentPartition):
            return read_segment(partition)
        # Spark substitutes one InputPartition(None) when partitions() planned none.
        return iter(())
