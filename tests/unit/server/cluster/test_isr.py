"""The leader's follower bookkeeping (server/cluster/isr.py): Kafka's Replica fetch state,
the high watermark over the ISR, and the ISR shrink/expand decisions. Plain values and given
clock values: no processes, no timing."""

from __future__ import annotations

from stratalog.server.cluster.isr import (
    FollowerState,
    high_watermark_of,
    may_join_isr,
    out_of_sync_followers,
)

LAG_MS = 10_000


def test_a_fetch_at_the_leaders_end_is_caught_up_at_its_time() -> None:
    state = FollowerState(last_caught_up_ms=0)
    state.update_fetch_state(100, 0, leader_log_end_offset=100, fetch_ms=5_000)
    assert (state.log_end_offset, state.last_caught_up_ms) == (100, 5_000)


def test_reaching_the_previous_fetchs_leader_end_counts_from_that_fetch() -> None:
    # Kafka's ReplicaTest: the follower asked at 1,000 while the leader ended at 100; now it
    # asks for 100 while the leader moved on to 150: it was caught up as of the last fetch.
    state = FollowerState(last_caught_up_ms=0)
    state.update_fetch_state(50, 0, leader_log_end_offset=100, fetch_ms=1_000)
    assert state.last_caught_up_ms == 0
    state.update_fetch_state(100, 0, leader_log_end_offset=150, fetch_ms=2_000)
    assert state.last_caught_up_ms == 1_000
    # Behind both ends: no progress in catching up, and the time never goes back.
    state.update_fetch_state(120, 0, leader_log_end_offset=200, fetch_ms=3_000)
    assert state.last_caught_up_ms == 1_000


def test_the_high_watermark_is_the_least_log_end_of_the_isr() -> None:
    followers = {2: FollowerState(log_end_offset=80), 3: FollowerState(log_end_offset=60)}
    assert high_watermark_of(1, 100, [1, 2, 3], followers) == 60
    # Out of the ISR, a slow follower holds nothing back.
    assert high_watermark_of(1, 100, [1, 2], followers) == 80
    # The leader alone: its log end.
    assert high_watermark_of(1, 100, [1], followers) == 100
    # A member never heard from (a new leader's followers) counts as 0.
    assert high_watermark_of(1, 100, [1, 2, 4], followers) == 0
    assert high_watermark_of(1, 100, [1, 2], {2: FollowerState()}) == 0
    # Never above the leader's own log end.
    assert high_watermark_of(1, 50, [1, 2], followers) == 50


def test_followers_lagging_longer_than_the_limit_leave_the_isr() -> None:
    now = 100_000
    followers = {
        2: FollowerState(log_end_offset=90, last_caught_up_ms=now - LAG_MS),      # just in
        3: FollowerState(log_end_offset=90, last_caught_up_ms=now - LAG_MS - 1),  # too long
        4: FollowerState(log_end_offset=100, last_caught_up_ms=0),  # at the end: in sync
    }
    assert out_of_sync_followers(1, 100, [1, 2, 3, 4], followers, now, LAG_MS) == {3}
    # An ISR member the leader has no state for is out of sync; the leader never is.
    assert out_of_sync_followers(1, 100, [1, 5], followers, now, LAG_MS) == {5}


def test_a_follower_joins_once_at_the_high_watermark_and_the_leaders_epoch_start() -> None:
    assert may_join_isr(FollowerState(log_end_offset=50), high_watermark=50,
                        leader_epoch_start_offset=40)
    assert not may_join_isr(FollowerState(log_end_offset=49), high_watermark=50,
                            leader_epoch_start_offset=40)
    # Past the high watermark but short of what the leader wrote as leader: not yet (it could
    # miss records acknowledged before it joined).
    assert not may_join_isr(FollowerState(log_end_offset=50), high_watermark=30,
                            leader_epoch_start_offset=60)
    assert not may_join_isr(FollowerState(), high_watermark=0, leader_epoch_start_offset=0)


def test_a_stopped_follower_leaves_then_rejoins_after_catching_up() -> None:
    # The whole cycle on one clock: fetching, silent past the limit, back and caught up.
    state = FollowerState(last_caught_up_ms=0)
    followers = {2: state}
    state.update_fetch_state(10, 0, 10, fetch_ms=1_000)
    assert out_of_sync_followers(1, 10, [1, 2], followers, 1_000 + LAG_MS, LAG_MS) == set()
    # The leader appended up to 30; the follower stopped fetching.
    assert out_of_sync_followers(1, 30, [1, 2], followers, 1_001 + LAG_MS, LAG_MS) == {2}
    # The ISR without it: the high watermark is the leader's end.
    assert high_watermark_of(1, 30, [1], followers) == 30
    state.update_fetch_state(20, 0, 30, fetch_ms=20_000)
    assert not may_join_isr(state, high_watermark=30, leader_epoch_start_offset=0)
    state.update_fetch_state(30, 0, 30, fetch_ms=20_100)
    assert may_join_isr(state, high_watermark=30, leader_epoch_start_offset=0)
