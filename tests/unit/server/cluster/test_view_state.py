"""The cluster view's state (server/cluster/view_state.py): etcd's watch events applied as
changes give the view a full read of the same keys gives.

An in-memory model of etcd's key space stands for etcd: random transactions (puts and deletes of
topic keys, partition keys, keys that do not decode, keys between the two prefixes that are not
the view's) each make one revision and the events etcd would send for it. The view is loaded at
some revision, then given the later events in random batches, some starting with events it
holds already (a full read that raced the stream); after every batch its invariant holds and it
equals a full read at its revision (never a state etcd did not hold), and at the end it equals a view loaded from the final keys, and every key that differs between its
first and last state was reported changed.
"""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.server.cluster.layout import ClusterKeys
from stratalog.server.cluster.partition_state import (
    PartitionReassignment,
    PartitionState,
    TopicAssignment,
)
from stratalog.server.cluster.view_state import ViewState
from stratalog.server.cluster.watches import WatchEvent

KEYS = ClusterKeys("/s")
#: The view's watched range: from the partitions prefix to the end of the topics prefix.
WATCHED = (KEYS.partitions_prefix, b"/s/topics0")
TOPICS = ("a", "b", "a2")


class KeyValue(NamedTuple):
    """A key as a range read returns it (etcd's KeyValue, the fields the view reads)."""

    key: bytes
    value: bytes
    mod_revision: int


class Etcd:
    """etcd's key space and revisions: a transaction that changes something makes one
    revision and the events of its operations, in order (a delete of a missing key changes
    nothing and makes no event, as etcd's)."""

    def __init__(self) -> None:
        self.kvs: dict[bytes, KeyValue] = {}
        self.revision = 1  # etcd starts at 1
        self.events: list[WatchEvent] = []
        #: revision -> the keys at that revision (etcd's MVCC, for a read at a revision).
        self.history: dict[int, dict[bytes, KeyValue]] = {1: {}}

    def txn(self, ops: list[tuple[bytes, bytes | None]]) -> None:
        revision = self.revision + 1
        made: list[WatchEvent] = []
        for key, value in ops:
            if value is None:
                if self.kvs.pop(key, None) is not None:
                    made.append(WatchEvent(True, key, b"", revision))
            else:
                self.kvs[key] = KeyValue(key, value, revision)
                made.append(WatchEvent(False, key, value, revision))
        if made:
            self.revision = revision
            self.events += made
            self.history[revision] = dict(self.kvs)

    def load_into(self, view: ViewState, revision: int = 0) -> tuple[set[str], set[tuple[str, int]]]:
        """A full read: both prefixes' keys at ``revision`` (0: the current one)."""
        revision = revision or self.revision
        return view.load(revision, self.watched(revision))

    def watched(self, revision: int, since: int = 0) -> list[KeyValue]:
        """The keys of the view's range at ``revision``, modified after ``since``."""
        return [kv for key, kv in sorted(self.history[revision].items())
                if WATCHED[0] <= key < WATCHED[1] and kv.mod_revision > since]


def assignments() -> st.SearchStrategy[bytes]:
    replicas = st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True).map(tuple)

    def encode(parts: list[tuple[int, ...]], moving: bool) -> bytes:
        numbered = dict(enumerate(parts))
        reassigning = {}
        if moving and len(parts[0]) > 1:
            reassigning = {0: PartitionReassignment(adding=(), removing=parts[0][-1:])}
        return TopicAssignment(numbered, {"retention.ms": "1"}, reassigning).encode()

    valid = st.builds(encode, st.lists(replicas, min_size=1, max_size=4), st.booleans())
    return st.one_of(valid, st.just(b"not json"), st.just(b'{"partitions": {"1": [1]}}'))


def states() -> st.SearchStrategy[bytes]:
    valid = st.builds(
        lambda leader, epoch, isr: PartitionState(leader, epoch, tuple(isr)).encode(),
        st.integers(-1, 4), st.integers(0, 5), st.lists(st.integers(0, 4), max_size=3),
    )
    return st.one_of(valid, st.just(b'{"leader": "x"}'))


def operations() -> st.SearchStrategy[tuple[bytes, bytes | None]]:
    topic = st.sampled_from(TOPICS)
    number = st.integers(0, 4)
    return st.one_of(
        st.tuples(topic.map(KEYS.topic), assignments()),
        st.tuples(topic.map(KEYS.topic), st.none()),
        st.tuples(st.builds(KEYS.partition, topic, number), states()),
        st.tuples(st.builds(KEYS.partition, topic, number), st.none()),
        # Not the view's: a partition key without a number or not as the cluster writes it
        # (a second key for partition 1), a topic key that is not UTF-8, a key between the
        # prefixes.
        st.tuples(st.sampled_from([b"/s/partitions/a/x", b"/s/partitions/a/01"]), states()),
        st.tuples(st.just(b"/s/topics/\xff"), assignments()),  # not UTF-8
        st.tuples(st.sampled_from([b"/s/q", b"/s/stuff"]), st.sampled_from([b"1", None])),
    )


def transactions() -> st.SearchStrategy[list[tuple[bytes, bytes | None]]]:
    # etcd refuses a transaction that names a key twice.
    return st.lists(operations(), min_size=1, max_size=4, unique_by=lambda op: op[0])


def drop_topic(topic: str) -> list[tuple[bytes, bytes | None]]:
    """DeleteTopic's transaction: the topic key and every partition key it may have."""
    return [(KEYS.topic(topic), None), *((KEYS.partition(topic, n), None) for n in range(5))]


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(transactions(), max_size=8),
    after=st.lists(st.one_of(transactions(), st.sampled_from(TOPICS).map(drop_topic)),
                   max_size=25),
    cuts=st.lists(st.integers(1, 6), min_size=1, max_size=30),
    overlap=st.integers(0, 30),
)
def test_events_applied_equal_a_full_read_of_the_same_keys(
        before: list, after: list, cuts: list[int], overlap: int) -> None:
    etcd = Etcd()
    for ops in before:
        etcd.txn(ops)
    view = ViewState(KEYS)
    etcd.load_into(view)
    view.check()
    loaded_at, loaded_revision = len(etcd.events), etcd.revision
    first_topics, first_partitions = dict(view.topics), dict(view.partitions)
    for ops in after:
        etcd.txn(ops)

    # The events after the load, in batches of whole revisions; a batch may begin with events
    # the view holds (a full read raced the stream): they are ignored.
    reported_topics: set[str] = set()
    reported_partitions: set[tuple[str, int]] = set()
    events = etcd.events
    start, index = max(0, loaded_at - overlap), 0
    while start < len(events):
        end = min(len(events), start + cuts[index % len(cuts)])
        while end < len(events) and events[end].mod_revision == events[end - 1].mod_revision:
            end += 1  # a revision is never split (watches.py joins etcd's fragments)
        topics, partitions = view.apply(events[start:end])
        reported_topics |= topics
        reported_partitions |= partitions
        view.check()
        # Never a state etcd did not hold: the view is a full read at its revision.
        then = ViewState(KEYS)
        etcd.load_into(then, view.revision)
        assert (view.topics, view.partitions) == (then.topics, then.partitions)
        start, index = end, index + 1

    full = ViewState(KEYS)
    etcd.load_into(full)
    full.check()
    assert view.topics == full.topics
    assert view.partitions == full.partitions
    assert view.revision == full.revision == etcd.revision
    # A full read over a state of an older revision (the fallback poll after a lost event)
    # gives the same as one into an empty state.
    stale = ViewState(KEYS)
    etcd.load_into(stale, loaded_revision)
    etcd.load_into(stale)
    stale.check()
    assert (stale.topics, stale.partitions) == (full.topics, full.partitions)
    # The fallback poll's read of the same keys: nothing to tell, the same state.
    topics, partitions = view.topics, view.partitions
    assert etcd.load_into(view) == (set(), set())
    assert view.topics is topics and view.partitions is partitions
    assert {t for t in first_topics.keys() | full.topics.keys()
            if first_topics.get(t) != full.topics.get(t)} <= reported_topics
    assert {k for k in first_partitions.keys() | full.partitions.keys()
            if first_partitions.get(k) != full.partitions.get(k)} <= reported_partitions


def test_a_topic_deleted_takes_its_partitions_and_an_older_event_is_ignored() -> None:
    etcd = Etcd()
    etcd.txn([(KEYS.topic("a"), TopicAssignment({0: (1, 2), 1: (2, 1)}).encode()),
              (KEYS.partition("a", 0), PartitionState(1, 0, (1, 2)).encode()),
              (KEYS.partition("a", 1), PartitionState(2, 0, (2, 1)).encode())])
    view = ViewState(KEYS)
    etcd.load_into(view)
    assert set(view.partitions) == {("a", 0), ("a", 1)}
    created_at = etcd.revision

    # The topic key alone is deleted: its partitions leave the view, as a full read has it,
    # though their keys are still in etcd.
    etcd.txn([(KEYS.topic("a"), None)])
    assert view.apply(etcd.events[-1:]) == ({"a"}, {("a", 0), ("a", 1)})
    assert view.topics == {} and view.partitions == {}
    view.check()

    # An event the view holds already (the put of partition 0 at the creation) is ignored.
    stale = WatchEvent(False, KEYS.topic("a"), TopicAssignment({0: (1,)}).encode(), created_at)
    assert view.apply([stale]) == (set(), set())
    assert view.topics == {}

    # The topic comes back with one partition: partition 0's stored state is in the view
    # again, partition 1's (the assignment has no partition 1) is not.
    etcd.txn([(KEYS.topic("a"), TopicAssignment({0: (1, 2)}).encode())])
    topics, partitions = view.apply(etcd.events[-1:])
    assert topics == {"a"} and partitions == {("a", 0)}
    assert set(view.partitions) == {("a", 0)}
    view.check()


def test_a_change_replaces_the_dictionaries_it_changes() -> None:
    etcd = Etcd()
    etcd.txn([(KEYS.topic("a"), TopicAssignment({0: (1,)}).encode()),
              (KEYS.partition("a", 0), PartitionState(1, 0, (1,)).encode())])
    view = ViewState(KEYS)
    etcd.load_into(view)
    topics, partitions = view.topics, view.partitions
    etcd.txn([(KEYS.partition("a", 0), PartitionState(1, 1, (1,)).encode())])
    view.apply(etcd.events[-1:])
    # A reader holding the old dictionaries keeps the old, consistent view.
    assert partitions[("a", 0)].state.leader_epoch == 0
    assert view.partitions[("a", 0)].state.leader_epoch == 1
    assert view.topics is topics  # no topic changed: not copied


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(transactions(), max_size=8),
    after=st.lists(st.one_of(transactions(), st.sampled_from(TOPICS).map(drop_topic)),
                   max_size=12),
    steps=st.lists(st.integers(0, 12), min_size=1, max_size=5),
)
def test_a_catch_up_equals_a_full_read_or_declines_after_a_delete(
        before: list, after: list, steps: list[int]) -> None:
    etcd = Etcd()
    for ops in before:
        etcd.txn(ops)
    view = ViewState(KEYS)
    etcd.load_into(view)
    revisions = [etcd.revision]
    for ops in after:
        etcd.txn(ops)
        revisions.append(etcd.revision)
    # Catch up to later and later revisions (refresh after refresh), each read at that
    # revision: the keys modified since the view's revision and the range's key count.
    for step in sorted(steps):
        target = revisions[min(step, len(revisions) - 1)]
        if target < view.revision:
            continue
        held = {kv.key for kv in etcd.watched(view.revision)}
        deleted = held - {kv.key for kv in etcd.watched(target)}
        first = (dict(view.topics), dict(view.partitions), view.revision)
        changed = view.catch_up(target, etcd.watched(target, since=view.revision),
                                len(etcd.watched(target)))
        view.check()
        if deleted:
            assert changed is None
            assert (view.topics, view.partitions, view.revision) == first  # nothing changed
            etcd.load_into(view, target)  # what the caller does instead: a full read
        else:
            assert changed is not None
        full = ViewState(KEYS)
        etcd.load_into(full, target)
        assert (view.topics, view.partitions, view.revision) == (
            full.topics, full.partitions, target)
