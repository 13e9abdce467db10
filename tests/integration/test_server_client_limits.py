"""Per-client limits and what subscribers cost, against a real server process (issue 13,
defects 3 and 4).

Defect 3: 1,030 Subscribe streams or long polls from one client used to take every slot of
gRPC's global ``max_concurrent_rpcs``, and every other client's RPC failed with
RESOURCE_EXHAUSTED. Now the client gets its limit (``waiting_rpcs_per_connection_max``, with
the setting named) and the others are served.

Defect 4: a subscriber whose client does not read used to cost ~4 MiB of server memory (1,000:
4.2 GiB, 2.8 GiB still held after they cancelled). The bounds asserted here are the ones
docs/server.md documents ("Limits per client"): the server's resident size (VmRSS of its
process) above what it was before the streams opened. No timing is asserted: waits are bounded
polls of the server's own counters and of /proc.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from stratalog.client.errors import ResourceLimitExceededError, from_rpc_error
from stratalog.records import build_batch
from stratalog.v1 import broker_pb2, broker_pb2_grpc

from .conftest import ServerProcess, launch_server, until

#: make test runs this module in its serial phase: it measures the server's resident size and times
#: another client's calls, which the parallel phase's load would disturb.
pytestmark = pytest.mark.serial

MIB = 1024 * 1024
#: Deadline of the other client's calls: generous, it only turns a hang into a failure (the
#: defect answered them RESOURCE_EXHAUSTED at once).
OTHER_CLIENT_TIMEOUT_S = 10.0
CLIENT_FLOODS = 1030
#: The documented per-stream allowance beyond the Subscribe budget: gRPC's call state and the
#: handler (measured ~25-40 KiB; docs/server.md).
STREAM_OVERHEAD_BYTES = 64 * 1024
#: A client that does not read: HTTP/2's window stays at its initial 64 KiB (no BDP probing), as
#: a client whose application stopped reading keeps it.
STALLED_CLIENT_OPTIONS = [("grpc.http2.bdp_probe", 0), ("grpc.use_local_subchannel_pool", 1)]


def _rss_bytes(server: ServerProcess) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None, status
    return int(match.group(1)) * 1024


async def _other_client_is_served(server: ServerProcess, topic: str) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        topics = await stub.ListTopics(broker_pb2.ListTopicsRequest(),
                                       timeout=OTHER_CLIENT_TIMEOUT_S)
        assert topic in {t.name for t in topics.topics}
        fetched = await stub.FetchByOffset(
            broker_pb2.FetchByOffsetRequest(topic=topic, offset=0), timeout=OTHER_CLIENT_TIMEOUT_S
        )
        assert fetched.topic == topic


@pytest.fixture(scope="module")
def limits_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose per-connection and per-client limits are 256 (the defaults, 1,024, would
    take 4,000 streams to show the same)."""
    data_dir = tmp_path_factory.mktemp("limits") / "data"
    server = launch_server(data_dir, "--waiting-rpcs-per-connection-max", "256",
                           "--waiting-rpcs-per-client-max", "256")
    yield server
    assert server.stop() == 0, server.log_text()[-4000:]


async def _create_topic(target: str, name: str) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        await broker_pb2_grpc.BrokerStub(channel).CreateTopic(
            broker_pb2.CreateTopicRequest(name=name, partitions=1), timeout=OTHER_CLIENT_TIMEOUT_S
        )


async def _produce(stub: broker_pb2_grpc.BrokerStub, topic: str, batches: bytes) -> None:
    await stub.Produce(broker_pb2.ProduceRequest(topic=topic, record_batches=batches),
                       timeout=OTHER_CLIENT_TIMEOUT_S)


def _batches(count: int, value_bytes: int) -> bytes:
    return b"".join(build_batch([(1_700_000_000_000 + i, None, b"v" * value_bytes, ())])
                    for i in range(count))


async def test_one_clients_1030_streams_get_its_limit_and_others_are_served(
    limits_server: ServerProcess,
) -> None:
    server = limits_server
    await _create_topic(server.target, "streams")
    async with grpc.aio.insecure_channel(server.target) as channel:
        await channel.channel_ready()
        stub = broker_pb2_grpc.BrokerStub(channel)
        calls = [stub.Subscribe(broker_pb2.SubscribeRequest(topic="streams", offset=0))
                 for _ in range(CLIENT_FLOODS)]
        reads = [asyncio.ensure_future(call.read()) for call in calls]
        await until(lambda: sum(read.done() for read in reads) >= CLIENT_FLOODS - 256,
                     "the streams beyond the connection's limit refused")
        refused = [read for read in reads if read.done()]
        assert len(refused) == CLIENT_FLOODS - 256
        for read in refused:
            error = from_rpc_error(read.exception())  # type: ignore[arg-type]
            assert isinstance(error, ResourceLimitExceededError), error
            assert error.limit == "waiting_rpcs_per_connection_max"
            assert error.retriable
            assert "waiting_rpcs_per_connection_max=256" in str(error)
        assert server.metric('stratalog_waiting_rpcs{kind="subscribe"}') == 256
        assert server.metric(
            'stratalog_waiting_rpcs_refused_total{limit="waiting_rpcs_per_connection_max"}'
        ) == CLIENT_FLOODS - 256
        # Every other client's unary RPCs are answered.
        await _other_client_is_served(server, "streams")
        # A stream from another connection of the same host: the host's (anonymous client's)
        # limit, named.
        async with grpc.aio.insecure_channel(
            server.target, options=[("grpc.use_local_subchannel_pool", 1)]
        ) as other:
            call = broker_pb2_grpc.BrokerStub(other).Subscribe(
                broker_pb2.SubscribeRequest(topic="streams", offset=0)
            )
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call.read()
            error = from_rpc_error(caught.value)
            assert isinstance(error, ResourceLimitExceededError)
            assert error.limit == "waiting_rpcs_per_client_max"
        # The streams admitted work: one append reaches each of them.
        await _produce(stub, "streams", _batches(1, 10))
        admitted = [read for read in reads if not read.done()]
        messages = await asyncio.wait_for(asyncio.gather(*admitted), OTHER_CLIENT_TIMEOUT_S)
        assert {message.next_offset for message in messages} == {1}
        for call in calls:
            call.cancel()
    await until(lambda: server.metric('stratalog_waiting_rpcs{kind="subscribe"}') == 0,
                 "the streams ended on the server")


async def test_one_clients_1030_long_polls_get_its_limit_and_others_are_served(
    limits_server: ServerProcess,
) -> None:
    server = limits_server
    await _create_topic(server.target, "polls")
    async with grpc.aio.insecure_channel(server.target) as channel:
        await channel.channel_ready()
        stub = broker_pb2_grpc.BrokerStub(channel)
        request = broker_pb2.FetchByOffsetRequest(topic="polls", offset=0, max_wait_ms=30_000)
        polls = [asyncio.ensure_future(stub.FetchByOffset(request, timeout=120))
                 for _ in range(CLIENT_FLOODS)]
        await until(lambda: sum(poll.done() for poll in polls) >= CLIENT_FLOODS - 256,
                     "the long polls beyond the connection's limit refused")
        assert server.metric('stratalog_waiting_rpcs{kind="long_poll"}') == 256
        for poll in (poll for poll in polls if poll.done()):
            error = from_rpc_error(poll.exception())  # type: ignore[arg-type]
            assert isinstance(error, ResourceLimitExceededError), error
            assert error.limit == "waiting_rpcs_per_connection_max"
            assert "long poll refused" in str(error)
        await _other_client_is_served(server, "polls")
        # One append answers every poll still waiting, with the record.
        await _produce(stub, "polls", _batches(1, 10))
        answers = await asyncio.wait_for(
            asyncio.gather(*(poll for poll in polls if not poll.done())), OTHER_CLIENT_TIMEOUT_S
        )
        assert len(answers) == 256
        assert {answer.next_offset for answer in answers} == {1}
    assert server.metric('stratalog_waiting_rpcs{kind="long_poll"}') == 0


async def test_subscribers_memory_is_bounded_and_given_back(start_server) -> None:  # type: ignore[no-untyped-def]
    """1,000 subscribers: idle at the log end, then stalled (their clients read nothing while
    data arrives), then cancelled; the server's resident size against docs/server.md's bounds."""
    streams = 1000
    server: ServerProcess = start_server(
        None,
        "--waiting-rpcs-per-connection-max", "1000",
        "--waiting-rpcs-per-client-max", "1000",
        "--waiting-rpcs-max", "1000",
    )
    budget_bytes = 32 * MIB  # subscribe_buffer_bytes_total's default
    await _create_topic(server.target, "crowd")
    async with grpc.aio.insecure_channel(server.target) as producer_channel:
        producer = broker_pb2_grpc.BrokerStub(producer_channel)
        await _produce(producer, "crowd", _batches(1, 10))
        # Warm up what one subscriber uses, so that the baseline is the idle server's.
        async with grpc.aio.insecure_channel(server.target) as channel:
            call = broker_pb2_grpc.BrokerStub(channel).Subscribe(
                broker_pb2.SubscribeRequest(topic="crowd", offset=0))
            await call.read()
            call.cancel()
        # Part of the measurement: the warm-up stream's end and the memory it gives back
        # settle before the baseline is read (no gauge tells when the allocator is done).
        await asyncio.sleep(2)
        baseline = _rss_bytes(server)

        channels = [grpc.aio.insecure_channel(server.target, options=STALLED_CLIENT_OPTIONS)
                    for _ in range(4)]
        try:
            calls = [
                broker_pb2_grpc.BrokerStub(channels[i % 4]).Subscribe(
                    broker_pb2.SubscribeRequest(topic="crowd", offset=1))
                for i in range(streams)
            ]
            await until(
                lambda: server.metric('stratalog_waiting_rpcs{kind="subscribe"}') == streams,
                "every subscriber admitted")
            idle = _rss_bytes(server) - baseline
            assert idle < streams * STREAM_OVERHEAD_BYTES, f"{idle / MIB:.1f} MiB idle"
            await _other_client_is_served(server, "crowd")

            # Data arrives; no client reads: every stream stalls holding a message.
            batch_count, value_bytes = 512, 4096
            for _ in range(8):
                await _produce(producer, "crowd", _batches(batch_count // 8, value_bytes))
            batch_bytes = len(_batches(1, value_bytes))
            previous = -1.0

            def quiet() -> bool:
                nonlocal previous
                sent = server.metric('stratalog_bytes_out_total{topic="crowd"}')
                settled, previous = sent == previous and sent > 0, sent
                return settled

            await until(quiet, "the stalled streams settled")
            stalled = _rss_bytes(server) - baseline
            bound = 2 * (budget_bytes + streams * batch_bytes) + streams * STREAM_OVERHEAD_BYTES
            assert stalled < bound, (
                f"{stalled / MIB:.1f} MiB for {streams} stalled subscribers, bound "
                f"{bound / MIB:.1f} MiB"
            )
            assert server.metric("stratalog_subscribe_buffer_bytes") > 0
            await _other_client_is_served(server, "crowd")
            for call in calls:
                call.cancel()
        finally:
            for channel in channels:
                await channel.close()
        await until(
            lambda: server.metric('stratalog_waiting_rpcs{kind="subscribe"}') == 0,
            "the streams ended on the server")
        # The clients' cancels end their streams quietly: what a write after a cancel raises
        # is not the server's error (it was logged as ~500 internal errors).
        errors = [line for line in server.log_path.read_text().splitlines() if " ERROR " in line]
        assert not errors, errors[:3]
        # Given back: near where it began (the maintenance pass trims the heap, having seen the
        # crowd though it came and went between two passes). Measured +16 MiB; untrimmed
        # +44-47 MiB here, more on a loaded machine.
        given_back_bound = baseline + 40 * MIB
        await until(lambda: _rss_bytes(server) < given_back_bound,
                     f"RSS back under {given_back_bound / MIB:.0f} MiB "
                     f"(baseline {baseline / MIB:.0f} MiB)", timeout_s=60)
        assert server.metric("stratalog_subscribe_buffer_bytes") == 0
    assert server.stop() == 0


async def test_connections_beyond_max_connections_are_closed_until_one_ends(start_server) -> None:  # type: ignore[no-untyped-def]
    server: ServerProcess = start_server(None, "--max-connections", "2")
    options = [("grpc.use_local_subchannel_pool", 1)]
    request = broker_pb2.ListTopicsRequest()
    first = grpc.aio.insecure_channel(server.target, options=options)
    second = grpc.aio.insecure_channel(server.target, options=options)
    third = grpc.aio.insecure_channel(server.target, options=options)
    try:
        for channel in (first, second):
            await broker_pb2_grpc.BrokerStub(channel).ListTopics(request, timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await broker_pb2_grpc.BrokerStub(third).ListTopics(request, timeout=10)
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE  # retriable for clients
        await first.close()
        # The slot is free again: the third connects on one of its reconnection attempts.
        for _ in range(60):
            try:
                await broker_pb2_grpc.BrokerStub(third).ListTopics(
                    request, timeout=10, wait_for_ready=True)
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.5)
        else:
            raise AssertionError("the third connection never got the slot of the first")
    finally:
        for channel in (first, second, third):
            await channel.close()
    assert server.stop() == 0
