"""server/kafka/connection.py's two ways of serving a request, in-process on a real listener
(127.0.0.1:0) over a real ReplicaManager: a request that arrives while the connection is idle
is served in data_received (its coroutine stepped there), one queued behind another by the
connection's task, and a request that suspends in data_received is finished by the task. The
answers are the same bytes either way and always in the order asked; a throttle, a close and
a handler's exception behave the same on both paths.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from stratalog.records import build_batch
from stratalog.server.broker import ReplicaManager
from stratalog.server.client_limits import ClientLimits, WaitingRpcKind
from stratalog.server.group_service import GroupService
from stratalog.server.kafka.apis import registry
from stratalog.server.kafka.context import KafkaServices
from stratalog.server.kafka.listener import KafkaListener
from stratalog.server.metrics import ServerMetrics
from stratalog.server.security.quotas import QuotaConfig, QuotaManager
from stratalog.server.settings import Settings
from stratalog.server.settings_schema import Address

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
LONG_POLL_MS = 300


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    """Wait for ``condition`` (checked each loop iteration: the server runs in this loop)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true"
        await asyncio.sleep(0.001)


async def _listener(tmp_path: Path, quotas: QuotaConfig) -> AsyncIterator[KafkaListener]:
    from stratalog.server.storage.log_manager import LogManager

    log_manager = LogManager.open([tmp_path / "data"])
    executor = ThreadPoolExecutor(2)
    settings = Settings(kafka_listen="127.0.0.1:0")
    metrics = ServerMetrics()
    replicas = ReplicaManager(log_manager, settings, metrics, executor)
    log_manager.create_topic("t", 2)
    log_manager.get_log("t", 0).append(build_batch([(1, None, b"v%d" % i, ()) for i in
                                                   range(10)]))
    groups = GroupService(replicas, settings, executor, metrics=metrics)
    services = KafkaServices(
        replicas, log_manager, groups, None, settings, metrics, executor,  # type: ignore[arg-type]
        ClientLimits(10, 10, 100), QuotaManager(quotas), None,
        advertised=lambda: Address("127.0.0.1", 9092), time_ms=lambda: int(time.time() * 1000))
    listener = KafkaListener(services)
    await listener.start()
    try:
        yield listener
    finally:
        await listener.stop()
        await groups.close()
        replicas.begin_shutdown()
        executor.shutdown()
        log_manager.close()


@pytest.fixture
async def listener(tmp_path: Path) -> AsyncIterator[KafkaListener]:
    async for running in _listener(tmp_path, QuotaConfig()):
        yield running


class Client:
    """Raw frames out, raw answers (correlation id, body bytes) in: nothing decoded that a
    test does not ask for."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, listener: KafkaListener) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", listener.port))

    def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))  # one write: the server reads them together

    async def answer(self) -> tuple[int, bytes]:
        size = _SIZE.unpack(await self.reader.readexactly(4))[0]
        frame = await self.reader.readexactly(size)
        return _CORRELATION.unpack_from(frame)[0], frame

    async def closed(self) -> bool:
        return await self.reader.read(1) == b""

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def _frame(request: Any, version: int, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="connection-test")
    return request.encode(version=version, header=True, framed=True)


def _fetch(offset: int, partition: int = 0, max_wait_ms: int = 0, correlation_id: int = 1
           ) -> bytes:
    fetch_partition = FetchRequest.FetchTopic.FetchPartition(
        partition=partition, current_leader_epoch=-1, fetch_offset=offset,
        last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
    return _frame(FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic="t", partitions=[fetch_partition])],
        forgotten_topics_data=[], rack_id=""), 12, correlation_id)


def _produce(value: bytes, partition: int = 1, correlation_id: int = 1) -> bytes:
    data = ProduceRequest.TopicProduceData.PartitionProduceData(
        index=partition, records=build_batch([(1, None, value, ())]))
    return _frame(ProduceRequest(
        transactional_id=None, acks=1, timeout_ms=30_000,
        topic_data=[ProduceRequest.TopicProduceData(name="t", partition_data=[data])]),
        9, correlation_id)


def _api_versions(correlation_id: int) -> bytes:
    return _frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                  3, correlation_id)


async def test_a_slow_request_then_fast_ones_are_answered_in_order(listener):
    """A long poll (it suspends in data_received and the task finishes it) followed, in the
    same write, by requests that would finish at once: they wait their turn."""
    client = await Client.connect(listener)
    try:
        client.send(_fetch(10, max_wait_ms=LONG_POLL_MS, correlation_id=1),
                    _produce(b"a", correlation_id=2), _api_versions(3), _fetch(0, correlation_id=4))
        ids = [(await client.answer())[0] for _ in range(4)]
        assert ids == [1, 2, 3, 4]
        # Then the connection is idle again: the next request is served in data_received.
        client.send(_produce(b"b", correlation_id=5))
        correlation_id, frame = await client.answer()
        answer = ProduceResponse.decode(frame[5:], version=9)
        assert (correlation_id, answer.responses[0].partition_responses[0].base_offset) == (5, 1)
    finally:
        await client.close()


async def test_the_task_and_data_received_give_the_same_bytes(listener):
    """The same Fetch and ApiVersions requests answered by the task (queued behind a long
    poll) and in data_received (alone on an idle connection): byte for byte the same."""
    client = await Client.connect(listener)
    try:
        client.send(_fetch(10, max_wait_ms=LONG_POLL_MS, correlation_id=1),
                    _fetch(3, correlation_id=7), _api_versions(8))
        await client.answer()
        by_task = [await client.answer(), await client.answer()]
        client.send(_fetch(3, correlation_id=7))
        at_once = [await client.answer()]
        client.send(_api_versions(8))
        at_once.append(await client.answer())
        assert by_task == at_once
        records = FetchResponse.decode(at_once[0][1][5:], version=12).responses[0].partitions[0]
        assert records.error_code == 0 and records.high_watermark == 10
    finally:
        await client.close()


async def test_a_request_after_a_suspended_one_in_a_later_read(listener):
    """A request that arrives while the task finishes a handed-over long poll is queued
    behind it, not served in data_received ahead of it."""
    client = await Client.connect(listener)
    try:
        client.send(_fetch(10, max_wait_ms=LONG_POLL_MS * 3, correlation_id=1))
        await until(lambda: listener.services.limits.count_of(WaitingRpcKind.LONG_POLL) == 1)
        client.send(_api_versions(2))
        assert [(await client.answer())[0] for _ in range(2)] == [1, 2]
    finally:
        await client.close()


async def test_a_throttled_connection_is_muted_on_both_paths(tmp_path):
    """A Produce over the producer quota is answered at once with its throttle time, and
    the request after it is not served before that time has passed."""
    async for listener in _listener(tmp_path, QuotaConfig(producer_byte_rate=2000, window_num=2,
                                                       window_size_ms=100)):
        client = await Client.connect(listener)
        try:
            client.send(_produce(b"x" * 1000, correlation_id=1), _api_versions(2))
            _, frame = await client.answer()
            answered = time.monotonic()
            throttle_ms = ProduceResponse.decode(frame[5:], version=9).throttle_time_ms
            assert 0 < throttle_ms < 5_000
            assert (await client.answer())[0] == 2
            assert time.monotonic() - answered >= throttle_ms / 1000 * 0.9
        finally:
            await client.close()


async def test_a_bad_frame_after_a_good_one_answers_the_first_then_closes(listener):
    client = await Client.connect(listener)
    try:
        bad = struct.pack(">ihhih", 10, 999, 0, 2, 0)  # API key 999: not Kafka's
        client.send(_api_versions(1), bad)
        assert (await client.answer())[0] == 1
        assert await client.closed()
    finally:
        await client.close()


@pytest.mark.parametrize("suspends", [False, True], ids=["at-once", "after-suspending"])
async def test_a_handler_that_raises_closes_the_connection_and_the_listener_goes_on(
        listener, monkeypatch, suspends):
    """A handler's unexpected exception closes its connection (logged), whether it raised in
    data_received or in the task after suspending; other connections are served."""
    served = registry.HANDLERS[ApiKey.ApiVersions]

    async def failing(ctx, request):
        if suspends:
            await asyncio.sleep(0)
        raise RuntimeError("a bug")

    monkeypatch.setitem(registry.HANDLERS, ApiKey.ApiVersions,
                        dataclasses.replace(served, handler=failing))
    client = await Client.connect(listener)
    other = await Client.connect(listener)
    try:
        client.send(_api_versions(1), _fetch(0, correlation_id=2))
        assert await client.closed()
        other.send(_fetch(0, correlation_id=3))
        assert (await other.answer())[0] == 3
    finally:
        await client.close()
        await other.close()


async def test_data_received_called_from_a_task_leaves_the_request_to_the_connections_task(
        listener):
    """The transports call data_received from the loop's callbacks, but a caller inside a
    task (this test) gets the same answer: the step cannot run as the connection's task
    there, so the task serves it."""
    client = await Client.connect(listener)
    try:
        client.send(_api_versions(1))
        assert (await client.answer())[0] == 1
        (connection,) = listener._connections
        connection.data_received(_api_versions(2)[:9])  # in two pieces, the frame's bytes
        connection.data_received(_api_versions(2)[9:])
        assert (await client.answer())[0] == 2
    finally:
        await client.close()
