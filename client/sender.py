"""The Producer's sending half: closed batches out as Produce requests, in order, each until it
is acknowledged or fails for good (Kafka's ``Sender``, with the requests of its
``TransactionManager``).

Intuition: the accumulator (:mod:`.accumulator`) fills batches and says when one is closed; the
Sender drains a partition's batches in order while the partition has a free request slot
(``max_in_flight_per_partition``), delivers each in a task of its own, and retries it until it
is acknowledged, fails for good, or reaches its delivery deadline. Every other request of the
Producer goes through it too: DescribeTopic, InitProducerId, AddPartitionsToTxn and EndTxn.

Delivery of one batch:

* Retriable errors are retried until ``delivery_timeout_ms`` after the batch was opened
  (``retries`` is unlimited by default, as Kafka's MAX_INT), with Kafka's exponential backoff:
  ``retry_backoff_ms * 2**(attempt - 1)``, at most ``retry_backoff_max_ms``, +-20% jitter. The
  batch then fails with :class:`~.errors.DeliveryTimeoutError`; one never drained (no producer
  id yet, its partition not yet in the transaction, earlier batches stuck) fails at the same
  deadline, saying why. The last backoff is cut at the deadline, so that a batch fails when
  its time is up, not a backoff early. A refusal that says when to try again
  (``retry_after_ms``: a throttled principal's Produce backlog is full) is not retried before.
  Before any batch, a topic's first send waits for the
  topic's partition count (DescribeTopic) the same way, until ``delivery_timeout_ms`` or
  ``max_block_ms``, whichever is shorter. A server down or not yet started is one more
  retriable error (UNAVAILABLE).
* With idempotence, the producer id and epoch come from the server (InitProducerId, on first
  use). A batch is drained only when it can be stamped (:meth:`Sender._may_stamp`, Kafka's
  ``shouldStopDrainBatchesForPartition``), and is then stamped with them and the next
  *sequence* of its partition (:mod:`.sequences`); its sequence is fixed from then on. A batch
  is resent with the same stamp, and only once every earlier batch of its partition is
  resolved, so the server stores it once and in order, and answers a resend of a batch it
  stored with the original offsets.
* A batch that fails for good (a non-retriable error, or the delivery timeout) leaves a gap in
  its partition's sequences: when the server reports it (OUT_OF_ORDER_SEQUENCE for the first
  unresolved batch, UNKNOWN_PRODUCER_ID), the Sender takes a new producer id and restarts the
  partition's sequences at 0 for the batches not yet acknowledged, rewriting their headers; at
  once if the server refused the first unresolved batch outright. Fenced (INVALID_PRODUCER_EPOCH,
  PRODUCER_FENCED) is fatal: every pending record fails with that error.
* In a transaction, a partition is added (AddPartitionsToTxn, one request for the partitions
  collected meanwhile) when its first batch is opened, and its batches are drained once that is
  acknowledged. A failed batch or AddPartitionsToTxn makes the transaction abortable: the
  batches not yet drained fail with :class:`~.errors.TransactionAbortedError`.

What each error means is decided by :mod:`.transaction_manager` (``produce_error_action``,
``coordinator_error_action``); the Sender carries it out.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from stratalog.records import set_producer_state

from .accumulator import PartitionQueue, ProducerClosedError, RecordAccumulator
from .client import Client
from .credentials import Credentials, TlsConfig
from .errors import (
    DeliveryTimeoutError,
    StratalogError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
)
from .producer_batch import ProducerBatch
from .transaction_manager import (
    ErrorAction,
    TransactionManager,
    TransactionState,
    coordinator_error_action,
    produce_error_action,
    unsupported_error,
)
from .types import TopicInfo, TopicPartition

__all__ = ["Sender"]

# The Producer's logger: what happens to its batches is the Producer's news, wherever the code
# lives (as in producer_batch.py).
logger = logging.getLogger("stratalog.client.producer")

# An attempt with less time than this left before its deadline could only time out (and its
# DEADLINE_EXCEEDED would hide the error worth reporting): the deadline is taken as reached.
_ATTEMPT_TIME_MIN_S = 0.001


class Sender:
    """Drains a :class:`~.accumulator.RecordAccumulator` into requests and delivers them.

    Holds the :class:`Client` (made from the target on first use, and then closed by
    :meth:`close_client`, if the Producer was given a target); the
    :class:`~.transaction_manager.TransactionManager` (``None`` without idempotence); the
    delivery settings; the tasks it runs (a delivery per drained batch, the InitProducerId of an
    idempotent producer, the AddPartitionsToTxn of a transaction); the last InitProducerId
    error (for the delivery timeout's message).

    Invariants: a partition has at most ``max_in_flight`` batches drained and unresolved
    (``queue.in_flight``); with idempotence its unresolved batches carry consecutive sequences
    of one producer id (``queue.sequences``), and only the first of them is sent again. Every
    drained batch is resolved once (its future set) and then released to the accumulator.
    Crash behaviour: nothing is persisted; a batch acknowledged by the server is stored, one in
    flight may or may not be. Event-loop only, like the Producer that owns it.
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        client: Client | str | Sequence[str],
        manager: TransactionManager | None,
        *,
        max_in_flight: int,
        retries: int | None,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        delivery_timeout_ms: int,
        request_timeout_s: float,
        max_block_ms: int,
        flush: bool,
        rng: random.Random,
        tls: TlsConfig | None = None,
        auth: Credentials | None = None,
        acks: int = -1,
    ) -> None:
        """Arguments are checked by the Producer. Registers as ``accumulator.sender``.
        ``tls`` and ``auth`` are for the Client made from a target string; ``acks`` goes on
        every Produce request."""
        self._accumulator = accumulator
        accumulator.sender = self
        # A target string becomes a Client on first use, inside the event loop that uses it.
        self._target = None if isinstance(client, Client) else client
        self._client: Client = client if isinstance(client, Client) else None  # type: ignore[assignment]
        self._tls, self._auth = tls, auth
        self._manager = manager
        self._transactional = manager is not None and manager.is_transactional
        self.max_in_flight = max_in_flight
        self._retries = retries
        self._retry_backoff_s = retry_backoff_ms / 1000.0
        self._retry_backoff_max_s = retry_backoff_max_ms / 1000.0
        self._delivery_timeout_s = delivery_timeout_ms / 1000.0
        self._request_timeout_s = request_timeout_s
        self._max_block_s = max_block_ms / 1000.0
        self._flush = flush
        self._acks = acks
        self._rng = rng
        self._tasks: set[asyncio.Task[Any]] = set()
        # The task asking for a producer id (idempotent), the task adding partitions to the
        # transaction, and the last error of the producer id request.
        self._init_task: asyncio.Task[None] | None = None
        self._add_task: asyncio.Task[None] | None = None
        self._producer_id_error: BaseException | None = None
        self._stopping = False  # stop() is cancelling the tasks: start no new ones
        # The throttle_time_ms of every Produce answer, summed (the Producer's property).
        self.throttle_time_ms_total = 0

    def client(self) -> Client:
        """The Client, made from the target on first use."""
        if self._client is None:
            self._client = Client(self._target, tls=self._tls, auth=self._auth)  # type: ignore[arg-type]
        return self._client

    async def describe_topic(self, topic: str) -> TopicInfo:
        """DescribeTopic through retriable errors (a server not yet up, restarting) until
        ``delivery_timeout_ms`` or ``max_block_ms``, whichever comes first: a record cannot be
        delivered later than its delivery timeout, so its topic's partition count is not worth
        waiting longer for (Kafka's send() waits ``max.block.ms`` for metadata alone).

        Raises:
            DeliveryTimeoutError: no answer in that time, naming the timeout that decided,
                the attempts and the last error (``last_error``).
            StratalogError: a non-retriable answer (UnknownTopicOrPartitionError, ...).
        """
        client = self.client()
        if self._delivery_timeout_s <= self._max_block_s:
            wait_s, setting = self._delivery_timeout_s, "delivery_timeout_ms"
        else:
            wait_s, setting = self._max_block_s, "max_block_ms"
        attempts = [0]

        def describe(timeout_s: float) -> Awaitable[TopicInfo]:
            attempts[0] += 1
            return client.describe_topic(topic, timeout_s=timeout_s)

        try:
            return await self._retrying(
                "DescribeTopic", describe, asyncio.get_running_loop().time() + wait_s
            )
        except StratalogError as err:
            if not err.retriable:
                raise
            raise DeliveryTimeoutError(
                f"topic {topic!r}: no answer to DescribeTopic from {client.target} within "
                f"{setting}={wait_s * 1000:.0f} ({attempts[0]} attempts; last error: {err})",
                attempts=attempts[0],
                last_error=err,
            ) from err

    # --- draining --------------------------------------------------------------------------------

    def maybe_send(self, queue: PartitionQueue) -> None:
        """Start requests for ``queue`` while it has free slots: closed batches first, in order,
        then the open batch if its linger time is over. With idempotence a batch is drained
        only when it can be stamped (:meth:`_may_stamp`); its sequence is fixed then."""
        accumulator = self._accumulator
        while queue.in_flight < self.max_in_flight:
            batch = accumulator.next_ready(queue)
            if batch is None:
                return
            if queue.sequences is not None and not self._may_stamp(queue):
                return
            accumulator.drain(queue, batch)
            if queue.sequences is not None:
                batch.count = batch.builder.records_count  # type: ignore[union-attr]
                producer = self._manager.producer  # type: ignore[union-attr]
                queue.sequences.stamp(batch, producer)  # type: ignore[arg-type]
            queue.in_flight += 1
            self._spawn(self._deliver(queue, batch))

    def _may_stamp(self, queue: PartitionQueue) -> bool:
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

    # --- delivering ------------------------------------------------------------------------------

    def _backoff_s(self, attempt: int) -> float:
        # Kafka's exponential backoff: base * 2^(attempt-1), capped, with +-20% jitter.
        delay = min(self._retry_backoff_max_s, self._retry_backoff_s * (2 ** min(attempt - 1, 62)))
        return delay * self._rng.uniform(0.8, 1.2)

    def _error_action(
        self, queue: PartitionQueue, batch: ProducerBatch, error: StratalogError
    ) -> ErrorAction:
        if queue.sequences is None:
            return ErrorAction.RETRY if error.retriable else ErrorAction.FAIL
        return produce_error_action(
            error, transactional=self._transactional, is_head=queue.sequences.is_head(batch)
        )

    async def _deliver(self, queue: PartitionQueue, batch: ProducerBatch) -> None:
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
                if remaining_s <= _ATTEMPT_TIME_MIN_S:
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
                        acks=self._acks,
                        timeout_s=min(self._request_timeout_s, remaining_s),
                        transactional_id=(self._manager.transactional_id
                                          if self._manager is not None else None),
                    )
                except StratalogError as err:
                    last_error = err
                else:
                    self.throttle_time_ms_total += result.throttle_time_ms
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
                    # The backoff is cut at the deadline (the loop's check then expires the
                    # batch): the error comes at delivery_timeout_ms, not a backoff early.
                    delay_s = self._backoff_s(attempts)
                    # Not before the server said (a throttled Produce backlog's retry_after_ms).
                    retry_after_ms = getattr(last_error, "retry_after_ms", None)
                    if retry_after_ms:
                        delay_s = max(delay_s, retry_after_ms / 1000)
                    delay_s = min(delay_s, batch.deadline - loop.time())
                    log = logger.warning if attempts == 1 else logger.info
                    log(
                        "retrying %r (attempt %d%s) in %.3f s after %s", batch, attempts,
                        "" if self._retries is None else f" of {self._retries + 1}",
                        max(delay_s, 0.0), last_error,
                    )
                    if delay_s > 0:
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
            self._accumulator.release(batch)
            if sequences is not None:
                sequences.resolve(batch)
                self._wake(queue)
                self._maybe_restart(queue)
            queue.in_flight -= 1
            if not self._stopping:
                self.maybe_send(queue)

    def _failed(
        self, queue: PartitionQueue, batch: ProducerBatch, error: BaseException, *, restart: bool
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
            self._accumulator.forget_topic(batch.topic)
            restart = False
        if sequences is None:
            return
        if self._transactional:
            self._abortable(error, sequence_gap=True)
        elif restart and was_head:
            self._request_restart(queue)

    def _expired(
        self,
        queue: PartitionQueue,
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

    def expire(self, batch: ProducerBatch) -> None:
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
        self._accumulator.drop(batch, error)
        if self._transactional:
            self._abortable(error)

    # --- sequences: resends in turn, restarts --------------------------------------------------

    async def _wait_for_turn(self, queue: PartitionQueue, batch: ProducerBatch) -> bool:
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

    def _wake(self, queue: PartitionQueue) -> None:
        """The partition's unresolved batches or sequences changed: waiters look again."""
        waiter, queue.waiter = queue.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _request_restart(self, queue: PartitionQueue) -> None:
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

    def _maybe_restart(self, queue: PartitionQueue) -> None:
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
            self.maybe_send(queue)

    # --- the producer id -------------------------------------------------------------------------

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
        client = self.client()
        try:
            producer = await self._retrying(
                "InitProducerId",
                lambda timeout_s: client.init_producer_id(timeout_s=timeout_s),
                None,
                lambda: bool(self._accumulator.pending),
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
        for queue in self._accumulator.all_queues():
            self._maybe_restart(queue)
            self.maybe_send(queue)

    async def init_transactional_id(self) -> None:
        """InitProducerId with the transactional id (state INITIALIZING) through retriable
        errors for up to ``max_block_ms``; then the last error is raised. A non-retriable one
        is fatal."""
        manager = self._manager
        assert manager is not None and manager.transactional_id is not None
        client = self.client()
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

    async def _retrying(
        self,
        what: str,
        call: Callable[[float], Awaitable[Any]],
        deadline: float | None,
        keep_going: Callable[[], bool] | None = None,
    ) -> Any:
        """``call(timeout_s)`` again after retriable errors, with backoff, until ``deadline``
        (loop time) or ``keep_going()`` is false; then the last error is raised. Each attempt
        gets ``request_timeout_s`` or what is left before the deadline, and the last backoff
        is cut at the deadline: the error comes when the deadline passes, not a backoff
        early."""
        loop = asyncio.get_running_loop()
        attempts = 0
        last_error: StratalogError | None = None
        while True:
            timeout_s = self._request_timeout_s
            if deadline is not None:
                remaining_s = deadline - loop.time()
                if remaining_s <= _ATTEMPT_TIME_MIN_S and last_error is not None:
                    raise last_error  # the backoff reached the deadline: no attempt left
                timeout_s = min(timeout_s, max(0.001, remaining_s))
            try:
                return await call(timeout_s)
            except StratalogError as err:
                if not err.retriable:
                    raise
                last_error = err
                if what == "InitProducerId":
                    self._producer_id_error = err
                attempts += 1
                delay_s = self._backoff_s(attempts)
                if deadline is not None:
                    remaining_s = deadline - loop.time()
                    if remaining_s <= 0:
                        raise
                    delay_s = min(delay_s, remaining_s)
                if keep_going is not None and not keep_going():
                    raise
                # The first failure is worth a warning (a server down shows at once in the
                # log, as Kafka's "could not be established" does); the retries are not.
                (logger.warning if attempts == 1 else logger.info)(
                    "%s failed (attempt %d), retrying in %.3f s: %s", what, attempts, delay_s,
                    err,
                )
                await asyncio.sleep(delay_s)

    # --- failures --------------------------------------------------------------------------------

    def drop_unsent(self, error: BaseException) -> None:
        """Fail every batch not yet drained (a transaction aborted or failed, or fenced): none
        of their partitions needs adding to the transaction any more."""
        self._accumulator.drop_unsent(error)
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
            self.drop_unsent(aborted)

    def _fail_fatal(self, error: BaseException) -> None:
        """Fenced, or a failure nothing can repair: every pending record fails with ``error``,
        and so does every later call but close()."""
        manager = self._manager
        assert manager is not None
        if manager.has_fatal_error:
            return
        logger.error("the Producer failed for good and must be closed: %s", error)
        manager.fatal_error(error)
        self.drop_unsent(error)
        for batch in list(self._accumulator.pending):
            if not batch.future.done():
                batch.future.set_exception(error)
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()

    # --- transactions: AddPartitionsToTxn and EndTxn -------------------------------------------

    def maybe_add_partition(self, queue: PartitionQueue) -> None:
        """A batch was opened for ``queue`` in a transaction: add its partition to the
        transaction if it is not yet in it (with the others collected meanwhile)."""
        manager = self._manager
        assert manager is not None
        if manager.needs_adding(queue.topic_partition):
            self._maybe_add_partitions()

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
        client = self.client()

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
                    queue = self._accumulator.queue_of(topic_partition)
                    if queue is not None:
                        self.maybe_send(queue)
        finally:
            self._add_task = None

    async def wait_for_partitions_added(self) -> None:
        """Wait for the AddPartitionsToTxn under way, if one is (it ends when none waits)."""
        if self._add_task is not None:
            await asyncio.wait([self._add_task])

    async def send_offsets(self, offsets: dict[TopicPartition, int], group: Any) -> None:
        """AddOffsetsToTxn (to the transaction coordinator), then TxnOffsetCommit (to the
        group's coordinator), each through retriable errors for up to ``max_block_ms`` (Kafka's
        ``sendOffsetsToTransaction``). A retriable error past it is raised (call again); the
        transaction's own errors make it abortable, fencing is fatal."""
        manager = self._manager
        assert manager is not None and manager.transactional_id is not None
        client = self.client()
        producer = manager.producer
        assert producer is not None
        transactional_id = manager.transactional_id
        deadline = asyncio.get_running_loop().time() + self._max_block_s
        manager.transaction_started = True  # the transaction is open on the server now
        try:
            await self._retrying(
                "AddOffsetsToTxn",
                lambda timeout_s: client.add_offsets_to_txn(
                    transactional_id, producer.producer_id, producer.producer_epoch,
                    group.group_id, timeout_s=timeout_s),
                deadline,
            )
            await self._retrying(
                "TxnOffsetCommit",
                lambda timeout_s: client.txn_offset_commit(
                    transactional_id, producer.producer_id, producer.producer_epoch, group,
                    offsets, timeout_s=timeout_s),
                deadline,
            )
        except StratalogError as err:
            if err.retriable:
                raise
            if coordinator_error_action(err, "AddPartitionsToTxn") is ErrorAction.FATAL:
                self._fail_fatal(err)
            else:
                self._abortable(err)
            raise

    async def end_transaction(self, *, commit: bool) -> None:
        """EndTxn through retriable errors for up to ``max_block_ms``; then the last error is
        raised. A non-retriable one is fatal, but for a commit the coordinator refused as
        abortable."""
        manager = self._manager
        assert manager is not None
        client = self.client()
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

    # --- closing ---------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Cancel every task (a batch being delivered fails with ProducerClosedError) and wait
        for them; start no new ones."""
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close_client(self) -> None:
        """Close the Client if the Sender made it from a target."""
        if self._target is not None and self._client is not None:
            await self._client.close()


def _restamped(data: bytes, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """``data`` (one batch) with a new producer id, epoch and base sequence, CRC rewritten."""
    buffer = bytearray(data)
    set_producer_state(buffer, 0, len(buffer), producer_id, producer_epoch, base_sequence)
    return bytes(buffer)
