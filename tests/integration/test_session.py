"""The Session stream against a real server process (issue 14): every request kind answered as
its unary call, errors per request, answers in completion order, the limits, a server restart
mid-stream, cancellation, shutdown, and the Producer's order on one stream.

The client's side goes through ``stratalog.client.Client`` (sessions on by default) beside a
``Client(sessions=False)``, whose unary calls are the reference; malformed requests go through a
raw gRPC stream, as another language's client could send them. No timing is asserted: the order
of answers is forced by what the server must wait for (a long poll waits for an append).
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from stratalog.client import Client, FetchFormat, Producer
from stratalog.client.errors import (
    InvalidRequestError,
    InvalidTopicError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    ResourceLimitExceededError,
    StratalogError,
    UnknownTopicOrPartitionError,
    from_rpc_error,
    from_session_error,
)
from stratalog.records import build_batch
from stratalog.v1 import broker_pb2 as pb

from .conftest import CALL_TIMEOUT_S, ServerProcess, free_port

SESSION = "/stratalog.v1.Broker/Session"
LONG_POLL_MS = 30_000


def _metric(server: ServerProcess, name: str) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=CALL_TIMEOUT_S) as response:
        text = response.read().decode()
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


async def _until(condition, what: str, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.05)


async def _outcome(call: Any) -> Any:
    try:
        return await call
    except StratalogError as error:
        return error


def _same_error(session: Any, unary: Any) -> None:
    assert isinstance(session, StratalogError) and isinstance(unary, StratalogError), (
        session, unary)
    assert type(session) is type(unary), (session, unary)
    assert (session.code, session.reason, session.retriable, session.metadata) == (
        unary.code, unary.reason, unary.retriable, unary.metadata)
    # Server-side errors carry an incident id of their own; the rest say the same.
    assert re.sub(r"incident \w+", "incident", session.message) == re.sub(
        r"incident \w+", "incident", unary.message)


class RawSession:
    """A Session stream spoken by hand: requests and answers as messages."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.call = channel.stream_stream(SESSION)()

    async def send(self, request: pb.SessionRequest | bytes) -> None:
        data = request if isinstance(request, bytes) else request.SerializeToString()
        await self.call.write(data)

    async def answer(self) -> pb.SessionResponse:
        data = await asyncio.wait_for(self.call.read(), CALL_TIMEOUT_S)
        assert data is not grpc.aio.EOF, await self.call.code()
        return pb.SessionResponse.FromString(data)


@pytest.fixture
async def channel(server: ServerProcess) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield channel


@pytest.fixture
async def clients(server: ServerProcess) -> AsyncIterator[tuple[Client, Client]]:
    """(a Client on a session, a Client of unary calls) to the module's server."""
    async with Client(server.target) as session, Client(server.target, sessions=False) as unary:
        yield session, unary


# ------------------------------------------------------------------------ every request kind


async def test_every_request_kind_is_answered_as_its_unary_call(clients) -> None:
    session, unary = clients
    await unary.create_topic("kinds", 2)
    produced = await session.produce("kinds", 1, [b"a", b"b"])
    assert (produced.base_offset, produced.last_offset, produced.record_count) == (0, 1, 2)
    produced = await unary.produce("kinds", 1, [b"c"])
    assert produced.base_offset == 2
    batch = build_batch([(1_700_000_000_000, b"k", b"d", ())])
    by_session = await session.produce("kinds", 1, record_batches=batch)
    assert by_session.base_offset == 3
    for fetch_format in FetchFormat:
        assert await session.fetch_by_offset("kinds", 1, 1, fetch_format=fetch_format) == (
            await unary.fetch_by_offset("kinds", 1, 1, fetch_format=fetch_format))
    assert await session.fetch_by_timestamp("kinds", 1, 1_700_000_000_000) == (
        await unary.fetch_by_timestamp("kinds", 1, 1_700_000_000_000))
    for target in (-1, -2, -3, 1_700_000_000_000):
        assert await session.list_offsets("kinds", 1, target) == (
            await unary.list_offsets("kinds", 1, target))
    assert session.sessions and not unary.sessions


async def test_errors_are_the_unary_calls_and_the_session_goes_on(clients) -> None:
    session, unary = clients
    await unary.create_topic("errors", 1)
    await unary.produce("errors", 0, [b"x"])
    cases = [
        lambda c: c.fetch_by_offset("errors", 0, 5),  # OFFSET_OUT_OF_RANGE, with the bounds
        lambda c: c.fetch_by_offset("missing", 0, 0),  # UNKNOWN_TOPIC_OR_PARTITION
        lambda c: c.fetch_by_timestamp("errors", 3, 0),
        lambda c: c.list_offsets("missing", 0, -1),
        lambda c: c.produce("missing", 0, [b"x"]),
        lambda c: c.produce("errors", 0, record_batches=b"not a batch"),  # CORRUPT_RECORD
    ]
    kinds = set()
    for case in cases:
        on_session = await _outcome(case(session))
        on_unary = await _outcome(case(unary))
        _same_error(on_session, on_unary)
        kinds.add(type(on_session))
    assert {OffsetOutOfRangeError, UnknownTopicOrPartitionError} <= kinds
    # The stream went on: the next request on it is answered.
    assert (await session.fetch_by_offset("errors", 0, 0)).records[0].value == b"x"


async def test_a_request_the_server_refuses_to_read_names_its_field(server, channel) -> None:
    raw = RawSession(channel)
    # A negative partition: the servicer's own check, as for a unary FetchByOffset.
    await raw.send(pb.SessionRequest(id=7, fetch_by_offset=pb.FetchByOffsetRequest(
        topic="refused", partition=-1)))
    answer = await raw.answer()
    error = from_session_error(answer.error)
    assert answer.id == 7 and isinstance(error, InvalidRequestError)
    assert error.metadata["field"] == "partition"
    await raw.send(pb.SessionRequest(id=8, list_offsets=pb.ListOffsetsRequest(topic="a/b")))
    error = from_session_error((await raw.answer()).error)
    assert isinstance(error, InvalidTopicError)


async def test_malformed_session_requests_get_an_error_and_the_stream_goes_on(
    server, channel
) -> None:
    raw = RawSession(channel)
    # No request kind at all (or one of a newer client: an unknown field).
    await raw.send(pb.SessionRequest(id=1))
    answer = await raw.answer()
    assert answer.id == 1
    error = from_session_error(answer.error)
    assert isinstance(error, InvalidRequestError)
    assert "sets no request kind" in error.message and error.metadata["field"] == "request"
    await raw.send(b"\x08\x02" + b"\xfa\x01\x00")  # id 2, field 31 (unknown), empty
    answer = await raw.answer()
    assert answer.id == 2 and "sets no request kind" in answer.error.message
    # Bytes that are no SessionRequest: the id cannot be read, so the answer carries 0.
    await raw.send(b"\x08")
    answer = await raw.answer()
    assert answer.id == 0
    assert "not a valid stratalog.v1.SessionRequest" in answer.error.message
    # A request inside that is no FetchByOffsetRequest: named as the unary call names it.
    await raw.send(b"\x08\x03\x1a\x02\xff\xff")
    answer = await raw.answer()
    assert answer.id == 3
    assert "not a valid stratalog.v1.FetchByOffsetRequest" in answer.error.message
    # Still serving.
    await raw.send(pb.SessionRequest(id=4, list_offsets=pb.ListOffsetsRequest(
        topic="nowhere", timestamp=-1)))
    answer = await raw.answer()
    assert answer.id == 4
    assert isinstance(from_session_error(answer.error), UnknownTopicOrPartitionError)


async def test_an_id_already_pending_is_refused_and_the_first_keeps_it(server, channel) -> None:
    async with Client(server.target, sessions=False) as unary:
        await unary.create_topic("ids", 1)
    raw = RawSession(channel)
    poll = pb.FetchByOffsetRequest(topic="ids", offset=0, max_wait_ms=LONG_POLL_MS)
    await raw.send(pb.SessionRequest(id=5, fetch_by_offset=poll))
    await raw.send(pb.SessionRequest(id=5, list_offsets=pb.ListOffsetsRequest(topic="ids")))
    refused = await raw.answer()
    assert refused.id == 5 and "already in use" in refused.error.message
    async with Client(server.target, sessions=False) as unary:
        await unary.produce("ids", 0, [b"wake"])
    answered = await raw.answer()
    assert answered.id == 5 and answered.fetch.next_offset == 1


# ------------------------------------------------------------------------ order of answers


async def test_a_long_poll_does_not_hold_up_a_point_read_behind_it(clients) -> None:
    session, unary = clients
    await unary.create_topic("interleaved", 1)
    await unary.produce("interleaved", 0, [b"first"])
    poll = asyncio.ensure_future(session.fetch_by_offset(
        "interleaved", 0, 1, max_wait_ms=LONG_POLL_MS, min_bytes=1))
    # Sent after the poll on the same stream, answered while the poll still waits.
    read = await session.fetch_by_offset("interleaved", 0, 0)
    assert read.records[0].value == b"first"
    assert not poll.done()
    await unary.produce("interleaved", 0, [b"second"])
    polled = await asyncio.wait_for(poll, CALL_TIMEOUT_S)
    assert polled.records[0].value == b"second"


async def test_answers_come_by_id_in_completion_order(server, channel) -> None:
    async with Client(server.target, sessions=False) as unary:
        await unary.create_topic("completion", 1)
    raw = RawSession(channel)
    for request_id in (10, 11):
        await raw.send(pb.SessionRequest(id=request_id, fetch_by_offset=pb.FetchByOffsetRequest(
            topic="completion", offset=0, max_wait_ms=LONG_POLL_MS)))
    await raw.send(pb.SessionRequest(id=12, list_offsets=pb.ListOffsetsRequest(
        topic="completion", timestamp=-1)))
    answer = await raw.answer()
    assert answer.id == 12 and answer.list_offsets.offset == 0
    async with Client(server.target, sessions=False) as unary:
        await unary.produce("completion", 0, [b"now"])
    assert {(await raw.answer()).id for _ in range(2)} == {10, 11}
    # A client that half-closes gets the rest of its answers, then the end.
    await raw.call.done_writing()
    assert await raw.call.read() is grpc.aio.EOF
    assert await raw.call.code() == grpc.StatusCode.OK


# ------------------------------------------------------------------------ limits


async def test_in_flight_requests_are_bounded_per_stream(start_server) -> None:
    server = start_server(None, "--session-requests-in-flight-max", "2")
    async with grpc.aio.insecure_channel(server.target) as channel:
        async with Client(server.target, sessions=False) as unary:
            await unary.create_topic("bounded", 1)
        raw = RawSession(channel)
        for request_id in (1, 2):  # two long polls take both slots
            await raw.send(pb.SessionRequest(id=request_id, fetch_by_offset=pb.FetchByOffsetRequest(
                topic="bounded", offset=0, max_wait_ms=LONG_POLL_MS)))
        await raw.send(pb.SessionRequest(id=3, list_offsets=pb.ListOffsetsRequest(
            topic="bounded", timestamp=-1)))
        await _until(lambda: _metric(server, 'stratalog_waiting_rpcs{kind="long_poll"}') == 2,
                     "both polls waiting")
        # The third request is not read while both slots are held: nothing in flight for it.
        assert _metric(server, "stratalog_session_requests") == 2
        async with Client(server.target, sessions=False) as unary:
            await unary.produce("bounded", 0, [b"go"])
        ids = [(await raw.answer()).id for _ in range(3)]
        assert set(ids[:2]) == {1, 2} and ids[2] == 3


async def test_a_session_is_a_waiting_rpc_and_a_refused_one_falls_back_to_unary(
    start_server,
) -> None:
    # One waiting RPC per client (this host: the calls are anonymous).
    server = start_server(None, "--waiting-rpcs-per-client-max", "1")
    async with Client(server.target) as client, Client(server.target) as other:
        await client.create_topic("limited", 1)
        await client.produce("limited", 0, [b"v"])  # opens the client's one session
        assert _metric(server, 'stratalog_waiting_rpcs{kind="session"}') == 1
        assert client.sessions
        # Another session of the same client (host) is refused, naming the limit.
        async with grpc.aio.insecure_channel(server.target) as channel:
            raw = RawSession(channel)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await asyncio.wait_for(raw.call.read(), CALL_TIMEOUT_S)
            error = from_rpc_error(caught.value)
            assert isinstance(error, ResourceLimitExceededError)
            assert error.limit == "waiting_rpcs_per_client_max"
        # A long poll on the session counts as a long poll: refused here, as unary would be.
        refused = await _outcome(client.fetch_by_offset("limited", 0, 1, max_wait_ms=1_000))
        assert isinstance(refused, ResourceLimitExceededError)
        assert refused.limit == "waiting_rpcs_per_client_max"
        assert "long poll refused" in refused.message
        # A Client whose session is refused is served all the same, by unary calls: the
        # stream was refused before anything on it was read.
        fetched = await other.fetch_by_offset("limited", 0, 0)
        assert fetched.records[0].value == b"v"
        assert not other.sessions  # for SESSION_RETRY_AFTER_S
        assert _metric(server, 'stratalog_waiting_rpcs{kind="session"}') == 1


# ------------------------------------------------------------------------ failures


async def test_requests_in_flight_on_a_broken_stream_fail_retriably_and_a_new_one_serves(
    start_server, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    # A port the server is restarted on below: one the kernel never hands out meanwhile.
    port = free_port()
    server = start_server(data, "--listen", f"127.0.0.1:{port}")
    async with Client(server.target) as client:
        await client.create_topic("restart", 1)
        await client.produce("restart", 0, [b"before"])
        poll = asyncio.ensure_future(client.fetch_by_offset(
            "restart", 0, 1, max_wait_ms=LONG_POLL_MS))
        await _until(lambda: _metric(server, 'stratalog_waiting_rpcs{kind="long_poll"}') == 1,
                     "the poll waiting")
        server.kill()  # no answer, no status: the connection drops
        failed = await _outcome(asyncio.wait_for(poll, CALL_TIMEOUT_S))
        assert isinstance(failed, StratalogError) and failed.retriable, failed
        server = start_server(data, "--listen", f"127.0.0.1:{port}")
        # The client opens a new session (the channel reconnects) for the next request.
        for _ in range(100):
            result = await _outcome(client.fetch_by_offset("restart", 0, 0))
            if not isinstance(result, StratalogError):
                break
            assert result.retriable, result
            await asyncio.sleep(0.1)
        assert result.records[0].value == b"before"
        assert client.sessions


async def test_shutdown_answers_what_is_in_flight_then_ends_the_stream(start_server) -> None:
    server = start_server(None)
    async with Client(server.target) as client:
        await client.create_topic("stopping", 1)
        poll = asyncio.ensure_future(client.fetch_by_offset(
            "stopping", 0, 0, max_wait_ms=LONG_POLL_MS))
        await _until(lambda: _metric(server, 'stratalog_waiting_rpcs{kind="long_poll"}') == 1,
                     "the poll waiting")
        assert server.stop() == 0
        # The poll was answered with what there was (nothing), as a unary one would be.
        answered = await asyncio.wait_for(poll, CALL_TIMEOUT_S)
        assert answered.records == [] and answered.next_offset == 0
        after = await _outcome(client.list_offsets("stopping", 0, -1))
        assert isinstance(after, StratalogError) and after.retriable, after


async def test_a_cancelled_request_is_forgotten_and_the_session_goes_on(clients) -> None:
    session, unary = clients
    await unary.create_topic("cancelled", 1)
    poll = asyncio.ensure_future(session.fetch_by_offset(
        "cancelled", 0, 0, max_wait_ms=LONG_POLL_MS))
    await asyncio.sleep(0)
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll
    await unary.produce("cancelled", 0, [b"late"])  # the server answers the poll; dropped
    assert (await session.fetch_by_offset("cancelled", 0, 0)).records[0].value == b"late"
    assert (await session.list_offsets("cancelled", 0, -1)).offset == 1


async def test_a_request_over_the_servers_limit_fails_alone(start_server) -> None:
    """gRPC ends the whole stream on a message over the server's max_request_bytes: that
    request fails as its unary call would (not retriable), the others on the stream
    retriably, and the client sends requests over the limit as unary calls from then on."""
    server = start_server(None, "--max-request-bytes", "65536")
    async with Client(server.target) as client:
        await client.create_topic("large", 1)
        poll = asyncio.ensure_future(client.fetch_by_offset(
            "large", 0, 0, max_wait_ms=LONG_POLL_MS))
        await _until(lambda: _metric(server, 'stratalog_waiting_rpcs{kind="long_poll"}') == 1,
                     "the poll waiting")
        too_large = await _outcome(client.produce("large", 0, [bytes(100_000)]))
        assert isinstance(too_large, MessageTooLargeError) and not too_large.retriable
        innocent = await _outcome(asyncio.wait_for(poll, CALL_TIMEOUT_S))
        assert isinstance(innocent, StratalogError) and innocent.retriable, innocent
        # Now known to be over the limit: a unary call, which fails alone.
        await client.list_offsets("large", 0, -1)  # a new session
        poll = asyncio.ensure_future(client.fetch_by_offset(
            "large", 0, 0, max_wait_ms=LONG_POLL_MS))
        again = await _outcome(client.produce("large", 0, [bytes(100_000)]))
        assert isinstance(again, MessageTooLargeError)
        await client.produce("large", 0, [b"small"])
        assert (await asyncio.wait_for(poll, CALL_TIMEOUT_S)).records[0].value == b"small"


# ------------------------------------------------------------------------ the Producer


async def test_the_producers_batches_stay_in_order_on_one_stream(server) -> None:
    """Five batches in flight per partition on one session: the server appends a stream's
    Produce requests of one partition in the order they came, so none is refused
    OUT_OF_ORDER_SEQUENCE and the records are stored in the order sent."""
    refused_before = _metric(
        server, 'stratalog_requests_total{code="FAILED_PRECONDITION",rpc="Produce"}')
    async with Client(server.target) as client:
        await client.create_topic("ordered", 2)
        async with Producer(client, linger_ms=0, batch_bytes_max=256,
                            max_in_flight_per_partition=5) as producer:
            futures = [await producer.send("ordered", str(i).encode(), partition=i % 2)
                       for i in range(2000)]
            await producer.flush()
        results = [await future for future in futures]
        for partition in (0, 1):
            offsets = [r.offset for r in results if r.partition == partition]
            assert offsets == list(range(1000))
            fetched = await client.fetch_by_offset("ordered", partition, 0, max_bytes=1 << 20)
            assert [int(r.value) for r in fetched.records] == list(range(partition, 2000, 2))
    assert _metric(
        server, 'stratalog_requests_total{code="FAILED_PRECONDITION",rpc="Produce"}'
    ) == refused_before
