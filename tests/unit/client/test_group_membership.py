"""GroupMembership, rule by rule: one member, the coordinator's answers written by hand.

Modelled on Kafka's ConsumerCoordinatorTest and AbstractCoordinatorTest
(``clients/src/test/java/org/apache/kafka/clients/consumer/internals/``): each test brings the
member to a state, answers its requests, and checks the actions it returns. Several members
against the real coordinator: test_group_membership_pump.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from stratalog.client import errors
from stratalog.client.groups import (
    Assignment,
    RangeAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from stratalog.client.groups import membership_messages as m
from stratalog.client.groups.group_membership import (
    COMMITS_IN_FLIGHT_MAX,
    GroupMembership,
    MembershipConfig,
    MemberState,
)
from stratalog.client.types import TopicPartition
from stratalog.v1 import broker_pb2

T0, T1, T2, T3 = (TopicPartition("t", p) for p in range(4))
COORDINATOR = "10.0.0.2:50051"
HEARTBEAT_MS, SESSION_MS, POLL_MS, COMMIT_MS = 1_000, 10_000, 60_000, 5_000


class Member:
    """One GroupMembership and the Output of its last call."""

    def __init__(self, **overrides) -> None:
        # Kafka's heartbeat schedule unless a test asks for held heartbeats (their own tests).
        settings = dict(group_id="g", topics=("t",), heartbeat_interval_ms=HEARTBEAT_MS,
                        session_timeout_ms=SESSION_MS, max_poll_interval_ms=POLL_MS,
                        auto_commit_interval_ms=COMMIT_MS, auto_offset_reset="earliest",
                        held_heartbeats=False)
        settings.update(overrides)
        self.now = 0
        self.core = GroupMembership(MembershipConfig(**settings), self.now)
        self.out = self.core.tick(self.now)
        self.core.positions.check()

    # -- Driving ---------------------------------------------------------------------------------

    def at(self, now: int) -> m.Output:
        """Time passes to ``now``, and the reader polls (which also does what is due)."""
        self.now = now
        self.poll_reader()
        return self.out

    def poll_reader(self) -> None:
        self.out = self.core.reader_polled(self.now)

    def sent(self, kind: type) -> m.Send:
        """The one Send of a ``kind`` request in the last Output."""
        sends = [a for a in self.out.actions if isinstance(a, m.Send)
                 and isinstance(a.request, kind)]
        assert len(sends) == 1, (kind.__name__, self.out.actions)
        return sends[0]

    def sends(self) -> list[type]:
        return [type(a.request) for a in self.out.actions if isinstance(a, m.Send)]

    def answer(self, send: m.Send, response: object = None,
               error: errors.StratalogError | None = None) -> m.Output:
        if error is None:
            self.out = self.core.on_response(send.request_id, response, self.now)
        else:
            self.out = self.core.on_error(send.request_id, error, self.now)
        self.core.positions.check()
        return self.out

    def actions(self, kind: type) -> list:
        return [a for a in self.out.actions if isinstance(a, kind)]

    # -- Reaching a state ------------------------------------------------------------------------

    def find(self) -> None:
        send = self.sent(m.FindCoordinatorRequest)
        assert send.address is None and send.request.key == "g"
        self.answer(send, m.FindCoordinatorResponse(2, COORDINATOR, 7))

    def join(self, generation: int = 1, member_id: str = "m-1", leader: str = "other",
             members: tuple = ()) -> m.JoinGroupRequest:
        send = self.sent(m.JoinGroupRequest)
        assert send.address == COORDINATOR
        self.answer(send, m.JoinGroupResponse(generation, "consumer", "cooperative-sticky",
                                              leader, member_id, members=members))
        return send.request

    def sync(self, partitions: tuple[TopicPartition, ...]) -> m.SyncGroupRequest:
        send = self.sent(m.SyncGroupRequest)
        self.answer(send, m.SyncGroupResponse(
            "consumer", "cooperative-sticky", encode_assignment(Assignment(partitions))))
        return send.request

    def fetch(self, committed: dict[TopicPartition, int]) -> m.StartPositions:
        send = self.sent(m.OffsetFetchRequest)
        self.answer(send, m.OffsetFetchResponse(tuple(
            m.CommittedOffset(tp.topic, tp.partition, committed.get(tp, -1))
            for tp in send.request.partitions)))
        (start,) = self.actions(m.StartPositions)
        return start

    def stable(self, partitions=(T0, T1), committed=None, generation=1) -> None:
        """Find, join (as a follower), sync ``partitions``, start them at ``committed``."""
        self.find()
        self.join(generation)
        self.sync(partitions)
        self.fetch(committed if committed is not None else {tp: 10 for tp in partitions})
        assert self.core.state is MemberState.STABLE


def subscription_of(request: m.JoinGroupRequest) -> Subscription:
    ((name, metadata),) = request.protocols
    assert name == "cooperative-sticky"
    return decode_subscription(metadata)


# -- Joining ---------------------------------------------------------------------------------------


def test_first_join_finds_the_coordinator_then_joins_with_an_empty_member_id() -> None:
    member = Member()
    assert member.sends() == [m.FindCoordinatorRequest]
    member.find()
    join = member.sent(m.JoinGroupRequest).request
    assert (join.group_id, join.member_id, join.protocol_type) == ("g", "", "consumer")
    assert (join.session_timeout_ms, join.rebalance_timeout_ms) == (SESSION_MS, POLL_MS)
    assert subscription_of(join) == Subscription(("t",), user_data=b"\xff\xff\xff\xff",
                                                 generation_id=None)


def test_member_id_required_rejoins_at_once_with_the_given_id() -> None:
    member = Member()
    member.find()
    member.answer(member.sent(m.JoinGroupRequest), error=errors.MemberIdRequiredError(
        "join again", metadata={"member_id": "m-77"}))
    assert member.sent(m.JoinGroupRequest).request.member_id == "m-77"
    assert member.actions(m.PartitionsLost) == []


def test_a_follower_syncs_without_assignments_and_starts_at_the_committed_offsets() -> None:
    member = Member()
    member.find()
    member.join(generation=3, member_id="m-1", leader="m-0")
    sync = member.sent(m.SyncGroupRequest).request
    assert (sync.generation_id, sync.member_id, sync.assignments) == (3, "m-1", ())
    member.sync((T0, T1))
    (assigned,) = member.actions(m.PartitionsAssigned)
    assert assigned.added == {T0, T1} == assigned.assignment
    fetch = member.sent(m.OffsetFetchRequest).request
    assert fetch.partitions == (T0, T1) and not fetch.require_stable
    start = member.fetch({T0: 42})
    assert start.committed == {T0: (42, -1)} and start.reset == {T1: "earliest"}
    assert start.error is None
    assert member.core.positions.position(T0) == 42
    assert member.core.positions.position(T1) is None  # the driver seeks it (ListOffsets)


def test_auto_offset_reset_none_reports_the_partitions_without_a_commit() -> None:
    member = Member(auto_offset_reset="none")
    member.find()
    member.join()
    member.sync((T0, T1))
    start = member.fetch({T0: 5})
    assert isinstance(start.error, errors.NoOffsetForPartitionError)
    assert start.error.partitions == (T1,)
    assert member.core.failure is None  # not fatal: the reader may seek
    member.at(500)
    assert m.OffsetFetchRequest not in member.sends()  # not fetched again


def test_the_leader_asks_for_partition_counts_then_assigns_every_member() -> None:
    member = Member()
    member.find()
    others = Subscription(("t", "u"))
    mine = subscription_of(member.sent(m.JoinGroupRequest).request)
    members = (m.JoinedMember("m-1", encode_subscription(mine)),
               m.JoinedMember("m-2", encode_subscription(others)))
    member.join(leader="m-1", member_id="m-1", members=members)
    (need,) = member.actions(m.NeedPartitionCounts)
    assert need.topics == {"t", "u"}
    assert member.sends() == []
    member.out = member.core.partition_counts(member.now, {"t": 4, "u": 2})
    sync = member.sent(m.SyncGroupRequest).request
    assignments = {mid: decode_assignment(data).partitions for mid, data in sync.assignments}
    assert set(assignments) == {"m-1", "m-2"}
    everything = {p for parts in assignments.values() for p in parts}
    assert everything == {*(TopicPartition("t", p) for p in range(4)),
                          TopicPartition("u", 0), TopicPartition("u", 1)}
    assert all(tp.topic == "t" for tp in assignments["m-1"])


def test_a_leader_rejoins_when_a_partition_count_changes() -> None:
    member = Member()
    member.find()
    mine = subscription_of(member.sent(m.JoinGroupRequest).request)
    member.join(leader="m-1", member_id="m-1",
                members=(m.JoinedMember("m-1", encode_subscription(mine)),))
    member.out = member.core.partition_counts(member.now, {"t": 2})
    member.sync((T0, T1))
    member.fetch({})
    member.out = member.core.partition_counts(member.now, {"t": 2})
    assert m.JoinGroupRequest not in member.sends()
    member.out = member.core.partition_counts(member.now, {"t": 4})
    assert m.JoinGroupRequest in member.sends()


# -- Heartbeats ------------------------------------------------------------------------------------


def test_heartbeats_every_interval_one_at_a_time() -> None:
    member = Member()
    member.stable()
    assert member.out.next_deadline_ms == HEARTBEAT_MS
    member.at(HEARTBEAT_MS - 1)
    assert m.HeartbeatRequest not in member.sends()
    member.at(HEARTBEAT_MS)
    beat = member.sent(m.HeartbeatRequest)
    assert (beat.request.generation_id, beat.request.member_id) == (1, "m-1")
    member.at(2 * HEARTBEAT_MS)
    assert m.HeartbeatRequest not in member.sends()  # the first is unanswered
    member.answer(beat, m.HeartbeatResponse())
    member.at(3 * HEARTBEAT_MS)
    assert m.HeartbeatRequest in member.sends()


def held_member() -> tuple[Member, m.Send]:
    """A member with held heartbeats, joined and synced; returns its first (held) Heartbeat,
    sent with the SyncGroup as the generation starts."""
    member = Member(held_heartbeats=True)
    member.find()
    member.join()
    beat = member.sent(m.HeartbeatRequest)
    assert beat.request.max_wait_ms == HEARTBEAT_MS and beat.request.generation_id == 1
    member.sync((T0, T1))
    member.fetch({T0: 10, T1: 10})
    assert member.core.state is MemberState.STABLE
    return member, beat


def test_held_heartbeats_one_in_flight_the_next_as_soon_as_one_is_answered() -> None:
    member, beat = held_member()
    member.at(HEARTBEAT_MS + 1)
    assert m.HeartbeatRequest not in member.sends()  # the held one is unanswered: no second
    member.now = HEARTBEAT_MS + 5  # the coordinator held it its whole wait
    member.answer(beat, m.HeartbeatResponse())
    beat = member.sent(m.HeartbeatRequest)
    assert beat.request.max_wait_ms == HEARTBEAT_MS
    assert member.core.state is MemberState.STABLE


def test_held_heartbeat_answered_early_ok_waits_out_the_interval() -> None:
    # A server that does not hold heartbeats answers at once: Kafka's schedule, not a busy loop.
    member, beat = held_member()
    member.now = 10
    member.answer(beat, m.HeartbeatResponse())
    assert m.HeartbeatRequest not in member.sends()
    assert member.out.next_deadline_ms == HEARTBEAT_MS
    member.at(HEARTBEAT_MS)
    assert member.sent(m.HeartbeatRequest).request.max_wait_ms == HEARTBEAT_MS


def test_held_heartbeat_answered_rebalance_in_progress_rejoins_at_once() -> None:
    member, beat = held_member()
    member.now = 7  # long before the interval: the coordinator answered as the rebalance began
    member.answer(beat, error=errors.RebalanceInProgressError("rebalancing"))
    join = member.sent(m.JoinGroupRequest).request  # nothing handed out: nothing to commit
    assert join.member_id == "m-1"
    assert member.core.assignment == {T0, T1}  # cooperative: kept while rejoining


def test_held_heartbeat_of_a_past_generation_answered_late_sends_the_new_ones_at_once() -> None:
    # The member rejoins by itself while its heartbeat is held; the new generation's answer
    # comes first, its first heartbeat waits for the old one, which is answered next.
    member, beat = held_member()
    member.out = member.core.subscribe(member.now, ["t", "u"])
    member.join(generation=2)
    assert m.HeartbeatRequest not in member.sends()  # one in flight at a time
    member.answer(beat, error=errors.RebalanceInProgressError("rebalancing"))
    assert member.sent(m.HeartbeatRequest).request.generation_id == 2


def test_kafkas_schedule_sends_heartbeats_that_are_not_held() -> None:
    member = Member()  # held_heartbeats=False
    member.stable()
    member.at(HEARTBEAT_MS)
    assert member.sent(m.HeartbeatRequest).request.max_wait_ms == 0


def test_no_heartbeat_answered_within_the_session_timeout_finds_the_coordinator_again() -> None:
    member = Member()
    member.stable()
    member.at(HEARTBEAT_MS)
    member.sent(m.HeartbeatRequest)  # never answered
    member.at(SESSION_MS)
    assert m.FindCoordinatorRequest not in member.sends()
    member.at(SESSION_MS + 1)
    assert member.sends() == [m.FindCoordinatorRequest]
    assert member.core.coordinator is None


def test_rebalance_in_progress_cooperative_commits_then_rejoins_keeping_its_partitions() -> None:
    member = Member()
    member.stable(committed={T0: 10, T1: 20})
    member.core.handed_out(T0, 15)
    member.at(HEARTBEAT_MS)
    member.answer(member.sent(m.HeartbeatRequest),
                  error=errors.RebalanceInProgressError("rebalancing"))
    commit = member.sent(m.OffsetCommitRequest)
    assert [(o.partition, o.offset) for o in commit.request.offsets] == [(0, 15)]
    assert m.JoinGroupRequest not in member.sends()  # the commit goes first
    member.answer(commit, m.OffsetCommitResponse())
    assert member.actions(m.PartitionsRevoked) == [] and member.actions(m.PartitionsLost) == []
    join = member.sent(m.JoinGroupRequest).request
    assert join.member_id == "m-1"
    assert subscription_of(join).owned_partitions == (T0, T1)
    assert subscription_of(join).generation_id == 1
    assert member.core.assignment == {T0, T1}


def test_rebalance_in_progress_eager_commits_then_revokes_everything_before_joining() -> None:
    member = Member(assignors=(RangeAssignor(),))
    member.find()
    send = member.sent(m.JoinGroupRequest)
    member.answer(send, m.JoinGroupResponse(1, "consumer", "range", "x", "m-1"))
    member.answer(member.sent(m.SyncGroupRequest), m.SyncGroupResponse(
        "consumer", "range", encode_assignment(Assignment((T0, T1)))))
    member.fetch({T0: 1, T1: 1})
    member.core.handed_out(T1, 9)
    member.at(HEARTBEAT_MS)
    member.answer(member.sent(m.HeartbeatRequest), error=errors.RebalanceInProgressError("r"))
    commit = member.sent(m.OffsetCommitRequest)
    member.answer(commit, m.OffsetCommitResponse())
    assert [type(a) for a in member.out.actions] == [m.PartitionsRevoked, m.Send]
    assert member.actions(m.PartitionsRevoked)[0].partitions == {T0, T1}
    join = member.sent(m.JoinGroupRequest).request
    assert decode_subscription(join.protocols[0][1]).owned_partitions == ()
    assert member.core.assignment == frozenset()


@pytest.mark.parametrize(("error", "member_id_after"), [
    (errors.UnknownMemberIdError("gone"), ""),
    (errors.IllegalGenerationError("old"), "m-1"),
])
def test_membership_errors_lose_the_partitions_and_rejoin(error, member_id_after) -> None:
    member = Member()
    member.stable()
    member.core.handed_out(T0, 30)
    member.at(HEARTBEAT_MS)
    member.answer(member.sent(m.HeartbeatRequest), error=error)
    # Lost, not revoked: no commit (another member may own them already).
    assert m.OffsetCommitRequest not in member.sends()
    (lost,) = member.actions(m.PartitionsLost)
    assert lost.partitions == {T0, T1}
    join = member.sent(m.JoinGroupRequest).request
    assert join.member_id == member_id_after
    assert subscription_of(join).owned_partitions == ()
    assert member.core.generation == -1


def test_fenced_instance_id_is_fatal() -> None:
    member = Member(group_instance_id="reader-1")
    member.stable()
    member.at(HEARTBEAT_MS)
    member.answer(member.sent(m.HeartbeatRequest),
                  error=errors.FencedInstanceIdError("another process is reader-1"))
    (failed,) = member.actions(m.Failed)
    assert isinstance(failed.error, errors.FencedInstanceIdError)
    assert member.out.next_deadline_ms is None
    assert member.at(100_000).actions == []
    member.out = member.core.commit(member.now, token="c")
    (done,) = member.actions(m.CommitDone)
    assert done.error is failed.error


@pytest.mark.parametrize("error", [
    errors.GroupMaxSizeReachedError("full"), errors.InconsistentGroupProtocolError("no"),
    errors.InvalidSessionTimeoutError("too short"), errors.NotAuthorizedError("no READ"),
])
def test_join_errors_without_a_rule_are_fatal(error) -> None:
    member = Member()
    member.find()
    member.answer(member.sent(m.JoinGroupRequest), error=error)
    assert [f.error for f in member.actions(m.Failed)] == [error]


# -- The coordinator -------------------------------------------------------------------------------


@pytest.mark.parametrize("error", [
    errors.NotCoordinatorError("moved"), errors.CoordinatorNotAvailableError("moving"),
    errors.BrokerUnavailableError("connection reset"), errors.RequestTimeoutError("deadline"),
])
def test_coordinator_errors_find_it_again(error) -> None:
    member = Member()
    member.stable()
    member.at(HEARTBEAT_MS)
    member.answer(member.sent(m.HeartbeatRequest), error=error)
    assert member.sends() == [m.FindCoordinatorRequest]
    member.find()
    # Still in its generation: heartbeats resume with the new coordinator, nothing is lost.
    assert member.sends() == [m.HeartbeatRequest]
    assert member.core.assignment == {T0, T1}


def test_find_coordinator_backs_off_exponentially_up_to_the_maximum() -> None:
    member = Member(retry_backoff_ms=100, retry_backoff_max_ms=500)
    waits = []
    for _ in range(5):
        send = member.sent(m.FindCoordinatorRequest)
        member.answer(send, error=errors.CoordinatorNotAvailableError("none yet"))
        assert member.sends() == []
        waits.append(member.out.next_deadline_ms - member.now)
        member.at(member.out.next_deadline_ms)
    assert waits == [100, 200, 400, 500, 500]


def test_load_in_progress_retries_the_join_after_a_backoff_without_finding_again() -> None:
    member = Member(retry_backoff_ms=100)
    member.find()
    member.answer(member.sent(m.JoinGroupRequest),
                  error=errors.CoordinatorLoadInProgressError("loading"))
    assert member.sends() == [] and member.out.next_deadline_ms == 100
    member.at(100)
    assert member.sends() == [m.JoinGroupRequest]


def test_an_answer_from_a_lost_coordinator_is_dropped_and_the_join_starts_over() -> None:
    member = Member()
    member.find()
    member.join(generation=5)
    sync = member.sent(m.SyncGroupRequest)  # parked on the coordinator
    member.at(HEARTBEAT_MS)
    member.answer(member.sent(m.HeartbeatRequest), error=errors.NotCoordinatorError("moved"))
    find = member.sent(m.FindCoordinatorRequest)
    member.answer(sync, m.SyncGroupResponse("consumer", "cooperative-sticky",
                                            encode_assignment(Assignment((T0,)))))
    assert member.out.actions == [] and member.core.assignment == frozenset()
    member.answer(find, m.FindCoordinatorResponse(3, COORDINATOR))
    join = member.sent(m.JoinGroupRequest).request
    assert join.member_id == "m-1"


def test_a_join_failing_on_a_lost_connection_finds_the_coordinator_and_joins_again() -> None:
    member = Member()
    member.find()
    member.answer(member.sent(m.JoinGroupRequest),
                  error=errors.BrokerUnavailableError("connection reset"))
    member.find()
    assert member.sends() == [m.JoinGroupRequest]


# -- Polls, leaving, closing -----------------------------------------------------------------------


def test_a_reader_that_stops_polling_leaves_and_rejoins_on_its_next_poll() -> None:
    # Auto-commit slower than the poll timeout, so the commit before leaving is visible.
    member = Member(auto_commit_interval_ms=2 * POLL_MS)
    member.stable()
    member.core.handed_out(T0, 12)
    while True:  # heartbeats answered, but the reader never polls again
        member.now = member.out.next_deadline_ms
        member.out = member.core.tick(member.now)
        if m.HeartbeatRequest not in member.sends():
            break
        member.answer(member.sent(m.HeartbeatRequest), m.HeartbeatResponse())
    assert member.now == POLL_MS + 1
    # Commit what was handed out, then revoke and leave.
    commit = member.sent(m.OffsetCommitRequest)
    assert [(o.partition, o.offset) for o in commit.request.offsets] == [(0, 12)]
    assert member.actions(m.PartitionsRevoked) == []
    member.answer(commit, m.OffsetCommitResponse())
    (revoked,) = member.actions(m.PartitionsRevoked)
    assert revoked.partitions == {T0, T1}
    (leaving,) = member.sent(m.LeaveGroupRequest).request.members
    assert (leaving.member_id, leaving.group_instance_id) == ("m-1", None)
    assert "max_poll_interval_ms" in leaving.reason
    assert member.out.next_deadline_ms is None  # nothing until the reader comes back
    member.now += 10_000
    member.out = member.core.tick(member.now)
    assert member.sends() == []
    member.poll_reader()
    join = member.sent(m.JoinGroupRequest).request
    assert join.member_id == ""


def test_a_noted_poll_keeps_the_reader_alive_without_an_output() -> None:
    # The hot path's poll (poll_noted) moves no timer: the poll timer armed for the first poll
    # fires, finds the later poll and is armed again; the member stays and leaves nothing.
    member = Member()
    member.stable()
    first_deadline = member.core._last_poll_ms + POLL_MS + 1
    member.now = POLL_MS // 2
    assert member.core.poll_noted(member.now)
    while member.now < POLL_MS + POLL_MS // 4:  # past the first poll's timeout
        member.now = member.out.next_deadline_ms
        member.out = member.core.tick(member.now)
        if m.HeartbeatRequest in member.sends():
            member.answer(member.sent(m.HeartbeatRequest), m.HeartbeatResponse())
        assert m.LeaveGroupRequest not in member.sends()
    assert member.now >= first_deadline and member.core.state is MemberState.STABLE
    assert member.out.next_deadline_ms <= POLL_MS // 2 + POLL_MS + 1
    # Once the poll expired, only the full reader_polled rejoins.
    member.now += 2 * POLL_MS
    member.out = member.core.tick(member.now)
    assert not member.core.poll_noted(member.now)


def test_close_commits_revokes_and_leaves_a_dynamic_member() -> None:
    member = Member()
    member.stable()
    member.core.handed_out(T1, 99)
    member.out = member.core.close(member.now)
    commit = member.sent(m.OffsetCommitRequest)
    assert [(o.partition, o.offset) for o in commit.request.offsets] == [(1, 99)]
    member.answer(commit, m.OffsetCommitResponse())
    assert [type(a) for a in member.out.actions] == [m.PartitionsRevoked, m.Send]
    leave = member.sent(m.LeaveGroupRequest)
    member.answer(leave, m.LeaveGroupResponse((m.LeftMember("m-1"),)))
    assert member.actions(m.Closed) == [m.Closed()]
    assert member.core.tick(10**9).actions == []


def test_close_of_a_static_member_sends_no_leave() -> None:
    member = Member(group_instance_id="reader-1", enable_auto_commit=False)
    member.stable()
    member.out = member.core.close(member.now)
    assert [type(a) for a in member.out.actions] == [m.PartitionsRevoked, m.Closed]


# -- Commits ----------------------------------------------------------------------------------------


def test_auto_commit_commits_only_what_was_handed_out_and_only_when_it_changed() -> None:
    member = Member()
    member.stable(committed={T0: 10, T1: 20})
    beats = []

    def advance(to: int) -> list[m.OffsetCommitRequest]:
        member.at(to)
        commits = []
        for send in [a for a in member.out.actions if isinstance(a, m.Send)]:
            if isinstance(send.request, m.HeartbeatRequest):
                beats.append(send)
                member.core.on_response(send.request_id, m.HeartbeatResponse(), to)
            elif isinstance(send.request, m.OffsetCommitRequest):
                commits.append(send.request)
                member.core.on_response(send.request_id, m.OffsetCommitResponse(), to)
        return commits

    assert advance(COMMIT_MS) == []  # nothing handed out: the committed offsets stand
    member.core.handed_out(T1, 25)
    (commit,) = advance(2 * COMMIT_MS)
    assert [(o.partition, o.offset) for o in commit.offsets] == [(1, 25)]
    assert (commit.generation_id, commit.member_id) == (1, "m-1")
    assert advance(3 * COMMIT_MS) == []
    member.core.handed_out(T0, 11)
    member.core.handed_out(T1, 26)
    (commit,) = advance(4 * COMMIT_MS)
    assert [(o.partition, o.offset) for o in commit.offsets] == [(0, 11), (1, 26)]


def test_auto_commit_off_commits_nothing_by_itself() -> None:
    member = Member(enable_auto_commit=False)
    member.stable()
    member.core.handed_out(T0, 50)
    member.at(COMMIT_MS * 3)
    assert m.OffsetCommitRequest not in member.sends()


def test_a_commit_of_a_stale_generation_fails_and_the_member_rejoins() -> None:
    member = Member()
    member.stable()
    member.out = member.core.commit(member.now, {T0: 40}, token="mine")
    commit = member.sent(m.OffsetCommitRequest)
    member.answer(commit, error=errors.IllegalGenerationError("generation 1 is not 2"))
    (done,) = member.actions(m.CommitDone)
    assert done.token == "mine" and done.offsets == {T0: 40}
    assert isinstance(done.error, errors.CommitFailedError)
    assert isinstance(done.error.cause, errors.IllegalGenerationError)
    assert member.actions(m.PartitionsLost)[0].partitions == {T0, T1}
    assert m.JoinGroupRequest in member.sends()


def test_a_commit_outside_a_generation_or_while_syncing_is_refused_at_once() -> None:
    member = Member()
    find = member.sent(m.FindCoordinatorRequest)
    member.out = member.core.commit(0, {T0: 1}, token=1)
    (done,) = member.actions(m.CommitDone)
    assert isinstance(done.error, errors.CommitFailedError) and member.sends() == []
    member.answer(find, m.FindCoordinatorResponse(2, COORDINATOR))
    member.join()
    member.out = member.core.commit(0, {T0: 1}, token=2)
    (done,) = member.actions(m.CommitDone)
    assert isinstance(done.error, errors.RebalanceInProgressError) and done.error.retriable


def test_a_successful_commit_reports_done_and_is_not_recommitted() -> None:
    member = Member()
    member.stable(committed={T0: 10, T1: 20})
    member.core.handed_out(T0, 17)
    member.out = member.core.commit(member.now, token="all")
    commit = member.sent(m.OffsetCommitRequest)
    assert [(o.partition, o.offset) for o in commit.request.offsets] == [(0, 17), (1, 20)]
    member.answer(commit, m.OffsetCommitResponse())
    assert member.actions(m.CommitDone) == [m.CommitDone("all", {T0: 17, T1: 20}, None)]
    assert member.core.positions.uncommitted({T0, T1}) == {}


def test_commits_in_flight_are_bounded() -> None:
    member = Member()
    member.stable()
    for i in range(COMMITS_IN_FLIGHT_MAX):
        member.out = member.core.commit(member.now, {T0: i}, token=i)
        assert m.OffsetCommitRequest in member.sends()
    member.out = member.core.commit(member.now, {T0: 1}, token="over")
    (done,) = member.actions(m.CommitDone)
    assert isinstance(done.error, errors.ResourceLimitExceededError) and done.error.retriable


def test_a_cooperative_revocation_commits_first_then_revokes_then_rejoins() -> None:
    member = Member()
    member.stable(partitions=(T0, T1, T2), committed={T0: 1, T1: 1, T2: 1})
    member.at(HEARTBEAT_MS)
    member.answer(member.sent(m.HeartbeatRequest), error=errors.RebalanceInProgressError("r"))
    member.core.handed_out(T2, 8)  # the reader goes on through the rebalance
    member.join(generation=2)
    member.sync((T0, T1))  # T2 moves to another member
    commit = member.sent(m.OffsetCommitRequest)
    assert member.actions(m.PartitionsRevoked) == []
    member.core.handed_out(T2, 12)  # handed out after the decision: not counted
    assert [(o.partition, o.offset) for o in commit.request.offsets] == [(2, 8)]
    assert commit.request.generation_id == 2
    member.answer(commit, m.OffsetCommitResponse())
    revoked, assigned = member.actions(m.PartitionsRevoked), member.actions(m.PartitionsAssigned)
    assert revoked[0].partitions == {T2} and assigned[0].added == frozenset()
    assert member.core.assignment == {T0, T1}
    join = member.sent(m.JoinGroupRequest).request  # the follow-up rebalance
    assert subscription_of(join).owned_partitions == (T0, T1)


def test_group_metadata_names_the_generation_and_member() -> None:
    member = Member(group_instance_id="reader-1")
    assert member.core.group_metadata() == m.GroupMetadata("g", -1, "", "reader-1")
    member.stable(generation=4)
    assert member.core.group_metadata() == m.GroupMetadata("g", 4, "m-1", "reader-1")


def test_subscribing_to_other_topics_revokes_the_dropped_ones_and_rejoins() -> None:
    member = Member(topics=("t", "u"))
    u0 = TopicPartition("u", 0)
    member.stable(partitions=(T0, u0), committed={T0: 1, u0: 1})
    member.out = member.core.subscribe(member.now, ["t"])
    assert member.actions(m.PartitionsRevoked)[0].partitions == {u0}
    join = member.sent(m.JoinGroupRequest).request
    assert subscription_of(join).topics == ("t",)
    assert subscription_of(join).owned_partitions == (T0,)


@pytest.mark.parametrize(("overrides", "words"), [
    (dict(group_id=""), "group_id"),
    (dict(topics=()), "topics"),
    (dict(topics=("t", "")), "topics"),
    (dict(heartbeat_interval_ms=10_000), "heartbeat_interval_ms"),
    (dict(session_timeout_ms=0), "session_timeout_ms"),
    (dict(auto_offset_reset="smallest"), "auto_offset_reset"),
    (dict(group_instance_id=""), "group_instance_id"),
    (dict(assignors=()), "assignors"),
    (dict(rebalance_timeout_ms=0), "rebalance_timeout_ms"),
])
def test_bad_settings_are_refused_by_name(overrides, words) -> None:
    with pytest.raises(ValueError, match=words):
        Member(**overrides)


def test_a_seek_of_a_partition_not_assigned_is_refused() -> None:
    member = Member()
    member.stable()
    with pytest.raises(ValueError, match="t-3 is not assigned"):
        member.core.seek(T3, 0)
    with pytest.raises(ValueError, match="request 999 is not in flight"):
        member.core.on_response(999, m.HeartbeatResponse(), 0)


def test_an_error_about_a_past_generation_does_not_reset_the_new_one() -> None:
    member = Member()
    member.stable(generation=1)
    member.at(HEARTBEAT_MS)
    old_beat = member.sent(m.HeartbeatRequest)
    member.out = member.core.subscribe(member.now, ["t", "u"])  # rejoin: generation 2
    member.join(generation=2)
    member.sync((T0, T1))
    member.answer(old_beat, error=errors.IllegalGenerationError("generation 1 is over"))
    assert member.actions(m.PartitionsLost) == []
    assert (member.core.generation, member.core.state) == (2, MemberState.STABLE)


def test_a_join_answered_after_the_poll_timeout_does_not_put_the_member_back() -> None:
    member = Member(max_poll_interval_ms=20_000, session_timeout_ms=10_000)
    member.stable()
    member.out = member.core.subscribe(member.now, ["t", "u"])
    join = member.sent(m.JoinGroupRequest)
    member.now = 20_001  # the reader never polled
    member.out = member.core.tick(member.now)
    assert member.actions(m.PartitionsRevoked)[0].partitions == {T0, T1}
    assert member.sent(m.LeaveGroupRequest).request.members[0].member_id == "m-1"
    member.answer(join, m.JoinGroupResponse(2, "consumer", "cooperative-sticky", "x", "m-1"))
    assert member.sends() == [] and member.core.generation == -1
    assert member.core.state is MemberState.UNJOINED


def test_partitions_added_before_a_follow_up_rebalance_start_during_it() -> None:
    member = Member()
    member.stable(partitions=(T0, T1))
    member.at(HEARTBEAT_MS)
    member.answer(member.sent(m.HeartbeatRequest), error=errors.RebalanceInProgressError("r"))
    member.join(generation=2)
    member.core.handed_out(T1, 30)
    member.sync((T0, T2))  # gains T2, gives up T1 (committed first), then rejoins
    member.answer(member.sent(m.OffsetCommitRequest), m.OffsetCommitResponse())
    assert m.JoinGroupRequest in member.sends() and m.OffsetFetchRequest in member.sends()
    assert member.fetch({T2: 7}).committed == {T2: (7, -1)}


@pytest.mark.parametrize("error", [
    errors.NotAuthorizedError("no READ on topic t"), errors.OffsetMetadataTooLargeError("long"),
    errors.UnknownTopicOrPartitionError("no t-9"),
])
def test_other_commit_errors_fail_the_commit_only(error) -> None:
    member = Member()
    member.stable()
    member.out = member.core.commit(member.now, {T0: 3}, token="c")
    member.answer(member.sent(m.OffsetCommitRequest), error=error)
    assert member.actions(m.CommitDone) == [m.CommitDone("c", {T0: 3}, error)]
    assert member.actions(m.Failed) == [] and member.core.failure is None
    assert member.core.state is MemberState.STABLE and member.core.assignment == {T0, T1}


def test_a_commit_to_a_lost_coordinator_fails_retriably_and_finds_it_again() -> None:
    member = Member()
    member.stable()
    member.out = member.core.commit(member.now, {T0: 3}, token="c")
    member.answer(member.sent(m.OffsetCommitRequest), error=errors.NotCoordinatorError("moved"))
    (done,) = member.actions(m.CommitDone)
    assert isinstance(done.error, errors.NotCoordinatorError) and done.error.retriable
    assert member.sends() == [m.FindCoordinatorRequest]
    member.out = member.core.commit(member.now, {T0: 3}, token="again")
    (done,) = member.actions(m.CommitDone)
    assert isinstance(done.error, errors.CoordinatorNotAvailableError) and done.error.retriable


def test_an_auto_commit_failing_retriably_is_tried_again_after_the_backoff() -> None:
    member = Member(retry_backoff_ms=100)
    member.stable(committed={T0: 1, T1: 1})
    member.core.handed_out(T0, 5)
    member.now = COMMIT_MS
    member.out = member.core.tick(member.now)
    commit = member.sent(m.OffsetCommitRequest)
    member.answer(commit, error=errors.CoordinatorLoadInProgressError("loading"))
    assert member.out.next_deadline_ms == COMMIT_MS + 100
    member.now = COMMIT_MS + 100
    member.out = member.core.tick(member.now)
    again = member.sent(m.OffsetCommitRequest)
    assert again.request.offsets == commit.request.offsets


def test_close_while_committing_before_a_join_leaves_without_joining() -> None:
    member = Member()
    member.stable(committed={T0: 1, T1: 1})
    member.core.handed_out(T0, 4)
    member.out = member.core.subscribe(member.now, ["t", "u"])
    prepare = member.sent(m.OffsetCommitRequest)  # the commit before the JoinGroup
    member.out = member.core.close(member.now)
    leave_commit = member.sent(m.OffsetCommitRequest)
    member.answer(prepare, m.OffsetCommitResponse())
    assert member.sends() == []  # no JoinGroup: the member is closing
    member.answer(leave_commit, m.OffsetCommitResponse())
    assert [type(a) for a in member.out.actions] == [m.PartitionsRevoked, m.Send]
    member.answer(member.sent(m.LeaveGroupRequest), m.LeaveGroupResponse())
    assert member.actions(m.Closed) == [m.Closed()]


def test_a_find_coordinator_answer_without_an_address_is_retried() -> None:
    member = Member(retry_backoff_ms=100)
    member.answer(member.sent(m.FindCoordinatorRequest), m.FindCoordinatorResponse(-1, ""))
    assert member.core.coordinator is None and member.out.next_deadline_ms == 100


@pytest.mark.parametrize("cls", [
    m.FindCoordinatorRequest, m.FindCoordinatorResponse, m.JoinGroupRequest,
    m.JoinGroupResponse, m.SyncGroupRequest, m.SyncGroupResponse, m.HeartbeatRequest,
    m.HeartbeatResponse, m.LeavingMember, m.LeaveGroupRequest, m.LeaveGroupResponse,
    m.LeftMember, m.CommittedOffset, m.OffsetCommitRequest, m.OffsetCommitResponse,
    m.OffsetFetchRequest, m.OffsetFetchResponse,
])
def test_the_messages_have_the_fields_of_broker_protos_messages(cls) -> None:
    """The driver translates them 1:1: same names (a LeftMember's error is one exception where
    the proto has the reason and the message)."""
    proto = getattr(broker_pb2, cls.__name__).DESCRIPTOR
    names = {f.name for f in dataclasses.fields(cls)}
    expected = {f.name for f in proto.fields} - {"error_message"}
    assert names == expected
    joined = {f.name for f in dataclasses.fields(m.JoinedMember)}
    assert joined == {f.name for f in broker_pb2.JoinGroupMember.DESCRIPTOR.fields}


@pytest.mark.parametrize(("error", "member_id_after", "generation_after"), [
    (errors.UnknownMemberIdError("gone"), "", -1),
    (errors.IllegalGenerationError("old"), "m-1", -1),
    (errors.RebalanceInProgressError("again"), "m-1", 2),
])
def test_sync_group_errors_rejoin_at_once(error, member_id_after, generation_after) -> None:
    """Kafka's SyncGroupResponseHandler (AbstractCoordinatorTest's sync error cases)."""
    member = Member()
    member.find()
    member.join(generation=2)
    member.answer(member.sent(m.SyncGroupRequest), error=error)
    join = member.sent(m.JoinGroupRequest).request
    assert join.member_id == member_id_after
    assert member.core.generation == generation_after
    assert member.actions(m.Failed) == []


def test_a_pending_member_closing_leaves_the_group() -> None:
    """AbstractCoordinatorTest.testPendingMemberShouldLeaveGroup: a member id but no generation."""
    member = Member()
    member.find()
    member.answer(member.sent(m.JoinGroupRequest), error=errors.MemberIdRequiredError(
        "join again", metadata={"member_id": "m-9"}))
    member.sent(m.JoinGroupRequest)  # in flight, parked on the coordinator
    member.out = member.core.close(member.now)
    leave = member.sent(m.LeaveGroupRequest)
    assert leave.request.members[0].member_id == "m-9"
    member.answer(leave, m.LeaveGroupResponse())
    assert member.actions(m.Closed) == [m.Closed()]


def test_close_without_a_coordinator_closes_at_once() -> None:
    member = Member()
    member.out = member.core.close(0)
    assert member.out.actions == [m.Closed()]
