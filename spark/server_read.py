"""Reading one offset range from the server: the body of a batch or micro-batch task.

A task holds a :class:`RangePartition` (topic, partition, ``[from_offset, until_offset)``) and
fetches it in FETCH_FORMAT_RECORD_BATCHES, so the server sends the stored batches without
decoding them; the task decodes them straight into Arrow columns
(:class:`~stratalog.spark.columns.RecordColumns`) and yields one ``pyarrow.RecordBatch`` per
fetch. While it decodes one response, the next fetch is already in flight (one fetch ahead, on a
thread: gRPC's blocking calls release the GIL), so network, server and decoding overlap.

Data loss, as Spark's Kafka source treats it (``failOnDataLoss``):

* the range starts below the log start offset (retention or DeleteRecords removed records the
  query planned to read): :class:`~stratalog.spark.errors.DataLossError`, or with
  ``failOnDataLoss=false`` a warning and the read goes on from the log start;
* the log ends before the range does (the topic was deleted and recreated, or truncated):
  likewise, and the read stops at the log end.

Gaps inside the range (compacted topics, transaction markers, aborted records) are not data
loss: the fetch returns the next batch that exists.

Under read_committed (``isolation_level`` READ_COMMITTED) every fetch is READ_COMMITTED: the
server returns only batches below the partition's last stable offset, with the aborted
transactions that overlap them, and :class:`~stratalog.spark.columns.RecordColumns` drops those
transactions' batches with a :class:`stratalog.records.AbortedTransactionFilter` (one per
response, as Kafka's consumer has one per completed fetch). The planner ends every range at or
below the LSO it saw, and the LSO only moves up, so a task never waits for a transaction; a
fetch that returns nothing below the range's end although the log goes further means the LSO
went back below the plan (the log was truncated), which is data loss like a log that ends early.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from stratalog.client import FetchFormat, FetchResult, IsolationLevel, OffsetOutOfRangeError
from stratalog.records import AbortedTransactionFilter, CorruptRecordError

from .columns import RecordColumns
from .errors import report_data_loss
from .options import ConnectionOptions, ReadOptions
from .ranges import OffsetRange, split_ranges

__all__ = ["RangePartition", "range_partitions", "read_range"]

class RangePartition(InputPartition):
    """One Spark task of a server-mode read: an :class:`OffsetRange` and how to read it.

    Pickled to the executor that runs the task; holds only plain values.
    """

    def __init__(
        self,
        offset_range: OffsetRange,
        connection: ConnectionOptions,
        *,
        include_headers: bool,
        fail_on_data_loss: bool,
        fetch_max_bytes: int,
        isolation_level: IsolationLevel,
    ) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range
        self.connection = connection
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.fetch_max_bytes = fetch_max_bytes
        self.isolation_level = isolation_level

    def __repr__(self) -> str:
        r = self.offset_range
        return f"RangePartition({r.topic}-{r.partition} [{r.from_offset}, {r.until_offset}))"


def range_partitions(ranges: list[OffsetRange], options: ReadOptions) -> list[RangePartition]:
    """The tasks of a server-mode read (batch or micro-batch): ``ranges`` split by the
    options' ``minPartitions``/``maxRecordsPerPartition``, each with the read options."""
    assert options.connection is not None
    return [
        RangePartition(
            r, options.connection,
            include_headers=options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
            fetch_max_bytes=options.fetch_max_bytes,
            isolation_level=options.isolation_level,
        )
        for r in split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    ]


def read_range(partition: RangePartition) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``partition``'s range as Arrow batches (one per fetch).

    Raises:
        DataLossError: see the module docstring (only with failOnDataLoss).
        stratalog.client.StratalogError: the server refused a fetch (unknown topic, ...).
        stratalog.records.RecordError: the fetched bytes are corrupt.
    """
    r = partition.offset_range
    topic, number, until = r.topic, r.partition, r.until_offset
    assert until is not None, "a server range always has an end"
    columns = RecordColumns(topic, number, partition.include_headers)
    read_committed = partition.isolation_level == IsolationLevel.READ_COMMITTED
    with partition.connection.sync_client() as client, ThreadPoolExecutor(1) as pool:

        def fetch(offset: int) -> FetchResult:
            return client.fetch_by_offset(
                topic, number, offset, max_bytes=partition.fetch_max_bytes,
                fetch_format=FetchFormat.RECORD_BATCHES,
                isolation_level=partition.isolation_level,
            )

        offset = r.from_offset
        pending: tuple[int, Future[FetchResult]] | None = None
        while offset < until:
            if pending is not None and pending[0] == offset:
                future = pending[1]
            else:
                future = pool.submit(fetch, offset)
            pending = None
            try:
                result = future.result()
            except OffsetOutOfRangeError as exc:
                offset = _out_of_range(exc, topic, number, offset, until, partition)
                continue
            if r.from_offset <= result.next_offset < until and result.next_offset > offset:
                pending = (result.next_offset, pool.submit(fetch, result.next_offset))
            data = result.record_batches
            aborted = AbortedTransactionFilter(
                (a.producer_id, a.first_offset) for a in result.aborted_transactions
            ) if read_committed else None
            walk = columns.append_batches(
                data, 0, offset, until, source=f"fetch of {topic}-{number} at offset {offset}",
                aborted=aborted,
            )
            if walk.next_offset < 0:
                if walk.done:
                    # The first batch answered starts at or past the range's end: a compacted
                    # log's cleaner removed every record of [offset, until), and a fetch at a
                    # removed offset answers from the next batch that is left.
                    break
                if data:
                    raise CorruptRecordError(
                        f"fetch of {topic}-{number} at offset {offset} returned {len(data)} "
                        "bytes holding no whole record batch"
                    )
                if read_committed and result.high_watermark > offset:
                    # Records exist, but none is stable: the LSO is below the planned range.
                    message = (
                        f"the last stable offset of {topic}-{number} is now "
                        f"{result.last_stable_offset}, below the end {until} that the query "
                        "planned from it (was the log truncated?)"
                    )
                else:
                    # Nothing at all: the log ends at ``offset``, before the range does.
                    message = (
                        f"the log of {topic}-{number} ends at offset {result.high_watermark}, "
                        f"before offsets {offset}..{until - 1} that the query planned to read "
                        "(was the topic deleted and recreated?)"
                    )
                report_data_loss(message, partition.fail_on_data_loss, "skip the lost records")
                break
            offset = walk.next_offset
            if len(columns):
                yield columns.to_arrow()
            if walk.done:
                break
        if pending is not None:
            pending[1].cancel()


def _out_of_range(
    exc: OffsetOutOfRangeError,
    topic: str,
    number: int,
    offset: int,
    until: int,
    partition: RangePartition,
) -> int:
    """Where to go on after an OffsetOutOfRange answer (or raise DataLossError)."""
    log_start = exc.log_start_offset
    if log_start is not None and offset < log_start:
        resume = min(log_start, until)
        report_data_loss(
            f"offsets {offset}..{resume - 1} of {topic}-{number} are no longer in the log (its "
            f"log start offset is now {log_start}): retention or DeleteRecords removed them",
            partition.fail_on_data_loss, "skip the lost records",
        )
        return resume
    report_data_loss(
        f"the log of {topic}-{number} ends at offset {exc.log_end_offset}, before offsets "
        f"{offset}..{until - 1} that the query planned to read (was the topic deleted and "
        "recreated?)",
        partition.fail_on_data_loss, "skip the lost records",
    )
    return until

