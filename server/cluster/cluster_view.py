"""This server's view of the replicated topics and partitions in etcd, kept by etcd's watch events.

The view holds ``<prefix>/topics/`` and ``<prefix>/partitions/`` (partition_state.py says what
is stored there) as :attr:`ClusterView.topics` and :attr:`ClusterView.partitions`, each
partition state with its etcd mod revision (which a writer's transaction compares), and the
etcd revision R it is complete at. It follows etcd as Kubernetes' informers do (list, then
watch from the list's revision):

- **A full read** (one etcd transaction: the range of both prefixes, its key count and
  ``<prefix>/cluster_id``, so all at one revision R) replaces the state whole. It is made at
  start, before each creation of the watch after the first (a stream that broke, or a resume
  revision etcd compacted: the events in between may be gone), every ``poll_interval_s``
  (``cluster_poll_fallback_ms``, 5 s by default) as the fallback for a watch broken in a way
  etcd does not report, and when the view is told another cluster id
  (:meth:`ClusterView.expect_cluster_id`). A fallback read that finds etcd at a revision the
  state already holds changes nothing, and one that finds every key at the mod revision the
  state holds it at decodes nothing (:meth:`ViewState.load`).
- **A refresh** (:meth:`ClusterView.refresh`: a component that wrote to etcd and wants to see
  its write at once, without waiting for the watch) reads, in the same kind of transaction,
  only the keys modified since the state's revision, and the key count: the count tells
  whether a key was deleted meanwhile, which a read of changes cannot show, and then it is a
  full read instead.
- **Watch events** (one etcd watch over both prefixes: :meth:`ClusterView.watch`; watches.py)
  are applied as the changes they carry, in etcd's order: a put of a topic key sets its
  assignment, a delete removes it and, with it, its partitions (as a full read would: a
  partition whose topic is not there, or whose number the assignment does not have, is not
  in the view); a put of a partition key sets its state, a delete removes it. An event at or
  below R (the state holds it already: a full read that raced the stream) is ignored. The cost
  of an event is that of its keys, not of the partition count (but for one C-speed copy of the
  partitions dictionary: below).

The state is a pure function of the keys etcd holds, whichever way they came: applying the
events from R to R' gives the view a full read at R' gives (:class:`ViewState`, tested with
random puts and deletes against a full read of the same final keys). Values that do not decode
(a key someone else wrote) are treated as absent, both ways.

After a change, the listeners are called with the names of the topics and the partitions whose
records changed (appeared, changed or disappeared), in the order added: once per full read
that changed anything, once per watch response (one or more etcd revisions).

While etcd is down the last view stays (the data path goes on with the leaders it knows) and
no listener is called. So it does when etcd no longer holds this cluster: once the cluster's id
is known (:meth:`ClusterView.expect_cluster_id`, at start), a full read applies only if its
``<prefix>/cluster_id`` (read at the same revision) is that id, and events that delete keys are
applied only after a read of ``<prefix>/cluster_id`` finds the id still there. A key that is
gone or holds another id (etcd was wiped or restored from another cluster's backup, or the
prefix was deleted) leaves the view as it was, logged as an ERROR, and no event is applied
until a full read finds the id again: an empty view would otherwise read as every topic
deleted, and every server would delete its logs (replica_roles.py).

Concurrency: event-loop only. A full read and a watch response are applied one at a time (a
lock), each replacing whole the dictionaries it changes (copy on write), so a reader holding
the old ones sees one consistent view; listeners run one after the other, each awaited, and an
exception in one is logged and does not stop the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from aetcd import exceptions as aetcd_exceptions
from aetcd import rpc, utils

from .layout import ClusterKeys
from .partition_state import PartitionState, TopicAssignment
from .polling import Poller
from .watches import KeyWatch, WatchEvent

if TYPE_CHECKING:
    from .session import EtcdSession

__all__ = ["ClusterView", "PartitionKey", "VersionedState", "ViewListener", "ViewState"]

logger = logging.getLogger(__name__)

PartitionKey = tuple[str, int]


class VersionedState(NamedTuple):
    """A partition's state and the etcd mod revision it was read at."""

    state: PartitionState
    mod_revision: int


#: ``listener(changed_topics, changed_partitions)``.
ViewListener = Callable[[set[str], set[PartitionKey]], Awaitable[None]]


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

    Sans-IO and not thread-safe: :class:`ClusterView` calls it from the event loop, one change
    at a time.
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


class ClusterView:
    """The replicated topics and partition states as etcd holds them (module docstring)."""

    def __init__(self, session: EtcdSession, keys: ClusterKeys, poll_interval_s: float) -> None:
        self._session = session
        self._keys = keys
        self._state = ViewState(keys)
        self._listeners: list[ViewListener] = []
        self._poller = Poller(self.full_read, poll_interval_s, "stratalog-cluster-view",
                              "cluster view not refreshed")
        self._applying = asyncio.Lock()
        self._cluster_id: bytes | None = None
        self._cluster_lost_logged = False
        #: etcd may no longer hold this cluster (a delete event found its id gone, or the view
        #: was told another id): no event is applied until a full read replaces the state.
        self._suspect = False
        #: The watch was created once: a later creation follows a break, so reads first.
        self._watched_once = False
        #: Full reads made (tests and the benchmark count them).
        self.full_read_count = 0
        #: Refreshes made by a read of the changes alone (:meth:`refresh`).
        self.catch_up_count = 0
        #: Watch responses applied (each one etcd response: one or more revisions).
        self.event_batch_count = 0

    @property
    def topics(self) -> dict[str, TopicAssignment]:
        """Topic name -> its assignment (replaced whole at each change: do not mutate)."""
        return self._state.topics

    @property
    def partitions(self) -> dict[PartitionKey, VersionedState]:
        """(topic, partition) -> its state and mod revision, for the partitions of
        :attr:`topics`' assignments (replaced whole at each change: do not mutate)."""
        return self._state.partitions

    @property
    def revision(self) -> int:
        """The etcd revision the view is complete at (0 before the first read)."""
        return self._state.revision

    def add_listener(self, listener: ViewListener) -> None:
        """Call ``listener`` after every change of the view (module docstring)."""
        self._listeners.append(listener)

    def expect_cluster_id(self, cluster_id: str) -> None:
        """Apply etcd's keys only while etcd holds ``cluster_id`` (module docstring); another id
        than the one expected so far makes the next step a full read."""
        expected = cluster_id.encode()
        if self._cluster_id is not None and expected != self._cluster_id:
            self._suspect = True
            self._poller.wake()
        self._cluster_id = expected

    def state(self, topic: str, partition: int) -> VersionedState | None:
        return self._state.partitions.get((topic, partition))

    async def refresh(self) -> None:
        """The view as etcd holds it now, the listeners called if it changed: what a component
        that wrote to etcd calls to see its write at once.

        One read, at one revision R, of the keys modified since the view's revision, of how
        many keys the two prefixes hold, and of the cluster id: the modified keys are applied
        (:meth:`ViewState.catch_up`), so a write costs its own keys, not the partition count
        (etcd still scans the range; it sends only what changed). A key deleted since, a
        revision behind the view's (etcd's history replaced), or a view never read or suspect
        makes it a full read.

        Raises what the etcd client raises when etcd does not answer (the view is unchanged).
        """
        async with self._applying:
            since = self._state.revision
            if since and not self._suspect:
                revision, changed_kvs, held_count, stored_id = await self._read(since=since)
                if self._cluster_id is not None and not self._holds_cluster(stored_id):
                    return
                if revision >= since:
                    changed = self._state.catch_up(revision, changed_kvs, held_count)
                    if changed is not None:
                        self.catch_up_count += 1
                        await self._notify(*changed)
                        return
            await self._full_read_locked(force=True)

    def watch(self, on_change: Sequence[Callable[[], None]] = ()) -> KeyWatch:
        """The etcd watch that keeps the view (not started: the caller starts and stops it
        with the others). One stream over both prefixes, so that their events come in etcd's
        order: the keys from ``<prefix>/partitions/`` to the end of ``<prefix>/topics/`` (no
        other key of the cluster sorts between them: layout.py; one that did is ignored).
        ``on_change`` is called after each response was applied and at each creation."""
        return KeyWatch(self._session, self._keys.partitions_prefix, on_change,
                        "stratalog-watch-view",
                        range_end=utils.prefix_range_end(self._keys.topics_prefix),
                        on_events=self._apply_events, resync=self._resync)

    async def full_read(self, *, force: bool = False) -> int:
        """The fallback poll's step (module docstring): read both prefixes and the cluster id
        at one revision; replace the state when that revision is newer than the state's, or
        ``force`` (the watch is being created again: etcd's history may have been replaced, so
        a revision behind is not stale), or the view is suspect. Returns the state's revision
        afterwards. Raises what the etcd client raises (the view is unchanged)."""
        async with self._applying:
            return await self._full_read_locked(force=force)

    async def _full_read_locked(self, *, force: bool) -> int:
        revision, kvs, _, stored_id = await self._read(since=0)
        self.full_read_count += 1
        if self._cluster_id is not None and not self._holds_cluster(stored_id):
            return self._state.revision
        if not (force or self._suspect) and revision <= self._state.revision:
            return self._state.revision  # the watch brought the state this far already
        self._suspect = False
        changed = self._state.load(revision, kvs)
        await self._notify(*changed)
        return self._state.revision

    async def _resync(self) -> int:
        """Before each creation of the watch: the revision the state is complete at. The first
        creation follows the read made at start (events since are replayed from there); any
        later one follows a break, after which only a full read is sure."""
        if not self._watched_once and self._state.revision:
            self._watched_once = True
            return self._state.revision
        self._watched_once = True
        return await self.full_read(force=True)

    async def _apply_events(self, events: list[WatchEvent]) -> None:
        """One watch response, in etcd's order (module docstring)."""
        async with self._applying:
            if events[-1].mod_revision <= self._state.revision:
                return  # a full read that raced the stream holds these already
            if self._suspect:
                return  # a full read must come first (the poll or the next creation does it)
            if self._cluster_id is not None and any(event.deleted for event in events):
                # A wipe shows as deletes: apply them only while etcd still holds the cluster.
                stored = await self._session.client.get(self._keys.cluster_id)
                if not self._holds_cluster(stored.value if stored is not None else None):
                    return
            changed = self._state.apply(events)
            self.event_batch_count += 1
            await self._notify(*changed)

    async def _notify(self, changed_topics: set[str],
                      changed_partitions: set[PartitionKey]) -> None:
        if not (changed_topics or changed_partitions):
            return
        for listener in self._listeners:
            try:
                await listener(changed_topics, changed_partitions)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("a cluster view listener failed")

    async def _read(self, *, since: int) -> tuple[int, Sequence[Any], int, bytes | None]:
        """(revision R, the watched range's keys modified after ``since`` (0: every key), how
        many keys the range holds, the cluster id's value or None), all at R: one transaction
        (aetcd's ``transaction`` keeps no header when nothing matched, so the stub is called
        as aetcd's own calls do)."""
        client = self._session.client
        await client.connect()
        start = self._keys.partitions_prefix
        end = utils.prefix_range_end(self._keys.topics_prefix)
        request = rpc.TxnRequest(success=[
            rpc.RequestOp(request_range=rpc.RangeRequest(
                key=start, range_end=end, min_mod_revision=since + 1 if since else 0)),
            rpc.RequestOp(request_range=rpc.RangeRequest(key=start, range_end=end,
                                                         count_only=True)),
            rpc.RequestOp(request_range=rpc.RangeRequest(key=self._keys.cluster_id)),
        ])
        try:
            response = await client.kvstub.Txn(request, timeout=client._timeout,
                                               metadata=client.metadata)
        except rpc.AioRpcError as exc:
            aetcd_exceptions._handle_exception(exc)  # aetcd's error classes, as its calls
            raise  # not reached: the handler raises
        kvs_range, count_range, id_range = (r.response_range for r in response.responses)
        stored_id = id_range.kvs[0].value if id_range.kvs else None
        return response.header.revision, kvs_range.kvs, count_range.count, stored_id

    def _holds_cluster(self, value: bytes | None) -> bool:
        """Whether ``value`` (``<prefix>/cluster_id``'s, None when gone) is this cluster's id;
        logs the first refusal and the recovery. A refusal makes the view suspect: no event
        is applied until a full read finds the id again."""
        assert self._cluster_id is not None
        if value == self._cluster_id:
            if self._cluster_lost_logged:
                logger.warning("etcd holds this cluster's id again: the cluster view is"
                               " applied again")
                self._cluster_lost_logged = False
            return True
        self._suspect = True
        if not self._cluster_lost_logged:
            found = "is gone" if value is None else f"holds {value.decode(errors='replace')!r}"
            logger.error(
                "etcd no longer holds this cluster: %s %s (this server joined cluster %s):"
                " etcd was wiped, restored from another cluster, or the prefix deleted;"
                " the cluster view is kept as it was and nothing is deleted; restore etcd or"
                " restart the servers against the right one",
                self._keys.cluster_id.decode(), found, self._cluster_id.decode())
            self._cluster_lost_logged = True
        return False

    def start(self) -> None:
        """Read now, then every ``poll_interval_s`` and at each :meth:`wake` (the fallback:
        the watch, started by its owner, carries the changes in between)."""
        self._poller.start()

    def wake(self) -> None:
        """A full read now. Wakes during a read make one more read after it, however many
        they are (polling.py)."""
        self._poller.wake()

    async def close(self) -> None:
        await self._poller.stop()
