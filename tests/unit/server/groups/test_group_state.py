"""GroupState's transition table: every allowed and every refused transition, as Kafka's
ClassicGroupState.java (and ClassicGroupTest's testXToY / testInvalidXToY cases)."""

from __future__ import annotations

import itertools

import pytest

from stratalog.server.groups import ClassicGroup, GroupState

E, P, C, S, D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

ALLOWED = {
    (E, P), (E, D),
    (P, E), (P, C), (P, D),
    (C, P), (C, S), (C, D),
    (S, P), (S, D),
    (D, D),
}


@pytest.mark.parametrize(("source", "target"), list(itertools.product(GroupState, GroupState)))
def test_every_transition_is_allowed_or_refused_as_kafka(source, target):
    assert source.can_transition_to(target) == ((source, target) in ALLOWED)


def test_kafka_names():
    assert [s.value for s in GroupState] == [
        "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead",
    ]


def _group_in(state: GroupState) -> ClassicGroup:
    group = ClassicGroup("g", now_ms=0)
    group.state = state
    return group


@pytest.mark.parametrize(("source", "target"), sorted(ALLOWED, key=str))
def test_classic_group_takes_allowed_transitions_and_stamps_them(source, target):
    group = _group_in(source)
    group.transition_to(target, now_ms=42)
    assert (group.state, group.previous_state, group.state_timestamp_ms) == (target, source, 42)


@pytest.mark.parametrize(
    ("source", "target"),
    [t for t in itertools.product(GroupState, GroupState) if t not in ALLOWED],
)
def test_classic_group_refuses_other_transitions(source, target):
    group = _group_in(source)
    with pytest.raises(AssertionError, match="is not allowed"):
        group.transition_to(target, now_ms=42)
    assert group.state is source


@pytest.mark.parametrize("state", list(GroupState))
def test_can_rebalance_only_from_empty_completing_and_stable(state):
    assert _group_in(state).can_rebalance() == (state in (E, C, S))
