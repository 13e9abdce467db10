"""The Replication servicer: the leader's side of ReplicaFetch (replication.proto).

Kafka's ``Partition.fetchRecords`` for a follower, in this order::

    the caller is one of the broker principals              else PERMISSION_DENIED
    node replica_id is registered (live) ...                else NOT_LEADER_OR_FOLLOWER
        ... with the caller's principal                     else PERMISSION_DENIED
        (broker_identity.py: its table says what holds without broker principals)
    this server leads the partition under its lease        else NOT_LEADER_OR_FOLLOWER
    current_leader_epoch == the leader's epoch              older: FENCED_LEADER_EPOCH,
                                                            newer: UNKNOWN_LEADER_EPOCH
    replica_id is an assigned replica, not this server     else NOT_LEADER_OR_FOLLOWER
    the follower's log agrees at last_fetched_epoch         else answer diverging_epoch (no
        (divergence.py)                                     records; its progress not recorded)
    log start <= fetch_offset <= log end                    else OFFSET_OUT_OF_RANGE
    record the follower's progress (fetch_offset): may advance the high watermark, wake the
        acks=all producers and consumers, and add the follower to the ISR
    read from fetch_offset; nothing there: wait for an append up to max_wait_ms, read again
    answer with the batches, the high watermark, log start and end

The gRPC front end of the cluster's replication (server/cluster/: the replicas, their ISR and
high watermark, the follower's fetcher). Registered on the server's gRPC server in cluster mode
only (app.py); answers NOT_LEADER_OR_FOLLOWER until the server joined the cluster. Errors become
statuses through status.py, as the Broker service's do.

Concurrency: event-loop only; reads go to the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from concurrent.futures import Executor
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from stratalog.server.cluster.broker_identity import BrokerIdentity
from stratalog.server.cluster.divergence import diverging_epoch
from stratalog.server.cluster.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from stratalog.server.cluster.peer_channels import FETCH_MAX_BYTES_MAX, FETCH_MAX_WAIT_MS_MAX
from stratalog.server.rpc import status
from stratalog.server.rpc.authorization import call_identity
from stratalog.server.storage.errors import OffsetOutOfRangeError
from stratalog.v1 import replication_pb2, replication_pb2_grpc

if TYPE_CHECKING:
    from stratalog.server.cluster.replica_roles import ReplicaRoles

__all__ = ["ReplicationService"]


class ReplicationService(replication_pb2_grpc.ReplicationServicer):
    """replication.proto's Replication service over this server's replica roles (set once
    joined), for the callers ``identity`` admits."""

    def __init__(self, executor: Executor, identity: BrokerIdentity) -> None:
        self._executor = executor
        self._identity = identity
        #: Set by app.py once the server joined the cluster.
        self.replica_roles: ReplicaRoles | None = None

    async def ReplicaFetch(
        self, request: replication_pb2.ReplicaFetchRequest, context: grpc.aio.ServicerContext
    ) -> replication_pb2.ReplicaFetchResponse:
        try:
            return await self._fetch(request, context)
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as exc:
            await status.abort_with_error(context, exc)

    async def _fetch(
        self, request: replication_pb2.ReplicaFetchRequest, context: grpc.aio.ServicerContext
    ) -> replication_pb2.ReplicaFetchResponse:
        topic, number = request.topic, request.partition
        # Who asks, before anything about the partition is told (or read).
        principal = call_identity(context).principal
        self._identity.check_caller(principal)
        manager = self.replica_roles
        if manager is None:
            raise NotLeaderOrFollowerError(topic, number)
        self._identity.check_replica(principal, request.replica_id, manager.brokers, topic,
                                     number)
        replica = manager.leader_partition(topic, number)
        if replica is None:
            raise NotLeaderOrFollowerError(topic, number)
        if request.current_leader_epoch < replica.leader_epoch:
            raise FencedLeaderEpochError(
                topic, number, f"leader epoch {request.current_leader_epoch} of the fetch is"
                f" older than the leader's {replica.leader_epoch}")
        if request.current_leader_epoch > replica.leader_epoch:
            raise UnknownLeaderEpochError(
                topic, number, f"leader epoch {request.current_leader_epoch} of the fetch is"
                f" newer than the leader's {replica.leader_epoch}: it has not seen it yet")
        if request.replica_id not in replica.replicas or request.replica_id == replica.node_id:
            raise NotLeaderOrFollowerError(topic, number, replica.node_id, replica.leader_epoch)
        log = replica.log
        diverging = diverging_epoch(request.last_fetched_epoch, request.fetch_offset,
                                    log.end_offset_for_epoch)
        if diverging is not None:
            return replication_pb2.ReplicaFetchResponse(
                high_watermark=log.high_watermark, log_start_offset=log.log_start_offset,
                log_end_offset=log.log_end_offset,
                diverging_epoch=replication_pb2.DivergingEpoch(
                    epoch=diverging.epoch, end_offset=diverging.end_offset),
            )
        offset = request.fetch_offset
        start, end = log.log_start_offset, log.log_end_offset
        if not start <= offset <= end:
            raise OffsetOutOfRangeError(
                f"fetch offset {offset} of replica {request.replica_id} is out of range for "
                f"{topic}-{number}: the leader's log holds [{start}, {end})",
                log_start_offset=start, log_end_offset=end,
            )
        # The signal before the read: an append in between is never missed.
        signal = replica.append_signal()
        replica.record_follower_fetch(request.replica_id, offset, request.log_start_offset,
                                      int(time.monotonic() * 1000))
        manager.maybe_expand_isr(replica)
        max_bytes = min(max(request.max_bytes, 1), FETCH_MAX_BYTES_MAX)
        loop = asyncio.get_running_loop()
        data = b""
        if offset < log.log_end_offset:
            data = await loop.run_in_executor(self._executor, log.read, offset, max_bytes)
        max_wait_ms = min(max(request.max_wait_ms, 0), FETCH_MAX_WAIT_MS_MAX)
        if not data and max_wait_ms:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(signal.wait(), max_wait_ms / 1000)
            if replica.is_leader() and offset < log.log_end_offset:
                data = await loop.run_in_executor(self._executor, log.read, offset, max_bytes)
        return replication_pb2.ReplicaFetchResponse(
            high_watermark=log.high_watermark, log_start_offset=log.log_start_offset,
            records=data, log_end_offset=log.log_end_offset,
        )
