"""Transaction markers on their way to the partitions' leaders: Kafka's
``TransactionMarkerChannelManager`` for a cluster's coordinators.

A coordinator decides a transaction's outcome when Prepare{Commit,Abort} is in its state
partition; from then on the outcome must reach every partition of the transaction, whatever
fails meanwhile. Each marker is queued for its partition and sent by that partition's sender
task::

    write(marker) ─► queue of (topic, partition) ─► sender: the head marker, sent with ``send``
                                                    ├─ written          -> next marker
                                                    ├─ partition gone   -> skipped (as Kafka)
                                                    ├─ producer at a newer epoch there ->
                                                    │    skipped: its transaction is over there
                                                    ├─ coordinator fenced -> dropped: a newer
                                                    │    coordinator of the producer owns it
                                                    └─ anything else    -> sent again after a
                                                         backoff (doubling up to a cap), for as
                                                         long as the channel is open

**In order per partition**: a partition's markers are sent one at a time, in the order they were
queued, and a marker that keeps failing holds the ones queued behind it: a later transaction's
marker never reaches a partition before an earlier one's (Kafka's per-broker queues drain in
order too; ``core/src/main/scala/kafka/coordinator/transaction/
TransactionMarkerChannelManager.scala``). Partitions are independent: one leader that is down
holds only its own partitions' queues.

**Retried until written**: the caller (a coordinator's thread, through :meth:`write`) waits for
its marker at most as long as it chose; when it stops waiting, the marker stays queued and is
still sent. The coordinator then answers CONCURRENT_TRANSACTIONS (or its maintenance pass
tries again), and a marker sent twice is harmless: markers are idempotent for the partition.

``send(marker)`` is the caller's (server/transaction_service/leader_calls.py: the leader found in
the cluster view, then a local write or a WriteTxnMarkers call); it raises to fail the attempt.

Limits: at most ``pending_max`` markers queued in all (beyond, :meth:`write` refuses with a
retriable error), each at most once (a marker queued again while it waits, as a coordinator's
maintenance pass does every pass for a partition whose leader is down, shares the queued one);
one sender task per partition with markers queued, none for the others.
Concurrency: event-loop only (:meth:`write_blocking` is the pool threads' entry).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from stratalog.server.storage.errors import (
    InvalidProducerEpochError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.transactions import CoordinatorNotAvailableError

__all__ = ["MARKERS_PENDING_MAX", "Marker", "TxnMarkerChannel"]

logger = logging.getLogger(__name__)

#: Most markers queued at once, all partitions together.
MARKERS_PENDING_MAX = 100_000
#: The first wait before a failed marker is sent again, and the cap the doubling stops at.
RETRY_BACKOFF_MS = 50
RETRY_BACKOFF_MAX_MS = 1_000


class Marker(NamedTuple):
    """One COMMIT (``commit``) or ABORT marker of a producer for one partition."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


class _Queued(NamedTuple):
    marker: Marker
    done: asyncio.Future[None]


class TxnMarkerChannel:
    """The queues of markers by partition, and their sender tasks (module docstring).

    Invariants: a partition has a sender task exactly while its queue is not empty (or the
    sender is finishing its last marker); ``_pending`` is the number of queued markers, and
    ``_queued`` holds exactly them (no marker is queued twice).
    """

    def __init__(
        self,
        send: Callable[[Marker], Awaitable[None]],
        *,
        pending_max: int = MARKERS_PENDING_MAX,
        backoff_ms: int = RETRY_BACKOFF_MS,
        backoff_max_ms: int = RETRY_BACKOFF_MAX_MS,
    ) -> None:
        assert pending_max > 0 and 0 < backoff_ms <= backoff_max_ms
        self._send = send
        self._pending_max = pending_max
        self._backoff_ms = backoff_ms
        self._backoff_max_ms = backoff_max_ms
        self._queues: dict[tuple[str, int], collections.deque[_Queued]] = {}
        self._senders: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._pending = 0
        #: Each queued marker's future: a marker queued again (a coordinator's retry, its
        #: maintenance pass) waits for the copy already queued instead of adding one.
        self._queued: dict[Marker, asyncio.Future[None]] = {}
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def pending(self) -> int:
        """Markers queued and not written yet."""
        return self._pending

    def enqueue(self, marker: Marker) -> asyncio.Future[None]:
        """Queue ``marker`` behind its partition's; the future is done once it was written
        (or skipped: the partition is gone), or fails with TransactionCoordinatorFencedError.

        Raises:
            CoordinatorNotAvailableError: ``pending_max`` markers are queued, or the channel is
                closed.
        """
        if self._closed:
            raise CoordinatorNotAvailableError("the server is stopping: markers are not sent")
        if marker not in self._queued and self._pending >= self._pending_max:
            raise CoordinatorNotAvailableError(
                f"{self._pending} transaction markers are queued for their partitions' leaders"
                " already: retry once they are written")
        queued = self._queued.get(marker)
        if queued is not None:
            return queued  # sent again before it was written: one copy in the queue
        loop = self._loop = asyncio.get_running_loop()
        key = (marker.topic, marker.partition)
        done: asyncio.Future[None] = loop.create_future()
        self._queued[marker] = done
        # Its caller may have stopped waiting: a failure nobody reads is not an asyncio warning.
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = collections.deque()
        queue.append(_Queued(marker, done))
        self._pending += 1
        if key not in self._senders:
            self._senders[key] = loop.create_task(
                self._drain(key, queue), name=f"stratalog-txn-markers-{key[0]}-{key[1]}")
        return done

    async def write(self, marker: Marker) -> None:
        """Queue ``marker`` and wait until it is written (or skipped). Cancelling the wait
        leaves it queued.

        Raises:
            TransactionCoordinatorFencedError: the partition has a newer coordinator epoch for
                the producer.
            CoordinatorNotAvailableError: as :meth:`enqueue`.
        """
        await asyncio.shield(self.enqueue(marker))

    def write_blocking(self, loop: asyncio.AbstractEventLoop, marker: Marker,
                       timeout_s: float) -> None:
        """:meth:`write` from a pool thread, waiting at most ``timeout_s`` (the marker stays
        queued after that).

        Raises:
            TimeoutError: not written within ``timeout_s``.
            what :meth:`write` raises.
        """
        future = asyncio.run_coroutine_threadsafe(self.write(marker), loop)
        try:
            future.result(timeout_s)
        except TimeoutError:
            # Not cancelled: the loop may not have queued the marker yet, and it must be.
            raise TimeoutError(
                f"the {'COMMIT' if marker.commit else 'ABORT'} marker of producer "
                f"{marker.producer_id} for {marker.topic}-{marker.partition} is not written"
                f" after {timeout_s:.1f} s: it is sent again until it is") from None

    async def _drain(self, key: tuple[str, int], queue: collections.deque[_Queued]) -> None:
        """The sender of one partition: its queue, head first, each marker until it is done."""
        try:
            while queue:
                queued = queue[0]
                await self._send_until_done(queued)
                queue.popleft()
                self._pending -= 1
                self._queued.pop(queued.marker, None)
        finally:
            self._senders.pop(key, None)
            if self._queues.get(key) is queue and not queue:
                del self._queues[key]

    async def _send_until_done(self, queued: _Queued) -> None:
        marker = queued.marker
        backoff_ms = self._backoff_ms
        attempts = 0
        while True:
            attempts += 1
            try:
                await self._send(marker)
            except asyncio.CancelledError:
                raise
            except UnknownTopicOrPartitionError:
                logger.warning("%s-%d no longer exists: the marker of producer %d is skipped",
                               marker.topic, marker.partition, marker.producer_id)
                _resolve(queued.done, None)
                return
            except InvalidProducerEpochError as exc:
                # The partition has the producer at a newer epoch: a later transaction (or a
                # fence's abort) ended this one there already.
                logger.info("%s-%d: the marker of producer %d at epoch %d is not needed: %s",
                            marker.topic, marker.partition, marker.producer_id,
                            marker.producer_epoch, exc)
                _resolve(queued.done, None)
                return
            except TransactionCoordinatorFencedError as exc:
                logger.warning("%s-%d: the marker of producer %d at coordinator epoch %d is"
                               " dropped: %s", marker.topic, marker.partition,
                               marker.producer_id, marker.coordinator_epoch, exc)
                _resolve(queued.done, exc)
                return
            except Exception as exc:
                if attempts == 1 or attempts % 20 == 0:
                    logger.info("%s-%d: the marker of producer %d is not written yet (attempt"
                                " %d, sent again in %d ms): %s", marker.topic,
                                marker.partition, marker.producer_id, attempts, backoff_ms,
                                exc)
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, self._backoff_max_ms)
                continue
            _resolve(queued.done, None)
            return

    async def close(self) -> None:
        """Stop sending: the senders are cancelled, every waiting caller fails (retriable);
        the markers not written are the next coordinator's to send (their transactions are
        still Prepare* in the state partition). Idempotent."""
        self._closed = True
        senders = list(self._senders.values())
        for task in senders:
            task.cancel()
        for task in senders:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for queue in self._queues.values():
            for queued in queue:
                _resolve(queued.done, CoordinatorNotAvailableError(
                    "the server is stopping: the marker was not written"))
        self._queues.clear()
        self._queued.clear()
        self._pending = 0


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
