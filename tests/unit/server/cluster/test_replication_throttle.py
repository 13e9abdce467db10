"""server/cluster/replication_throttle.py's token bucket: the bytes let through over any
stretch stay within the rate plus one second of burst plus one answer, against a plain model
over random fetch sizes and clocks."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from stratalog.server.cluster.replication_throttle import ReplicationThrottle


def test_an_answer_is_taken_whole_and_paid_for_by_waiting() -> None:
    throttle = ReplicationThrottle(1000, now_s=0.0)
    assert throttle.delay_s(0.0) == 0.0  # starts full: one second of burst
    throttle.record(3000, 0.0)
    assert throttle.delay_s(0.0) == 2.0  # 2,000 bytes of debt at 1,000 bytes/s
    assert throttle.delay_s(1.5) == 0.5
    assert throttle.delay_s(2.0) == 0.0
    throttle.check()


def test_idle_time_refills_at_most_one_second() -> None:
    throttle = ReplicationThrottle(1000, now_s=0.0)
    throttle.record(1000, 0.0)
    assert throttle.tokens == 0
    assert throttle.delay_s(100.0) == 0.0
    assert throttle.tokens == 1000  # capped: no burst saved up over the idle 100 s
    throttle.check()


def test_a_rate_of_zero_is_off() -> None:
    throttle = ReplicationThrottle(0, now_s=0.0)
    throttle.record(10**9, 0.0)
    assert not throttle.enabled and throttle.delay_s(0.0) == 0.0


def test_a_clock_going_back_refills_nothing() -> None:
    throttle = ReplicationThrottle(1000, now_s=10.0)
    throttle.record(2000, 10.0)
    assert throttle.delay_s(5.0) == 1.0
    throttle.check()


@example(rate=139, steps=[(311, 0.0), (18213, 0.0), (0, 0.0)])  # met with equality: float rounding
@given(rate=st.integers(1, 10_000),
       steps=st.lists(st.tuples(st.integers(0, 50_000), st.floats(0.0, 3.0)), max_size=60))
def test_a_fetcher_that_waits_as_told_stays_within_the_rate(rate: int,
                                                           steps: list[tuple[int, float]]) -> None:
    """A fetcher that fetches, then waits out :meth:`delay_s` (and maybe longer): the bytes it
    fetched by time t are at most rate * t + rate (the burst) + the last answer."""
    throttle = ReplicationThrottle(rate, now_s=0.0)
    now, fetched = 0.0, 0
    for size, extra_wait in steps:
        fetched += size
        throttle.record(size, now)
        throttle.check()
        # The bound is exact (a fetcher that waits exactly as told meets it with equality), so
        # allow the float arithmetic of ``now`` its rounding: a relative 1e-9.
        assert fetched <= (rate * now + rate + size) * (1 + 1e-9) + 1e-6
        now += throttle.delay_s(now) + extra_wait
