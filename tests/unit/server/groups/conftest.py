"""A caller for the sans-IO group coordinator: a fake clock, an in-memory partition, replies.

The harness plays the part the server will: it writes each :class:`Append` to a list standing
for the ``__consumer_offsets`` partition (or fails it, when told to hold or fail writes), reports
it back, collects every :class:`Reply` by token, and moves a clock it alone advances (no sleeps).
It calls ``check()`` (every invariant) after every step.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable

import pytest

from stratalog.server.groups import (
    Append,
    GroupConfig,
    GroupCoordinator,
    GroupError,
    GroupRecord,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeavingMember,
    MemberIdRequiredError,
    OffsetCommitRequest,
    OffsetFetchRequest,
    Output,
    PartitionOffset,
    SyncGroupRequest,
    SyncGroupResponse,
)

PROTOCOLS = (("range", b"sub-range"), ("roundrobin", b"sub-rr"))
SESSION_MS = 10_000
REBALANCE_MS = 60_000


class GroupHarness:
    def __init__(self, config: GroupConfig | None = None, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms
        self.config = config or GroupConfig(initial_rebalance_delay_ms=0)
        suffixes = itertools.count(1)
        self.coordinator = GroupCoordinator(
            self.config, now_ms=now_ms, member_id_suffix=lambda: f"m{next(suffixes)}"
        )
        #: The partition: (offset, record, producer id) in write order.
        self.log: list[tuple[int, GroupRecord, int]] = []
        self.replies: dict[Hashable, object] = {}
        self.held: list[Append] = []
        self.hold_writes = False
        self._tokens = itertools.count(1)

    # -- plumbing ------------------------------------------------------------------------------

    def token(self) -> int:
        return next(self._tokens)

    def run(self, out: Output) -> Output:
        """Carry out ``out``: collect replies, write (or hold) appends, check invariants."""
        for reply in out.replies:
            assert reply.reply_to not in self.replies, f"answered twice: {reply.reply_to}"
            self.replies[reply.reply_to] = reply.response
        for append in out.appends:
            if self.hold_writes:
                self.held.append(append)
            else:
                self.write(append)
        self.coordinator.check()
        return out

    def write(self, append: Append) -> None:
        first = len(self.log)
        for record in append.records:
            self.log.append((len(self.log), record, append.producer_id))
        self.run(self.coordinator.append_completed(append.append_id, first, self.now_ms))

    def release(self, error: GroupError | None = None) -> None:
        """Write (or fail with ``error``) the held appends, in order."""
        held, self.held = self.held, []
        for append in held:
            if error is None:
                self.write(append)
            else:
                self.run(self.coordinator.append_failed(append.append_id, error, self.now_ms))

    def end_transaction(self, producer_id: int, committed: bool) -> None:
        """The transaction's COMMIT or ABORT marker is written to the partition."""
        self.log.append((len(self.log), ("marker", committed), producer_id))
        self.coordinator.replay_end_transaction(producer_id, committed)
        self.coordinator.check()

    def replay_into(self, coordinator: GroupCoordinator) -> None:
        """Load ``coordinator`` from this harness's partition, records and markers in order."""
        for offset, record, producer_id in self.log:
            if isinstance(record, tuple):
                coordinator.replay_end_transaction(producer_id, record[1])
            else:
                coordinator.replay(offset, record, producer_id, self.now_ms)

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        self.run(self.coordinator.poll(self.now_ms))

    def advance_to_deadlines(self, until_ms: int) -> None:
        """Fire timers one deadline at a time up to ``until_ms`` (bounded)."""
        for _ in range(10_000):
            deadline = self.coordinator.next_deadline_ms()
            if deadline is None or deadline > until_ms:
                break
            self.now_ms = max(self.now_ms, deadline)
            self.run(self.coordinator.poll(self.now_ms))
        self.now_ms = max(self.now_ms, until_ms)
        self.run(self.coordinator.poll(self.now_ms))

    def answer(self, token: Hashable) -> object | None:
        return self.replies.get(token)

    # -- requests ------------------------------------------------------------------------------

    def join(
        self,
        group_id: str = "g",
        member_id: str = "",
        *,
        instance_id: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = PROTOCOLS,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        client_id: str = "client",
    ) -> int:
        token = self.token()
        self.run(self.coordinator.join_group(
            JoinGroupRequest(group_id, protocol_type, protocols, session_ms, rebalance_ms,
                             member_id, instance_id, client_id, "127.0.0.1"),
            token, self.now_ms,
        ))
        return token

    def join_new(self, group_id: str = "g", **kwargs) -> tuple[str, int]:
        """A dynamic member's two-step first join (KIP-394): returns (member id, join token)."""
        first = self.join(group_id, **kwargs)
        response = self.answer(first)
        assert isinstance(response, JoinGroupResponse)
        assert isinstance(response.error, MemberIdRequiredError), response
        return response.member_id, self.join(group_id, response.member_id, **kwargs)

    def sync(
        self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
        *, group_id: str = "g", instance_id: str | None = None,
    ) -> int:
        token = self.token()
        self.run(self.coordinator.sync_group(
            SyncGroupRequest(group_id, member_id, generation, instance_id, "consumer", None,
                             tuple((assignments or {}).items())),
            token, self.now_ms,
        ))
        return token

    def heartbeat(self, member_id: str, generation: int, group_id: str = "g",
                  instance_id: str | None = None) -> GroupError | None:
        token = self.token()
        self.run(self.coordinator.heartbeat(
            HeartbeatRequest(group_id, member_id, generation, instance_id), token, self.now_ms
        ))
        return self.replies[token].error  # type: ignore[attr-defined]

    def leave(self, *members: LeavingMember, group_id: str = "g") -> object:
        token = self.token()
        self.run(self.coordinator.leave_group(LeaveGroupRequest(group_id, members), token,
                                              self.now_ms))
        return self.replies[token]

    def commit(self, offsets: dict[tuple[str, int], int], group_id: str = "g",
               member_id: str = "", generation: int = -1, instance_id: str | None = None,
               metadata: str = "") -> int:
        token = self.token()
        self.run(self.coordinator.commit_offsets(OffsetCommitRequest(
            group_id,
            tuple(PartitionOffset(t, p, o, 5, metadata) for (t, p), o in offsets.items()),
            member_id, generation, instance_id,
        ), token, self.now_ms))
        return token

    def fetch(self, group_id: str = "g", partitions=None, require_stable: bool = False):
        token = self.token()
        self.run(self.coordinator.fetch_offsets(
            OffsetFetchRequest(group_id, partitions, require_stable), token, self.now_ms
        ))
        return self.replies[token]

    def form_group(self, n: int, group_id: str = "g") -> tuple[list[str], int]:
        """Members 1..n join, the leader assigns ``b"a-<member>"`` to each: a Stable group."""
        tokens = []
        members = []
        for _ in range(n):
            member_id, token = self.join_new(group_id)
            members.append(member_id)
            tokens.append(token)
        # The initial rebalance's delay (0 here) passes.
        self.advance(0)
        responses = [self.answer(t) for t in tokens]
        assert all(isinstance(r, JoinGroupResponse) and r.error is None for r in responses), \
            responses
        generation = responses[0].generation_id
        leader = responses[0].leader_id
        sync_tokens = {}
        for member_id in members:
            if member_id != leader:
                sync_tokens[member_id] = self.sync(member_id, generation, group_id=group_id)
        sync_tokens[leader] = self.sync(
            leader, generation, {m: f"a-{m}".encode() for m in members}, group_id=group_id
        )
        for member_id, token in sync_tokens.items():
            response = self.answer(token)
            assert isinstance(response, SyncGroupResponse) and response.error is None, response
            assert response.assignment == f"a-{member_id}".encode()
        return members, generation

    def group(self, group_id: str = "g"):
        return self.coordinator.groups[group_id]


@pytest.fixture
def harness() -> GroupHarness:
    return GroupHarness()


@pytest.fixture
def make_harness():
    return GroupHarness
