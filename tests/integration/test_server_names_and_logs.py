"""Client-chosen names against a real server with the authorizer on (issue 24, finding 8).

The probe's attack: 400 DescribeTopic calls with 256 KiB topic names from a principal with no
ACLs grew the server by 316 MiB (the decision cache is bounded in entries, not bytes), wrote 17
MiB of log in 3.7 s, and the refusal carried the whole name in its trailers, past gRPC's 8 KiB
metadata limit, so a plain client saw RESOURCE_EXHAUSTED. Here the name is refused
INVALID_ARGUMENT + INVALID_TOPIC before anything is cached or logged; the server's resident
size and its log grow by at most a fixed margin; a string the server does log (a transactional
id, a user name) is escaped, so a newline in it cannot forge a log line.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import grpc
import grpc.aio
import pytest

from stratalog.v1 import broker_pb2, broker_pb2_grpc

from .conftest import ServerProcess

#: make test runs this module in its serial phase: it measures the server's resident size, which the
#: parallel phase's load would disturb.
pytestmark = pytest.mark.serial

MIB = 1024 * 1024
NAME_CHARS = 256 * 1024
FLOOD_CALLS = 400
CONCURRENT_CALLS = 20
#: What a second flood may add to the server's resident size: the allocator's slack (the
#: defect kept 400 × 256 KiB = 100 MiB more per flood of new names in the decision cache).
RSS_MARGIN_BYTES = 32 * MIB
#: What the flood may add to the log (the defect: 17 MiB).
LOG_MARGIN_BYTES = 64 * 1024
ACL_SERVER = ("--authorizer", "acl")


def _rss_bytes(server: ServerProcess) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None, status
    return int(match.group(1)) * 1024


def _reason(error: grpc.aio.AioRpcError) -> str | None:
    from google.rpc import error_details_pb2, status_pb2

    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info.reason
    return None


async def test_a_flood_of_huge_topic_names_is_refused_invalid_with_bounded_memory_and_log(
    start_server,
) -> None:
    server = start_server(None, *ACL_SERVER)
    codes: dict[grpc.StatusCode, int] = {}
    reasons: set[str | None] = set()
    # A plain client: gRPC's default metadata limit (8 KiB) for the trailers it accepts.
    async with grpc.aio.insecure_channel(
        server.target, options=[("grpc.max_send_message_length", 4 * MIB)]
    ) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)

        async def describe(index: int) -> None:
            name = f"{index:06d}" + "x" * (NAME_CHARS - 6)
            try:
                await stub.DescribeTopic(broker_pb2.DescribeTopicRequest(name=name), timeout=30)
            except grpc.aio.AioRpcError as error:
                codes[error.code()] = codes.get(error.code(), 0) + 1
                reasons.add(_reason(error))
            else:
                raise AssertionError("a 256 KiB topic name was described")

        async def flood(first: int) -> None:
            for start in range(first, first + FLOOD_CALLS, CONCURRENT_CALLS):
                await asyncio.gather(*(describe(i) for i in range(start,
                                                                  start + CONCURRENT_CALLS)))

        # Warm up with a first flood: the server's first calls of this size raise its heap's
        # high-water mark (gRPC's threads and buffers, the allocator's arenas: ~+150 MiB
        # measured, +85 MiB of it with 10-character names), once. A second flood of new names
        # must then cost nothing that stays: the defect kept every name in the decision cache.
        await flood(0)
        rss_before, log_before = _rss_bytes(server), len(server.log_text().encode())
        await flood(FLOOD_CALLS)
        rss_after, log_after = _rss_bytes(server), len(server.log_text().encode())
    print(f"second flood: rss {rss_before / MIB:.0f} -> {rss_after / MIB:.0f} MiB,"
          f" log +{log_after - log_before} bytes")
    # Every call refused INVALID_ARGUMENT, none RESOURCE_EXHAUSTED (trailers past 8 KiB).
    assert codes == {grpc.StatusCode.INVALID_ARGUMENT: 2 * FLOOD_CALLS}
    assert reasons == {"INVALID_TOPIC"}
    assert rss_after - rss_before < RSS_MARGIN_BYTES, (rss_before, rss_after)
    assert log_after - log_before < LOG_MARGIN_BYTES, server.log_text()[-2000:]
    assert server.stop() == 0


async def test_names_with_newlines_are_logged_escaped(start_server) -> None:
    server = start_server(None, *ACL_SERVER)
    fake = "2026-11-29 06:00:00 INFO stratalog.server.app: FAKE admin granted ALL"
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        # A transactional id may hold any character: the denial names it in the log.
        try:
            await stub.EndTxn(broker_pb2.EndTxnRequest(
                transactional_id=f"txn\n{fake}", producer_id=1, producer_epoch=0, commit=True,
            ), timeout=30)
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        else:
            raise AssertionError("EndTxn without ACLs was served")
        # A topic name with a newline is no topic name: refused before it is logged at all.
        try:
            await stub.Produce(broker_pb2.ProduceRequest(topic=f"t\n{fake}"), timeout=30)
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert _reason(error) == "INVALID_TOPIC"
    log = server.log_text()
    assert "denied 'User:ANONYMOUS'" in log and "txn\\n2026-11-29" in log, log[-2000:]
    assert not any(line.startswith(fake) for line in log.splitlines()), log[-2000:]
    assert server.stop() == 0
