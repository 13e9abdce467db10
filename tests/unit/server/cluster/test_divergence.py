"""Where a follower truncates after a leader change (server/cluster/divergence.py, KIP-320):
the cases of Kafka's AbstractFetcherThreadTest and a model of replicas whose logs are lists of
the epochs their records were written in, through random elections, appends and partial
replication, after which every follower that syncs holds exactly its leader's log. The epoch
caches are the storage's own LeaderEpochCache, in memory."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.server.cluster.divergence import (
    DivergingEpoch,
    Truncation,
    diverging_epoch,
    truncation_offset,
)
from stratalog.server.storage.leader_epoch_cache import LeaderEpochCache


def cache_of(log: list[int]) -> LeaderEpochCache:
    """The epoch cache of a log given as the epoch of each record."""
    entries = [(epoch, offset) for offset, epoch in enumerate(log)
               if offset == 0 or log[offset - 1] != epoch]
    return LeaderEpochCache(None, entries)


def end_offsets(log: list[int], leader_epoch: int | None = None):
    """``end_offset_for_epoch`` of a replica with ``log``; a leader took ``leader_epoch`` at
    its log end when elected (the replica manager's makeLeader), records or not."""
    cache = cache_of(log)
    if leader_epoch is not None:
        cache.assign(leader_epoch, len(log))
    return lambda epoch: cache.end_offset_for(epoch, len(log))


def test_a_follower_that_agrees_gets_no_divergence() -> None:
    leader = [0] * 10 + [1] * 5
    assert diverging_epoch(1, 12, end_offsets(leader)) is None
    assert diverging_epoch(0, 10, end_offsets(leader)) is None  # epoch 0 ended at 10
    # An empty follower has no epoch to compare.
    assert diverging_epoch(-1, 0, end_offsets(leader)) is None


def test_a_suffix_of_an_old_epoch_beyond_its_end_diverges() -> None:
    leader = [0] * 10 + [2] * 5  # the follower led epoch 1, which the leader never saw
    assert diverging_epoch(0, 12, end_offsets(leader)) == DivergingEpoch(0, 10)
    assert diverging_epoch(1, 12, end_offsets(leader)) == DivergingEpoch(0, 10)


def test_the_follower_truncates_to_the_lesser_end_of_a_shared_epoch() -> None:
    follower = [0] * 12
    truncation = truncation_offset(DivergingEpoch(0, 10), len(follower), 0,
                                   end_offsets(follower))
    assert truncation == Truncation(10, True)


def test_an_epoch_the_follower_never_had_walks_back_in_rounds() -> None:
    # KIP-279: the follower led epoch 2 (records 5..9) which the leader never saw; the leader
    # led epochs 1 and 3. Its answer names epoch 1, which the follower never had: the follower
    # cuts to the end of its own epoch below (0, at 5) and asks again; then they agree.
    follower = [0] * 5 + [2] * 5
    leader = [0] * 5 + [1] * 3 + [3] * 10
    diverging = diverging_epoch(2, 10, end_offsets(leader))
    assert diverging == DivergingEpoch(1, 8)
    first = truncation_offset(diverging, len(follower), 0, end_offsets(follower))
    assert first == Truncation(5, False)
    follower = follower[:first.offset]
    assert diverging_epoch(0, 5, end_offsets(leader)) is None


def test_never_truncated_by_the_high_watermark_when_epochs_decide() -> None:
    # The follower's high watermark (12) is above where the logs diverge (10): the epochs win.
    follower = [0] * 14
    assert truncation_offset(DivergingEpoch(0, 10), 14, 12, end_offsets(follower)).offset == 10
    # ... and below: replicated records above it are kept.
    assert truncation_offset(DivergingEpoch(0, 10), 14, 3, end_offsets(follower)).offset == 10


def test_an_undefined_answer_falls_back_to_the_high_watermark() -> None:
    assert truncation_offset(DivergingEpoch(-1, -1), 14, 7, end_offsets([0] * 14)).offset == 7


def sync(follower: list[int], leader: list[int], copy_max: int | None = None,
         rounds_max: int = 100, leader_epoch: int | None = None) -> list[int]:
    """The fetcher's loop until the follower holds the leader's log (or copied ``copy_max``
    records): diverging answers, out-of-range answers (past the leader's end), appends."""
    for _ in range(rounds_max):
        last_epoch = follower[-1] if follower else -1
        diverging = diverging_epoch(last_epoch, len(follower),
                                    end_offsets(leader, leader_epoch))
        if diverging is not None:
            # The high watermark (-1 here) is never what decides: epochs always do.
            truncation = truncation_offset(diverging, len(follower), -1, end_offsets(follower))
            assert 0 <= truncation.offset <= len(follower)
            follower = follower[:truncation.offset]
            continue
        if len(follower) > len(leader):
            follower = follower[:len(leader)]
            continue
        if len(follower) == len(leader):
            return follower
        end = len(leader) if copy_max is None else min(len(leader), len(follower) + copy_max)
        if copy_max is not None:
            return follower + leader[len(follower):end]
        follower = follower + leader[len(follower):end]
    raise AssertionError(f"no agreement after {rounds_max} rounds: {follower} vs {leader}")


operations = st.lists(
    st.one_of(
        st.tuples(st.just("elect"), st.integers(0, 2)),
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("replicate"), st.integers(0, 2), st.integers(0, 6)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_every_follower_ends_with_its_leaders_log(ops) -> None:
    # Three replicas; each election gives a new epoch to one of them (unclean ones included:
    # any replica, however far behind), which appends in it; followers copy parts of the
    # leader's log as the fetcher would, truncating first where they diverge.
    logs: list[list[int]] = [[], [], []]
    leader, epoch = 0, 0
    for op in ops:
        if op[0] == "elect":
            leader, epoch = op[1], epoch + 1
        elif op[0] == "append":
            logs[leader] += [epoch] * op[1]
        elif op[1] != leader:
            logs[op[1]] = sync(logs[op[1]], logs[leader], copy_max=op[2], leader_epoch=epoch)
    for replica in range(3):
        assert sync(logs[replica], logs[leader], leader_epoch=epoch) == logs[leader]
