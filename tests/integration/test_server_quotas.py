"""Byte-rate quotas against a real server: produce, fetch and Subscribe held near the quota by
delayed answers, per-principal quotas from the settings file, reloaded on SIGHUP; the Producer's
and the Consumer's total throttle time, against the server's own count.

The bounds are generous on purpose (these machines are shared and noisy): a client sending as
fast as it can is measured over a few seconds, and the rate must come out within a factor of
about 1.6 of the quota either way, where without the quota it would be tens of times higher.
The quota is measured over 2 samples of 500 ms here, so that the burst Kafka's windowed rate
lets through at first (the quota over ``quota_window_num - 1`` windows: 250 ms worth) is small
next to the seconds measured; the expected rate is then about 1.1 times the quota.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from stratalog.client import Consumer, Producer, SyncClient
from stratalog.client.wire import FetchFormat

from .conftest import ServerProcess

#: make test runs this module in its serial phase: it measures byte rates against a quota, which the
#: parallel phase's load would slow.
pytestmark = pytest.mark.serial

QUOTA = 400_000  # bytes per second
WINDOW = ("--quota-window-num", "2", "--quota-window-size-ms", "500")
MEASURE_S = 4.0
VALUE = b"v" * 40_000


def _within_bounds(rate: float) -> bool:
    return QUOTA / 1.6 < rate < QUOTA * 1.6


def test_produce_is_held_near_the_quota(start_server) -> None:
    server = start_server(None, "--quota-producer-byte-rate", str(QUOTA), *WINDOW)
    with SyncClient(server.target) as client:
        client.create_topic("produce-quota")
        sent, throttles = 0, []
        started = time.monotonic()
        while time.monotonic() - started < MEASURE_S:
            result = client.produce("produce-quota", 0, [VALUE])
            sent += len(VALUE)
            throttles.append(result.throttle_time_ms)
        rate = sent / (time.monotonic() - started)
    assert _within_bounds(rate), f"{rate:.0f} B/s against a quota of {QUOTA}"
    assert max(throttles) > 0
    assert max(throttles) <= 1000  # never more than the measured span (2 x 500 ms)


def _fill(client: SyncClient, topic: str, total_bytes: int) -> None:
    client.create_topic(topic)
    for _ in range(total_bytes // len(VALUE)):
        client.produce(topic, 0, [VALUE])


def test_fetch_is_held_near_the_quota_and_bounded_per_answer(start_server) -> None:
    server = start_server(None, "--quota-consumer-byte-rate", str(QUOTA), *WINDOW)
    with SyncClient(server.target) as client:
        _fill(client, "fetch-quota", 4 * 1024 * 1024)
        received, offset, throttles = 0, 0, []
        started = time.monotonic()
        while time.monotonic() - started < MEASURE_S:
            result = client.fetch_by_offset("fetch-quota", 0, offset, max_bytes=50 * 1024 * 1024,
                                            fetch_format=FetchFormat.RECORD_BATCHES)
            # One answer never holds more than the quota allows over one window (200 KB here),
            # the first batch excepted.
            assert len(result.record_batches) <= QUOTA * 0.5 + 2 * len(VALUE)
            received += len(result.record_batches)
            offset = result.next_offset
            throttles.append(result.throttle_time_ms)
        rate = received / (time.monotonic() - started)
    assert _within_bounds(rate), f"{rate:.0f} B/s against a quota of {QUOTA}"
    assert max(throttles) > 0


def test_subscribe_is_held_near_the_quota(start_server) -> None:
    server = start_server(None, "--quota-consumer-byte-rate", str(QUOTA), *WINDOW,
                          "--subscribe-buffer-bytes", "65536")
    with SyncClient(server.target) as client:
        _fill(client, "subscribe-quota", 4 * 1024 * 1024)
        received, throttles = 0, []
        stream = client.subscribe("subscribe-quota", 0, offset=0,
                                  fetch_format=FetchFormat.RECORD_BATCHES)
        started = time.monotonic()
        for message in stream:
            received += len(message.record_batches)
            throttles.append(message.throttle_time_ms)
            if time.monotonic() - started >= MEASURE_S:
                break
        stream.close()
        rate = received / (time.monotonic() - started)
    assert _within_bounds(rate), f"{rate:.0f} B/s against a quota of {QUOTA}"
    assert max(throttles) > 0


def _wait_for_log(server: ServerProcess, text: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in server.log_text():
        assert time.monotonic() < deadline, f"{text!r} not logged; log:\n{server.log_text()}"
        time.sleep(0.05)


def _burst_throttle_ms(client: SyncClient, topic: str) -> int:
    """The largest throttle of a burst of 10 produces of 40 KB."""
    return max(client.produce(topic, 0, [VALUE]).throttle_time_ms for _ in range(10))


def test_per_principal_quota_from_the_file_reloaded_on_sighup(start_server, tmp_path: Path):
    config = tmp_path / "stratalog.toml"
    config.write_text(
        "quota_window_num = 2\nquota_window_size_ms = 500\n"
        '[quotas."User:ANONYMOUS"]\nproducer_byte_rate = 100000\n'
    )
    server = start_server(None, "--config", str(config))
    with SyncClient(server.target) as client:
        client.create_topic("reloaded")
        assert _burst_throttle_ms(client, "reloaded") > 0
        # The principal's quota raised far above what it sends: no more throttling.
        config.write_text(
            "quota_window_num = 2\nquota_window_size_ms = 500\n"
            '[quotas."User:ANONYMOUS"]\nproducer_byte_rate = 1000000000\n'
        )
        server.process.send_signal(signal.SIGHUP)
        _wait_for_log(server, "quotas reloaded")
        assert _burst_throttle_ms(client, "reloaded") == 0
        # A file that no longer reads keeps the quotas in force.
        config.write_text("quota_window_num = [oops\n")
        server.process.send_signal(signal.SIGHUP)
        _wait_for_log(server, "reloading the quotas failed")
        assert _burst_throttle_ms(client, "reloaded") == 0
    assert server.stop() == 0


def _throttled_ms(server: ServerProcess, quota: str) -> float:
    """What the server's metrics say it held back for ``quota``, in ms."""
    return server.metric(f'stratalog_quota_throttle_seconds_total{{quota="{quota}"}}') * 1000


async def test_the_producer_totals_the_throttle_time_it_was_given(start_server) -> None:
    server = start_server(None, "--quota-producer-byte-rate", str(QUOTA), *WINDOW)
    with SyncClient(server.target) as client:
        client.create_topic("producer-throttled", partitions=2)
    async with Producer(server.target, linger_ms=0) as producer:
        assert producer.throttle_time_ms_total == 0
        sent = [await producer.send("producer-throttled", VALUE, partition=i % 2)
                for i in range(30)]  # 1.2 MB: about 3 s at the quota
        await producer.flush()
        for delivery in sent:
            await delivery
        total_ms = producer.throttle_time_ms_total
    # The server's count of what it held back: this producer was its only client.
    assert total_ms > 0
    assert total_ms == round(_throttled_ms(server, "produce"))


async def test_the_consumer_totals_the_throttle_time_it_was_given(start_server) -> None:
    server = start_server(None, "--quota-consumer-byte-rate", str(QUOTA), *WINDOW)
    records = 30  # 1.2 MB: about 3 s at the quota
    with SyncClient(server.target) as client:
        _fill(client, "consumer-throttled", records * len(VALUE))
    # Fetches, to the end: every answer the server held back reached the consumer.
    async with Consumer(server.target, "consumer-throttled") as consumer:
        assert consumer.throttle_time_ms_total == 0
        assert sum([len(batch) async for batch in consumer.batches()]) == records
        total_ms = consumer.throttle_time_ms_total
    assert total_ms > 0
    assert total_ms == round(_throttled_ms(server, "fetch"))
    # A Subscribe stream, left once the records are in: a message read ahead and throttled may
    # not have reached the consumer yet, so it is told of at most what the server held back.
    before = _throttled_ms(server, "fetch")
    async with Consumer(server.target, "consumer-throttled", follow=True,
                        use_subscribe=True) as consumer:
        received = 0
        async for batch in consumer.batches():
            received += len(batch)
            if received == records:
                break
        total_ms = consumer.throttle_time_ms_total
    assert 0 < total_ms <= round(_throttled_ms(server, "fetch") - before)
