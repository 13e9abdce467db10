"""The transaction RPCs of the Broker service: InitProducerId, AddPartitionsToTxn, EndTxn and
DescribeTransaction, each one call to the transaction coordinator (server/transactions/) in the
executor: its requests fsync its state log and write markers (through the serving layer).

Concurrency: event-loop only.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from stratalog.server.rpc.requests import RpcBase, producer_of, rpc_method, transactional_id_of
from stratalog.server.rpc.translation import BadRequestError
from stratalog.server.transactions import DEFAULT_TRANSACTION_TIMEOUT_MS
from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from stratalog.server.transactions import TransactionMetadata

__all__ = ["TransactionRpcs"]


class TransactionRpcs(RpcBase):
    """The transaction RPCs (module docstring)."""

    @rpc_method()
    async def InitProducerId(
        self, request: broker_pb2.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.InitProducerIdResponse:
        transactional_id: str | None = None
        if request.HasField("transactional_id"):
            if not request.transactional_id:
                raise BadRequestError(
                    "transactional_id",
                    "must not be empty; leave it unset for an idempotent producer",
                )
            transactional_id = request.transactional_id
        # 0 is proto3's unset: Kafka's producer default. A negative timeout is the
        # coordinator's to refuse (INVALID_TRANSACTION_TIMEOUT, with the allowed range). In
        # cluster mode a transactional id is its state partition's leader's to serve
        # (NOT_COORDINATOR elsewhere), and idempotent producers get cluster-wide ids
        # (server/transaction_service/, server/transactions/producer_ids.py).
        timeout_ms = request.transaction_timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS
        producer = await self._blocking(
            self._coordinator.init_producer_id, transactional_id, timeout_ms
        )
        producer_id = producer.producer_id
        return broker_pb2.InitProducerIdResponse(
            producer_id=producer_id, producer_epoch=producer.producer_epoch
        )

    @rpc_method()
    async def AddPartitionsToTxn(
        self, request: broker_pb2.AddPartitionsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AddPartitionsToTxnResponse:
        transactional_id = transactional_id_of(request.transactional_id)
        producer_id, producer_epoch = producer_of(request.producer_id, request.producer_epoch)
        count = len(request.partitions)
        if not count:
            raise BadRequestError("partitions", "add at least one partition")
        limit = self._settings.transaction_partitions_max
        if count > limit:
            raise BadRequestError(
                "partitions", f"{count} partitions exceed transaction_partitions_max={limit}"
            )
        partitions = []
        for index, item in enumerate(request.partitions):
            topic = self._topic(item.topic, f"partitions[{index}].topic")
            if item.partition < 0:
                raise BadRequestError(
                    f"partitions[{index}].partition", f"must be >= 0, got {item.partition}"
                )
            # Only existing partitions join a transaction (Kafka answers
            # UNKNOWN_TOPIC_OR_PARTITION): a marker could never be written to another.
            self._replicas.check_partition_exists(topic, item.partition)
            partitions.append((topic, item.partition))
        await self._blocking(
            self._coordinator.add_partitions_to_txn,
            transactional_id, producer_id, producer_epoch, partitions,
        )
        return broker_pb2.AddPartitionsToTxnResponse()

    @rpc_method()
    async def EndTxn(
        self, request: broker_pb2.EndTxnRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.EndTxnResponse:
        transactional_id = transactional_id_of(request.transactional_id)
        producer_id, producer_epoch = producer_of(request.producer_id, request.producer_epoch)
        # The markers are written (and their partitions' readers woken) before this returns.
        await self._blocking(
            functools.partial(self._coordinator.end_txn, commit=request.commit),
            transactional_id, producer_id, producer_epoch,
        )
        return broker_pb2.EndTxnResponse()

    @rpc_method()
    async def DescribeTransaction(
        self, request: broker_pb2.DescribeTransactionRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeTransactionResponse:
        transactional_id = transactional_id_of(request.transactional_id)
        # In the pool: the state's lock is held across the state log's fsyncs.
        metadata = await self._blocking(self._coordinator.describe_transaction, transactional_id)
        return _transaction_message(metadata)


def _transaction_message(
    metadata: TransactionMetadata,
) -> broker_pb2.DescribeTransactionResponse:
    """The coordinator's metadata of one transactional id as DescribeTransaction answers it,
    with Kafka's state names, the partitions sorted, and no start time when no transaction is
    open (broker.proto's contract; the metadata keeps the last one's)."""
    is_open = not metadata.state.is_complete_or_empty
    return broker_pb2.DescribeTransactionResponse(
        transactional_id=metadata.transactional_id,
        producer_id=metadata.producer_id,
        producer_epoch=metadata.producer_epoch,
        state=metadata.state.kafka_name,
        transaction_timeout_ms=metadata.txn_timeout_ms,
        transaction_start_time_ms=metadata.txn_start_timestamp_ms if is_open else -1,
        last_update_time_ms=metadata.txn_last_update_timestamp_ms,
        partitions=[
            broker_pb2.TopicPartition(topic=topic, partition=partition)
            for topic, partition in sorted(metadata.partitions)
        ],
    )
