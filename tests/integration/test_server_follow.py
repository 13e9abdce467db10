"""Following the log end: long-poll fetches and Subscribe streams while another client produces.

The waits here are bounded by the requests' own max_wait_ms and by generous deadlines: a test
fails by a wrong answer or by a deadline many times longer than the expected path, never by a
tight timing.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request

import grpc
import grpc.aio
import pytest

from stratalog.client.errors import from_rpc_error
from stratalog.records import build_batch
from stratalog.records.batch import iter_batch_headers
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import until

T0 = 1_700_000_000_000
TIMEOUT = 30


@pytest.fixture
async def astub(server):
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


async def _create(astub, name: str, **configs: str) -> None:
    await astub.CreateTopic(pb.CreateTopicRequest(name=name, partitions=1, configs=configs),
                            timeout=TIMEOUT)


async def _produce(astub, topic: str, values: list[bytes], timestamp: int = T0) -> int:
    batch = build_batch([(timestamp, None, value, ()) for value in values])
    response = await astub.Produce(pb.ProduceRequest(topic=topic, record_batches=batch),
                                   timeout=TIMEOUT)
    return response.base_offset


# ------------------------------------------------------------------------ long poll


async def test_long_poll_answers_when_a_record_arrives(server, astub) -> None:
    await _create(astub, "fl-poll")
    started = time.monotonic()
    poll = asyncio.ensure_future(astub.FetchByOffset(
        pb.FetchByOffsetRequest(topic="fl-poll", offset=0, max_wait_ms=20_000), timeout=60))
    await until(lambda: server.waiting_rpcs("long_poll") == 1, "the poll waiting in the server")
    assert not poll.done(), "a long poll at the log end answered before anything was produced"
    await _produce(astub, "fl-poll", [b"wake up"])
    response = await poll
    assert [r.value for r in response.records] == [b"wake up"]
    assert response.next_offset == 1
    # Had the append not woken it, the poll would have run its full 20 s.
    assert time.monotonic() - started < 15


async def test_long_poll_times_out_empty(astub) -> None:
    await _create(astub, "fl-timeout")
    await _produce(astub, "fl-timeout", [b"a"])
    response = await astub.FetchByOffset(
        pb.FetchByOffsetRequest(topic="fl-timeout", offset=1, max_wait_ms=200), timeout=TIMEOUT)
    assert (list(response.records), response.next_offset, response.high_watermark) == ([], 1, 1)


async def test_long_poll_does_not_wait_when_data_is_there(astub) -> None:
    await _create(astub, "fl-ready")
    await _produce(astub, "fl-ready", [b"a", b"b"])
    started = time.monotonic()
    response = await astub.FetchByOffset(
        pb.FetchByOffsetRequest(topic="fl-ready", offset=0, max_wait_ms=20_000), timeout=60)
    assert [r.value for r in response.records] == [b"a", b"b"]
    assert time.monotonic() - started < 15


async def test_long_poll_waits_for_min_bytes(server, astub) -> None:
    await _create(astub, "fl-minbytes")
    one_batch = len(build_batch([(T0, None, bytes(1000), ())]))
    poll = asyncio.ensure_future(astub.FetchByOffset(
        pb.FetchByOffsetRequest(topic="fl-minbytes", offset=0, max_wait_ms=20_000,
                                min_bytes=3 * one_batch, format=pb.FETCH_FORMAT_RECORD_BATCHES),
        timeout=60))
    await until(lambda: server.waiting_rpcs("long_poll") == 1, "the poll waiting in the server")
    for _ in range(3):
        # Part of what is tested: time for the poll to wake on each append, find less than
        # min_bytes and wait again (no gauge tells that apart from still waiting).
        await asyncio.sleep(0.1)
        await _produce(astub, "fl-minbytes", [bytes(1000)])
    response = await poll
    # It answered once three batches were there (or, if it was slow to start, with all three).
    assert len(response.record_batches) == 3 * one_batch
    assert response.next_offset == 3


async def test_long_poll_on_a_deleted_topic_ends_not_found(server, astub) -> None:
    await _create(astub, "fl-deleted")
    poll = asyncio.ensure_future(astub.FetchByOffset(
        pb.FetchByOffsetRequest(topic="fl-deleted", offset=0, max_wait_ms=20_000), timeout=60))
    await until(lambda: server.waiting_rpcs("long_poll") == 1, "the poll waiting in the server")
    await astub.DeleteTopic(pb.DeleteTopicRequest(name="fl-deleted"), timeout=TIMEOUT)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await poll
    assert from_rpc_error(caught.value).reason == "UNKNOWN_TOPIC_OR_PARTITION"


# ------------------------------------------------------------------------ Subscribe


async def _collect(call, count: int) -> list[pb.FetchResponse]:
    """Read messages until ``count`` records came (either format)."""
    messages = []
    seen = 0
    while seen < count:
        message = await asyncio.wait_for(call.read(), TIMEOUT)
        assert message is not grpc.aio.EOF, "the stream ended early"
        messages.append(message)
        if message.record_batches:
            seen += sum(h.records_count for h in iter_batch_headers(message.record_batches))
        else:
            seen += len(message.records)
    return messages


async def test_subscribe_follows_a_concurrent_producer(astub) -> None:
    await _create(astub, "fl-sub")
    await _produce(astub, "fl-sub", [b"before-0", b"before-1"])
    call = astub.Subscribe(pb.SubscribeRequest(topic="fl-sub", offset=0))

    async def producer() -> None:
        for i in range(40):
            await _produce(astub, "fl-sub", [b"live-%d-%d" % (i, j) for j in range(i % 4 + 1)])
            if i % 5 == 0:
                # Part of what is tested: pauses in the appends, so that the stream also waits
                # at the end between them rather than reading one backlog.
                await asyncio.sleep(0.02)

    expected = [b"before-0", b"before-1"] + [
        b"live-%d-%d" % (i, j) for i in range(40) for j in range(i % 4 + 1)]
    produced = asyncio.ensure_future(producer())
    messages = await _collect(call, len(expected))
    await produced
    records = [r for m in messages for r in m.records]
    assert [r.value for r in records] == expected
    assert [r.offset for r in records] == list(range(len(expected)))
    for message in messages:
        assert (message.matched_offset, message.matched_timestamp) == (-1, -1)
        assert message.next_offset == message.records[-1].offset + 1
        assert message.high_watermark >= message.next_offset
    call.cancel()


async def test_subscribe_from_the_middle_in_raw_batches(astub) -> None:
    await _create(astub, "fl-sub-raw")
    await _produce(astub, "fl-sub-raw", [b"a", b"b", b"c"])
    call = astub.Subscribe(pb.SubscribeRequest(topic="fl-sub-raw", offset=1,
                                               format=pb.FETCH_FORMAT_RECORD_BATCHES))
    first = await asyncio.wait_for(call.read(), TIMEOUT)
    (header,) = iter_batch_headers(first.record_batches)
    assert (header.base_offset, first.next_offset) == (0, 3)  # the whole batch holding offset 1
    await _produce(astub, "fl-sub-raw", [b"d"])
    second = await asyncio.wait_for(call.read(), TIMEOUT)
    (header,) = iter_batch_headers(second.record_batches)
    assert (header.base_offset, second.next_offset) == (3, 4)
    call.cancel()


async def test_subscribe_by_timestamp_reports_the_match_first(astub) -> None:
    await _create(astub, "fl-sub-ts")
    for i in range(5):
        await _produce(astub, "fl-sub-ts", [b"r%d" % i], timestamp=T0 + i * 100)
    call = astub.Subscribe(pb.SubscribeRequest(topic="fl-sub-ts", timestamp=T0 + 250))
    first = await asyncio.wait_for(call.read(), TIMEOUT)
    assert (first.matched_offset, first.matched_timestamp) == (3, T0 + 300)
    assert first.records[0].offset == 3
    seen = len(first.records)
    await _produce(astub, "fl-sub-ts", [b"later"], timestamp=T0)
    messages = await _collect(call, 3 - seen)
    assert [r.value for m in [first, *messages] for r in m.records] == [b"r3", b"r4", b"later"]
    for message in messages:
        assert (message.matched_offset, message.matched_timestamp) == (-1, -1)
    call.cancel()


async def test_subscribe_by_timestamp_after_every_record_follows_the_end(server, astub) -> None:
    await _create(astub, "fl-sub-ts-end")
    await _produce(astub, "fl-sub-ts-end", [b"old"], timestamp=T0)
    # The earlier tests' cancelled streams end in the server asynchronously.
    await until(lambda: server.waiting_rpcs("subscribe") == 0, "no other Subscribe stream")
    call = astub.Subscribe(pb.SubscribeRequest(topic="fl-sub-ts-end", timestamp=T0 + 10**6))
    # Counted once its start is resolved (the log end, as nothing is that late): "new" must
    # come after that, or the stream would start after it.
    await until(lambda: server.waiting_rpcs("subscribe") == 1, "the stream's start resolved")
    await _produce(astub, "fl-sub-ts-end", [b"new"], timestamp=T0 + 10**7)
    first = await asyncio.wait_for(call.read(), TIMEOUT)
    assert [r.value for r in first.records] == [b"new"]
    assert (first.matched_offset, first.matched_timestamp) == (-1, -1)
    call.cancel()


async def test_many_subscribers_get_everything(astub) -> None:
    await _create(astub, "fl-fanout")
    calls = [astub.Subscribe(pb.SubscribeRequest(topic="fl-fanout", offset=0)) for _ in range(8)]
    for i in range(20):
        await _produce(astub, "fl-fanout", [b"%d" % i])
    for call in calls:
        messages = await _collect(call, 20)
        assert [r.value for m in messages for r in m.records] == [b"%d" % i for i in range(20)]
        call.cancel()


async def test_subscribe_out_of_range_and_deleted(astub) -> None:
    await _create(astub, "fl-sub-gone")
    call = astub.Subscribe(pb.SubscribeRequest(topic="fl-sub-gone", offset=5))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    error = from_rpc_error(caught.value)
    assert (error.reason, error.log_end_offset) == ("OFFSET_OUT_OF_RANGE", 0)

    call = astub.Subscribe(pb.SubscribeRequest(topic="fl-sub-gone", offset=0))
    await _produce(astub, "fl-sub-gone", [b"x"])
    await asyncio.wait_for(call.read(), TIMEOUT)
    await astub.DeleteTopic(pb.DeleteTopicRequest(name="fl-sub-gone"), timeout=TIMEOUT)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(call.read(), TIMEOUT)
    assert from_rpc_error(caught.value).reason == "UNKNOWN_TOPIC_OR_PARTITION"


def _server_rss_bytes(server) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=TIMEOUT) as response:
        text = response.read().decode()
    match = re.search(r"^process_resident_memory_bytes (\S+)$", text, re.MULTILINE)
    assert match is not None
    return float(match.group(1))


# In make test's serial phase: it measures the server's resident size, which the parallel
# phase's load would disturb.
@pytest.mark.serial
async def test_a_slow_subscriber_does_not_make_the_server_buffer(server, astub) -> None:
    """Flow control: a subscriber that does not read holds the server to about one message.

    96 MiB are produced while the subscriber reads nothing. Buffering them for it would grow the
    server by about that much; with flow control the stream stops after the message in flight and
    what HTTP/2's window takes. Then the subscriber reads and gets every batch, in order.
    """
    await _create(astub, "fl-slow")
    value = bytes(1_000_000)
    call = astub.Subscribe(pb.SubscribeRequest(topic="fl-slow", offset=0,
                                               format=pb.FETCH_FORMAT_RECORD_BATCHES))
    await _produce(astub, "fl-slow", [value])
    await asyncio.wait_for(call.read(), TIMEOUT)  # the stream is established
    for _ in range(5):  # warm up the produce path's allocations
        await _produce(astub, "fl-slow", [value])
    rss_before = _server_rss_bytes(server)
    for _ in range(96):
        await _produce(astub, "fl-slow", [value])
    rss_after = _server_rss_bytes(server)
    growth_mib = (rss_after - rss_before) / 2**20
    assert growth_mib < 48, f"server grew {growth_mib:.0f} MiB for a subscriber that reads nothing"
    messages = await _collect(call, 101)
    offsets = [h.base_offset for m in messages for h in iter_batch_headers(m.record_batches)]
    assert offsets == list(range(1, 102))
    call.cancel()
