"""The controller's decisions (leader_election.next_state) without processes: clean and unclean
elections, offline partitions, ISR shrinks, checked case by case and against a model over
random states."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stratalog.server.cluster.leader_election import first_state, next_state, unclean_enabled
from stratalog.server.cluster.partition_state import NO_LEADER, PartitionState

REPLICAS = (1, 2, 3)


def test_a_live_leader_with_a_live_isr_is_left_alone() -> None:
    state = PartitionState(1, 4, (1, 2, 3), 2)
    assert next_state(REPLICAS, state, {1, 2, 3}, False, 5) is None
    assert next_state(REPLICAS, state, {1, 2, 3, 4}, True, 5) is None


def test_a_dead_leader_is_replaced_by_the_first_live_isr_replica_in_assignment_order() -> None:
    # The ISR's order (3 before 2) does not matter: the assignment's does, as Kafka's.
    state = PartitionState(1, 4, (1, 3, 2), 2)
    assert next_state(REPLICAS, state, {2, 3}, False, 7) == PartitionState(2, 5, (3, 2), 7)


def test_a_live_replica_outside_the_isr_is_not_elected_cleanly() -> None:
    state = PartitionState(1, 4, (1, 3), 2)
    assert next_state(REPLICAS, state, {2, 3}, False, 7) == PartitionState(3, 5, (3,), 7)


def test_no_live_isr_member_takes_the_partition_offline_keeping_the_isr() -> None:
    state = PartitionState(1, 4, (1, 3), 2)
    offline = next_state(REPLICAS, state, {2}, False, 7)
    assert offline == PartitionState(NO_LEADER, 5, (1, 3), 7)
    # Offline and still no ISR member: nothing to write, whatever else lives.
    assert next_state(REPLICAS, offline, {2}, False, 8) is None
    # The last in-sync replica returns: it is elected, with a new epoch.
    assert next_state(REPLICAS, offline, {2, 3}, False, 8) == PartitionState(3, 6, (3,), 8)


def test_unclean_election_takes_the_first_live_replica_alone() -> None:
    state = PartitionState(1, 4, (1, 3), 2)
    assert next_state(REPLICAS, state, {2}, True, 7) == PartitionState(2, 5, (2,), 7)
    offline = PartitionState(NO_LEADER, 5, (1,), 7)
    assert next_state(REPLICAS, offline, {3}, True, 8) == PartitionState(3, 6, (3,), 8)
    # Unclean or not, nobody alive: offline.
    assert next_state(REPLICAS, state, set(), True, 7) == PartitionState(NO_LEADER, 5, (1, 3), 7)


def test_a_dead_follower_leaves_the_isr_without_a_new_epoch() -> None:
    state = PartitionState(2, 4, (2, 1, 3), 2)
    assert next_state(REPLICAS, state, {2, 3}, False, 7) == PartitionState(2, 4, (2, 3), 7)


def test_the_first_state_and_the_unclean_config() -> None:
    assert first_state((3, 1, 2)) == PartitionState(3, 0, (3, 1, 2), 0)
    assert unclean_enabled({}, False) is False
    assert unclean_enabled({}, True) is True
    assert unclean_enabled({"unclean.leader.election.enable": "true"}, False) is True
    assert unclean_enabled({"unclean.leader.election.enable": "false"}, True) is False


node_sets = st.sets(st.integers(1, 5), max_size=5)


@given(
    replicas=st.permutations([1, 2, 3, 4, 5]).map(lambda p: tuple(p[:3])),
    leader_index=st.integers(-1, 2),
    isr=node_sets,
    live=node_sets,
    unclean=st.booleans(),
)
def test_decisions_keep_kafkas_invariants(replicas, leader_index, isr, live, unclean) -> None:
    # A state as the writers keep them: a leader is a replica in the ISR; the ISR is never
    # empty and holds replicas only.
    leader = replicas[leader_index] if leader_index >= 0 else NO_LEADER
    isr = tuple(sorted((isr & set(replicas)) | ({leader} - {NO_LEADER}))) or (replicas[0],)
    state = PartitionState(leader, 3, isr, 1)
    new = next_state(replicas, state, live, unclean, 2)
    if new is None:
        # Nothing written only when there is nothing to fix.
        live_leader = leader in live and leader != NO_LEADER
        assert (live_leader and set(isr) <= live | {leader}) or (
            leader == NO_LEADER and not (set(isr) & live)
            and not (unclean and set(replicas) & live))
        return
    assert new.controller_epoch == 2
    if new.leader == state.leader:
        assert new.leader_epoch == state.leader_epoch  # an ISR shrink only
        assert set(new.isr) <= set(state.isr) and new.leader in new.isr
    else:
        assert new.leader_epoch == state.leader_epoch + 1  # every leader change
    if new.leader != NO_LEADER:
        assert new.leader in live and new.leader in replicas
        assert set(new.isr) <= live
        if new.leader != state.leader and new.leader not in state.isr:
            assert unclean and new.isr == (new.leader,)
        else:
            assert set(new.isr) <= set(state.isr) | {new.leader}
    else:
        assert not set(state.isr) & live and new.isr == state.isr


@given(
    replicas=st.permutations([1, 2, 3, 4, 5]).map(lambda p: tuple(p[:3])),
    leader_index=st.integers(-1, 2),
    isr=node_sets,
    live=node_sets,
    shutting_down=node_sets,
    unclean=st.booleans(),
)
def test_a_shutting_down_broker_is_never_made_leader_nor_kept_as_a_follower_in_an_isr(
        replicas, leader_index, isr, live, shutting_down, unclean) -> None:
    leader = replicas[leader_index] if leader_index >= 0 else NO_LEADER
    isr = tuple(sorted((isr & set(replicas)) | ({leader} - {NO_LEADER}))) or (replicas[0],)
    shutting_down = shutting_down & live
    state = PartitionState(leader, 3, isr, 1)
    new = next_state(replicas, state, live, unclean, 2, shutting_down) or state
    if new.leader != NO_LEADER and new.leader != state.leader:
        assert new.leader not in shutting_down
    if new.leader in live:
        # A live leader: every other ISR member is live and not shutting down.
        assert all(m == new.leader or (m in live and m not in shutting_down)
                   for m in new.isr)
        # A shutting-down leader kept its partition only for want of another candidate.
        if new.leader in shutting_down:
            assert not [r for r in replicas
                        if r in live and r not in shutting_down and r in state.isr]
    # Nobody shutting down: exactly the decision without the argument.
    assert next_state(replicas, state, live, unclean, 2, frozenset()) == next_state(
        replicas, state, live, unclean, 2)


# ---------------------------------------------------------------- controlled shutdown


def test_a_shutting_down_leader_hands_over_to_the_first_other_in_sync_replica() -> None:
    # Node 1 leads and shuts down: node 3 comes before 2 in the ISR, 2 before 3 in the
    # assignment: the assignment's order wins; the shutting-down node leaves the ISR.
    state = PartitionState(1, 4, (1, 3, 2), 2)
    assert next_state(REPLICAS, state, {1, 2, 3}, False, 7, {1}) == PartitionState(
        2, 5, (3, 2), 7)
    # The first other replica is out of the ISR: the next one in sync is elected.
    state = PartitionState(1, 4, (1, 3), 2)
    assert next_state(REPLICAS, state, {1, 2, 3}, False, 7, {1}) == PartitionState(
        3, 5, (3,), 7)


def test_a_shutting_down_leader_without_another_in_sync_replica_keeps_its_partition() -> None:
    alone = PartitionState(1, 4, (1,), 2)
    assert next_state(REPLICAS, alone, {1, 2, 3}, False, 7, {1}) is None
    # Not even unclean: a replica outside the ISR is not elected while the leader lives.
    assert next_state(REPLICAS, alone, {1, 2, 3}, True, 7, {1}) is None
    # The other in-sync replica shuts down too: it leaves the ISR, the leader stays.
    both = PartitionState(1, 4, (1, 2), 2)
    assert next_state(REPLICAS, both, {1, 2, 3}, False, 7, {1, 2}) == PartitionState(
        1, 4, (1,), 7)


def test_a_shutting_down_follower_leaves_the_isr_without_a_new_epoch() -> None:
    state = PartitionState(2, 4, (2, 1, 3), 2)
    assert next_state(REPLICAS, state, {1, 2, 3}, False, 7, {1}) == PartitionState(
        2, 4, (2, 3), 7)
    # Once out, nothing more to write.
    assert next_state(REPLICAS, PartitionState(2, 4, (2, 3), 7), {1, 2, 3}, False, 8,
                      {1}) is None


def test_a_shutting_down_broker_is_never_elected_for_a_leaderless_partition() -> None:
    offline = PartitionState(NO_LEADER, 5, (1, 3), 7)
    # Node 1 is live but shutting down: node 3 is the one in-sync candidate.
    assert next_state(REPLICAS, offline, {1, 3}, False, 8, {1}) == PartitionState(
        3, 6, (3,), 8)
    # Node 3 is gone: no candidate, the partition stays offline rather than go to node 1.
    assert next_state(REPLICAS, offline, {1}, False, 8, {1}) is None
    # Unclean: a live replica not shutting down, or none.
    assert next_state(REPLICAS, offline, {1, 2}, True, 8, {1}) == PartitionState(
        2, 6, (2,), 8)
    assert next_state(REPLICAS, offline, {1}, True, 8, {1}) is None
