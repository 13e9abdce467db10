"""The error tree of ``stratalog.server.groups``: what the group coordinator refuses.

Each leaf is one of Kafka's group errors (``org.apache.kafka.common.protocol.Errors``) and
carries its wire ``code``, its Kafka ``kafka_name`` and ``retriable``: whether a client that sends
the same request again may succeed without doing anything else first (Kafka's
``RetriableException``; kafka-python's ``kafka.errors`` agrees, tests/unit/server/groups/
test_group_errors.py checks it). The coordinator does not raise these across its API: a refused
request is answered with a response whose ``error`` holds the instance (as Kafka answers with an
error code), so one front end (gRPC, or a Kafka wire-protocol listener) turns them into its own
statuses at one boundary. Programmer errors (an impossible state transition) are assertions.

    GroupError
    ├── CoordinatorLoadInProgressError  14 retriable: the coordinator is replaying its partition
    ├── CoordinatorNotAvailableError    15 retriable: the group is Dead (deleted, or moving away)
    ├── NotCoordinatorError             16 retriable: this coordinator does not own the group
    ├── OffsetMetadataTooLargeError     12: a commit's metadata is over offset.metadata.max.bytes
    ├── IllegalGenerationError          22: the request's generation is not the group's
    ├── InconsistentGroupProtocolError  23: protocol type or names do not match the group's
    ├── InvalidGroupIdError             24: an empty or over-long group id
    ├── UnknownMemberIdError            25: the member id is not in the group
    ├── InvalidSessionTimeoutError      26: session timeout outside the configured bounds
    ├── RebalanceInProgressError        27: the group is rebalancing; rejoin
    ├── NonEmptyGroupError              68: the group still has members (delete, offset delete)
    ├── GroupIdNotFoundError            69: no such group
    ├── MemberIdRequiredError           79: first join of a dynamic member (KIP-394): rejoin
    │                                       with the member id in the response
    ├── GroupMaxSizeReachedError        81: the group has group.max.size members already
    ├── FencedInstanceIdError           82: another member holds this group.instance.id
    ├── UnstableOffsetCommitError       88 retriable: a transaction holds offsets (KIP-447)
    └── UnknownServerError              -1: a write to __consumer_offsets failed unexpectedly
"""

from __future__ import annotations

__all__ = [
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "FencedInstanceIdError",
    "GroupError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "InconsistentGroupProtocolError",
    "InvalidGroupIdError",
    "InvalidSessionTimeoutError",
    "MemberIdRequiredError",
    "NonEmptyGroupError",
    "NotCoordinatorError",
    "OffsetMetadataTooLargeError",
    "RebalanceInProgressError",
    "UnknownMemberIdError",
    "UnknownServerError",
    "UnstableOffsetCommitError",
]


class GroupError(Exception):
    """Base of every operating error of the group coordinator."""

    #: Kafka's error code on the wire (``Errors.code()``).
    code = -1
    #: Kafka's name of the error (``Errors.name()``).
    kafka_name = "UNKNOWN_SERVER_ERROR"
    #: Whether the same request, sent again unchanged, may succeed.
    retriable = False

    def __eq__(self, other: object) -> bool:
        # Responses are compared in tests; two errors of one kind with one message are equal.
        return type(self) is type(other) and self.args == other.args  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash((type(self), self.args))


class CoordinatorLoadInProgressError(GroupError):
    """COORDINATOR_LOAD_IN_PROGRESS: the coordinator is still replaying ``__consumer_offsets``."""

    code, kafka_name, retriable = 14, "COORDINATOR_LOAD_IN_PROGRESS", True


class CoordinatorNotAvailableError(GroupError):
    """COORDINATOR_NOT_AVAILABLE: the group is Dead here (deleted, or its partition moved)."""

    code, kafka_name, retriable = 15, "COORDINATOR_NOT_AVAILABLE", True


class NotCoordinatorError(GroupError):
    """NOT_COORDINATOR: this coordinator is closed or no longer owns the group's partition."""

    code, kafka_name, retriable = 16, "NOT_COORDINATOR", True


class OffsetMetadataTooLargeError(GroupError):
    """OFFSET_METADATA_TOO_LARGE: a commit's metadata string is over the configured bound."""

    code, kafka_name = 12, "OFFSET_METADATA_TOO_LARGE"


class IllegalGenerationError(GroupError):
    """ILLEGAL_GENERATION: the request names a generation that is not the group's current one."""

    code, kafka_name = 22, "ILLEGAL_GENERATION"


class InconsistentGroupProtocolError(GroupError):
    """INCONSISTENT_GROUP_PROTOCOL: the protocol type or every protocol name misfits the group."""

    code, kafka_name = 23, "INCONSISTENT_GROUP_PROTOCOL"


class InvalidGroupIdError(GroupError):
    """INVALID_GROUP_ID: an empty group id, or one longer than ``group_id_max_length``."""

    code, kafka_name = 24, "INVALID_GROUP_ID"


class UnknownMemberIdError(GroupError):
    """UNKNOWN_MEMBER_ID: the member id (or the static instance) is not in the group."""

    code, kafka_name = 25, "UNKNOWN_MEMBER_ID"


class InvalidSessionTimeoutError(GroupError):
    """INVALID_SESSION_TIMEOUT: outside [group.min.session.timeout.ms, group.max.session...]."""

    code, kafka_name = 26, "INVALID_SESSION_TIMEOUT"


class RebalanceInProgressError(GroupError):
    """REBALANCE_IN_PROGRESS: the group is rebalancing; the member must rejoin."""

    code, kafka_name = 27, "REBALANCE_IN_PROGRESS"


class NonEmptyGroupError(GroupError):
    """NON_EMPTY_GROUP: the group still has members (DeleteGroups, OffsetDelete)."""

    code, kafka_name = 68, "NON_EMPTY_GROUP"


class GroupIdNotFoundError(GroupError):
    """GROUP_ID_NOT_FOUND: no group with this id on this coordinator."""

    code, kafka_name = 69, "GROUP_ID_NOT_FOUND"


class MemberIdRequiredError(GroupError):
    """MEMBER_ID_REQUIRED: a dynamic member's first join (KIP-394); rejoin with the given id."""

    code, kafka_name = 79, "MEMBER_ID_REQUIRED"


class GroupMaxSizeReachedError(GroupError):
    """GROUP_MAX_SIZE_REACHED: the group already has ``group_max_size`` members."""

    code, kafka_name = 81, "GROUP_MAX_SIZE_REACHED"


class FencedInstanceIdError(GroupError):
    """FENCED_INSTANCE_ID: another member id holds this ``group.instance.id`` now."""

    code, kafka_name = 82, "FENCED_INSTANCE_ID"


class UnstableOffsetCommitError(GroupError):
    """UNSTABLE_OFFSET_COMMIT: an open transaction holds offsets of the partition (KIP-447)."""

    code, kafka_name, retriable = 88, "UNSTABLE_OFFSET_COMMIT", True


class GroupSubscribedToTopicError(GroupError):
    """GROUP_SUBSCRIBED_TO_TOPIC: OffsetDelete of a topic the group's members subscribe to."""

    code, kafka_name = 86, "GROUP_SUBSCRIBED_TO_TOPIC"


class UnknownServerError(GroupError):
    """UNKNOWN_SERVER_ERROR: the caller's write to ``__consumer_offsets`` failed."""

    code, kafka_name = -1, "UNKNOWN_SERVER_ERROR"
