"""The marker channel (server/transaction_service/marker_channel.py): markers reach each
partition in the order they were queued, each retried until written, partitions independent."""

from __future__ import annotations

import asyncio
import threading

import pytest

from stratalog.server.storage.errors import (
    InvalidProducerEpochError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.transaction_service.marker_channel import Marker, TxnMarkerChannel
from stratalog.server.transactions import CoordinatorNotAvailableError


def marker(partition: int, producer_id: int, commit: bool = True, topic: str = "t") -> Marker:
    return Marker(topic, partition, producer_id, 0, 5, commit)


class Leaders:
    """The partitions' leaders as the channel sees them: each marker fails as often as
    ``failures`` says (with ``error``), then is written; ``written`` is the order of writes."""

    def __init__(self) -> None:
        self.failures: dict[Marker, int] = {}
        self.errors: dict[Marker, Exception] = {}
        self.attempts: list[Marker] = []
        self.written: list[Marker] = []
        self.gate: dict[Marker, asyncio.Event] = {}

    async def send(self, m: Marker) -> None:
        self.attempts.append(m)
        if m in self.gate:
            await self.gate[m].wait()
        if m in self.errors:
            raise self.errors[m]
        left = self.failures.get(m, 0)
        if left:
            self.failures[m] = left - 1
            raise ConnectionError(f"leader of {m.topic}-{m.partition} is down")
        self.written.append(m)


def channel(leaders: Leaders, **kwargs: int) -> TxnMarkerChannel:
    return TxnMarkerChannel(leaders.send, backoff_ms=1, backoff_max_ms=4, **kwargs)


async def test_a_partitions_markers_are_written_in_order_each_retried_until_written() -> None:
    leaders = Leaders()
    first, second, third = marker(0, 1), marker(0, 2, commit=False), marker(0, 3)
    leaders.failures = {first: 5, second: 2}
    markers = channel(leaders)
    futures = [markers.enqueue(m) for m in (first, second, third)]
    await asyncio.gather(*futures)
    assert leaders.written == [first, second, third]
    # The second was never tried while the first kept failing: in order, one at a time.
    assert leaders.attempts == [first] * 6 + [second] * 3 + [third]
    assert markers.pending == 0


async def test_partitions_are_independent() -> None:
    leaders = Leaders()
    stuck, other = marker(0, 1), marker(1, 2)
    leaders.gate[stuck] = asyncio.Event()
    markers = channel(leaders)
    stuck_done = markers.enqueue(stuck)
    await markers.write(other)  # not held behind partition 0's marker
    assert leaders.written == [other] and not stuck_done.done()
    leaders.gate[stuck].set()
    await stuck_done
    assert leaders.written == [other, stuck]


async def test_a_gone_partition_is_skipped_and_a_fenced_marker_dropped() -> None:
    leaders = Leaders()
    gone, fenced, over, after = marker(0, 1), marker(0, 2), marker(0, 4), marker(0, 3)
    leaders.errors = {gone: UnknownTopicOrPartitionError("t-0 is gone"),
                      fenced: TransactionCoordinatorFencedError("newer coordinator",
                                                                producer_id=2),
                      over: InvalidProducerEpochError("producer 4 is at a newer epoch",
                                                      producer_id=4)}
    markers = channel(leaders)
    gone_done, fenced_done = markers.enqueue(gone), markers.enqueue(fenced)
    over_done = markers.enqueue(over)
    await markers.write(after)
    assert await gone_done is None
    assert await over_done is None  # its transaction is over at the partition
    with pytest.raises(TransactionCoordinatorFencedError):
        await fenced_done
    assert leaders.written == [after]


async def test_a_caller_that_stops_waiting_leaves_its_marker_queued() -> None:
    leaders = Leaders()
    slow = marker(0, 1)
    leaders.gate[slow] = asyncio.Event()  # its leader does not answer until told to
    markers = channel(leaders)
    loop = asyncio.get_running_loop()
    outcome: list[BaseException] = []

    def coordinator_thread() -> None:
        try:
            markers.write_blocking(loop, slow, 0.001)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=coordinator_thread)
    thread.start()
    while thread.is_alive():
        await asyncio.sleep(0.001)
    assert len(outcome) == 1 and isinstance(outcome[0], TimeoutError)
    assert "sent again until it is" in str(outcome[0])
    # The caller stopped waiting, maybe before the loop took the marker: it is queued anyway.
    for _ in range(1000):
        if markers.pending:
            break
        await asyncio.sleep(0)
    assert markers.pending == 1
    # Written all the same, once its leader answers: the same marker sent again (the
    # coordinator's retry) waits for the queued copy, and is written once.
    again = markers.enqueue(marker(0, 1))
    leaders.gate[slow].set()
    await again
    assert leaders.written == [slow]
    assert markers.pending == 0


async def test_a_marker_queued_again_is_queued_once() -> None:
    leaders = Leaders()
    held, behind = marker(0, 1), marker(0, 2)
    leaders.gate[held] = asyncio.Event()
    markers = channel(leaders, pending_max=2)
    first, second = markers.enqueue(held), markers.enqueue(behind)
    # Full, but a copy of a queued marker is not a new one: no refusal, the same future.
    assert markers.enqueue(held) is first and markers.enqueue(behind) is second
    leaders.gate[held].set()
    await asyncio.gather(first, second)
    assert leaders.written == [held, behind]
    await markers.write(held)  # written already: queued anew, sent again (idempotent)
    assert leaders.written == [held, behind, held]


async def test_pending_markers_are_bounded_and_close_fails_their_callers() -> None:
    leaders = Leaders()
    held = marker(0, 1)
    leaders.gate[held] = asyncio.Event()
    markers = channel(leaders, pending_max=2)
    first, second = markers.enqueue(held), markers.enqueue(marker(1, 2))
    with pytest.raises(CoordinatorNotAvailableError, match="queued"):
        markers.enqueue(marker(2, 3))
    await second
    markers.enqueue(marker(2, 3))  # room again
    await markers.close()
    assert first.done() and isinstance(first.exception(), CoordinatorNotAvailableError)
    with pytest.raises(CoordinatorNotAvailableError, match="stopping"):
        markers.enqueue(marker(0, 9))
