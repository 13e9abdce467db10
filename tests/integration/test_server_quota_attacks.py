"""The produce quota under attack, against a real server (issue 24, finding 6).

The probe's attack: a client with a 2 MiB/s produce quota kept 1,000 requests of 1 MiB in
flight. Every request was served at once and only its answer delayed, so the client got 42.7
MiB/s (21 times its quota), the server's resident size peaked at 2,319 MiB, and another client's
fetch p99 went from 18 to 335 ms. Now a throttled client's requests wait before they are served
and its backlog is bounded (``quota_produce_bytes_in_flight_max``, 16 MiB by default): one past
it is refused RESOURCE_LIMIT_EXCEEDED at once, and the client retries it after a backoff, as a
Kafka producer does (``retry.backoff.ms``, 100 ms).

Scaled to this shared 2-core machine: 1,000 requests in flight of 256 KiB (the test process
holds what it sends), against a 1 MiB/s quota. What is checked, each against a bound that
holds with room on a loaded machine:

* the rate the client is served at, measured once the quota's initial burst is spent, is at
  most 1.2 times the quota (the defect: 21 times);
* the server's resident size: the first wave (gRPC reads each of the 1,000 requests before the
  server can refuse it) adds at most twice what the client put in flight (gRPC's copies) plus
  the backlog (16 MiB) plus a fixed margin; after it, the resident size grows by at most the margin (the refused
  requests come back only after the refusal's ``retry_after_ms``, when the backlog drained);
* another client's fetch p99 during the attack is within 2 times (plus 50 ms for the machine's
  noise) its p99 measured idle, in the same test.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from pathlib import Path

import grpc
import grpc.aio
import pytest

from stratalog.records import build_batch
from stratalog.v1 import broker_pb2, broker_pb2_grpc

from .conftest import ServerProcess

#: make test runs this module in its serial phase: it compares fetch p99 latencies and measures the
#: server's resident size, which the parallel phase's load would disturb.
pytestmark = pytest.mark.serial

MIB = 1024 * 1024
QUOTA = 1 * MIB  # bytes per second
WINDOW = ("--quota-window-num", "2", "--quota-window-size-ms", "500")
REQUEST_BYTES = 256 * 1024
IN_FLIGHT = 1000
ATTACK_S = 8.0
#: The rate is measured from this long into the attack (the quota's burst is spent by then).
STEADY_FROM_S = 2.0
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0
BACKLOG_BYTES = 16 * MIB  # quota_produce_bytes_in_flight_max's default
#: The allocator's slack (its arenas keep freed blocks) and the server's own working set.
RSS_MARGIN_BYTES = 64 * MIB
FETCHES = 200
CALL_TIMEOUT_S = 60.0


def _rss_bytes(server: ServerProcess) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None, status
    return int(match.group(1)) * 1024


def _error_info(error: grpc.aio.AioRpcError) -> dict[str, str]:
    from google.rpc import error_details_pb2, status_pb2

    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return dict(info.metadata)
    return {}


async def _fetch_p99_s(stub: broker_pb2_grpc.BrokerStub) -> float:
    latencies = []
    for _ in range(FETCHES):
        started = time.monotonic()
        await stub.FetchByOffset(broker_pb2.FetchByOffsetRequest(topic="other", offset=0,
                                                                 max_bytes=64 * 1024),
                                 timeout=CALL_TIMEOUT_S)
        latencies.append(time.monotonic() - started)
    latencies.sort()
    return latencies[int(0.99 * len(latencies)) - 1]


async def test_a_thousand_produce_requests_in_flight_get_the_quota_and_bounded_memory(
    start_server,
) -> None:
    server = start_server(None, "--quota-producer-byte-rate", str(QUOTA), *WINDOW)
    batch = build_batch([(1_700_000_000_000, None, b"v" * (REQUEST_BYTES - 100), ())])
    request = broker_pb2.ProduceRequest(topic="attack", record_batches=batch)
    request_bytes = len(batch)
    options = [("grpc.max_send_message_length", 4 * MIB)]
    async with grpc.aio.insecure_channel(server.target) as other_channel, \
            grpc.aio.insecure_channel(server.target, options=options) as attack_channel:
        other = broker_pb2_grpc.BrokerStub(other_channel)
        attacker = broker_pb2_grpc.BrokerStub(attack_channel)
        for topic in ("attack", "other"):
            await other.CreateTopic(broker_pb2.CreateTopicRequest(name=topic, partitions=1),
                                    timeout=CALL_TIMEOUT_S)
        await other.Produce(broker_pb2.ProduceRequest(topic="other", record_batches=build_batch(
            [(1_700_000_000_000, None, b"x" * 1000, ())] * 10)), timeout=CALL_TIMEOUT_S)
        idle_p99_s = await _fetch_p99_s(other)
        rss_before = _rss_bytes(server)

        acked: list[float] = []  # when each request was answered OK
        refused = 0
        started = time.monotonic()
        deadline = started + ATTACK_S

        async def attack(rng: random.Random) -> None:
            nonlocal refused
            backoff_s = RETRY_BACKOFF_S
            while time.monotonic() < deadline:
                try:
                    await attacker.Produce(request, timeout=CALL_TIMEOUT_S)
                except grpc.aio.AioRpcError as error:
                    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
                    refused += 1
                    # Kafka's producer: retry.backoff.ms doubling up to retry.backoff.max.ms,
                    # with 20% jitter (ours does the same); and not before the throttle time
                    # the broker asked for (KIP-219), here the refusal's retry_after_ms.
                    hint_s = int(_error_info(error).get("retry_after_ms", "0")) / 1000
                    await asyncio.sleep(max(hint_s, backoff_s) * rng.uniform(0.8, 1.2))
                    backoff_s = min(2 * backoff_s, RETRY_BACKOFF_MAX_S)
                else:
                    acked.append(time.monotonic() - started)
                    backoff_s = RETRY_BACKOFF_S

        rss_peak = rss_before

        async def watch_rss() -> None:
            nonlocal rss_peak
            while time.monotonic() < deadline:
                rss_peak = max(rss_peak, _rss_bytes(server))
                await asyncio.sleep(0.05)

        attackers = [asyncio.ensure_future(attack(random.Random(i))) for i in range(IN_FLIGHT)]
        watcher = asyncio.ensure_future(watch_rss())
        await asyncio.sleep(STEADY_FROM_S)  # the attack under way, past the quota's burst
        rss_first_wave, rss_peak = rss_peak, _rss_bytes(server)
        attacked_p99_s = await _fetch_p99_s(other)
        await watcher
        for task in attackers:
            task.cancel()
        await asyncio.gather(*attackers, return_exceptions=True)
    steady = [t for t in acked if STEADY_FROM_S <= t <= ATTACK_S]
    rate = len(steady) * request_bytes / (ATTACK_S - STEADY_FROM_S)
    print(f"rate {rate / MIB:.2f} MiB/s ({rate / QUOTA:.2f}x), acked {len(acked)},"
          f" refused {refused}, rss {rss_before / MIB:.0f} -> first wave"
          f" {rss_first_wave / MIB:.0f} -> peak after {rss_peak / MIB:.0f} MiB,"
          f" fetch p99 idle {idle_p99_s * 1000:.1f} ms, attacked {attacked_p99_s * 1000:.1f} ms")
    assert rate <= 1.2 * QUOTA, rate / QUOTA
    assert rate >= 0.5 * QUOTA, rate / QUOTA  # the client is still served at about its quota
    assert refused > 0  # the backlog's bound was reached and held
    # The first wave: gRPC reads every request before the server sees it (a refused one too),
    # so what the client put in flight at once passes through its buffers, up to twice (its
    # slices and the bytes handed to Python; measured +180-350 MiB), plus the backlog.
    first_wave_bound = BACKLOG_BYTES + 2 * IN_FLIGHT * REQUEST_BYTES + RSS_MARGIN_BYTES
    assert rss_first_wave - rss_before <= first_wave_bound, (rss_before, rss_first_wave)
    # After it, nothing more: the backlog is bounded and the refused requests come back only
    # when it has drained. (The defect kept all 1,000 served and held, re-sent at once.)
    assert rss_peak - rss_first_wave <= RSS_MARGIN_BYTES, (rss_first_wave, rss_peak)
    assert attacked_p99_s <= 2 * idle_p99_s + 0.05, (idle_p99_s, attacked_p99_s)
    assert server.stop() == 0
