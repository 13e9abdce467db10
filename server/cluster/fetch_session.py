"""The leader's side of a follower's fetch session: every partition one follower fetches from
this server, remembered between its requests.

Kafka's ``FetchSession`` (``core/src/main/scala/kafka/server/FetchSession.scala``, KIP-227) and
the follower half of ``ReplicaManager.fetchMessages`` / ``Partition.fetchRecords``. A session
lives as long as its ReplicaFetchSession stream (replication.proto); the servicer
(server/rpc/replication_service.py) translates its requests into :meth:`FetchSession.update`
and :meth:`FetchSession.answer` calls and the results back into answers.

* **What is remembered.** Per partition: the follower's leader epoch, fetch offset (its log end
  offset), last fetched epoch and log start offset, as last sent, and the high watermark and
  log start offset last answered. A request carries only the partitions added or changed and
  those forgotten; the others keep their last values.
* **Each request is the follower's progress for every partition of the session**, sent or not
  (Kafka expands an incremental request to the session's partitions the same way): the
  leader records each fetch offset (``Replica.record_follower_fetch``: the high watermark may
  rise, acks=all producers complete) and may add the follower to the ISR. An idle partition's
  follower thus stays caught up without being named.
* **An answer** (:meth:`FetchSession.answer`) holds, per partition, in this order of checks
  (issue 17's, now per partition)::

      this server leads it under its lease              else NOT_LEADER_OR_FOLLOWER
      the follower's epoch == the leader's              older: FENCED_LEADER_EPOCH,
                                                        newer: UNKNOWN_LEADER_EPOCH
      the follower is an assigned replica, not this one else NOT_LEADER_OR_FOLLOWER
      its log agrees at last_fetched_epoch              else diverging_epoch (no records;
                                                        its progress not recorded)
      log start <= fetch offset <= log end              else OFFSET_OUT_OF_RANGE
      records past the fetch offset                     up to max_bytes, and response_max_bytes
                                                        over the answer
      else: only if just added, or its high watermark or log start moved since last answered

  When no partition has anything, it waits for an append to any of them (Replica's append
  listeners: the leader's delayed-fetch wake-up, nothing polls), a change of their role, or
  :meth:`FetchSession.interrupt` (the follower wrote its next request), at most
  ``max_wait_ms``. Partitions that got records move to the end of the session's order, so
  that a partition with much to send cannot starve the others under ``response_max_bytes``
  (Kafka's round-robin of a session's partitions).

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


@dataclass(slots=True)
class PartitionFetch:
    """What the follower last sent for one partition (replication.proto's FetchPartition)."""

    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int


@dataclass(slots=True)
class _SessionPartition:
    fetch: PartitionFetch
    #: The high watermark and log start last answered; -1: never answered (answer it).
    answered_high_watermark: int = -1
    answered_log_start_offset: int = -1


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
            if entry is None:
                if len(self._partitions) >= SESSION_PARTITIONS_MAX:
                    raise SessionLimitError(
                        f"a fetch session holds at most {SESSION_PARTITIONS_MAX} partitions;"
                        f" adding {key[0]}-{key[1]} would exceed it")
                self._partitions[key] = _SessionPartition(fetch)
            else:
                entry.fetch = fetch

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
            results, readable = self._check(waiting)
            if not results and not readable and max_wait_ms > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), max_wait_ms / 1000)
                readable = self._recheck(waiting, results)
        finally:
            for replica, _ in waiting:
                replica.remove_append_listener(self._wakeup.set)
        if readable and self._reads_inline(readable, max_bytes, response_max_bytes):
            results += _read_all(readable, max_bytes, response_max_bytes)
        elif readable:
            loop = asyncio.get_running_loop()
            results += await loop.run_in_executor(
                self._executor, _read_all, readable, max_bytes, response_max_bytes)
        for result in results:
            entry = self._partitions.get((result.topic, result.partition))
            if entry is not None and result.error is None:
                entry.answered_high_watermark = result.high_watermark
                entry.answered_log_start_offset = result.log_start_offset
                if result.records:  # round-robin: the others go first next time
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
               ) -> tuple[list[PartitionResult], list[tuple[Replica, int]]]:
        """Checks and progress of every partition: the results to answer now, and the
        (replica, fetch offset) with records to read. Every leader replica with nothing
        to read is listened to (``waiting``) *before* its log end is looked at, so that an
        append after the look wakes the answer."""
        results: list[PartitionResult] = []
        readable: list[tuple[Replica, int]] = []
        now_ms = int(time.monotonic() * 1000)
        roles = self._roles
        for (topic, number), entry in self._partitions.items():
            fetch = entry.fetch
            try:
                replica = self._leader_replica(topic, number, fetch.current_leader_epoch)
            except Exception as exc:
                results.append(PartitionResult(topic, number, fetch.fetch_offset, error=exc))
                continue
            log = replica.log
            diverging = diverging_epoch(fetch.last_fetched_epoch, fetch.fetch_offset,
                                        log.end_offset_for_epoch)
            if diverging is not None:
                results.append(_offsets(replica, fetch.fetch_offset, diverging=diverging))
                continue
            start, end = log.log_start_offset, log.log_end_offset
            if not start <= fetch.fetch_offset <= end:
                results.append(PartitionResult(topic, number, fetch.fetch_offset,
                               error=OffsetOutOfRangeError(
                    f"fetch offset {fetch.fetch_offset} of replica {self.replica_id} is out of"
                    f" range for {topic}-{number}: the leader's log holds [{start}, {end})",
                    log_start_offset=start, log_end_offset=end)))
                continue
            replica.add_append_listener(self._wakeup.set)
            waiting.append((replica, fetch.fetch_offset))
            replica.record_follower_fetch(self.replica_id, fetch.fetch_offset,
                                          fetch.log_start_offset, now_ms)
            roles.maybe_expand_isr(replica)
            if fetch.fetch_offset < log.log_end_offset:
                readable.append((replica, fetch.fetch_offset))
            elif (entry.answered_high_watermark != log.high_watermark
                  or entry.answered_log_start_offset != log.log_start_offset):
                results.append(_offsets(replica, fetch.fetch_offset))
        return results, readable

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
            elif entry.answered_high_watermark != replica.log.high_watermark:
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
             diverging: DivergingEpoch | None = None) -> PartitionResult:
    log = replica.log
    return PartitionResult(replica.topic, replica.partition, fetch_offset,
                           log.high_watermark, log.log_start_offset, log.log_end_offset,
                           records, diverging)


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
            data = log.read(offset, min(max_bytes, left), min_one_message=not results)
        except OffsetOutOfRangeError as exc:  # truncated or restarted meanwhile
            results.append(PartitionResult(replica.topic, replica.partition, offset, error=exc))
            continue
        if not data:
            continue
        left -= len(data)
        results.append(_offsets(replica, offset, data))
    return results

