"""One replicated partition on this server: its role, and the leader's replication state.

The replication half of Kafka's ``Partition`` (``core/src/main/scala/kafka/cluster/
Partition.scala``: ``makeLeader``, ``makeFollower``, ``maybeIncrementLeaderHW``,
``updateFollowerFetchState``); the serving half (append lock, reader wake-ups, acks=all waits) is
server/broker/partition.py's. ReplicaRoles (replica_roles.py) makes a replica the leader or a
follower as the cluster view says (partition_state.py's records); this object holds what each
role needs:

* **Leader at epoch E** (:meth:`Replica.become_leader`): E was assigned in the leader epoch
  cache at the log end offset (Kafka's ``makeLeader``), appends are stamped with E
  (:meth:`leader_epoch_for_append`), the log tracks a high watermark, every follower's fetch
  state (isr.py's :class:`~.isr.FollowerState`) starts unknown. Each follower fetch
  (:meth:`record_follower_fetch`) and each append may advance the high watermark to the least
  log end offset of the ISR; when it moves (or the ISR or the role changes) the replica tells
  the serving layer above it (:class:`ReplicaEvents`), which completes its delayed operations:
  the acks=all producers waiting for the high watermark, the consumers' long polls and
  Subscribe streams.
  Fetch sessions (fetch_session.py) waiting for records listen to appends
  (:meth:`add_append_listener`): the leader's delayed-fetch wake-up, called by every append.
* **Follower** of node L at epoch E: the replica fetcher (replica_fetcher.py) copies L's log;
  clients are refused (NotLeaderOrFollowerError with L as the hint).

It leads only while three things hold (:meth:`check_leader`): the view named this node leader
at the epoch it took (:attr:`role`), the etcd lease is held as far as this server knows
(``session.may_lead()``: held, or etcd down for everyone — session.py), and it is the
lease the leadership began under: a server frozen past the
session timeout gets a new lease when it thaws, and leads again only once the replica manager
re-read the view under it (a controller may have moved the leadership meanwhile).

Crash behaviour: nothing here is durable; the epoch cache and the high watermark checkpoint
are the log's (server/storage), and the role comes back from etcd at the next start.

Concurrency: event-loop only. The log's blocking calls (assigning an epoch writes and fsyncs
its checkpoint) are the replica manager's, in the executor; the high watermark calls here take
the log's lock briefly on the loop, as Kafka's request threads do.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .errors import NotEnoughReplicasError, NotLeaderOrFollowerError
from .isr import FollowerState, high_watermark_of, may_join_isr, out_of_sync_followers

if TYPE_CHECKING:
    from stratalog.server.storage.partition_log import PartitionLog

    from .partition_state import PartitionState
    from .session import EtcdSession

__all__ = ["LeadershipListener", "Replica", "ReplicaEvents", "Role"]

logger = logging.getLogger(__name__)


class Role(enum.Enum):
    NONE = "none"  # not a replica any more, or no leader known
    LEADER = "leader"
    FOLLOWER = "follower"


class ReplicaEvents(Protocol):
    """What a replica tells the partition-serving layer above it (server/broker/), as Kafka's
    ``Partition`` completes its ReplicaManager's purgatories through ``DelayedOperations``.
    Implemented by :class:`stratalog.server.broker.ReplicaManager`; the cluster package never
    imports it. Event-loop only."""

    def replica_changed(self, topic: str, partition: int) -> None:
        """The partition's high watermark, ISR, role or log changed: complete what waits for
        it (acks=all produces, long polls, Subscribe streams)."""

    async def delete_partitions(self, topic: str) -> None:
        """Delete the topic's local logs (it left the cluster), its appends in flight first."""


class LeadershipListener(Protocol):
    """What hears that this server began or stopped leading a partition: the group service,
    whose coordinator of a ``__consumer_offsets`` partition is that partition's leader
    (docs/groups.md, "Cluster mode"), as Kafka's ``ReplicaManager.applyDelta`` calls
    ``GroupCoordinator.onElection`` / ``onResignation``. Implemented by
    :class:`stratalog.server.group_service.ClusterPartitions`; the cluster package never imports
    it. Called on the event loop for every partition (the listener picks its topics), after the
    role changed; must not block."""

    def became_leader(self, topic: str, partition: int, leader_epoch: int) -> None:
        """This server leads ``topic``-``partition`` at ``leader_epoch`` from now on (its log
        may hold records above the high watermark still: the followers have not fetched
        them)."""

    def stopped_leading(self, topic: str, partition: int) -> None:
        """This server does not lead ``topic``-``partition`` any more (it follows, nobody
        leads, or it is no longer a replica); called also when it never led it."""


class Replica:
    """One partition this server replicates (module docstring)."""

    def __init__(self, topic: str, partition: int, node_id: int, log: PartitionLog,
                 session: EtcdSession, events: ReplicaEvents) -> None:
        self.topic = topic
        self.partition = partition
        self.node_id = node_id
        self.log = log
        self._session = session
        self._events = events
        self.role = Role.NONE
        #: The leader epoch this replica acts in (leader: its own; follower: its leader's).
        self.leader_epoch = -1
        self.leader_id = -1
        #: The ISR as last read from etcd, and the mod revision of that state (an ISR change
        #: compares it).
        self.isr: tuple[int, ...] = ()
        self.mod_revision = 0
        self.replicas: tuple[int, ...] = ()
        #: Leader only: followers whose addition to the ISR is being written (the maximal ISR
        #: counts them for the high watermark), and whether an ISR write is under way.
        self.pending_isr_additions: set[int] = set()
        self.isr_change_in_flight = False
        self.followers: dict[int, FollowerState] = {}
        #: Leader only: the log end offset when it took its epoch (a follower joins the ISR
        #: only once it reached it).
        self.leader_epoch_start_offset = 0
        self._lease_id = 0
        #: Leader only: what hears of the next append (fetch sessions waiting for records).
        self._append_listeners: set[Callable[[], None]] = set()

    def __repr__(self) -> str:
        return (f"Replica({self.topic}-{self.partition}, {self.role.value}, "
                f"epoch {self.leader_epoch}, leader {self.leader_id}, isr {list(self.isr)})")

    # ---------------------------------------------------------------- role changes

    def become_leader(self, state: PartitionState, mod_revision: int,
                      replicas: tuple[int, ...], now_ms: int) -> None:
        """Lead at ``state.leader_epoch`` (the caller assigned the epoch in the log's cache at
        its log end and set the high watermark). Followers start unknown, caught up now
        (isr.py)."""
        self.role = Role.LEADER
        self.leader_epoch = state.leader_epoch
        self.leader_id = self.node_id
        self.replicas = replicas
        self.isr, self.mod_revision = state.isr, mod_revision
        self.pending_isr_additions.clear()
        self.followers = {
            replica: FollowerState(last_caught_up_ms=now_ms)
            for replica in replicas if replica != self.node_id
        }
        self.leader_epoch_start_offset = self.log.log_end_offset
        self._lease_id = self._session.lease_id
        self.maybe_increment_high_watermark()

    def become_follower(self, state: PartitionState, mod_revision: int,
                        replicas: tuple[int, ...]) -> None:
        """Follow ``state.leader`` (or nobody, -1) at ``state.leader_epoch``; acks=all waiters
        fail with NotLeaderOrFollowerError (the serving layer completes them)."""
        was_leader = self.role is Role.LEADER
        self.role = Role.FOLLOWER if state.has_leader else Role.NONE
        self.leader_epoch = state.leader_epoch
        self.leader_id = state.leader
        self.replicas = replicas
        self.isr, self.mod_revision = state.isr, mod_revision
        self.pending_isr_additions.clear()
        self.followers = {}
        if was_leader:
            logger.info("%s-%d: no longer leader (leader now %d, epoch %d)", self.topic,
                        self.partition, state.leader, state.leader_epoch)
        self.notify_append()  # fetch sessions waiting on this server answer now
        self._events.replica_changed(self.topic, self.partition)

    def stop(self) -> None:
        """No longer a replica here (the topic went, or the assignment left this node)."""
        self.role = Role.NONE
        self.notify_append()
        self._events.replica_changed(self.topic, self.partition)

    def update_isr(self, state: PartitionState, mod_revision: int) -> None:
        """The leader's ISR changed in etcd at the same leader and epoch (its own write, or
        the controller removing a dead broker): apply it, recompute the high watermark."""
        self.isr, self.mod_revision = state.isr, mod_revision
        self.pending_isr_additions -= set(state.isr)
        if self.role is Role.LEADER and not self.maybe_increment_high_watermark():
            # Unmoved, but acks=all produces check the ISR's size against min.insync.replicas.
            self._events.replica_changed(self.topic, self.partition)

    @property
    def leads_under_current_lease(self) -> bool:
        return self._lease_id == self._session.lease_id

    # ---------------------------------------------------------------- the leader's checks

    def not_leader(self, leader_address: str = "") -> NotLeaderOrFollowerError:
        leader = self.leader_id if self.leader_id != self.node_id else -1
        return NotLeaderOrFollowerError(self.topic, self.partition, leader, self.leader_epoch,
                                        leader_address)

    def is_leader(self) -> bool:
        """Whether this replica may act as leader now (module docstring)."""
        return (self.role is Role.LEADER and self._session.may_lead()
                and self._lease_id == self._session.lease_id)

    def check_enough_replicas(self, min_insync: int) -> None:
        """acks=all: refuse before writing when the ISR is below ``min_insync``."""
        if len(self.isr) < min_insync:
            raise NotEnoughReplicasError(self.topic, self.partition, len(self.isr), min_insync)

    # ---------------------------------------------------------------- high watermark

    @property
    def maximal_isr(self) -> set[int]:
        return set(self.isr) | self.pending_isr_additions

    def maybe_increment_high_watermark(self) -> bool:
        """Leader: raise the high watermark to the least log end offset of the maximal ISR;
        tells the serving layer when it moved (:class:`ReplicaEvents`). True if it moved."""
        if self.role is not Role.LEADER:
            return False
        log = self.log
        target = high_watermark_of(self.node_id, log.log_end_offset, self.maximal_isr,
                                   self.followers)
        try:
            moved = log.maybe_increment_high_watermark(target)
        except ValueError:  # truncated under us (a role change in flight): nothing to raise
            return False
        if moved:
            self._events.replica_changed(self.topic, self.partition)
        return moved

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                              now_ms: int) -> None:
        """Leader: a follower fetched at ``fetch_offset`` (it holds everything below)."""
        state = self.followers.get(replica_id)
        if state is None:
            state = self.followers[replica_id] = FollowerState()
        state.update_fetch_state(fetch_offset, log_start_offset, self.log.log_end_offset, now_ms)
        self.maybe_increment_high_watermark()

    def followers_to_add(self) -> set[int]:
        """Leader: followers outside the ISR that may join it now (isr.py)."""
        high_watermark = self.log.high_watermark
        return {
            replica for replica, state in self.followers.items()
            if replica not in self.isr and replica not in self.pending_isr_additions
            and replica in self.replicas
            and may_join_isr(state, high_watermark, self.leader_epoch_start_offset)
        }

    def followers_to_remove(self, now_ms: int, lag_time_max_ms: int) -> set[int]:
        """Leader: ISR members that fell behind for more than ``lag_time_max_ms``."""
        return out_of_sync_followers(self.node_id, self.log.log_end_offset, self.isr,
                                     self.followers, now_ms, lag_time_max_ms)

    # ---------------------------------------------------------------- appends

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` at the next :meth:`notify_append` (an append, or a change of role);
        add it *before* looking at the log end, then wait. Must not block."""
        self._append_listeners.add(listener)

    def remove_append_listener(self, listener: Callable[[], None]) -> None:
        self._append_listeners.discard(listener)

    def follower_appended(self) -> None:
        """Follower: the fetcher appended the leader's records, truncated, or moved the high
        watermark or the log start: the serving layer hears of it as of every other write
        (its readers wake through the one path every writer takes)."""
        self._events.replica_changed(self.topic, self.partition)

    def notify_append(self) -> None:
        """Leader: records were appended (replica fetches waiting for them answer); a leader
        alone in its ISR moves its high watermark at once."""
        for listener in list(self._append_listeners):
            listener()
        self.maybe_increment_high_watermark()
