"""client.session: requests and answers by id, deadlines, a broken stream, the wire format.

The server side here is a scripted Session handler on a real grpc.aio server on 127.0.0.1: it
answers in the order a test asks, or never, or ends the stream, which the real server
(tests/integration/test_session.py) cannot be made to do on cue.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc
import grpc.aio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.client import Client
from stratalog.client.errors import (
    BrokerUnavailableError,
    RequestTimeoutError,
    StratalogError,
    UnknownTopicOrPartitionError,
)
from stratalog.client.session import (
    ClientSession,
    parse_session_response,
    session_request,
)
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

FETCH = pb.SessionRequest.FETCH_BY_OFFSET_FIELD_NUMBER


class ScriptedBroker(broker_pb2_grpc.BrokerServicer):
    """A Session handler that collects requests and does what ``script`` says with them."""

    def __init__(self, script: Callable[[list[pb.SessionRequest], grpc.aio.ServicerContext],
                                        object]) -> None:
        self.script = script

    async def Session(self, request_iterator, context):
        await context.send_initial_metadata(())
        received: list[pb.SessionRequest] = []
        async for request in request_iterator:
            received.append(request)
            await self.script(received, context)


async def _serve(script) -> AsyncIterator[str]:  # type: ignore[no-untyped-def]
    server = grpc.aio.server()
    broker_pb2_grpc.add_BrokerServicer_to_server(ScriptedBroker(script), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def _fetch_answer(request: pb.SessionRequest) -> pb.SessionResponse:
    return pb.SessionResponse(id=request.id, fetch=pb.FetchResponse(
        topic=request.fetch_by_offset.topic, next_offset=request.fetch_by_offset.offset))


@pytest.fixture
async def reversing() -> AsyncIterator[str]:
    """Answers every two requests, the second first."""

    async def script(received, context):  # type: ignore[no-untyped-def]
        if len(received) % 2 == 0:
            for request in reversed(received[-2:]):
                await context.write(_fetch_answer(request))

    async for target in _serve(script):
        yield target


async def test_answers_reach_their_requests_by_id_in_any_order(reversing) -> None:
    async with Client(reversing) as client:
        first = asyncio.ensure_future(client.fetch_by_offset("t", 0, 1))
        second = asyncio.ensure_future(client.fetch_by_offset("t", 0, 2))
        assert (await first).next_offset == 1 and (await second).next_offset == 2


@pytest.fixture
async def silent() -> AsyncIterator[str]:
    async def script(received, context):  # type: ignore[no-untyped-def]
        if received[-1].fetch_by_offset.topic == "fail":
            await context.write(pb.SessionResponse(id=received[-1].id, error=pb.SessionError(
                code=grpc.StatusCode.NOT_FOUND.value[0], message="no such topic",
                reason=pb.UNKNOWN_TOPIC_OR_PARTITION, metadata={"topic": "fail"})))
        if received[-1].fetch_by_offset.topic == "end":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")

    async for target in _serve(script):
        yield target


async def test_a_deadline_fails_one_request_and_the_session_goes_on(silent) -> None:
    async with Client(silent) as client:
        with pytest.raises(RequestTimeoutError) as caught:
            await client.fetch_by_offset("t", 0, 0, timeout_s=0.1)
        assert caught.value.retriable
        error = await asyncio.gather(client.fetch_by_offset("fail", 0, 0),
                                     return_exceptions=True)
        assert isinstance(error[0], UnknownTopicOrPartitionError)
        assert error[0].metadata == {"topic": "fail"} and error[0].message == "no such topic"


async def test_a_broken_stream_fails_what_is_in_flight_retriably_then_reopens(silent) -> None:
    async with Client(silent) as client:
        waiting = asyncio.ensure_future(client.fetch_by_offset("t", 0, 0))
        await asyncio.sleep(0)
        with pytest.raises(BrokerUnavailableError) as caught:
            await client.fetch_by_offset("end", 0, 0)
        assert caught.value.retriable
        with pytest.raises(BrokerUnavailableError):
            await waiting
        # The next request opens a new stream.
        with pytest.raises(UnknownTopicOrPartitionError):
            await client.fetch_by_offset("fail", 0, 0)


async def test_a_closed_client_fails_its_requests_in_flight(silent) -> None:
    client = Client(silent)
    waiting = asyncio.ensure_future(client.fetch_by_offset("t", 0, 0))
    await asyncio.sleep(0.05)
    await client.close()
    with pytest.raises(StratalogError) as caught:
        await waiting
    assert caught.value.retriable


async def test_a_cancelled_caller_leaves_nothing_pending(silent) -> None:
    async with grpc.aio.insecure_channel(silent) as channel:
        session = ClientSession(channel, None)
        call = asyncio.ensure_future(session.request(FETCH, b"", None))
        for _ in range(1000):  # until the request is sent (bounded: 5 s)
            if session.pending:
                break
            await asyncio.sleep(0.005)
        assert session.pending == 1
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert session.pending == 0
        await session.close()


@given(request_id=st.integers(1, 2**64 - 1), topic=st.text(max_size=20),
       timestamp=st.integers(-3, 2**63 - 1), field=st.sampled_from([2, 3, 4, 5]))
def test_the_wire_format_is_protobufs(request_id: int, topic: str, timestamp: int,
                                      field: int) -> None:
    inner = pb.ListOffsetsRequest(topic=topic, timestamp=timestamp)
    expected = pb.SessionRequest(id=request_id)
    member = pb.SessionRequest.DESCRIPTOR.fields_by_number[field].name
    getattr(expected, member).MergeFromString(inner.SerializeToString())
    assert session_request(request_id, field, inner.SerializeToString()) == (
        expected.SerializeToString())
    answer = pb.SessionResponse(id=request_id, list_offsets=pb.ListOffsetsResponse(
        offset=timestamp))
    parsed_id, parsed_field, view = parse_session_response(answer.SerializeToString())
    assert (parsed_id, parsed_field) == (request_id, 4)
    assert pb.ListOffsetsResponse.FromString(view) == answer.list_offsets


def test_an_answer_of_another_shape_is_read_as_protobuf_reads_it() -> None:
    # Fields out of the server's order (the answer first, then the id): protobuf's reading.
    answer = pb.ListOffsetsResponse(offset=5).SerializeToString()
    data = bytes([4 << 3 | 2, len(answer)]) + answer + b"\x08\x07"
    request_id, field, view = parse_session_response(data)
    assert (request_id, field) == (7, 4)
    assert pb.ListOffsetsResponse.FromString(view).offset == 5
