"""The I/O around one ``__consumer_offsets`` partition's group coordinator: its requests, its
writes, its timer and its load.

Kafka's ``coordinator-common/src/main/java/org/apache/kafka/coordinator/common/runtime/
CoordinatorRuntime.java`` (one ``CoordinatorContext`` per partition, its events run one at a
time) with ``core/src/main/scala/kafka/coordinator/group/CoordinatorPartitionWriter.scala`` (the
writes through the ReplicaManager), for the sans-IO core :class:`~stratalog.server.groups.
GroupCoordinator` (docs/groups.md, "Driving it")::

    request ─► submit(call) ─► core call (on the loop, never interleaved) ─► carry out Output
                  │                                                            │
                  └─ a future per request, resolved by the core's Reply ◄──────┤ replies
                                                                               │ appends
    writer task: one Append at a time, in issue order ─► ReplicaManager.append_records
                 (acks=all, one batch) ─► core.append_completed / append_failed ─► carry out
    one timer at Output.next_deadline_ms ─► core.poll ─► carry out

**Serialisation.** Every call into the core is synchronous and made on the event loop, so no two
calls interleave: the loop is the per-partition serialiser Kafka's runtime builds with its event
queue. The only waits are the writes, which the writer task makes in issue order (the core
needs them reported in that order) from a FIFO queue; the queue holds at most the appends of
requests in flight, each bounded by the waiting-RPC and request limits of the front end.

**Loading** (:meth:`load`): the core starts ``loading`` (every request answered
COORDINATOR_LOAD_IN_PROGRESS by the core itself); the partition is read from its log start to
its high watermark in chunks of :data:`LOAD_READ_BYTES`, each decoded in the thread pool
(:func:`~.offsets_topic.replay_items`) and applied on the loop, then ``complete_load``. A record
that does not decode is skipped with a log line naming its offset. A load that fails (the log
is damaged beyond recovery) leaves the coordinator loading: every request keeps answering
COORDINATOR_LOAD_IN_PROGRESS, and the error is logged; the next start tries again.

**Unloading** (:meth:`unload`): the core answers every parked JoinGroup and SyncGroup
NOT_COORDINATOR and fails the writes in flight (their requests too); the timer and the writer
task stop.

Crash behaviour: nothing here outlives the process; a request is answered only after its write
(acks=all), so a crash loses nothing acknowledged, and the next start loads it.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from stratalog.records.batch import NO_PRODUCER_ID, NO_SEQUENCE, increment_sequence
from stratalog.records.batch_walk import iter_batch_headers
from stratalog.server.broker.replica_manager import ACKS_ALL
from stratalog.server.cluster import errors as cluster_errors
from stratalog.server.groups import (
    Append,
    CoordinatorNotAvailableError,
    GroupConfig,
    GroupCoordinator,
    GroupError,
    JoinGroupResponse,
    NotCoordinatorError,
    OffsetCommitResponse,
    Output,
    UnknownServerError,
)
from stratalog.server.storage import errors as storage_errors
from stratalog.server.storage.clock import wall_clock_ms

from .offsets_topic import GROUP_METADATA_TOPIC, ReplayItem, append_batch, replay_items

if TYPE_CHECKING:
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.storage.partition_log import PartitionLog

__all__ = ["LOAD_READ_BYTES", "PartitionCoordinator"]

logger = logging.getLogger(__name__)

#: Bytes of __consumer_offsets read (and decoded in the pool) per step of a load.
LOAD_READ_BYTES = 1024 * 1024

#: A core call: given the reply token and the time, what it asks of us.
CoreCall = Callable[[int, int], Output]


class PartitionCoordinator:
    """One ``__consumer_offsets`` partition's coordinator and the I/O it asks for.

    Holds the core, the futures of the requests it has not answered yet (by reply token), the
    queue of its writes and the task that makes them, and its timer. Invariants: every future
    in ``_waiting`` belongs to a request the core has not answered; the writer reports appends
    in the order the core issued them.
    """

    def __init__(
        self,
        partition: int,
        config: GroupConfig,
        replica_manager: ReplicaManager,
        executor: Executor,
        *,
        metrics: ServerMetrics | None = None,
        time_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """``metrics`` counts rebalances, commits and the load's time (None: nothing)."""
        self.partition = partition
        self.name = f"{GROUP_METADATA_TOPIC}-{partition}"
        self._replicas = replica_manager
        self._executor = executor
        self._time_ms = time_ms
        self._metrics = metrics
        self.core = GroupCoordinator(config, loading=True, now_ms=time_ms())
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._next_token = 0
        self._writes: asyncio.Queue[Append] = asyncio.Queue()
        self._writer = asyncio.get_running_loop().create_task(
            self._write_appends(), name=f"stratalog-group-writer-{partition}"
        )
        self._timer: asyncio.TimerHandle | None = None
        #: Seconds the last load took (None: not loaded yet).
        self.load_seconds: float | None = None

    # ---------------------------------------------------------------- requests

    async def submit(self, call: CoreCall) -> Any:
        """Make ``call`` on the core with a fresh reply token and wait for its response (a
        JoinGroup or SyncGroup may wait for a rebalance). Cancelled (the client went away): the
        core's later answer is dropped."""
        token = self._next_token
        self._next_token += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        try:
            self._carry_out(call(token, self._time_ms()))
            return await future
        finally:
            # Answered or cancelled: either way nobody waits on this token any more.
            self._waiting.pop(token, None)

    def _carry_out(self, out: Output) -> None:
        """Do what one core call asked, in docs/groups.md's order: queue the writes, answer
        the replies, re-arm the timer."""
        for append in out.appends:
            self._writes.put_nowait(append)
        for reply in out.replies:
            future = self._waiting.pop(reply.reply_to, None)  # type: ignore[call-overload]
            if future is not None and not future.done():
                future.set_result(reply.response)
            if self._metrics is not None:
                self._count(reply.response)
        self._arm_timer(out.next_deadline_ms)

    def _count(self, response: object) -> None:
        """The metrics of one answer: a generation handed to its leader is one rebalance
        completed (a static leader's rejoin without one is not); committed partitions."""
        assert self._metrics is not None
        if type(response) is JoinGroupResponse:
            if (response.error is None and response.member_id == response.leader_id
                    and not response.skip_assignment):
                self._metrics.observe_rebalance()
        elif type(response) is OffsetCommitResponse:
            committed = sum(1 for p in response.partitions if p.error is None)
            if committed:
                self._metrics.observe_offset_commits(committed)

    def _arm_timer(self, deadline_ms: int | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline_ms is None or self.core.closed:
            return
        delay_s = max(0.0, (deadline_ms - self._time_ms()) / 1000)
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._fire_timer)

    def _fire_timer(self) -> None:
        self._timer = None
        if not self.core.closed:
            self._carry_out(self.core.poll(self._time_ms()))

    # ---------------------------------------------------------------- writes

    async def _write_appends(self) -> None:
        """The writer task: each Append as one batch, acks=all, in issue order; then the
        core is told (module docstring)."""
        while True:
            append = await self._writes.get()
            try:
                batch = append_batch(append, self._time_ms(), self._base_sequence(append))
                info = await self._replicas.append_records(
                    GROUP_METADATA_TOPIC, self.partition, ACKS_ALL, batch,
                    size_bytes=len(batch), compressed=False, internal_topics_allowed=True,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = _write_error(exc, self.name)
                if not self.core.closed:
                    self._carry_out(self.core.append_failed(append.append_id, error,
                                                            self._time_ms()))
                continue
            if not self.core.closed:
                self._carry_out(self.core.append_completed(append.append_id, info.first_offset,
                                                           self._time_ms()))

    def _base_sequence(self, append: Append) -> int:
        """A transactional append's base sequence: the producer's next one in this partition
        (0 for a producer or epoch new here). Only this writer writes the partition's data, so
        the producer state read here is the one the append meets."""
        if append.producer_id == NO_PRODUCER_ID:
            return NO_SEQUENCE
        partition_log = self._replicas.log_manager.get_log(GROUP_METADATA_TOPIC, self.partition)
        entry = partition_log.producer_state.last_entry(append.producer_id)
        if entry is None or entry.producer_epoch != append.producer_epoch:
            return 0
        return increment_sequence(entry.last_seq, 1)

    def end_transaction(self, producer_id: int, committed: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id`` was written to this partition: its
        transactional offsets become committed, or are dropped."""
        if not self.core.closed:
            self.core.replay_end_transaction(producer_id, committed)

    # ---------------------------------------------------------------- loading

    async def load(self) -> None:
        """Replay the partition from its log start to its high watermark, then serve
        (module docstring). Never raises but for cancellation: a failure is logged and the
        coordinator stays loading."""
        started = time.perf_counter()
        # The process's CPU time too (every thread: the reads and decoding run in the pool):
        # on a busy machine the wall time says more about the machine than about the load.
        cpu_started = time.process_time()
        try:
            records = await self._replay()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s: the group coordinator could not load its partition; its"
                             " groups answer COORDINATOR_LOAD_IN_PROGRESS until a restart",
                             self.name)
            return
        if self.core.closed:
            return
        self._carry_out(self.core.complete_load(self._time_ms()))
        self.load_seconds = time.perf_counter() - started
        if self._metrics is not None:
            self._metrics.observe_group_load(self.load_seconds)
        logger.info("%s: loaded %d records, %d groups in %.3f s (process CPU %.3f s)",
                    self.name, records, len(self.core.groups), self.load_seconds,
                    time.process_time() - cpu_started)

    async def _replay(self) -> int:
        """Apply every record of the partition below its high watermark; the count."""
        partition_log = self._replicas.log_manager.get_log(GROUP_METADATA_TOPIC, self.partition)
        offset = partition_log.log_start_offset
        end = partition_log.high_watermark
        loop = asyncio.get_running_loop()
        applied = 0
        # One (topic, partition) tuple for all the groups' offsets of a partition: bounded by
        # the partitions the load stores offsets of, dropped with the load.
        partitions: dict[tuple[str, int], tuple[str, int]] = {}
        while offset < end and not self.core.closed:
            items: list[ReplayItem]
            items, next_offset = await loop.run_in_executor(
                self._executor, _read_items, partition_log, offset, end, partitions,
                self.name)
            now_ms = self._time_ms()
            for item in items:
                if item.offset >= end:
                    break
                if item.rows is not None:
                    self.core.replay_offset_commits(item.rows, item.producer_id, now_ms)
                    applied += len(item.rows)
                elif item.record is None:
                    self.core.replay_end_transaction(item.producer_id, item.committed)
                else:
                    self.core.replay(item.offset, item.record, item.producer_id, now_ms)
                    applied += 1
            if next_offset <= offset:  # nothing whole left below the end (cannot happen)
                break
            offset = next_offset
        return applied

    # ---------------------------------------------------------------- the end

    def unload(self) -> None:
        """Answer parked requests NOT_COORDINATOR, stop the timer (module docstring)."""
        if self.core.closed:
            return
        self._carry_out(self.core.unload(self._time_ms()))
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(NotCoordinatorError(
                    f"the coordinator of {self.name} stopped"))

    async def close(self) -> None:
        """:meth:`unload`, then stop the writer task (a write under way is cancelled: its
        request was already answered NOT_COORDINATOR)."""
        self.unload()
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer


def _read_items(
    partition_log: PartitionLog, offset: int, end: int,
    partitions: dict[tuple[str, int], tuple[str, int]], name: str,
) -> tuple[list[ReplayItem], int]:
    """Blocking: the replay items of the batches from ``offset`` (at most about
    :data:`LOAD_READ_BYTES`, at least one batch), below ``end``, and the offset after the last
    batch read. ``partitions``: the load's memo (:func:`replay_items`); one read at a time
    uses it."""
    data = partition_log.read(offset, LOAD_READ_BYTES)
    items = list(replay_items(data, name, end, partitions))
    next_offset = offset
    for header in iter_batch_headers(data, partial_tail_ok=True):
        next_offset = header.base_offset + header.last_offset_delta + 1
    return items, next_offset


def _write_error(exc: Exception, name: str) -> GroupError:
    """What a failed write to ``__consumer_offsets`` answers its requests with, as Kafka's
    coordinator maps append errors (``CoordinatorRuntime``'s append callback): the partition is
    not led or not writable here (NOT_COORDINATOR: find the coordinator again), the topic or
    log is gone or the replicas are short (COORDINATOR_NOT_AVAILABLE: retry), or anything else
    (UNKNOWN_SERVER_ERROR, logged)."""
    if isinstance(exc, cluster_errors.NotLeaderOrFollowerError | storage_errors.StorageIOError
                  | storage_errors.LogDirOfflineError):
        logger.warning("%s: write failed, answering NOT_COORDINATOR: %s", name, exc)
        return NotCoordinatorError(f"{name} could not be written here: retry")
    if isinstance(exc, storage_errors.UnknownTopicOrPartitionError | storage_errors.LogClosedError
                  | cluster_errors.NotEnoughReplicasError
                  | cluster_errors.ReplicationTimeoutError):
        logger.warning("%s: write failed, answering COORDINATOR_NOT_AVAILABLE: %s", name, exc)
        return CoordinatorNotAvailableError(f"{name} is not writable now: retry")
    logger.error("%s: write failed unexpectedly", name, exc_info=exc)
    return UnknownServerError(f"the write to {name} failed")
