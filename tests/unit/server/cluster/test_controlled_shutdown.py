"""What a controlled shutdown waits for (controlled_shutdown.partitions_to_leave), case by case
and against the controller's decisions (leader_election.next_state): the controller's passes,
applied until nothing changes, always leave nothing to wait for."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.server.cluster.controlled_shutdown import partitions_to_leave
from stratalog.server.cluster.errors import PreferredLeaderNotAvailableError
from stratalog.server.cluster.leader_election import next_state
from stratalog.server.cluster.partition_state import NO_LEADER, PartitionState
from stratalog.server.cluster.preferred_leader import ElectionType, elected_state

LIVE = {1, 2, 3}


def test_a_leadership_with_another_in_sync_candidate_is_waited_for() -> None:
    states = {("t", 0): PartitionState(1, 4, (1, 2, 3), 2)}
    assert partitions_to_leave(1, states, LIVE, {2, 3}) == [("t", 0)]
    # Moved: node 2 leads, node 1 out of the ISR: done.
    states = {("t", 0): PartitionState(2, 5, (2, 3), 2)}
    assert partitions_to_leave(1, states, LIVE, {2, 3}) == []


def test_an_isr_still_holding_the_stopping_server_is_waited_for() -> None:
    states = {("t", 0): PartitionState(2, 5, (2, 1, 3), 2)}
    assert partitions_to_leave(1, states, LIVE, {2, 3}) == [("t", 0)]


def test_partitions_without_another_candidate_are_not_waited_for() -> None:
    states = {
        ("alone", 0): PartitionState(1, 0, (1,), 0),          # RF 1, or an ISR of itself
        ("others-stop", 0): PartitionState(1, 0, (1, 2), 0),  # node 2 stops too
        ("dead-others", 0): PartitionState(1, 0, (1, 3), 0),  # node 3 is gone
        ("offline", 0): PartitionState(NO_LEADER, 3, (1, 3), 0),
        ("elsewhere", 0): PartitionState(2, 0, (2, 3), 0),
    }
    assert partitions_to_leave(1, states, {1, 2}, set()) == []


node_sets = st.frozensets(st.integers(1, 4))


@given(replicas=st.permutations([1, 2, 3, 4]).map(lambda p: tuple(p[:3])),
       leader_index=st.integers(-1, 2), isr=node_sets, others_live=node_sets,
       others_stopping=node_sets, unclean=st.booleans())
def test_the_controllers_passes_always_end_the_wait(replicas, leader_index, isr, others_live,
                                                    others_stopping, unclean) -> None:
    # Node 1 stops; the other live brokers, some of them stopping too.
    leader = replicas[leader_index] if leader_index >= 0 else NO_LEADER
    isr = tuple(sorted((isr & set(replicas)) | ({leader} - {NO_LEADER}))) or (replicas[0],)
    live = set(others_live) | {1}
    shutting_down = (set(others_stopping) & live) | {1}
    candidates = live - shutting_down
    states = {("t", 0): PartitionState(leader, 3, isr, 1)}
    for _ in range(3):  # a pass elects, the next has nothing left: never more than two
        new = next_state(replicas, states["t", 0], live, unclean, 2, shutting_down)
        if new is None:
            break
        states["t", 0] = new
    assert partitions_to_leave(1, states, live, candidates) == []


def test_a_preferred_election_never_picks_a_shutting_down_replica() -> None:
    state = PartitionState(2, 4, (1, 2, 3), 2)
    with pytest.raises(PreferredLeaderNotAvailableError, match="shutting down"):
        elected_state(ElectionType.PREFERRED, (1, 2, 3), state, LIVE, 5, {1})
    assert elected_state(ElectionType.PREFERRED, (1, 2, 3), state, LIVE, 5) == PartitionState(
        1, 5, (1, 2, 3), 5)
