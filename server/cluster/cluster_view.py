"""This server's view of the replicated topics and partitions in etcd, followed by watches.

As soon as an etcd watch on either prefix sees a change (:meth:`ClusterView.wake`; node.py
wires the watches, watches.py), and every ``poll_interval_s`` (``cluster_poll_fallback_ms``,
5 s by default) in case a watch is broken, two range reads fetch
``<prefix>/topics/`` and ``<prefix>/partitions/`` (partition_state.py says what is stored
there) into :attr:`ClusterView.topics` and :attr:`ClusterView.partitions`; each partition state
is kept with its etcd mod revision, which a writer's transaction compares. After a refresh
that changed anything, the listeners are called with the names of the topics and the
partitions whose records changed (appeared, changed or disappeared), in the order added.

While etcd is down the last view stays (the data path goes on with the leaders it knows) and
no listener is called. So it does when etcd no longer holds this cluster: once the cluster's id
is known (:meth:`ClusterView.expect_cluster_id`, at start), each refresh reads
``<prefix>/cluster_id`` after the two prefixes, and a key that is gone or holds another id (etcd
was wiped or restored from another cluster's backup, or the prefix was deleted) leaves the view
as it was, logged as an ERROR: an empty view would otherwise read as every topic deleted, and
every server would delete its logs (replica_roles.py). A component that wrote to etcd calls :meth:`refresh` itself to see its
write at once instead of a poll later.

Concurrency: event-loop only. A refresh replaces the dictionaries whole, so a reader holding
the old ones sees one consistent view; listeners run one after the other, each awaited, and
an exception in one is logged and does not stop the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .layout import ClusterKeys
from .partition_state import PartitionState, TopicAssignment
from .polling import Poller

if TYPE_CHECKING:
    from .session import EtcdSession

__all__ = ["ClusterView", "PartitionKey", "VersionedState", "ViewListener"]

logger = logging.getLogger(__name__)

PartitionKey = tuple[str, int]


class VersionedState(NamedTuple):
    """A partition's state and the etcd mod revision it was read at."""

    state: PartitionState
    mod_revision: int


#: ``listener(changed_topics, changed_partitions)``.
ViewListener = Callable[[set[str], set[PartitionKey]], Awaitable[None]]


class ClusterView:
    """The replicated topics and partition states as last read from etcd."""

    def __init__(self, session: EtcdSession, keys: ClusterKeys, poll_interval_s: float) -> None:
        self._session = session
        self._keys = keys
        #: Topic name -> its assignment.
        self.topics: dict[str, TopicAssignment] = {}
        #: (topic, partition) -> its state and mod revision. A partition of a topic whose
        #: assignment is not (or no longer) in :attr:`topics` is left out.
        self.partitions: dict[PartitionKey, VersionedState] = {}
        self._listeners: list[ViewListener] = []
        self._poller = Poller(self.refresh, poll_interval_s, "stratalog-cluster-view",
                              "cluster view not refreshed")
        self._refreshing = asyncio.Lock()
        self._cluster_id: bytes | None = None
        self._cluster_lost_logged = False

    def add_listener(self, listener: ViewListener) -> None:
        """Call ``listener`` after every refresh that changed something."""
        self._listeners.append(listener)

    def expect_cluster_id(self, cluster_id: str) -> None:
        """Apply a refresh only while etcd holds ``cluster_id`` (module docstring)."""
        self._cluster_id = cluster_id.encode()

    def state(self, topic: str, partition: int) -> VersionedState | None:
        return self.partitions.get((topic, partition))

    async def refresh(self) -> None:
        """Read both prefixes, replace the view, call the listeners if it changed.

        Raises what the etcd client raises when etcd does not answer (the view is unchanged).
        """
        async with self._refreshing:
            client = self._session.client
            topic_kvs = await client.get_prefix(self._keys.topics_prefix)
            partition_kvs = await client.get_prefix(self._keys.partitions_prefix)
            head = len(self._keys.topics_prefix)
            topics: dict[str, TopicAssignment] = {}
            for kv in topic_kvs:
                assignment = TopicAssignment.decode(kv.value)
                if assignment is not None:
                    topics[kv.key[head:].decode(errors="replace")] = assignment
            partitions: dict[PartitionKey, VersionedState] = {}
            for kv in partition_kvs:
                key = self._keys.parse_partition_key(kv.key)
                state = PartitionState.decode(kv.value)
                if key is None or state is None:
                    continue
                assignment = topics.get(key[0])
                if assignment is None or key[1] not in assignment.replicas:
                    continue
                partitions[key] = VersionedState(state, kv.mod_revision)
            if self._cluster_id is not None and not await self._holds_cluster(client):
                return
            changed_topics = {
                name for name in topics.keys() | self.topics.keys()
                if topics.get(name) != self.topics.get(name)
            }
            changed_partitions = {
                key for key in partitions.keys() | self.partitions.keys()
                if partitions.get(key) != self.partitions.get(key)
            }
            self.topics, self.partitions = topics, partitions
            if changed_topics or changed_partitions:
                for listener in self._listeners:
                    try:
                        await listener(changed_topics, changed_partitions)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        logger.exception("a cluster view listener failed")

    async def _holds_cluster(self, client: Any) -> bool:
        """Whether etcd still holds this cluster's id (read after the prefixes: a wipe that
        emptied them has removed it too); logs the first refusal and the recovery."""
        stored = await client.get(self._keys.cluster_id)
        value = stored.value if stored is not None else None
        if value == self._cluster_id:
            if self._cluster_lost_logged:
                logger.warning("etcd holds this cluster's id again: the cluster view is"
                               " applied again")
                self._cluster_lost_logged = False
            return True
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
        """Refresh now, every ``poll_interval_s`` and at each :meth:`wake`."""
        self._poller.start()

    def wake(self) -> None:
        """Refresh now (a topic or partition key changed: a watch saw it). Wakes during a
        refresh make one more refresh after it, however many they are (polling.py)."""
        self._poller.wake()

    async def close(self) -> None:
        await self._poller.stop()
