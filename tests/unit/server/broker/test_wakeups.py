"""Every writer wakes the partition's waiting readers through the serving layer.

A long poll and a Subscribe stream wait at the end of a partition, in-process over a real
LogManager, serving layer, transaction coordinator and servicer; each writer in turn writes to
the partition: a client produce, a transaction marker (the coordinator's pool thread), a
cleaner swap (a cleaning's thread). The event both readers took before their read must be set
by the write; where the write gives them something to read, they answer it. (The fourth writer,
a follower's append, needs a cluster: tests/cluster/test_replication.py's
``test_a_followers_append_wakes_the_leaders_long_poll_and_subscribe``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import grpc
import pytest

from stratalog.server.broker import Partition, ReplicaManager
from stratalog.server.client_limits import ClientLimits
from stratalog.server.metrics import ServerMetrics
from stratalog.server.rpc.decoding import ProduceRequestView
from stratalog.server.rpc.service import BrokerService
from stratalog.server.settings import Settings
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.transactions import TransactionCoordinator
from stratalog.v1 import broker_pb2 as pb

#: Bounds of the waits below: a wake-up is immediate; these only end a broken test.
WAIT_S = 10.0


class _Context:
    """What the servicer uses of a grpc.aio.ServicerContext: the peer, the stream's writes
    (kept), and the status of an abort."""

    def __init__(self) -> None:
        self.messages: list[pb.FetchResponse] = []
        self.status: grpc.Status | None = None

    def peer(self) -> str:
        return "ipv4:10.0.0.1:5000"

    async def write(self, message: bytes) -> None:
        self.messages.append(pb.FetchResponse.FromString(message))

    async def abort_with_status(self, status: grpc.Status) -> None:
        self.status = status
        raise grpc.aio.AbortError()

    def cancelled(self) -> bool:
        return False  # the client never cancels here


class Broker(NamedTuple):
    service: BrokerService
    replicas: ReplicaManager
    limits: ClientLimits
    log_manager: LogManager


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    # A small offset map: the default (128 MiB) takes seconds to allocate.
    log_manager = LogManager.open([tmp_path / "data"],
                                  defaults={"log.cleaner.dedupe.buffer.size": "65536"})
    executor = ThreadPoolExecutor(2)
    settings, metrics = Settings(), ServerMetrics()
    replicas = ReplicaManager(log_manager, settings, metrics, executor)
    coordinator = TransactionCoordinator.open(log_manager.log_dirs, replicas.write_txn_markers)
    replicas.verify_transactions_with(coordinator)
    limits = ClientLimits(100, 100, 100, metrics)
    service = BrokerService(replicas, settings, metrics, executor, coordinator=coordinator,
                            limits=limits)
    try:
        yield Broker(service, replicas, limits, log_manager)
    finally:
        replicas.begin_shutdown()
        coordinator.close()
        executor.shutdown()
        log_manager.close()


class Readers(NamedTuple):
    long_poll: asyncio.Task[pb.FetchResponse]
    subscriber: _Context
    stream: asyncio.Task[None]
    signal: asyncio.Event  # the event both wait on


async def _until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    """Wait for ``condition`` (checked each time the loop comes round), at most WAIT_S."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.001)


async def _waiting_readers(broker: Broker, topic: str, offset: int,
                           isolation: int = pb.READ_UNCOMMITTED) -> Readers:
    """A long poll and a Subscribe stream at ``offset``, both waiting for a write."""
    before = broker.limits.total
    long_poll = asyncio.create_task(broker.service.FetchByOffset(pb.FetchByOffsetRequest(
        topic=topic, offset=offset, max_wait_ms=60_000, isolation_level=isolation,
        format=pb.FETCH_FORMAT_RECORDS), _Context()))
    subscriber = _Context()
    stream = asyncio.create_task(broker.service.Subscribe(pb.SubscribeRequest(
        topic=topic, offset=offset, isolation_level=isolation,
        format=pb.FETCH_FORMAT_RECORDS), subscriber))
    # Each is counted as a waiting RPC with no suspension between that and its wait (its
    # read at the log end runs on the loop): counted means waiting.
    await _until(lambda: broker.limits.total == before + 2, "both readers waiting")
    _, partition = broker.replicas.get_partition(topic, 0)
    return Readers(long_poll, subscriber, stream, partition.signal())


async def _stop(readers: Readers) -> None:
    """End the Subscribe stream (the long poll has answered)."""
    assert readers.long_poll.done()
    readers.stream.cancel()
    await asyncio.gather(readers.stream, return_exceptions=True)


def _partition(broker: Broker, topic: str) -> Partition:
    return broker.replicas.get_partition(topic, 0)[1]


async def test_a_client_produce_wakes_a_long_poll_and_a_subscribe(broker: Broker) -> None:
    broker.log_manager.create_topic("t", 1, {})
    readers = await _waiting_readers(broker, "t", 0)
    await broker.service.Produce(ProduceRequestView.of_message(pb.ProduceRequest(
        topic="t", records=[pb.Record(value=b"a")])), None)
    assert readers.signal.is_set()
    answer = await asyncio.wait_for(readers.long_poll, WAIT_S)
    assert [r.value for r in answer.records] == [b"a"]
    await _until(lambda: readers.subscriber.messages, "the Subscribe's message")
    assert [r.value for r in readers.subscriber.messages[0].records] == [b"a"]
    await _stop(readers)


async def test_a_transaction_marker_wakes_read_committed_readers(broker: Broker) -> None:
    broker.log_manager.create_topic("t", 1, {})
    service = broker.service
    producer = await service.InitProducerId(
        pb.InitProducerIdRequest(transactional_id="tx"), None)
    ids = {"transactional_id": "tx", "producer_id": producer.producer_id,
           "producer_epoch": producer.producer_epoch}
    await service.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
        partitions=[pb.TopicPartition(topic="t", partition=0)], **ids), None)
    await service.Produce(ProduceRequestView.of_message(pb.ProduceRequest(
        topic="t", records=[pb.Record(value=b"a")], producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch, base_sequence=0, transactional=True)), None)
    # READ_COMMITTED readers stop at the LSO (0 while the transaction is open): they wait.
    readers = await _waiting_readers(broker, "t", 0, pb.READ_COMMITTED)
    assert not readers.signal.is_set()
    # The commit marker is written from a pool thread; its readers wake on the loop.
    await service.EndTxn(pb.EndTxnRequest(commit=True, **ids), None)
    answer = await asyncio.wait_for(readers.long_poll, WAIT_S)
    assert readers.signal.is_set()
    assert [r.value for r in answer.records] == [b"a"]
    await _until(lambda: readers.subscriber.messages, "the Subscribe's message")
    assert [r.value for r in readers.subscriber.messages[0].records] == [b"a"]
    await _stop(readers)


async def test_a_cleaner_swap_wakes_a_long_poll_and_a_subscribe(broker: Broker) -> None:
    broker.log_manager.create_topic("c", 1, {"cleanup.policy": "compact",
                                              "segment.bytes": "1000"})
    for round_ in range(6):
        for key in (b"k1", b"k2"):
            await broker.service.Produce(ProduceRequestView.of_message(pb.ProduceRequest(
                topic="c", records=[pb.Record(key=key, value=b"v" * 200 + bytes([round_]))])),
                None)
    end = broker.log_manager.get_log("c", 0).log_end_offset
    readers = await _waiting_readers(broker, "c", end)
    result = await broker.service.CleanPartition(pb.CleanPartitionRequest(topic="c"), None)
    assert result.records_kept < result.records_read  # segments were swapped
    # The cleaning's thread hands the wake-up to the loop.
    await _until(readers.signal.is_set, "the readers woken by the swap")
    # Nothing new to read there: both wait on, at the same offset. The next record is the
    # first either of them answers.
    await broker.service.Produce(ProduceRequestView.of_message(pb.ProduceRequest(
        topic="c", records=[pb.Record(key=b"k3", value=b"new")])), None)
    answer = await asyncio.wait_for(readers.long_poll, WAIT_S)
    assert [(r.offset, r.value) for r in answer.records] == [(end, b"new")]
    await _until(lambda: readers.subscriber.messages, "the Subscribe's message")
    assert [(r.offset, r.value) for r in readers.subscriber.messages[0].records] == [
        (end, b"new")]
    await _stop(readers)
