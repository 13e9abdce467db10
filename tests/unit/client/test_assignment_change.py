"""client/groups/assignment_change.py: what a member revokes, loses and adds, as Kafka's
ConsumerCoordinator.onJoinPrepare and onJoinComplete decide it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stratalog.client.groups.assignment_change import after_sync, before_join
from stratalog.client.groups.assignor import RebalanceProtocol
from stratalog.client.types import TopicPartition as TP

EAGER, COOPERATIVE = RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE
A0, A1, A2, B0 = TP("a", 0), TP("a", 1), TP("a", 2), TP("b", 0)


def test_lost_membership_loses_everything_whatever_the_protocol():
    for protocol in (EAGER, COOPERATIVE):
        prep = before_join({A0, B0}, ["a", "b"], protocol, membership_lost=True)
        assert (prep.lost, prep.revoked, prep.owned) == ({A0, B0}, set(), set())


def test_eager_revokes_everything_before_joining():
    prep = before_join({A0, B0}, ["a", "b"], EAGER, membership_lost=False)
    assert (prep.lost, prep.revoked, prep.owned) == (set(), {A0, B0}, set())


def test_cooperative_revokes_only_unsubscribed_topics_before_joining():
    prep = before_join({A0, B0}, ["a"], COOPERATIVE, membership_lost=False)
    assert (prep.lost, prep.revoked, prep.owned) == (set(), {B0}, {A0})


def test_eager_after_sync_adds_all_and_never_rejoins():
    change = after_sync(set(), {A0, A1}, ["a"], EAGER)
    assert change.applies and change.added == {A0, A1} and change.revoked == set()
    assert not change.rejoin_needed


def test_cooperative_after_sync_revokes_the_difference_and_rejoins():
    change = after_sync({A0, A1}, {A1, A2}, ["a"], COOPERATIVE)
    assert change.assigned == {A1, A2}
    assert change.added == {A2}
    assert change.revoked == {A0}
    assert change.rejoin_needed and "revoked 1 partitions" in change.rejoin_reason


def test_cooperative_after_sync_without_revocation_is_stable():
    change = after_sync({A0}, {A0, A1}, ["a"], COOPERATIVE)
    assert change.added == {A1} and change.revoked == set() and not change.rejoin_needed


def test_an_assignment_for_a_topic_no_longer_subscribed_is_not_applied():
    change = after_sync({A0}, {A0, B0}, ["a"], COOPERATIVE)
    assert not change.applies
    assert change.assigned == {A0} and change.added == set() and change.revoked == set()
    assert change.rejoin_needed and "['b']" in change.rejoin_reason


partition_sets = st.sets(st.builds(TP, st.sampled_from("abc"), st.integers(0, 3)), max_size=8)


@given(partition_sets, partition_sets)
def test_cooperative_change_accounts_for_every_partition(owned, assigned):
    change = after_sync(owned, assigned, "abc", COOPERATIVE)
    assert change.assigned == assigned
    assert change.added | (owned & assigned) == assigned
    assert change.revoked | (owned & assigned) == owned
    assert not change.added & change.revoked
    assert change.rejoin_needed == bool(owned - assigned)
