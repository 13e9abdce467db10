"""The controller's duties: leaders for partitions whose leader is gone, dead brokers out of ISRs.

While this server is controller (controller.py), every poll interval, and at once when it
wins an election, it makes a *pass* over every partition of the cluster (Kafka's
``PartitionStateMachine`` / ``ReplicaStateMachine`` of the ZooKeeper era, reduced to what a
broker's death changes)::

    read the live brokers, the topics and the partition states from etcd (with revisions)
    for each partition:
        no state yet                  write the first one (CreateTopic died half-way):
                                      leader = first replica, epoch 0, ISR = every replica
        leader -1 or not live         elect (below); leader_epoch + 1
        leader live, a dead ISR member
                                      ISR = ISR ∩ live (the leader kept); epoch unchanged
        leader in a controlled shutdown, another ISR member live and not shutting down
                                      elect it; ISR without the shutting-down brokers;
                                      leader_epoch + 1
        a shutting-down follower in the ISR
                                      ISR without it; epoch unchanged

A broker in a *controlled shutdown* (its registration says ``shutting_down``: membership.py,
controlled_shutdown.py) is live but never a candidate: it is not elected, cleanly or not, and
leaves every ISR, as KRaft's ``ReplicationControlManager.handleBrokerInControlledShutdown``
(``metadata/src/main/java/org/apache/kafka/controller/ReplicationControlManager.java``; its
``isAcceptableLeader`` is ``ClusterControlManager.isActive``, false for such a broker). A
partition it leads with no other in-sync replica stays led by it until it stops, then goes
offline as any partition whose last in-sync replica dies.

Election (:func:`next_state`, Kafka's ``offlinePartitionLeaderElection``): the first replica,
in assignment order, that is live and in the ISR; the new ISR is the ISR's live members. If no
ISR member lives the partition goes offline: leader -1, the ISR left as it is, so that the last
in-sync replica is elected when it comes back and no acknowledged record is lost. With
``unclean.leader.election.enable`` (the topic's config, else the server setting) the first live
replica is elected instead, with ISR = [it]: the partition comes back at once, without the
records only the old ISR had.

Every write is a transaction that compares the partition key's mod revision with the one read
(a leader that changed its ISR meanwhile makes it fail; the next pass reads again) and
``value(<prefix>/controller_epoch)`` with this controller's epoch, so that a deposed controller
— frozen past its session, then resumed before it noticed — writes nothing. The state written
carries the controller epoch. Each election is logged at INFO.

A pass that fails because etcd does not answer is retried at the next poll; nothing is
written from a view older than the pass's own reads.

Concurrency: event-loop only; one pass at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Set
from typing import TYPE_CHECKING

from .partition_state import NO_LEADER, PartitionState, TopicAssignment
from .polling import Poller

if TYPE_CHECKING:
    from .cluster_view import ClusterView
    from .controller import ControllerElection
    from .layout import ClusterKeys
    from .membership import Membership
    from .session import EtcdSession

__all__ = ["LeaderElector", "first_state", "next_state", "unclean_enabled"]

logger = logging.getLogger(__name__)

_UNCLEAN_CONFIG = "unclean.leader.election.enable"


def first_state(replicas: tuple[int, ...]) -> PartitionState:
    """A new partition's state, as CreateTopic writes it."""
    return PartitionState(replicas[0], 0, replicas, 0)


def unclean_enabled(configs: Mapping[str, str], server_default: bool) -> bool:
    """The topic's ``unclean.leader.election.enable`` if set, else the server's."""
    value = configs.get(_UNCLEAN_CONFIG)
    return server_default if value is None else value.strip().lower() == "true"


def next_state(replicas: tuple[int, ...], state: PartitionState, live: Set[int], unclean: bool,
               controller_epoch: int, shutting_down: Set[int] = frozenset()
               ) -> PartitionState | None:
    """The state the controller writes for a partition with ``replicas`` and ``state`` when
    the brokers ``live`` are alive, of which ``shutting_down`` are in a controlled shutdown;
    None when nothing is to change (module docstring)."""
    # A broker in a controlled shutdown (controlled_shutdown.py) is live but no candidate:
    # neither elected nor kept in an ISR, except as the leader no other in-sync replica can
    # replace (it keeps the partition until it stops, as Kafka's).
    eligible = {broker for broker in live if broker not in shutting_down}
    if state.has_leader and state.leader in live:
        if state.leader in shutting_down:
            others = [r for r in replicas if r in eligible and r in state.isr]
            if others:
                isr = tuple(member for member in state.isr if member in eligible)
                return PartitionState(others[0], state.leader_epoch + 1, isr, controller_epoch)
        isr = tuple(member for member in state.isr
                    if member in eligible or member == state.leader) or (state.leader,)
        if state.leader not in isr:
            isr = (state.leader, *isr)
        if isr == state.isr:
            return None
        return PartitionState(state.leader, state.leader_epoch, isr, controller_epoch)
    in_sync = [r for r in replicas if r in eligible and r in state.isr]
    if in_sync:
        leader = in_sync[0]
        isr = tuple(member for member in state.isr if member in eligible)
        return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch)
    if unclean:
        alive = [r for r in replicas if r in eligible]
        if alive:
            return PartitionState(alive[0], state.leader_epoch + 1, (alive[0],), controller_epoch)
    if not state.has_leader:
        return None  # offline already: wait for an in-sync replica
    return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr, controller_epoch)


class LeaderElector:
    """The controller's passes (module docstring); :meth:`start` once, :meth:`close` once."""

    def __init__(self, session: EtcdSession, keys: ClusterKeys, election: ControllerElection,
                 membership: Membership, view: ClusterView, poll_interval_s: float,
                 unclean_leader_election_enable: bool) -> None:
        self._session = session
        self._keys = keys
        self._election = election
        self._membership = membership
        self._view = view
        self._unclean_default = unclean_leader_election_enable
        self._poller = Poller(self.maybe_run_pass, poll_interval_s, "stratalog-leader-election",
                              "controller pass not made")
        self._pass_lock = asyncio.Lock()

    def wake(self) -> None:
        """Make a pass now rather than at the next poll (a new election was won)."""
        self._poller.wake()

    async def maybe_run_pass(self) -> int:
        """One pass if this server is controller; the number of partition states written.

        Raises what the etcd client raises when etcd does not answer.
        """
        async with self._pass_lock:
            if not self._election.is_controller:
                return 0
            epoch = self._election.known.epoch
            client = self._session.client
            stored = await client.get(self._keys.controller_epoch)
            if stored is None or int(stored.value or b"0") != epoch:
                return 0  # deposed: a newer election happened
            await self._membership.refresh()
            await self._view.refresh()
            live = set(self._membership.brokers)
            shutting_down = self._membership.shutting_down_brokers()
            written = 0
            for topic, assignment in sorted(self._view.topics.items()):
                unclean = unclean_enabled(assignment.configs, self._unclean_default)
                for partition, replicas in sorted(assignment.replicas.items()):
                    if await self._maybe_write(topic, partition, replicas, assignment, live,
                                               unclean, epoch, shutting_down):
                        written += 1
            if written:
                with contextlib.suppress(Exception):
                    await self._view.refresh()
            return written

    async def _maybe_write(self, topic: str, partition: int, replicas: tuple[int, ...],
                           assignment: TopicAssignment, live: set[int], unclean: bool,
                           epoch: int, shutting_down: Set[int]) -> bool:
        versioned = self._view.state(topic, partition)
        if versioned is None:
            state, revision = None, 0
            new = PartitionState(replicas[0], 0, replicas, epoch)
        else:
            state, revision = versioned
            new = next_state(replicas, state, live, unclean, epoch, shutting_down)
            if new is None:
                return False
        if not await self.write_state(topic, partition, new, revision, epoch):
            logger.info("%s-%d: not written (its state, its topic or the controller epoch"
                        " changed since this pass read them); the next pass reads them again",
                        topic, partition)
            return False
        if state is None:
            logger.info("%s-%d: wrote its first state %s (its creation stopped half-way)",
                        topic, partition, new)
        elif new.leader != state.leader and state.leader in shutting_down:
            logger.info("%s-%d: elected node %d leader at leader epoch %d, ISR %s (controlled"
                        " shutdown of node %d)", topic, partition, new.leader, new.leader_epoch,
                        list(new.isr), state.leader)
        elif new.leader != state.leader:
            if new.has_leader:
                logger.info(
                    "%s-%d: elected node %d leader at leader epoch %d, ISR %s (%s; the"
                    " previous leader %d is gone)", topic, partition, new.leader,
                    new.leader_epoch, list(new.isr),
                    "clean" if new.leader in state.isr else
                    "UNCLEAN: outside the ISR, records only the ISR had are lost",
                    state.leader)
            else:
                logger.warning(
                    "%s-%d: offline at leader epoch %d: no in-sync replica of %s is live"
                    " (unclean.leader.election.enable is false); it waits for one of them",
                    topic, partition, new.leader_epoch, list(state.isr))
        else:
            logger.info("%s-%d: ISR %s -> %s (dead or shutting-down brokers removed)", topic,
                        partition, list(state.isr), list(new.isr))
        return True

    async def write_state(self, topic: str, partition: int, state: PartitionState,
                          mod_revision: int, controller_epoch: int) -> bool:
        """Put ``state`` if the partition key is still at ``mod_revision`` (0: absent) and the
        controller epoch in etcd is still ``controller_epoch``; whether it was written.

        Raises what the etcd client raises when etcd does not answer.
        """
        client, keys = self._session.client, self._keys
        key = keys.partition(topic, partition)
        topic_key = keys.topic(topic)
        compare = [
            client.transactions.value(keys.controller_epoch) == str(controller_epoch).encode(),
            # The topic still exists: a state written after a DeleteTopic would be an orphan.
            client.transactions.create(topic_key) != 0,
        ]
        if mod_revision:
            compare.append(client.transactions.mod(key) == mod_revision)
        else:
            compare.append(client.transactions.create(key) == 0)
        succeeded, _ = await client.transaction(
            compare=compare, success=[client.transactions.put(key, state.encode())], failure=[],
        )
        return bool(succeeded)

    def start(self) -> None:
        self._poller.start()

    async def close(self) -> None:
        await self._poller.stop()
