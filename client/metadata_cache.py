"""The client's view of the cluster: who leads each partition, and where each broker is.

Intuition (Kafka's client ``Metadata``): a request about a partition must reach the partition's
leader. The cache holds the last Metadata answers: the live brokers and the address each
advertises, and per partition its leader and leader epoch. The Client asks it where to send a
request; when a server says it does not lead the partition, the Client gives the cache the
server's hint (NOT_LEADER_OR_FOLLOWER's ``leader_id``/``leader_address``, Kafka's KIP-951) or
marks the topic stale, and the next request about it refreshes it first.

Rules the cache keeps:

* **A node reachable at the address that answered as it.** A Metadata answer names the node
  that sent it (``node_id``); the address the client reached it at is kept for that node and
  used rather than the one it advertises (:meth:`MetadataCache.address_of`). A server behind a
  port mapping or a proxy advertises an address the client may not reach: the one it was
  reached at works, and a single server is never dialled at a second address.
* **Leader epochs never go back.** An answer whose leader epoch for a partition is below the
  cached one comes from a server whose view lags (Kafka's ``Metadata.updateLatestMetadata``):
  the cached leader stays. A hint is taken the same way.
* **A broker that did not answer is asked last.** An address whose connection failed or whose
  call went unanswered (refused, reset, timed out, stopping) is *unreachable* until a connection
  to it succeeds: :meth:`MetadataCache.candidates` puts it after every other, so that a metadata
  refresh or an admin request after a server died asks a live one first instead of waiting on
  the dead one again (Kafka's ``NetworkClient.leastLoadedNode`` skips nodes in reconnect
  backoff the same way). It is still asked when no other answers.
* **Age.** An entry older than ``max_age_s`` (Kafka's ``metadata.max.age.ms``, 300000) is
  refreshed at its next use, so that leaders moved without the client noticing (a preferred
  leader coming back) are learnt.

Pure state, no I/O: the Client does the RPCs. Not thread-safe: the async Client uses it from
its event loop only, the SyncClient under its lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from .types import ClusterMetadata

__all__ = ["METADATA_MAX_AGE_MS", "NO_LEADER", "UNREACHABLE_MAX", "MetadataCache", "Route"]

#: Kafka's ``metadata.max.age.ms`` default: a topic's entry is refreshed at its first use after
#: this long, even if no request failed.
METADATA_MAX_AGE_MS = 300_000

#: The leader of a partition that has none (an election pending): Metadata's -1.
NO_LEADER = -1

#: Unreachable addresses remembered, at most (a cluster's brokers and bootstrap targets are a
#: few; servers restarted on new ports leave old addresses behind).
UNREACHABLE_MAX = 256


class Route(NamedTuple):
    """Where a partition's requests go: the leader's node id and the address to dial."""

    node_id: int
    address: str


class _Leader(NamedTuple):
    node_id: int
    epoch: int


class MetadataCache:
    """Brokers, partition leaders and the age of each topic's entry.

    Holds ``brokers`` (node id -> advertised address, the last answer's live brokers),
    ``reachable`` (node id -> the address the client reached it at), per topic the time its
    entry was refreshed and per partition its leader and epoch, the stale topics, and the
    addresses that did not answer (asked last).
    Invariants (:meth:`check`): every partition entry's topic has a refresh time; epochs are
    >= 0 and leaders >= -1; at most UNREACHABLE_MAX unreachable addresses. Crash: nothing
    persisted (a new client asks again).
    """

    def __init__(
        self,
        *,
        max_age_ms: int = METADATA_MAX_AGE_MS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_age_s = max_age_ms / 1000.0
        self._clock = clock
        self.brokers: dict[int, str] = {}
        self.reachable: dict[int, str] = {}
        self.controller_id = -1
        self._leaders: dict[tuple[str, int], _Leader] = {}
        self._refreshed_at: dict[str, float] = {}  # topic -> clock() of its last answer
        self._stale: set[str] = set()
        # Addresses that did not answer, in the order they were marked: asked last.
        self._unreachable: dict[str, None] = {}
        #: Metadata answers taken (0: the cache was never filled).
        self.updates = 0

    # --- reading ---------------------------------------------------------------------------------

    @property
    def is_cluster(self) -> bool:
        """Whether the last answer named more than one broker."""
        return len(self.brokers) > 1

    def address_of(self, node_id: int) -> str | None:
        """The address to dial ``node_id`` at: where it answered, else where it advertises."""
        return self.reachable.get(node_id) or self.brokers.get(node_id)

    def node_at(self, address: str) -> int | None:
        """The node id known to answer at ``address``, if any."""
        for node_id, reached in self.reachable.items():
            if reached == address:
                return node_id
        for node_id, advertised in self.brokers.items():
            if advertised == address:
                return node_id
        return None

    def knows(self, topic: str) -> bool:
        """Whether ``topic`` has an entry."""
        return topic in self._refreshed_at

    def needs_refresh(self, topic: str) -> bool:
        """Whether a request about ``topic`` should refresh it first: no entry, stale, or older
        than ``max_age``."""
        refreshed_at = self._refreshed_at.get(topic)
        return (
            refreshed_at is None
            or topic in self._stale
            or self._clock() - refreshed_at >= self._max_age_s
        )

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The partition's leader: a node id, :data:`NO_LEADER`, or None when not known."""
        leader = self._leaders.get((topic, partition))
        return None if leader is None else leader.node_id

    def route(self, topic: str, partition: int) -> Route | None:
        """Where to send a request about the partition, or None when its leader or the
        leader's address is not known (or it has none)."""
        leader = self._leaders.get((topic, partition))
        if leader is None or leader.node_id == NO_LEADER:
            return None
        address = self.address_of(leader.node_id)
        return None if address is None else Route(leader.node_id, address)

    def is_unreachable(self, address: str) -> bool:
        """Whether ``address`` did not answer and has not answered since."""
        return address in self._unreachable

    def candidates(self, bootstrap: Sequence[str], first: str | None = None) -> list[str]:
        """Addresses to ask for metadata or an admin request, each once: ``first`` (the one
        that answered last), the brokers known (the controller first), then the bootstrap
        targets; the unreachable ones after all of those, in the order they were marked."""
        ordered: list[str] = [first] if first else []
        nodes = sorted(self.brokers, key=lambda n: (n != self.controller_id, n))
        ordered.extend(a for a in (self.address_of(n) for n in nodes) if a)
        ordered.extend(bootstrap)
        unique = dict.fromkeys(ordered)
        answering = [a for a in unique if a not in self._unreachable]
        return answering + [a for a in self._unreachable if a in unique]

    # --- writing ---------------------------------------------------------------------------------

    def update(
        self, metadata: ClusterMetadata, answered_by: str, topics: Iterable[str] = ()
    ) -> None:
        """Take a Metadata answer that ``answered_by`` gave to a request for ``topics`` (empty:
        every topic). A topic asked for and not in the answer is forgotten (deleted)."""
        now = self._clock()
        self.updates += 1
        self.brokers = {broker.node_id: broker.address for broker in metadata.brokers}
        self.controller_id = metadata.controller_id
        if metadata.node_id >= 0:
            # Drop an older mapping of this address to another node (the server was replaced).
            for node_id, address in list(self.reachable.items()):
                if address == answered_by and node_id != metadata.node_id:
                    del self.reachable[node_id]
            self.reachable[metadata.node_id] = answered_by
        asked = set(topics)
        gone = (asked or set(self._refreshed_at)) - set(metadata.topics)
        for topic in gone:
            self.forget(topic)
        for topic, partitions in metadata.topics.items():
            known = {p.partition for p in partitions}
            for key in [k for k in self._leaders if k[0] == topic and k[1] not in known]:
                del self._leaders[key]
            for p in partitions:
                self._take((topic, p.partition), _Leader(p.leader, max(p.leader_epoch, 0)))
            self._refreshed_at[topic] = now
            self._stale.discard(topic)

    def _take(self, key: tuple[str, int], leader: _Leader) -> bool:
        """Store ``leader`` unless the cached one has a newer epoch; whether it changed."""
        cached = self._leaders.get(key)
        if cached is not None and cached.epoch > leader.epoch:
            return False
        self._leaders[key] = leader
        return cached != leader

    def apply_hint(
        self,
        topic: str,
        partition: int,
        leader_id: int | None,
        leader_epoch: int | None,
        leader_address: str | None,
    ) -> bool:
        """Take a NOT_LEADER_OR_FOLLOWER hint; True when it gives a route to try now (a leader
        whose address is known, with an epoch not older than the cached one). Without one the
        topic is marked stale: the next request refreshes it."""
        if leader_id is None or leader_id < 0:
            self.invalidate(topic)
            return False
        if leader_address and leader_id not in self.brokers:
            self.brokers[leader_id] = leader_address
        epoch = leader_epoch if leader_epoch is not None and leader_epoch >= 0 else None
        key = (topic, partition)
        cached = self._leaders.get(key)
        if epoch is None:
            # No epoch to compare: trust the hint only over an entry naming another leader.
            epoch = cached.epoch if cached is not None else 0
        if not self._take(key, _Leader(leader_id, epoch)):
            cached = self._leaders.get(key)
            if cached is None or cached.node_id != leader_id:
                self.invalidate(topic)
                return False
        if topic not in self._refreshed_at:
            self._refreshed_at[topic] = self._clock()
        if self.address_of(leader_id) is None:
            self.invalidate(topic)
            return False
        return True

    def mark_unreachable(self, address: str) -> None:
        """``address`` did not answer (no connection, or its call went unanswered): ask it
        last until :meth:`mark_reachable`. At most :data:`UNREACHABLE_MAX` addresses are kept
        (the oldest mark is dropped first: it only orders candidates)."""
        self._unreachable.pop(address, None)
        self._unreachable[address] = None
        while len(self._unreachable) > UNREACHABLE_MAX:
            del self._unreachable[next(iter(self._unreachable))]

    def mark_reachable(self, address: str) -> None:
        """A connection to ``address`` succeeded: it is asked in its turn again."""
        self._unreachable.pop(address, None)

    def invalidate(self, topic: str) -> None:
        """Refresh ``topic`` at its next request (a request about it failed for routing)."""
        self._stale.add(topic)

    def forget_node(self, node_id: int) -> None:
        """The node did not answer: route nothing to it until a refresh names it again."""
        for key, leader in self._leaders.items():
            if leader.node_id == node_id:
                self._stale.add(key[0])

    def forget(self, topic: str) -> None:
        """Drop ``topic``'s entry (deleted, or unknown to the cluster)."""
        for key in [k for k in self._leaders if k[0] == topic]:
            del self._leaders[key]
        self._refreshed_at.pop(topic, None)
        self._stale.discard(topic)

    def check(self) -> None:
        """Assert the invariants (tests call it after every change)."""
        for (topic, partition), leader in self._leaders.items():
            assert topic in self._refreshed_at, f"{topic}-{partition} without a refresh time"
            assert leader.epoch >= 0 and leader.node_id >= NO_LEADER, (topic, partition, leader)
        assert len(self._unreachable) <= UNREACHABLE_MAX, len(self._unreachable)
