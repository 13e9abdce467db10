"""What a member does with its partitions around a rebalance: which to revoke, lose, and take.

A consumer in a group changes what it reads at two moments (Kafka's ConsumerCoordinator,
``clients/src/main/java/org/apache/kafka/clients/consumer/internals/ConsumerCoordinator.java``):

* **Before it (re)joins** (:func:`before_join`, Kafka's onJoinPrepare). If it has lost its
  membership (the coordinator answered UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION, or its session
  expired), everything it held is *lost*: another member may own those partitions already, so
  it must not commit for them (the "lost" callback, not "revoked"). Otherwise, under the EAGER
  protocol it *revokes* everything (commits, then the revoked callback) and joins with nothing;
  under COOPERATIVE it revokes only the partitions of topics it no longer subscribes to and keeps
  reading the rest through the rebalance.
* **When its assignment arrives** (:func:`after_sync`, Kafka's onJoinComplete). The *added*
  partitions are assigned minus owned (the assigned callback, then it starts reading them at
  their committed offsets); under COOPERATIVE the *revoked* ones are owned minus assigned, and
  revoking any means a follow-up rebalance is needed: the partitions it gave up were left
  unassigned for their new owner, which gets them only when this member rejoins without them
  (:mod:`.cooperative_sticky_assignor`). An assignment naming a topic the member does not
  subscribe to (its subscription changed while it joined) is not applied: it rejoins with the
  current subscription.

Pure functions of sets; the caller applies the result (callbacks, fetch positions, commits).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from stratalog.client.types import TopicPartition

from .assignor import RebalanceProtocol

__all__ = ["AssignmentChange", "JoinPreparation", "after_sync", "before_join"]


@dataclass(frozen=True, slots=True)
class JoinPreparation:
    """What to give up before joining, and what is still owned (and reported) after.

    ``lost``: partitions to drop without committing (membership gone). ``revoked``: partitions
    to commit and then drop. ``owned``: what the member keeps, and reports as
    ``owned_partitions`` in its subscription. At most one of ``lost`` and ``revoked`` is
    non-empty.
    """

    lost: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition]
    owned: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class AssignmentChange:
    """The effect of one SyncGroup assignment on a member.

    ``applies``: False when the assignment names a topic the member does not subscribe to, in
    which case nothing else here is to be applied and the member rejoins. ``assigned``: all it
    owns after this rebalance. ``added``: assigned and not owned before (start reading these).
    ``revoked``: owned before and not assigned (COOPERATIVE only; stop reading these, commit,
    call the revoked callback). ``rejoin_reason``: why another rebalance is needed, ``None``
    when none is.
    """

    applies: bool
    assigned: frozenset[TopicPartition]
    added: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition]
    rejoin_reason: str | None

    @property
    def rejoin_needed(self) -> bool:
        return self.rejoin_reason is not None


def before_join(
    owned: Iterable[TopicPartition],
    subscribed_topics: Iterable[str],
    protocol: RebalanceProtocol,
    membership_lost: bool,
) -> JoinPreparation:
    """What a member gives up as it (re)joins (module docstring: "Before it (re)joins").

    ``membership_lost``: the member's generation or member id was reset (Kafka's
    ``generation == NO_GENERATION``): its partitions are lost, whatever the protocol.
    """
    owned = frozenset(owned)
    none: frozenset[TopicPartition] = frozenset()
    if membership_lost:
        return JoinPreparation(lost=owned, revoked=none, owned=none)
    if protocol is RebalanceProtocol.EAGER:
        return JoinPreparation(lost=none, revoked=owned, owned=none)
    topics = frozenset(subscribed_topics)
    revoked = frozenset(tp for tp in owned if tp.topic not in topics)
    return JoinPreparation(lost=none, revoked=revoked, owned=owned - revoked)


def after_sync(
    owned: Iterable[TopicPartition],
    assigned: Iterable[TopicPartition],
    subscribed_topics: Iterable[str],
    protocol: RebalanceProtocol,
) -> AssignmentChange:
    """The effect of the assignment ``assigned`` on a member owning ``owned`` (module docstring).

    ``owned`` is what :func:`before_join` left (empty under EAGER).
    """
    owned = frozenset(owned)
    assigned = frozenset(assigned)
    topics = frozenset(subscribed_topics)
    none: frozenset[TopicPartition] = frozenset()
    strangers = sorted({tp.topic for tp in assigned} - topics)
    if strangers:
        return AssignmentChange(
            applies=False,
            assigned=owned,
            added=none,
            revoked=none,
            rejoin_reason=(
                f"the assignment names topics {strangers} this member does not subscribe to: "
                f"the subscription changed since it joined"
            ),
        )
    added = assigned - owned
    if protocol is RebalanceProtocol.EAGER:
        return AssignmentChange(True, assigned, added, none, None)
    revoked = owned - assigned
    reason = None
    if revoked:
        reason = (
            f"revoked {len(revoked)} partitions: their new owners get them in the follow-up "
            f"rebalance"
        )
    return AssignmentChange(True, assigned, added, revoked, reason)
