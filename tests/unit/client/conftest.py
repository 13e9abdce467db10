"""A recording Broker for the client's unit tests: a real grpc.aio server on 127.0.0.1:0.

It is not the stratalog server (that one is exercised by tests/integration/): it keeps each
partition as the list of batches it received, byte for byte, so the tests can hand them to an
independent Kafka reader (kafka-python) and count them; and it can be told to fail the next
Produce calls, before or after appending, with the same statuses the real server sends (built by
``stratalog.server.rpc.status``), which a real server cannot be made to do on cue. It hands out
producer ids (InitProducerId) but keeps no producer state: it stores what it gets, duplicates
and all, so the batches' producer fields can be checked here and the server's judgement of them
is tested against the real server.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from stratalog.records import iter_batch_headers, set_base_offset, validate_batch
from stratalog.server.rpc import status
from stratalog.server.storage import errors as storage_errors
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc


@dataclasses.dataclass
class Failure:
    """What the next Produce does instead of succeeding."""

    error: BaseException | grpc.StatusCode
    after_append: bool = False  # append first, then fail: the client cannot tell


class RecordingBroker(broker_pb2_grpc.BrokerServicer):
    """Topics with partition counts; per partition the batches received, with their offsets."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = dict(topics)
        self.logs: dict[tuple[str, int], list[bytes]] = collections.defaultdict(list)
        self.log_end: dict[tuple[str, int], int] = collections.defaultdict(int)
        self.failures: collections.deque[Failure] = collections.deque()
        self.produce_calls = 0
        self.gate: asyncio.Event | None = None  # when set to an unset Event, Produce waits on it
        self.log_append_time = -1  # >= 0: answer as a LogAppendTime topic would
        self.init_producer_id_calls = 0
        self.init_failures: collections.deque[BaseException | grpc.StatusCode] = (
            collections.deque()
        )

    def records(self, topic: str, partition: int) -> int:
        return self.log_end[(topic, partition)]

    async def _fail(self, context: grpc.aio.ServicerContext, error: object) -> None:
        if isinstance(error, grpc.StatusCode):
            await context.abort(error, "injected transport-level failure")
        await context.abort_with_status(status.to_status(error))  # type: ignore[arg-type]

    async def Session(self, request_iterator, context):
        # As a server without the Session RPC answers (gRPC's "Method not found!"): the client
        # sends its requests as unary calls, which this broker records.
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    async def DescribeTopic(self, request, context):
        if request.name not in self.topics:
            await self._fail(
                context, storage_errors.UnknownTopicOrPartitionError(f"no topic {request.name}")
            )
        return pb.DescribeTopicResponse(
            topic=pb.TopicDescription(
                name=request.name,
                partitions=[
                    pb.PartitionDescription(partition=p, max_timestamp=-1)
                    for p in range(self.topics[request.name])
                ],
            )
        )

    async def InitProducerId(self, request, context):
        self.init_producer_id_calls += 1
        if self.init_failures:
            await self._fail(context, self.init_failures.popleft())
        return pb.InitProducerIdResponse(producer_id=1000 + self.init_producer_id_calls)

    async def Produce(self, request, context):
        self.produce_calls += 1
        if self.gate is not None:
            await self.gate.wait()
        failure = self.failures.popleft() if self.failures else None
        if failure is not None and not failure.after_append:
            await self._fail(context, failure.error)
        if request.topic not in self.topics or request.partition >= self.topics[request.topic]:
            await self._fail(context, storage_errors.UnknownTopicOrPartitionError("no partition"))
        key = (request.topic, request.partition)
        data = bytearray(request.record_batches)
        base_offset = next_offset = self.log_end[key]
        count = 0
        for header in list(iter_batch_headers(data)):
            validate_batch(data, header.position)
            set_base_offset(data, header.position, next_offset)
            self.logs[key].append(bytes(data[header.position : header.end_position]))
            next_offset += header.records_count
            count += header.records_count
        self.log_end[key] = next_offset
        if failure is not None:
            await self._fail(context, failure.error)
        return pb.ProduceResponse(
            base_offset=base_offset, last_offset=next_offset - 1,
            log_append_time=self.log_append_time,
            record_count=count,
        )


@pytest.fixture
async def broker() -> AsyncIterator[tuple[RecordingBroker, str]]:
    servicer = RecordingBroker({"events": 1, "multi": 4})
    server = grpc.aio.server(
        options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    )
    broker_pb2_grpc.add_BrokerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)
