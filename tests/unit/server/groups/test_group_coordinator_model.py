"""A Hypothesis state machine: client processes join, sync, heartbeat, commit, leave, restart and
fall silent while the clock jumps; after every step the coordinator's invariants hold
(GroupCoordinator.check(): one leader among the members, static members mapped, counts exact,
timers set), and across steps: the generation only grows, every member of a Stable group has
the assignment its leader gave it and no parked SyncGroup, no request is answered twice (the
harness asserts it), every committed offset a member was told is written is fetched back, and
a held heartbeat still waiting is its member's one in a group that is not rebalancing."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from stratalog.server.groups import (
    GroupConfig,
    GroupState,
    HeartbeatRequest,
    JoinGroupResponse,
    LeavingMember,
    MemberIdRequiredError,
    UnknownServerError,
)

PROCESSES = 5
STATIC = {0: "i-0", 1: "i-1"}  # processes 0 and 1 are static members


@dataclass
class Process:
    """What one client process knows."""

    instance_id: str | None
    member_id: str = ""
    generation: int = -1
    join_token: int | None = None
    sync_token: int | None = None
    members: tuple[str, ...] = ()  # the leader's view of the generation


class GroupModel(RuleBasedStateMachine):
    #: conftest.py's GroupHarness (a state machine takes no fixtures; the test sets it).
    harness_class: type = type(None)

    @initialize()
    def start(self) -> None:
        self.harness = self.harness_class(
            GroupConfig(initial_rebalance_delay_ms=500, group_max_size=4)
        )
        self.processes = [Process(STATIC.get(i)) for i in range(PROCESSES)]
        self.generation_seen = 0
        self.acknowledged: dict[tuple[str, int], int] = {}
        self.commits: dict[int, tuple[tuple[str, int], int]] = {}  # token -> (partition, offset)
        self.next_offset = 0
        self.held: set[int] = set()  # tokens of held heartbeats sent

    # -- what the clients learn ----------------------------------------------------------------

    def _learn(self) -> None:
        for process in self.processes:
            if process.join_token is not None:
                response = self.harness.answer(process.join_token)
                if isinstance(response, JoinGroupResponse):
                    process.join_token = None
                    if response.error is None:
                        process.member_id = response.member_id
                        process.generation = response.generation_id
                        process.members = tuple(m.member_id for m in response.members)
                    elif isinstance(response.error, MemberIdRequiredError):
                        process.member_id = response.member_id
                    else:
                        process.member_id, process.generation = "", -1
            if process.sync_token is not None and self.harness.answer(process.sync_token):
                process.sync_token = None
        for token, (tp, offset) in list(self.commits.items()):
            response = self.harness.answer(token)
            if response is not None:
                del self.commits[token]
                [result] = response.partitions
                # Acknowledged commits of one partition come in the order they were written.
                if result.error is None and offset > self.acknowledged.get(tp, -1):
                    self.acknowledged[tp] = offset

    # -- rules ---------------------------------------------------------------------------------

    @rule(i=st.integers(0, PROCESSES - 1))
    def join(self, i: int) -> None:
        process = self.processes[i]
        if process.join_token is not None:
            return
        process.join_token = self.harness.join(member_id=process.member_id,
                                               instance_id=process.instance_id)
        self._learn()

    @rule(i=st.integers(0, STATIC.__len__() - 1))
    def static_restart(self, i: int) -> None:
        """A static member's process restarts: it has lost its member id."""
        self.processes[i] = Process(STATIC[i])
        self.join(i)

    @rule(i=st.integers(0, PROCESSES - 1))
    def sync(self, i: int) -> None:
        process = self.processes[i]
        if process.generation < 0 or process.sync_token is not None:
            return
        assignments = {m: f"{m}@{process.generation}".encode() for m in process.members}
        process.sync_token = self.harness.sync(process.member_id, process.generation,
                                               assignments, instance_id=process.instance_id)
        self._learn()

    @rule(i=st.integers(0, PROCESSES - 1))
    def heartbeat(self, i: int) -> None:
        process = self.processes[i]
        if process.member_id:
            self.harness.heartbeat(process.member_id, process.generation,
                                   instance_id=process.instance_id)
            self._learn()

    @rule(i=st.integers(0, PROCESSES - 1), max_wait_ms=st.sampled_from([1_000, 4_000, 60_000]))
    def held_heartbeat(self, i: int, max_wait_ms: int) -> None:
        process = self.processes[i]
        if process.member_id:
            token = self.harness.token()
            self.harness.run(self.harness.coordinator.heartbeat(HeartbeatRequest(
                "g", process.member_id, process.generation, process.instance_id, max_wait_ms,
            ), token, self.harness.now_ms))
            self.held.add(token)
            self._learn()

    @rule(i=st.integers(0, PROCESSES - 1))
    def commit(self, i: int) -> None:
        process = self.processes[i]
        self.next_offset += 1
        tp = ("t", i)
        token = self.harness.commit({tp: self.next_offset}, member_id=process.member_id,
                                    generation=process.generation,
                                    instance_id=process.instance_id)
        self.commits[token] = (tp, self.next_offset)
        self._learn()

    @rule(i=st.integers(0, PROCESSES - 1))
    def leave(self, i: int) -> None:
        process = self.processes[i]
        if process.member_id and "g" in self.harness.coordinator.groups:
            self.harness.leave(LeavingMember(process.member_id, process.instance_id))
            self.processes[i] = Process(process.instance_id)
            self._learn()

    @rule(count=st.integers(2, PROCESSES))
    def cooperative_round(self, count: int) -> None:
        """``count`` processes do what well-behaved clients do: join (twice for a new dynamic
        member), wait out the initial delay, sync; so Stable groups of several members occur."""
        for _ in range(2):
            for i in range(count):
                self.join(i)
        self.advance(500)
        for i in range(count):
            self.sync(i)

    @rule()
    def hold_writes(self) -> None:
        """Writes to __consumer_offsets stay in flight until released."""
        self.harness.hold_writes = True

    @rule(fail=st.booleans())
    def release_writes(self, fail: bool) -> None:
        self.harness.hold_writes = False
        self.harness.release(UnknownServerError("injected") if fail else None)
        self._learn()

    @rule(ms=st.sampled_from([0, 500, 3_000, 6_000, 11_000, 61_000]))
    def advance(self, ms: int) -> None:
        self.harness.advance_to_deadlines(self.harness.now_ms + ms)
        self._learn()

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def generation_only_grows(self) -> None:
        group = self.harness.coordinator.groups.get("g") if hasattr(self, "harness") else None
        if group is not None:
            assert group.generation_id >= self.generation_seen
            self.generation_seen = group.generation_id

    @invariant()
    def stable_members_have_their_assignment(self) -> None:
        group = self.harness.coordinator.groups.get("g") if hasattr(self, "harness") else None
        if group is None or group.state is not GroupState.STABLE:
            return
        assert group.leader_id in group.members
        for member in group.members.values():
            assert not member.is_awaiting_sync
            # A static member that took over keeps the assignment of the id it replaced.
            assert member.assignment.endswith(f"@{group.generation_id}".encode()), (
                member.member_id, member.assignment, group.generation_id
            )

    @invariant()
    def held_heartbeats_wait_only_in_a_group_not_rebalancing(self) -> None:
        """An unanswered held heartbeat is its member's one, in a group not rebalancing: a
        rebalance, a removal or a newer one answered every other."""
        if not hasattr(self, "harness"):
            return
        waiting = {t for t in self.held if self.harness.answer(t) is None}
        group = self.harness.coordinator.groups.get("g")
        holders = {} if group is None else {
            m.heartbeat_reply_to: m for m in group.members.values() if m.is_holding_heartbeat
        }
        assert waiting == holders.keys(), (waiting, holders.keys())
        if waiting:
            assert group is not None and group.state is not GroupState.PREPARING_REBALANCE

    @invariant()
    def acknowledged_commits_are_fetched(self) -> None:
        if not hasattr(self, "harness") or not self.acknowledged:
            return
        fetched = {(f.topic, f.partition): f.offset
                   for f in self.harness.fetch(partitions=tuple(self.acknowledged)).partitions}
        assert fetched == self.acknowledged


def test_group_model(make_harness):
    GroupModel.harness_class = make_harness
    run_state_machine_as_test(GroupModel, settings=settings(
        max_examples=150, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    ))
