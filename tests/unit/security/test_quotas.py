"""Byte-rate quotas: Kafka's windowed rate and throttle time, on a clock the test moves."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.server.rpc.quotas import _with_throttle_time
from stratalog.server.security.errors import QuotaBacklogExceededError
from stratalog.server.security.quotas import ProduceAdmission, QuotaConfig, QuotaManager, Rate
from stratalog.server.settings import load_settings
from stratalog.v1 import broker_pb2 as pb


class Clock:
    """Milliseconds that move only when the test says."""

    def __init__(self) -> None:
        self.now_ms = 0.0

    def __call__(self) -> float:
        return self.now_ms


def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    rate = Rate(window_ms=1000, samples_max=11)
    rate.record(1000, 0)
    # One sample so far, but the rate is over 10 windows (Kafka's Rate.windowSize).
    assert rate.window_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(100.0)
    rate.record(1000, 500)  # the same sample
    assert rate.measure(500) == pytest.approx(2000 / 10.5)
    rate.record(1000, 1000)  # a new sample
    assert rate.measure(1000) == pytest.approx(3000 / 10)  # 1 full window + 9 padded
    # Past the whole span (11 windows) every old sample is dropped.
    assert rate.measure(12_000) == 0.0
    assert rate.idle(12_000)
    fresh = Rate(window_ms=1000, samples_max=11)
    fresh.record(1, 0)
    assert not fresh.idle(10_999)
    assert fresh.idle(11_000)


def test_rate_reuses_its_samples_as_a_ring() -> None:
    rate = Rate(window_ms=100, samples_max=3)
    for step in range(10):
        rate.record(10, step * 100)
    # Three samples of 10 each are kept; they span 200 ms + the current one's 0 ms, padded to
    # two windows: 30 units over 0.2 s.
    assert rate.measure(900) == pytest.approx(30 / 0.2)


class PlainRate:
    """Kafka's SampledStat and Rate, written plainly: every measure sums the samples again.
    As in Kafka, a measure resets the samples that expired (their start becomes now)."""

    def __init__(self, window_ms: int, samples_max: int) -> None:
        self.window_ms, self.samples_max = window_ms, samples_max
        self.samples: list[list[float]] = []
        self.current = 0

    def record(self, value: float, now_ms: float) -> None:
        if not self.samples:
            self.samples.append([now_ms, 0.0])
        if now_ms - self.samples[self.current][0] >= self.window_ms:
            self.current = (self.current + 1) % self.samples_max
            if self.current >= len(self.samples):
                self.samples.append([now_ms, 0.0])
            else:
                self.samples[self.current] = [now_ms, 0.0]
        self.samples[self.current][1] += value

    def measure(self, now_ms: float) -> float:
        for sample in self.samples:
            if now_ms - sample[0] >= self.samples_max * self.window_ms:
                sample[:] = [now_ms, 0.0]
        elapsed = now_ms - min(s[0] for s in self.samples)
        full = int(elapsed // self.window_ms)
        if full < self.samples_max - 1:
            elapsed += (self.samples_max - 1 - full) * self.window_ms
        return sum(s[1] for s in self.samples) * 1000 / elapsed


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 700), st.integers(0, 10_000), st.booleans()),
                   max_size=60),
    samples_max=st.integers(2, 5),
)
def test_rate_equals_the_plain_computation(steps, samples_max) -> None:
    """Random records and measures: the rate kept incrementally (running total, oldest start)
    equals the one summed again from the samples each time."""
    rate = Rate(window_ms=250, samples_max=samples_max)
    plain = PlainRate(250, samples_max)
    now = 0.0
    recorded = False
    for advance_ms, value, measure in steps:
        now += advance_ms
        if measure and recorded:
            assert rate.measure(now) == pytest.approx(plain.measure(now))
        else:
            rate.record(value, now)
            plain.record(value, now)
            recorded = True
        rate.check()


def test_throttle_time_is_kafkas_formula() -> None:
    clock = Clock()
    quotas = QuotaManager(QuotaConfig(producer_byte_rate=100), clock)
    assert quotas.record_produce("User:alice", 1000) == 0  # exactly the quota: 1000 B / 10 s
    # 2000 B over 10 s = 200 B/s, twice the quota: (200 - 100) / 100 * 10 s.
    assert quotas.record_produce("User:alice", 1000) == 10_000
    # Another principal has a rate of its own.
    assert quotas.record_produce("User:bob", 1000) == 0


def test_throttle_time_never_exceeds_the_measured_span() -> None:
    quotas = QuotaManager(QuotaConfig(producer_byte_rate=1, window_num=11,
                                      window_size_ms=1000), Clock())
    assert quotas.record_produce("User:alice", 10**9) == 11_000


def test_a_sequential_client_is_held_near_its_quota() -> None:
    """A client that sends its next request once the last was answered (after the delay):
    over 20 simulated seconds it moves within a few percent of its quota."""
    for window_num, window_size_ms in ((2, 500), (11, 1000)):
        clock = Clock()
        quotas = QuotaManager(QuotaConfig(producer_byte_rate=100_000, window_num=window_num,
                                          window_size_ms=window_size_ms), clock)
        sent = 0
        while clock.now_ms < 20_000:
            delay_ms = quotas.record_produce("User:alice", 20_000)
            sent += 20_000
            clock.now_ms += delay_ms + 2  # the answer's delay, then 2 ms of work
        rate = sent / (clock.now_ms / 1000)
        # Kafka's padded window lets a first burst of (window_num - 1) windows through.
        burst = 100_000 * (window_num - 1) * window_size_ms / 1000
        assert 100_000 * 0.9 < rate <= (100_000 * 20 + burst) / 20 * 1.05


def test_quotas_per_principal_and_none() -> None:
    config = QuotaConfig(
        producer_byte_rate=100, consumer_byte_rate=0,
        overrides={"User:alice": {"producer_byte_rate": 0, "consumer_byte_rate": 50},
                   "User:bob": {"producer_byte_rate": 10}},
    )
    assert config.quota("producer_byte_rate", "User:alice") == 0
    assert config.quota("consumer_byte_rate", "User:alice") == 50
    assert config.quota("producer_byte_rate", "User:bob") == 10
    assert config.quota("consumer_byte_rate", "User:bob") == 0
    assert config.quota("producer_byte_rate", "User:carol") == 100
    assert config.enabled
    assert not QuotaConfig().enabled
    assert QuotaConfig(overrides={"User:a": {"consumer_byte_rate": 1}}).enabled
    quotas = QuotaManager(config, Clock())
    assert quotas.record_produce("User:alice", 10**9) == 0  # no quota: nothing recorded
    assert quotas.sensors == 0


def test_fetch_size_is_bounded_by_what_the_window_allows() -> None:
    quotas = QuotaManager(QuotaConfig(consumer_byte_rate=1000, window_num=11,
                                      window_size_ms=1000), Clock())
    assert quotas.fetch_bytes_max("User:alice") == 10_000  # Kafka's getMaxValueInQuotaWindow
    assert QuotaManager(QuotaConfig(), Clock()).fetch_bytes_max("User:alice") is None


def test_idle_principals_are_forgotten() -> None:
    clock = Clock()
    quotas = QuotaManager(QuotaConfig(producer_byte_rate=10**9, window_num=2,
                                      window_size_ms=100), clock)
    for index in range(1024):
        quotas.record_produce(f"User:u{index}", 1)
    assert quotas.sensors == 1024
    clock.now_ms = 1000  # every one of them idle for longer than the span
    quotas.record_produce("User:new", 1)
    assert quotas.sensors == 1


def test_update_keeps_rates_unless_the_window_changes() -> None:
    clock = Clock()
    quotas = QuotaManager(QuotaConfig(producer_byte_rate=100), clock)
    quotas.record_produce("User:alice", 1000)
    quotas.update(QuotaConfig(producer_byte_rate=50))
    assert quotas.record_produce("User:alice", 0) == 10_000  # 100 B/s against 50: (100-50)/50*W
    quotas.update(QuotaConfig(producer_byte_rate=50, window_num=3, window_size_ms=1000))
    assert quotas.sensors == 0
    quotas.update(QuotaConfig())
    assert not quotas.enabled


def test_quota_config_of_settings(tmp_path) -> None:
    config_file = tmp_path / "stratalog.toml"
    config_file.write_text(
        "quota_producer_byte_rate = 1000\n"
        "quota_window_num = 5\n"
        '[quotas."User:CN=client.example.com,O=Ex"]\n'
        "consumer_byte_rate = 7\n"
    )
    settings = load_settings(config_file=config_file, environ={
        "STRATALOG_QUOTA_CONSUMER_BYTE_RATE": "2000",
    })
    assert QuotaConfig.of_settings(settings) == QuotaConfig(
        1000, 2000, {"User:CN=client.example.com,O=Ex": {"consumer_byte_rate": 7}}, 5, 1000
    )


@pytest.mark.parametrize("throttle_ms", [1, 127, 128, 11_000, 2**31 - 1])
def test_throttle_time_appended_to_a_serialized_answer(throttle_ms: int) -> None:
    message = pb.FetchResponse(topic="t", record_batches=b"x" * 300, next_offset=7)
    parsed = pb.FetchResponse.FromString(
        _with_throttle_time(message.SerializeToString(), throttle_ms)
    )
    assert parsed.throttle_time_ms == throttle_ms
    parsed.throttle_time_ms = 0
    assert parsed == message


# ---------------------------------------------------------------- ProduceAdmission


def _admission(rate: int, bytes_max: int) -> tuple[QuotaManager, ProduceAdmission]:
    # Two samples of 100 ms: a new principal may burst 100 ms worth of its quota.
    manager = QuotaManager(QuotaConfig(producer_byte_rate=rate, window_num=2,
                                       window_size_ms=100))
    return manager, ProduceAdmission(manager, bytes_max)


async def test_a_throttled_principals_requests_wait_before_they_are_served() -> None:
    _, admission = _admission(rate=100_000, bytes_max=10**9)
    started = time.monotonic()
    # 20 requests of 10 kB at once: 200 kB at 100 kB/s, less the 10 kB burst. Each is
    # admitted only once the rate the ones before it made is back at the quota.
    throttles = await asyncio.gather(*(
        admission.admit("User:alice", "User:alice", 10_000) for _ in range(20)
    ))
    elapsed = time.monotonic() - started
    assert elapsed >= 0.8 * (200_000 - 10_000) / 100_000, elapsed  # a lower bound: load-proof
    assert max(throttles) > 0
    assert admission.in_flight_bytes("User:alice") == 200_000
    for _ in range(20):
        admission.release("User:alice", 10_000)
    assert admission.in_flight_bytes("User:alice") == 0
    admission.check()
    # Another principal was never held back by alice's queue.
    assert await admission.admit("User:bob", "User:bob", 10_000) == 0
    admission.release("User:bob", 10_000)


async def test_a_full_backlog_refuses_at_once_and_a_large_request_passes_alone() -> None:
    _, admission = _admission(rate=10**9, bytes_max=25_000)
    await admission.admit("User:alice", "User:alice", 10_000)
    await admission.admit("User:alice", "User:alice", 10_000)
    with pytest.raises(QuotaBacklogExceededError, match="quota_produce_bytes_in_flight_max"):
        await admission.admit("User:alice", "User:alice", 10_000)
    # Each client has its own backlog.
    await admission.admit("User:ANONYMOUS", "host:10.0.0.9", 10_000)
    admission.release("User:alice", 10_000)
    admission.release("User:alice", 10_000)
    admission.release("host:10.0.0.9", 10_000)
    # Larger than the whole limit, with nothing else in flight: admitted alone.
    await admission.admit("User:alice", "User:alice", 100_000)
    with pytest.raises(QuotaBacklogExceededError):
        await admission.admit("User:alice", "User:alice", 1)
    admission.release("User:alice", 100_000)
    admission.check()


async def test_a_request_cancelled_while_waiting_gives_its_bytes_back() -> None:
    manager, admission = _admission(rate=1_000, bytes_max=10**9)
    await admission.admit("User:alice", "User:alice", 100_000)  # far over: the next waits
    admission.release("User:alice", 100_000)
    waiting = asyncio.ensure_future(admission.admit("User:alice", "User:alice", 5_000))
    for _ in range(10):
        await asyncio.sleep(0)
    assert admission.in_flight_bytes("User:alice") == 5_000
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert admission.in_flight_bytes("User:alice") == 0
    admission.check()
    assert manager.produce_throttle_ms("User:alice") > 0  # only the first one was recorded
