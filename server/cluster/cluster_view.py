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

The state (view_state.py: decoding and applying, no I/O) is a pure function of the keys etcd
holds, whichever way they came: applying the events from R to R' gives the view a full read at
R' gives. Values that do not decode (a key someone else wrote) are treated as absent, both
ways.

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
from typing import TYPE_CHECKING, Any

from aetcd import exceptions as aetcd_exceptions
from aetcd import rpc, utils

from .layout import ClusterKeys
from .partition_state import TopicAssignment
from .polling import Poller
from .view_state import PartitionKey, VersionedState, ViewState
from .watches import KeyWatch, WatchEvent

if TYPE_CHECKING:
    from .session import EtcdSession

__all__ = ["ClusterView", "PartitionKey", "VersionedState", "ViewListener", "ViewState"]

logger = logging.getLogger(__name__)

#: ``listener(changed_topics, changed_partitions)``.
ViewListener = Callable[[set[str], set[PartitionKey]], Awaitable[None]]


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
        many keys the range holds, the cluster id's value or None), all at R: three ranges,
        the later two pinned to the first's revision (etcd's MVCC answers them as of R).
        Not one read-only transaction: etcd 3.5.0-3.5.4 panics when such a transaction's call
        is cancelled (etcd-io/etcd#14110), which a server's stop or a timeout does; a range
        cancelled is only a range not answered. aetcd's range calls drop the header when
        nothing matched, so the stub is called as aetcd's own calls do."""
        client = self._session.client
        await client.connect()
        start = self._keys.partitions_prefix
        end = utils.prefix_range_end(self._keys.topics_prefix)

        async def ranged(request: Any) -> Any:
            try:
                return await client.kvstub.Range(request, timeout=client._timeout,
                                                 metadata=client.metadata)
            except rpc.AioRpcError as exc:
                aetcd_exceptions._handle_exception(exc)  # aetcd's error classes, as its calls
                raise  # not reached: the handler raises

        kvs_range = await ranged(rpc.RangeRequest(
            key=start, range_end=end, min_mod_revision=since + 1 if since else 0))
        revision = kvs_range.header.revision
        count_range = await ranged(rpc.RangeRequest(key=start, range_end=end, count_only=True,
                                                    revision=revision))
        id_range = await ranged(rpc.RangeRequest(key=self._keys.cluster_id, revision=revision))
        stored_id = id_range.kvs[0].value if id_range.kvs else None
        return revision, kvs_range.kvs, count_range.count, stored_id

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
