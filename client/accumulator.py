"""The Producer's record accumulator: per partition, the batch being filled and the closed ones
waiting to be sent (Kafka's ``RecordAccumulator``).

Intuition: records are encoded as they arrive, straight into their partition's open batch (the
shared codec's :class:`~stratalog.records.BatchBuilder`), so a batch is ready to send the moment
it is closed. A batch is closed when the next record would take it past ``batch_bytes_max``, or
``linger_ms`` after its first record; it then waits in its partition's ``ready`` queue until the
:class:`~.sender.Sender` drains it. Batches are opened, closed and drained in ``send()`` order,
so a partition's records stay in order. Memory is bounded: every batch opened and not yet
resolved counts against ``buffer_bytes_max``, and appenders wait while it is full.

The contract with the Sender (``self.sender``, see :class:`Drainer`), Kafka's with the
difference that nothing polls: the accumulator tells the Sender when there is work.

* The accumulator calls ``sender.maybe_send(queue)`` when it closes a batch of ``queue``; the
  Sender takes batches out in order with :meth:`RecordAccumulator.next_ready` and
  :meth:`RecordAccumulator.drain` while the partition has a request slot. The Sender counts the
  partition's requests in ``queue.in_flight``.
* A batch whose linger ended is closed only if its partition has a free slot
  (``queue.in_flight < sender.max_in_flight``) and no closed batch waits; otherwise it keeps
  filling, and the Sender drains it as it is (``lingered``) when a slot frees. Batching so
  adapts to the server's speed.
* Without a linger time (``linger_ms=None``, the default) a batch's "linger" ends at the next
  turn of the event loop, and it is closed then only if its partition has *no* request in
  flight: a lone record goes out at once (one round trip, no wait), and while requests are
  out the records sent meanwhile gather in the open batch, which the Sender drains when the
  last of them answers (or which closes when full). Batches so form from the traffic itself, as
  Nagle's algorithm forms TCP segments, with no timer.
* A batch never drained by its deadline (``delivery_timeout_ms`` after it was opened): the
  accumulator calls ``sender.expire(batch)``. Once drained, the Sender enforces the deadline.
* With a transaction, opening a batch calls ``sender.maybe_add_partition(queue)``, so that the
  partition joins the transaction while the batch lingers.
* The Sender gives a batch's buffer space back with :meth:`RecordAccumulator.release` once the
  batch is resolved, and fails batches never drained with :meth:`RecordAccumulator.drop`.

The Producer inlines the common case of :meth:`RecordAccumulator.append` in ``send()`` (the
record fits the open batch: one call fewer per record), so that path reads and writes
``buffered_bytes``, ``unyielded_bytes`` and the batch directly; both keep the same accounting.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
from collections.abc import Sequence
from typing import Protocol

from stratalog.records import RECORD_BATCH_OVERHEAD, BatchBuilder, Compression, Header

from .partitioner import STINT_BYTES_MAX, StickyPartitioner
from .producer_batch import ProducerBatch
from .sequences import PartitionSequences
from .types import TopicPartition

__all__ = [
    "RECORD_FRAMING_BYTES_MAX",
    "YIELD_EVERY_BYTES",
    "Drainer",
    "PartitionQueue",
    "ProducerClosedError",
    "RecordAccumulator",
    "Run",
    "TopicState",
]

# The most a record's framing can add to its key, value and headers: length (5), attributes (1),
# timestamp delta (10), offset delta (5), key and value lengths (5 + 5), header count (5).
RECORD_FRAMING_BYTES_MAX = 36
# Per header: key length (5) and value length (5) varints.
_HEADER_FRAMING_BYTES_MAX = 10
#: Appenders let the event loop run after this many bytes of records (see yield_to_loop).
YIELD_EVERY_BYTES = 128 * 1024

#: Records of one batch at contiguous positions: (batch, first index, count, timestamps), the
#: unit of a :class:`~.producer_batch.SendManyFuture`.
Run = tuple[ProducerBatch, int, int, list[int]]


class ProducerClosedError(RuntimeError):
    """``send()`` after ``close()`` started; the error of records the Producer closed on."""


class PartitionQueue:
    """The batches of one partition: the open one, the closed ones waiting, the requests out.

    Invariant: batches leave ``ready`` in the order they were closed, and they are closed in the
    order they were opened, so a partition's batches are drained in ``send()`` order.
    ``current`` and ``ready`` are the accumulator's. The rest is the Sender's, which alone writes
    it: ``in_flight`` counts the drained batches not yet resolved (the request slots taken);
    with idempotence, ``sequences`` numbers the batches as they are drained and holds those
    unacknowledged, ``sending`` counts the Produce requests awaiting an answer,
    ``restart_pending`` says the sequences restart (under a new producer id) once none is, and
    ``waiter`` wakes the batches waiting for their turn to be resent.
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


class TopicState:
    """One topic as the Producer knows it: its partition count (asked once), its sticky
    partitioner, and a :class:`PartitionQueue` per partition."""

    __slots__ = ("num_partitions", "queues", "sticky")

    def __init__(
        self,
        topic: str,
        num_partitions: int,
        rng: random.Random,
        sequenced: bool,
        stint_bytes_max: int = STINT_BYTES_MAX,
    ) -> None:
        self.num_partitions = num_partitions
        self.sticky = StickyPartitioner(num_partitions, stint_bytes_max=stint_bytes_max, rng=rng)
        self.queues = [PartitionQueue(topic, p, sequenced) for p in range(num_partitions)]


class Drainer(Protocol):
    """What the accumulator asks of its Sender (:class:`~.sender.Sender` is the one)."""

    max_in_flight: int

    def maybe_send(self, queue: PartitionQueue) -> None:
        """A batch of ``queue`` was closed: drain what the free request slots allow."""

    def expire(self, batch: ProducerBatch) -> None:
        """``batch`` reached its delivery deadline before it was drained."""

    def maybe_add_partition(self, queue: PartitionQueue) -> None:
        """A batch was opened for ``queue`` in a transaction: add the partition if needed."""


class RecordAccumulator:
    """Per topic a :class:`TopicState`, per partition a :class:`PartitionQueue`; the buffer.

    Holds ``topics`` (the topics asked for so far), ``pending`` (every batch opened and not
    yet resolved, open, closed or in flight), ``buffered_bytes`` and the event that wakes
    appenders waiting for space, ``unyielded_bytes`` (appended since the appenders last let the
    event loop run), ``closed``, and the settings of new batches.

    Invariants: ``buffered_bytes`` = the sum of ``size_bytes`` over ``pending``, and a batch's
    ``size_bytes`` is at least its uncompressed size (each record counts its worst-case
    framing; the exact size is taken when the batch nears its limit). A batch is in at most one
    place: ``current`` or ``ready`` of its queue (until drained), then the Sender's.
    Crash behaviour: everything is in memory and lost with the process.
    Event-loop only, like the Producer that owns it; the linger and expiry timers run on the
    loop that opened the batch.
    """

    __slots__ = (
        "_compression",
        "_compression_level",
        "_delivery_timeout_s",
        "_linger_s",
        "_rng",
        "_sequenced",
        "_space",
        "batch_bytes_max",
        "buffer_bytes_max",
        "buffered_bytes",
        "closed",
        "pending",
        "sender",
        "topics",
        "transactional",
        "unyielded_bytes",
    )

    def __init__(
        self,
        *,
        batch_bytes_max: int,
        buffer_bytes_max: int,
        linger_ms: int | None,
        compression: Compression,
        compression_level: int | None,
        delivery_timeout_ms: int,
        sequenced: bool,
        transactional: bool,
        rng: random.Random,
    ) -> None:
        """Arguments are checked by the Producer. ``sequenced``: the Producer is idempotent
        (each queue keeps sequences); ``transactional``: batches are transactional."""
        self.batch_bytes_max = batch_bytes_max
        self.buffer_bytes_max = buffer_bytes_max
        # None: close a batch at the next loop turn when its partition is idle (see above).
        self._linger_s = None if linger_ms is None else linger_ms / 1000.0
        self._compression = compression
        self._compression_level = compression_level
        self._delivery_timeout_s = delivery_timeout_ms / 1000.0
        self._sequenced = sequenced
        self.transactional = transactional
        self._rng = rng
        # Set by the Sender that drains this accumulator (Sender.__init__).
        self.sender: Drainer = None  # type: ignore[assignment]
        self.topics: dict[str, TopicState] = {}
        self.pending: set[ProducerBatch] = set()
        self.buffered_bytes = 0
        self.unyielded_bytes = 0
        self._space = asyncio.Event()
        self.closed = False

    # --- topics ----------------------------------------------------------------------------------

    def add_topic(self, topic: str, num_partitions: int) -> TopicState:
        """Start accumulating for ``topic`` (its partition count just asked for)."""
        # A stint no longer than a batch (Kafka's stint is batch.size): a long run fills whole
        # batches, one partition at a time.
        state = self.topics[topic] = TopicState(
            topic, num_partitions, self._rng, self._sequenced, self.batch_bytes_max
        )
        return state

    def forget_topic(self, topic: str) -> None:
        """The topic went away: its partition count is asked for again on its next record."""
        self.topics.pop(topic, None)

    def all_queues(self) -> list[PartitionQueue]:
        """Every partition queue of every topic, a snapshot."""
        return [queue for state in list(self.topics.values()) for queue in state.queues]

    def queue_of(self, topic_partition: TopicPartition) -> PartitionQueue | None:
        state = self.topics.get(topic_partition.topic)
        if state is None or topic_partition.partition >= state.num_partitions:
            return None
        return state.queues[topic_partition.partition]

    # --- appending -------------------------------------------------------------------------------

    def append(
        self,
        queue: PartitionQueue,
        state: TopicState,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
    ) -> tuple[ProducerBatch, int]:
        """Encode one record into the open batch of ``queue``; close the batch first if the
        record would not fit. Returns the batch and the record's index in it.
        O(size of the record)."""
        estimate = RECORD_FRAMING_BYTES_MAX
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
        elif batch.size_bytes + estimate > self.batch_bytes_max:
            # size_bytes is an upper bound (each record adds its worst-case framing); only near
            # the limit is the exact size asked for, so the common path does no extra call.
            exact = RECORD_BATCH_OVERHEAD + batch.builder.uncompressed_records_bytes  # type: ignore[union-attr]
            self.buffered_bytes += exact - batch.size_bytes
            batch.size_bytes = exact
            if exact + estimate > self.batch_bytes_max:
                self.close_batch(queue, batch)
                batch = self._open_batch(queue)
        index = batch.builder.append(timestamp, key, value, headers)  # type: ignore[union-attr]
        batch.size_bytes += estimate
        self.buffered_bytes += estimate
        self.unyielded_bytes += estimate
        return batch, index

    async def append_values(
        self,
        state: TopicState,
        values: Sequence[bytes | None],
        partition: int | None,
        timestamp: int,
        runs: list[Run],
    ) -> None:
        """Append unkeyed records stamped ``timestamp`` to ``partition`` (``None``: the sticky
        partition), adding a run to ``runs`` per stretch: the placement of :meth:`append`
        record by record, with no Python call per record.

        Each stretch starts with one :meth:`append` (which opens or closes batches as needed)
        and then appends the following values straight to that batch with one
        ``append_values`` call (the codec's C loop) until it is full or a yield is due; a
        stretch is one run of contiguous positions, since nothing else runs before the next
        await.
        """
        limit = self.batch_bytes_max
        queues = state.queues
        sticky = state.sticky
        # The builder's append_values takes a list or tuple (checked there at C speed).
        items = values if isinstance(values, list | tuple) else list(values)
        count = len(items)
        index = 0
        while index < count:
            if partition is not None:
                target = partition
            else:
                value = items[index]
                target = sticky.partition(
                    RECORD_FRAMING_BYTES_MAX + (len(value) if value is not None else 0)
                )
            batch, first = self.append(queues[target], state, timestamp, None, items[index], ())
            index += 1
            # Then straight into that batch, stopping before the batch limit, the yield budget
            # or the end of the sticky partition's stint, whichever comes first (exact sizes:
            # the builder measures each record).
            room = min(limit - batch.size_bytes, YIELD_EVERY_BYTES - self.unyielded_bytes)
            if partition is None:
                room = min(room, sticky.stint_left_bytes)
            stop, added = batch.builder.append_values(  # type: ignore[union-attr]
                timestamp, items, index, max(room, 0)
            )
            if partition is None:
                sticky.spend(added)
            stretch = 1 + stop - index
            index = stop
            batch.size_bytes += added
            self.buffered_bytes += added
            self.unyielded_bytes += added
            runs.append((batch, first, stretch, [timestamp] * stretch))
            if self.unyielded_bytes >= YIELD_EVERY_BYTES:
                await self.yield_to_loop()

    async def yield_to_loop(self) -> None:
        """Let the event loop run (appenders call it once ``unyielded_bytes`` reaches
        :data:`YIELD_EVERY_BYTES`)."""
        # send() has nothing to wait for while there is buffer space, so a loop of sends would
        # never let the event loop run: no request would go out until the buffer filled up.
        # Letting it run every YIELD_EVERY_BYTES overlaps encoding with sending.
        self.unyielded_bytes = 0
        await asyncio.sleep(0)

    async def wait_for_space(self) -> None:
        """Wait until a batch gives its space back, or :meth:`close`; the caller checks the
        buffer (and ``closed``) again."""
        self._space.clear()
        await self._space.wait()

    # --- batches ---------------------------------------------------------------------------------

    def _open_batch(self, queue: PartitionQueue) -> ProducerBatch:
        loop = asyncio.get_running_loop()
        builder = BatchBuilder(
            compression=self._compression,
            compression_level=self._compression_level,
            is_transactional=self.transactional,
        )
        batch = ProducerBatch(queue, builder, loop, loop.time() + self._delivery_timeout_s)
        self.buffered_bytes += batch.size_bytes
        self.pending.add(batch)
        queue.current = batch
        if self._linger_s is None:
            batch.timer = loop.call_soon(  # type: ignore[assignment]
                self._on_linger, queue, batch, 1
            )
        elif self._linger_s > 0:
            batch.timer = loop.call_later(self._linger_s, self._on_linger, queue, batch)
        else:
            batch.timer = loop.call_soon(self._on_linger, queue, batch)  # type: ignore[assignment]
        # Kafka's delivery.timeout.ms counts from the batch's creation: a batch that cannot
        # even be sent (no producer id, its partition not yet in the transaction, a server
        # down) fails then too.
        batch.expiry = loop.call_at(batch.deadline, self.sender.expire, batch)
        if self.transactional:
            # As Kafka's send(): the partition joins the transaction with its first record, so
            # that AddPartitionsToTxn overlaps the batch's linger instead of delaying its send.
            self.sender.maybe_add_partition(queue)
        return batch

    def _on_linger(
        self, queue: PartitionQueue, batch: ProducerBatch, slots_max: int | None = None
    ) -> None:
        """The end of ``batch``'s linger: closed if its partition has fewer than ``slots_max``
        requests in flight (default: the Sender's limit; 1 without a linger time: idle)."""
        batch.timer = None
        if queue.current is not batch:
            return
        batch.lingered = True
        if slots_max is None:
            slots_max = self.sender.max_in_flight
        if queue.in_flight < slots_max and not queue.ready:
            self.close_batch(queue, batch)
        # Otherwise the batch keeps filling until a request slot frees (see Sender.maybe_send).

    def close_batch(self, queue: PartitionQueue, batch: ProducerBatch) -> None:
        """Move the open batch to ``ready`` (encoding is finished by build()) and tell the
        Sender."""
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
        if queue.current is batch:
            queue.current = None
        queue.ready.append(batch)
        self.unyielded_bytes = YIELD_EVERY_BYTES  # let the request start at the next send
        self.sender.maybe_send(queue)

    def begin_flush(self) -> list[ProducerBatch]:
        """Close every open batch (they go out as slots allow); returns every batch not yet
        resolved, for the caller to wait on."""
        pending = list(self.pending)
        for batch in pending:
            queue = batch.queue
            if queue.current is batch:
                self.close_batch(queue, batch)
        return pending

    # --- the Sender's side -----------------------------------------------------------------------

    def next_ready(self, queue: PartitionQueue) -> ProducerBatch | None:
        """The batch of ``queue`` to drain next, if any: the first closed one, else the open
        one once its linger is over (without a linger time: once no request of the partition
        is in flight, so that a stream of sends fills batches while any request is out)."""
        if queue.ready:
            return queue.ready[0]
        current = queue.current
        if current is not None and current.lingered and (
            self._linger_s is not None or queue.in_flight == 0
        ):
            return current
        return None

    def drain(self, queue: PartitionQueue, batch: ProducerBatch) -> None:
        """Hand ``batch`` (what :meth:`next_ready` gave) to the Sender: it leaves the queue,
        and its expiry timer stops (the Sender enforces the deadline from now on)."""
        if queue.ready and queue.ready[0] is batch:
            queue.ready.popleft()
        else:
            queue.current = None
        batch.drained = True
        if batch.expiry is not None:
            batch.expiry.cancel()
            batch.expiry = None

    def release(self, batch: ProducerBatch) -> None:
        """Give back the buffer space of a resolved batch."""
        if batch in self.pending:
            self.pending.discard(batch)
            self.buffered_bytes -= batch.size_bytes
            self._space.set()

    def drop(self, batch: ProducerBatch, error: BaseException) -> None:
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
        self.release(batch)

    def drop_unsent(self, error: BaseException) -> None:
        """Fail every batch not yet drained."""
        for queue in self.all_queues():
            for batch in [*queue.ready, *([queue.current] if queue.current else [])]:
                self.drop(batch, error)

    # --- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse further appends (the Producer checks ``closed``) and wake the appenders
        waiting for space, so that they see it."""
        self.closed = True
        self._space.set()

    def fail_incomplete_batches(self) -> None:
        """The Producer closed with batches unresolved (the Sender stopped): fail them all with
        :class:`ProducerClosedError` and stop their timers (Kafka's ``abortIncompleteBatches``).
        """
        error = ProducerClosedError("the Producer was closed")
        for batch in list(self.pending):
            for timer in (batch.timer, batch.expiry):
                if timer is not None:
                    timer.cancel()
            if not batch.future.done():
                batch.future.set_exception(error)
        self.pending.clear()
