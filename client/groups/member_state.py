"""Where a group member is in the protocol, and what it has asked its driver to send.

:class:`MemberState` is Kafka's MemberState
(``clients/src/main/java/org/apache/kafka/clients/consumer/internals/AbstractCoordinator.java``)
with the commit before a JoinGroup made a state of its own (PREPARING), since here it is a
round trip the member waits for instead of a blocking call. :class:`InFlight` is the member's
note about one Send until the driver reports its outcome: what it was for (:class:`RequestKind`),
the *epoch* it was sent in (bumped whenever the coordinator is lost or the member leaves, so an
answer that comes after is dropped), the generation it named, and for commits and offset
fetches what they covered. Plain values; the member owns them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from stratalog.client import errors
from stratalog.client.types import TopicPartition

__all__ = [
    "COORDINATOR_LOST", "NO_GENERATION", "NO_MEMBER_ID", "InFlight", "MemberState", "RequestKind",
]

#: Kafka's "no generation" and "no member id" (Generation.NO_GENERATION).
NO_GENERATION = -1
NO_MEMBER_ID = ""

#: The errors that mean "the coordinator is not (or no longer) there": find it again (Kafka's
#: markCoordinatorUnknown on NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and a disconnect; a
#: deadline passed is a disconnect here, as the answer will not come).
COORDINATOR_LOST = (
    errors.NotCoordinatorError, errors.CoordinatorNotAvailableError,
    errors.BrokerUnavailableError, errors.RequestTimeoutError,
)


class MemberState(enum.Enum):
    """Where the member is in the protocol (module docstring's diagram)."""

    UNJOINED = "unjoined"
    PREPARING = "preparing"   # committing, then revoking, before a JoinGroup
    JOINING = "joining"       # JoinGroup in flight
    SYNCING = "syncing"       # in a new generation: partition counts (leader) or SyncGroup
    STABLE = "stable"


class RequestKind(enum.Enum):
    """What a Send was for; the COMMIT_ kinds differ in what follows their outcome."""

    FIND = "find"
    JOIN = "join"
    SYNC = "sync"
    HEARTBEAT = "heartbeat"
    LEAVE = "leave"
    FETCH = "fetch"
    COMMIT_USER = "commit"           # the application's; answered with CommitDone
    COMMIT_AUTO = "auto-commit"
    COMMIT_PREPARE = "commit before join"
    COMMIT_REVOKE = "commit before revocation"
    COMMIT_LEAVE = "commit before leaving"


@dataclass(slots=True)
class InFlight:
    """One Send awaiting its outcome (module docstring)."""

    kind: RequestKind
    epoch: int                         # the coordinator epoch it was sent in
    generation: int = NO_GENERATION
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    token: object = None
    partitions: tuple[TopicPartition, ...] = ()
