"""The Producer: records in, Kafka v2 batches out, one ordered pipeline per partition.

Intuition: calling Produce once per record would spend all the time on round trips, so the
Producer does what Kafka's does. Each ``send()`` picks a partition (Kafka's murmur2 of the key,
or the current sticky partition for unkeyed records, which moves on after a stint to the
partition that got the fewest bytes), encodes the record straight into that
partition's open batch (:class:`~stratalog.records.BatchBuilder`, the shared codec) and returns a
:class:`RecordFuture`. A batch is closed when it reaches ``batch_bytes_max``, or (by default)
as soon as its partition has no request in flight, or ``linger_ms`` after its first record when
one is given; it is compressed and sent as ``record_batches`` in one Produce; its response
(the base offset) resolves the futures of all its records at once: record ``i`` of the batch
has offset ``base_offset + i``.

The work is split as in Kafka's producer:

* :class:`Producer` (here, Kafka's ``KafkaProducer``): the public API, argument checks,
  partitioning, the transactions API, ``flush()`` and ``close()``;
* :class:`~.accumulator.RecordAccumulator` (:mod:`.accumulator`): per partition the open batch
  and the closed ones waiting, linger, the buffer limit;
* :class:`~.sender.Sender` (:mod:`.sender`): drains closed batches into Produce requests,
  request slots, retries until the delivery timeout, sequence order, the producer id and the
  transactional requests. How it keeps the guarantees below is in its module docstring.

Delivery semantics, per mode:

* Idempotent (the default). Each record is stored once, and the records of a partition in
  ``send()`` order, retries and server restarts included: the Producer gets a producer id and
  epoch from the server and stamps each batch with them and the *sequence* of its partition
  (:mod:`.sequences`), so that the server recognises a resend and stores nothing out of order.
  Up to ``max_in_flight_per_partition`` (default and most 5, the batches the server remembers
  per producer) requests per partition are in flight. Retriable errors are retried until
  ``delivery_timeout_ms`` (120 s) after the batch was opened (``retries`` is unlimited by
  default), with exponential backoff and jitter. A batch that fails for good (a non-retriable
  error, or the delivery timeout) leaves a gap in the partition's sequences; the Producer then
  restarts them under a new producer id, and the other batches are stored, in order. Fenced
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
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence

from stratalog.records import RECORD_BATCH_OVERHEAD, Compression, Header

from . import wire
from .accumulator import (
    RECORD_FRAMING_BYTES_MAX,
    YIELD_EVERY_BYTES,
    ProducerClosedError,
    RecordAccumulator,
    Run,
    TopicState,
)
from .bootstrap import bootstrap_targets
from .client import Client
from .credentials import Credentials, TlsConfig, channel_security
from .errors import StratalogError, TransactionAbortedError, UnknownTopicOrPartitionError
from .groups.membership_messages import GroupMetadata
from .partitioner import partition_for_key
from .producer_batch import ProducerBatch, RecordFuture, SendManyFuture, new_record_future
from .sender import Sender
from .transaction_manager import (
    TransactionManager,
    TransactionState,
    TransactionStateError,
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

_BYTES_OR_NONE = frozenset({bytes, type(None)})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Producer:
    """Batches records per partition, encodes them client-side and sends them with retries.

    Holds the :class:`~.accumulator.RecordAccumulator` (per topic its partition count, asked
    once with DescribeTopic, and sticky partitioner; per partition its batches; the bytes
    buffered), the :class:`~.sender.Sender` that delivers the batches, and the
    :class:`~.transaction_manager.TransactionManager` (producer id, epoch, transaction state)
    unless ``idempotent=False``; the lock that serialises the transaction calls.
    Invariant: ``buffered_bytes`` = the uncompressed size of every batch not yet resolved.
    Crash behaviour: records in memory are lost with the process; only resolved futures mean
    stored. A transaction left open by a crash (or by ``close()``) is aborted by the server
    after ``transaction_timeout_ms``, or by the next producer with the same transactional id.
    Event-loop only: one asyncio loop owns the Producer (use one per loop/thread).

    Args:
        client: a :class:`Client`, or a target string or bootstrap targets (a list, or
            comma-separated) from which the Producer makes one, which it owns and closes.
        tls, auth: TLS and credentials of the Client made from a target string (see
            :class:`Client`).
        idempotent: stamp batches with a producer id and sequences so that the server stores
            each once and in order (see the module docstring). On by default, as in Kafka 3,
            unless ``acks`` is below all (then off; on with acks 0 or 1 is a ValueError, as
            in Kafka).
        acks: which replicas must have a batch before it is acknowledged (Kafka's acks):
            ``"all"`` (-1, the default: every in-sync replica, at least
            ``min.insync.replicas``), 1 (the partition's leader), 0 (the leader's answer does
            not wait for replication either; unlike Kafka, the server still answers, with the
            offsets: docs/client.md). Sent on every Produce request.
        transactional_id: send in transactions under this stable id (implies idempotent).
        transaction_timeout_ms: how long a transaction may stay open before the server aborts
            it (default 60000; only with ``transactional_id``).
        linger_ms: how long a batch waits for more records after its first (0: send at the next
            turn of the event loop, which still batches what was sent in the same turn). The
            default, ``None``: no timer; a batch goes out at the next turn of the event loop
            when its partition has no request in flight, and while one is, the records sent
            meanwhile gather until it answers (or the batch is full): one record awaited at a
            time costs one round trip, and a stream of records forms batches as large as the
            server's speed calls for (docs/client.md).
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
            before raising (Kafka's max.block.ms). The first send's wait ends at
            ``delivery_timeout_ms`` if that is shorter, with a
            :class:`~stratalog.client.errors.DeliveryTimeoutError` naming the timeout and
            the last error (no server listening, ...).
        buffer_bytes_max: bytes of records held before ``send()`` waits.
        flush: ask the server to fsync before answering each Produce.
        allow_auto_topic_creation: a topic's first send that finds it missing asks the server
            to create it (a Metadata request with Kafka's ``allow_auto_topic_creation``, as
            Kafka's producer sends): the server does when its ``auto_create_topics_enable`` is
            on (the default) and the caller may CREATE the topic; otherwise the send fails with
            UnknownTopicOrPartitionError as before. False: never (the Spark sink, which has its
            own ``createTopic`` option).
    """

    def __init__(
        self,
        client: Client | str | Sequence[str],
        *,
        idempotent: bool | None = None,
        acks: int | str = "all",
        transactional_id: str | None = None,
        transaction_timeout_ms: int | None = None,
        linger_ms: int | None = None,
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
        allow_auto_topic_creation: bool = True,
    ) -> None:
        self._allow_auto_topic_creation = allow_auto_topic_creation
        if isinstance(client, Client):
            if tls is not None or auth is not None:
                raise TypeError("tls= and auth= are for a target string; a Client has its own")
        else:
            try:
                targets = bootstrap_targets(client)
            except TypeError:
                raise TypeError(
                    f"client must be a Client, a target str or a list of them, got {client!r}"
                ) from None
            # Refuses what the Client would, now.
            channel_security(",".join(targets), tls, auth, None)
        acks = wire.parse_acks(acks)
        if idempotent is None:
            # Kafka 3's rule: idempotence is on by default, off when acks is set below all.
            idempotent = acks == -1 or transactional_id is not None
        if not isinstance(idempotent, bool):
            raise TypeError(f"idempotent must be a bool, got {type(idempotent).__name__}")
        if idempotent and acks != -1:
            raise ValueError(
                f"idempotence needs acks='all' (got acks={acks}): a batch acknowledged by the "
                "leader alone can be lost with it, and its sequence with it (Kafka's rule); "
                "pass acks='all', or idempotent=False"
            )
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
        if linger_ms is not None:
            wire.check_int(linger_ms, "linger_ms", 0, 3_600_000)
        wire.check_int(
            batch_bytes_max, "batch_bytes_max", RECORD_BATCH_OVERHEAD + 1, wire.INT32_MAX
        )
        compression = wire.parse_compression(compression)
        if compression_level is not None:
            wire.check_int(compression_level, "compression_level", -(2**31), wire.INT32_MAX)
        if max_in_flight_per_partition is None:
            max_in_flight_per_partition = IDEMPOTENT_IN_FLIGHT_MAX if idempotent else 1
        wire.check_int(max_in_flight_per_partition, "max_in_flight_per_partition", 1, 1000)
        if idempotent and max_in_flight_per_partition > IDEMPOTENT_IN_FLIGHT_MAX:
            raise ValueError(
                f"max_in_flight_per_partition must be at most {IDEMPOTENT_IN_FLIGHT_MAX} with "
                f"idempotence (the server recognises a resend among a producer's last "
                f"{IDEMPOTENT_IN_FLIGHT_MAX} batches), got {max_in_flight_per_partition}"
            )
        if retries is not None:
            wire.check_int(retries, "retries", 0, wire.INT32_MAX)
            if retries == 0 and idempotent:
                raise ValueError(
                    "retries must be > 0 with idempotence (a batch the server saw out of order "
                    "is sent again); pass idempotent=False for at-most-once"
                )
        wire.check_int(retry_backoff_ms, "retry_backoff_ms", 0, 3_600_000)
        wire.check_int(retry_backoff_max_ms, "retry_backoff_max_ms", 0, 3_600_000)
        wire.check_int(delivery_timeout_ms, "delivery_timeout_ms", 1, wire.INT32_MAX)
        if isinstance(request_timeout_s, bool) or not isinstance(request_timeout_s, int | float):
            raise TypeError(f"request_timeout_s must be a number, got {request_timeout_s!r}")
        if not request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        wire.check_int(max_block_ms, "max_block_ms", 0, wire.INT32_MAX)
        wire.check_int(buffer_bytes_max, "buffer_bytes_max", 1, 2**62)
        if not isinstance(flush, bool):
            raise TypeError(f"flush must be a bool, got {type(flush).__name__}")
        rng = rng or random.Random()  # one source of randomness: partitioning and backoff
        self._accumulator = RecordAccumulator(
            batch_bytes_max=batch_bytes_max,
            buffer_bytes_max=buffer_bytes_max,
            linger_ms=linger_ms,
            compression=compression,
            compression_level=compression_level,
            delivery_timeout_ms=delivery_timeout_ms,
            sequenced=idempotent,
            transactional=transactional_id is not None,
            rng=rng,
        )
        self._sender = Sender(
            self._accumulator,
            client,
            self._manager,
            max_in_flight=max_in_flight_per_partition,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_s=float(request_timeout_s),
            max_block_ms=max_block_ms,
            flush=flush,
            rng=rng,
            tls=tls,
            auth=auth,
            acks=acks,
        )
        self._topic_locks: dict[str, asyncio.Lock] = {}
        self._txn_lock = asyncio.Lock()  # serialises the transaction calls

    # --- context ---------------------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def buffered_bytes(self) -> int:
        """Uncompressed bytes of records sent to the Producer and not yet acknowledged."""
        return self._accumulator.buffered_bytes

    @property
    def throttle_time_ms_total(self) -> int:
        """How long the server held back this producer's Produce answers in all, in ms, for
        its principal's produce byte-rate quota (the sum of their ``throttle_time_ms``; Kafka's
        producer reports ``produce-throttle-time-avg`` and ``-max``). 0 while never throttled.
        A throttled producer waits for its answers, so its delivery slows to the quota."""
        return self._sender.throttle_time_ms_total

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

    async def _topic_state(self, topic: str) -> TopicState:
        state = self._accumulator.topics.get(topic)
        if state is not None:
            return state
        wire.check_topic(topic)
        lock = self._topic_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            state = self._accumulator.topics.get(topic)
            if state is None:
                try:
                    info = await self._sender.describe_topic(topic)
                except UnknownTopicOrPartitionError as unknown:
                    if not self._allow_auto_topic_creation:
                        raise
                    # Kafka's producer: its metadata request creates the topic where the
                    # server allows it; refused, it raises the same error again.
                    try:
                        await self._sender.client().metadata([topic],
                                                             allow_auto_topic_creation=True)
                    except UnknownTopicOrPartitionError:
                        raise
                    except StratalogError:
                        raise unknown from None  # a server without Metadata: still unknown
                    info = await self._sender.describe_topic(topic)
                state = self._accumulator.add_topic(topic, info.num_partitions)
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
            DeliveryTimeoutError: the topic's first send got no answer from the server
                within ``delivery_timeout_ms`` (or ``max_block_ms``): it names which, the
                attempts and the last error.
            ProducerClosedError: the Producer is closing.
            TransactionStateError: a transactional producer outside a transaction.
            ProducerFencedError (or the error that made the producer fail for good), or for a
                transactional producer the error that made its transaction abortable.
        """
        accumulator = self._accumulator
        if accumulator.closed:
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
        state = accumulator.topics.get(topic)
        if state is None:
            state = await self._topic_state(topic)
        if partition is None:
            if key is None:
                partition = state.sticky.partition(
                    RECORD_FRAMING_BYTES_MAX + (len(value) if value is not None else 0)
                )
            else:
                partition = partition_for_key(key, state.num_partitions)
        elif type(partition) is not int or not 0 <= partition < state.num_partitions:
            self._check_partition(topic, partition, state)
        while accumulator.buffered_bytes >= accumulator.buffer_bytes_max:
            await accumulator.wait_for_space()
            if accumulator.closed:
                raise ProducerClosedError("the Producer closed while send() waited for space")
        queue = state.queues[partition]
        batch = queue.current
        if batch is not None and not headers:
            # The accumulator's append() inlined for the common case (one call fewer per
            # record): the record fits the open batch. The same accounting as append().
            estimate = RECORD_FRAMING_BYTES_MAX
            if value is not None:
                estimate += len(value)
            if key is not None:
                estimate += len(key)
            if batch.size_bytes + estimate <= accumulator.batch_bytes_max:
                index = batch.builder.append(timestamp_ms, key, value, ())  # type: ignore[union-attr]
                batch.size_bytes += estimate
                accumulator.buffered_bytes += estimate
                accumulator.unyielded_bytes += estimate
                if accumulator.unyielded_bytes >= YIELD_EVERY_BYTES:
                    await accumulator.yield_to_loop()
                return new_record_future(RecordFuture, (batch, index, timestamp_ms))
        batch, index = accumulator.append(queue, state, timestamp_ms, key, value, headers)
        if accumulator.unyielded_bytes >= YIELD_EVERY_BYTES:
            await accumulator.yield_to_loop()
        return new_record_future(RecordFuture, (batch, index, timestamp_ms))

    async def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        *,
        partition: int | None = None,
        timestamps_ms: Sequence[int] | None = None,
        headers: Sequence[Header] = (),
    ) -> SendManyFuture:
        """Send many records in one call: the batch-level API, with no per-record future.

        ``values[i]`` goes with ``keys[i]`` and ``timestamps_ms[i]`` (when given; same lengths);
        ``headers`` go on every record (as ``kcat -H``: one set for all).
        Partitioning is that of :meth:`send` record by record; unkeyed records go to the
        sticky partition, which moves on after each stint of bytes (:mod:`.partitioner`). The buffer limit is checked once, before
        the records are added. Returns a :class:`SendManyFuture` (metadata in input order).
        """
        accumulator = self._accumulator
        if accumulator.closed:
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
        if headers:
            headers = wire.check_headers(headers)
        state = accumulator.topics.get(topic) or await self._topic_state(topic)
        if partition is not None:
            self._check_partition(topic, partition, state)
        while accumulator.buffered_bytes >= accumulator.buffer_bytes_max:
            await accumulator.wait_for_space()
            if accumulator.closed:
                raise ProducerClosedError("the Producer closed while send_many() waited")
        now = _now_ms()
        runs: list[Run] = []
        run_batch: ProducerBatch | None = None
        run_first = run_count = 0
        run_timestamps: list[int] = []
        num_partitions = state.num_partitions
        sticky = state.sticky
        queues = state.queues
        append = accumulator.append
        if keys is None and timestamps_ms is None and not headers:
            await accumulator.append_values(state, values, partition, now, runs)
            return SendManyFuture(runs)
        for index in range(count):
            key = keys[index] if keys is not None else None
            timestamp = timestamps_ms[index] if timestamps_ms is not None else now
            if partition is not None:
                target = partition
            elif key is None:
                value = values[index]
                target = sticky.partition(
                    RECORD_FRAMING_BYTES_MAX + (len(value) if value is not None else 0)
                )
            else:
                target = partition_for_key(key, num_partitions)
            batch, position = append(
                queues[target], state, timestamp, key, values[index], headers
            )
            if batch is run_batch and position == run_first + run_count:
                run_count += 1
                run_timestamps.append(timestamp)
            else:
                if run_batch is not None:
                    runs.append((run_batch, run_first, run_count, run_timestamps))
                run_batch, run_first, run_count, run_timestamps = batch, position, 1, [timestamp]
            if accumulator.unyielded_bytes >= YIELD_EVERY_BYTES:
                # Other tasks may append meanwhile: runs check that positions stay contiguous.
                await accumulator.yield_to_loop()
        if run_batch is not None:
            runs.append((run_batch, run_first, run_count, run_timestamps))
        return SendManyFuture(runs)

    def _check_partition(self, topic: str, partition: object, state: TopicState) -> None:
        wire.check_partition(partition)
        if partition >= state.num_partitions:  # type: ignore[operator]
            raise ValueError(
                f"partition {partition} does not exist: topic {topic!r} has "
                f"{state.num_partitions} partitions"
            )

    # --- transactions ----------------------------------------------------------------------------

    def _transactional_manager(self, call: str) -> TransactionManager:
        manager = self._manager
        if manager is None or not manager.is_transactional:
            raise TransactionStateError(
                f"{call} needs a transactional producer: create the Producer with "
                f"transactional_id=..."
            )
        if self._accumulator.closed:
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
        await self._sender.init_transactional_id()

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
            await self._sender.wait_for_partitions_added()
            if manager.transaction_started:
                await self._sender.end_transaction(commit=True)
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
            self._sender.drop_unsent(aborted)
            in_flight = [batch.future for batch in self._accumulator.pending]
            if in_flight:
                await asyncio.wait(in_flight)
            await self._sender.wait_for_partitions_added()
            manager.raise_if_fatal()
            if manager.transaction_started:
                await self._sender.end_transaction(commit=False)
            manager.clear_transaction()
            if manager.epoch_bump_required:
                # A batch of the transaction failed after its sequence was given: sequences
                # continue only under a new epoch (Kafka bumps it in InitProducerId, KIP-360).
                manager.begin_initializing()
                await self._sender.init_transactional_id()
            else:
                manager.transition(TransactionState.READY)

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
        group_metadata: GroupMetadata,
    ) -> None:
        """Commit a consumer group's ``offsets`` (the next offset to read, per partition) as
        part of the open transaction (Kafka's ``sendOffsetsToTransaction``, KIP-447): they
        become the group's committed offsets when the transaction commits, and are dropped if
        it aborts. ``group_metadata``: the consumer's ``group_metadata()``, so that the group's
        coordinator refuses a member of a past generation (a zombie).

        Raises:
            TransactionStateError: not transactional, or no transaction open.
            StratalogError: a retriable one after ``max_block_ms`` (call again); the
                coordinator's refusal (UnknownMemberIdError, IllegalGenerationError,
                FencedInstanceIdError, ...), after which the transaction must be aborted;
                ProducerFencedError (fatal).
        """
        manager = self._transactional_manager("send_offsets_to_transaction()")
        if not isinstance(group_metadata, GroupMetadata):
            raise TypeError("group_metadata must be a Consumer's group_metadata() value, got "
                            f"{group_metadata!r}")
        chosen = {}
        for tp, offset in offsets.items():
            topic, partition = tp
            wire.check_topic(topic)
            wire.check_partition(partition)
            chosen[TopicPartition(topic, partition)] = wire.check_int(
                offset, f"offset of {topic}-{partition}", 0, wire.INT64_MAX)
        async with self._txn_lock:
            manager.raise_if_fatal()
            if manager.state is TransactionState.ABORTABLE_ERROR and manager.last_error:
                raise manager.last_error.with_traceback(None)
            if manager.state is not TransactionState.IN_TRANSACTION:
                raise manager.wrong_state("send_offsets_to_transaction()")
            if chosen:
                await self._sender.send_offsets(chosen, group_metadata)

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
        pending = self._accumulator.begin_flush()
        if pending:
            # asyncio.wait, not gather: a cancelled flush must not cancel the batches.
            await asyncio.wait([batch.future for batch in pending])

    async def close(self, timeout_s: float | None = None) -> None:
        """Stop accepting records, flush (up to ``timeout_s``; then cancel what is left), and
        close the client if the Producer opened it. Idempotent. An open transaction is neither
        committed nor aborted: the server aborts it after ``transaction_timeout_ms`` (or the
        next producer with the same transactional id does, at once)."""
        accumulator = self._accumulator
        if accumulator.closed and not accumulator.pending:
            return
        accumulator.close()  # senders blocked on the buffer wake and raise ProducerClosedError
        try:
            if timeout_s is None:
                await self.flush()
            else:
                try:
                    await asyncio.wait_for(self.flush(), timeout_s)
                except TimeoutError:
                    logger.warning(
                        "Producer closed with %d batches undelivered after %s s",
                        len(accumulator.pending), timeout_s,
                    )
        finally:
            await self._sender.stop()
            accumulator.fail_incomplete_batches()
            await self._sender.close_client()
