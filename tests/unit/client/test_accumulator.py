"""The RecordAccumulator alone, with a recording stand-in for the Sender: the contract between
them (what the accumulator tells the Sender, and when) and the buffer accounting."""

from __future__ import annotations

import asyncio
import random

import pytest

from stratalog.client.accumulator import PartitionQueue, RecordAccumulator
from stratalog.client.producer_batch import ProducerBatch
from stratalog.records import Compression

TS = 1_700_000_000_000


class RecordingSender:
    """A :class:`~stratalog.client.accumulator.Drainer` that drains nothing, only records."""

    def __init__(self, max_in_flight: int = 1) -> None:
        self.max_in_flight = max_in_flight
        self.ready: list[PartitionQueue] = []
        self.expired: list[ProducerBatch] = []
        self.added: list[PartitionQueue] = []

    def maybe_send(self, queue: PartitionQueue) -> None:
        self.ready.append(queue)

    def expire(self, batch: ProducerBatch) -> None:
        self.expired.append(batch)

    def maybe_add_partition(self, queue: PartitionQueue) -> None:
        self.added.append(queue)


def accumulator(sender: RecordingSender, **settings: object) -> RecordAccumulator:
    options: dict[str, object] = {
        "batch_bytes_max": 1000,
        "buffer_bytes_max": 1 << 20,
        "linger_ms": 60_000,
        "compression": Compression.NONE,
        "compression_level": None,
        "delivery_timeout_ms": 120_000,
        "sequenced": False,
        "transactional": False,
        "rng": random.Random(1),
    }
    options.update(settings)
    result = RecordAccumulator(**options)  # type: ignore[arg-type]
    result.sender = sender
    return result


def check(acc: RecordAccumulator) -> None:
    """The accumulator's invariants: the buffer counts every unresolved batch, and a batch not
    drained is in exactly one place of its queue."""
    assert acc.buffered_bytes == sum(batch.size_bytes for batch in acc.pending)
    for queue in acc.all_queues():
        held = [*queue.ready, *([queue.current] if queue.current else [])]
        assert len(set(map(id, held))) == len(held)
        assert all(batch in acc.pending and not batch.drained for batch in held)


async def test_full_batches_are_closed_in_order_and_the_sender_told() -> None:
    sender = RecordingSender()
    acc = accumulator(sender)
    state = acc.add_topic("t", 2)
    queue = state.queues[0]
    positions = []
    for i in range(30):
        batch, index = acc.append(queue, state, TS + i, None, bytes(100), ())
        positions.append((batch, index))
        check(acc)
    batches = list(dict.fromkeys(batch for batch, _ in positions))
    assert len(batches) > 3
    # Each batch holds consecutive records from index 0, and stays under its limit.
    for batch in batches:
        indexes = [index for b, index in positions if b is batch]
        assert indexes == list(range(len(indexes)))
        assert batch.size_bytes <= 1000
    assert list(queue.ready) == batches[:-1] and queue.current is batches[-1]
    assert sender.ready == [queue] * (len(batches) - 1)
    # The Sender drains them in send() order; a resolved batch gives its space back.
    for expected in batches[:-1]:
        batch = acc.next_ready(queue)
        assert batch is expected
        acc.drain(queue, batch)
        assert batch.drained and batch.expiry is None
        batch.future.set_result((0, -1))
        acc.release(batch)
        check(acc)
    assert acc.next_ready(queue) is None  # the open batch is still lingering
    assert acc.buffered_bytes == batches[-1].size_bytes


async def test_a_lingered_batch_closes_only_with_a_free_slot() -> None:
    sender = RecordingSender(max_in_flight=1)
    acc = accumulator(sender, linger_ms=0)
    state = acc.add_topic("t", 1)
    queue = state.queues[0]
    queue.in_flight = 1  # the Sender's one slot is taken
    batch, _ = acc.append(queue, state, TS, None, b"x", ())
    await asyncio.sleep(0)
    assert batch.lingered and queue.current is batch and not sender.ready
    assert acc.append(queue, state, TS, None, b"y", ()) == (batch, 1)  # it keeps filling
    assert acc.next_ready(queue) is batch  # and is drained as it is once a slot frees
    acc.drain(queue, batch)
    assert queue.current is None
    queue.in_flight = 0
    later, _ = acc.append(queue, state, TS, None, b"z", ())
    await asyncio.sleep(0)
    assert list(queue.ready) == [later] and sender.ready == [queue]
    check(acc)


async def test_without_a_linger_time_a_batch_goes_when_its_partition_is_idle() -> None:
    sender = RecordingSender(max_in_flight=5)
    acc = accumulator(sender, linger_ms=None)
    state = acc.add_topic("t", 1)
    queue = state.queues[0]
    # Idle: the lone record's batch closes at the next loop turn, without a timer.
    first, _ = acc.append(queue, state, TS, None, b"x", ())
    await asyncio.sleep(0)
    assert list(queue.ready) == [first] and sender.ready == [queue]
    acc.drain(queue, first)
    queue.in_flight = 1
    # One request out (of 5 slots): what is sent meanwhile gathers in one open batch...
    second, _ = acc.append(queue, state, TS, None, b"y", ())
    await asyncio.sleep(0)
    assert acc.append(queue, state, TS, None, b"z", ()) == (second, 1)
    assert second.lingered and queue.current is second and sender.ready == [queue]
    assert acc.next_ready(queue) is None  # a free slot is not enough: a request is out
    # ...which the Sender drains as it is when the last request answers.
    queue.in_flight = 0
    assert acc.next_ready(queue) is second
    check(acc)


async def test_an_undrained_batch_expires_and_a_dropped_one_fails() -> None:
    sender = RecordingSender()
    acc = accumulator(sender, delivery_timeout_ms=10, transactional=True)
    state = acc.add_topic("t", 1)
    queue = state.queues[0]
    batch, _ = acc.append(queue, state, TS, None, b"x", ())
    assert sender.added == [queue]  # a transaction hears of the partition when a batch opens
    # The 10 ms delivery timeout's timer fires on the loop: bounded, not a fixed 50 ms.
    for _ in range(1000):
        if sender.expired:
            break
        await asyncio.sleep(0.005)
    assert sender.expired == [batch]
    acc.drop(batch, TimeoutError("expired"))
    with pytest.raises(TimeoutError):
        batch.future.result()
    assert queue.current is None and not acc.pending and acc.buffered_bytes == 0
    check(acc)


async def test_append_values_places_records_as_append_would() -> None:
    sender = RecordingSender()
    acc = accumulator(sender)
    state = acc.add_topic("t", 1)
    runs: list = []
    values = [bytes(50)] * 100
    await acc.append_values(state, values, 0, TS, runs)
    assert sum(count for _, _, count, _ in runs) == 100
    for batch, first, count, timestamps in runs:
        assert timestamps == [TS] * count
        assert first + count <= batch.builder.records_count  # type: ignore[union-attr]
        assert batch.size_bytes <= 1000
    check(acc)
    pending = acc.begin_flush()
    assert set(pending) == acc.pending and state.queues[0].current is None
    check(acc)
