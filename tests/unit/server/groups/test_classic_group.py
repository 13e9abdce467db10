"""ClassicGroup's local rules, as Kafka's ClassicGroupTest: membership bookkeeping, the
protocol vote, who may join, member validation, the offset-commit rules by state, and the round
trip through a GroupMetadataRecord."""

from __future__ import annotations

import pytest

from stratalog.server.groups import (
    ClassicGroup,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupMember,
    GroupState,
    IllegalGenerationError,
    JoinGroupResponse,
    RebalanceInProgressError,
    Reply,
    SyncGroupResponse,
    UnknownMemberIdError,
)


def _member(member_id, instance=None, protocols=(("range", b"r"), ("roundrobin", b"rr"))):
    return GroupMember(member_id, instance, "client", "host", 60_000, 10_000, "consumer",
                       tuple(protocols))


def test_first_member_leads_and_sets_the_protocol_type():
    group = ClassicGroup("g", 0)
    group.add(_member("a"), join_reply_to="ta")
    group.add(_member("b"))
    assert (group.leader_id, group.protocol_type, group.awaiting_join_count) == ("a", "consumer",
                                                                                 1)
    group.state = GroupState.PREPARING_REBALANCE  # as the coordinator moves it right after
    group.check()


def test_leader_removed_passes_to_the_oldest_member():
    group = ClassicGroup("g", 0)
    for member_id in "abc":
        group.add(_member(member_id))
    group.remove("a")
    assert group.leader_id == "b"
    group.remove("c")
    group.remove("b")
    assert group.leader_id is None
    group.check()


def test_supports_protocols():
    group = ClassicGroup("g", 0)
    assert group.supports_protocols("consumer", frozenset({"x"}))  # Empty: anything non-empty
    assert not group.supports_protocols("", frozenset({"x"}))
    assert not group.supports_protocols("consumer", frozenset())
    group.add(_member("a", protocols=(("range", b""), ("roundrobin", b""))))
    group.add(_member("b", protocols=(("roundrobin", b""), ("sticky", b""))))
    group.state = GroupState.STABLE
    assert group.supports_protocols("consumer", frozenset({"roundrobin"}))
    assert not group.supports_protocols("consumer", frozenset({"range", "sticky"}))
    assert not group.supports_protocols("connect", frozenset({"roundrobin"}))


def test_select_protocol_by_vote_of_preferences():
    group = ClassicGroup("g", 0)
    group.add(_member("a", protocols=(("range", b""), ("roundrobin", b""))))
    group.add(_member("b", protocols=(("roundrobin", b""), ("range", b""))))
    group.add(_member("c", protocols=(("roundrobin", b""), ("range", b""), ("sticky", b""))))
    assert group.select_protocol() == "roundrobin"
    group.remove("c")
    group.remove("b")
    assert group.select_protocol() == "range"


def test_validate_member_static_and_dynamic():
    group = ClassicGroup("g", 0)
    group.add(_member("a"))
    group.add(_member("s-1", instance="s"))
    group.validate_member("a", None)
    group.validate_member("s-1", "s")
    with pytest.raises(UnknownMemberIdError):
        group.validate_member("x", None)
    with pytest.raises(UnknownMemberIdError):
        group.validate_member("a", "unknown-instance")
    with pytest.raises(FencedInstanceIdError):
        group.validate_member("a", "s")


def _stable_group(generation=3):
    group = ClassicGroup("g", 0)
    group.add(_member("a"))
    group.add(_member("s-1", instance="s"))
    group.generation_id = generation
    group.protocol_name = "range"
    group.state = GroupState.STABLE
    return group


@pytest.mark.parametrize(
    ("state", "member_id", "instance", "generation", "transactional", "error"),
    [
        # simple commits: only while Empty
        (GroupState.EMPTY, "", None, -1, False, None),
        (GroupState.STABLE, "", None, -1, False, UnknownMemberIdError),
        # an old TxnOffsetCommit carries no member: allowed in any live state
        (GroupState.STABLE, "", None, -1, True, None),
        (GroupState.STABLE, "a", None, 3, False, None),
        (GroupState.STABLE, "a", None, 2, False, IllegalGenerationError),
        (GroupState.STABLE, "x", None, 3, False, UnknownMemberIdError),
        (GroupState.STABLE, "a", "s", 3, False, FencedInstanceIdError),
        (GroupState.STABLE, "s-1", "s", 3, False, None),
        (GroupState.PREPARING_REBALANCE, "a", None, 3, False, None),
        (GroupState.COMPLETING_REBALANCE, "a", None, 3, False, RebalanceInProgressError),
        (GroupState.COMPLETING_REBALANCE, "a", None, 3, True, None),
        (GroupState.DEAD, "a", None, 3, False, CoordinatorNotAvailableError),
    ],
)
def test_validate_offset_commit(state, member_id, instance, generation, transactional, error):
    group = _stable_group()
    if state is GroupState.EMPTY:
        group = ClassicGroup("g", 0)
    group.state = state
    if error is None:
        group.validate_offset_commit(member_id, instance, generation, transactional=transactional)
    else:
        with pytest.raises(error):
            group.validate_offset_commit(member_id, instance, generation,
                                         transactional=transactional)


def test_replace_static_member_fences_the_old_ids_parked_requests():
    group = _stable_group()
    group.members["s-1"].assignment = b"mine"
    group.members["s-1"].sync_reply_to = "old-sync"
    group.leader_id = "s-1"
    new, replies = group.replace_static_member("s", "s-1", "s-2")
    assert [type(r.response) for r in replies] == [SyncGroupResponse]
    assert isinstance(replies[0].response.error, FencedInstanceIdError)
    assert (new.member_id, new.assignment, group.leader_id) == ("s-2", b"mine", "s-2")
    assert group.static_members == {"s": "s-2"} and "s-1" not in group.members
    group.check()


def test_complete_join_answers_once_and_keeps_the_count():
    group = ClassicGroup("g", 0)
    member = _member("a")
    group.add(member, join_reply_to="t")
    group.state = GroupState.PREPARING_REBALANCE
    response = JoinGroupResponse(None, "a")
    assert group.complete_join(member, response) == Reply("t", response)
    assert group.complete_join(member, response) is None
    assert group.awaiting_join_count == 0
    group.check()


def test_init_next_generation_chooses_the_protocol_or_empties():
    group = ClassicGroup("g", 0)
    group.add(_member("a"))
    group.state = GroupState.PREPARING_REBALANCE
    group.init_next_generation(now_ms=5)
    assert (group.generation_id, group.state, group.protocol_name) == (
        1, GroupState.COMPLETING_REBALANCE, "range"
    )
    group.transition_to(GroupState.PREPARING_REBALANCE, 6)
    group.remove("a")
    group.init_next_generation(now_ms=7)
    assert (group.generation_id, group.state, group.protocol_name, group.state_timestamp_ms) == (
        2, GroupState.EMPTY, None, 7
    )


def test_record_round_trip_rebuilds_a_stable_group():
    group = _stable_group()
    group.members["a"].assignment = b"A"
    group.members["s-1"].assignment = b"S"
    record = group.to_record()
    assert [(m.member_id, m.group_instance_id, m.subscription, m.assignment)
            for m in record.members] == [("a", None, b"r", b"A"), ("s-1", "s", b"r", b"S")]
    rebuilt = ClassicGroup.from_record(record, now_ms=99)
    rebuilt.check()
    assert (rebuilt.state, rebuilt.generation_id, rebuilt.protocol_name, rebuilt.leader_id) == (
        GroupState.STABLE, 3, "range", "a"
    )
    assert rebuilt.static_members == {"s": "s-1"}
    assert rebuilt.to_record() == record


def test_record_of_an_empty_group_rebuilds_empty():
    group = ClassicGroup("g", 10)
    group.generation_id = 4
    group.protocol_type = "consumer"
    rebuilt = ClassicGroup.from_record(group.to_record(), now_ms=99)
    assert (rebuilt.state, rebuilt.generation_id, rebuilt.state_timestamp_ms) == (
        GroupState.EMPTY, 4, 10
    )
