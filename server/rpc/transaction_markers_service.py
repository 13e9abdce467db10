"""The TransactionMarkers servicer: a partition leader's side of a cluster's transaction
coordinators' calls (transaction_markers.proto; docs/cluster.md, "Transactions").

Translation only: the caller must be one of the cluster's servers (as for ReplicaFetchSession:
server/cluster/broker_identity.py), then each partition goes to the transaction runtime's leader
side (server/transaction_service/leader_calls.py: ``write_marker_here``, ``allow_here``; and
VerifyTxnAppend, a leader's question, to the coordinators' ``verify_here``), and what it raised becomes that partition's :class:`TxnPartitionError` (:data:`_ERRORS`, the one
table). A request names at most :data:`PARTITIONS_PER_CALL_MAX` partitions. Registered in
cluster mode only; before the server joined, every partition answers NOT_LEADER.

Concurrency: event-loop only (the marker writes go to the executor inside the runtime).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from stratalog.server.cluster import errors as cluster_errors
from stratalog.server.cluster.broker_identity import BrokerIdentity
from stratalog.server.rpc import status
from stratalog.server.rpc.authorization import call_identity
from stratalog.server.rpc.translation import BadRequestError
from stratalog.server.storage import errors as storage_errors
from stratalog.server.transaction_service import Marker
from stratalog.server.transactions import CoordinatorNotAvailableError, InvalidTxnStateError
from stratalog.v1 import transaction_markers_pb2 as pb
from stratalog.v1 import transaction_markers_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from stratalog.server.transaction_service import LeaderCalls

__all__ = ["PARTITIONS_PER_CALL_MAX", "TransactionMarkersService"]

#: Most partitions one WriteTxnMarkers or AllowTxnAppends may name (a transaction holds at most
#: transaction_partitions_max, 1,000 by default, all possibly on one leader).
PARTITIONS_PER_CALL_MAX = 10_000

_E = pb.TxnPartitionError
# What the leader side raised, as the proto's per-partition error (the first match wins).
_ERRORS: tuple[tuple[type[BaseException], int], ...] = (
    (cluster_errors.NotLeaderOrFollowerError, _E.TXN_PARTITION_ERROR_NOT_LEADER),
    (cluster_errors.LeaderNotAvailableError, _E.TXN_PARTITION_ERROR_NOT_LEADER),
    (storage_errors.UnknownTopicOrPartitionError, _E.TXN_PARTITION_ERROR_UNKNOWN_PARTITION),
    (storage_errors.TransactionCoordinatorFencedError,
     _E.TXN_PARTITION_ERROR_COORDINATOR_FENCED),
    (storage_errors.InvalidProducerEpochError, _E.TXN_PARTITION_ERROR_PRODUCER_EPOCH_NEWER),
    (InvalidTxnStateError, _E.TXN_PARTITION_ERROR_INVALID_TXN_STATE),
)


class TransactionMarkersService(pb_grpc.TransactionMarkersServicer):
    """transaction_markers.proto's service over the runtime's leader side (``calls``, set once
    the server joined), for the callers ``identity`` admits."""

    def __init__(self, identity: BrokerIdentity) -> None:
        self._identity = identity
        #: Set by app.py in cluster mode, once the transaction runtime exists.
        self.calls: LeaderCalls | None = None

    async def WriteTxnMarkers(
        self, request: pb.WriteTxnMarkersRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteTxnMarkersResponse:
        try:
            calls = self._admit(request.partitions, context)
            results = await asyncio.gather(*(
                _result(item, calls.write_marker_here(Marker(
                    item.topic, item.partition, request.producer_id, request.producer_epoch,
                    request.coordinator_epoch, request.commit)) if calls is not None else None)
                for item in request.partitions))
            return pb.WriteTxnMarkersResponse(results=results)
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as exc:
            await status.abort_with_error(context, exc)

    async def AllowTxnAppends(
        self, request: pb.AllowTxnAppendsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllowTxnAppendsResponse:
        try:
            calls = self._admit(request.partitions, context)
            results = []
            for item in request.partitions:
                try:
                    if calls is None:
                        raise cluster_errors.NotLeaderOrFollowerError(item.topic, item.partition)
                    calls.allow_here(item.topic, item.partition, request.producer_id,
                                     request.producer_epoch)
                    results.append(_answer(item, None))
                except Exception as exc:
                    results.append(_answer(item, exc))
            return pb.AllowTxnAppendsResponse(results=results)
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as exc:
            await status.abort_with_error(context, exc)

    async def VerifyTxnAppend(
        self, request: pb.VerifyTxnAppendRequest, context: grpc.aio.ServicerContext
    ) -> pb.VerifyTxnAppendResponse:
        try:
            calls = self._admit((), context)
            item = request.partition
            try:
                if calls is None:
                    raise CoordinatorNotAvailableError("this server has not joined its cluster")
                calls.verify_here(request.transactional_id, request.producer_id,
                                  request.producer_epoch, item.topic, item.partition)
                result = _answer(item, None)
            except Exception as exc:
                result = _answer(item, exc)
            return pb.VerifyTxnAppendResponse(result=result)
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as exc:
            await status.abort_with_error(context, exc)

    def _admit(self, partitions: object, context: grpc.aio.ServicerContext) -> LeaderCalls | None:
        """The caller is a server of the cluster, and the request is not oversized."""
        self._identity.check_caller(call_identity(context).principal)
        count = len(partitions)  # type: ignore[arg-type]
        if count > PARTITIONS_PER_CALL_MAX:
            raise BadRequestError(
                "partitions", f"{count} partitions exceed {PARTITIONS_PER_CALL_MAX} per call")
        return self.calls


async def _result(item: pb.TxnPartition, write: object) -> pb.TxnPartitionResult:
    try:
        if write is None:
            raise cluster_errors.NotLeaderOrFollowerError(item.topic, item.partition)
        await write  # type: ignore[misc]
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return _answer(item, exc)
    return _answer(item, None)


def _answer(item: pb.TxnPartition, exc: BaseException | None) -> pb.TxnPartitionResult:
    partition = pb.TxnPartition(topic=item.topic, partition=item.partition)
    if exc is None:
        return pb.TxnPartitionResult(partition=partition)
    error = next((code for kind, code in _ERRORS if isinstance(exc, kind)),
                 _E.TXN_PARTITION_ERROR_RETRIABLE)
    return pb.TxnPartitionResult(partition=partition, error=error, error_message=str(exc))
