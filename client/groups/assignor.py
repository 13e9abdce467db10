"""What every client-side assignor shares: its input, its contract, the leader's step, the checks.

In Kafka's classic group protocol the coordinator does not assign partitions: it picks one member
as the leader, hands it every member's subscription (JoinGroup), and passes on what the leader
computed (SyncGroup). The leader runs a *partition assignor*, named by the group's chosen
protocol (``range``, ``roundrobin``, ``cooperative-sticky``): a pure function from the partition
counts of the subscribed topics and the members' subscriptions to a list of partitions per
member. Every assignor here is deterministic (the same input gives the same output, whatever the
order the members arrive in), so that a new leader computes what the old one would have.

The contract (Kafka's ConsumerPartitionAssignor and AbstractPartitionAssignor,
``clients/src/main/java/org/apache/kafka/clients/consumer/``):

* every member of the input gets an entry, possibly empty;
* a partition goes to at most one member, and only to a member subscribed to its topic;
* topics missing from ``partitions_per_topic`` (no metadata) or with no partitions are skipped;
* an assignor that supports the COOPERATIVE protocol never gives a partition to a member while
  another member still owns it (reports it in ``owned_partitions``): the owner must revoke it
  first (:mod:`.cooperative_sticky_assignor`; Kafka's ConsumerCoordinator
  validateCooperativeAssignment checks the same).

:func:`check_assignment` tests that contract; :func:`perform_assignment` is the leader's whole
step on bytes (Kafka's ConsumerCoordinator.onLeaderElected): decode the subscriptions, assign,
check, encode.

Sans-IO: no state beyond what an assignor object keeps (the cooperative-sticky assignor's last
generation); not thread-safe, as a consumer runs its assignor from one task.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from stratalog.client.types import TopicPartition

from .consumer_protocol import (
    VERSION_MAX,
    Assignment,
    Subscription,
    decode_subscription,
    encode_assignment,
)

__all__ = [
    "JoinedMember",
    "Member",
    "PartitionAssignor",
    "RebalanceProtocol",
    "all_partitions",
    "check_assignment",
    "member_sort_key",
    "perform_assignment",
]


class RebalanceProtocol(enum.Enum):
    """How members give up partitions in a rebalance (Kafka's ConsumerPartitionAssignor.RebalanceProtocol).

    EAGER: every member revokes everything before it rejoins, and is given its partitions anew.
    COOPERATIVE (KIP-429): members keep their partitions through the rebalance and revoke only
    what the new assignment takes away; a partition moving to another member is assigned there
    in a follow-up rebalance, once its owner has revoked it.
    """

    EAGER = 0
    COOPERATIVE = 1


@dataclass(frozen=True, slots=True)
class Member:
    """One member as the leader sees it: its id, its static ``group.instance.id``, its subscription."""

    member_id: str
    subscription: Subscription
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One member of a JoinGroup response, before its metadata is decoded."""

    member_id: str
    metadata: bytes
    group_instance_id: str | None = None


def member_sort_key(member: Member) -> tuple[int, str]:
    """The order range and round-robin lay members out in (Kafka's AbstractPartitionAssignor.MemberInfo).

    Static members first, by ``group.instance.id``; then the others by member id. A static
    member keeps its place across restarts (a new member id each time), so it keeps its
    partitions.
    """
    if member.group_instance_id is not None:
        return (0, member.group_instance_id)
    return (1, member.member_id)


def all_partitions(
    partitions_per_topic: Mapping[str, int], topics: Iterable[str]
) -> list[TopicPartition]:
    """Every partition of ``topics`` that ``partitions_per_topic`` knows, by topic then number."""
    return [
        TopicPartition(topic, partition)
        for topic in sorted(set(topics))
        for partition in range(partitions_per_topic.get(topic, 0))
    ]


class PartitionAssignor(ABC):
    """A client-side assignor: the group protocol named :attr:`name`.

    Subclasses implement :meth:`assign`; the hooks :meth:`subscription_user_data` and
    :meth:`on_assignment` carry an assignor's own state between rebalances (only the
    cooperative-sticky one has any).
    """

    #: The protocol name members advertise in JoinGroup (Kafka's ``name()``).
    name: str
    #: The rebalance protocols it supports, preferred first (Kafka's ``supportedProtocols()``).
    supported_protocols: tuple[RebalanceProtocol, ...] = (RebalanceProtocol.EAGER,)

    @abstractmethod
    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[Member]
    ) -> dict[str, list[TopicPartition]]:
        """The partitions of each member, keyed by member id.

        ``partitions_per_topic``: the partition count of each subscribed topic the leader has
        metadata for. ``members``: every member, with distinct member ids.

        Raises:
            ValueError: two members with the same member id.
        """

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        """The user data this member puts in its subscription; ``None`` for none."""
        return None

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """Called with this member's assignment and the group's generation after each SyncGroup."""
        return None


def members_by_id(members: Sequence[Member]) -> dict[str, Member]:
    """``members`` keyed by member id; refuses a duplicate id (the leader's input is a group)."""
    by_id: dict[str, Member] = {}
    for member in members:
        if member.member_id in by_id:
            raise ValueError(f"member id {member.member_id!r} appears twice among the members")
        by_id[member.member_id] = member
    return by_id


def check_assignment(
    partitions_per_topic: Mapping[str, int],
    members: Sequence[Member],
    assignment: Mapping[str, Sequence[TopicPartition]],
    protocol: RebalanceProtocol = RebalanceProtocol.EAGER,
) -> None:
    """Raise ValueError naming the first way ``assignment`` breaks the assignor contract.

    Checks: exactly the members' ids are keys; every partition exists, goes to one member only,
    and to a subscriber of its topic; and, for COOPERATIVE, no partition goes to a member while
    another member reports owning it (Kafka's ConsumerCoordinator.validateCooperativeAssignment).
    Does not check balance or completeness: a partition may stay unassigned (the cooperative
    protocol's first phase leaves moving partitions so).
    """
    by_id = members_by_id(members)
    if set(assignment) != set(by_id):
        missing = sorted(set(by_id) - set(assignment))
        extra = sorted(set(assignment) - set(by_id))
        raise ValueError(f"assignment keys differ from the members: missing {missing}, extra {extra}")
    owner_of: dict[TopicPartition, str] = {}
    for member_id in sorted(assignment):
        subscribed = set(by_id[member_id].subscription.topics)
        for tp in assignment[member_id]:
            if not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                raise ValueError(f"{member_id} is assigned {tp}, which does not exist")
            if tp.topic not in subscribed:
                raise ValueError(f"{member_id} is assigned {tp} but does not subscribe to {tp.topic!r}")
            if tp in owner_of:
                raise ValueError(f"{tp} is assigned to both {owner_of[tp]} and {member_id}")
            owner_of[tp] = member_id
    if protocol is RebalanceProtocol.COOPERATIVE:
        for member_id, member in sorted(by_id.items()):
            for tp in member.subscription.owned_partitions:
                new_owner = owner_of.get(tp)
                if new_owner is not None and new_owner != member_id and (
                    tp not in by_id[new_owner].subscription.owned_partitions
                ):
                    raise ValueError(
                        f"{tp} is assigned to {new_owner} while {member_id} still owns it: "
                        f"the cooperative protocol must leave it unassigned until it is revoked"
                    )


def perform_assignment(
    assignor: PartitionAssignor,
    partitions_per_topic: Mapping[str, int],
    joined: Sequence[JoinedMember],
    protocol: RebalanceProtocol = RebalanceProtocol.EAGER,
    version: int = VERSION_MAX,
) -> dict[str, bytes]:
    """The leader's step: JoinGroup's member metadata in, SyncGroup's assignment bytes out.

    Decodes each member's subscription, keeps the topics some member subscribes to that
    ``partitions_per_topic`` knows, runs ``assignor``, checks the result against the contract
    (for ``protocol``), and encodes each member's assignment at ``version`` (Kafka's
    ConsumerCoordinator.onLeaderElected writes the newest version; a reader of an older one
    reads the fields it knows).

    Raises:
        ConsumerProtocolError: a member's metadata does not decode.
        ValueError: two members with one id, or an assignor that broke the contract (a bug).
    """
    members = [
        Member(m.member_id, decode_subscription(m.metadata), m.group_instance_id) for m in joined
    ]
    subscribed = {topic for member in members for topic in member.subscription.topics}
    known = {t: n for t, n in partitions_per_topic.items() if t in subscribed and n > 0}
    assignment = assignor.assign(known, members)
    check_assignment(known, members, assignment, protocol)
    return {
        member_id: encode_assignment(Assignment(tuple(partitions)), version)
        for member_id, partitions in assignment.items()
    }
