"""client/groups/cooperative_sticky_assignor.py: Kafka's CooperativeStickyAssignorTest cases, and a
group of members run through rebalances as Kafka's consumers run them (assign, apply with
assignment_change.after_sync, rejoin while anyone revoked), checking the cooperative rule in
every round and the balance once it settles."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from stratalog.client.groups.assignment_change import after_sync, before_join
from stratalog.client.groups.assignor import RebalanceProtocol, check_assignment
from stratalog.client.groups.consumer_protocol import Assignment, Subscription
from stratalog.client.groups.cooperative_sticky_assignor import CooperativeStickyAssignor
from stratalog.client.types import TopicPartition as TP
from tests.unit.client.group_inputs import (
    claimed_groups,
    counts,
    every_partition,
    groups,
    is_balanced,
    member,
    owner_map,
    tps,
)

COOPERATIVE = RebalanceProtocol.COOPERATIVE


def assign(partitions_per_topic, members):
    assignment = CooperativeStickyAssignor().assign(partitions_per_topic, members)
    check_assignment(partitions_per_topic, members, assignment, COOPERATIVE)
    return assignment


def test_generation_in_user_data_round_trips():
    assignor = CooperativeStickyAssignor()
    data = assignor.subscription_user_data(["t"])
    assert data == struct.pack(">i", -1)
    assert assignor.member_generation(Subscription(("t",), data)) == -1
    assignor.on_assignment(Assignment(()), 10)
    data = assignor.subscription_user_data(["t"])
    assert assignor.member_generation(Subscription(("t",), data)) == 10


def test_generation_without_field_or_user_data_is_unknown():
    assert CooperativeStickyAssignor.member_generation(Subscription(("t",))) is None
    assert CooperativeStickyAssignor.member_generation(Subscription(("t",), b"\x01")) == -1


def test_the_subscription_field_wins_over_user_data():
    older = struct.pack(">i", 4)
    assert CooperativeStickyAssignor.member_generation(Subscription(("t",), older, (), 5)) == 5


def test_doubly_claimed_partition_waits_until_both_revoke_it():
    for count, expected_c1 in ((3, tps(("t", 1))), (4, tps(("t", 1), ("t", 3)))):
        ms = [member("consumer1", ["t"], tps(("t", 0), ("t", 1)), 5),
              member("consumer2", ["t"], tps(("t", 0), ("t", 2)), 5),
              member("consumer3", ["t"], [], 5)]
        assert assign({"t": count}, ms) == {
            "consumer1": expected_c1, "consumer2": tps(("t", 2)), "consumer3": [],
        }


def test_old_version_subscriptions_with_the_generation_in_user_data():
    def v1(member_id, owned, generation):
        return member(member_id, ["t1"], owned, None, user_data=struct.pack(">i", generation))

    ms = [v1("consumer1", tps(("t1", 0)), 3), v1("consumer2", tps(("t1", 1)), 3),
          member("consumer3", ["t1"], [], 3)]
    assert assign({"t1": 3}, ms) == {
        "consumer1": tps(("t1", 0)), "consumer2": tps(("t1", 1)), "consumer3": tps(("t1", 2)),
    }


def test_the_docstring_example_two_phases():
    six = [TP("t", p) for p in range(6)]
    first = assign({"t": 6}, [member("A", ["t"], six, 3), member("B", ["t"])])
    assert first == {"A": six[:3], "B": []}
    second = assign({"t": 6}, [member("A", ["t"], six[:3], 4), member("B", ["t"], [], 4)])
    assert second == {"A": six[:3], "B": six[3:]}


@given(claimed_groups())
def test_never_assigned_to_a_new_owner_while_another_claims_it(group):
    partitions_per_topic, members = group
    assignment = assign(partitions_per_topic, members)
    claimed = {tp: {m.member_id for m in members if tp in m.subscription.owned_partitions}
               for tp in every_partition(partitions_per_topic, members)}
    for member_id, parts in assignment.items():
        for tp in parts:
            assert claimed[tp] <= {member_id}
    # Withheld are exactly the partitions someone else claims; everything else is assigned.
    unassigned = every_partition(partitions_per_topic, members) - set(owner_map(assignment))
    assert all(claimed[tp] for tp in unassigned)


def run_group(partitions_per_topic, subscriptions, owned, generation, rounds_max=4):
    """Rebalance until no member revokes anything; returns (owned after each round, generation).

    Each round every member reports what it owns; the leader assigns; each member applies its
    assignment as a Kafka consumer does (after_sync) and rejoins if it revoked something. In
    every round, a partition that some member kept reading is never handed to another.
    """
    history = []
    for _ in range(rounds_max):
        generation += 1
        members = [member(m, subscriptions[m], owned.get(m, []), generation - 1)
                   for m in sorted(subscriptions)]
        assignment = assign(partitions_per_topic, members)
        changes = {
            m: after_sync(owned.get(m, []), assignment[m], subscriptions[m], COOPERATIVE)
            for m in subscriptions
        }
        kept = {tp: m for m, change in changes.items() for tp in change.assigned}
        assert len(kept) == sum(len(c.assigned) for c in changes.values()), "owned twice"
        owned = {m: sorted(change.assigned) for m, change in changes.items()}
        history.append(owned)
        if not any(change.rejoin_needed for change in changes.values()):
            return history, generation
    raise AssertionError(f"no stable assignment after {rounds_max} rebalances")


@settings(max_examples=150)
@given(groups(members_max=5), st.data())
def test_membership_changes_settle_in_two_rebalances_and_never_move_what_stays(group, data):
    partitions_per_topic, ids, subscriptions = group
    history, generation = run_group(partitions_per_topic, subscriptions, {}, 0)
    stable = history[-1]
    # One member leaves and two join with the first member's topics.
    leaver = data.draw(st.sampled_from(ids))
    joined = {m: t for m, t in subscriptions.items() if m != leaver}
    joined.update({"new1": subscriptions[ids[0]], "new2": subscriptions[ids[0]]})
    history, _ = run_group(partitions_per_topic, joined, stable, generation)
    assert len(history) <= 2
    final = history[-1]
    # A partition with the same owner before and after was owned by it in every round between.
    before, after = owner_map(stable), owner_map(final)
    for tp, owner in before.items():
        if after.get(tp) == owner:
            assert all(tp in owned[owner] for owned in history)
    members = [member(m, t) for m, t in joined.items()]
    assert set(owner_map(final)) == every_partition(partitions_per_topic, members)
    assert is_balanced(final, members)
    if len(set(joined.values())) == 1:
        assert max(counts(final)) - min(counts(final)) <= 1


class CooperativeGroup(RuleBasedStateMachine):
    """A group under a stream of changes (joins, leaves, resubscriptions, new partitions, a member
    losing its membership), each followed by rebalances until it settles, as Kafka's consumers run
    them: before_join, the leader's cooperative-sticky assignment, after_sync, rejoin while any
    member revoked. :meth:`check` runs after every step."""

    def __init__(self):
        super().__init__()
        self.partitions_per_topic = {"a": 3, "b": 2, "c": 0}
        self.subscriptions: dict[str, tuple[str, ...]] = {}
        self.owned: dict[str, list[TP]] = {}
        self.generation = 0
        self.lost: set[str] = set()
        self.rounds = 0

    @rule(m=st.sampled_from(["m0", "m1", "m2", "m3", "m4"]),
          topics=st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True))
    def join_or_resubscribe(self, m, topics):
        self.subscriptions[m] = tuple(topics)
        self.settle()

    @rule(data=st.data())
    def leave(self, data):
        if self.subscriptions:
            m = data.draw(st.sampled_from(sorted(self.subscriptions)))
            del self.subscriptions[m]
            self.owned.pop(m, None)
            self.settle()

    @rule(topic=st.sampled_from("abc"), more=st.integers(1, 3))
    def add_partitions(self, topic, more):
        self.partitions_per_topic[topic] += more
        self.settle()

    @rule(data=st.data())
    def lose_membership(self, data):
        if self.subscriptions:
            self.lost.add(data.draw(st.sampled_from(sorted(self.subscriptions))))
            self.settle()

    def settle(self):
        for rounds in range(1, 4):
            self.generation += 1
            members = []
            for m in sorted(self.subscriptions):
                prep = before_join(self.owned.get(m, []), self.subscriptions[m], COOPERATIVE,
                                   membership_lost=m in self.lost)
                assert not (prep.lost and m not in self.lost)
                self.owned[m] = sorted(prep.owned)
                # A member whose membership was lost rejoins without a generation.
                generation = None if m in self.lost else self.generation - 1
                members.append(member(m, self.subscriptions[m], prep.owned, generation))
            self.lost.clear()
            assignment = assign(self.partitions_per_topic, members)
            rejoin = False
            for m in sorted(self.subscriptions):
                change = after_sync(self.owned[m], assignment[m], self.subscriptions[m], COOPERATIVE)
                assert change.applies
                self.owned[m] = sorted(change.assigned)
                rejoin |= change.rejoin_needed
            if not rejoin:
                self.rounds = rounds
                return
        raise AssertionError("the group did not settle in 3 rebalances")

    @invariant()
    def check(self):
        owners = owner_map(self.owned)
        assert len(owners) == sum(len(p) for p in self.owned.values()), "a partition owned twice"
        members = [member(m, t) for m, t in self.subscriptions.items()]
        if self.subscriptions:
            assert self.rounds <= 2
            assert set(owners) == every_partition(self.partitions_per_topic, members)
            assert is_balanced({m: self.owned.get(m, []) for m in self.subscriptions}, members)


CooperativeGroup.TestCase.settings = settings(max_examples=60, stateful_step_count=12,
                                              deadline=None)
test_cooperative_group = CooperativeGroup.TestCase
