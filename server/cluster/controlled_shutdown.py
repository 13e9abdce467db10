"""Controlled shutdown: this server's leaderships moved to other in-sync replicas before it stops.

Without it a stopping server revokes its lease and every partition it led is leaderless until
the controller sees the lease gone and elects another replica: clients get
NOT_LEADER_OR_FOLLOWER and time out meanwhile, acks=all producers stall. With it (Kafka's
``controlled.shutdown.enable``: ZooKeeper-era
``core/src/main/scala/kafka/controller/KafkaController.scala`` ``doControlledShutdown``, KRaft's
``BrokerLifecycleManager`` and
``metadata/src/main/java/org/apache/kafka/controller/ReplicationControlManager.java``
``handleBrokerInControlledShutdown``), on SIGTERM and before anything stops serving::

    1. mark     the broker key gets "shutting_down": true (membership.py), under the same
                lease; the watch on the broker prefix wakes the controller (this server's own
                elector too, when it is the controller)
    2. move     the controller's pass (leader_election.py) elects, for each partition this
                server leads, the first other replica that is live, in the ISR and not
                shutting down (leader epoch + 1: clean, as a preferred-leader election), and
                takes this server out of every ISR; no controller pass, preferred-leader
                election or reassignment elects it again, and no leader lets it back into an
                ISR (replica_roles.py)
    3. wait     until the view (cluster_view.py) shows nothing left to move
                (:func:`partitions_to_leave`), at most ``controlled_shutdown_timeout_ms``
    4. stop     as without it: the services stop, the lease is revoked

Meanwhile the server keeps serving: the replica roles apply the new states as they come, so
it becomes a follower of each partition it led, still fetching (outside the ISR, so nobody's
acks=all waits on it), and its clients are answered NOT_LEADER_OR_FOLLOWER with the new
leader, as after any leader change; acks=all producers resend there (an idempotent producer's
resend of a batch the new leader has is a duplicate, answered as written).

**Left as they are**: partitions with no other live in-sync replica (RF 1, or an ISR of this
server alone, or whose other ISR members are shutting down too): they stay led here until the
server stops, then go offline as today (Kafka does the same). **Timeout** (no controller, etcd
down, a controller slower than the bound): the server stops anyway, logging the partitions
still led here; what is left moves when the lease goes, as without a controlled shutdown.
``controlled_shutdown_timeout_ms`` 0 turns the whole of it off.

**The controller's own shutdown** moves the leaderships first and resigns after (when its lease
is revoked in step 4), as ZooKeeper-era Kafka, whose ``KafkaServer.shutdown`` makes its
controlled shutdown (its request going to itself as controller) before
``KafkaController.shutdown`` resigns (``core/src/main/scala/kafka/server/KafkaServer.scala``):
a controller that resigned first would leave the moves to a successor that does not exist
yet (an election, then a first pass reading every partition), and the partitions would wait
for both; the stopping controller needs one pass.

**The mark** lives in the registration, under the lease: a crash in the middle loses nothing
(the lease expires and the key with it, as any crash), and a server started again registers
anew, without it.

Concurrency: event-loop only; :meth:`ControlledShutdown.run` once, from the server's stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Set
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cluster_view import ClusterView, PartitionKey
    from .controller import ControllerElection
    from .leader_election import LeaderElector
    from .membership import Membership
    from .partition_state import PartitionState
    from .session import EtcdSession

__all__ = ["ControlledShutdown", "partitions_to_leave"]

logger = logging.getLogger(__name__)

#: Partitions named in the log line of a shutdown that timed out (the rest are counted).
LOGGED_PARTITIONS_MAX = 20


def partitions_to_leave(node_id: int, states: Mapping[PartitionKey, PartitionState],
                        live: Set[int], candidates: Set[int]) -> list[PartitionKey]:
    """The partitions the controlled shutdown of ``node_id`` still waits for, sorted: those it
    leads that another in-sync replica among ``candidates`` (live, not shutting down) could
    take, and those a live leader leads whose ISR still holds ``node_id``. ``live``: every
    live broker (``node_id`` included while its lease lives)."""
    pending = []
    for key, state in states.items():
        if state.leader == node_id:
            if any(member != node_id and member in candidates for member in state.isr):
                pending.append(key)
        elif state.has_leader and state.leader in live and node_id in state.isr:
            pending.append(key)
    return sorted(pending)


class ControlledShutdown:
    """Steps 1 to 3 of the module docstring for this server; :meth:`run` once."""

    def __init__(self, session: EtcdSession, membership: Membership,
                 election: ControllerElection, view: ClusterView, elector: LeaderElector,
                 recheck_interval_s: float) -> None:
        self._session = session
        self._membership = membership
        self._election = election
        self._view = view
        self._elector = elector
        # The wait wakes on every change of the view and, at the latest, after this long
        # (the view's own poll interval): a membership change alone changes no partition.
        self._recheck_interval_s = recheck_interval_s
        self._view_changed = asyncio.Event()

    async def run(self, timeout_s: float) -> list[PartitionKey]:
        """Mark this server, wait until its leaderships have moved and it has left the ISRs,
        at most ``timeout_s``; returns what was still to move when it gave up ([] when
        everything moved or nothing had to). Never raises for etcd: a shutdown goes on.
        """
        # Imported here, as preferred_leader.py does: this package's __init__ loads no etcd
        # client.
        import aetcd

        if timeout_s <= 0:
            return []
        node_id = self._membership.node_id
        if not self._session.held():
            logger.warning("controlled shutdown skipped: etcd has not confirmed this server's"
                           " lease lately; its leaderships move when the lease goes")
            return self._pending()
        # Added now, after the replica roles' listener (listeners run in order, each awaited):
        # when the wait ends, the roles have applied the states it saw.
        self._view.add_listener(self._on_view_change)
        loop = asyncio.get_running_loop()
        started = loop.time()
        pending: list[PartitionKey] = []
        try:
            async with asyncio.timeout(timeout_s):
                if not await self._membership.mark_shutting_down():
                    logger.warning("controlled shutdown skipped: node %d's registration is not"
                                   " in etcd (its lease was lost); its leaderships move when the"
                                   " lease goes", node_id)
                    return self._pending()
                if self._election.is_controller:
                    self._elector.wake()  # the controller moves its own leaderships first
                while pending := self._pending():
                    self._view_changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._view_changed.wait(),
                                               self._recheck_interval_s)
        except TimeoutError:
            pending = self._pending()
            logger.warning(
                "controlled shutdown of node %d timed out after %.1f s"
                " (controlled_shutdown_timeout_ms): %d partition(s) still to move: %s%s;"
                " they move when the lease goes", node_id, timeout_s, len(pending),
                ", ".join(f"{topic}-{number}" for topic, number
                          in pending[:LOGGED_PARTITIONS_MAX]),
                " ..." if len(pending) > LOGGED_PARTITIONS_MAX else "")
            return pending
        except (aetcd.ClientError, OSError) as exc:  # etcd stopped answering
            logger.warning("controlled shutdown of node %d gave up: etcd did not answer (%s);"
                           " its leaderships move when the lease goes", node_id,
                           exc or type(exc).__name__)
            return self._pending()
        except Exception:
            # A bug here must not cost the clean close of the logs that follows.
            logger.exception("controlled shutdown of node %d failed; stopping without it",
                             node_id)
            return self._pending()
        kept = [key for key, versioned in sorted(self._view.partitions.items())
                if versioned.state.leader == node_id]
        logger.info("controlled shutdown of node %d done in %.3f s: its leaderships moved%s",
                    node_id, loop.time() - started,
                    f"; {len(kept)} partition(s) without another in-sync replica stay led"
                    " here until it stops" if kept else "")
        return []

    def _pending(self) -> list[PartitionKey]:
        membership = self._membership
        states = {key: versioned.state for key, versioned in self._view.partitions.items()}
        return partitions_to_leave(membership.node_id, states, set(membership.brokers),
                                   membership.leader_candidates())

    async def _on_view_change(self, _topics: set[str], _partitions: set[PartitionKey]) -> None:
        self._view_changed.set()
