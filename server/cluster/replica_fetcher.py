"""A follower's copy loop: one fetch session per leader for every partition followed there,
each answer's batches appended as they are (Kafka's ``ReplicaFetcherThread`` /
``AbstractFetcherThread``, ``core/src/main/scala/kafka/server/AbstractFetcherThread.scala``).

One :class:`ReplicaFetcher` per leader node (replica_roles.py adds and removes its partitions
as the roles change, and stops it when none is left), one ReplicaFetchSession stream to that
leader (replication.proto; the leader's side is fetch_session.py), up to two requests ahead of
their answers::

    request: every partition followed here whose fields changed since the stream's last
             request (log_end_offset = my log end: my progress; last_fetched_epoch = my
             latest epoch; current_leader_epoch = the epoch I follow in; my log start;
             fetch_offset = CONTINUE, or my log end when the leader must be told where to
             read: in a stream's first request, which names them all, and after a truncation,
             an error or an answer not taken), the ones dropped as `forgotten`
    answer, per partition it names (unless it answers a request older than the one that
    last told the leader where to read: that answer is for the old position, ignored):
      fetch_offset is not my log end -> not taken: resynchronise
      diverging_epoch set  -> truncate_to(divergence.truncation_offset(...)); resynchronise
      records              -> append_as_follower (a view of the received bytes, the
                              leader's offsets and epochs, byte for byte)
      always               -> high watermark = min(leader's, my log end); log start raised to
                              the leader's; the serving layer told (Replica.follower_appended)
      OFFSET_OUT_OF_RANGE  -> below the leader's log start: restart the log there
                              (truncate_fully_and_start_at); above its end: truncate to it
      NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
      UNKNOWN_TOPIC_OR_PARTITION (an election or a creation the two sides have not both
                           seen yet) -> the partition leaves the session for 100 ms (the view
                           settles within a poll)
      any other error      -> it leaves the session for replica_fetch_backoff_ms

**Pipelining.** When an answer brings records and no request is outstanding, the next request
(CONTINUE: nothing changed yet) is written before the answer is appended, so that the leader
reads on while this follower writes; after the append, the next request carries the new log
ends, which is what moves the leader's high watermark (and completes its acks=all
producers). The leader counts only log_end_offset as progress, so a request written before an
append never claims records this log does not hold yet.

**The reassignment throttle** (replication_throttle.py): a partition this server is being
added to pays for each answer's bytes by leaving the session until the bucket's debt is paid
(then it comes back, naming its log end), as the partitions with errors do.

The storage calls of one answer are one executor call, except for a small answer (its
records under ``append_in_executor_min_bytes`` in all, the leader's rule for a Produce): each
partition of it is first tried inline on the loop (``PartitionLog.try_follow_without_blocking``:
a page-cache write, never a wait for the lock, a roll, an fsync or a new epoch's checkpoint),
and only the partitions from the first one that cannot be go to the executor. A record that
an acks=all producer waits for is then appended without a thread hop (0.26-0.46 ms of its
chain; docs/performance.md, "Issue 29: follower appends on the loop"). A partition added while a request
waits at the leader (it holds a request up to replica_fetch_wait_max_ms when it has nothing)
goes in a second request written at once, which makes the leader answer the first: a new
follower starts copying without waiting out the long poll. The stream itself failing (the
leader gone or restarted, a refusal of the whole stream) is retried on a new stream after
replica_fetch_backoff_ms (100 ms for the election reasons above); a new stream starts a new
session with a full request. A channel replaced under the stream (peer_channels.py: a reload
of the TLS files) ends it at its next request, and the next stream goes on the new channel at
once.

A removal (the view changed the role, leader or epoch) waits for a storage call in flight to
finish, so that the next role (say, leader at a new epoch) starts from a log no fetcher touches
any more.

Crash behaviour: every step is a storage call with its own crash guarantees (an append is
whole or recovered away, a truncation is redone from the epochs at the next fetch).

Concurrency: event-loop only; storage calls go to the executor, but small non-blocking
appends (above).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from google.rpc import error_details_pb2, status_pb2

from stratalog.server.storage.errors import UnexpectedAppendOffsetError
from stratalog.v1 import broker_pb2, replication_pb2

from .divergence import DivergingEpoch, truncation_offset
from .fetch_session_wire import PartitionAnswer, decode_response

if TYPE_CHECKING:
    from stratalog.server.storage.partition_log import PartitionLog

    from .peer_channels import ReplicationPeer
    from .replica import Replica

__all__ = ["FetchSettings", "ReplicaFetcher", "error_reason"]

logger = logging.getLogger(__name__)

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
#: Added to a request's max wait for how long an answer may take: the leader answers within
#: max wait; a leader silent for longer (frozen) has its stream replaced.
CALL_SLACK_S = 5.0
#: The pause after an answer that an election in progress explains (below), instead of
#: ``replica_fetch_backoff_ms``: a leader change must not cost its followers a second.
ELECTION_BACKOFF_S = 0.1
_ELECTION_REASONS = frozenset({"NOT_LEADER_OR_FOLLOWER", "UNKNOWN_LEADER_EPOCH",
                               "FENCED_LEADER_EPOCH", "UNKNOWN_TOPIC_OR_PARTITION"})
#: Requests written before their answers came: the usual one, and one more to add partitions.
REQUESTS_AHEAD_MAX = 2

PartitionKey = tuple[str, int]
#: What a request said of a partition: (current_leader_epoch, fetch_offset,
#: last_fetched_epoch, log_start_offset, log_end_offset).
_Sent = tuple[int, int, int, int, int]
#: fetch_offset: "go on where your previous answer ended" (replication.proto).
CONTINUE = -1


def error_reason(exc: grpc.aio.AioRpcError) -> tuple[str, dict[str, str]]:
    """The ErrorInfo reason and metadata a stratalog server put in ``exc``'s trailers
    (server/rpc/status.py); ``("", {})`` for none."""
    for key, value in exc.trailing_metadata() or ():
        if key != _STATUS_DETAILS_KEY:
            continue
        for detail in status_pb2.Status.FromString(value).details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return info.reason, dict(info.metadata)
    return "", {}


class FetchSettings:
    """The replica fetch settings (server/settings.py's replica_fetch_*), in seconds/bytes."""

    __slots__ = ("backoff_s", "inline_max_bytes", "max_bytes", "max_wait_ms",
                 "response_max_bytes")

    def __init__(self, max_wait_ms: int, max_bytes: int, backoff_ms: int,
                 response_max_bytes: int, inline_max_bytes: int = 0) -> None:
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.backoff_s = backoff_ms / 1000
        self.response_max_bytes = response_max_bytes
        #: Answers whose records are under this many bytes in all are tried inline (0: never).
        self.inline_max_bytes = inline_max_bytes


class _Followed:
    """One partition of the session: its replica, the epoch it follows in, until when (loop
    time) it stays out of the session after an error, and whether the leader must be told
    where to read (``needs_resync``: new in the session, or the log is not where the leader's
    answers continue) and from which request on it was (``resync_index``: answers to earlier
    requests are for the old position, and are ignored)."""

    __slots__ = ("delayed_until", "failure_logged", "leader_epoch", "needs_resync", "replica",
                 "resync_index")

    def __init__(self, replica: Replica, leader_epoch: int) -> None:
        self.replica = replica
        self.leader_epoch = leader_epoch
        self.delayed_until = 0.0
        self.failure_logged = ""
        self.needs_resync = True
        self.resync_index = 0

    def fields(self) -> _Sent:
        log = self.replica.log
        latest_epoch = log.latest_epoch
        end = log.log_end_offset
        return (self.leader_epoch, end if self.needs_resync else CONTINUE,
                -1 if latest_epoch is None else latest_epoch, log.log_start_offset, end)


class _Outcome:
    """What applying one partition's answer asks of the loop: an error reason to back off
    for (with the message to log), and whether the leader must be told where the log ends
    now (``resync``: it truncated, restarted, or did not take the answer)."""

    __slots__ = ("message", "reason", "resync")

    def __init__(self, reason: str = "", message: str = "", *, resync: bool = False) -> None:
        self.reason = reason
        self.message = message
        self.resync = resync or bool(reason)


class ReplicaFetcher:
    """Copies every partition followed on ``leader_id`` until :meth:`stop` (module
    docstring)."""

    def __init__(self, node_id: int, leader_id: int,
                 stub_for_leader: Callable[[], ReplicationPeer | None],
                 settings: FetchSettings, executor: Executor,
                 throttled_delay: Callable[[PartitionKey, int], float] | None = None) -> None:
        self.node_id = node_id
        self.leader_id = leader_id
        self._stub_for_leader = stub_for_leader
        self._settings = settings
        self._executor = executor
        #: The reassignment throttle (replica_roles.py): the records' bytes of a partition
        #: fetched in -> how long it stays out of the session (0: it is not throttled).
        self._throttled_delay = throttled_delay
        self._partitions: dict[PartitionKey, _Followed] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._in_flight: asyncio.Future[Any] | None = None
        self._failure_logged = ""

    def __len__(self) -> int:
        return len(self._partitions)

    def __contains__(self, key: object) -> bool:
        return key in self._partitions

    def start(self) -> None:
        self._task = asyncio.create_task(
            self._run(), name=f"stratalog-replica-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        """End the loop; wait for a storage call in flight (module docstring)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._wait_in_flight()

    def add_partition(self, replica: Replica, leader_epoch: int) -> None:
        """Fetch ``replica`` from this leader at ``leader_epoch`` (from the next request)."""
        self._partitions[(replica.topic, replica.partition)] = _Followed(replica, leader_epoch)
        self._changed.set()

    async def remove_partition(self, key: PartitionKey) -> None:
        """Fetch ``key`` no more; returns once no storage call of this fetcher is in flight."""
        if self._partitions.pop(key, None) is not None:
            self._changed.set()
            await self._wait_in_flight()

    async def _wait_in_flight(self) -> None:
        if self._in_flight is not None and not self._in_flight.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._in_flight)

    # ---------------------------------------------------------------- the stream

    async def _run(self) -> None:
        while True:
            backoff_s = self._settings.backoff_s
            stub = self._stub_for_leader()
            if stub is None:
                self._log_failure(f"the address of node {self.leader_id} is not known")
            else:
                try:
                    await self._session(stub)
                    continue  # the channel was replaced: a new stream on the new one, now
                except asyncio.CancelledError:
                    raise
                except grpc.aio.AioRpcError as exc:
                    reason, _ = error_reason(exc)
                    self._log_failure(f"{reason or exc.code().name}: {exc.details()}")
                    if reason in _ELECTION_REASONS:
                        backoff_s = min(backoff_s, ELECTION_BACKOFF_S)
                except Exception as exc:  # a stream or storage error: logged once per kind
                    self._log_failure(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(backoff_s)

    def _log_failure(self, what: str) -> None:
        if what != self._failure_logged:
            logger.warning("replica fetch session with node %d failed: %s", self.leader_id,
                           what)
            self._failure_logged = what

    async def _session(self, stub: ReplicationPeer) -> None:
        """One stream: requests and answers until it fails, or until the channel to the
        leader is replaced (a reload of the TLS files, the leader's new address): then it
        returns, at a request's turn, and the next stream goes on the new channel."""
        call = stub.fetch_session()
        sent: dict[PartitionKey, _Sent] = {}
        for followed in self._partitions.values():
            followed.needs_resync = True  # a new session knows none of them
        answer_timeout_s = self._settings.max_wait_ms / 1000 + CALL_SLACK_S
        written = answered = 0  # requests written, answers read: answer i is request i's
        read: asyncio.Future[Any] | None = None

        async def write() -> None:
            nonlocal written
            self._changed.clear()
            await call.write(self._request(sent, written))
            written += 1

        try:
            while True:
                if written == answered:
                    current = self._stub_for_leader()
                    if current is None or current.channel is not stub.channel:
                        return
                    await write()
                if read is None:
                    read = asyncio.ensure_future(call.read())
                changed = asyncio.ensure_future(self._changed.wait())
                try:
                    done, _ = await asyncio.wait({read, changed}, timeout=answer_timeout_s,
                                                 return_when=asyncio.FIRST_COMPLETED)
                finally:
                    changed.cancel()
                if read in done:
                    data, read = read.result(), None
                    if data is grpc.aio.EOF:
                        raise ConnectionError(f"node {self.leader_id} ended the fetch session")
                    index, answered = answered, answered + 1
                    self._failure_logged = ""
                    answers = decode_response(data)
                    if written == answered and any(a.records for a in answers):
                        # Pipelining: the leader reads on (from where this answer ends) while
                        # this one is appended.
                        await write()
                    await self._apply(answers, index)
                    if answers and written - answered < REQUESTS_AHEAD_MAX:
                        # The new log ends: what moves the leader's high watermark.
                        await write()
                elif changed in done:
                    # Partitions added or back from a backoff: ask now rather than after the
                    # long poll (the leader answers the request it holds at once).
                    if written - answered < REQUESTS_AHEAD_MAX:
                        await write()
                else:
                    raise TimeoutError(f"node {self.leader_id} did not answer a fetch within"
                                       f" {answer_timeout_s:.1f} s")
        finally:
            if read is not None:
                read.cancel()
            call.cancel()

    def _request(self, sent: dict[PartitionKey, _Sent], index: int
                 ) -> replication_pb2.ReplicaFetchRequest:
        """Request ``index``: the partitions whose fields differ from ``sent`` or that
        resynchronise (updated), and those ``sent`` holds that are no longer fetched (removed
        from it)."""
        settings = self._settings
        request = replication_pb2.ReplicaFetchRequest(
            replica_id=self.node_id, max_wait_ms=settings.max_wait_ms,
            max_bytes=settings.max_bytes, response_max_bytes=settings.response_max_bytes)
        now = asyncio.get_running_loop().time()
        active = set()
        for key, followed in self._partitions.items():
            if followed.delayed_until > now:
                continue
            active.add(key)
            fields = followed.fields()
            if followed.needs_resync or sent.get(key) != fields:
                sent[key] = fields
                if followed.needs_resync:
                    followed.needs_resync = False
                    followed.resync_index = index
                epoch, offset, last_epoch, log_start, end = fields
                request.partitions.add(topic=key[0], partition=key[1],
                                       current_leader_epoch=epoch, fetch_offset=offset,
                                       last_fetched_epoch=last_epoch,
                                       log_start_offset=log_start, log_end_offset=end)
        for key in [key for key in sent if key not in active]:
            del sent[key]
            request.forgotten.add(topic=key[0], partition=key[1])
        return request

    # ---------------------------------------------------------------- answers

    async def _apply(self, answers: Sequence[PartitionAnswer], index: int) -> None:
        """Apply answer ``index`` (to request ``index``): each partition still fetched here,
        unless it resynchronised in a later request than this one."""
        work = []
        for answer in answers:
            followed = self._partitions.get((answer.data.topic, answer.data.partition))
            if followed is not None and index >= followed.resync_index:
                work.append((followed, answer))
        if not work:
            return
        loop = asyncio.get_running_loop()
        outcomes: list[_Outcome] = []
        if sum(len(answer.records) for _, answer in work) < self._settings.inline_max_bytes:
            for followed, answer in work:
                outcome = _apply_inline(followed.replica, answer)
                if outcome is None:
                    break  # this one and the rest in the executor, in order
                outcomes.append(outcome)
        if len(outcomes) < len(work):
            self._in_flight = loop.run_in_executor(self._executor, _apply_all,
                                                   work[len(outcomes):])
            outcomes += await asyncio.shield(self._in_flight)
        now = loop.time()
        for (followed, answer), outcome in zip(work, outcomes, strict=True):
            followed.replica.follower_appended()
            if outcome.resync:
                followed.needs_resync = True
            key = (followed.replica.topic, followed.replica.partition)
            if answer.records and self._throttled_delay is not None:
                # A partition this server is being added to pays for its bytes by staying out
                # of the session (the in-sync ones are never throttled: acks=all is not slowed).
                delay_s = self._throttled_delay(key, len(answer.records))
                if delay_s > 0 and self._partitions.get(key) is followed:
                    followed.delayed_until = max(followed.delayed_until, now + delay_s)
                    followed.needs_resync = True
                    loop.call_later(delay_s, self._changed.set)
            if not outcome.reason or self._partitions.get(key) is not followed:
                followed.failure_logged = ""
                continue
            if outcome.reason != followed.failure_logged:
                logger.warning("%s-%d: replica fetch from node %d failed: %s: %s", *key,
                               self.leader_id, outcome.reason, outcome.message)
                followed.failure_logged = outcome.reason
            delay_s = self._settings.backoff_s
            if outcome.reason in _ELECTION_REASONS:
                delay_s = min(delay_s, ELECTION_BACKOFF_S)
            followed.delayed_until = now + delay_s
            loop.call_later(delay_s, self._changed.set)


# ---------------------------------------------------------------- storage steps (executor)


def _apply_all(work: Sequence[tuple[_Followed, PartitionAnswer]]) -> list[_Outcome]:
    """Apply each partition's answer to its log (module docstring); one outcome each."""
    outcomes = []
    for followed, answer in work:
        replica = followed.replica
        try:
            outcomes.append(_apply_one(replica, answer))
        except Exception as exc:  # a storage error: this partition backs off, resynchronises
            outcomes.append(_Outcome(type(exc).__name__, str(exc)))
    return outcomes


def _apply_inline(replica: Replica, answer: PartitionAnswer) -> _Outcome | None:
    """:func:`_apply_one` on the loop when it is a page-cache write and nothing else; None
    (nothing changed) when it must go to the executor: an error, a divergence or a log start
    to move, or an append the log cannot do without blocking (or that fails: the executor's
    try reports it, with the offset recovery of :func:`_append`)."""
    data, log = answer.data, replica.log
    if (data.HasField("error") or data.HasField("diverging_epoch")
            or data.log_start_offset > log.log_start_offset):
        return None
    if data.fetch_offset != log.log_end_offset:
        return _Outcome(resync=True)  # as _apply_one: not where this log ends
    try:
        appended = log.try_follow_without_blocking(answer.records, data.high_watermark)
    except Exception:  # validation refused it whole: nothing written
        return None
    return None if appended is None else _Outcome()


def _apply_one(replica: Replica, answer: PartitionAnswer) -> _Outcome:
    data, log = answer.data, replica.log
    if data.HasField("error"):
        reason = broker_pb2.ErrorReason.Name(data.error.reason)
        if reason == "OFFSET_OUT_OF_RANGE":
            _out_of_range(replica, data.fetch_offset, data.error.metadata)
            return _Outcome(resync=True)
        return _Outcome(reason, data.error.message)
    if data.fetch_offset != log.log_end_offset:
        # Not where this log ends (an append failed, or the log was truncated meanwhile):
        # the leader is told where it ends.
        return _Outcome(resync=True)
    if data.HasField("diverging_epoch"):
        _truncate(replica, DivergingEpoch(data.diverging_epoch.epoch,
                                          data.diverging_epoch.end_offset))
        return _Outcome(resync=True)
    if answer.records:
        _append(replica, log, answer.records)
    log.update_high_watermark(min(data.high_watermark, log.log_end_offset))
    # The leader's log start (retention, DeleteRecords) after the high watermark, which
    # bounds it.
    if data.log_start_offset > log.log_start_offset:
        log.maybe_increment_log_start_offset(min(data.log_start_offset, log.high_watermark))
    return _Outcome()


def _append(replica: Replica, log: PartitionLog, records: bytes | memoryview) -> None:
    try:
        log.append_as_follower(records)
    except UnexpectedAppendOffsetError as exc:
        end = log.log_end_offset
        if not (end == log.log_start_offset and exc.first_offset < end <= exc.last_offset):
            raise  # the partition backs off, then asks again
        # Kafka's Partition.appendRecordsToFollowerOrFutureReplica: an empty log that
        # starts inside the leader's first batch (the leader's log start is not at a
        # batch boundary after DeleteRecords) restarts at the batch's base offset.
        logger.info("%s-%d: the leader's first batch starts at %d, below this empty log's"
                    " start %d: restarting the log there", replica.topic, replica.partition,
                    exc.first_offset, end)
        log.truncate_fully_and_start_at(exc.first_offset)
        log.append_as_follower(records)


def _truncate(replica: Replica, diverging: DivergingEpoch) -> None:
    log = replica.log
    truncation = truncation_offset(diverging, log.log_end_offset, log.high_watermark,
                                   log.end_offset_for_epoch)
    logger.info("%s-%d: log diverges from leader %d's (its epoch %d ends at %d): truncating"
                " from %d to %d%s", replica.topic, replica.partition, replica.leader_id,
                diverging.epoch, diverging.end_offset, log.log_end_offset, truncation.offset,
                "" if truncation.complete else ", then asking again")
    log.truncate_to(truncation.offset)


def _out_of_range(replica: Replica, fetch_offset: int, metadata: Any) -> None:
    log = replica.log
    if fetch_offset != log.log_end_offset:
        return  # answered for a request this follower has superseded
    leader_start = int(metadata.get("log_start_offset", "0"))
    leader_end = int(metadata.get("log_end_offset", "0"))
    if fetch_offset < leader_start:
        logger.info("%s-%d: leader's log starts at %d, above this log's end %d: restarting"
                    " the log there", replica.topic, replica.partition, leader_start,
                    fetch_offset)
        log.truncate_fully_and_start_at(leader_start)
    elif fetch_offset > leader_end:
        logger.info("%s-%d: leader's log ends at %d, below this log's end %d: truncating",
                    replica.topic, replica.partition, leader_end, fetch_offset)
        log.truncate_to(leader_end)
