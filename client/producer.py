"""The Producer: records in, Kafka v2 batches out, one ordered pipeline per partition.

Intuition: calling Produce once per record would spend all the time on round trips, so the
Producer does what Kafka's does. Each ``send()`` picks a partition (Kafka's murmur2 of the key,
or the current sticky partition for unkeyed records), encodes the record straight into that
partition's open batch (:class:`~stratalog.records.BatchBuilder`, the shared codec) and returns a
:class:`RecordFuture`. A batch is closed when it reaches ``batch_bytes_max`` or ``linger_ms``
after its first record, compressed, and sent as ``record_batches`` in one Produce; its response
(the base offset) resolves the futures of all its records at once: record ``i`` of the batch
has offset ``base_offset + i``.

Delivery semantics (as Kafka's producer without idempotence):

* Order. Batches of one partition are sent in the order they were filled. With
  ``max_in_flight_per_partition=1`` (the default) the next batch of a partition is sent only
  after the previous one is acknowledged or has failed for good, so records of a partition are
  stored in ``send()`` order, retries included. With more in flight, gRPC may deliver concurrent
  requests in another order (each is its own HTTP/2 stream) and a retried batch lands after the
  ones sent meanwhile: more throughput per partition, no order guarantee.
* Retries. A failed batch is sent again only if its error is ``retriable`` (server shutting
  down, storage error, connection lost, deadline passed), at most ``retries`` times, with
  exponential backoff and jitter, and never after ``delivery_timeout_ms``. A batch whose
  response was received is never sent again. When the failure left it unknown whether the
  server appended the batch (connection lost or deadline passed after the request went out),
  the retry may store it twice: at-least-once delivery. ``retries=0`` gives at-most-once.
* Errors surface on the records' futures (and in the log when nobody awaits them); a failed
  batch does not stop the Producer.

Memory is bounded: ``send()`` waits while ``buffer_bytes_max`` bytes of records are buffered
or in flight.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from stratalog.records import RECORD_BATCH_OVERHEAD, BatchBuilder, Compression, Header

from . import wire
from .client import Client
from .errors import StratalogError, UnknownTopicOrPartitionError
from .partitioner import StickyPartitioner, partition_for_key
from .types import RecordMetadata

__all__ = [
    "DEFAULT_BATCH_BYTES_MAX",
    "DEFAULT_BUFFER_BYTES_MAX",
    "Producer",
    "ProducerClosedError",
    "RecordFuture",
    "SendManyFuture",
]

logger = logging.getLogger(__name__)

#: Uncompressed bytes of one batch (Kafka's batch.size is 16 KiB; larger batches are what make
#: a Python producer fast, and 1 MiB stays under the server's default max.message.bytes).
DEFAULT_BATCH_BYTES_MAX = 1024 * 1024 - 64 * 1024

#: Bytes of records buffered or in flight before ``send()`` waits (Kafka's buffer.memory).
DEFAULT_BUFFER_BYTES_MAX = 64 * 1024 * 1024

# The most a record's framing can add to its key, value and headers: length (5), attributes (1),
# timestamp delta (10), offset delta (5), key and value lengths (5 + 5), header count (5).
_RECORD_FRAMING_BYTES_MAX = 36
# Per header: key length (5) and value length (5) varints.
_HEADER_FRAMING_BYTES_MAX = 10
_BYTES_OR_NONE = frozenset({bytes, type(None)})
# send()/send_many() let the event loop run after this many bytes of records (see _yield).
_YIELD_EVERY_BYTES = 128 * 1024


class ProducerClosedError(RuntimeError):
    """``send()`` after ``close()`` started."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Batch:
    """One batch of one partition: its builder while open, its bytes once closed, its outcome.

    ``future`` resolves to ``(base_offset, log_append_time)`` or to the delivery error.
    """

    __slots__ = (
        "builder",
        "count",
        "data",
        "future",
        "lingered",
        "partition",
        "queue",
        "size_bytes",
        "timer",
        "topic",
    )

    def __init__(self, queue: _PartitionQueue, builder: BatchBuilder, loop: Any) -> None:
        self.queue = queue
        self.topic = queue.topic
        self.partition = queue.partition
        self.builder: BatchBuilder | None = builder
        self.count = 0
        self.size_bytes = RECORD_BATCH_OVERHEAD
        self.data: bytes | None = None
        self.future: asyncio.Future[tuple[int, int]] = loop.create_future()
        self.future.add_done_callback(_log_unretrieved)
        self.lingered = False
        self.timer: asyncio.TimerHandle | None = None


def _log_unretrieved(future: asyncio.Future[tuple[int, int]]) -> None:
    # Marks the exception retrieved (no "never retrieved" noise at garbage collection) and
    # makes sure a failure is visible to fire-and-forget callers.
    if not future.cancelled() and future.exception() is not None:
        logger.warning("record batch not delivered: %s", future.exception())


class RecordFuture(tuple):
    """The pending outcome of one ``send()``: awaiting it gives its :class:`RecordMetadata`.

    Holds its batch, its index in it and its timestamp; resolves when the batch's Produce
    answers (or fails for good). A tuple underneath because one is built per record and a
    tuple is the cheapest object Python builds; compare futures by identity, not equality.
    Event-loop only, like the Producer.
    """

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        # Shielded: cancelling the task that awaits one record must not cancel the batch,
        # which other records (and the Producer) share.
        yield from asyncio.shield(self[0].future).__await__()
        return self.result()

    def done(self) -> bool:
        """Whether the batch was acknowledged or failed for good."""
        return self[0].future.done()

    def result(self) -> RecordMetadata:
        """The record's metadata; raises the delivery error, or InvalidStateError if pending."""
        batch, index, timestamp = self
        base_offset, log_append_time = batch.future.result()
        if log_append_time >= 0:
            timestamp = log_append_time
        return RecordMetadata(batch.topic, batch.partition, base_offset + index, timestamp)

    def exception(self) -> BaseException | None:
        """The delivery error, ``None`` on success; InvalidStateError while pending."""
        return self[0].future.exception()

    def add_done_callback(self, callback: Callable[[RecordFuture], object]) -> None:
        """Call ``callback(self)`` on the loop once the outcome is known."""
        self[0].future.add_done_callback(lambda _: callback(self))

    def __repr__(self) -> str:
        batch, index, _ = self
        state = "done" if batch.future.done() else "pending"
        return f"<RecordFuture {batch.topic}-{batch.partition} #{index} {state}>"


# Building the tuple directly skips a Python-level __init__: this runs once per record.
_new_record_future = tuple.__new__


class SendManyFuture:
    """The pending outcome of one ``send_many()``: awaiting it gives a list of RecordMetadata.

    Holds the (batch, first index, count, timestamps) runs that the records went into, in input
    order; builds the per-record metadata only when awaited or asked for.
    """

    __slots__ = ("_runs",)

    def __init__(self, runs: list[tuple[_Batch, int, int, list[int]]]) -> None:
        self._runs = runs

    def __await__(self) -> Generator[Any, None, list[RecordMetadata]]:
        futures = {id(run[0].future): run[0].future for run in self._runs}
        if futures:
            # asyncio.wait never cancels what it waits for (gather would, on cancellation).
            yield from asyncio.wait(futures.values()).__await__()
        return self.result()

    def done(self) -> bool:
        """Whether every batch the records went into was acknowledged or failed for good."""
        return all(run[0].future.done() for run in self._runs)

    def result(self) -> list[RecordMetadata]:
        """Metadata in input order; raises the first delivery error among the batches."""
        out: list[RecordMetadata] = []
        for batch, first, count, timestamps in self._runs:
            base_offset, log_append_time = batch.future.result()
            start = base_offset + first
            topic, partition = batch.topic, batch.partition
            if log_append_time >= 0:
                timestamps = [log_append_time] * count
            out.extend(
                RecordMetadata(topic, partition, offset, ts)
                for offset, ts in zip(range(start, start + count), timestamps, strict=True)
            )
        return out


class _PartitionQueue:
    """The batches of one partition: the open one, the closed ones waiting, the in-flight count.

    Invariant: batches leave ``ready`` in the order they were closed, and they are closed in the
    order they were opened, so a partition's batches are sent in ``send()`` order.
    """

    __slots__ = ("current", "in_flight", "partition", "ready", "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.current: _Batch | None = None
        self.ready: collections.deque[_Batch] = collections.deque()
        self.in_flight = 0


class _TopicState:
    __slots__ = ("num_partitions", "queues", "sticky")

    def __init__(self, topic: str, num_partitions: int, rng: random.Random) -> None:
        self.num_partitions = num_partitions
        self.sticky = StickyPartitioner(num_partitions, rng=rng)
        self.queues = [_PartitionQueue(topic, p) for p in range(num_partitions)]


class Producer:
    """Batches records per partition, encodes them client-side and sends them with retries.

    Holds per topic its partition count (asked once with DescribeTopic), a sticky partitioner,
    and per partition a queue of batches; the bytes buffered; the batch send tasks.
    Invariant: ``buffered_bytes`` = the uncompressed size of every batch not yet resolved.
    Crash behaviour: records in memory are lost with the process; only resolved futures mean
    stored. Event-loop only: one asyncio loop owns the Producer (use one per loop/thread).

    Args:
        client: a :class:`Client`, or a target string (the Producer then owns and closes it).
        linger_ms: how long a batch waits for more records after its first (0: send at the next
            turn of the event loop, which still batches what was sent in the same turn).
        batch_bytes_max: uncompressed size at which a batch is closed and sent. A record larger
            than this goes alone in its batch.
        compression: codec of the batches (Compression or "none", "gzip", "snappy", "lz4",
            "zstd"); ``compression_level`` for the codec, ``None`` for its default.
        max_in_flight_per_partition: Produce requests of one partition at a time (see the
            module docstring for what >1 does to order).
        retries: how many times a batch is sent again after a retriable error.
        retry_backoff_ms, retry_backoff_max_ms: first and largest wait before a retry.
        delivery_timeout_ms: a batch not delivered this long after it was closed fails.
        request_timeout_s: deadline of each Produce request.
        buffer_bytes_max: bytes of records held before ``send()`` waits.
        flush: ask the server to fsync before answering each Produce.
    """

    def __init__(
        self,
        client: Client | str,
        *,
        linger_ms: int = 5,
        batch_bytes_max: int = DEFAULT_BATCH_BYTES_MAX,
        compression: Compression | str = Compression.NONE,
        compression_level: int | None = None,
        max_in_flight_per_partition: int = 1,
        retries: int = 5,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        delivery_timeout_ms: int = 120_000,
        request_timeout_s: float = 30.0,
        buffer_bytes_max: int = DEFAULT_BUFFER_BYTES_MAX,
        flush: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        if not isinstance(client, Client | str):
            raise TypeError(f"client must be a Client or a target str, got {client!r}")
        # A target string becomes a Client on first use, inside the event loop that uses it.
        self._target = client if isinstance(client, str) else None
        self._client: Client = client if isinstance(client, Client) else None  # type: ignore[assignment]
        self._owns_client = isinstance(client, str)
        self._linger_s = wire.check_int(linger_ms, "linger_ms", 0, 3_600_000) / 1000.0
        self._batch_bytes_max = wire.check_int(
            batch_bytes_max, "batch_bytes_max", RECORD_BATCH_OVERHEAD + 1, wire.INT32_MAX
        )
        self._compression = wire.parse_compression(compression)
        if compression_level is not None:
            wire.check_int(compression_level, "compression_level", -(2**31), wire.INT32_MAX)
        self._compression_level = compression_level
        self._max_in_flight = wire.check_int(
            max_in_flight_per_partition, "max_in_flight_per_partition", 1, 1000
        )
        self._retries = wire.check_int(retries, "retries", 0, wire.INT32_MAX)
        self._retry_backoff_s = (
            wire.check_int(retry_backoff_ms, "retry_backoff_ms", 0, 3_600_000) / 1000.0
        )
        self._retry_backoff_max_s = (
            wire.check_int(retry_backoff_max_ms, "retry_backoff_max_ms", 0, 3_600_000) / 1000.0
        )
        self._delivery_timeout_s = (
            wire.check_int(delivery_timeout_ms, "delivery_timeout_ms", 1, wire.INT32_MAX) / 1000.0
        )
        if isinstance(request_timeout_s, bool) or not isinstance(request_timeout_s, int | float):
            raise TypeError(f"request_timeout_s must be a number, got {request_timeout_s!r}")
        if not request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        self._request_timeout_s = float(request_timeout_s)
        self._buffer_bytes_max = wire.check_int(
            buffer_bytes_max, "buffer_bytes_max", 1, 2**62
        )
        if not isinstance(flush, bool):
            raise TypeError(f"flush must be a bool, got {type(flush).__name__}")
        self._flush = flush
        self._rng = rng or random.Random()
        self._topics: dict[str, _TopicState] = {}
        self._topic_locks: dict[str, asyncio.Lock] = {}
        self._pending: set[_Batch] = set()  # closed or open, not yet resolved
        self._tasks: set[asyncio.Task[None]] = set()
        self._buffered_bytes = 0
        self._unyielded_bytes = 0
        self._space = asyncio.Event()
        self._closed = False

    # --- context ---------------------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def buffered_bytes(self) -> int:
        """Uncompressed bytes of records sent to the Producer and not yet acknowledged."""
        return self._buffered_bytes

    # --- sending ---------------------------------------------------------------------------------

    async def _topic_state(self, topic: str) -> _TopicState:
        state = self._topics.get(topic)
        if state is not None:
            return state
        wire.check_topic(topic)
        if self._client is None:
            self._client = Client(self._target)  # type: ignore[arg-type]
        lock = self._topic_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            state = self._topics.get(topic)
            if state is None:
                info = await self._client.describe_topic(topic)
                state = self._topics[topic] = _TopicState(topic, info.num_partitions, self._rng)
        return state

    async def partitions_for(self, topic: str) -> int:
        """How many partitions ``topic`` has (asked once, then remembered)."""
        return (await self._topic_state(topic)).num_partitions

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] = (),
    ) -> RecordFuture:
        """Add one record to its partition's batch; return the future of its metadata.

        ``partition``: ``None`` to pick by key (Kafka's murmur2) or stickily for ``key=None``.
        ``timestamp_ms``: ``None`` for now. Waits only while the buffer is full (and the first
        time a topic is used, for its partition count).

        Raises:
            TypeError/ValueError: a bad argument (named), before anything is buffered.
            UnknownTopicOrPartitionError: no such topic (from the server).
            ProducerClosedError: the Producer is closing.
        """
        if self._closed:
            raise ProducerClosedError("send() on a closed Producer")
        if type(value) is not bytes:
            value = wire.check_bytes_or_none(value, "value")
        if key is not None and type(key) is not bytes:
            key = wire.check_bytes_or_none(key, "key")
        if headers:
            headers = wire.check_headers(headers)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        else:
            wire.check_int(timestamp_ms, "timestamp_ms", 0, wire.INT64_MAX)
        state = self._topics.get(topic)
        if state is None:
            state = await self._topic_state(topic)
        if partition is None:
            if key is None:
                partition = state.sticky.partition()
            else:
                partition = partition_for_key(key, state.num_partitions)
        elif type(partition) is not int or not 0 <= partition < state.num_partitions:
            self._check_partition(topic, partition, state)
        while self._buffered_bytes >= self._buffer_bytes_max:
            self._space.clear()
            await self._space.wait()
            if self._closed:
                raise ProducerClosedError("the Producer closed while send() waited for space")
        queue = state.queues[partition]
        batch = queue.current
        if batch is not None and not headers:
            # The common case inlined (one call fewer per record): it fits the open batch.
            estimate = _RECORD_FRAMING_BYTES_MAX
            if value is not None:
                estimate += len(value)
            if key is not None:
                estimate += len(key)
            if batch.size_bytes + estimate <= self._batch_bytes_max:
                index = batch.builder.append(timestamp_ms, key, value, ())  # type: ignore[union-attr]
                batch.size_bytes += estimate
                self._buffered_bytes += estimate
                self._unyielded_bytes += estimate
                if self._unyielded_bytes >= _YIELD_EVERY_BYTES:
                    await self._yield()
                return _new_record_future(RecordFuture, (batch, index, timestamp_ms))
        batch, index = self._append(queue, state, timestamp_ms, key, value, headers)
        if self._unyielded_bytes >= _YIELD_EVERY_BYTES:
            await self._yield()
        return _new_record_future(RecordFuture, (batch, index, timestamp_ms))

    async def _yield(self) -> None:
        # send() has nothing to wait for while there is buffer space, so a loop of sends would
        # never let the event loop run: no request would go out until the buffer filled up.
        # Letting it run every _YIELD_EVERY_BYTES overlaps encoding with sending.
        self._unyielded_bytes = 0
        await asyncio.sleep(0)

    async def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        *,
        partition: int | None = None,
        timestamps_ms: Sequence[int] | None = None,
    ) -> SendManyFuture:
        """Send many records in one call: the batch-level API, with no per-record future.

        ``values[i]`` goes with ``keys[i]`` and ``timestamps_ms[i]`` (when given; same lengths).
        Partitioning is that of :meth:`send` record by record; unkeyed records all go to the
        sticky partition (moving on as batches fill). The buffer limit is checked once, before
        the records are added. Returns a :class:`SendManyFuture` (metadata in input order).
        """
        if self._closed:
            raise ProducerClosedError("send_many() on a closed Producer")
        if isinstance(values, bytes | str) or not isinstance(values, Sequence):
            raise TypeError("values must be a sequence of bytes values")
        count = len(values)
        if keys is not None and (isinstance(keys, bytes | str) or len(keys) != count):
            raise ValueError(f"keys must be a sequence of {count} keys (one per value)")
        if timestamps_ms is not None and len(timestamps_ms) != count:
            raise ValueError(f"timestamps_ms must hold {count} timestamps (one per value)")
        # The common case checked at C speed (one set of the types); the loop names the culprit.
        if not _BYTES_OR_NONE.issuperset(map(type, values)):
            for index, value in enumerate(values):
                if value is not None and type(value) is not bytes:
                    raise TypeError(
                        f"values[{index}] must be bytes or None, got {type(value).__name__}"
                    )
        if keys is not None and not _BYTES_OR_NONE.issuperset(map(type, keys)):
            for index, key in enumerate(keys):
                if key is not None and type(key) is not bytes:
                    raise TypeError(
                        f"keys[{index}] must be bytes or None, got {type(key).__name__}"
                    )
        if timestamps_ms is not None:
            for index, ts in enumerate(timestamps_ms):
                wire.check_int(ts, f"timestamps_ms[{index}]", 0, wire.INT64_MAX)
        state = self._topics.get(topic) or await self._topic_state(topic)
        if partition is not None:
            self._check_partition(topic, partition, state)
        while self._buffered_bytes >= self._buffer_bytes_max:
            self._space.clear()
            await self._space.wait()
            if self._closed:
                raise ProducerClosedError("the Producer closed while send_many() waited")
        now = _now_ms()
        runs: list[tuple[_Batch, int, int, list[int]]] = []
        run_batch: _Batch | None = None
        run_first = run_count = 0
        run_timestamps: list[int] = []
        num_partitions = state.num_partitions
        sticky = state.sticky
        queues = state.queues
        append = self._append
        if keys is None and timestamps_ms is None:
            await self._send_stretches(state, values, partition, now, runs)
            return SendManyFuture(runs)
        for index in range(count):
            key = keys[index] if keys is not None else None
            timestamp = timestamps_ms[index] if timestamps_ms is not None else now
            if partition is not None:
                target = partition
            elif key is None:
                target = sticky.partition()
            else:
                target = partition_for_key(key, num_partitions)
            batch, position = append(queues[target], state, timestamp, key, values[index], ())
            if batch is run_batch and position == run_first + run_count:
                run_count += 1
                run_timestamps.append(timestamp)
            else:
                if run_batch is not None:
                    runs.append((run_batch, run_first, run_count, run_timestamps))
                run_batch, run_first, run_count, run_timestamps = batch, position, 1, [timestamp]
            if self._unyielded_bytes >= _YIELD_EVERY_BYTES:
                # Other tasks may append meanwhile: runs check that positions stay contiguous.
                await self._yield()
        if run_batch is not None:
            runs.append((run_batch, run_first, run_count, run_timestamps))
        return SendManyFuture(runs)

    async def _send_stretches(
        self,
        state: _TopicState,
        values: Sequence[bytes | None],
        partition: int | None,
        timestamp: int,
        runs: list[tuple[_Batch, int, int, list[int]]],
    ) -> None:
        """send_many() of unkeyed records stamped ``timestamp``: the same placement as record by
        record, with no Python call per record.

        Each stretch starts with one :meth:`_append` (which opens or closes batches as needed)
        and then appends the following values straight to that batch with one
        ``append_values`` call (the codec's C loop) until it is full or a yield is due; a
        stretch is one run of contiguous positions, since nothing else runs before the next
        await.
        """
        limit = self._batch_bytes_max
        queues = state.queues
        sticky = state.sticky
        # The builder's append_values takes a list or tuple (checked there at C speed).
        items = values if isinstance(values, list | tuple) else list(values)
        count = len(items)
        index = 0
        while index < count:
            target = partition if partition is not None else sticky.partition()
            batch, first = self._append(queues[target], state, timestamp, None, items[index], ())
            index += 1
            # Then straight into that batch, stopping before the batch limit or the yield
            # budget, whichever comes first (exact sizes: the builder measures each record).
            room = min(limit - batch.size_bytes, _YIELD_EVERY_BYTES - self._unyielded_bytes)
            stop, added = batch.builder.append_values(  # type: ignore[union-attr]
                timestamp, items, index, max(room, 0)
            )
            stretch = 1 + stop - index
            index = stop
            batch.size_bytes += added
            self._buffered_bytes += added
            self._unyielded_bytes += added
            runs.append((batch, first, stretch, [timestamp] * stretch))
            if self._unyielded_bytes >= _YIELD_EVERY_BYTES:
                await self._yield()

    def _check_partition(self, topic: str, partition: object, state: _TopicState) -> None:
        wire.check_partition(partition)
        if partition >= state.num_partitions:  # type: ignore[operator]
            raise ValueError(
                f"partition {partition} does not exist: topic {topic!r} has "
                f"{state.num_partitions} partitions"
            )

    def _append(
        self,
        queue: _PartitionQueue,
        state: _TopicState,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
    ) -> tuple[_Batch, int]:
        """Encode one record into the open batch of ``queue``; close the batch first if the
        record would not fit. O(size of the record)."""
        estimate = _RECORD_FRAMING_BYTES_MAX
        if value is not None:
            estimate += len(value)
        if key is not None:
            estimate += len(key)
        if headers:
            estimate += sum(
                _HEADER_FRAMING_BYTES_MAX + len(k.encode()) + (len(v) if v is not None else 0)
                for k, v in headers
            )
        batch = queue.current
        if batch is None:
            batch = self._open_batch(queue)
        elif batch.size_bytes + estimate > self._batch_bytes_max:
            # size_bytes is an upper bound (each record adds its worst-case framing); only near
            # the limit is the exact size asked for, so the common path does no extra call.
            exact = RECORD_BATCH_OVERHEAD + batch.builder.uncompressed_records_bytes  # type: ignore[union-attr]
            self._buffered_bytes += exact - batch.size_bytes
            batch.size_bytes = exact
            if exact + estimate > self._batch_bytes_max:
                self._close_batch(queue, state, batch)
                batch = self._open_batch(queue)
        index = batch.builder.append(timestamp, key, value, headers)  # type: ignore[union-attr]
        batch.size_bytes += estimate
        self._buffered_bytes += estimate
        self._unyielded_bytes += estimate
        return batch, index

    def _open_batch(self, queue: _PartitionQueue) -> _Batch:
        loop = asyncio.get_running_loop()
        builder = BatchBuilder(
            compression=self._compression, compression_level=self._compression_level
        )
        batch = _Batch(queue, builder, loop)
        self._buffered_bytes += batch.size_bytes
        self._pending.add(batch)
        queue.current = batch
        if self._linger_s > 0:
            batch.timer = loop.call_later(self._linger_s, self._on_linger, queue, batch)
        else:
            batch.timer = loop.call_soon(self._on_linger, queue, batch)  # type: ignore[assignment]
        return batch

    def _on_linger(self, queue: _PartitionQueue, batch: _Batch) -> None:
        batch.timer = None
        if queue.current is not batch:
            return
        batch.lingered = True
        if queue.in_flight < self._max_in_flight and not queue.ready:
            self._close_batch(queue, self._topics.get(queue.topic), batch)
        # Otherwise the batch keeps filling until a request slot frees (see _maybe_send).

    def _close_batch(self, queue: _PartitionQueue, state: _TopicState | None, batch: _Batch) -> None:
        """Move the open batch to ``ready`` (encoding is finished by build()) and send."""
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
        if queue.current is batch:
            queue.current = None
            if state is not None:
                state.sticky.next_batch(queue.partition)
        queue.ready.append(batch)
        self._unyielded_bytes = _YIELD_EVERY_BYTES  # let the request start at the next send
        self._maybe_send(queue)

    def _maybe_send(self, queue: _PartitionQueue) -> None:
        """Start requests for ``queue`` while it has free slots: closed batches first, in order,
        then the open batch if its linger time is over."""
        while queue.in_flight < self._max_in_flight:
            if queue.ready:
                batch = queue.ready.popleft()
            elif queue.current is not None and queue.current.lingered:
                batch = queue.current
                queue.current = None
                state = self._topics.get(queue.topic)
                if state is not None:
                    state.sticky.next_batch(queue.partition)
            else:
                return
            queue.in_flight += 1
            task = asyncio.get_running_loop().create_task(self._deliver(queue, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _backoff_s(self, attempt: int) -> float:
        # Kafka's exponential backoff: base * 2^(attempt-1), capped, with +-20% jitter.
        delay = min(self._retry_backoff_max_s, self._retry_backoff_s * (2 ** (attempt - 1)))
        return delay * self._rng.uniform(0.8, 1.2)

    async def _deliver(self, queue: _PartitionQueue, batch: _Batch) -> None:
        """Send one batch until it is acknowledged or fails for good; then free its slot."""
        try:
            builder = batch.builder
            batch.builder = None
            batch.count = builder.records_count  # type: ignore[union-attr]
            data = batch.data = builder.build()  # type: ignore[union-attr]
            deadline = time.monotonic() + self._delivery_timeout_s
            attempt = 0
            while True:
                try:
                    result = await self._client.produce(
                        batch.topic,
                        batch.partition,
                        record_batches=data,
                        flush=self._flush,
                        timeout_s=min(
                            self._request_timeout_s, max(0.001, deadline - time.monotonic())
                        ),
                    )
                except StratalogError as err:
                    attempt += 1
                    delay = self._backoff_s(attempt)
                    if (
                        err.retriable
                        and attempt <= self._retries
                        and time.monotonic() + delay < deadline
                    ):
                        logger.info(
                            "retrying batch of %d records to %s-%d (attempt %d of %d) after %s",
                            batch.count, batch.topic, batch.partition, attempt, self._retries,
                            err,
                        )
                        await asyncio.sleep(delay)
                        continue
                    if isinstance(err, UnknownTopicOrPartitionError):
                        # The topic went away: ask for its partitions again next time.
                        self._topics.pop(batch.topic, None)
                    if not batch.future.done():
                        batch.future.set_exception(err)
                    return
                if result.record_count not in (0, batch.count):
                    logger.warning(
                        "server acknowledged %d records of a batch of %d to %s-%d",
                        result.record_count, batch.count, batch.topic, batch.partition,
                    )
                if not batch.future.done():
                    batch.future.set_result((result.base_offset, result.log_append_time))
                return
        except asyncio.CancelledError:
            if not batch.future.done():
                batch.future.set_exception(ProducerClosedError("the Producer was closed"))
            raise
        except BaseException as err:  # a bug or a codec error: fail the batch, keep going
            if not batch.future.done():
                batch.future.set_exception(err)
            if not isinstance(err, Exception):
                raise
        finally:
            batch.data = None
            self._pending.discard(batch)
            self._buffered_bytes -= batch.size_bytes
            self._space.set()
            queue.in_flight -= 1
            self._maybe_send(queue)

    # --- flushing and closing --------------------------------------------------------------------

    async def flush(self) -> None:
        """Send every buffered record now and wait until all are acknowledged or failed.

        Does not raise delivery errors (they are on the records' futures).
        """
        pending = list(self._pending)
        for batch in pending:
            queue = batch.queue
            if queue.current is batch:
                self._close_batch(queue, self._topics.get(queue.topic), batch)
        if pending:
            # asyncio.wait, not gather: a cancelled flush must not cancel the batches.
            await asyncio.wait([batch.future for batch in pending])

    async def close(self, timeout_s: float | None = None) -> None:
        """Stop accepting records, flush (up to ``timeout_s``; then cancel what is left), and
        close the client if the Producer opened it. Idempotent."""
        if self._closed and not self._pending:
            return
        self._closed = True
        self._space.set()  # wake senders blocked on the buffer: they raise ProducerClosedError
        try:
            if timeout_s is None:
                await self.flush()
            else:
                try:
                    await asyncio.wait_for(self.flush(), timeout_s)
                except TimeoutError:
                    logger.warning(
                        "Producer closed with %d batches undelivered after %s s",
                        len(self._pending), timeout_s,
                    )
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            for batch in list(self._pending):
                if batch.timer is not None:
                    batch.timer.cancel()
                if not batch.future.done():
                    batch.future.set_exception(ProducerClosedError("the Producer was closed"))
            self._pending.clear()
            if self._owns_client and self._client is not None:
                await self._client.close()
