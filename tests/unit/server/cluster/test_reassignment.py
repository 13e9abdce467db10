"""server/cluster/reassignment.py's replica lists and steps (Kafka's
``PartitionReassignmentReplicas`` and the ZooKeeper-era controller's ``onPartitionReassignment``),
walked through a whole reassignment, a cancellation and a drain's placement."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.server.cluster.errors import InvalidReplicaAssignmentError
from stratalog.server.cluster.partition_state import (
    PartitionReassignment,
    PartitionState,
    TopicAssignment,
)
from stratalog.server.cluster.reassignment import (
    Complete,
    MoveLeader,
    Wait,
    cancelled,
    check_target,
    next_step,
    reassigned,
)
from stratalog.server.cluster.replica_placement import replacement_broker

LIVE = {1, 2, 3, 4}


def test_a_reassignment_records_target_first_then_the_replicas_being_removed() -> None:
    replicas, reassignment = reassigned((1, 2, 3), None, (2, 3, 4))
    assert replicas == (2, 3, 4, 1)
    assert reassignment == PartitionReassignment(adding=(4,), removing=(1,))
    assert reassignment.target(replicas) == (2, 3, 4)
    assert reassignment.original(replicas) == (2, 3, 1)


def test_a_target_with_the_same_replicas_is_written_at_once() -> None:
    assert reassigned((1, 2, 3), None, (1, 2, 3)) == ((1, 2, 3), None)
    # Reordering only moves no replica: the new order (a new preferred leader) at once.
    assert reassigned((1, 2, 3), None, (3, 2, 1)) == ((3, 2, 1), None)


def test_a_new_target_replaces_the_one_in_progress_from_the_original_replicas() -> None:
    replicas, current = reassigned((1, 2, 3), None, (2, 3, 4))
    assert current is not None
    replicas, new = reassigned(replicas, current, (1, 2, 5))
    assert replicas == (1, 2, 5, 3)
    assert new == PartitionReassignment(adding=(5,), removing=(3,))  # 4 is dropped at once


def test_cancelling_goes_back_to_the_original_replicas() -> None:
    replicas, current = reassigned((1, 2, 3), None, (2, 3, 4))
    assert current is not None
    replicas, undo = cancelled(replicas, current)
    assert undo == PartitionReassignment(adding=(), removing=(4,))
    assert undo.target(replicas) == (2, 3, 1)


def test_a_whole_reassignment_step_by_step() -> None:
    replicas, reassignment = reassigned((1, 2, 3), None, (2, 3, 4))
    assert reassignment is not None
    state = PartitionState(1, 5, (1, 2, 3), 7)
    # The leader is being removed and 2 is in sync: the leadership moves first, epoch + 1.
    step = next_step(replicas, reassignment, state, LIVE, 8)
    assert step == MoveLeader(PartitionState(2, 6, (1, 2, 3), 8))
    state = step.state
    # 4 has not joined the ISR: wait.
    step = next_step(replicas, reassignment, state, LIVE, 8)
    assert isinstance(step, Wait) and "[4]" in step.why
    # 4 caught up and joined: complete, 1 leaves replicas and ISR, leader and epoch kept.
    state = PartitionState(2, 6, (1, 2, 3, 4), 8)
    assert next_step(replicas, reassignment, state, LIVE, 8) == \
        Complete((2, 3, 4), PartitionState(2, 6, (2, 3, 4), 8))


def test_the_leadership_waits_for_a_target_replica_in_sync() -> None:
    replicas, reassignment = reassigned((1,), None, (4,))
    assert reassignment is not None
    step = next_step(replicas, reassignment, PartitionState(1, 0, (1,), 0), LIVE, 1)
    assert isinstance(step, Wait)
    step = next_step(replicas, reassignment, PartitionState(1, 0, (1, 4), 0), LIVE, 1)
    assert step == MoveLeader(PartitionState(4, 1, (1, 4), 1))
    # Not to a dead target replica.
    step = next_step(replicas, reassignment, PartitionState(1, 0, (1, 4), 0), {1}, 1)
    assert isinstance(step, Wait)


def test_a_cancellation_completes_once_the_leader_is_an_original_replica() -> None:
    replicas, current = reassigned((1, 2, 3), None, (2, 3, 4))
    assert current is not None
    replicas, undo = cancelled(replicas, current)
    assert undo is not None
    # 4 had become leader: moved back to the first original replica in sync.
    step = next_step(replicas, undo, PartitionState(4, 3, (4, 2, 3), 1), LIVE, 2)
    assert step == MoveLeader(PartitionState(2, 4, (4, 2, 3), 2))
    # An original replica that is out of the ISR does not hold the cancellation back.
    step = next_step(replicas, undo, PartitionState(2, 4, (4, 2), 2), LIVE, 2)
    assert step == Complete((2, 3, 1), PartitionState(2, 4, (2,), 2))


def test_targets_are_checked() -> None:
    check_target((1, 2, 3), LIVE)
    for target, words in [((), "empty"), ((1, 1), "more than once"), ((1, 9), "[9]")]:
        with pytest.raises(InvalidReplicaAssignmentError, match=words):
            check_target(target, LIVE)


def test_the_assignment_round_trips_its_reassignments_and_refuses_bad_ones() -> None:
    replicas, reassignment = reassigned((1, 2, 3), None, (2, 3, 4))
    assert reassignment is not None
    assignment = TopicAssignment({0: replicas, 1: (1, 2, 3)}, {"a": "b"}, {0: reassignment})
    assert TopicAssignment.decode(assignment.encode()) == assignment
    assert assignment.target(0) == (2, 3, 4) and assignment.target(1) == (1, 2, 3)
    # Without reassignments the format is the one before (no "reassigning" key).
    assert b"reassigning" not in TopicAssignment({0: (1,)}).encode()
    for bad in [b'{"0": {"adding": [9], "removing": []}}',        # not a replica
                b'{"0": {"adding": [4], "removing": [4]}}',       # both
                b'{"0": {"adding": [], "removing": []}}',         # nothing
                b'{"0": {"adding": [], "removing": [2, 3, 4, 1]}}',  # no target
                b'{"5": {"adding": [4], "removing": []}}']:       # no such partition
        value = (b'{"partitions": {"0": [2, 3, 4, 1]}, "configs": {}, "reassigning": '
                 + bad + b"}")
        assert TopicAssignment.decode(value) is None, bad


def test_a_drained_replica_goes_to_the_least_loaded_broker_on_another_rack() -> None:
    no_racks = {1: "", 2: "", 3: "", 4: "", 5: ""}
    assert replacement_broker(1, (2, 3), no_racks, {4: 3, 5: 1}) == 5
    assert replacement_broker(1, (2, 3), no_racks, {4: 1, 5: 1}) == 4
    racks = {1: "a", 2: "b", 3: "c", 4: "b", 5: "a"}
    # 4 is less loaded, but on rack b with replica 2: 5 keeps three racks.
    assert replacement_broker(1, (2, 3), racks, {4: 0, 5: 9}) == 5
    assert replacement_broker(1, (2, 3), {1: "", 2: "", 3: ""}, {}) is None


def test_the_replication_factor_is_the_targets_during_a_reassignment() -> None:
    replicas, reassignment = reassigned((1, 2, 3), None, (2, 3, 4))
    assert reassignment is not None
    assignment = TopicAssignment({0: replicas}, {}, {0: reassignment})
    assert assignment.replication_factor == 3  # partitions added meanwhile get three


@given(data=st.data())
def test_random_reassignments_end_at_their_target_through_clean_steps(data) -> None:
    """A model of the controller's passes over a random reassignment (perhaps replaced or
    cancelled once on the way), with followers joining the ISR in a random order: every step
    keeps the invariants, the leadership only ever goes to an in-sync replica, completion only
    comes once the added replicas are in sync, and the end is the target."""
    brokers = list(range(1, 7))
    original = tuple(data.draw(st.permutations(brokers))[:data.draw(st.integers(1, 3))])
    target = tuple(data.draw(st.permutations(brokers))[:data.draw(st.integers(1, 3))])
    replicas, reassignment = reassigned(original, None, target)
    state = PartitionState(original[0], 0, original, 1)
    if reassignment is None:
        assert replicas == target
        return
    for _ in range(40):
        assert replicas[:len(reassignment.target(replicas))] == reassignment.target(replicas)
        assert set(reassignment.original(replicas)) | set(reassignment.adding) == set(replicas)
        choice = data.draw(st.sampled_from(["join", "step", "step", "change"]))
        if choice == "join":
            outside = [r for r in replicas if r not in state.isr]
            if outside:
                joining = data.draw(st.sampled_from(outside))
                state = PartitionState(state.leader, state.leader_epoch,
                                       (*state.isr, joining), 1)
            continue
        if choice == "change":
            new_target = data.draw(st.none() | st.permutations(brokers).map(lambda p: tuple(p[:3])))
            if new_target is None:
                target = reassignment.original(replicas)
                replicas, new = cancelled(replicas, reassignment)
            else:
                replicas, new = reassigned(replicas, reassignment, new_target)
                target = new_target
            # Replicas dropped by the change leave the ISR with them (the leader's next write).
            state = PartitionState(state.leader, state.leader_epoch,
                                   tuple(r for r in state.isr if r in replicas), 1)
            if new is None:
                assert replicas == target
                return
            reassignment = new
            if state.leader not in replicas or not state.isr:
                return  # the controller's failover election takes over: not modelled here
            continue
        step = next_step(replicas, reassignment, state, set(brokers), 1)
        if isinstance(step, MoveLeader):
            assert step.state.leader in state.isr and step.state.leader in target
            assert step.state.leader_epoch == state.leader_epoch + 1
            state = step.state
        elif isinstance(step, Complete):
            assert set(reassignment.adding) <= set(state.isr)
            assert step.replicas == target and step.state.leader in target
            assert set(step.state.isr) <= set(target) and step.state.leader in step.state.isr
            return


def test_the_leader_rebalance_leaves_partitions_being_reassigned_alone() -> None:
    from stratalog.server.cluster.preferred_leader import imbalanced_partitions

    replicas, reassignment = reassigned((1, 2, 3), None, (4, 2, 3))
    assert reassignment is not None
    # Both partitions are led by 2, away from their first replica: only the one not being
    # reassigned moves back (the other's first replica, 4, is the reassignment's to place).
    topics = {"t": TopicAssignment({0: replicas, 1: (1, 2, 3)}, {}, {0: reassignment})}
    states = {("t", 0): PartitionState(2, 3, (1, 2, 3, 4), 1),
              ("t", 1): PartitionState(2, 3, (1, 2, 3), 1)}
    assert imbalanced_partitions(topics, states, {1, 2, 3, 4}, 10) == [("t", 1)]
