"""A follower's copy loop: fetch the leader's log, append it as it is (Kafka's
``ReplicaFetcherThread``).

One task per followed partition (Kafka runs one fetcher per leader, fetching all its
partitions in one request: here each partition has its own ReplicaFetch long poll, over one
gRPC channel per leader address, shared). Each round::

    ReplicaFetch(fetch_offset = my log end, last_fetched_epoch = my latest epoch,
                 current_leader_epoch = the epoch I follow in)
      diverging_epoch set  -> truncate_to(divergence.truncation_offset(...)); fetch again
      records              -> append_as_follower (the leader's offsets and epochs, byte for
                              byte; new epochs enter the leader epoch cache)
      always               -> high watermark = min(leader's, my log end); log start raised to
                              the leader's; the serving layer told (Replica.follower_appended),
                              as of every write
      OFFSET_OUT_OF_RANGE  -> below the leader's log start: restart the log there
                              (truncate_fully_and_start_at); above its end: truncate to it
      NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
      UNKNOWN_TOPIC_OR_PARTITION (an election or a creation the two sides have not both
                           seen yet) -> wait 100 ms (the view settles within a poll)
      unreachable, anything else -> wait replica_fetch_backoff_ms

The task runs until the replica manager stops it (the view changed the role, leader or epoch).
A stop waits for a storage call in flight in the executor to finish, so that the next role
(say, leader at a new epoch) starts from a log no fetcher touches any more.

Crash behaviour: every step is a storage call with its own crash guarantees (an append is
whole or recovered away, a truncation is redone from the epochs at the next fetch).

Concurrency: event-loop only; storage calls go to the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from google.rpc import error_details_pb2, status_pb2

from stratalog.server.storage.errors import UnexpectedAppendOffsetError
from stratalog.v1 import replication_pb2

from .divergence import DivergingEpoch, truncation_offset

if TYPE_CHECKING:
    from stratalog.server.storage.partition_log import PartitionLog

    from .peer_channels import ReplicationPeer
    from .replica import Replica

__all__ = ["FetchSettings", "ReplicaFetcher", "error_reason"]

logger = logging.getLogger(__name__)

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
#: Added to a fetch's max wait for the call's deadline: the leader answers within max wait.
CALL_SLACK_S = 5.0
#: The pause after an answer that an election in progress explains (below), instead of
#: ``replica_fetch_backoff_ms``: a leader change must not cost its followers a second.
ELECTION_BACKOFF_S = 0.1
_ELECTION_REASONS = frozenset({"NOT_LEADER_OR_FOLLOWER", "UNKNOWN_LEADER_EPOCH",
                               "FENCED_LEADER_EPOCH", "UNKNOWN_TOPIC_OR_PARTITION"})


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

    __slots__ = ("backoff_s", "max_bytes", "max_wait_ms")

    def __init__(self, max_wait_ms: int, max_bytes: int, backoff_ms: int) -> None:
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.backoff_s = backoff_ms / 1000


class ReplicaFetcher:
    """Copies one partition from its leader until :meth:`stop` (module docstring)."""

    def __init__(self, partition: Replica, leader_epoch: int,
                 stub_for_leader: Callable[[], ReplicationPeer | None],
                 settings: FetchSettings, executor: Executor) -> None:
        self._partition = partition
        self._leader_epoch = leader_epoch
        self._stub_for_leader = stub_for_leader
        self._settings = settings
        self._executor = executor
        self._task: asyncio.Task[None] | None = None
        self._in_flight: asyncio.Future[Any] | None = None
        self._failure_logged = ""

    def start(self) -> None:
        p = self._partition
        self._task = asyncio.create_task(
            self._run(), name=f"stratalog-replica-fetcher-{p.topic}-{p.partition}"
        )

    async def stop(self) -> None:
        """End the loop; wait for a storage call in flight (module docstring)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._in_flight is not None and not self._in_flight.done():
            with contextlib.suppress(Exception):
                await self._in_flight

    async def _blocking(self, function: Callable[..., Any], *args: Any) -> Any:
        """A storage call in the executor that a stop waits for (it is not cancelled)."""
        loop = asyncio.get_running_loop()
        self._in_flight = loop.run_in_executor(self._executor, function, *args)
        return await asyncio.shield(self._in_flight)

    async def _run(self) -> None:
        while True:
            try:
                backoff = await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a storage error: logged once per kind, retried
                self._log_failure(f"{type(exc).__name__}: {exc}")
                backoff = True
            if backoff:
                await asyncio.sleep(self._settings.backoff_s)

    def _log_failure(self, what: str) -> None:
        if what != self._failure_logged:
            p = self._partition
            logger.warning("%s-%d: replica fetch from node %d failed: %s", p.topic, p.partition,
                           p.leader_id, what)
            self._failure_logged = what

    async def _fetch_once(self) -> bool:
        """One round; True when the next should wait the backoff first."""
        p, log = self._partition, self._partition.log
        stub = self._stub_for_leader()
        if stub is None:
            self._log_failure(f"the address of node {p.leader_id} is not known")
            return True
        latest_epoch = log.latest_epoch
        request = replication_pb2.ReplicaFetchRequest(
            topic=p.topic, partition=p.partition, replica_id=p.node_id,
            current_leader_epoch=self._leader_epoch, fetch_offset=log.log_end_offset,
            last_fetched_epoch=-1 if latest_epoch is None else latest_epoch,
            log_start_offset=log.log_start_offset, max_bytes=self._settings.max_bytes,
            max_wait_ms=self._settings.max_wait_ms,
        )
        try:
            response = await stub.replica_fetch(
                request, self._settings.max_wait_ms / 1000 + CALL_SLACK_S
            )
        except grpc.aio.AioRpcError as exc:
            reason, metadata = error_reason(exc)
            if reason == "OFFSET_OUT_OF_RANGE":
                await self._blocking(self._out_of_range, log, request.fetch_offset, metadata)
                p.follower_appended()
                return False
            self._log_failure(f"{reason or exc.code().name}: {exc.details()}")
            if reason in _ELECTION_REASONS:
                # The leader has not applied its election yet (or this follower has not seen
                # a newer one): the view settles within a poll, so ask again soon.
                await asyncio.sleep(min(self._settings.backoff_s, ELECTION_BACKOFF_S))
                return False
            return True
        if response.HasField("diverging_epoch"):
            diverging = DivergingEpoch(response.diverging_epoch.epoch,
                                       response.diverging_epoch.end_offset)
            await self._blocking(self._truncate, log, diverging)
            p.follower_appended()
            return False
        await self._blocking(self._apply, log, response)
        p.follower_appended()
        self._failure_logged = ""
        return False

    # ---------------------------------------------------------------- storage steps (executor)

    def _truncate(self, log: PartitionLog, diverging: DivergingEpoch) -> None:
        truncation = truncation_offset(diverging, log.log_end_offset, log.high_watermark,
                                       log.end_offset_for_epoch)
        p = self._partition
        logger.info("%s-%d: log diverges from leader %d's (its epoch %d ends at %d): truncating"
                    " from %d to %d%s", p.topic, p.partition, p.leader_id, diverging.epoch,
                    diverging.end_offset, log.log_end_offset, truncation.offset,
                    "" if truncation.complete else ", then asking again")
        log.truncate_to(truncation.offset)

    def _apply(self, log: PartitionLog, response: replication_pb2.ReplicaFetchResponse) -> None:
        if response.records:
            try:
                log.append_as_follower(response.records)
            except UnexpectedAppendOffsetError as exc:
                end = log.log_end_offset
                if not (end == log.log_start_offset and exc.first_offset < end <= exc.last_offset):
                    raise  # logged by the loop, retried after the backoff
                # Kafka's Partition.appendRecordsToFollowerOrFutureReplica: an empty log that
                # starts inside the leader's first batch (the leader's log start is not at a
                # batch boundary after DeleteRecords) restarts at the batch's base offset.
                p = self._partition
                logger.info("%s-%d: the leader's first batch starts at %d, below this empty"
                            " log's start %d: restarting the log there", p.topic, p.partition,
                            exc.first_offset, end)
                log.truncate_fully_and_start_at(exc.first_offset)
                log.append_as_follower(response.records)
        log.update_high_watermark(min(response.high_watermark, log.log_end_offset))
        # The leader's log start (retention, DeleteRecords) after the high watermark, which
        # bounds it.
        if response.log_start_offset > log.log_start_offset:
            log.maybe_increment_log_start_offset(
                min(response.log_start_offset, log.high_watermark)
            )

    def _out_of_range(self, log: PartitionLog, fetch_offset: int, metadata: dict[str, str]
                      ) -> None:
        leader_start = int(metadata.get("log_start_offset", "0"))
        leader_end = int(metadata.get("log_end_offset", "0"))
        p = self._partition
        if fetch_offset < leader_start:
            logger.info("%s-%d: leader's log starts at %d, above this log's end %d: restarting"
                        " the log there", p.topic, p.partition, leader_start, fetch_offset)
            log.truncate_fully_and_start_at(leader_start)
        elif fetch_offset > leader_end:
            logger.info("%s-%d: leader's log ends at %d, below this log's end %d: truncating",
                        p.topic, p.partition, leader_end, fetch_offset)
            log.truncate_to(leader_end)
