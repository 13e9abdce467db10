"""The classic protocol's membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their
timers, as Kafka's GroupMetadataManagerTest (classic group parts) exercises them. The clock is
the harness's (conftest.py), advanced by hand; check() runs after every step."""

from __future__ import annotations

import pytest

from stratalog.server.groups import (
    CoordinatorLoadInProgressError,
    FencedInstanceIdError,
    GroupConfig,
    GroupMaxSizeReachedError,
    GroupMetadataRecord,
    GroupState,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    JoinGroupResponse,
    LeavingMember,
    MemberIdRequiredError,
    RebalanceInProgressError,
    SyncGroupResponse,
    UnknownMemberIdError,
    UnknownServerError,
)

SESSION_MS = 10_000
REBALANCE_MS = 60_000


# -- joining -----------------------------------------------------------------------------------


def test_first_join_of_a_dynamic_member_is_member_id_required(harness):
    token = harness.join()
    response = harness.answer(token)
    assert isinstance(response.error, MemberIdRequiredError)
    assert response.member_id == "client-m1"
    group = harness.group()
    assert group.pending_join_members == {"client-m1"}
    assert not group.members and group.state is GroupState.EMPTY


def test_pending_member_that_never_rejoins_is_dropped_after_its_session_timeout(harness):
    harness.join()
    harness.advance(SESSION_MS - 1)
    assert harness.group().pending_join_members == {"client-m1"}
    harness.advance(1)
    assert not harness.group().pending_join_members
    # Its id is unknown now.
    token = harness.join(member_id="client-m1")
    assert isinstance(harness.answer(token).error, UnknownMemberIdError)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_join_and_sync_round_with_n_members(harness, n):
    members, _generation = harness.form_group(n)
    group = harness.group()
    assert (group.state, group.generation_id, group.protocol_name) == (
        GroupState.STABLE, 1, "range"
    )
    assert group.leader_id == members[0]
    assert {m.member_id: m.assignment for m in group.members.values()} == {
        m: f"a-{m}".encode() for m in members
    }
    # The assignment was written before anyone was answered: one GroupMetadataRecord.
    [(_, record, producer_id)] = harness.log
    assert isinstance(record, GroupMetadataRecord) and producer_id == -1
    assert (record.generation, record.protocol, record.leader) == (1, "range", members[0])
    assert [(m.member_id, m.subscription, m.assignment) for m in record.members] == [
        (m, b"sub-range", f"a-{m}".encode()) for m in members
    ]


def test_only_the_leader_receives_the_members_metadata(harness):
    (a, ta), (b, tb) = harness.join_new(), harness.join_new()
    harness.advance(0)
    leader, follower = harness.answer(ta), harness.answer(tb)
    assert leader.leader_id == follower.leader_id == a
    assert [(m.member_id, m.metadata) for m in leader.members] == [
        (a, b"sub-range"), (b, b"sub-range")
    ]
    assert follower.members == ()
    assert leader.generation_id == follower.generation_id == 1
    assert leader.protocol_name == "range" and leader.protocol_type == "consumer"


def test_protocol_chosen_by_vote_among_those_every_member_supports(harness):
    harness.join_new(protocols=(("roundrobin", b"x"), ("range", b"y")))
    harness.join_new(protocols=(("roundrobin", b"x"), ("sticky", b"z"), ("range", b"y")))
    _, token = harness.join_new(protocols=(("range", b"y"), ("roundrobin", b"x")))
    harness.advance(0)
    assert harness.answer(token).protocol_name == "roundrobin"  # two votes to one


def test_follower_sync_is_parked_until_the_leaders_assignment_is_written(harness):
    (a, _), (b, _) = harness.join_new(), harness.join_new()
    harness.advance(0)
    follower_sync = harness.sync(b, 1)
    assert harness.answer(follower_sync) is None
    assert harness.group().state is GroupState.COMPLETING_REBALANCE
    harness.hold_writes = True
    leader_sync = harness.sync(a, 1, assignments={a: b"A"})  # none for b
    assert harness.answer(leader_sync) is None and len(harness.held) == 1
    assert harness.group().state is GroupState.COMPLETING_REBALANCE
    harness.release()
    assert harness.answer(leader_sync) == SyncGroupResponse(None, "consumer", "range", b"A")
    assert harness.answer(follower_sync) == SyncGroupResponse(None, "consumer", "range", b"")
    assert harness.group().state is GroupState.STABLE


def test_failed_assignment_write_answers_the_syncs_and_rebalances(harness):
    (a, _), (b, _) = harness.join_new(), harness.join_new()
    harness.advance(0)
    follower_sync = harness.sync(b, 1)
    harness.hold_writes = True
    leader_sync = harness.sync(a, 1, assignments={a: b"A", b: b"B"})
    harness.release(UnknownServerError("disk full"))
    assert harness.answer(leader_sync).error == UnknownServerError("disk full")
    assert harness.answer(follower_sync).error == UnknownServerError("disk full")
    assert harness.group().state is GroupState.PREPARING_REBALANCE


def test_sync_in_stable_returns_the_members_assignment(harness):
    (_a, b), generation = harness.form_group(2)
    token = harness.sync(b, generation)
    assert harness.answer(token) == SyncGroupResponse(None, "consumer", "range", f"a-{b}".encode())


def test_sync_errors(harness):
    assert isinstance(harness.answer(harness.sync("x", 1)).error, UnknownMemberIdError)
    (a, b), generation = harness.form_group(2)
    assert isinstance(harness.answer(harness.sync("x", generation)).error, UnknownMemberIdError)
    assert isinstance(harness.answer(harness.sync(b, generation + 1)).error,
                      IllegalGenerationError)
    harness.join(member_id=a)  # the leader rejoins: a rebalance
    assert isinstance(harness.answer(harness.sync(b, generation)).error,
                      RebalanceInProgressError)


def test_sync_with_another_protocol_name_is_inconsistent(harness):
    from stratalog.server.groups import SyncGroupRequest

    (a,), generation = harness.form_group(1)
    token = harness.token()
    harness.run(harness.coordinator.sync_group(
        SyncGroupRequest("g", a, generation, None, "consumer", "roundrobin"), token, harness.now_ms
    ))
    assert isinstance(harness.answer(token).error, InconsistentGroupProtocolError)


def test_join_refusals(harness):
    assert isinstance(harness.answer(harness.join(group_id="")).error, InvalidGroupIdError)
    assert isinstance(harness.answer(harness.join(group_id="x" * 256)).error, InvalidGroupIdError)
    assert isinstance(harness.answer(harness.join(session_ms=5_999)).error,
                      InvalidSessionTimeoutError)
    assert isinstance(harness.answer(harness.join(session_ms=30 * 60_000 + 1)).error,
                      InvalidSessionTimeoutError)
    # A member id the group never gave: the group does not exist.
    assert isinstance(harness.answer(harness.join(member_id="ghost")).error, UnknownMemberIdError)
    assert isinstance(harness.answer(harness.join(protocols=())).error,
                      InconsistentGroupProtocolError)


def test_join_with_another_protocol_type_or_no_common_protocol_is_inconsistent(harness):
    harness.form_group(2)
    token = harness.join(protocol_type="connect")
    assert isinstance(harness.answer(token).error, InconsistentGroupProtocolError)
    token = harness.join(protocols=(("sticky", b""),))
    assert isinstance(harness.answer(token).error, InconsistentGroupProtocolError)
    assert harness.group().state is GroupState.STABLE


# -- rejoining ---------------------------------------------------------------------------------


def test_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation(harness):
    (a, b), generation = harness.form_group(2)
    response = harness.answer(harness.join(member_id=b))
    assert (response.error, response.generation_id, response.leader_id, response.members) == (
        None, generation, a, ()
    )
    assert harness.group().state is GroupState.STABLE


def test_leader_rejoining_a_stable_group_forces_a_rebalance(harness):
    (a, b), generation = harness.form_group(2)
    leader_join = harness.join(member_id=a)
    assert harness.answer(leader_join) is None
    assert harness.group().state is GroupState.PREPARING_REBALANCE
    assert harness.heartbeat(b, generation) == RebalanceInProgressError("group g is rebalancing")
    follower_join = harness.join(member_id=b)
    assert harness.answer(leader_join).generation_id == generation + 1
    assert harness.answer(follower_join).generation_id == generation + 1
    assert harness.group().state is GroupState.COMPLETING_REBALANCE


def test_changed_metadata_in_completing_rebalance_rebalances_and_fails_parked_syncs(harness):
    (a, _), (b, _) = harness.join_new(), harness.join_new()
    harness.advance(0)
    parked = harness.sync(b, 1)
    again = harness.answer(harness.join(member_id=b))  # same metadata: the same generation
    assert (again.error, again.generation_id) == (None, 1)
    harness.join(member_id=a, protocols=(("range", b"new"),))
    assert isinstance(harness.answer(parked).error, RebalanceInProgressError)
    assert harness.group().state is GroupState.PREPARING_REBALANCE


def test_initial_rebalance_delay_waits_and_extends_while_members_arrive(make_harness):
    harness = make_harness(GroupConfig(initial_rebalance_delay_ms=3_000))
    _, first = harness.join_new()
    harness.advance(2_000)
    _, second = harness.join_new()
    harness.advance(1_000)  # the first delay ends, but a member came: wait another delay
    assert harness.answer(first) is None
    harness.advance(2_999)
    assert harness.answer(first) is None
    harness.advance(1)
    assert harness.answer(first).generation_id == harness.answer(second).generation_id == 1


def test_initial_rebalance_without_newcomers_completes_after_one_delay(make_harness):
    harness = make_harness(GroupConfig(initial_rebalance_delay_ms=3_000))
    _, token = harness.join_new()
    harness.advance(2_999)
    assert harness.answer(token) is None
    harness.advance(1)
    assert harness.answer(token).generation_id == 1


# -- heartbeats and timeouts -------------------------------------------------------------------


def test_heartbeat_answers_in_each_state(harness):
    assert isinstance(harness.heartbeat("x", 0), UnknownMemberIdError)  # no group
    (a, _), (b, _) = harness.join_new(), harness.join_new()
    # PreparingRebalance (the initial rebalance has not completed)
    assert isinstance(harness.heartbeat(a, 0), RebalanceInProgressError)
    harness.advance(0)
    assert harness.heartbeat(a, 1) is None  # CompletingRebalance
    assert isinstance(harness.heartbeat(a, 0), IllegalGenerationError)
    assert isinstance(harness.heartbeat("x", 1), UnknownMemberIdError)
    harness.sync(b, 1)
    harness.sync(a, 1, {a: b"A", b: b"B"})
    assert harness.heartbeat(b, 1) is None  # Stable
    harness.leave(LeavingMember(a), LeavingMember(b))
    assert harness.group().state is GroupState.EMPTY
    assert isinstance(harness.heartbeat(a, 1), UnknownMemberIdError)


def test_heartbeat_while_loading_is_coordinator_load_in_progress(harness):
    harness.coordinator.loading = True
    assert isinstance(harness.heartbeat("x", 0), CoordinatorLoadInProgressError)


def test_session_expiry_removes_the_silent_member_and_the_rest_rebalance(harness):
    (a, b, c), generation = harness.form_group(3)
    harness.advance(SESSION_MS // 2)
    assert harness.heartbeat(a, generation) is None
    assert harness.heartbeat(b, generation) is None
    harness.advance(SESSION_MS // 2 - 1)
    assert c in harness.group().members
    harness.advance(1)
    group = harness.group()
    assert c not in group.members and group.state is GroupState.PREPARING_REBALANCE
    assert isinstance(harness.heartbeat(a, generation), RebalanceInProgressError)
    ja, jb = harness.join(member_id=a), harness.join(member_id=b)
    assert harness.answer(ja).generation_id == harness.answer(jb).generation_id == generation + 1
    assert [m.member_id for m in harness.answer(ja).members] == [a, b]


def test_rebalance_timeout_removes_members_that_did_not_rejoin(harness):
    (a, b, _c), generation = harness.form_group(3)
    leader_join = harness.join(member_id=a)
    for _ in range(REBALANCE_MS // 5_000):
        harness.advance(5_000)
        # b keeps its session but does not rejoin; c is silent.
        if b in harness.group().members:
            harness.heartbeat(b, generation)
    response = harness.answer(leader_join)
    assert response is not None and response.generation_id == generation + 1
    assert [m.member_id for m in response.members] == [a]
    assert set(harness.group().members) == {a}


def test_members_without_sync_within_the_rebalance_timeout_are_removed(harness):
    (a, _), (b, _) = harness.join_new(), harness.join_new()
    harness.advance(0)
    harness.sync(a, 1, {a: b"A", b: b"B"})
    assert harness.group().state is GroupState.STABLE
    for _ in range(REBALANCE_MS // 5_000):
        harness.advance(5_000)
        if harness.group().state is GroupState.STABLE:
            harness.heartbeat(a, 1)
            harness.heartbeat(b, 1)
    group = harness.group()
    assert set(group.members) == {a}
    assert group.state is GroupState.PREPARING_REBALANCE


def test_parked_new_member_is_dropped_after_the_new_member_join_timeout(make_harness):
    harness = make_harness(GroupConfig(initial_rebalance_delay_ms=0,
                                       new_member_join_timeout_ms=20_000))
    (a, b), generation = harness.form_group(2)
    harness.join(member_id=a)  # a rebalance that b never joins, while c waits in it
    c, c_join = harness.join_new()
    for _ in range(4):
        assert harness.answer(c_join) is None
        harness.advance(5_000)
        harness.heartbeat(b, generation)  # b keeps its session, never rejoins
    assert harness.answer(c_join) == JoinGroupResponse(
        UnknownMemberIdError(f"member {c} was removed from group g"), ""
    )
    assert c not in harness.group().members


# -- leaving -----------------------------------------------------------------------------------


def test_leave_rebalances_and_the_leadership_passes_on(harness):
    (a, b, c), generation = harness.form_group(3)
    response = harness.leave(LeavingMember(a))
    assert [(m.member_id, m.error) for m in response.members] == [(a, None)]
    group = harness.group()
    assert group.leader_id == b and group.state is GroupState.PREPARING_REBALANCE
    jb, jc = harness.join(member_id=b), harness.join(member_id=c)
    assert harness.answer(jb).leader_id == b
    assert harness.answer(jc).generation_id == generation + 1


def test_last_member_leaving_empties_the_group_and_writes_it(harness):
    (a,), generation = harness.form_group(1)
    harness.leave(LeavingMember(a))
    group = harness.group()
    assert group.state is GroupState.EMPTY and group.generation_id == generation + 1
    record = harness.log[-1][1]
    assert isinstance(record, GroupMetadataRecord)
    assert (record.generation, record.members, record.protocol, record.leader) == (
        generation + 1, (), None, None
    )


def test_leave_of_unknown_members_is_answered_per_member(harness):
    (_a, b), _ = harness.form_group(2)
    response = harness.leave(LeavingMember("ghost"), LeavingMember(b, "no-such-instance"))
    assert [type(m.error) for m in response.members] == [UnknownMemberIdError,
                                                         UnknownMemberIdError]
    assert harness.group().state is GroupState.STABLE
    assert isinstance(harness.leave(group_id="nope").error, UnknownMemberIdError)


# -- static membership -------------------------------------------------------------------------


def _form_static_group(harness, instances=("i-a", "i-b")):
    tokens = [harness.join(instance_id=i) for i in instances]  # no MEMBER_ID_REQUIRED
    harness.advance(0)
    responses = [harness.answer(t) for t in tokens]
    members = [r.member_id for r in responses]
    assert members == [f"{i}-m{n}" for n, i in enumerate(instances, 1)]
    generation = responses[0].generation_id
    for member in members[1:]:
        harness.sync(member, generation, instance_id=instances[members.index(member)])
    harness.sync(members[0], generation, {m: m.encode() for m in members}, instance_id=instances[0])
    assert harness.group().state is GroupState.STABLE
    return members, generation


def test_static_member_restart_inside_the_session_timeout_causes_no_rebalance(harness):
    (a, b), generation = _form_static_group(harness)
    writes = len(harness.log)
    harness.advance(SESSION_MS - 1_000)
    assert harness.heartbeat(b, generation, instance_id="i-b") is None
    token = harness.join(instance_id="i-a")  # a restarted: it lost its member id
    response = harness.answer(token)
    new_a = "i-a-m3"
    assert (response.error, response.member_id, response.generation_id) == (None, new_a,
                                                                            generation)
    # It led: it is told to skip the assignment, and sees the members to keep its bookkeeping.
    assert response.skip_assignment and response.leader_id == new_a
    assert [m.member_id for m in response.members] == [b, new_a]
    group = harness.group()
    assert group.state is GroupState.STABLE and group.generation_id == generation
    assert group.members[new_a].assignment == a.encode()  # it keeps its partitions
    assert len(harness.log) == writes + 1  # the new member id is stored
    assert isinstance(harness.heartbeat(a, generation, instance_id="i-a"), FencedInstanceIdError)
    assert harness.heartbeat(new_a, generation, instance_id="i-a") is None
    assert harness.heartbeat(b, generation, instance_id="i-b") is None


def test_static_member_with_another_member_id_is_fenced(harness):
    (_a, b), generation = _form_static_group(harness)
    assert isinstance(harness.heartbeat(b, generation, instance_id="i-a"), FencedInstanceIdError)
    assert isinstance(harness.answer(harness.sync(b, generation, instance_id="i-a")).error,
                      FencedInstanceIdError)
    assert isinstance(harness.answer(harness.join(member_id=b, instance_id="i-a")).error,
                      FencedInstanceIdError)


def test_duplicate_static_instance_fences_the_parked_join_of_the_old_one(harness):
    (a, b), generation = _form_static_group(harness, ("i-x", "i-y"))
    old = harness.join(member_id=a, instance_id="i-x")  # the leader rejoins: parked
    assert harness.answer(old) is None
    duplicate = harness.join(instance_id="i-x")  # a second process with the same instance id
    assert isinstance(harness.answer(old).error, FencedInstanceIdError)
    assert harness.answer(duplicate) is None  # it takes part in the rebalance instead
    harness.join(member_id=b, instance_id="i-y")
    response = harness.answer(duplicate)
    assert response.error is None and response.generation_id == generation + 1


def test_static_member_restart_with_changed_protocols_rebalances(harness):
    (_a, _b), _generation = _form_static_group(harness)
    token = harness.join(instance_id="i-b", protocols=(("roundrobin", b"x"),))
    assert harness.answer(token) is None
    assert harness.group().state is GroupState.PREPARING_REBALANCE


def test_static_member_that_does_not_rejoin_stays_through_the_rebalance(harness):
    (a, b), generation = _form_static_group(harness)
    leader_join = harness.join(member_id=a, instance_id="i-a")
    for _ in range(REBALANCE_MS // 5_000):
        harness.advance(5_000)
        harness.heartbeat(b, generation, instance_id="i-b")  # REBALANCE_IN_PROGRESS, no rejoin
    assert harness.answer(leader_join).generation_id == generation + 1
    assert set(harness.group().members) == {a, b}


def test_failed_write_of_a_static_replacement_restores_the_old_member(harness):
    (a, b), generation = _form_static_group(harness)
    harness.hold_writes = True
    token = harness.join(instance_id="i-b")
    assert harness.answer(token) is None
    harness.release(UnknownServerError("disk full"))
    assert harness.answer(token).error == UnknownServerError("disk full")
    group = harness.group()
    assert group.static_members == {"i-a": a, "i-b": b}
    assert harness.heartbeat(b, generation, instance_id="i-b") is None


def test_admin_removes_a_static_member_by_instance_id(harness):
    (a, _b), _ = _form_static_group(harness)
    response = harness.leave(LeavingMember("", "i-b"))
    assert [(m.group_instance_id, m.error) for m in response.members] == [("i-b", None)]
    assert set(harness.group().members) == {a}


# -- group.max.size ----------------------------------------------------------------------------


def test_group_max_size_refuses_members_beyond_it(make_harness):
    harness = make_harness(GroupConfig(initial_rebalance_delay_ms=0, group_max_size=2))
    harness.join_new()
    harness.join_new()
    refused = harness.answer(harness.join())  # while PreparingRebalance
    assert isinstance(refused.error, GroupMaxSizeReachedError) and refused.member_id == ""
    harness.advance(0)
    refused = harness.answer(harness.join())  # while CompletingRebalance
    assert isinstance(refused.error, GroupMaxSizeReachedError)
    assert len(harness.group().members) == 2


def test_a_leader_that_never_syncs_is_removed_and_parked_followers_rejoin(harness):
    (a, _), (b, _) = harness.join_new(), harness.join_new()
    harness.advance(0)
    assert harness.group().leader_id == a
    parked = harness.sync(b, 1)
    for _ in range(REBALANCE_MS // 5_000):
        assert harness.answer(parked) is None
        # Both keep their sessions (heartbeats are fine while CompletingRebalance); the leader
        # never sends its SyncGroup.
        assert harness.heartbeat(a, 1) is None and harness.heartbeat(b, 1) is None
        harness.advance(5_000)
    assert isinstance(harness.answer(parked).error, RebalanceInProgressError)
    group = harness.group()
    assert set(group.members) == {b} and group.leader_id == b
    assert group.state is GroupState.PREPARING_REBALANCE


def test_describe_hides_metadata_and_assignments_while_rebalancing(harness):
    from stratalog.server.groups import DescribeGroupsRequest

    (a, b), _ = harness.form_group(2)
    harness.join(member_id=a)
    token = harness.token()
    harness.run(harness.coordinator.describe_groups(DescribeGroupsRequest(("g",)), token,
                                                    harness.now_ms))
    [group] = harness.answer(token).groups
    assert (group.state, group.protocol_name) == ("PreparingRebalance", "")
    assert [(m.member_id, m.metadata, m.assignment) for m in group.members] == [
        (a, b"", b""), (b, b"", b"")
    ]
