"""The Replication servicer: the leader's side of ReplicaFetchSession (replication.proto).

It translates only: the stream's requests into a :class:`~stratalog.server.cluster.fetch_session.
FetchSession` (server/cluster/fetch_session.py: the partitions, their checks, the follower's
progress, the wait for appends), its results into answers written around the batches as read
(fetch_session_wire.py), and exceptions into statuses (status.py): a partition's error into its
PartitionData, the stream's into the call's status. Per stream, in this order::

    the caller is one of the broker principals              else PERMISSION_DENIED
    this server joined the cluster                          else NOT_LEADER_OR_FOLLOWER
    then per request:
    replica_id is the stream's first one                    else INVALID_REQUEST
    node replica_id is registered (live) ...                else NOT_LEADER_OR_FOLLOWER
        ... with the caller's principal                     else PERMISSION_DENIED
        (broker_identity.py: its table says what holds without broker principals)
    the session takes the request's partitions              else INVALID_REQUEST (too many)
    one answer, written before the next request is served

The requests are read by a task of their own, at most :data:`REQUESTS_QUEUED_MAX` ahead
(gRPC's flow control holds the follower back beyond that): a request that arrives while the
answer to the previous one waits for appends ends that wait (:meth:`FetchSession.interrupt`),
so that a partition the follower adds is fetched at once.

Registered on the server's gRPC server in cluster mode only (app.py). A stopping server ends
its open sessions (:meth:`ReplicationService.begin_shutdown`) and refuses new ones: a session
is a call that never ends by itself, and gRPC's stop would wait its grace period for each.

Concurrency: event-loop only; reads go to the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from stratalog.server.cluster.broker_identity import BrokerIdentity
from stratalog.server.cluster.errors import NotLeaderOrFollowerError
from stratalog.server.cluster.fetch_session import (
    FetchSession,
    PartitionFetch,
    PartitionResult,
    SessionLimitError,
)
from stratalog.server.cluster.fetch_session_wire import encode_response
from stratalog.server.cluster.peer_channels import (
    FETCH_MAX_BYTES_MAX,
    FETCH_MAX_WAIT_MS_MAX,
    FETCH_RESPONSE_MAX_BYTES_MAX,
)
from stratalog.server.rpc import status
from stratalog.server.rpc.authorization import call_identity
from stratalog.v1 import replication_pb2, replication_pb2_grpc

if TYPE_CHECKING:
    from stratalog.server.cluster.replica_roles import ReplicaRoles

__all__ = ["REQUESTS_QUEUED_MAX", "ReplicationService", "add_replication_service"]

logger = logging.getLogger(__name__)

#: Requests of one stream read ahead of the one being answered.
REQUESTS_QUEUED_MAX = 2
_END = None


class ReplicationService(replication_pb2_grpc.ReplicationServicer):
    """replication.proto's Replication service over this server's replica roles (set once
    joined), for the callers ``identity`` admits."""

    def __init__(self, executor: Executor, identity: BrokerIdentity,
                 read_in_executor_min_bytes: int) -> None:
        self._executor = executor
        self._identity = identity
        self._read_in_executor_min_bytes = read_in_executor_min_bytes
        #: Set by app.py once the server joined the cluster.
        self.replica_roles: ReplicaRoles | None = None
        #: The open sessions' handler tasks (ended at shutdown), and whether it began.
        self._sessions: set[asyncio.Task[Any]] = set()
        self._stopping = False

    def begin_shutdown(self) -> None:
        """End every open fetch session now and refuse new ones (module docstring): their
        followers go on with the partitions' new leaders, or retry until this server is
        gone. Otherwise each would hold the gRPC server's stop for ``shutdown_grace_ms``."""
        self._stopping = True
        for task in list(self._sessions):
            task.cancel()

    async def ReplicaFetchSession(
        self, request_iterator: AsyncIterator[replication_pb2.ReplicaFetchRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        reader: asyncio.Task[None] | None = None
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        try:
            # Who asks, before anything about a partition is told (or read).
            principal = call_identity(context).principal
            self._identity.check_caller(principal)
            roles = self.replica_roles
            if roles is None or self._stopping:
                raise NotLeaderOrFollowerError("", -1)
            requests: asyncio.Queue[replication_pb2.ReplicaFetchRequest | None] = (
                asyncio.Queue(REQUESTS_QUEUED_MAX))
            session: FetchSession | None = None

            async def read() -> None:
                async for request in request_iterator:
                    await requests.put(request)
                    if session is not None:
                        session.interrupt()
                await requests.put(_END)

            reader = asyncio.create_task(read())
            while True:
                request = await _next(requests, reader)
                if request is None:
                    return
                if session is None:
                    session = FetchSession(request.replica_id, roles, self._executor,
                                           self._read_in_executor_min_bytes)
                    logger.info("node %d opened a fetch session (%d partitions)",
                                request.replica_id, len(request.partitions))
                elif request.replica_id != session.replica_id:
                    await context.abort_with_status(status.invalid_request(
                        f"replica_id {request.replica_id} differs from the stream's first,"
                        f" {session.replica_id}", metadata={"field": "replica_id"}))
                self._identity.check_replica(principal, request.replica_id, roles.brokers, "",
                                             -1)
                session.update(
                    (((p.topic, p.partition),
                      PartitionFetch(p.current_leader_epoch, p.fetch_offset,
                                     p.last_fetched_epoch, p.log_start_offset,
                                     p.log_end_offset))
                     for p in request.partitions),
                    ((p.topic, p.partition) for p in request.forgotten),
                )
                session.clear_interrupt()
                # A next request already read: answer this one without waiting (it says more).
                max_wait_ms = request.max_wait_ms if requests.empty() else 0
                results = await session.answer(
                    min(max(max_wait_ms, 0), FETCH_MAX_WAIT_MS_MAX),
                    min(max(request.max_bytes, 1), FETCH_MAX_BYTES_MAX),
                    min(max(request.response_max_bytes, 1), FETCH_RESPONSE_MAX_BYTES_MAX),
                )
                await context.write(encode_response(_partition_data(r) for r in results))
        except grpc.aio.AbortError:
            raise
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            # Ended by begin_shutdown: the follower is told (a cancelled handler alone sends
            # nothing, and the call would stay open until the stop's grace period ends).
            await status.abort_with_error(context, NotLeaderOrFollowerError("", -1))
        except SessionLimitError as exc:
            await context.abort_with_status(
                status.invalid_request(str(exc), metadata={"field": "partitions"}))
        except Exception as exc:
            if status.call_ended(context, exc):
                return  # the follower went (a new session, a restart): nobody to answer
            await status.abort_with_error(context, exc)
        finally:
            self._sessions.discard(task)
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(BaseException):
                    await reader


async def _next(requests: asyncio.Queue[replication_pb2.ReplicaFetchRequest | None],
                reader: asyncio.Task[None]) -> replication_pb2.ReplicaFetchRequest | None:
    """The next request, None at the stream's end; the reader's error if it failed."""
    if requests.empty() and reader.done():
        reader.result()  # raises what ended it
        return None
    getter = asyncio.ensure_future(requests.get())
    done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
    if getter in done:
        return getter.result()
    getter.cancel()
    reader.result()
    return None


def _partition_data(result: PartitionResult
                    ) -> tuple[replication_pb2.PartitionData, bytes | memoryview]:
    data = replication_pb2.PartitionData(topic=result.topic, partition=result.partition,
                                         fetch_offset=result.fetch_offset)
    if result.error is not None:
        data.error.CopyFrom(status.session_error(status.to_status(result.error)))
        return data, b""
    data.high_watermark = result.high_watermark
    data.log_start_offset = result.log_start_offset
    data.log_end_offset = result.log_end_offset
    data.next_fetch_offset = result.next_fetch_offset
    if result.diverging is not None:
        data.diverging_epoch.epoch = result.diverging.epoch
        data.diverging_epoch.end_offset = result.diverging.end_offset
    return data, result.records


def add_replication_service(servicer: ReplicationService, server: grpc.aio.Server) -> None:
    """Register ``servicer``'s methods as the Replication service on ``server``: what the
    generated ``add_ReplicationServicer_to_server`` does, except that a method may answer with
    ``bytes`` it serialized itself (ReplicaFetchSession's answers, written around the batches
    by fetch_session_wire.py), sent as they are. The handlers come from the service's
    descriptor: a method added to replication.proto is registered without a change here."""
    service = replication_pb2.DESCRIPTOR.services_by_name["Replication"]
    handlers = {}
    for method in service.methods:
        request_class = getattr(replication_pb2, method.input_type.name)
        response_class = getattr(replication_pb2, method.output_type.name)
        factory = _HANDLERS[method.client_streaming, method.server_streaming]
        handlers[method.name] = factory(
            getattr(servicer, method.name),
            request_deserializer=request_class.FromString,
            response_serializer=_bytes_or(response_class.SerializeToString),
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


# gRPC's handler factory for each (client streaming, server streaming) kind of method.
_HANDLERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def _bytes_or(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A response serializer that sends ``bytes`` as they are and serializes anything else."""

    def serialize_unless_bytes(message: Any) -> bytes:
        return message if type(message) is bytes else serialize(message)

    return serialize_unless_bytes
