"""Partition reassignment: a partition's replicas moved to a new list while it keeps serving,
and a server drained of every replica it holds (Kafka's AlterPartitionReassignments, KIP-455).

The design is Kafka's: the ZooKeeper-era controller's ``onPartitionReassignment``
(``core/src/main/scala/kafka/controller/KafkaController.scala``) with KRaft's rules for the
replica lists (``metadata/src/main/java/org/apache/kafka/controller/
PartitionReassignmentReplicas.java``, ``ReplicationControlManager.java``). While a partition
is being reassigned from its *original* replicas O to a *target* T, etcd records (in its
topic's assignment, partition_state.py)::

    replicas  = T followed by O - T            every replica of either list is a replica
    adding    = T - O                          the new replicas (create the log, fetch, join
    removing  = O - T                          the ISR); the replicas that will leave

**Start** (:meth:`Reassignments.alter`, on whichever member receives the request, as
CreateTopic: the etcd transaction is the serialisation point, and the controller's passes
below are what needs the controller)::

    check T: non-empty, no broker twice, every broker live   else InvalidReplicaAssignmentError
    O = the replicas without the ones an earlier reassignment of the partition was adding
        (a new target replaces the old one, as KRaft's: it is computed from the original)
    T has O's replicas                      no replica moves: T written as the replicas at
                                             once (a new order: a new preferred leader)
    one txn if mod_revision(<prefix>/topics/<t>) == R: put the assignment with the new
        replicas and adding/removing                         (a lost race re-reads, 5 times)

Each replica in ``adding`` sees itself among the replicas in its view and starts as a
follower (replica_roles.py creates the log, the fetcher catches up from the leader; the
leader counts it for nothing until it joins the ISR, exactly as a follower that fell behind).

**The controller's pass** (:meth:`Reassignments.maybe_advance`, every poll interval, only on
the controller, each write fenced by the controller epoch and the keys' mod revisions, as
leader_election.py's) makes one step per reassigning partition (:func:`next_step`)::

    leader in removing (or none) and a target replica is live and in the ISR
        -> move the leadership to the first such target replica: leader epoch + 1, ISR
           unchanged (a clean election, as preferred_leader.py's)
    every adding replica in the ISR, ISR - removing not empty, leader in the target
        -> complete: one txn puts replicas = T (the reassignment forgotten) and the partition
           state with ISR = ISR - removing (leader and epoch unchanged)
    else wait (the new replicas catch up; progress: ListPartitionReassignments)

The removed replicas see that they are replicas no more: they stop fetching, and
stray_logs.py deletes the topic's local logs on a server that holds no partition of the topic
any more. A server that keeps another partition of the topic keeps the moved partition's files
too (the storage holds topics whole), empty of new records and never served.

**Cancel** (Kafka's reassignment to null): the target becomes the original replicas again:
``adding`` empty, ``removing`` the replicas that were being added, so the same pass moves
the leadership back if a new replica had it and completes at once (the original replicas
never left: only a completed reassignment removes any).

**Drain** (:meth:`Reassignments.drain`): every partition with the node among its (target)
replicas is reassigned to its replicas without the node plus a replacement chosen by
replica_placement.py's :func:`~.replica_placement.replacement_broker` (racks respected, the
least loaded first); the node is last in no target, so the pass moves its leaderships off it
first, before any new replica has caught up, whenever another replica is in sync.

Deliberate differences from Kafka (docs/cluster.md): the leadership leaves a removed leader as
soon as a target replica is in sync (Kafka moves it when the new replicas are); completion
waits for the *adding* replicas only, not for original replicas that stay but are out of the
ISR (the partition was under-replicated before, and stays so; Kafka waits for the whole
target).

Crash behaviour: everything is in etcd; a new controller's first pass continues each
reassignment from the step etcd records. A step is one transaction: the partition is always
in one of the states above.

Concurrency: event-loop only; one pass at a time (its poller).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stratalog.server.storage.errors import UnknownTopicOrPartitionError

from .errors import (
    CoordinationUnavailableError,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
)
from .partition_state import PartitionReassignment, PartitionState, TopicAssignment
from .polling import Poller
from .replica_placement import replacement_broker

if TYPE_CHECKING:
    from .cluster_view import ClusterView, PartitionKey
    from .controller import ControllerElection
    from .layout import ClusterKeys
    from .leader_election import LeaderElector
    from .membership import Membership
    from .session import EtcdSession

__all__ = [
    "ALTER_ATTEMPTS_MAX",
    "ALTER_TIMEOUT_S",
    "Complete",
    "MoveLeader",
    "OngoingReassignment",
    "Reassignments",
    "Wait",
    "cancelled",
    "next_step",
    "reassigned",
]

logger = logging.getLogger(__name__)

#: Writes of one topic's reassignments tried before it fails (each lost race re-reads etcd).
ALTER_ATTEMPTS_MAX = 5
#: The longest an AlterPartitionReassignments or a drain waits for etcd, all calls together.
ALTER_TIMEOUT_S = 10.0

Replicas = tuple[int, ...]


# ---------------------------------------------------------------- the replica lists


def reassigned(replicas: Replicas, current: PartitionReassignment | None, target: Replicas
               ) -> tuple[Replicas, PartitionReassignment | None]:
    """The replicas and reassignment recorded when ``target`` is asked for a partition with
    ``replicas`` (and ``current``, its reassignment in progress, or None): module docstring.
    ``(target, None)`` when the target has the original replicas (perhaps in another order:
    written at once, as KRaft does, since no replica moves)."""
    original = current.original(replicas) if current is not None else replicas
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    if not adding and not removing:
        return target, None
    return (*target, *removing), PartitionReassignment(adding, removing)


def cancelled(replicas: Replicas, current: PartitionReassignment
              ) -> tuple[Replicas, PartitionReassignment | None]:
    """The replicas and reassignment recorded when ``current`` is cancelled: back to the
    original replicas (in their order), the ones being added now being removed."""
    original = current.original(replicas)
    if not current.adding:
        return original, None  # a removal only: the original replicas are all still there
    return (*original, *current.adding), PartitionReassignment((), current.adding)


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """A partition being reassigned, as ListPartitionReassignments answers it: its replicas
    (the target, then the ones being removed), the ones being added and removed, its leader
    (-1: none), and its progress where the answering server leads it: the leader's log end
    offset (-1: unknown here) and each follower's log end offset as of its last fetch (-1:
    none yet)."""

    topic: str
    partition: int
    replicas: Replicas
    adding: Replicas
    removing: Replicas
    leader: int = -1
    leader_log_end_offset: int = -1
    progress: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MoveLeader:
    """Step: write ``state`` (a target replica leads, epoch + 1)."""

    state: PartitionState


@dataclass(frozen=True, slots=True)
class Complete:
    """Step: write ``replicas`` (the target, the reassignment forgotten) and ``state``."""

    replicas: Replicas
    state: PartitionState


@dataclass(frozen=True, slots=True)
class Wait:
    """Step: nothing to write yet; ``why`` says what it waits for."""

    why: str


Step = MoveLeader | Complete | Wait


def next_step(replicas: Replicas, reassignment: PartitionReassignment, state: PartitionState,
              live: Set[int], controller_epoch: int) -> Step:
    """The controller's next step for a partition being reassigned (module docstring)."""
    target = reassignment.target(replicas)
    if not state.has_leader or state.leader in reassignment.removing:
        candidates = [r for r in target if r in live and r in state.isr]
        if candidates:
            return MoveLeader(PartitionState(candidates[0], state.leader_epoch + 1, state.isr,
                                             controller_epoch))
        return Wait(f"no replica of the target {list(target)} is live and in the ISR"
                    f" {list(state.isr)} to take the leadership from node {state.leader}")
    missing = [r for r in reassignment.adding if r not in state.isr]
    if missing:
        return Wait(f"replicas {missing} are not in the ISR {list(state.isr)} yet")
    isr = tuple(r for r in state.isr if r not in reassignment.removing)
    if not isr or state.leader not in isr:
        return Wait(f"the ISR {list(state.isr)} has no replica of the target {list(target)}")
    return Complete(target, PartitionState(state.leader, state.leader_epoch, isr,
                                           controller_epoch))


def check_target(target: Replicas, live: Set[int]) -> None:
    """Raises InvalidReplicaAssignmentError unless ``target`` is a usable replica list."""
    if not target:
        raise InvalidReplicaAssignmentError("the target replica list is empty")
    if len(set(target)) != len(target):
        raise InvalidReplicaAssignmentError(
            f"the target replicas {list(target)} name a broker more than once")
    dead = sorted(set(target) - set(live))
    if dead:
        raise InvalidReplicaAssignmentError(
            f"the target replicas {list(target)} name brokers {dead} that are not live"
            f" (live: {sorted(live)})")


# ---------------------------------------------------------------- etcd


class Reassignments:
    """Reassignment requests (:meth:`alter`, :meth:`drain`, any member) and the controller's
    passes (:meth:`maybe_advance`); :meth:`start` once, :meth:`close` once."""

    def __init__(self, session: EtcdSession, keys: ClusterKeys, election: ControllerElection,
                 membership: Membership, view: ClusterView, elector: LeaderElector,
                 poll_interval_s: float) -> None:
        self._session = session
        self._keys = keys
        self._election = election
        self._membership = membership
        self._view = view
        self._elector = elector
        self._poller = Poller(self.maybe_advance, poll_interval_s,
                              "stratalog-reassignments", "reassignments not advanced")

    # ---------------------------------------------------------------- requests

    async def alter(self, requested: Mapping[PartitionKey, Replicas | None]
                    ) -> dict[PartitionKey, Exception | None]:
        """Start (a target list) or cancel (None) the reassignment of each partition; each
        one's outcome: None (recorded) or the error saying why not
        (InvalidReplicaAssignmentError, NoReassignmentInProgressError,
        UnknownTopicOrPartitionError, CoordinationUnavailableError).

        Raises:
            CoordinationUnavailableError: etcd did not answer within :data:`ALTER_TIMEOUT_S`
                (the topics written before stand).
        """
        import aetcd  # single servers load no etcd client (the package's __init__ says why)

        try:
            async with asyncio.timeout(ALTER_TIMEOUT_S):
                await self._membership.refresh()
                live = set(self._membership.brokers)
                by_topic: dict[str, dict[int, Replicas | None]] = {}
                for (topic, number), target in requested.items():
                    by_topic.setdefault(topic, {})[number] = target
                outcomes: dict[PartitionKey, Exception | None] = {}
                for topic, targets in sorted(by_topic.items()):
                    outcomes.update(await self._alter_topic(topic, targets, live))
        except (TimeoutError, aetcd.ClientError, OSError) as exc:
            raise CoordinationUnavailableError(
                f"AlterPartitionReassignments needs etcd, which did not answer within"
                f" {ALTER_TIMEOUT_S:g} s ({self._session.endpoint}: {exc or type(exc).__name__});"
                " the topics written before stand: list the reassignments to find out"
            ) from exc
        with contextlib.suppress(Exception):  # seen at the next poll otherwise
            await self._view.refresh()
        self._poller.wake()
        return outcomes

    async def _alter_topic(self, topic: str, targets: Mapping[int, Replicas | None],
                           live: Set[int]) -> dict[PartitionKey, Exception | None]:
        client, key = self._session.client, self._keys.topic(topic)
        for _ in range(ALTER_ATTEMPTS_MAX):
            stored = await client.get(key)
            assignment = TopicAssignment.decode(stored.value) if stored is not None else None
            outcomes: dict[PartitionKey, Exception | None] = {}
            if stored is None or assignment is None:
                return {(topic, number): UnknownTopicOrPartitionError(
                    f"unknown topic {topic!r}") for number in targets}
            replicas = dict(assignment.replicas)
            reassigning = dict(assignment.reassigning)
            for number, target in sorted(targets.items()):
                outcome = self._alter_partition(topic, number, target, replicas, reassigning,
                                                live)
                outcomes[(topic, number)] = outcome
            altered = TopicAssignment(replicas, dict(assignment.configs), reassigning)
            if altered == assignment:
                return outcomes
            succeeded, _ = await client.transaction(
                compare=[client.transactions.mod(key) == stored.mod_revision],
                success=[client.transactions.put(key, altered.encode())],
                failure=[],
            )
            if succeeded:
                for (_, number), outcome in sorted(outcomes.items()):
                    if outcome is None:
                        self._log_recorded(topic, number, replicas[number],
                                           reassigning.get(number))
                return outcomes
        error = CoordinationUnavailableError(
            f"topic {topic} changed in etcd {ALTER_ATTEMPTS_MAX} times while its reassignments"
            " were being written; nothing written, retry")
        return {(topic, number): error for number in targets}

    @staticmethod
    def _log_recorded(topic: str, number: int, replicas: Replicas,
                      reassignment: PartitionReassignment | None) -> None:
        if reassignment is None:
            logger.info("%s-%d: no reassignment now: replicas %s", topic, number, list(replicas))
            return
        logger.info("%s-%d: reassignment of %s to %s recorded: adding %s, removing %s", topic,
                    number, list(reassignment.original(replicas)),
                    list(reassignment.target(replicas)), list(reassignment.adding),
                    list(reassignment.removing))

    @staticmethod
    def _alter_partition(topic: str, number: int, target: Replicas | None,
                         replicas: dict[int, Replicas],
                         reassigning: dict[int, PartitionReassignment],
                         live: Set[int]) -> Exception | None:
        """Apply one request to ``replicas`` and ``reassigning`` (changed in place); the
        partition's error, if refused."""
        if number not in replicas:
            return UnknownTopicOrPartitionError(f"{topic}-{number} does not exist")
        current = reassigning.get(number)
        if target is None:
            if current is None:
                return NoReassignmentInProgressError(
                    f"{topic}-{number} is not being reassigned: nothing to cancel")
            new_replicas, new = cancelled(replicas[number], current)
        else:
            try:
                check_target(target, live)
            except InvalidReplicaAssignmentError as exc:
                return exc
            new_replicas, new = reassigned(replicas[number], current, target)
        replicas[number] = new_replicas
        if new is None:
            reassigning.pop(number, None)
        else:
            reassigning[number] = new
        return None

    async def drain(self, node_id: int) -> dict[PartitionKey, Replicas | Exception]:
        """Reassign every partition with ``node_id`` among its target replicas to a target
        without it (module docstring); each partition's target, or the error saying why it
        could not be moved (InvalidReplicaAssignmentError: no broker can take the replica).

        Raises:
            CoordinationUnavailableError: etcd did not answer.
        """
        import aetcd

        try:
            async with asyncio.timeout(ALTER_TIMEOUT_S):
                await self._membership.refresh()
                await self._view.refresh()
        except (TimeoutError, aetcd.ClientError, OSError) as exc:
            raise CoordinationUnavailableError(
                f"a drain needs etcd, which did not answer within {ALTER_TIMEOUT_S:g} s"
                f" ({self._session.endpoint}: {exc or type(exc).__name__}); nothing written"
            ) from exc
        racks = {n: broker.rack for n, broker in self._membership.brokers.items()}
        load: dict[int, int] = dict.fromkeys(racks, 0)
        for assignment in self._view.topics.values():
            for number in assignment.replicas:
                for replica in assignment.target(number):
                    if replica in load:
                        load[replica] += 1
        planned: dict[PartitionKey, Replicas | Exception] = {}
        for topic, assignment in sorted(self._view.topics.items()):
            for number in sorted(assignment.replicas):
                target = assignment.target(number)
                if node_id not in target:
                    continue
                kept = tuple(r for r in target if r != node_id)
                replacement = replacement_broker(node_id, kept, racks, load)
                if replacement is None:
                    planned[(topic, number)] = InvalidReplicaAssignmentError(
                        f"no live broker other than {node_id} and the replicas {list(kept)}"
                        f" can take a replica of {topic}-{number} (live: {sorted(racks)})")
                    continue
                load[replacement] += 1
                planned[(topic, number)] = (*kept, replacement)
        requests = {key: target for key, target in planned.items()
                    if not isinstance(target, Exception)}
        if requests:
            for key, outcome in (await self.alter(requests)).items():
                if outcome is not None:
                    planned[key] = outcome
        return planned

    def listed(self, requested: Set[PartitionKey] | None = None
               ) -> dict[PartitionKey, tuple[Replicas, PartitionReassignment]]:
        """The partitions being reassigned (of ``requested``, or all) as this server's view
        has them: their replicas and reassignment. Call :meth:`refresh` first for etcd's."""
        listed: dict[PartitionKey, tuple[Replicas, PartitionReassignment]] = {}
        for topic, assignment in sorted(self._view.topics.items()):
            for number, reassignment in sorted(assignment.reassigning.items()):
                if requested is None or (topic, number) in requested:
                    listed[(topic, number)] = (assignment.replicas[number], reassignment)
        return listed

    async def refresh(self) -> None:
        """Read the view from etcd (CoordinationUnavailableError when it does not answer)."""
        import aetcd

        try:
            async with asyncio.timeout(ALTER_TIMEOUT_S):
                await self._view.refresh()
        except (TimeoutError, aetcd.ClientError, OSError) as exc:
            raise CoordinationUnavailableError(
                f"ListPartitionReassignments needs etcd, which did not answer within"
                f" {ALTER_TIMEOUT_S:g} s ({self._session.endpoint}: {exc or type(exc).__name__})"
            ) from exc

    # ---------------------------------------------------------------- the controller's pass

    async def maybe_advance(self) -> int:
        """One pass if this server is controller (module docstring); the steps written.

        Raises what the etcd client raises when etcd does not answer.
        """
        if not self._election.is_controller:
            return 0
        if not any(a.reassigning for a in self._view.topics.values()):
            return 0  # the view is read every poll: nothing to do, no etcd read
        epoch = self._election.known.epoch
        await self._membership.refresh()
        await self._view.refresh()
        # A broker in a controlled shutdown takes no leadership (controlled_shutdown.py).
        live = self._membership.leader_candidates()
        written = 0
        for topic, assignment in sorted(self._view.topics.items()):
            for number, reassignment in sorted(assignment.reassigning.items()):
                versioned = self._view.state(topic, number)
                if versioned is None:
                    continue  # its first state is the election pass's to write
                step = next_step(assignment.replicas[number], reassignment, versioned.state,
                                 live, epoch)
                if isinstance(step, Wait):
                    logger.debug("%s-%d: reassignment waits: %s", topic, number, step.why)
                    continue
                if isinstance(step, MoveLeader):
                    if await self._elector.write_state(topic, number, step.state,
                                                       versioned.mod_revision, epoch):
                        written += 1
                        logger.info("%s-%d: reassignment: leader moved to node %d at leader"
                                    " epoch %d (node %d is being removed)", topic, number,
                                    step.state.leader, step.state.leader_epoch,
                                    versioned.state.leader)
                    continue
                if await self._complete(topic, number, step, versioned.mod_revision, epoch):
                    written += 1
                    logger.info("%s-%d: reassignment complete: replicas %s, ISR %s (removed"
                                " %s)", topic, number, list(step.replicas),
                                list(step.state.isr), list(reassignment.removing))
                break  # the topic key moved: its other partitions at the next pass
        if written:
            with contextlib.suppress(Exception):
                await self._view.refresh()
        return written

    async def _complete(self, topic: str, number: int, step: Complete, state_revision: int,
                        epoch: int) -> bool:
        """One transaction: the topic's assignment with the partition's target and no
        reassignment, and its new state, if neither key moved since read and the controller
        epoch is still ``epoch``."""
        client, keys = self._session.client, self._keys
        stored = await client.get(keys.topic(topic))
        assignment = TopicAssignment.decode(stored.value) if stored is not None else None
        if stored is None or assignment is None or number not in assignment.reassigning:
            return False
        reassigning = dict(assignment.reassigning)
        reassignment = reassigning.pop(number)
        if reassignment.target(assignment.replicas[number]) != step.replicas:
            return False  # a new target since the pass read it: the next pass
        replicas = {**assignment.replicas, number: step.replicas}
        done = TopicAssignment(replicas, dict(assignment.configs), reassigning)
        partition_key = keys.partition(topic, number)
        succeeded, _ = await client.transaction(
            compare=[
                client.transactions.value(keys.controller_epoch) == str(epoch).encode(),
                client.transactions.mod(keys.topic(topic)) == stored.mod_revision,
                client.transactions.mod(partition_key) == state_revision,
            ],
            success=[client.transactions.put(keys.topic(topic), done.encode()),
                     client.transactions.put(partition_key, step.state.encode())],
            failure=[],
        )
        return bool(succeeded)

    def start(self) -> None:
        self._poller.start()

    def wake(self) -> None:
        """Run a pass now (a topic or partition key changed: a watch saw it; node.py)."""
        self._poller.wake()

    async def close(self) -> None:
        await self._poller.stop()
