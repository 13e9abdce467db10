"""The decoded topics and partition states of one etcd revision, as the cluster view holds them.

A :class:`ViewState` is the sans-IO half of the cluster view (cluster_view.py does the reading
and watching): etcd's keys of the watched range (``<prefix>/partitions/`` to the end of
``<prefix>/topics/``; partition_state.py says what is stored there) go in, decoded
dictionaries come out, with what changed. Three ways in, one result:

- :meth:`ViewState.load`: every key of the range at a revision R (a full read);
- :meth:`ViewState.apply`: watch events in etcd's order (a put or a delete of a key at a mod
  revision); an event at or below the revision the state holds is ignored;
- :meth:`ViewState.catch_up`: the keys modified since the state's revision, and the range's key
  count at R, which tells whether a key was deleted meanwhile (then it declines: the caller
  loads instead).

The state is a pure function of the keys etcd holds, whichever way they came: events from R to
R' give what a full read at R' gives (tests/unit/server/cluster/test_view_state.py checks it
with random puts and deletes, after every step). A partition is in the view when its key
decodes and its topic's assignment has it, so a topic deleted takes its partitions with it, as
a full read has it; values that do not decode, partition keys not written as the cluster
writes them (``.../t/01``) and topic keys that are not UTF-8 are absent, both ways (two keys
must never name one topic or partition, or the state would depend on their order).

Concurrency: not thread-safe; the cluster view calls it from the event loop, one change at a
time. Each change replaces whole the dictionaries it changes (copy on write), so a reader
holding the old ones sees one revision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from .layout import ClusterKeys
from .partition_state import PartitionState, TopicAssignment
from .watches import WatchEvent

__all__ = ["PartitionKey", "VersionedState", "ViewState"]

PartitionKey = tuple[str, int]


class VersionedState(NamedTuple):
    """A partition's state and the etcd mod revision it was read at."""

    state: PartitionState
    mod_revision: int


class ViewState:
    """The topics and partition states of one etcd revision, loaded whole or changed by events.

    Holds what etcd holds under the two prefixes, decoded: :attr:`topics` (every topic key whose
    value decodes), the partition keys whose value decodes by topic (``_stored``, whether or not
    their topic is there), and :attr:`partitions`, the view's: the stored states of the
    partitions their topic's assignment has. :attr:`revision` is the etcd revision the state is
    complete at (0: never loaded).

    Invariant (:meth:`check`): :attr:`partitions` is exactly the stored states of the partitions
    of :attr:`topics`' assignments, so it does not depend on the order the keys arrived in.

    Costs: :meth:`load` is linear in the keys; :meth:`apply` and :meth:`catch_up` are linear in
    the events (the keys), plus the partitions of each topic whose key an event changed, plus
    one copy of :attr:`partitions` (a C-speed dict copy, for copy on write) when a partition
    changed. Memory: the decoded states and every key of the range once.

    Sans-IO and not thread-safe: the cluster view (cluster_view.py) calls it from the event
    loop, one change at a time.
    """

    def __init__(self, keys: ClusterKeys) -> None:
        self._keys = keys
        self._topics_head = len(keys.topics_prefix)
        #: Every key etcd holds in the watched range, decoded or not, and its mod revision
        #: (:meth:`catch_up` counts them; :meth:`load` compares them).
        self._held_keys: dict[bytes, int] = {}
        #: Topic name -> its assignment.
        self.topics: dict[str, TopicAssignment] = {}
        #: (topic, partition) -> its state and mod revision, for the partitions of ``topics``.
        self.partitions: dict[PartitionKey, VersionedState] = {}
        #: Topic name -> partition number -> its stored state (topic there or not).
        self._stored: dict[str, dict[int, VersionedState]] = {}
        #: The etcd revision this state is complete at.
        self.revision = 0

    def load(self, revision: int, kvs: Sequence[Any]) -> tuple[set[str], set[PartitionKey]]:
        """Replace the state with etcd's keys of the watched range at ``revision`` (objects
        with ``key``, ``value`` and ``mod_revision``, as etcd's ``KeyValue``); returns what
        changed (module docstring).

        When ``kvs`` are exactly the keys held, each at the mod revision held (the fallback
        poll's usual case: the watch brought every change), only the revision moves: a value
        is the same at the same mod revision, so nothing is decoded again (a tenth of the
        decoding's cost).
        """
        held = self._held_keys
        if self.revision and len(kvs) == len(held) and all(
                held.get(kv.key) == kv.mod_revision for kv in kvs):
            self.revision = revision
            return set(), set()
        topics: dict[str, TopicAssignment] = {}
        stored: dict[str, dict[int, VersionedState]] = {}
        held_keys: dict[bytes, int] = {}
        for kv in kvs:
            held_keys[kv.key] = kv.mod_revision
            key = self.partition_key(kv.key)
            if key is not None:
                state = PartitionState.decode(kv.value)
                if state is not None:
                    stored.setdefault(key[0], {})[key[1]] = VersionedState(state, kv.mod_revision)
                continue
            name = self.topic_name(kv.key)
            assignment = TopicAssignment.decode(kv.value) if name is not None else None
            if name is not None and assignment is not None:
                topics[name] = assignment
        partitions: dict[PartitionKey, VersionedState] = {}
        for name, assignment in topics.items():
            for number, versioned in stored.get(name, {}).items():
                if number in assignment.replicas:
                    partitions[(name, number)] = versioned
        changed_topics = {
            name for name in topics.keys() | self.topics.keys()
            if topics.get(name) != self.topics.get(name)
        }
        changed_partitions = {
            key for key in partitions.keys() | self.partitions.keys()
            if partitions.get(key) != self.partitions.get(key)
        }
        self.topics, self.partitions, self._stored = topics, partitions, stored
        self._held_keys = held_keys
        self.revision = revision
        return changed_topics, changed_partitions

    def catch_up(self, revision: int, changed_kvs: Sequence[Any], held_count: int
                 ) -> tuple[set[str], set[PartitionKey]] | None:
        """Bring the state to ``revision`` from a read at it of the keys modified since
        :attr:`revision` (``changed_kvs``, as :meth:`load`'s) and of the number of keys the
        watched range holds (``held_count``). Returns what changed; None, with nothing changed,
        when a key the state holds was deleted meanwhile (a read of changes cannot show
        deletes: the caller reads everything instead).

        Why the count finds every delete: the keys created since are among ``changed_kvs``, so
        etcd holds the state's keys plus those, minus the ones deleted since; the state's keys
        plus the created ones number ``held_count`` exactly when none was deleted (a key
        deleted and created again is modified since, and held both ways).
        """
        created = {kv.key for kv in changed_kvs} - self._held_keys.keys()
        if len(self._held_keys) + len(created) != held_count:
            return None
        ordered = sorted(changed_kvs, key=lambda kv: kv.mod_revision)  # revision order
        changed = self.apply([WatchEvent(False, kv.key, kv.value, kv.mod_revision)
                              for kv in ordered])
        self.revision = max(self.revision, revision)
        return changed

    def apply(self, events: Sequence[WatchEvent]) -> tuple[set[str], set[PartitionKey]]:
        """Apply watch events in etcd's order; an event at or below :attr:`revision` is held
        already and ignored, as is a key outside the two prefixes. Returns what changed."""
        topics: dict[str, TopicAssignment] | None = None  # copied on the first topic change
        touched: dict[PartitionKey, VersionedState | None] = {}  # key -> its view entry before
        touched_topics: set[str] = set()
        held = self.revision
        for event in events:
            if event.mod_revision <= held:
                continue
            self.revision = max(self.revision, event.mod_revision)
            if event.deleted:
                self._held_keys.pop(event.key, None)
            else:
                self._held_keys[event.key] = event.mod_revision
            key = self.partition_key(event.key)
            if key is not None:
                self._apply_partition(key, event, touched)
                continue
            name = self.topic_name(event.key)
            if name is None:
                continue  # between the two prefixes, but neither's: not the view's
            assignment = None if event.deleted else TopicAssignment.decode(event.value)
            if topics is None:
                topics = dict(self.topics)
            if assignment is None:
                topics.pop(name, None)
            else:
                topics[name] = assignment
            touched_topics.add(name)
            for number in self._stored.get(name, {}):
                touched.setdefault((name, number), self.partitions.get((name, number)))
        changed_topics: set[str] = set()
        if topics is not None:
            changed_topics = {n for n in touched_topics if topics.get(n) != self.topics.get(n)}
            self.topics = topics
        changed_partitions: set[PartitionKey] = set()
        if touched:
            partitions = dict(self.partitions)
            for key in touched:
                entry = self._view_entry(key)
                if entry is None:
                    partitions.pop(key, None)
                else:
                    partitions[key] = entry
                if entry != touched[key]:
                    changed_partitions.add(key)
            self.partitions = partitions
        return changed_topics, changed_partitions

    def partition_key(self, key: bytes) -> PartitionKey | None:
        """(topic, partition) of a partition state key as the cluster writes them; None for
        any other key (one written by hand as ``.../t/01`` too: two keys must not name one
        partition, or the view would depend on their order)."""
        parsed = self._keys.parse_partition_key(key)
        if parsed is None or self._keys.partition(*parsed) != key:
            return None
        return parsed

    def topic_name(self, key: bytes) -> str | None:
        """The topic of a topic key; None for any other key (one that is not UTF-8 too: two
        keys must not name one topic)."""
        if not key.startswith(self._keys.topics_prefix) or len(key) == self._topics_head:
            return None
        try:
            return key[self._topics_head:].decode()
        except UnicodeDecodeError:
            return None

    def check(self) -> None:
        """Assert the invariant (class docstring); tests call it after every change."""
        expected = {
            (name, number): versioned
            for name, assignment in self.topics.items()
            for number, versioned in self._stored.get(name, {}).items()
            if number in assignment.replicas
        }
        assert self.partitions == expected, "the view's partitions are not its topics' stored states"
        assert all(numbers for numbers in self._stored.values()), "an empty topic entry is kept"
        assert set(self.topics) <= {self.topic_name(k) for k in self._held_keys}, \
            "a topic whose key is not held"
        assert {k for k in self._held_keys if self.partition_key(k)} >= {
            self._keys.partition(*key) for key in self.partitions}, "a partition not held"

    def _apply_partition(self, key: PartitionKey, event: WatchEvent,
                         touched: dict[PartitionKey, VersionedState | None]) -> None:
        touched.setdefault(key, self.partitions.get(key))
        state = None if event.deleted else PartitionState.decode(event.value)
        numbers = self._stored.get(key[0])
        if state is not None:
            if numbers is None:
                numbers = self._stored[key[0]] = {}
            numbers[key[1]] = VersionedState(state, event.mod_revision)
        elif numbers is not None:
            numbers.pop(key[1], None)
            if not numbers:
                del self._stored[key[0]]

    def _view_entry(self, key: PartitionKey) -> VersionedState | None:
        """What the view holds for ``key``: its stored state if its topic's assignment has it."""
        assignment = self.topics.get(key[0])
        if assignment is None or key[1] not in assignment.replicas:
            return None
        return self._stored.get(key[0], {}).get(key[1])
