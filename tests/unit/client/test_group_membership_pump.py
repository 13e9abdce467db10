"""Several group members against the server's group coordinator, through a message pump.

Both are our sans-IO cores (client/groups' GroupMembership, server/groups' GroupCoordinator),
in virtual time (tests/unit/client/group_pump.py): issue 27's scenario without processes. Three
members share a 6-partition topic; one stops (its partitions go to the others after the session
timeout); one joins (cooperative: the others keep their unaffected partitions); committed
offsets never move backwards; once stable every partition has exactly one owner.
"""

from __future__ import annotations

import collections
import random

import pytest

from stratalog.client.groups import RangeAssignor
from stratalog.client.groups.group_membership import MembershipConfig
from stratalog.client.groups.member_state import MemberState
from stratalog.client.types import TopicPartition
from stratalog.server import groups as s
from tests.unit.client.group_pump import GroupPump

SIX = frozenset(TopicPartition("events", p) for p in range(6))
SESSION_MS = 6_000


def config(**overrides) -> MembershipConfig:
    settings = dict(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1_000,
                    auto_commit_interval_ms=1_000, auto_offset_reset="earliest")
    settings.update(overrides)
    return MembershipConfig("readers", ("events",), **settings)


def pump() -> GroupPump:
    return GroupPump(s.GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=1_000),
                     {"events": 6})


def assert_each_partition_owned_once(p: GroupPump) -> None:
    owners = p.owners()
    assert set(owners) == SIX, owners
    assert all(len(names) == 1 for names in owners.values()), owners


def assert_commits_never_move_backwards(p: GroupPump) -> None:
    last: dict[tuple[str, int], int] = {}
    for record in p.commits():
        key = (record.topic, record.partition)
        assert record.offset >= last.get(key, -1), (key, last[key], record.offset)
        last[key] = record.offset


def test_three_members_one_stops_one_joins() -> None:
    p = pump()
    for name in ("a", "b", "c"):
        p.add(name, config())
    p.run_until(5_000)
    assert_each_partition_owned_once(p)
    assert {len(p.members[n].assignment) for n in "abc"} == {2}
    generation = p.members["a"].generation

    # c dies: a and b take its partitions once its session times out on the coordinator, and
    # they lose none of their own on the way.
    before = {n: p.members[n].assignment for n in "ab"}
    p.stop("c")
    p.run_until(5_000 + SESSION_MS + 3_000)
    assert_each_partition_owned_once(p)
    for n in "ab":
        assert before[n] <= p.members[n].assignment
        assert p.logs[n].lost == [] and p.logs[n].revoked == []
        assert len(p.members[n].assignment) == 3
    assert p.members["a"].generation > generation

    # d joins: cooperative, so a and b give up only what moves to d (revoked, committed first)
    # and keep reading the rest throughout.
    before = {n: p.members[n].assignment for n in "ab"}
    p.add("d", config())
    p.run_until(p.now + 10_000)
    assert_each_partition_owned_once(p)
    assert len(p.members["d"].assignment) == 2
    for n in "ab":
        after = p.members[n].assignment
        revoked = frozenset().union(*p.logs[n].revoked)
        assert revoked == before[n] - after
        assert revoked <= p.members["d"].assignment
        assert p.logs[n].lost == []
    assert p.logs["d"].assigned and frozenset().union(*p.logs["d"].assigned) == (
        p.members["d"].assignment)
    moved = frozenset().union(*p.logs["a"].revoked, *p.logs["b"].revoked)
    assert moved == p.members["d"].assignment  # d got exactly what a and b revoked
    assert len(p.commits()) > 6  # auto-commits and the commits before each revocation
    assert_commits_never_move_backwards(p)
    for n in "abd":
        assert p.logs[n].failures == []
        p.members[n].positions.check()


def test_a_moved_partition_resumes_at_the_offset_its_last_owner_committed() -> None:
    p = pump()
    for name in ("a", "b"):
        p.add(name, config())
    p.run_until(5_000)
    p.add("c", config())
    p.run_until(15_000)
    assert_each_partition_owned_once(p)
    # Every partition c got was revoked by a or b, which committed its position first; c
    # started there (its StartPositions came from that commit, not from auto_offset_reset).
    committed = {}
    for record in p.commits():
        committed[TopicPartition(record.topic, record.partition)] = record.offset
    c = p.members["c"]
    for tp in c.assignment:
        assert committed[tp] > 0
        assert c.positions.position(tp) >= committed[tp]
    assert_commits_never_move_backwards(p)


def test_eager_members_revoke_everything_and_still_never_share_a_partition() -> None:
    p = pump()
    eager = dict(assignors=(RangeAssignor(),))
    for name in ("a", "b"):
        p.add(name, config(**eager))
    p.run_until(5_000)
    assert_each_partition_owned_once(p)
    p.add("c", config(**eager))
    p.run_until(15_000)
    assert_each_partition_owned_once(p)
    # Eager: a and b revoked all they had before rejoining.
    for n in "ab":
        assert len(p.logs[n].revoked) == 1 and len(p.logs[n].revoked[0]) == 3
    assert_commits_never_move_backwards(p)


def test_a_static_member_restarting_within_its_session_causes_no_rebalance() -> None:
    p = pump()
    p.add("a", config(group_instance_id="reader-a"))
    p.add("b", config(group_instance_id="reader-b"))
    p.run_until(5_000)
    generation = p.members["a"].generation
    owned_b = p.members["b"].assignment
    out = p.members["b"].close(p.now)
    p.carry_out("b", out)
    assert p.logs["b"].closed
    assert not any(type(a).__name__ == "Send" and type(a.request).__name__ == "LeaveGroupRequest"
                   for a in out.actions)
    p.stop("b")
    p.add("b2", config(group_instance_id="reader-b"))
    p.run_until(p.now + 4_000)
    assert p.members["a"].generation == generation
    assert p.members["b2"].assignment == owned_b
    assert p.logs["a"].revoked == [] and p.logs["a"].lost == []


@pytest.mark.parametrize("members", [1, 4])
def test_every_partition_has_one_owner_whatever_the_group_size(members: int) -> None:
    p = pump()
    for i in range(members):
        p.add(f"m{i}", config())
    p.run_until(10_000)
    assert_each_partition_owned_once(p)
    sizes = collections.Counter(len(p.members[f"m{i}"].assignment) for i in range(members))
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("seed", range(12))
def test_random_joins_stops_and_closes_never_give_a_partition_two_live_owners(seed: int) -> None:
    """Random members come (some static), die and close; at every 250 ms step no partition has
    two live owners, commits never move backwards, and once quiet every partition has one."""
    rng = random.Random(seed)
    p = pump()
    names = iter(f"m{i}" for i in range(1_000))
    live: list[str] = []
    for _ in range(3):
        live.append(next(names))
        p.add(live[-1], config())
    for _ in range(40):
        choice = rng.random()
        if choice < 0.15 or len(live) < 2:
            live.append(next(names))
            static = rng.random() < 0.3
            p.add(live[-1], config(group_instance_id=f"static-{live[-1]}" if static else None))
        elif choice < 0.25 and len(live) > 2:
            p.stop(live.pop(rng.randrange(len(live))))
        elif choice < 0.32 and len(live) > 2:
            name = live.pop(rng.randrange(len(live)))
            p.carry_out(name, p.members[name].close(p.now))
            p.run_until(p.now + 50)  # the LeaveGroup's answer comes
            assert p.logs[name].closed, name
            p.stop(name)
        p.run_until(p.now + 250)
        owners = p.owners()
        assert all(len(names_) == 1 for names_ in owners.values()), owners
    p.run_until(p.now + SESSION_MS + 10_000)
    assert_each_partition_owned_once(p)
    assert_commits_never_move_backwards(p)
    for name in live:
        assert p.logs[name].failures == []
        p.members[name].positions.check()


@pytest.mark.parametrize("held_heartbeats", [True, False])
def test_a_fourth_member_rebalances_at_once_with_held_heartbeats(held_heartbeats) -> None:
    """Issue 27's rebalance benchmark at the default 3 s heartbeat interval, in virtual time
    (answers arrive at once here): with held heartbeats the three stable members learn of d's
    join, and of the cooperative second round, the moment each starts; with Kafka's schedule
    they learn of each only at their next heartbeat, so the rebalance is not over 100 ms on."""
    settings = dict(session_timeout_ms=45_000, heartbeat_interval_ms=3_000,
                    held_heartbeats=held_heartbeats)
    p = pump()
    for name in ("a", "b", "c"):
        p.add(name, config(**settings))
    p.run_until(10_000)
    assert_each_partition_owned_once(p)
    generation = p.members["a"].generation
    p.run_until(12_345)  # mid-way between heartbeats
    p.add("d", config(**settings))
    p.run_until(p.now + 100)
    owners = p.owners()
    done = (set(owners) == SIX and all(len(names) == 1 for names in owners.values())
            and all(p.members[n].state is MemberState.STABLE for n in "abcd")
            and len(p.members["d"].assignment) == 1)
    assert done is held_heartbeats, {n: (p.members[n].state, p.members[n].assignment)
                                     for n in "abcd"}
    if held_heartbeats:
        # Two rounds: d's join, then the round the revocation starts (cooperative).
        assert p.members["a"].generation == generation + 2
        assert_commits_never_move_backwards(p)
