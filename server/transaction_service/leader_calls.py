"""A cluster's transaction coordinators and the partitions' leaders: the two calls between them,
both sides.

The coordinator side finds a partition's leader in the cluster view and either acts here (it is
this server) or calls that server's TransactionMarkers service
(proto/stratalog/v1/transaction_markers.proto) over the peer channels
(server/cluster/peer_channels.py, secured as replication is)::

    send_marker(marker)         a COMMIT/ABORT marker for one partition (the marker channel's
                                ``send``): write_marker_here, or WriteTxnMarkers to the leader
    allow_appends(pid, e, ps)   the partitions joined pid's transaction at epoch e: allow_here
                                for each, or AllowTxnAppends to each leader (in parallel)

and the one call the other way, a partition leader's question (append_verifier.py)::

    ask_coordinator(node, t, pid, e, p)   VerifyTxnAppend to t's coordinator on ``node``: is
                                          p in t's Ongoing transaction at pid/e?
    verify_here(t, pid, e, p)             the coordinator's answer (the servicer's side;
                                          ClusterTransactions.verify_in_transaction)

The leader side, here or behind the servicer (server/rpc/transaction_markers_service.py)::

    write_marker_here(marker)   the permission ends (verified_partitions.py), then the marker is
                                written through the serving layer exactly as on one server
                                (``ReplicaManager.write_txn_markers``: leader check, leader
                                epoch, fsync, readers woken; ``__consumer_offsets`` markers told to
                                its group coordinator)
    allow_here(topic, p, pid, e)  this server must lead the partition now; the permission is
                                  kept until the marker

A remote answer's per-partition :class:`TxnPartitionError` becomes the exception the local call
would have raised (:func:`raise_partition_error`), so the marker channel judges both alike.

Every remote call waits at most :data:`LEADER_CALL_TIMEOUT_S`. Concurrency: event-loop only;
the local marker write runs in the executor (it fsyncs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import TYPE_CHECKING

import grpc.aio

from stratalog.server.cluster.errors import NotLeaderOrFollowerError
from stratalog.server.storage.errors import (
    InvalidProducerEpochError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.transactions import CoordinatorNotAvailableError, InvalidTxnStateError
from stratalog.server.transactions.transaction_metadata import TopicPartition
from stratalog.v1 import transaction_markers_pb2 as pb
from stratalog.v1 import transaction_markers_pb2_grpc as pb_grpc

from .marker_channel import Marker
from .verified_partitions import VerifiedPartitions

if TYPE_CHECKING:
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.cluster.node import ClusterNode
    from stratalog.server.cluster.peer_channels import PeerChannels

__all__ = ["LEADER_CALL_TIMEOUT_S", "LeaderCalls", "raise_partition_error"]

#: The longest one WriteTxnMarkers or AllowTxnAppends call to another server may take.
LEADER_CALL_TIMEOUT_S = 10.0

_E = pb.TxnPartitionError


class LeaderCalls:
    """Both sides of the coordinator-to-leader calls (module docstring). Holds the serving
    layer, the executor, this server's permissions and, once joined, the node and the peer
    channels."""

    def __init__(self, replica_manager: ReplicaManager, executor: Executor,
                 verified: VerifiedPartitions,
                 verify_in_transaction: Callable[[str, int, int, str, int], None]) -> None:
        """``verify_in_transaction(t, pid, e, topic, p)``: the coordinators' answer to a
        leader's question (returns: yes; raises: no, or cannot say)."""
        self._replicas = replica_manager
        self._executor = executor
        self.verified = verified
        self.verify_here = verify_in_transaction
        #: Set once the server joined its cluster (app.py).
        self.peers: PeerChannels | None = None

    # ---------------------------------------------------------------- the coordinator's side

    def _node(self) -> ClusterNode:
        node = self._replicas.cluster_node
        if node is None:
            raise CoordinatorNotAvailableError("this server has not joined its cluster yet")
        return node

    def _leader(self, topic: str, partition: int) -> int:
        """The partition's leader in the cluster view (this server's id for a topic that is
        not replicated)."""
        node = self._node()
        versioned = node.view.state(topic, partition)
        if versioned is None:
            # Not in the cluster's topics: a local topic of this server (served as on one
            # server), or none (get_log raises UnknownTopicOrPartitionError).
            self._replicas.log_manager.get_log(topic, partition)
            return node.node_id
        if not versioned.state.has_leader:
            raise NotLeaderOrFollowerError(topic, partition)
        return int(versioned.state.leader)

    def _stub(self, node_id: int) -> pb_grpc.TransactionMarkersStub:
        node = self._node()
        peers = self.peers
        broker = node.membership.brokers.get(node_id)
        if peers is None or broker is None:
            raise CoordinatorNotAvailableError(
                f"node {node_id}, a partition's leader, is not live (or this server has no"
                " channels to its peers yet): retry")
        channel = peers.channel(broker.address, lambda: {
            b.address for b in node.membership.brokers.values()})
        return pb_grpc.TransactionMarkersStub(channel)

    async def send_marker(self, marker: Marker) -> None:
        """Write ``marker`` at its partition's leader (here, or over WriteTxnMarkers).

        Raises:
            UnknownTopicOrPartitionError: the partition is gone.
            TransactionCoordinatorFencedError: a newer coordinator wrote for the producer.
            anything else: retry (no leader, the leader is down or changed, a timeout).
        """
        leader = self._leader(marker.topic, marker.partition)
        if leader == self._node().node_id:
            await self.write_marker_here(marker)
            return
        request = pb.WriteTxnMarkersRequest(
            producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch, commit=marker.commit,
            partitions=[pb.TxnPartition(topic=marker.topic, partition=marker.partition)])
        answer = await self._call(leader, "WriteTxnMarkers", request)
        for result in answer.results:
            raise_partition_error(result)

    async def allow_appends(self, producer_id: int, producer_epoch: int,
                            partitions: Iterable[TopicPartition]) -> None:
        """Tell each partition's leader that ``producer_id`` at ``producer_epoch`` may append
        to it (module docstring); every leader at once, one call each.

        Raises:
            CoordinatorNotAvailableError: a leader could not be told (the first failure named).
        """
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, partition in partitions:
            try:
                leader = self._leader(topic, partition)
            except Exception as exc:
                raise CoordinatorNotAvailableError(
                    f"{topic}-{partition} cannot be told it joined the transaction of producer"
                    f" {producer_id}: {exc}") from exc
            by_leader.setdefault(leader, []).append((topic, partition))
        own = self._node().node_id
        calls = [self._allow_at(leader, producer_id, producer_epoch, items, own)
                 for leader, items in sorted(by_leader.items())]
        results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                raise CoordinatorNotAvailableError(
                    f"a partition's leader could not be told that producer {producer_id} (epoch"
                    f" {producer_epoch}) added it to its transaction: {result}; retry"
                ) from result

    async def _allow_at(self, leader: int, producer_id: int, producer_epoch: int,
                        partitions: list[TopicPartition], own: int) -> None:
        if leader == own:
            for topic, partition in partitions:
                self.allow_here(topic, partition, producer_id, producer_epoch)
            return
        request = pb.AllowTxnAppendsRequest(
            producer_id=producer_id, producer_epoch=producer_epoch,
            partitions=[pb.TxnPartition(topic=t, partition=p) for t, p in partitions])
        answer = await self._call(leader, "AllowTxnAppends", request)
        for result in answer.results:
            raise_partition_error(result)

    async def ask_coordinator(self, node_id: int, transactional_id: str, producer_id: int,
                              producer_epoch: int, topic: str, partition: int) -> None:
        """Ask ``node_id``, the coordinator of ``transactional_id``, whether the partition is
        in its Ongoing transaction at ``producer_id``/``producer_epoch`` (VerifyTxnAppend).

        Raises:
            InvalidTxnStateError: it is not. InvalidProducerEpochError: the producer is fenced.
            anything else: no answer (retriable).
        """
        request = pb.VerifyTxnAppendRequest(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch,
            partition=pb.TxnPartition(topic=topic, partition=partition))
        answer = await self._call(node_id, "VerifyTxnAppend", request)
        raise_partition_error(answer.result)  # type: ignore[attr-defined]

    async def _call(self, leader: int, method: str, request: object) -> object:
        stub = self._stub(leader)
        assert self.peers is not None
        try:
            return await getattr(stub, method)(request, timeout=LEADER_CALL_TIMEOUT_S,
                                               metadata=self.peers.call_metadata)
        except grpc.aio.AioRpcError as exc:
            raise CoordinatorNotAvailableError(
                f"{method} to node {leader} failed: {exc.code().name}: {exc.details()}"
            ) from None

    # ---------------------------------------------------------------- the leader's side

    async def write_marker_here(self, marker: Marker) -> None:
        """End the producer's permission at the partition, then write the marker through the
        serving layer (module docstring). Raises what ``write_txn_markers`` raises."""
        self.verified.end(marker.topic, marker.partition, marker.producer_id)
        await asyncio.get_running_loop().run_in_executor(
            self._executor, self._replicas.write_txn_markers, marker.topic, marker.partition,
            marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.commit)

    def allow_here(self, topic: str, partition: int, producer_id: int,
                   producer_epoch: int) -> None:
        """Keep the permission, if this server leads the partition now.

        Raises:
            NotLeaderOrFollowerError, LeaderNotAvailableError: it does not.
            UnknownTopicOrPartitionError: no such partition here.
            CoordinatorNotAvailableError: too many permissions held.
        """
        self._replicas.leader(topic, partition)
        self._replicas.log_manager.get_log(topic, partition)
        self.verified.allow(topic, partition, producer_id, producer_epoch)


def raise_partition_error(result: pb.TxnPartitionResult) -> None:
    """Raise what a leader's per-partition answer means here (nothing for NONE)."""
    error = result.error
    if error == _E.TXN_PARTITION_ERROR_NONE:
        return
    topic, partition = result.partition.topic, result.partition.partition
    message = f"{topic}-{partition}: {result.error_message}"
    if error == _E.TXN_PARTITION_ERROR_NOT_LEADER:
        raise NotLeaderOrFollowerError(topic, partition)
    if error == _E.TXN_PARTITION_ERROR_UNKNOWN_PARTITION:
        raise UnknownTopicOrPartitionError(message)
    if error == _E.TXN_PARTITION_ERROR_COORDINATOR_FENCED:
        raise TransactionCoordinatorFencedError(message, producer_id=-1)
    if error == _E.TXN_PARTITION_ERROR_PRODUCER_EPOCH_NEWER:
        raise InvalidProducerEpochError(message, producer_id=-1)
    if error == _E.TXN_PARTITION_ERROR_INVALID_TXN_STATE:
        raise InvalidTxnStateError(message)
    raise CoordinatorNotAvailableError(message)
