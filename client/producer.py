"""The Producer: records in, Kafka v2 batches out, one ordered pipeline per partition.

Intuition: calling Produce once per record would spend all the time on round trips, so the
Producer does what Kafka's does. Each ``send()`` picks a partition (Kafka's murmur2 of the key,
or the current sticky partition for unkeyed records), encodes the record straight into that
partition's open batch (:class:`~stratalog.records.BatchBuilder`, the shared codec) and returns a
:class:`RecordFuture`. A batch is closed when it reaches ``batch_bytes_max`` or ``linger_ms``
after its first record, compressed, and sent as ``record_batches`` in one Produce; its response
(the base offset) resolves the futures of all its records at once: record ``i`` of the batch
has offset ``base_offset + i``.

Delivery semantics, per mode:

* Idempotent (the default). Each record is stored once, and the records of a partition in
  ``send()`` order, retries and server restarts included. The Producer gets a producer id and
  epoch from the server (InitProducerId, on first use) and, when a batch is drained for sending,
  stamps it with them and the next *sequence* of its partition (:mod:`.sequences`). A batch is
  resent with the same stamp, and only once every earlier batch of its partition is resolved,
  so the server stores it once and in order, and answers a resend of a batch it stored with the
  original offsets. Up to ``max_in_flight_per_partition`` (default and most 5, the batches the
  server remembers per producer) requests per partition are in flight. Retriable errors are
  retried until ``delivery_timeout_ms`` (120 s) after the batch was opened (``retries`` is
  unlimited by default), with exponential backoff and jitter. A batch that fails for good (a
  non-retriable error, or the delivery timeout) leaves a gap in the partition's sequences:
  when the server reports it, the Producer takes a new producer id and restarts the partition's
  sequences at 0 for the batches not yet acknowledged, rewriting their headers. Fenced
  (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED) is fatal: every pending record fails with that
  error and later sends raise it.
* Transactional (``transactional_id=...``; idempotent too). Records are sent inside
  transactions: :meth:`Producer.begin_transaction`, ``send()``..., then
  :meth:`Producer.commit_transaction` or :meth:`Producer.abort_transaction` (or ``async with
  producer.transaction():``). A partition is added to the transaction (AddPartitionsToTxn,
  one request for the partitions collected meanwhile) when its first record of the transaction
  is sent, and its batches go out only once that is acknowledged.
  READ_COMMITTED consumers see every record of a committed transaction and none of an aborted
  one. If a batch of the transaction fails, the transaction can only be aborted. The states
  and what each call needs are those of Kafka's TransactionManager
  (:mod:`.transaction_manager`).
* Not idempotent (``idempotent=False``). At least once, as Kafka's producer without idempotence:
  a retry after a lost response may store the batch twice, and with more than one request in
  flight (default 1) batches may be stored out of order. ``retries=0`` gives at most once.

What stays at least once in every mode: a batch that failed with the delivery timeout may still
have been stored, and the server may finish a Produce whose deadline passed on the client.
Errors surface on the records' futures (and in the log when nobody awaits them); a failed batch
does not stop an idempotent Producer.

Memory is bounded: ``send()`` waits while ``buffer_bytes_max`` bytes of records are buffered
or in flight.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from stratalog.records import (
    RECORD_BATCH_OVERHEAD,
    BatchBuilder,
    Compression,
    Header,
    set_producer_state,
)

from . import wire
from .client import Client
from .credentials import Credentials, TlsConfig, channel_security
from .errors import (
    DeliveryTimeoutError,
    StratalogError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
)
from .partitioner import StickyPartitioner, partition_for_key
from .producer_batch import ProducerBatch, RecordFuture, SendManyFuture, new_record_future
from .sequences import PartitionSequences
from .transaction_manager import (
    ErrorAction,
    TransactionManager,
    TransactionState,
    TransactionStateError,
    coordinator_error_action,
    produce_error_action,
    unsupported_error,
)
from .types import ProducerIdAndEpoch, TopicPartition

__all__ = [
    "DEFAULT_BATCH_BYTES_MAX",
    "DEFAULT_BUFFER_BYTES_MAX",
    "IDEMPOTENT_IN_FLIGHT_MAX",
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

#: Requests in flight per partition at most with idempotence: the server remembers the last 5
#: batches of a producer, so a resend of any of them is still recognised (Kafka's limit).
IDEMPOTENT_IN_FLIGHT_MAX = 5

#: transaction.timeout.ms of Kafka's producer.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000

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


class _PartitionQueue:
    """The batches of one partition: the open one, the closed ones waiting, the in-flight count.

    Invariant: batches leave ``ready`` in the order they were closed, and they are closed in the
    order they were opened, so a partition's batches are sent in ``send()`` order. With
    idempotence, ``sequences`` numbers them as they are drained and holds those unacknowledged;
    ``sending`` counts its Produce requests awaiting an answer; ``restart_pending`` says its
    sequences restart (under a new producer id) once none is; ``waiter`` wakes the batches
    waiting for their turn to be resent.
    """

    __slots__ = (
        "current",
        "in_flight",
        "partition",
        "ready",
        "restart_pending",
        "sending",
        "sequences",
        "topic",
        "topic_partition",
        "waiter",
    )

    def __init__(self, topic: str, partition: int, sequenced: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_partition = TopicPartition(topic, partition)
        self.current: ProducerBatch | None = None
        self.ready: collections.deque[ProducerBatch] = collections.deque()
        self.in_flight = 0
        self.sequences = PartitionSequences() if sequenced else None
        self.sending = 0
        self.restart_pending = False
        self.waiter: asyncio.Future[None] | None = None


class _TopicState:
    __slots__ = ("num_partitions", "queues", "sticky")

    def __init__(
        self, topic: str, num_partitions: int, rng: random.Random, sequenced: bool
    ) -> None:
        self.num_partitions = num_partitions
        self.sticky = StickyPartitioner(num_partitions, rng=rng)
        self.queues = [_PartitionQueue(topic, p, sequenced) for p in range(num_partitions)]


class Producer:
    """Batches records per partition, encodes them client-side and sends them with retries.

    Holds per topic its partition count (asked once with DescribeTopic), a sticky partitioner,
    and per partition a queue of batches (and, with idempotence, its sequences); the bytes
    buffered; the batch send tasks; the :class:`~.transaction_manager.TransactionManager`
    (producer id, epoch, transaction state) unless ``idempotent=False``.
    Invariant: ``buffered_bytes`` = the uncompressed size of every batch not yet resolved.
    Crash behaviour: records in memory are lost with the process; only resolved futures mean
    stored. A transaction left open by a crash (or by ``close()``) is aborted by the server
    after ``transaction_timeout_ms``, or by the next producer with the same transactional id.
    Event-loop only: one asyncio loop owns the Producer (use one per loop/thread).

    Args:
        client: a :class:`Client`, or a target string (the Producer then owns and closes it).
        tls, auth: TLS and credentials of the Client made from a target string (see
            :class:`Client`).
        idempotent: stamp batches with a producer id and sequences so that the server stores
            each once and in order (see the module docstring). On by default, as in Kafka 3.
        transactional_id: send in transactions under this stable id (implies idempotent).
        transaction_timeout_ms: how long a transaction may stay open before the server aborts
            it (default 60000; only with ``transactional_id``).
        linger_ms: how long a batch waits for more records after its first (0: send at the next
            turn of the event loop, which still batches what was sent in the same turn).
        batch_bytes_max: uncompressed size at which a batch is closed and sent. A record larger
            than this goes alone in its batch.
        compression: codec of the batches (Compression or "none", "gzip", "snappy", "lz4",
            "zstd"); ``compression_level`` for the codec, ``None`` for its default.
        max_in_flight_per_partition: Produce requests of one partition at a time (default 5
            with idempotence, at most 5; 1 without, where more gives up ordering).
        retries: how many times a batch is sent again after a retriable error (default
            ``None``: no limit but ``delivery_timeout_ms``, as Kafka's MAX_INT).
        retry_backoff_ms, retry_backoff_max_ms: first and largest wait before a retry.
        delivery_timeout_ms: a batch not acknowledged this long after it was opened fails
            with :class:`~stratalog.client.errors.DeliveryTimeoutError`.
        request_timeout_s: deadline of each request.
        max_block_ms: how long a call waits for the server's metadata or transaction
            coordinator (DescribeTopic on a topic's first send, InitProducerId of
            ``begin_transaction()``, EndTxn of commit and abort) through retriable errors
            before raising (Kafka's max.block.ms).
        buffer_bytes_max: bytes of records held before ``send()`` waits.
        flush: ask the server to fsync before answering each Produce.
    """

    def __init__(
        self,
        client: Client | str,
        *,
        idempotent: bool = True,
        transactional_id: str | None = None,
        transaction_timeout_ms: int | None = None,
        linger_ms: int = 5,
        batch_bytes_max: int = DEFAULT_BATCH_BYTES_MAX,
        compression: Compression | str = Compression.NONE,
        compression_level: int | None = None,
        max_in_flight_per_partition: int | None = None,
        retries: int | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        delivery_timeout_ms: int = 120_000,
        request_timeout_s: float = 30.0,
        max_block_ms: int = 60_000,
        buffer_bytes_max: int = DEFAULT_BUFFER_BYTES_MAX,
        flush: bool = False,
        rng: random.Random | None = None,
        tls: TlsConfig | None = None,
        auth: Credentials | None = None,
    ) -> None:
        if not isinstance(client, Client | str):
            raise TypeError(f"client must be a Client or a target str, got {client!r}")
        # A target string becomes a Client on first use, inside the event loop that uses it.
        self._target = client if isinstance(client, str) else None
        self._client: Client = client if isinstance(client, Client) else None  # type: ignore[assignment]
        self._owns_client = isinstance(client, str)
        if isinstance(client, Client) and (tls is not None or auth is not None):
            raise TypeError("tls= and auth= are for a target string; a Client has its own")
        self._tls, self._auth = tls, auth
        if isinstance(client, str):
            channel_security(client, tls, auth, None)  # refuses what the Client would, now
        if not isinstance(idempotent, bool):
            raise TypeError(f"idempotent must be a bool, got {type(idempotent).__name__}")
        if transactional_id is not None:
            wire.check_transactional_id(transactional_id)
            if not idempotent:
                raise ValueError(
                    "a transactional producer is idempotent: idempotent=False cannot go with "
                    "a transactional_id"
                )
        if transaction_timeout_ms is None:
            transaction_timeout_ms = DEFAULT_TRANSACTION_TIMEOUT_MS
        elif transactional_id is None:
            raise ValueError("transaction_timeout_ms applies to a transactional_id: pass one")
        wire.check_int(transaction_timeout_ms, "transaction_timeout_ms", 1, wire.INT32_MAX)
        self._manager = (
            TransactionManager(transactional_id, transaction_timeout_ms) if idempotent else None
        )
        self._transactional = transactional_id is not None
        self._linger_s = wire.check_int(linger_ms, "linger_ms", 0, 3_600_000) / 1000.0
        self._batch_bytes_max = wire.check_int(
            batch_bytes_max, "batch_bytes_max", RECORD_BATCH_OVERHEAD + 1, wire.INT32_MAX
        )
        self._compression = wire.parse_compression(compression)
        if compression_level is not None:
            wire.check_int(compression_level, "compression_level", -(2**31), wire.INT32_MAX)
        self._compression_level = compression_level
        if max_in_flight_per_partition is None:
            max_in_flight_per_partition = IDEMPOTENT_IN_FLIGHT_MAX if idempotent else 1
        self._max_in_flight = wire.check_int(
            max_in_flight_per_partition, "max_in_flight_per_partition", 1, 1000
        )
        if idempotent and self._max_in_flight > IDEMPOTENT_IN_FLIGHT_MAX:
            raise ValueError(
                f"max_in_flight_per_partition must be at most {IDEMPOTENT_IN_FLIGHT_MAX} with "
                f"idempotence (the server recognises a resend among a producer's last "
                f"{IDEMPOTENT_IN_FLIGHT_MAX} batches), got {self._max_in_flight}"
            )
        if retries is not None:
            wire.check_int(retries, "retries", 0, wire.INT32_MAX)
            if retries == 0 and idempotent:
                raise ValueError(
                    "retries must be > 0 with idempotence (a batch the server saw out of order "
                    "is sent again); pass idempotent=False for at-most-once"
                )
        self._retries = retries
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
        self._max_block_s = wire.check_int(max_block_ms, "max_block_ms", 0, wire.INT32_MAX) / 1000.0
        self._buffer_bytes_max = wire.check_int(
            buffer_bytes_max, "buffer_bytes_max", 1, 2**62
        )
        if not isinstance(flush, bool):
            raise TypeError(f"flush must be a bool, got {type(flush).__name__}")
        self._flush = flush
        self._rng = rng or random.Random()
        self._topics: dict[str, _TopicState] = {}
        self._topic_locks: dict[str, asyncio.Lock] = {}
        self._pending: set[ProducerBatch] = set()  # closed or open, not yet resolved
        self._tasks: set[asyncio.Task[Any]] = set()
        self._buffered_bytes = 0
        self._unyielded_bytes = 0
        self._space = asyncio.Event()
        self._closed = False
        # Exactly-once: the task asking for a producer id (idempotent), the task adding
        # partitions to the transaction, the lock that serialises the transaction calls, and
        # the last error of the producer id request (for the delivery timeout's message).
        self._init_task: asyncio.Task[None] | None = None
        self._add_task: asyncio.Task[None] | None = None
        self._txn_lock = asyncio.Lock()
        self._producer_id_error: BaseException | None = None
        self._stopping = False  # close() is cancelling the tasks: start no new ones

    # --- context ---------------------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def buffered_bytes(self) -> int:
        """Uncompressed bytes of records sent to the Producer and not yet acknowledged."""
        return self._buffered_bytes

    @property
    def idempotent(self) -> bool:
        """Whether batches carry a producer id and sequences (see the module docstring)."""
        return self._manager is not None

    @property
    def transactional_id(self) -> str | None:
        """The transactional id, or ``None`` for a producer without transactions."""
        return self._manager.transactional_id if self._manager is not None else None

    @property
    def transaction_state(self) -> TransactionState | None:
        """Where the producer is in Kafka's transaction state machine (``None`` without
        idempotence); an idempotent producer moves between UNINITIALIZED, INITIALIZING, READY
        and FATAL_ERROR only."""
        return self._manager.state if self._manager is not None else None

    @property
    def producer_id_and_epoch(self) -> ProducerIdAndEpoch | None:
        """The producer id and epoch the next batches are stamped with (``None`` until the
        server gave one, and while a new one is asked for)."""
        return self._manager.producer if self._manager is not None else None

    # --- sending ---------------------------------------------------------------------------------

    def _ensure_client(self) -> Client:
        if self._client is None:
            self._client = Client(self._target, tls=self._tls, auth=self._auth)  # type: ignore[arg-type]
        return self._client

    async def _topic_state(self, topic: str) -> _TopicState:
        state = self._topics.get(topic)
        if state is not None:
            return state
        wire.check_topic(topic)
        client = self._ensure_client()
        lock = self._topic_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            state = self._topics.get(topic)
            if state is None:
                info = await self._retrying(
                    "DescribeTopic",
                    lambda timeout_s: client.describe_topic(topic, timeout_s=timeout_s),
                    asyncio.get_running_loop().time() + self._max_block_s,
                )
                state = self._topics[topic] = _TopicState(
                    topic, info.num_partitions, self._rng, self._manager is not None
                )
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
        time a topic is used, for its partition count: up to ``max_block_ms`` through
        retriable errors).

        Raises:
            TypeError/ValueError: a bad argument (named), before anything is buffered.
            UnknownTopicOrPartitionError: no such topic (from the server).
            ProducerClosedError: the Producer is closing.
            TransactionStateError: a transactional producer outside a transaction.
            ProducerFencedError (or the error that made the producer fail for good), or for a
                transactional producer the error that made its transaction abortable.
        """
        if self._closed:
            raise ProducerClosedError("send() on a closed Producer")
        manager = self._manager
        if manager is not None and not manager.sends_allowed:
            manager.check_send()
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
                return new_record_future(RecordFuture, (batch, index, timestamp_ms))
        batch, index = self._append(queue, state, timestamp_ms, key, value, headers)
        if self._unyielded_bytes >= _YIELD_EVERY_BYTES:
            await self._yield()
        return new_record_future(RecordFuture, (batch, index, timestamp_ms))


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
        manager = self._manager
        if manager is not None and not manager.sends_allowed:
            manager.check_send()
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
        runs: list[tuple[ProducerBatch, int, int, list[int]]] = []
        run_batch: ProducerBatch | None = None
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
        runs: list[tuple[ProducerBatch, int, int, list[int]]],
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
    ) -> tuple[ProducerBatch, int]:
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

    def _open_batch(self, queue: _PartitionQueue) -> ProducerBatch:
        loop = asyncio.get_running_loop()
        builder = BatchBuilder(
            compression=self._compression,
            compression_level=self._compression_level,
            is_transactional=self._transactional,
        )
        batch = ProducerBatch(queue, builder, loop, loop.time() + self._delivery_timeout_s)
        self._buffered_bytes += batch.size_bytes
        self._pending.add(batch)
        queue.current = batch
        if self._linger_s > 0:
            batch.timer = loop.call_later(self._linger_s, self._on_linger, queue, batch)
        else:
            batch.timer = loop.call_soon(self._on_linger, queue, batch)  # type: ignore[assignment]
        # Kafka's delivery.timeout.ms counts from the batch's creation: a batch that cannot
        # even be sent (no producer id, its partition not yet in the transaction, a server
        # down) fails then too.
        batch.expiry = loop.call_at(batch.deadline, self._expire, batch)
        manager = self._manager
        if manager is not None and self._transactional and manager.needs_adding(
            queue.topic_partition
        ):
            # As Kafka's send(): the partition joins the transaction with its first record, so
            # that AddPartitionsToTxn overlaps the batch's linger instead of delaying its send.
            self._maybe_add_partitions()
        return batch

    def _on_linger(self, queue: _PartitionQueue, batch: ProducerBatch) -> None:
        batch.timer = None
        if queue.current is not batch:
            return
        batch.lingered = True
        if queue.in_flight < self._max_in_flight and not queue.ready:
            self._close_batch(queue, self._topics.get(queue.topic), batch)
        # Otherwise the batch keeps filling until a request slot frees (see _maybe_send).

    def _close_batch(
        self, queue: _PartitionQueue, state: _TopicState | None, batch: ProducerBatch
    ) -> None:
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
        then the open batch if its linger time is over. With idempotence a batch is drained
        only when it can be stamped (:meth:`_may_stamp`); its sequence is fixed then."""
        while queue.in_flight < self._max_in_flight:
            if queue.ready:
                batch = queue.ready[0]
            elif queue.current is not None and queue.current.lingered:
                batch = queue.current
            else:
                return
            if queue.sequences is not None and not self._may_stamp(queue):
                return
            if queue.ready and queue.ready[0] is batch:
                queue.ready.popleft()
            else:
                queue.current = None
                state = self._topics.get(queue.topic)
                if state is not None:
                    state.sticky.next_batch(queue.partition)
            batch.drained = True
            if batch.expiry is not None:
                batch.expiry.cancel()  # from now on _deliver enforces the deadline
                batch.expiry = None
            if queue.sequences is not None:
                batch.count = batch.builder.records_count  # type: ignore[union-attr]
                producer = self._manager.producer  # type: ignore[union-attr]
                queue.sequences.stamp(batch, producer)  # type: ignore[arg-type]
            queue.in_flight += 1
            self._spawn(self._deliver(queue, batch))

    def _may_stamp(self, queue: _PartitionQueue) -> bool:
        """Whether the next batch of ``queue`` may get its sequence and go out now (Kafka's
        ``RecordAccumulator.shouldStopDrainBatchesForPartition``): there is a producer id (else
        it is asked for), the partition's sequences are not restarting, no batch of the old
        producer id or one waiting to be resent is ahead of it, and for a transaction the
        partition was added to it (else it is added, with the others collected meanwhile)."""
        manager = self._manager
        assert manager is not None and queue.sequences is not None
        producer = manager.producer
        if producer is None:
            if not manager.has_fatal_error and not manager.is_transactional:
                self._ensure_producer_id()
            return False
        sequences = queue.sequences
        if queue.restart_pending or not sequences.can_stamp(producer):
            return False
        if any(batch.needs_resend for batch in sequences.unacked):
            return False  # resends go first, in sequence order
        if manager.is_transactional:
            if manager.state not in (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING):
                return False
            if manager.needs_adding(queue.topic_partition):
                self._maybe_add_partitions()
                return False
        return True

    def _spawn(self, coroutine: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coroutine)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _backoff_s(self, attempt: int) -> float:
        # Kafka's exponential backoff: base * 2^(attempt-1), capped, with +-20% jitter.
        delay = min(self._retry_backoff_max_s, self._retry_backoff_s * (2 ** min(attempt - 1, 62)))
        return delay * self._rng.uniform(0.8, 1.2)

    def _error_action(
        self, queue: _PartitionQueue, batch: ProducerBatch, error: StratalogError
    ) -> ErrorAction:
        if queue.sequences is None:
            return ErrorAction.RETRY if error.retriable else ErrorAction.FAIL
        return produce_error_action(
            error, transactional=self._transactional, is_head=queue.sequences.is_head(batch)
        )

    async def _deliver(self, queue: _PartitionQueue, batch: ProducerBatch) -> None:
        """Send one batch until it is acknowledged or fails for good; then free its slot.

        With idempotence a resend waits for its turn (every earlier batch of the partition
        resolved, the partition's sequences not restarting) and carries the batch's stamp,
        rewritten in its header if its sequences restarted meanwhile."""
        loop = asyncio.get_running_loop()
        sequences = queue.sequences
        attempts = 0
        last_error: StratalogError | None = None
        try:
            builder = batch.builder
            assert builder is not None
            batch.builder = None
            batch.count = builder.records_count
            stamp = (batch.producer_id, batch.producer_epoch, batch.base_sequence)
            if sequences is not None:
                builder.set_producer_state(*stamp)
            data = batch.data = builder.build()
            while not batch.future.done():
                if batch.needs_resend:
                    if sequences is not None and not await self._wait_for_turn(queue, batch):
                        self._expired(queue, batch, attempts, last_error)
                        return
                    batch.needs_resend = False
                    if batch.future.done():
                        return  # failed meanwhile (the producer was fenced)
                if stamp != (batch.producer_id, batch.producer_epoch, batch.base_sequence):
                    stamp = (batch.producer_id, batch.producer_epoch, batch.base_sequence)
                    data = batch.data = _restamped(data, *stamp)
                remaining_s = batch.deadline - loop.time()
                if remaining_s <= 0:
                    self._expired(queue, batch, attempts, last_error)
                    return
                attempts += 1
                queue.sending += 1
                try:
                    result = await self._client.produce(
                        batch.topic,
                        batch.partition,
                        record_batches=data,
                        flush=self._flush,
                        timeout_s=min(self._request_timeout_s, remaining_s),
                    )
                except StratalogError as err:
                    last_error = err
                else:
                    if result.record_count not in (0, batch.count):
                        logger.warning(
                            "server acknowledged %d records of a batch of %d to %s-%d",
                            result.record_count, batch.count, batch.topic, batch.partition,
                        )
                    if result.duplicate:
                        logger.info("%r was stored already: acknowledged with offset %d",
                                    batch, result.base_offset)
                    if not batch.future.done():
                        batch.future.set_result((result.base_offset, result.log_append_time))
                    return
                finally:
                    queue.sending -= 1
                # Judged before a pending restart may run (now that this request is back) and
                # make this batch the head of its restamped partition; that restart restamps
                # this batch too, so it needs no other.
                action = self._error_action(queue, batch, last_error)
                if action is ErrorAction.RESTART_SEQUENCES and queue.restart_pending:
                    action = ErrorAction.RESEND_IN_TURN
                self._maybe_restart(queue)
                if action is ErrorAction.FATAL:
                    self._fail_fatal(last_error)
                    return
                if action in (ErrorAction.FAIL, ErrorAction.ABORTABLE):
                    self._failed(queue, batch, last_error, restart=True)
                    return
                if self._retries is not None and attempts > self._retries:
                    self._failed(queue, batch, last_error, restart=True)
                    return
                batch.needs_resend = True
                if action is ErrorAction.RESTART_SEQUENCES:
                    logger.info("%r: %s; restarting the partition's sequences", batch, last_error)
                    self._request_restart(queue)
                elif action is ErrorAction.RETRY:
                    delay_s = self._backoff_s(attempts)
                    if loop.time() + delay_s >= batch.deadline:
                        self._expired(queue, batch, attempts, last_error)
                        return
                    logger.info(
                        "retrying %r (attempt %d%s) in %.3f s after %s", batch, attempts,
                        "" if self._retries is None else f" of {self._retries + 1}", delay_s,
                        last_error,
                    )
                    await asyncio.sleep(delay_s)
                # RESEND_IN_TURN: no backoff, the turn comes when the earlier batches resolve.
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
            self._release(batch)
            if sequences is not None:
                sequences.resolve(batch)
                self._wake(queue)
                self._maybe_restart(queue)
            queue.in_flight -= 1
            if not self._stopping:
                self._maybe_send(queue)

    def _release(self, batch: ProducerBatch) -> None:
        """Give back the buffer space of a resolved batch."""
        if batch in self._pending:
            self._pending.discard(batch)
            self._buffered_bytes -= batch.size_bytes
            self._space.set()

    def _failed(
        self, queue: _PartitionQueue, batch: ProducerBatch, error: BaseException, *, restart: bool
    ) -> None:
        """``batch`` failed for good with ``error``. With idempotence its sequences leave a gap:
        a transaction must then be aborted; an idempotent producer restarts the partition's
        sequences at once if the batch was the first unresolved one and the server refused it
        (``restart``), as the batches after it cannot be stored under their sequences. (After
        a timeout it may have been stored, so the next batch finds out instead.)"""
        sequences = queue.sequences
        was_head = sequences is not None and sequences.is_head(batch)
        if not batch.future.done():
            batch.future.set_exception(error)
        if isinstance(error, UnknownTopicOrPartitionError):
            # The topic went away: ask for its partitions again next time (nothing to restart).
            self._topics.pop(batch.topic, None)
            restart = False
        if sequences is None:
            return
        if self._transactional:
            self._abortable(error, sequence_gap=True)
        elif restart and was_head:
            self._request_restart(queue)

    def _expired(
        self,
        queue: _PartitionQueue,
        batch: ProducerBatch,
        attempts: int,
        last_error: BaseException | None,
    ) -> None:
        """A drained batch reached its delivery timeout."""
        error = DeliveryTimeoutError(
            f"{batch.count} records to {batch.topic}-{batch.partition} not acknowledged within "
            f"delivery_timeout_ms={self._delivery_timeout_s * 1000:.0f} ({attempts} attempts"
            + (f"; last error: {last_error}" if last_error is not None else "") + ")",
            attempts=attempts,
            last_error=last_error,
        )
        self._failed(queue, batch, error, restart=False)

    # --- exactly-once: sequences, producer id, transactions' partitions --------------------------

    async def _wait_for_turn(self, queue: _PartitionQueue, batch: ProducerBatch) -> bool:
        """Wait until ``batch`` may be resent: it is the first unresolved batch of its partition
        and the partition's sequences are not restarting. False once its deadline passed."""
        loop = asyncio.get_running_loop()
        sequences = queue.sequences
        assert sequences is not None
        while queue.restart_pending or not sequences.is_head(batch):
            if batch.future.done():
                return True
            remaining_s = batch.deadline - loop.time()
            if remaining_s <= 0:
                return False
            if queue.waiter is None:
                queue.waiter = loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(queue.waiter), remaining_s)
            except TimeoutError:
                return False
        return True

    def _wake(self, queue: _PartitionQueue) -> None:
        """The partition's unresolved batches or sequences changed: waiters look again."""
        waiter, queue.waiter = queue.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _request_restart(self, queue: _PartitionQueue) -> None:
        """Restart ``queue``'s sequences at 0 under a new producer id (asked for now unless a
        newer one than the partition's is there), once none of its requests is in flight."""
        if queue.restart_pending:
            return  # the restart on its way restamps this batch too
        queue.restart_pending = True
        manager = self._manager
        assert manager is not None and queue.sequences is not None
        if manager.producer is not None and manager.producer == queue.sequences.producer:
            self._ensure_producer_id()
        self._maybe_restart(queue)

    def _maybe_restart(self, queue: _PartitionQueue) -> None:
        sequences = queue.sequences
        if sequences is None or not queue.restart_pending or queue.sending:
            return
        producer = self._manager.producer  # type: ignore[union-attr]
        if producer is None or producer == sequences.producer:
            return  # the new producer id is on its way: this runs again when it arrives
        restamped = sequences.restart(producer)
        queue.restart_pending = False
        logger.info(
            "%s-%d: sequences restart at 0 under producer %d epoch %d (%d batches to resend)",
            queue.topic, queue.partition, producer.producer_id, producer.producer_epoch,
            len(restamped),
        )
        self._wake(queue)
        if not self._stopping:
            self._maybe_send(queue)

    def _ensure_producer_id(self) -> None:
        """Ask for a (new) producer id for an idempotent producer, unless already asking."""
        manager = self._manager
        assert manager is not None and not manager.is_transactional
        if self._init_task is not None or manager.has_fatal_error or self._stopping:
            return
        manager.begin_initializing()  # no batch is stamped with the old id from now on
        self._init_task = self._spawn(self._init_idempotent())

    async def _init_idempotent(self) -> None:
        manager = self._manager
        assert manager is not None
        client = self._ensure_client()
        try:
            producer = await self._retrying(
                "InitProducerId",
                lambda timeout_s: client.init_producer_id(timeout_s=timeout_s),
                None,
                lambda: bool(self._pending),
            )
        except StratalogError as err:
            if err.retriable:  # nothing waits for the id any more: ask again on the next batch
                manager.initialization_failed()
            else:
                self._fail_fatal(unsupported_error(err, client.target))
            return
        except BaseException:
            manager.initialization_failed()
            raise
        finally:
            self._init_task = None
        manager.initialized(producer)
        self._producer_id_error = None
        logger.info("producer id %d epoch %d", producer.producer_id, producer.producer_epoch)
        for queue in self._all_queues():
            self._maybe_restart(queue)
            self._maybe_send(queue)

    async def _retrying(
        self,
        what: str,
        call: Callable[[float], Awaitable[Any]],
        deadline: float | None,
        keep_going: Callable[[], bool] | None = None,
    ) -> Any:
        """``call(timeout_s)`` again after retriable errors, with backoff, until ``deadline``
        (loop time) or ``keep_going()`` is false; then the last error is raised."""
        loop = asyncio.get_running_loop()
        attempts = 0
        while True:
            timeout_s = self._request_timeout_s
            if deadline is not None:
                timeout_s = min(timeout_s, max(0.001, deadline - loop.time()))
            try:
                return await call(timeout_s)
            except StratalogError as err:
                if not err.retriable:
                    raise
                if what == "InitProducerId":
                    self._producer_id_error = err
                attempts += 1
                delay_s = self._backoff_s(attempts)
                if deadline is not None and loop.time() + delay_s >= deadline:
                    raise
                if keep_going is not None and not keep_going():
                    raise
                logger.info("%s failed (attempt %d), retrying in %.3f s: %s",
                            what, attempts, delay_s, err)
                await asyncio.sleep(delay_s)

    def _all_queues(self) -> list[_PartitionQueue]:
        return [queue for state in list(self._topics.values()) for queue in state.queues]

    def _queue_of(self, topic_partition: TopicPartition) -> _PartitionQueue | None:
        state = self._topics.get(topic_partition.topic)
        if state is None or topic_partition.partition >= state.num_partitions:
            return None
        return state.queues[topic_partition.partition]

    def _expire(self, batch: ProducerBatch) -> None:
        """A batch never drained reached its delivery timeout: drop it, say why."""
        batch.expiry = None
        if batch.drained or batch.future.done():
            return
        queue = batch.queue
        manager = self._manager
        if manager is not None and manager.producer is None:
            why = "no producer id yet" + (
                f" (last InitProducerId error: {self._producer_id_error})"
                if self._producer_id_error is not None else ""
            )
        elif manager is not None and queue.topic_partition in manager.pending_partitions:
            why = "its partition was not yet added to the transaction"
        else:
            why = "the partition's earlier batches were not acknowledged"
        count = batch.builder.records_count if batch.builder is not None else 0
        error = DeliveryTimeoutError(
            f"{count} records to {batch.topic}-{batch.partition} not sent within "
            f"delivery_timeout_ms={self._delivery_timeout_s * 1000:.0f}: {why}",
            last_error=self._producer_id_error,
        )
        self._drop(batch, error)
        if self._transactional:
            self._abortable(error)

    def _drop(self, batch: ProducerBatch, error: BaseException) -> None:
        """Fail a batch that was never drained and forget it."""
        queue = batch.queue
        if queue.current is batch:
            queue.current = None
        else:
            with contextlib.suppress(ValueError):
                queue.ready.remove(batch)
        for timer in (batch.timer, batch.expiry):
            if timer is not None:
                timer.cancel()
        batch.timer = batch.expiry = None
        batch.builder = None
        if not batch.future.done():
            batch.future.set_exception(error)
        self._release(batch)

    def _drop_unsent(self, error: BaseException) -> None:
        """Fail every batch not yet drained (a transaction aborted or failed, or fenced)."""
        for queue in self._all_queues():
            for batch in [*queue.ready, *([queue.current] if queue.current else [])]:
                self._drop(batch, error)
        if self._manager is not None:
            self._manager.pending_partitions.clear()

    def _abortable(self, error: BaseException, *, sequence_gap: bool = False) -> None:
        """A batch or AddPartitionsToTxn of the transaction failed: it can only be aborted."""
        manager = self._manager
        assert manager is not None
        was_abortable = manager.state is TransactionState.ABORTABLE_ERROR
        manager.abortable_error(error, sequence_gap=sequence_gap)
        if manager.state is TransactionState.ABORTABLE_ERROR and not was_abortable:
            logger.warning("transaction of %r failed, it must be aborted: %s",
                           manager.transactional_id, error)
            aborted = TransactionAbortedError(
                f"not sent: the transaction failed ({error}) and must be aborted"
            )
            aborted.__cause__ = error
            self._drop_unsent(aborted)

    def _fail_fatal(self, error: BaseException) -> None:
        """Fenced, or a failure nothing can repair: every pending record fails with ``error``,
        and so does every later call but close()."""
        manager = self._manager
        assert manager is not None
        if manager.has_fatal_error:
            return
        logger.error("the Producer failed for good and must be closed: %s", error)
        manager.fatal_error(error)
        self._drop_unsent(error)
        for batch in list(self._pending):
            if not batch.future.done():
                batch.future.set_exception(error)
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()

    def _maybe_add_partitions(self) -> None:
        manager = self._manager
        if self._add_task is None and manager is not None and manager.pending_partitions:
            self._add_task = self._spawn(self._add_partitions())

    async def _add_partitions(self) -> None:
        """AddPartitionsToTxn for the partitions waiting, in one request (Kafka's Sender adds
        the partitions collected since its last request), until none waits; then their batches
        go out."""
        manager = self._manager
        assert manager is not None and manager.transactional_id is not None
        client = self._ensure_client()

        def active() -> bool:
            return manager.state in (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING)

        try:
            while manager.pending_partitions and active():
                partitions = sorted(manager.pending_partitions)
                producer = manager.producer
                assert producer is not None
                manager.transaction_started = True
                try:
                    await self._retrying(
                        "AddPartitionsToTxn",
                        lambda timeout_s, producer=producer, partitions=partitions: (
                            client.add_partitions_to_txn(
                                manager.transactional_id,  # type: ignore[arg-type]
                                producer.producer_id,
                                producer.producer_epoch,
                                partitions,
                                timeout_s=timeout_s,
                            )
                        ),
                        None,
                        active,
                    )
                except StratalogError as err:
                    if coordinator_error_action(err, "AddPartitionsToTxn") is ErrorAction.FATAL:
                        self._fail_fatal(err)
                    else:
                        self._abortable(err)
                    return
                manager.partitions_added(partitions)
                for topic_partition in partitions:
                    queue = self._queue_of(topic_partition)
                    if queue is not None:
                        self._maybe_send(queue)
        finally:
            self._add_task = None

    # --- transactions ----------------------------------------------------------------------------

    def _transactional_manager(self, call: str) -> TransactionManager:
        manager = self._manager
        if manager is None or not manager.is_transactional:
            raise TransactionStateError(
                f"{call} needs a transactional producer: create the Producer with "
                f"transactional_id=..."
            )
        if self._closed:
            raise ProducerClosedError(f"{call} on a closed Producer")
        return manager

    async def init_transactions(self) -> None:
        """Get the transactional id's producer id with a new epoch (Kafka's
        ``initTransactions``): every older producer with this transactional id is fenced, and
        a transaction one left open is aborted (or completed, if its commit had begun).
        ``begin_transaction()`` does it on first use; call it first to fail early.

        Waits through retriable errors (a transaction of the id still completing, the
        coordinator loading, no connection) up to ``max_block_ms``, then raises the last one;
        the call may be repeated.

        Raises:
            TransactionStateError: not a transactional producer, or already initialised.
            StratalogError: as above; a non-retriable one (INVALID_TRANSACTION_TIMEOUT, ...)
                is fatal.
        """
        manager = self._transactional_manager("init_transactions()")
        async with self._txn_lock:
            await self._init_transactions(manager)

    async def _init_transactions(self, manager: TransactionManager) -> None:
        manager.raise_if_fatal()
        if manager.state is not TransactionState.UNINITIALIZED:
            raise manager.wrong_state("init_transactions()")
        manager.begin_initializing()
        await self._init_transactional_id(manager)

    async def _init_transactional_id(self, manager: TransactionManager) -> None:
        """InitProducerId with the transactional id (state INITIALIZING) until it answers."""
        client = self._ensure_client()
        deadline = asyncio.get_running_loop().time() + self._max_block_s
        try:
            producer = await self._retrying(
                "InitProducerId",
                lambda timeout_s: client.init_producer_id(
                    manager.transactional_id,
                    transaction_timeout_ms=manager.transaction_timeout_ms,
                    timeout_s=timeout_s,
                ),
                deadline,
            )
        except StratalogError as err:
            if err.retriable:
                manager.initialization_failed()
                raise
            error = unsupported_error(err, client.target)
            self._fail_fatal(error)
            if error is err:
                raise
            raise error from err
        except BaseException:
            manager.initialization_failed()
            raise
        manager.initialized(producer)
        logger.info("transactional id %r: producer id %d epoch %d", manager.transactional_id,
                    producer.producer_id, producer.producer_epoch)

    async def begin_transaction(self) -> None:
        """Begin a transaction: the records sent until :meth:`commit_transaction` or
        :meth:`abort_transaction` are committed or aborted together. The first call gets the
        producer id (:meth:`init_transactions`). Nothing is sent to the server until the first
        batch: the partitions are added to the transaction as their batches go out.

        Raises:
            TransactionStateError: not transactional, or not READY (a transaction is open,
                or the last one failed and was not aborted yet).
        """
        manager = self._transactional_manager("begin_transaction()")
        async with self._txn_lock:
            if manager.state is TransactionState.UNINITIALIZED:
                await self._init_transactions(manager)
            manager.begin_transaction()

    async def commit_transaction(self) -> None:
        """Send every record of the transaction, wait for all, and commit it (EndTxn): once
        this returns, READ_COMMITTED consumers see all of its records.

        If a record of the transaction failed, nothing is committed: this raises that error
        and the transaction must be aborted (:meth:`abort_transaction`). If EndTxn could not
        be had within ``max_block_ms`` (retriable errors), the last error is raised and the
        transaction stays COMMITTING: call this again.

        Raises:
            TransactionStateError: no transaction open.
            StratalogError: as above; ProducerFencedError if another instance took over.
        """
        manager = self._transactional_manager("commit_transaction()")
        async with self._txn_lock:
            if not manager.begin_commit():
                raise manager.last_error.with_traceback(None)  # type: ignore[union-attr]
            await self.flush()
            manager.raise_if_fatal()
            if manager.state is TransactionState.ABORTABLE_ERROR:
                raise manager.last_error.with_traceback(None)  # type: ignore[union-attr]
            if self._add_task is not None:
                await asyncio.wait([self._add_task])
            if manager.transaction_started:
                await self._end_transaction(manager, commit=True)
            manager.complete_transaction()

    async def abort_transaction(self) -> None:
        """Abort the transaction: records not yet sent are dropped (their futures fail with
        :class:`~stratalog.client.errors.TransactionAbortedError`), those in flight are
        waited for, and the server writes ABORT markers (EndTxn): READ_COMMITTED consumers
        never see the transaction's records. If a batch of it had failed, the producer takes a
        new epoch afterwards (InitProducerId), so the next transaction starts its sequences
        at 0.

        Raises:
            TransactionStateError: no transaction open.
            StratalogError: retriable errors past ``max_block_ms`` (the transaction stays
                ABORTING: call this again); ProducerFencedError.
        """
        manager = self._transactional_manager("abort_transaction()")
        async with self._txn_lock:
            manager.begin_abort()
            aborted = TransactionAbortedError("not sent: the transaction was aborted")
            self._drop_unsent(aborted)
            in_flight = [batch.future for batch in self._pending]
            if in_flight:
                await asyncio.wait(in_flight)
            if self._add_task is not None:
                await asyncio.wait([self._add_task])
            manager.raise_if_fatal()
            if manager.transaction_started:
                await self._end_transaction(manager, commit=False)
            manager.clear_transaction()
            if manager.epoch_bump_required:
                # A batch of the transaction failed after its sequence was given: sequences
                # continue only under a new epoch (Kafka bumps it in InitProducerId, KIP-360).
                manager.begin_initializing()
                await self._init_transactional_id(manager)
            else:
                manager.transition(TransactionState.READY)

    async def _end_transaction(self, manager: TransactionManager, *, commit: bool) -> None:
        """EndTxn through retriable errors for up to ``max_block_ms``."""
        client = self._ensure_client()
        producer = manager.producer
        assert producer is not None and manager.transactional_id is not None
        transactional_id = manager.transactional_id
        try:
            await self._retrying(
                "EndTxn",
                lambda timeout_s: client.end_txn(
                    transactional_id, producer.producer_id, producer.producer_epoch, commit,
                    timeout_s=timeout_s,
                ),
                asyncio.get_running_loop().time() + self._max_block_s,
            )
        except StratalogError as err:
            if err.retriable:
                raise
            if not commit and err.reason == "INVALID_TXN_STATE" and not manager.partitions:
                # No AddPartitionsToTxn was acknowledged: the one that went out never reached
                # the coordinator, so no transaction is open there. Nothing to abort.
                return
            if commit and coordinator_error_action(err, "EndTxn") is ErrorAction.ABORTABLE:
                manager.abortable_error(err)
                raise
            self._fail_fatal(err)
            raise

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Producer]:
        """``async with producer.transaction(): ...``: begin; commit when the block ends
        normally, abort (and re-raise) when it raises. A commit that fails because a record of
        the transaction failed aborts too, then raises the commit's error."""
        await self.begin_transaction()
        try:
            yield self
        except BaseException as exc:
            await self._abort_after(exc)
            raise
        try:
            await self.commit_transaction()
        except StratalogError as exc:
            manager = self._manager
            if manager is not None and manager.state is TransactionState.ABORTABLE_ERROR:
                await self._abort_after(exc)
            raise

    async def _abort_after(self, exc: BaseException) -> None:
        try:
            await self.abort_transaction()
        except Exception as abort_error:  # the first error is the one to raise
            logger.warning("abort_transaction() after %r failed too: %s", exc, abort_error)
            exc.add_note(f"abort_transaction() failed too: {abort_error!r}")

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
        close the client if the Producer opened it. Idempotent. An open transaction is neither
        committed nor aborted: the server aborts it after ``transaction_timeout_ms`` (or the
        next producer with the same transactional id does, at once)."""
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
            self._stopping = True
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            closed = ProducerClosedError("the Producer was closed")
            for batch in list(self._pending):
                for timer in (batch.timer, batch.expiry):
                    if timer is not None:
                        timer.cancel()
                if not batch.future.done():
                    batch.future.set_exception(closed)
            self._pending.clear()
            if self._owns_client and self._client is not None:
                await self._client.close()


def _restamped(data: bytes, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """``data`` (one batch) with a new producer id, epoch and base sequence, CRC rewritten."""
    buffer = bytearray(data)
    set_producer_state(buffer, 0, len(buffer), producer_id, producer_epoch, base_sequence)
    return bytes(buffer)
