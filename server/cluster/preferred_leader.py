"""Preferred-leader election: leadership moved back to each partition's preferred replica, on
demand (ElectLeaders) and automatically (``auto_leader_rebalance_enable``).

A partition's *preferred replica* is the first of its assigned replicas (partition_state.py's
TopicAssignment; replica_placement.py spreads them so that every broker is preferred for its
share). After a failover the controller elects another in-sync replica (leader_election.py), and
the leadership stays there when the old leader comes back: after a rolling restart the leaders
are bunched on the servers restarted first. This module moves them back, as Kafka's
``PreferredReplicaPartitionLeaderElectionStrategy``
(``core/src/main/scala/kafka/controller/PartitionStateMachine.scala``) and
``KafkaController.checkAndTriggerAutoLeaderRebalance``
(``core/src/main/scala/kafka/controller/KafkaController.scala``, the ZooKeeper-era controller;
KRaft's ``ReplicationControlManager.electLeaders``,
``metadata/src/main/java/org/apache/kafka/controller/ReplicationControlManager.java``, answers
the same errors)::

    preferred election of a partition (replicas R, state S, live brokers L):
        S.leader == R[0]                     ElectionNotNeededError
        R[0] not in L, or not in S.isr       PreferredLeaderNotAvailableError
        else write  leader R[0], leader epoch S.leader_epoch + 1, ISR S.isr
    unclean election (Kafka's election type 1):
        S.leader live                        ElectionNotNeededError
        no live replica                      EligibleLeadersNotAvailableError
        else what the controller writes with unclean.leader.election.enable
        (leader_election.next_state)

    automatic, every leader_imbalance_check_interval_seconds, on the controller only:
        for each broker B: P(B) = the partitions whose preferred replica is B
            imbalance(B) = |{p in P(B): leader(p) != B}| / |P(B)|
            imbalance(B) > leader_imbalance_per_broker_percentage / 100
                -> preferred election of each p in P(B) led elsewhere whose preferred
                   replica is live and in sync (the others are skipped, not errors)
        partitions being reassigned count for nothing and never move (reassignment.py
        moves their leadership; Kafka's rebalance skips them too)

**Clean.** A move is an epoch bump like a failover election, and only to a replica in the ISR:
it holds every record below the high watermark, so nothing acknowledged with acks=all is lost.
The old leader sees the new epoch in etcd and becomes a follower (replica_roles.py): acks=all
producers waiting on it fail with NOT_LEADER_OR_FOLLOWER and retry on the new leader (an
idempotent producer's retry of a batch the new leader already has is answered as a duplicate);
records only the old leader had (never acknowledged) are truncated by its divergence check.

**Fencing.** Every write is leader_election.py's :meth:`LeaderElector.write_state`: a
transaction comparing the partition key's mod revision with the one read and the controller
epoch key with an epoch. The automatic rebalance runs on the controller with its own epoch (a
deposed controller writes nothing); an on-demand election is written by the member that receives
it (no forwarding, as CreateTopic), with the controller epoch it has just read, so a controller
elected in between, or any change of the partition's state, makes it write nothing. A lost race
is read again and tried again, at most :data:`ELECTION_ATTEMPTS_MAX` times.

Crash behaviour: nothing is kept; each election and each check reads etcd afresh.

Concurrency: event-loop only; one automatic check at a time (its poller).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING

from stratalog.server.storage.errors import UnknownTopicOrPartitionError

from .errors import (
    CoordinationUnavailableError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    PreferredLeaderNotAvailableError,
)
from .leader_election import next_state
from .partition_state import PartitionState, TopicAssignment
from .polling import Poller

if TYPE_CHECKING:
    from .cluster_view import ClusterView, PartitionKey
    from .controller import ControllerElection
    from .layout import ClusterKeys
    from .leader_election import LeaderElector
    from .membership import Membership
    from .session import EtcdSession

__all__ = [
    "ELECTION_ATTEMPTS_MAX",
    "ELECT_TIMEOUT_S",
    "ElectionType",
    "PreferredLeaders",
    "elected_state",
    "imbalanced_partitions",
]

logger = logging.getLogger(__name__)

#: Writes of one partition's election tried before it fails (each lost race re-reads etcd).
ELECTION_ATTEMPTS_MAX = 3
#: The longest an on-demand ElectLeaders waits for etcd, all its calls together (seconds).
ELECT_TIMEOUT_S = 10.0


class ElectionType(enum.IntEnum):
    """Kafka's ``ElectionType`` (``clients/src/main/java/org/apache/kafka/common/ElectionType.java``):
    the values ElectLeaders carries."""

    PREFERRED = 0
    UNCLEAN = 1


def elected_state(election_type: ElectionType, replicas: tuple[int, ...],
                  state: PartitionState, live: Set[int], controller_epoch: int,
                  shutting_down: Set[int] = frozenset()) -> PartitionState:
    """The state an election of ``election_type`` writes (module docstring); the brokers
    ``shutting_down`` (live, in a controlled shutdown: controlled_shutdown.py) are never
    elected.

    Raises:
        ElectionNotNeededError, PreferredLeaderNotAvailableError,
        EligibleLeadersNotAvailableError: nothing to write, and why.
    """
    if election_type is ElectionType.UNCLEAN:
        if state.has_leader and state.leader in live:
            raise ElectionNotNeededError(f"node {state.leader} leads it and is live")
        new = next_state(replicas, state, live, True, controller_epoch, shutting_down)
        if new is None or not new.has_leader:
            raise EligibleLeadersNotAvailableError(
                f"none of its replicas {list(replicas)} is live")
        return new
    preferred = replicas[0]
    if state.leader == preferred:
        raise ElectionNotNeededError(f"its preferred replica {preferred} leads it already")
    if preferred not in live:
        raise PreferredLeaderNotAvailableError(
            f"its preferred replica {preferred} is not a live broker")
    if preferred in shutting_down:
        raise PreferredLeaderNotAvailableError(
            f"its preferred replica {preferred} is shutting down (controlled shutdown)")
    if preferred not in state.isr:
        raise PreferredLeaderNotAvailableError(
            f"its preferred replica {preferred} is not in the ISR {list(state.isr)} (not caught"
            " up: electing it would lose records)")
    return PartitionState(preferred, state.leader_epoch + 1, state.isr, controller_epoch)


def imbalanced_partitions(topics: Mapping[str, TopicAssignment],
                          states: Mapping[PartitionKey, PartitionState], live: Set[int],
                          percentage: int) -> list[PartitionKey]:
    """The partitions an automatic rebalance moves (module docstring), by topic and number:
    those of brokers whose imbalance is above ``percentage`` %, led elsewhere, whose preferred
    replica is live and in the ISR."""
    preferred_of: dict[int, list[PartitionKey]] = {}
    for topic, assignment in topics.items():
        for number, replicas in assignment.replicas.items():
            # A partition being reassigned is left to the reassignment (reassignment.py), as
            # Kafka's rebalance skips them: its first replica is the target's, which may not
            # have caught up yet, and the reassignment moves its leadership itself.
            if (topic, number) in states and number not in assignment.reassigning:
                preferred_of.setdefault(replicas[0], []).append((topic, number))
    moves: list[PartitionKey] = []
    for broker, keys in preferred_of.items():
        elsewhere = [key for key in keys if states[key].leader != broker]
        if len(elsewhere) * 100 <= percentage * len(keys):
            continue  # Kafka's imbalanceRatio > percentage / 100, in integers
        moves.extend(key for key in elsewhere
                     if broker in live and broker in states[key].isr)
    return sorted(moves)


class PreferredLeaders:
    """On-demand elections (:meth:`elect`, any member) and the automatic rebalance (the
    controller, every ``check_interval_s`` while ``auto_rebalance``); :meth:`start` once,
    :meth:`close` once."""

    def __init__(self, session: EtcdSession, keys: ClusterKeys, election: ControllerElection,
                 membership: Membership, view: ClusterView, elector: LeaderElector, *,
                 auto_rebalance: bool, check_interval_s: float, imbalance_percentage: int
                 ) -> None:
        self._session = session
        self._keys = keys
        self._election = election
        self._membership = membership
        self._view = view
        self._elector = elector
        self._auto_rebalance = auto_rebalance
        self._imbalance_percentage = imbalance_percentage
        self._checked_once = False
        self._poller = Poller(self.maybe_rebalance, check_interval_s,
                              "stratalog-leader-rebalance", "leader balance not checked")

    # ---------------------------------------------------------------- on demand

    async def elect(self, requested: Mapping[str, Sequence[int]] | None,
                    election_type: ElectionType = ElectionType.PREFERRED
                    ) -> dict[PartitionKey, Exception | None]:
        """Elect leaders for ``requested`` (topic -> partition numbers; None: every partition
        of the cluster); each partition's outcome: None (written) or the error saying why not
        (an :class:`UnknownTopicOrPartitionError` for one the cluster does not have). With
        ``requested`` None the partitions whose election was not needed are left out (Kafka's
        ``electLeaders`` does the same).

        Raises:
            CoordinationUnavailableError: etcd did not answer within :data:`ELECT_TIMEOUT_S`
                (the elections written before stand).
        """
        # Imported here: single servers import this module (ElectionType), and load no etcd
        # client (the package's __init__ says why).
        import aetcd

        try:
            async with asyncio.timeout(ELECT_TIMEOUT_S):
                return await self._elect(requested, election_type)
        except (TimeoutError, aetcd.ClientError, OSError) as exc:
            raise CoordinationUnavailableError(
                f"ElectLeaders needs etcd, which did not answer within {ELECT_TIMEOUT_S:g} s"
                f" ({self._session.endpoint}: {exc or type(exc).__name__}); the elections"
                " written before stand: describe the topics to find out"
            ) from exc

    async def _elect(self, requested: Mapping[str, Sequence[int]] | None,
                     election_type: ElectionType) -> dict[PartitionKey, Exception | None]:
        await self._membership.refresh()
        await self._view.refresh()
        if requested is None:
            keys = sorted(self._view.partitions)
        else:
            keys = sorted({(topic, number) for topic, numbers in requested.items()
                           for number in numbers})
        outcomes: dict[PartitionKey, Exception | None] = {}
        for key in keys:
            try:
                await self._elect_one(key, election_type, "on demand")
                outcomes[key] = None
            except ElectionNotNeededError as exc:
                if requested is not None:
                    outcomes[key] = exc
            except (UnknownTopicOrPartitionError, PreferredLeaderNotAvailableError,
                    EligibleLeadersNotAvailableError, CoordinationUnavailableError) as exc:
                outcomes[key] = exc
        return outcomes

    async def _elect_one(self, key: PartitionKey, election_type: ElectionType,
                         why: str) -> None:
        topic, number = key
        for attempt in range(ELECTION_ATTEMPTS_MAX):
            if attempt:
                await self._membership.refresh()
                await self._view.refresh()
            assignment = self._view.topics.get(topic)
            versioned = self._view.state(topic, number)
            if assignment is None or number not in assignment.replicas or versioned is None:
                raise UnknownTopicOrPartitionError(f"{topic}-{number} does not exist")
            stored = await self._session.client.get(self._keys.controller_epoch)
            controller_epoch = int(stored.value or b"0") if stored is not None else 0
            state, revision = versioned
            new = elected_state(election_type, assignment.replicas[number], state,
                                set(self._membership.brokers), controller_epoch,
                                self._membership.shutting_down_brokers())
            if await self._elector.write_state(topic, number, new, revision, controller_epoch):
                logger.info("%s-%d: %s election (%s): node %d leads at leader epoch %d (was"
                            " node %d), ISR %s", topic, number, election_type.name.lower(), why,
                            new.leader, new.leader_epoch, state.leader, list(new.isr))
                return
        raise CoordinationUnavailableError(
            f"{topic}-{number}: its state in etcd changed {ELECTION_ATTEMPTS_MAX} times while"
            " its leader was being elected; nothing written by this election, retry")

    # ---------------------------------------------------------------- automatic

    async def maybe_rebalance(self) -> int:
        """One automatic check (module docstring) if enabled and this server is controller;
        the number of partitions whose leadership moved.

        Raises what the etcd client raises when etcd does not answer.
        """
        if not self._checked_once:
            # The poller runs its step at once; the first check waits an interval, as Kafka's
            # controller waits before its first: a server just started (or a cluster coming
            # back whole) lets its followers catch up and rejoin their ISRs first.
            self._checked_once = True
            return 0
        if not self._auto_rebalance or not self._election.is_controller:
            return 0
        epoch = self._election.known.epoch
        await self._membership.refresh()
        await self._view.refresh()
        # A broker in a controlled shutdown is no candidate: its leaderships are moving away.
        live = self._membership.leader_candidates()
        states = {key: versioned.state for key, versioned in self._view.partitions.items()}
        moved = 0
        for key in imbalanced_partitions(self._view.topics, states, live,
                                         self._imbalance_percentage):
            versioned = self._view.state(*key)
            assignment = self._view.topics.get(key[0])
            if versioned is None or assignment is None:
                continue
            try:
                new = elected_state(ElectionType.PREFERRED, assignment.replicas[key[1]],
                                    versioned.state, live, epoch)
            except (ElectionNotNeededError, PreferredLeaderNotAvailableError):
                continue
            if await self._elector.write_state(*key, new, versioned.mod_revision, epoch):
                moved += 1
                logger.info("%s-%d: leader moved back to its preferred replica %d at leader"
                            " epoch %d (was node %d; auto_leader_rebalance_enable)", *key,
                            new.leader, new.leader_epoch, versioned.state.leader)
        if moved:
            await self._view.refresh()
        return moved

    def start(self) -> None:
        """Check every ``check_interval_s`` (only the controller acts)."""
        if self._auto_rebalance:
            self._poller.start()

    async def close(self) -> None:
        await self._poller.stop()
