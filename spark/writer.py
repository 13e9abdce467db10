"""Writing DataFrames to topics: ``df.write`` and ``df.writeStream`` with ``format("stratalog")``.

Each Spark task gets its rows as Arrow record batches and produces them through the client
library's batching :class:`~stratalog.client.Producer` (its own event loop, its own channel),
so records travel as Kafka v2 batches, compressed as asked, partitioned as a Kafka producer
would partition them. The task ends once every record is acknowledged; a record that could not
be delivered fails the task (Spark then retries it or fails the query).

Delivery, per mode:

* Default: the Producer is idempotent (its default), so its own retries inside a task never
  store a batch twice; a retried *task* sends its records again. At-least-once, as Spark's
  Kafka sink.
* ``transactionalIdPrefix``: each task writes all its rows in one transaction, with
  transactional id ``<prefix>-<partition id>``, which it leaves open; the driver commits every
  task's transaction once all succeeded, and aborts them if the write fails
  (:mod:`stratalog.spark.write_transactions` has the protocol and what it guarantees).

Columns (Spark's Kafka sink's; others are ignored):

========== ================================ ===========================================
column     type                             meaning
========== ================================ ===========================================
value      binary or string (required)      the record value (null: a tombstone)
key        binary or string                 the key (null: no key; sticky partitioning)
topic      string                           the topic, unless the ``topic`` option is set
partition  int                              the partition (null: the client's partitioner)
headers    array<struct<key:string,         the record headers (a null header key is an
           value:binary>>                   error)
timestamp  timestamp                        the record timestamp (null: now)
========== ================================ ===========================================

Strings are written as UTF-8. Only ``mode("append")`` exists (records are always appended).

The sink topic (the ``topic`` option) is checked on the driver before any task runs
(:func:`prepare_sink`): a missing one fails the write at once, naming it, or is created with
``createTopic=true`` (``createTopicPartitions``, default 1). Spark's Kafka sink has no such
option (a Kafka broker may create topics on first use, ``auto.create.topics.enable``);
stratalog's server never does, so without it a job would run to its end and fail in every
write task.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from stratalog.client import Producer, TopicAlreadyExistsError, UnknownTopicOrPartitionError

from .errors import OptionError, SchemaError
from .options import WriteOptions
from .write_transactions import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    WriteCommitMessage,
    abort_transactions,
    commit_transactions,
    produce_in_transaction,
)

__all__ = [
    "StratalogStreamWriter",
    "StratalogWriter",
    "WriteCommitMessage",
    "WritePlan",
    "plan_write",
    "prepare_sink",
]

logger = logging.getLogger(__name__)

_HEADERS_TYPE = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))


@dataclass(frozen=True)
class WritePlan:
    """Which of the known columns the DataFrame has, and whether key/value are strings."""

    value_is_string: bool
    has_key: bool
    key_is_string: bool
    has_topic: bool
    has_partition: bool
    has_headers: bool
    has_timestamp: bool


def _field_types(schema: StructType) -> dict[str, DataType]:
    return {f.name: f.dataType for f in schema.fields}


def _check_type(name: str, actual: DataType, allowed: tuple[DataType, ...], spelled: str) -> None:
    if not any(actual == a for a in allowed):
        raise SchemaError(
            f"column '{name}' must be of type {spelled}, got {actual.simpleString()}"
        )


def plan_write(schema: StructType, options: WriteOptions) -> WritePlan:
    """Check the DataFrame's schema against the sink's columns.

    Raises:
        SchemaError: no ``value`` column, or a known column of the wrong type.
        OptionError: neither a ``topic`` option nor a ``topic`` column.
    """
    types = _field_types(schema)
    if "value" not in types:
        raise SchemaError(
            "the DataFrame has no 'value' column (binary or string); it has "
            + ", ".join(repr(n) for n in types)
        )
    _check_type("value", types["value"], (BinaryType(), StringType()), "binary or string")
    if "key" in types:
        _check_type("key", types["key"], (BinaryType(), StringType()), "binary or string")
    if "topic" in types:
        _check_type("topic", types["topic"], (StringType(),), "string")
    elif options.topic is None:
        raise OptionError(
            "topic", "is required when the DataFrame has no 'topic' column: set "
            ".option('topic', 'name') or add a string column 'topic'"
        )
    if "partition" in types:
        _check_type("partition", types["partition"], (IntegerType(),), "int")
    if "headers" in types:
        _check_type("headers", types["headers"], (_HEADERS_TYPE,),
                    "array<struct<key:string,value:binary>>")
    if "timestamp" in types:
        _check_type("timestamp", types["timestamp"], (TimestampType(),), "timestamp")
    return WritePlan(
        value_is_string=types["value"] == StringType(),
        has_key="key" in types,
        key_is_string=types.get("key") == StringType(),
        has_topic="topic" in types,
        has_partition="partition" in types,
        has_headers="headers" in types,
        has_timestamp="timestamp" in types,
    )


def prepare_sink(options: WriteOptions) -> None:
    """On the driver, before any task runs: make sure the ``topic`` option's topic exists.

    Creates it with ``createTopic=true`` (another writer creating it first is fine). Does
    nothing without the ``topic`` option (topics named row by row are checked by the tasks).

    Raises:
        OptionError: the topic does not exist and ``createTopic`` is not set.
        stratalog.client.StratalogError: the server could not answer, or refused the creation
            (an invalid name, not authorized).
    """
    if options.topic is None:
        return
    with options.connection.sync_client() as client:
        try:
            client.describe_topic(options.topic)
            return
        except UnknownTopicOrPartitionError:
            if not options.create_topic:
                raise OptionError(
                    "topic", f"topic {options.topic!r} does not exist on "
                    f"{options.connection.target}: create it first (stratalog topics create "
                    f"{options.topic} --partitions N) or set createTopic=true "
                    "(and createTopicPartitions)"
                ) from None
        try:
            client.create_topic(options.topic, options.create_topic_partitions)
            logger.info("created topic %s with %d partition(s) (createTopic)", options.topic,
                        options.create_topic_partitions)
        except TopicAlreadyExistsError:
            pass


def _utf8(values: list[Any]) -> list[bytes | None]:
    return [v.encode("utf-8") if v is not None else None for v in values]


class _Rows:
    """One Arrow batch as per-column Python lists, in the Producer's types."""

    def __init__(self, batch: pa.RecordBatch, plan: WritePlan, options: WriteOptions) -> None:
        count = batch.num_rows
        self.count = count
        values = batch.column("value").to_pylist()
        self.values = _utf8(values) if plan.value_is_string else values
        if plan.has_key:
            keys = batch.column("key").to_pylist()
            self.keys: list[bytes | None] | None = _utf8(keys) if plan.key_is_string else keys
        else:
            self.keys = None
        if options.topic is not None:
            self.topics = [options.topic] * count
        else:
            self.topics = batch.column("topic").to_pylist()
            for row, topic in enumerate(self.topics):
                if topic is None:
                    raise SchemaError(
                        f"row {row} of the batch has a null 'topic' and the option 'topic' "
                        "is not set"
                    )
        self.partitions = batch.column("partition").to_pylist() if plan.has_partition else None
        if plan.has_timestamp:
            micros = pc.cast(batch.column("timestamp"), pa.int64())
            self.timestamps = [None if t is None else t // 1000 for t in micros.to_pylist()]
        else:
            self.timestamps = None
        self.headers: list[tuple] | None = None
        if plan.has_headers:
            self.headers = []
            for row, headers in enumerate(batch.column("headers").to_pylist()):
                pairs = []
                for header in headers or ():
                    if header is None or header["key"] is None:
                        raise SchemaError(f"row {row}: a header has a null key")
                    pairs.append((header["key"], header["value"]))
                self.headers.append(tuple(pairs))


async def _send_rows(producer: Producer, rows: _Rows, pending: list[Any]) -> None:
    """Hand one batch of rows to the Producer; the futures go to ``pending``."""
    simple = (
        rows.headers is None
        and (rows.partitions is None or all(p is None for p in rows.partitions))
        and len(set(rows.topics)) == 1
    )
    if simple and rows.count:
        timestamps = rows.timestamps
        if timestamps is not None and None in timestamps:
            now = time.time_ns() // 1_000_000
            timestamps = [now if t is None else t for t in timestamps]
        pending.append(
            await producer.send_many(rows.topics[0], rows.values, rows.keys,
                                     timestamps_ms=timestamps)
        )
        return
    send = producer.send
    for row in range(rows.count):
        pending.append(
            await send(
                rows.topics[row],
                rows.values[row],
                rows.keys[row] if rows.keys is not None else None,
                partition=rows.partitions[row] if rows.partitions is not None else None,
                timestamp_ms=rows.timestamps[row] if rows.timestamps is not None else None,
                headers=rows.headers[row] if rows.headers is not None else (),
            )
        )


def _raise_failed(pending: list[Any]) -> list[Any]:
    """Drop the acknowledged futures; raise the delivery error of a failed one."""
    still = []
    for future in pending:
        if not future.done():
            still.append(future)
        else:
            future.result()  # raises the delivery error, if any
    return still


async def _send_all(
    producer: Producer, options: WriteOptions, plan: WritePlan, batches: Iterable[pa.RecordBatch]
) -> int:
    """Hand every row to the Producer and wait until each is acknowledged.

    Raises the first delivery error (or the error of a bad row, or of the input).
    """
    count = 0
    pending: list[Any] = []
    for batch in batches:
        rows = _Rows(batch, plan, options)
        await _send_rows(producer, rows, pending)
        count += rows.count
        pending = _raise_failed(pending)
    await producer.flush()
    _raise_failed(pending)
    return count


async def _produce(
    options: WriteOptions,
    plan: WritePlan,
    batches: Iterable[pa.RecordBatch],
    transactional_id: str | None,
) -> WriteCommitMessage:
    # The sink creates topics only when asked (createTopic), never as a side effect of a row.
    kwargs: dict[str, Any] = {"linger_ms": options.linger_ms, "compression": options.compression,
                              "allow_auto_topic_creation": False}
    if options.batch_bytes_max is not None:
        kwargs["batch_bytes_max"] = options.batch_bytes_max
    if transactional_id is not None:
        kwargs["transactional_id"] = transactional_id
        kwargs["transaction_timeout_ms"] = (
            options.transaction_timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS
        )
    async with options.connection.async_client() as client, Producer(client, **kwargs) as producer:
        if transactional_id is None:
            return WriteCommitMessage(await _send_all(producer, options, plan, batches))
        records, producer_id, epoch = await produce_in_transaction(
            producer, lambda: _send_all(producer, options, plan, batches)
        )
        # Closing the Producer leaves the transaction open: the driver commits it.
        return WriteCommitMessage(records, transactional_id, producer_id, epoch)


def task_partition_id() -> int:
    """The Spark partition id of the running task (0 outside a Spark task: tests in-process)."""
    context = TaskContext.get()
    return 0 if context is None else context.partitionId()


def write_batches(
    options: WriteOptions,
    plan: WritePlan,
    batches: Iterator[pa.RecordBatch],
    transactional_id: str | None = None,
) -> WriteCommitMessage:
    """Produce every row of ``batches``; blocks until all are acknowledged.

    ``transactional_id``: produce them in a transaction under that id and leave it open (the
    message carries its producer id and epoch, for the driver to commit); aborted if this
    raises.

    Raises:
        SchemaError: a null topic or header key in a row.
        stratalog.client.StratalogError: a record that could not be delivered; with a
            transactional id also ProducerFencedError (a newer attempt of the task took over)
            or the server's refusal of the transaction (INVALID_TRANSACTION_TIMEOUT, ...).
        ValueError/TypeError: a value the Producer refuses (a negative timestamp, ...).
    """
    return asyncio.run(_produce(options, plan, batches, transactional_id))


def _write_task(
    options: WriteOptions, plan: WritePlan, iterator: Iterator[pa.RecordBatch]
) -> WriteCommitMessage:
    return write_batches(options, plan, iterator, options.transactional_id(task_partition_id()))


class StratalogWriter(DataSourceArrowWriter):
    """A batch write (``df.write``). Holds the checked options and column plan (picklable)."""

    def __init__(self, options: WriteOptions, plan: WritePlan) -> None:
        self._options = options
        self._plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommitMessage:
        return _write_task(self._options, self._plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        options = self._options
        if options.transactional_id_prefix is not None:
            commit_transactions(options, messages, "the write")
        total = sum(m.records for m in messages if isinstance(m, WriteCommitMessage))
        logger.info("wrote %d records to %s", total, options.connection.target)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        options = self._options
        written = sum(m.records for m in messages if isinstance(m, WriteCommitMessage))
        if options.transactional_id_prefix is not None:
            abort_transactions(options, messages, "the write")
            logger.warning("write aborted: the transactions of its tasks (%d records) were "
                           "aborted", written)
            return
        # Records already acknowledged stay in their topics: a log cannot take them back.
        logger.warning("write aborted after %d records were acknowledged", written)


class StratalogStreamWriter(DataSourceStreamArrowWriter):
    """A streaming write (``writeStream``): each micro-batch as a batch write would do it."""

    def __init__(self, options: WriteOptions, plan: WritePlan) -> None:
        self._options = options
        self._plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommitMessage:
        return _write_task(self._options, self._plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self._options.transactional_id_prefix is not None:
            commit_transactions(self._options, messages, f"micro-batch {batchId}")
        total = sum(m.records for m in messages if isinstance(m, WriteCommitMessage))
        logger.info("micro-batch %d: wrote %d records", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written = sum(m.records for m in messages if isinstance(m, WriteCommitMessage))
        if self._options.transactional_id_prefix is not None:
            abort_transactions(self._options, messages, f"micro-batch {batchId}")
            logger.warning("micro-batch %d aborted: the transactions of its tasks (%d "
                           "records) were aborted", batchId, written)
            return
        logger.warning("micro-batch %d aborted after %d records were acknowledged",
                       batchId, written)
