"""Shared by the assignor tests: building members, generating groups, measuring assignments.

Not a test module (no ``test_`` prefix): the assignor tests import it as
``tests.unit.client.group_inputs``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hypothesis import strategies as st

from stratalog.client.groups.assignor import Member
from stratalog.client.groups.consumer_protocol import Subscription
from stratalog.client.types import TopicPartition as TP


def tps(*pairs: tuple[str, int]) -> list[TP]:
    return [TP(t, p) for t, p in pairs]


def member(
    member_id: str,
    topics: Iterable[str],
    owned: Iterable[TP] = (),
    generation: int | None = None,
    instance: str | None = None,
    user_data: bytes | None = None,
) -> Member:
    return Member(
        member_id,
        Subscription(tuple(topics), user_data, tuple(owned), generation),
        instance,
    )


def owner_map(assignment: Mapping[str, Sequence[TP]]) -> dict[TP, str]:
    return {tp: m for m, parts in assignment.items() for tp in parts}


def counts(assignment: Mapping[str, Sequence[TP]]) -> list[int]:
    return [len(parts) for parts in assignment.values()]


def every_partition(partitions_per_topic: Mapping[str, int], members: Sequence[Member]) -> set[TP]:
    """Every partition some member subscribes to."""
    topics = {t for m in members for t in m.subscription.topics}
    return {TP(t, p) for t in topics for p in range(partitions_per_topic.get(t, 0))}


def is_balanced(
    assignment: Mapping[str, Sequence[TP]], members: Sequence[Member]
) -> bool:
    """Kafka's criterion (AbstractStickyAssignorTest.verifyValidityAndBalance): no partition
    could move to a subscriber of its topic holding two or more fewer."""
    topics = {m.member_id: set(m.subscription.topics) for m in members}
    for parts in assignment.values():
        for receiver, theirs in assignment.items():
            if len(parts) >= len(theirs) + 2 and any(tp.topic in topics[receiver] for tp in parts):
                return False
    return True


TOPICS = ("t0", "t1", "t2", "t3")


@st.composite
def groups(draw, equal_subscriptions: bool = False, members_max: int = 7):
    """(partitions_per_topic, member ids, topics per member): a group with no history yet."""
    partitions_per_topic = {
        t: draw(st.integers(min_value=0, max_value=9)) for t in TOPICS[: draw(st.integers(1, 4))]
    }
    ids = draw(st.lists(st.sampled_from([f"m{i}" for i in range(10)]), min_size=1,
                        max_size=members_max, unique=True))
    known = [*sorted(partitions_per_topic), "absent"]
    if equal_subscriptions:
        topics = draw(st.lists(st.sampled_from(known), min_size=1, unique=True))
        subscriptions = {m: tuple(topics) for m in ids}
    else:
        subscriptions = {
            m: tuple(draw(st.lists(st.sampled_from(known), min_size=1, unique=True))) for m in ids
        }
    return partitions_per_topic, ids, subscriptions


@st.composite
def claimed_groups(draw, equal_subscriptions: bool = False):
    """A group whose members report arbitrary, possibly conflicting, claims and generations."""
    partitions_per_topic, ids, subscriptions = draw(groups(equal_subscriptions))
    every = [TP(t, p) for t, n in partitions_per_topic.items() for p in range(n + 1)]
    members = []
    for m in ids:
        owned = draw(st.lists(st.sampled_from(every), unique=True)) if every else []
        generation = draw(st.none() | st.integers(min_value=0, max_value=3))
        members.append(member(m, subscriptions[m], owned, generation))
    return partitions_per_topic, members
