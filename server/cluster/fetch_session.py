"""The leader's side of a follower's fetch session: every partition one follower fetches from
this server, remembered between its requests.

Kafka's ``FetchSession`` (``core/src/main/scala/kafka/server/FetchSession.scala``, KIP-227) and
the follower half of ``ReplicaManager.fetchMessages`` / ``Partition.fetchRecords``. A session
lives as long as its ReplicaFetchSession stream (replication.proto); the servicer
(server/rpc/replication_service.py) translates its requests into :meth:`FetchSession.update`
and :meth:`FetchSession.answer` calls and the results back into answers.

* **What is remembered.** Per partition: the follower's leader epoch, last fetched epoch, log
  start and log end offsets as last sent; the *cursor*, where the next read starts; and the
  high watermark and log start offset last answered. A request carries only the partitions
  added or changed and those forgotten; the others keep their last values.
* **The cursor** is the fetch offset the follower sent (a partition new in the session, or a
  follower resynchronising: its log end offset), then the end of each answer's records: the
  follower appends the answers in order, so its next request may go before it appended the
  previous answer (pipelining), with ``fetch_offset`` = CONTINUE. A follower whose log is not
  where an answer starts sends its log end again. The follower's log is checked at its last
  fetched epoch (KIP-320) only where it sent an offset: from there the cursor follows the
  leader's own log.
* **Each request is the follower's progress for every partition of the session**, sent or not
  (Kafka expands an incremental request to the session's partitions the same way): the
  leader records each ``log_end_offset``, what the follower appended, never the cursor
  (``Replica.record_follower_fetch``: the high watermark may rise, acks=all producers
  complete) and may add the follower to the ISR. An idle partition's follower thus stays
  caught up without being named.
* **An answer** (:meth:`FetchSession.answer`) holds, per partition, in this order of checks
  (issue 17's, now per partition)::

      this server leads it under its lease              else NOT_LEADER_OR_FOLLOWER
      the follower's epoch == the leader's              older: FENCED_LEADER_EPOCH,
                                                        newer: UNKNOWN_LEADER_EPOCH
      the follower is an assigned replica, not this one else NOT_LEADER_OR_FOLLOWER
      (the follower sent a fetch offset:) its log       else diverging_epoch (no records;
        agrees at last_fetched_epoch there              its progress not recorded)
      log start <= cursor <= log end                    else OFFSET_OUT_OF_RANGE
      records past the cursor                           up to max_bytes, and response_max_bytes
                                                        over the answer; the cursor moves
                                                        past them
      else: only if just added, or its high watermark or log start moved since last answered,
            and only in an answer that goes anyway (records, an error, the wait's end)

  When no partition has anything, it waits for an append to any of them (Replica's append
  listeners: the leader's delayed-fetch wake-up, nothing polls), a change of their role, or
  :meth:`FetchSession.interrupt` (the follower wrote its next request), at most
  ``max_wait_ms``. Partitions that got records move to the end of the session's order, so
  that a partition with much to send cannot starve the others under ``response_max_bytes``
  (Kafka's round-robin of a session's partitions).

* **The leader's reassignment throttle** (Kafka's ``leader.replication.throttled.rate``;
  ``ReplicaManager.readFromLog`` leaves a throttled partition out of a follower's answer while
  the quota is exceeded): a partition whose follower a reassignment is adding is read only
  while the server's leader bucket (``ReplicaRoles.leader_throttle``,
  ``replica_reassignment_throttled_rate``; replication_throttle.py) owes nothing, and the bytes
  sent are paid into it. Meanwhile it is left out of the answer, not listened to, and the wait
  ends when the debt is paid (or at ``max_wait_ms``), so that the follower asks again then.
  The in-sync followers are never throttled.

Limits: at most :data:`SESSION_PARTITIONS_MAX` partitions per session; one answer holds at most
``response_max_bytes`` of batches (a partition's first batch whole even when larger).

Crash behaviour: nothing here is durable; a follower that reconnects starts a new session with
a full request.

Concurrency: event-loop only; reads go to the executor, one call per answer, unless they are
small (below ``read_in_executor_min_bytes`` in all: then on the loop, as the serving layer
reads consumers' small fetches).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stratalog.server.storage.errors import OffsetOutOfRangeError

from .divergence import DivergingEpoch, diverging_epoch
from .errors import FencedLeaderEpochError, NotLeaderOrFollowerError, UnknownLeaderEpochError

if TYPE_CHECKING:
    from .replica import Replica
    from .replica_roles import ReplicaRoles

__all__ = ["SESSION_PARTITIONS_MAX", "FetchSession", "PartitionFetch", "PartitionResult",
           "SessionLimitError"]

#: The most partitions one follower's session may hold (a cluster's partitions per server pair
#: stay far below it; it bounds what one stream makes the leader remember).
SESSION_PARTITIONS_MAX = 100_000

PartitionKey = tuple[str, int]


class SessionLimitError(ValueError):
    """A request that would make the session hold more than :data:`SESSION_PARTITIONS_MAX`
    partitions."""


#: A FetchPartition's fetch_offset that means "where your previous answer ended".
CONTINUE = -1


@dataclass(slots=True)
class PartitionFetch:
    """What the follower last sent for one partition (replication.proto's FetchPartition):
    ``fetch_offset`` is :data:`CONTINUE` or where to read from (a resynchronisation),
    ``log_end_offset`` its progress."""

    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    log_end_offset: int


@dataclass(slots=True)
class _SessionPartition:
    fetch: PartitionFetch
    #: Where the next read starts: the follower's fetch offset when it sent one, then the end
    #: of each answer's records (the follower appends them in order, or resynchronises).
    cursor: int
    #: The follower's log must be checked at (last_fetched_epoch, cursor) before a read: it
    #: sent a fetch offset (new in the session, or resynchronising) and no check passed yet.
    verify: bool = True
    #: The high watermark and log start last answered; -1: never answered (answer it).
    answered_high_watermark: int = -1
    answered_log_start_offset: int = -1
    #: Its follower is being added by a reassignment (the leader throttle applies), as the
    #: last check found.
    throttled: bool = False


@dataclass(slots=True)
class PartitionResult:
    """One partition of an answer: ``error`` set, or the leader's offsets with ``records``
    (read at ``fetch_offset``) or ``diverging``."""

    topic: str
    partition: int
    fetch_offset: int
    high_watermark: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    records: bytes = b""
    diverging: DivergingEpoch | None = None
    error: Exception | None = None
    #: Where the next read starts: after ``records``.
    next_fetch_offset: int = 0


class FetchSession:
    """One follower's partitions on this leader (module docstring). Event-loop only."""

    def __init__(self, replica_id: int, roles: ReplicaRoles, executor: Executor,
                 read_in_executor_min_bytes: int) -> None:
        self.replica_id = replica_id
        self._roles = roles
        self._executor = executor
        self._read_in_executor_min_bytes = read_in_executor_min_bytes
        #: Insertion order is the order partitions are read in (rotated: module docstring).
        self._partitions: dict[PartitionKey, _SessionPartition] = {}
        self._wakeup = asyncio.Event()

    def __len__(self) -> int:
        return len(self._partitions)

    def update(self, partitions: Iterable[tuple[PartitionKey, PartitionFetch]],
               forgotten: Iterable[PartitionKey]) -> None:
        """Apply a request: ``partitions`` added or changed, ``forgotten`` dropped.

        Raises:
            SessionLimitError: the session would hold more than SESSION_PARTITIONS_MAX.
        """
        for key in forgotten:
            self._partitions.pop(key, None)
        for key, fetch in partitions:
            entry = self._partitions.get(key)
            start = fetch.fetch_offset if fetch.fetch_offset >= 0 else fetch.log_end_offset
            if entry is None:
                if len(self._partitions) >= SESSION_PARTITIONS_MAX:
                    raise SessionLimitError(
                        f"a fetch session holds at most {SESSION_PARTITIONS_MAX} partitions;"
                        f" adding {key[0]}-{key[1]} would exceed it")
                self._partitions[key] = _SessionPartition(fetch, start)
                continue
            entry.fetch = fetch
            if fetch.fetch_offset >= 0:  # resynchronising: read there, once checked
                entry.cursor, entry.verify = fetch.fetch_offset, True

    def interrupt(self) -> None:
        """The follower wrote its next request: an answer waiting for appends returns now."""
        self._wakeup.set()

    def clear_interrupt(self) -> None:
        """Before the caller looks whether a next request is there already (then it answers
        without waiting): an interrupt after that look ends the wait."""
        self._wakeup.clear()

    async def answer(self, max_wait_ms: int, max_bytes: int, response_max_bytes: int
                     ) -> Sequence[PartitionResult]:
        """The answer to the latest request (module docstring): records the follower's
        progress, reads, waits up to ``max_wait_ms`` when there is nothing to answer (0 when
        the follower's next request is there already)."""
        waiting: list[tuple[Replica, int]] = []
        try:
            results, readable, moved, throttled_s = self._check(waiting)
            if not results and not readable and max_wait_ms > 0:
                # A moved high watermark alone does not end the wait (Kafka's DelayedFetch
                # waits for bytes): the request stays the follower's long poll, which the
                # next append answers at once. A throttled partition's debt paid ends it too.
                wait_s = max_wait_ms / 1000
                if throttled_s is not None:
                    wait_s = min(wait_s, throttled_s)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), wait_s)
                readable = self._recheck(waiting, results)
            else:
                results += [_offsets(replica, cursor) for replica, cursor in moved]
        finally:
            for replica, _ in waiting:
                replica.remove_append_listener(self._wakeup.set)
        if readable and self._reads_inline(readable, max_bytes, response_max_bytes):
            results += _read_all(readable, max_bytes, response_max_bytes)
        elif readable:
            loop = asyncio.get_running_loop()
            results += await loop.run_in_executor(
                self._executor, _read_all, readable, max_bytes, response_max_bytes)
        throttle = self._roles.leader_throttle
        for result in results:
            entry = self._partitions.get((result.topic, result.partition))
            if result.records and throttle.enabled and entry is not None and entry.throttled:
                throttle.record(len(result.records), time.monotonic())
            if entry is not None and result.error is None:
                entry.answered_high_watermark = result.high_watermark
                entry.answered_log_start_offset = result.log_start_offset
                if result.records:
                    # The follower appends them next: the next read starts after them.
                    entry.cursor = result.next_fetch_offset
                    # Round-robin: the others go first next time.
                    key = (result.topic, result.partition)
                    self._partitions[key] = self._partitions.pop(key)
        return results

    def _reads_inline(self, readable: Sequence[tuple[Replica, int]], max_bytes: int,
                      response_max_bytes: int) -> bool:
        """Whether the reads are small enough for the loop: at most
        ``read_in_executor_min_bytes`` in all, known from the logs' published ends (the
        serving layer's rule for consumers' reads, ReplicaManager.reads_inline). A follower
        that keeps up reads a few batches per answer: page-cache reads cheaper inline than a
        thread hop, which each acks=all produce would wait for."""
        total = 0
        for replica, offset in readable:
            fetchable = replica.log.fetchable_bytes_max(offset)
            if fetchable is None:
                return False  # in an older segment: its size is not known without a lookup
            total += min(fetchable, max_bytes)
            if total >= min(self._read_in_executor_min_bytes, response_max_bytes + 1):
                return False
        return True

    def _check(self, waiting: list[tuple[Replica, int]]
               ) -> tuple[list[PartitionResult], list[tuple[Replica, int]],
                          list[tuple[Replica, int]], float | None]:
        """Checks and progress of every partition: the results to answer now, the
        (replica, cursor) with records to read, those whose high watermark or log start
        moved since last answered (sent with an answer that goes anyway), and the seconds
        until the leader throttle lets the partitions it holds back be read (None: none held
        back). Every leader replica with nothing to read is listened to (``waiting``)
        *before* its log end is looked at, so that an append after the look wakes the
        answer."""
        results: list[PartitionResult] = []
        readable: list[tuple[Replica, int]] = []
        moved: list[tuple[Replica, int]] = []
        now = time.monotonic()
        now_ms = int(now * 1000)
        roles = self._roles
        throttle = roles.leader_throttle
        throttle_delay_s = throttle.delay_s(now) if throttle.enabled else 0.0
        throttled_s: float | None = None
        for (topic, number), entry in self._partitions.items():
            fetch = entry.fetch
            try:
                replica = self._leader_replica(topic, number, fetch.current_leader_epoch)
            except Exception as exc:
                results.append(PartitionResult(topic, number, fetch.fetch_offset, error=exc))
                continue
            log = replica.log
            cursor = entry.cursor
            if entry.verify:
                # Only where the follower said its log ends: the leader's own answers since
                # then continue its log as the leader has it, nothing to check.
                diverging = diverging_epoch(fetch.last_fetched_epoch, cursor,
                                            log.end_offset_for_epoch)
                if diverging is not None:
                    results.append(_offsets(replica, cursor, diverging=diverging))
                    continue
            start, end = log.log_start_offset, log.log_end_offset
            if not start <= cursor <= end:
                results.append(PartitionResult(topic, number, cursor,
                               error=OffsetOutOfRangeError(
                    f"fetch offset {cursor} of replica {self.replica_id} is out of"
                    f" range for {topic}-{number}: the leader's log holds [{start}, {end})",
                    log_start_offset=start, log_end_offset=end)))
                continue
            entry.verify = False
            # The follower's progress is what it appended, never where the leader reads next.
            replica.record_follower_fetch(self.replica_id, min(fetch.log_end_offset, end),
                                          fetch.log_start_offset, now_ms)
            roles.maybe_expand_isr(replica)
            entry.throttled = throttle.enabled and roles.is_being_added((topic, number),
                                                                        self.replica_id)
            if entry.throttled and throttle_delay_s > 0 and cursor < end:
                throttled_s = throttle_delay_s  # held back: not read, not listened to
                continue
            replica.add_append_listener(self._wakeup.set)
            waiting.append((replica, cursor))
            if cursor < end:
                readable.append((replica, cursor))
            elif (entry.answered_high_watermark != log.high_watermark
                  or entry.answered_log_start_offset != log.log_start_offset):
                moved.append((replica, cursor))
        return results, readable, moved, throttled_s

    def _recheck(self, candidates: Iterable[tuple[Replica, int]],
                 results: list[PartitionResult]) -> list[tuple[Replica, int]]:
        """After a wait: the partitions that got records, those that stopped being led here
        (into ``results``), and those whose high watermark moved meanwhile."""
        readable = []
        for replica, offset in candidates:
            entry = self._partitions.get((replica.topic, replica.partition))
            if entry is None:
                continue  # forgotten by a request that arrived meanwhile
            if not replica.is_leader():
                results.append(PartitionResult(replica.topic, replica.partition, offset,
                                               error=replica.not_leader()))
            elif offset < replica.log.log_end_offset:
                readable.append((replica, offset))
            elif (entry.answered_high_watermark != replica.log.high_watermark
                  or entry.answered_log_start_offset != replica.log.log_start_offset):
                results.append(_offsets(replica, offset))
        return readable

    def _leader_replica(self, topic: str, number: int, current_leader_epoch: int) -> Replica:
        """The partition if this server leads it at ``current_leader_epoch`` and the follower
        is one of its replicas; raises the error to answer otherwise."""
        replica = self._roles.leader_partition(topic, number)
        if replica is None:  # a local topic, not replicated
            raise NotLeaderOrFollowerError(topic, number)
        if current_leader_epoch < replica.leader_epoch:
            raise FencedLeaderEpochError(
                topic, number, f"leader epoch {current_leader_epoch} of the fetch is older"
                f" than the leader's {replica.leader_epoch}")
        if current_leader_epoch > replica.leader_epoch:
            raise UnknownLeaderEpochError(
                topic, number, f"leader epoch {current_leader_epoch} of the fetch is newer"
                f" than the leader's {replica.leader_epoch}: it has not seen it yet")
        if self.replica_id not in replica.replicas or self.replica_id == replica.node_id:
            raise NotLeaderOrFollowerError(topic, number, replica.node_id, replica.leader_epoch)
        return replica


def _offsets(replica: Replica, fetch_offset: int, records: bytes = b"",
             diverging: DivergingEpoch | None = None, next_fetch_offset: int | None = None
             ) -> PartitionResult:
    log = replica.log
    return PartitionResult(replica.topic, replica.partition, fetch_offset,
                           log.high_watermark, log.log_start_offset, log.log_end_offset,
                           records, diverging,
                           next_fetch_offset=(fetch_offset if next_fetch_offset is None
                                              else next_fetch_offset))


def _read_all(readable: Sequence[tuple[Replica, int]], max_bytes: int,
              response_max_bytes: int) -> list[PartitionResult]:
    """Read each partition at its fetch offset, in session order, up to ``max_bytes`` each
    and ``response_max_bytes`` in all (the first partition's first batch whole). Executor."""
    results = []
    left = response_max_bytes
    for replica, offset in readable:
        if left <= 0:
            break
        log = replica.log
        try:
            fetched = log.fetch(offset, min(max_bytes, left), min_one_message=not results)
        except OffsetOutOfRangeError as exc:  # truncated or restarted meanwhile
            results.append(PartitionResult(replica.topic, replica.partition, offset, error=exc))
            continue
        data = fetched.data
        if not data:
            continue
        assert isinstance(data, bytes)  # a plain read: neither cut at a bound nor a region
        left -= len(data)
        results.append(_offsets(replica, offset, data, next_fetch_offset=fetched.next_offset))
    return results

