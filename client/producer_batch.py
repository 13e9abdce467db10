"""One batch of the Producer and the futures of its records (Kafka's ``ProducerBatch`` and
``FutureRecordMetadata``).

A :class:`ProducerBatch` holds the records of one partition while they are encoded (its
:class:`~stratalog.records.BatchBuilder`), then the built bytes while they are sent, and one
asyncio future for the outcome of the whole batch: ``(base_offset, log_append_time)`` or the
delivery error. A record's future is a :class:`RecordFuture`, a tuple ``(batch, index,
timestamp)`` that reads its metadata from the batch's outcome (record ``i`` is at offset
``base_offset + i``), so no object per record is resolved; :class:`SendManyFuture` does the same
for runs of records. Event-loop only, like the Producer (:mod:`stratalog.client.producer`) that
creates and resolves them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator
from typing import Any

from stratalog.records import RECORD_BATCH_OVERHEAD, BatchBuilder

from .errors import TransactionAbortedError
from .types import RecordMetadata

__all__ = ["ProducerBatch", "RecordFuture", "SendManyFuture", "new_record_future"]

# The Producer's logger: an undelivered batch is the Producer's news, wherever the code lives.
logger = logging.getLogger("stratalog.client.producer")


class ProducerBatch:
    """One batch of one partition: its builder while open, its bytes once drained, its outcome.

    ``future`` resolves to ``(base_offset, log_append_time)`` or to the delivery error.
    ``deadline`` (loop time) is ``delivery_timeout_ms`` after the batch was opened; ``expiry``
    fails it then if it was never drained. With idempotence, ``producer_id``,
    ``producer_epoch`` and ``base_sequence`` are its stamp (set when drained, changed when its
    partition's sequences restart) and ``needs_resend`` says it waits to be sent again.
    """

    __slots__ = (
        "base_sequence",
        "builder",
        "count",
        "data",
        "deadline",
        "drained",
        "expiry",
        "future",
        "lingered",
        "needs_resend",
        "partition",
        "producer_epoch",
        "producer_id",
        "queue",
        "size_bytes",
        "timer",
        "topic",
    )

    def __init__(self, queue: Any, builder: BatchBuilder, loop: Any, deadline: float) -> None:
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
        self.deadline = deadline
        self.expiry: asyncio.TimerHandle | None = None
        self.drained = False
        self.needs_resend = False
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1

    def __repr__(self) -> str:
        return (
            f"<batch of {self.count} records to {self.topic}-{self.partition}, producer "
            f"{self.producer_id} epoch {self.producer_epoch} sequence {self.base_sequence}>"
        )


def _log_unretrieved(future: asyncio.Future[tuple[int, int]]) -> None:
    # Marks the exception retrieved (no "never retrieved" noise at garbage collection) and
    # makes sure a failure is visible to fire-and-forget callers (a batch dropped by an abort
    # the caller asked for is no news).
    if not future.cancelled():
        error = future.exception()
        if error is not None and not isinstance(error, TransactionAbortedError):
            logger.warning("record batch not delivered: %s", error)


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
new_record_future = tuple.__new__


class SendManyFuture:
    """The pending outcome of one ``send_many()``: awaiting it gives a list of RecordMetadata.

    Holds the (batch, first index, count, timestamps) runs that the records went into, in input
    order; builds the per-record metadata only when awaited or asked for.
    """

    __slots__ = ("_runs",)

    def __init__(self, runs: list[tuple[ProducerBatch, int, int, list[int]]]) -> None:
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
