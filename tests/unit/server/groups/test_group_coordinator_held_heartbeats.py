"""Held heartbeats (docs/groups.md "Held heartbeats"): a Heartbeat with ``max_wait_ms`` > 0 is
parked and answered at once when the member's group starts a rebalance, when the member is
removed or fenced, or when the coordinator unloads; else OK when its wait ends. The clock is the
harness's (conftest.py), advanced by hand; check() runs after every step."""

from __future__ import annotations

import pytest

from stratalog.server.groups import (
    FencedInstanceIdError,
    HeartbeatRequest,
    IllegalGenerationError,
    LeavingMember,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

SESSION_MS = 10_000  # the harness's members' session timeout
WAIT_MS = 3_000


def hold(harness, member_id, generation, max_wait_ms=WAIT_MS, instance_id=None):
    """Send a held heartbeat; returns its token (answered or not)."""
    token = harness.token()
    harness.run(harness.coordinator.heartbeat(
        HeartbeatRequest("g", member_id, generation, instance_id, max_wait_ms), token,
        harness.now_ms,
    ))
    return token


def error_of(harness, token):
    return harness.answer(token).error


def test_held_heartbeat_is_answered_ok_when_its_wait_ends(harness):
    (a, _b), generation = harness.form_group(2)
    token = hold(harness, a, generation)
    assert harness.answer(token) is None
    harness.advance(WAIT_MS - 1)
    assert harness.answer(token) is None
    harness.advance(1)
    assert error_of(harness, token) is None


def test_wait_is_bounded_by_half_the_session_timeout(harness):
    (a, _b), generation = harness.form_group(2)
    token = hold(harness, a, generation, max_wait_ms=60_000)
    harness.advance(SESSION_MS // 2 - 1)
    assert harness.answer(token) is None
    harness.advance(1)
    assert error_of(harness, token) is None


def test_held_heartbeat_keeps_the_session_from_its_arrival(harness):
    # Held heartbeats sent back to back (as the client does) keep a member in the group.
    (a, b), generation = harness.form_group(2)
    for _ in range(5):
        token_a, token_b = hold(harness, a, generation), hold(harness, b, generation)
        harness.advance(WAIT_MS)
        assert error_of(harness, token_a) is None and error_of(harness, token_b) is None
    assert set(harness.group().members) == {a, b}


@pytest.mark.parametrize("cause", ["join", "leave", "leader rejoins"])
def test_every_held_heartbeat_is_answered_rebalance_in_progress_when_a_rebalance_starts(
    harness, cause
):
    (a, b, c), generation = harness.form_group(3)
    tokens = {m: hold(harness, m, generation) for m in (a, b)}
    assert all(harness.answer(t) is None for t in tokens.values())
    if cause == "join":
        harness.join_new()
    elif cause == "leave":
        harness.leave(LeavingMember(c))
    else:
        harness.join(member_id=a)
    for member_id, token in tokens.items():
        assert isinstance(error_of(harness, token), RebalanceInProgressError), (cause, member_id)


def test_session_expiry_answers_the_others_before_their_wait_ends(harness):
    (a, _b, c), generation = harness.form_group(3)
    harness.advance(SESSION_MS - 1)  # c is about to expire; a holds a heartbeat longer than that
    token = hold(harness, a, generation)
    harness.advance(1)
    assert c not in harness.group().members
    assert isinstance(error_of(harness, token), RebalanceInProgressError)


def test_removed_member_gets_its_error(harness):
    (a, _b), generation = harness.form_group(2)
    token = hold(harness, a, generation)
    harness.leave(LeavingMember(a))
    assert isinstance(error_of(harness, token), UnknownMemberIdError)


def test_fenced_static_member_gets_fenced_instance_id(harness):
    tokens = [harness.join(instance_id=i) for i in ("i-a", "i-b")]
    harness.advance(0)
    a, b = (harness.answer(t).member_id for t in tokens)
    generation = harness.answer(tokens[0]).generation_id
    harness.sync(b, generation, instance_id="i-b")
    harness.sync(a, generation, {a: b"A", b: b"B"}, instance_id="i-a")
    token = hold(harness, b, generation, instance_id="i-b")
    harness.join(instance_id="i-b")  # b restarted: its new id takes over, no rebalance
    assert isinstance(error_of(harness, token), FencedInstanceIdError)
    harness.advance(WAIT_MS)  # the old wait's timer answers nothing twice (run() asserts it)


def test_unload_answers_not_coordinator(harness):
    (a, _b), generation = harness.form_group(2)
    token = hold(harness, a, generation)
    harness.run(harness.coordinator.unload(harness.now_ms))
    assert isinstance(error_of(harness, token), NotCoordinatorError)


def test_second_held_heartbeat_answers_the_first(harness):
    (a, _b), generation = harness.form_group(2)
    first = hold(harness, a, generation)
    harness.advance(1_000)
    second = hold(harness, a, generation)
    assert error_of(harness, first) is None and harness.answer(second) is None
    harness.advance(WAIT_MS - 1)  # the first's wait would have ended here: nothing is answered
    assert harness.answer(second) is None
    harness.advance(1)
    assert error_of(harness, second) is None


def test_heartbeat_with_an_error_or_during_a_rebalance_is_answered_at_once(harness):
    (a, _b), generation = harness.form_group(2)
    assert isinstance(error_of(harness, hold(harness, a, generation - 1)), IllegalGenerationError)
    assert isinstance(error_of(harness, hold(harness, "x", generation)), UnknownMemberIdError)
    harness.join_new()
    assert isinstance(error_of(harness, hold(harness, a, generation)), RebalanceInProgressError)


def test_zero_wait_is_kafkas_heartbeat(harness):
    (a, _b), generation = harness.form_group(2)
    assert error_of(harness, hold(harness, a, generation, max_wait_ms=0)) is None
