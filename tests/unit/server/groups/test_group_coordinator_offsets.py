"""Committed offsets: commit validation, fetch, expiry, transactional offsets (KIP-447), group
deletion, listing, and loading by replay; as Kafka's OffsetMetadataManagerTest and the load
parts of GroupMetadataManagerTest."""

from __future__ import annotations

from stratalog.server.groups import (
    CoordinatorLoadInProgressError,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FencedInstanceIdError,
    FetchedOffset,
    GroupConfig,
    GroupCoordinator,
    GroupIdNotFoundError,
    GroupMetadataTombstone,
    GroupState,
    HeartbeatRequest,
    IllegalGenerationError,
    InvalidGroupIdError,
    JoinGroupResponse,
    LeavingMember,
    ListGroupsRequest,
    NonEmptyGroupError,
    NotCoordinatorError,
    OffsetCommitRecord,
    OffsetCommitRequest,
    OffsetCommitTombstone,
    OffsetMetadataTooLargeError,
    PartitionError,
    PartitionOffset,
    RebalanceInProgressError,
    TxnOffsetCommitRequest,
    UnknownMemberIdError,
    UnknownServerError,
    UnstableOffsetCommitError,
)

DAY_MS = 24 * 60 * 60 * 1000
RETENTION_MS = 7 * DAY_MS
CHECK_MS = 10 * 60 * 1000


def _errors(harness, token):
    return [p.error for p in harness.answer(token).partitions]


def _offsets(harness, group_id="g"):
    return {(f.topic, f.partition): f.offset for f in harness.fetch(group_id).partitions}


# -- OffsetCommit validation -------------------------------------------------------------------


def test_simple_commit_creates_a_simple_group_and_is_written_then_visible(harness):
    harness.hold_writes = True
    token = harness.commit({("t", 0): 10, ("t", 1): 20}, metadata="m")
    assert harness.answer(token) is None and _offsets(harness) == {}  # not before the write
    harness.release()
    assert _errors(harness, token) == [None, None]
    assert [r for _, r, _ in harness.log] == [
        OffsetCommitRecord("g", "t", 0, 10, 5, "m", harness.now_ms),
        OffsetCommitRecord("g", "t", 1, 20, 5, "m", harness.now_ms),
    ]
    fetched = harness.fetch(partitions=(("t", 0), ("t", 9))).partitions
    assert fetched == (FetchedOffset("t", 0, 10, 5, "m"), FetchedOffset("t", 9))
    group = harness.group()
    assert group.state is GroupState.EMPTY and group.protocol_type is None


def test_failed_commit_write_answers_the_error_and_changes_nothing(harness):
    harness.hold_writes = True
    token = harness.commit({("t", 0): 10})
    harness.release(UnknownServerError("not leader any more"))
    assert _errors(harness, token) == [UnknownServerError("not leader any more")]
    assert _offsets(harness) == {}


def test_simple_commit_is_refused_while_the_group_has_members(harness):
    harness.form_group(2)
    writes = len(harness.log)
    token = harness.commit({("t", 0): 10})
    assert [type(e) for e in _errors(harness, token)] == [UnknownMemberIdError]
    assert len(harness.log) == writes  # nothing written


def test_member_commit_rules(harness):
    (a, b), generation = harness.form_group(2)
    ok = harness.commit({("t", 0): 1}, member_id=a, generation=generation)
    assert _errors(harness, ok) == [None]
    cases = [
        (dict(member_id=a, generation=generation + 1), IllegalGenerationError),
        (dict(member_id=a, generation=generation - 1), IllegalGenerationError),
        (dict(member_id="ghost", generation=generation), UnknownMemberIdError),
        (dict(member_id="", generation=generation), UnknownMemberIdError),
        (dict(member_id=b, generation=generation, instance_id="i"), UnknownMemberIdError),
        (dict(group_id="other", member_id=a, generation=generation), GroupIdNotFoundError),
        (dict(group_id="", member_id=a, generation=generation), InvalidGroupIdError),
    ]
    for kwargs, error in cases:
        token = harness.commit({("t", 0): 99}, **kwargs)
        assert [type(e) for e in _errors(harness, token)] == [error], kwargs
    assert _offsets(harness) == {("t", 0): 1}


def test_commit_while_completing_rebalance_is_rebalance_in_progress(harness):
    (_a, _), (b, _) = harness.join_new(), harness.join_new()
    harness.advance(0)
    token = harness.commit({("t", 0): 1}, member_id=b, generation=1)
    assert [type(e) for e in _errors(harness, token)] == [RebalanceInProgressError]


def test_static_member_commit_with_a_fenced_member_id(harness):
    tokens = [harness.join(instance_id="i-a"), harness.join(instance_id="i-b")]
    harness.advance(0)
    a, b = (harness.answer(t).member_id for t in tokens)
    harness.sync(b, 1, instance_id="i-b")
    harness.sync(a, 1, {a: b"", b: b""}, instance_id="i-a")
    token = harness.commit({("t", 0): 1}, member_id=b, generation=1, instance_id="i-a")
    assert [type(e) for e in _errors(harness, token)] == [FencedInstanceIdError]


def test_oversized_metadata_fails_its_partition_only(make_harness):
    harness = make_harness(GroupConfig(offset_metadata_max_bytes=3))
    token = harness.token()
    harness.run(harness.coordinator.commit_offsets(OffsetCommitRequest("g", (
        PartitionOffset("t", 0, 1, -1, "abc"), PartitionOffset("t", 1, 1, -1, "abcd"),
    )), token, harness.now_ms))
    assert [type(e) for e in _errors(harness, token)] == [type(None), OffsetMetadataTooLargeError]
    assert _offsets(harness) == {("t", 0): 1}


def test_a_member_that_commits_keeps_its_session(harness):
    (a, b), generation = harness.form_group(2)
    for _ in range(6):
        harness.advance(5_000)
        harness.heartbeat(b, generation)
        harness.commit({("t", 0): 1}, member_id=a, generation=generation)
    assert harness.group().state is GroupState.STABLE and a in harness.group().members


# -- expiry ------------------------------------------------------------------------------------


def test_simple_group_offsets_expire_after_retention_since_their_commit(harness):
    harness.commit({("t", 0): 1})
    harness.advance_to_deadlines(harness.now_ms + 3 * DAY_MS)
    harness.commit({("t", 1): 2})
    harness.advance_to_deadlines(harness.now_ms + 4 * DAY_MS + CHECK_MS)
    assert _offsets(harness) == {("t", 1): 2}
    assert OffsetCommitTombstone("g", "t", 0) in [r for _, r, _ in harness.log]
    harness.advance_to_deadlines(harness.now_ms + 3 * DAY_MS + CHECK_MS)
    assert _offsets(harness) == {}
    assert "g" not in harness.coordinator.groups  # the emptied group is deleted
    assert harness.log[-1][1] == GroupMetadataTombstone("g")


def test_empty_group_offsets_expire_counting_from_when_it_became_empty(make_harness):
    retention_ms, check_ms = 60_000, 1_000
    harness = make_harness(GroupConfig(initial_rebalance_delay_ms=0,
                                       offsets_retention_ms=retention_ms,
                                       offsets_retention_check_interval_ms=check_ms))
    (a,), generation = harness.form_group(1)
    harness.commit({("t", 0): 1}, member_id=a, generation=generation)
    # Stable for three retention periods, heartbeating: its offsets do not expire.
    for _ in range(3 * retention_ms // 5_000):
        harness.advance(5_000)
        harness.heartbeat(a, generation)
    assert _offsets(harness) == {("t", 0): 1}
    harness.leave(LeavingMember(a))
    assert harness.group().state is GroupState.EMPTY
    harness.advance_to_deadlines(harness.now_ms + retention_ms - check_ms)
    assert _offsets(harness) == {("t", 0): 1}
    harness.advance_to_deadlines(harness.now_ms + 2 * check_ms)
    assert _offsets(harness) == {} and "g" not in harness.coordinator.groups


def test_commit_with_its_own_retention_expires_then(harness):
    token = harness.token()
    harness.run(harness.coordinator.commit_offsets(OffsetCommitRequest(
        "g", (PartitionOffset("t", 0, 1),), retention_ms=CHECK_MS,
    ), token, harness.now_ms))
    assert harness.log[-1][1].expire_timestamp_ms == harness.now_ms + CHECK_MS
    harness.advance_to_deadlines(harness.now_ms + 2 * CHECK_MS)
    assert _offsets(harness) == {}


# -- transactional offsets ---------------------------------------------------------------------


def _txn_commit(harness, offsets, producer_id=7, group_id="g", member_id="", generation=-1):
    token = harness.token()
    harness.run(harness.coordinator.commit_transactional_offsets(TxnOffsetCommitRequest(
        "tx", producer_id, 0, group_id,
        tuple(PartitionOffset(t, p, o) for (t, p), o in offsets.items()),
        member_id, generation,
    ), token, harness.now_ms))
    return token


def test_transactional_offsets_are_pending_until_commit(harness):
    token = _txn_commit(harness, {("t", 0): 5})
    assert _errors(harness, token) == [None]
    assert harness.log[-1][2] == 7  # written in producer 7's transaction
    assert _offsets(harness) == {}
    [unstable] = harness.fetch(partitions=(("t", 0),), require_stable=True).partitions
    assert isinstance(unstable.error, UnstableOffsetCommitError) and unstable.offset == -1
    # Another partition is stable.
    [other] = harness.fetch(partitions=(("t", 1),), require_stable=True).partitions
    assert other == FetchedOffset("t", 1)
    harness.end_transaction(7, committed=True)
    assert harness.fetch(partitions=(("t", 0),), require_stable=True).partitions == (
        FetchedOffset("t", 0, 5),
    )


def test_aborted_transactional_offsets_are_dropped(harness):
    harness.commit({("t", 0): 1})
    _txn_commit(harness, {("t", 0): 5})
    harness.end_transaction(7, committed=False)
    assert _offsets(harness) == {("t", 0): 1}
    assert harness.fetch(require_stable=True).partitions == (FetchedOffset("t", 0, 1, 5),)


def test_a_plain_commit_written_after_a_transactional_one_wins(harness):
    _txn_commit(harness, {("t", 0): 5})
    harness.commit({("t", 0): 9})
    harness.end_transaction(7, committed=True)
    assert _offsets(harness) == {("t", 0): 9}


def test_a_zombie_producer_of_an_old_generation_is_fenced(harness):
    (a,), generation = harness.form_group(1)
    assert _errors(harness, _txn_commit(harness, {("t", 0): 5}, member_id=a,
                                        generation=generation)) == [None]
    stale = _txn_commit(harness, {("t", 0): 6}, member_id=a, generation=generation - 1)
    assert [type(e) for e in _errors(harness, stale)] == [IllegalGenerationError]
    missing = _txn_commit(harness, {("t", 0): 6}, group_id="nope", generation=3)
    assert [type(e) for e in _errors(harness, missing)] == [IllegalGenerationError]


def test_pending_transactional_offsets_hold_off_expiry(harness):
    harness.commit({("t", 0): 1})
    _txn_commit(harness, {("t", 0): 5})
    harness.advance_to_deadlines(harness.now_ms + RETENTION_MS + CHECK_MS)
    assert _offsets(harness) == {("t", 0): 1}
    assert "g" in harness.coordinator.groups
    harness.end_transaction(7, committed=False)
    harness.advance_to_deadlines(harness.now_ms + CHECK_MS)
    assert _offsets(harness) == {}


# -- list, describe, delete --------------------------------------------------------------------


def test_list_and_describe_groups(harness):
    harness.form_group(2, group_id="stable")
    harness.commit({("t", 0): 1}, group_id="simple")
    token = harness.token()
    harness.run(harness.coordinator.list_groups(ListGroupsRequest(), token, harness.now_ms))
    assert {(g.group_id, g.protocol_type, g.state) for g in harness.answer(token).groups} == {
        ("stable", "consumer", "Stable"), ("simple", "", "Empty"),
    }
    token = harness.token()
    harness.run(harness.coordinator.list_groups(ListGroupsRequest(frozenset({"stable"})), token,
                                                harness.now_ms))
    assert [g.group_id for g in harness.answer(token).groups] == ["stable"]
    token = harness.token()
    harness.run(harness.coordinator.describe_groups(
        DescribeGroupsRequest(("stable", "nope")), token, harness.now_ms
    ))
    stable, nope = harness.answer(token).groups
    assert (stable.state, stable.protocol_name) == ("Stable", "range")
    assert [(m.metadata, m.assignment) for m in stable.members] == [
        (b"sub-range", f"a-{m.member_id}".encode()) for m in stable.members
    ]
    assert isinstance(nope.error, GroupIdNotFoundError)


def _delete(harness, *group_ids):
    token = harness.token()
    harness.run(harness.coordinator.delete_groups(DeleteGroupsRequest(group_ids), token,
                                                  harness.now_ms))
    return dict(harness.answer(token).results)


def test_delete_groups(harness):
    harness.form_group(1, group_id="busy")
    harness.commit({("t", 0): 1, ("t", 1): 2}, group_id="idle")
    _txn_commit(harness, {("u", 0): 3}, group_id="idle")
    results = _delete(harness, "idle", "busy", "nope")
    assert results["idle"] is None
    assert isinstance(results["busy"], NonEmptyGroupError)
    assert isinstance(results["nope"], GroupIdNotFoundError)
    assert [r for _, r, _ in harness.log[-4:]] == [
        OffsetCommitTombstone("idle", "t", 0), OffsetCommitTombstone("idle", "t", 1),
        OffsetCommitTombstone("idle", "u", 0), GroupMetadataTombstone("idle"),
    ]
    assert "idle" not in harness.coordinator.groups
    assert _offsets(harness, "idle") == {}
    assert not harness.coordinator.offsets.has_pending("idle", "u", 0)


# -- load by replay ----------------------------------------------------------------------------


def test_load_by_replay_rebuilds_groups_and_offsets(harness):
    (a, _b), generation = harness.form_group(2)
    harness.commit({("t", 0): 1}, member_id=a, generation=generation)
    harness.commit({("s", 0): 4}, group_id="simple")
    harness.commit({("s", 1): 4}, group_id="simple")
    _txn_commit(harness, {("s", 0): 8}, group_id="simple", producer_id=1)
    harness.end_transaction(1, committed=True)
    _txn_commit(harness, {("s", 1): 9}, group_id="simple", producer_id=2)  # still open
    _txn_commit(harness, {("s", 0): 99}, group_id="simple", producer_id=3)
    harness.end_transaction(3, committed=False)
    harness.commit({("d", 0): 1}, group_id="deleted")
    _delete(harness, "deleted")

    loaded = GroupCoordinator(harness.config, loading=True, now_ms=harness.now_ms)
    out = loaded.heartbeat(HeartbeatRequest("g", a, generation), "hb", harness.now_ms)
    assert isinstance(out.reply_to("hb").error, CoordinatorLoadInProgressError)
    harness.replay_into(loaded)
    loaded.complete_load(harness.now_ms)
    loaded.check()

    assert set(loaded.groups) == {"g", "simple"}
    group = loaded.groups["g"]
    original = harness.group()
    assert (group.state, group.generation_id, group.protocol_name, group.leader_id) == (
        GroupState.STABLE, generation, "range", original.leader_id
    )
    assert {m.member_id: m.assignment for m in group.members.values()} == {
        m.member_id: m.assignment for m in original.members.values()
    }
    assert loaded.offsets.committed == harness.coordinator.offsets.committed
    assert loaded.offsets.pending == harness.coordinator.offsets.pending
    assert loaded.offsets.get("simple", "s", 0).offset == 8
    assert loaded.offsets.has_pending("simple", "s", 1)


def test_loaded_members_must_heartbeat_within_their_session_timeout(harness):
    (a, _b), generation = harness.form_group(2)
    loaded = GroupCoordinator(harness.config, loading=True, now_ms=harness.now_ms)
    harness.replay_into(loaded)
    harness.coordinator = loaded
    harness.run(loaded.complete_load(harness.now_ms))
    harness.advance(5_000)
    assert harness.heartbeat(a, generation) is None
    harness.advance(5_000)  # b never came back after the restart
    assert set(harness.group().members) == {a}
    assert harness.group().state is GroupState.PREPARING_REBALANCE


def test_unload_answers_parked_requests_not_coordinator(harness):
    (a, b), generation = harness.form_group(2)
    parked = harness.join(member_id=a)
    harness.run(harness.coordinator.unload(harness.now_ms))
    assert harness.answer(parked) == JoinGroupResponse(
        NotCoordinatorError("this coordinator no longer owns the group's partition"), a
    )
    assert isinstance(harness.heartbeat(b, generation), NotCoordinatorError)
    assert isinstance(harness.fetch().error, NotCoordinatorError)


def test_commit_errors_name_each_partition(harness):
    harness.form_group(1)
    token = harness.commit({("t", 0): 1, ("u", 3): 2})
    assert [(p.topic, p.partition) for p in harness.answer(token).partitions] == [
        ("t", 0), ("u", 3)
    ]
    assert all(isinstance(p, PartitionError) for p in harness.answer(token).partitions)


def test_a_write_reported_after_unload_is_ignored(harness):
    harness.hold_writes = True
    token = harness.commit({("t", 0): 1})
    harness.run(harness.coordinator.unload(harness.now_ms))
    assert [type(e) for e in _errors(harness, token)] == [NotCoordinatorError]
    harness.release()  # the write completes after all: nothing is answered twice
    assert harness.coordinator.groups == {}


def test_expiry_keeps_a_group_whose_first_member_is_on_its_way(make_harness):
    harness = make_harness(GroupConfig(offsets_retention_check_interval_ms=1_000,
                                       min_session_timeout_ms=1_000))
    member_id = harness.answer(harness.join(session_ms=5_000)).member_id  # MEMBER_ID_REQUIRED
    harness.advance_to_deadlines(harness.now_ms + 4_000)  # expiry passes run meanwhile
    assert "g" in harness.coordinator.groups
    assert harness.answer(harness.join(member_id=member_id, session_ms=5_000)) is None  # joined
