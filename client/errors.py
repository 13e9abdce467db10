"""gRPC statuses back to exceptions: the client's half of the error contract.

The server answers a failed request with a gRPC status code and, in the
``grpc-status-details-bin`` trailer, a ``google.rpc.Status`` holding a ``google.rpc.ErrorInfo``
(``reason`` = an ErrorReason name of broker.proto, ``domain`` = "stratalog", ``metadata`` =
string pairs such as the log's bounds). :func:`from_rpc_error` reads that back into one exception
class per reason, so callers write ``except OffsetOutOfRangeError as e: seek(e.log_start_offset)``
and retry loops test one flag, ``retriable``. Failures that never reached our servicer (no server
listening, connection lost, deadline passed) have no ErrorInfo and map by status code alone.

    StratalogError                    code, reason, message, metadata, retriable
    ├── UnknownTopicOrPartitionError  NOT_FOUND          UNKNOWN_TOPIC_OR_PARTITION
    ├── OffsetOutOfRangeError         OUT_OF_RANGE       OFFSET_OUT_OF_RANGE  .log_start_offset
    │                                                                         .log_end_offset
    ├── CorruptRecordError            INVALID_ARGUMENT   CORRUPT_RECORD
    ├── InvalidRecordError            INVALID_ARGUMENT   INVALID_RECORD
    ├── RecordTooLargeError           INVALID_ARGUMENT   RECORD_TOO_LARGE
    ├── InvalidTopicError             INVALID_ARGUMENT   INVALID_TOPIC
    ├── InvalidTimestampError         INVALID_ARGUMENT   INVALID_TIMESTAMP
    ├── InvalidConfigError            INVALID_ARGUMENT   INVALID_CONFIG
    ├── InvalidRequestError           INVALID_ARGUMENT   INVALID_REQUEST
    ├── TopicAlreadyExistsError       ALREADY_EXISTS     TOPIC_ALREADY_EXISTS
    ├── StorageFullError              RESOURCE_EXHAUSTED STORAGE_FULL
    ├── StorageError                  UNAVAILABLE        STORAGE_ERROR         retriable
    ├── ShuttingDownError             UNAVAILABLE        SHUTTING_DOWN         retriable
    ├── ResourceLimitExceededError    RESOURCE_EXHAUSTED RESOURCE_LIMIT_EXCEEDED retriable .limit
    │   └── ConcurrentRpcLimitError   RESOURCE_EXHAUSTED (no ErrorInfo: gRPC's)  retriable
    ├── MessageTooLargeError          RESOURCE_EXHAUSTED (no ErrorInfo: gRPC's)
    ├── AuthenticationError           UNAUTHENTICATED    AUTHENTICATION_FAILED
    ├── NotAuthorizedError            PERMISSION_DENIED  NOT_AUTHORIZED
    ├── (the producer-state and transaction reasons of broker.proto, one class each)
    ├── (the replication reasons of issue 17, one class each: see below)
    ├── (the consumer-group reasons of issue 27, one class each: see below)
    ├── BrokerUnavailableError        UNAVAILABLE        (no ErrorInfo)        retriable
    │   └── TlsHandshakeError         (the client's diagnosis of a TLS set-up that does not
    │                                  match the server's) .problem .detail .address
    ├── RequestTimeoutError           DEADLINE_EXCEEDED  (no ErrorInfo)        retriable
    │   └── DeliveryTimeoutError      (Producer) not acknowledged within delivery_timeout_ms
    ├── TransactionAbortedError       (Producer) ABORTED: the batch's transaction was aborted
    ├── CommitFailedError             (group member) FAILED_PRECONDITION: a commit of a past
    │                                  generation, or of a member no longer in the group
    └── NoOffsetForPartitionError     (group member) OUT_OF_RANGE: nothing committed and
                                       auto_offset_reset="none"  .partitions

gRPC itself answers RESOURCE_EXHAUSTED, without ErrorInfo, in two cases that call for opposite
handling, told apart by the status details (grpc core's wording, :data:`_GRPC_RESOURCE_EXHAUSTED`):
the server already serves ``max_concurrent_rpcs`` calls ("Concurrent RPC limit exceeded!"),
which frees as they end, so :class:`ConcurrentRpcLimitError` is retriable; a message is larger
than a side's limit ("SERVER: Received message larger than max (N vs. M)", also "Sent" and
"CLIENT:"), which the same request hits again, so :class:`MessageTooLargeError` is not.

The replication reasons (issue 17, docs/cluster.md), Kafka's names and retriable flags:

    NotLeaderOrFollowerError          UNAVAILABLE        NOT_LEADER_OR_FOLLOWER   retriable .leader_id
    │                                                                       .leader_epoch .leader_address
    LeaderNotAvailableError           UNAVAILABLE        LEADER_NOT_AVAILABLE     retriable
    UnknownLeaderEpochError           UNAVAILABLE        UNKNOWN_LEADER_EPOCH     retriable
    FencedLeaderEpochError            FAILED_PRECONDITION FENCED_LEADER_EPOCH
    NotEnoughReplicasError            UNAVAILABLE        NOT_ENOUGH_REPLICAS      retriable
    NotEnoughReplicasAfterAppendError UNAVAILABLE        NOT_ENOUGH_REPLICAS_AFTER_APPEND retriable
    ReplicationTimeoutError           DEADLINE_EXCEEDED  REQUEST_TIMED_OUT        retriable
    InvalidReplicationFactorError     INVALID_ARGUMENT   INVALID_REPLICATION_FACTOR
    CoordinationUnavailableError      UNAVAILABLE        COORDINATION_UNAVAILABLE retriable
    InvalidPartitionsError            INVALID_ARGUMENT   INVALID_PARTITIONS
    ElectionNotNeededError            FAILED_PRECONDITION ELECTION_NOT_NEEDED
    PreferredLeaderNotAvailableError  UNAVAILABLE        PREFERRED_LEADER_NOT_AVAILABLE
    EligibleLeadersNotAvailableError  UNAVAILABLE        ELIGIBLE_LEADERS_NOT_AVAILABLE
    InvalidReplicaAssignmentError     INVALID_ARGUMENT   INVALID_REPLICA_ASSIGNMENT
    NoReassignmentInProgressError     FAILED_PRECONDITION NO_REASSIGNMENT_IN_PROGRESS

The first three say "ask someone else": the Client refreshes its metadata (the leader hint of
NOT_LEADER_OR_FOLLOWER first) and sends the request to the partition's leader again
(:mod:`stratalog.client.client`, "Routing"). The replica counts and the replication timeout say
"the leader has it, the followers do not yet": the idempotent Producer resends the same batch,
which the leader answers as a duplicate if it was stored.

The consumer-group reasons (issue 27, docs/groups.md), Kafka's names and retriable flags:

    CoordinatorNotAvailableError      UNAVAILABLE        COORDINATOR_NOT_AVAILABLE retriable
    NotCoordinatorError               UNAVAILABLE        NOT_COORDINATOR          retriable
    (CoordinatorLoadInProgressError   UNAVAILABLE        COORDINATOR_LOAD_IN_PROGRESS retriable: above)
    UnknownMemberIdError              FAILED_PRECONDITION UNKNOWN_MEMBER_ID
    IllegalGenerationError            FAILED_PRECONDITION ILLEGAL_GENERATION
    RebalanceInProgressError          ABORTED            REBALANCE_IN_PROGRESS    retriable
    FencedInstanceIdError             FAILED_PRECONDITION FENCED_INSTANCE_ID
    MemberIdRequiredError             FAILED_PRECONDITION MEMBER_ID_REQUIRED       .member_id
    GroupMaxSizeReachedError          RESOURCE_EXHAUSTED GROUP_MAX_SIZE_REACHED
    InconsistentGroupProtocolError    FAILED_PRECONDITION INCONSISTENT_GROUP_PROTOCOL
    InvalidGroupIdError               INVALID_ARGUMENT   INVALID_GROUP_ID
    InvalidSessionTimeoutError        INVALID_ARGUMENT   INVALID_SESSION_TIMEOUT
    NonEmptyGroupError                FAILED_PRECONDITION NON_EMPTY_GROUP
    GroupIdNotFoundError              NOT_FOUND          GROUP_ID_NOT_FOUND
    UnstableOffsetCommitError         UNAVAILABLE        UNSTABLE_OFFSET_COMMIT   retriable
    OffsetMetadataTooLargeError       INVALID_ARGUMENT   OFFSET_METADATA_TOO_LARGE
    GroupSubscribedToTopicError       FAILED_PRECONDITION GROUP_SUBSCRIBED_TO_TOPIC

The first two say "ask FindCoordinator again"; COORDINATOR_LOAD_IN_PROGRESS and
UNSTABLE_OFFSET_COMMIT "the same coordinator, shortly"; REBALANCE_IN_PROGRESS "join the group
again". UNKNOWN_MEMBER_ID and ILLEGAL_GENERATION are not retried as they are: the member's
partitions are lost and it joins anew (:mod:`stratalog.client.groups.group_membership`).

A request on a Session stream (docs/api.md, "Sessions") that fails is answered with a
``SessionError`` holding the same status code, message, reason and metadata its unary call would
have ended with; :func:`from_session_error` reads it into the same exception, through the same
table.

Any other status (INTERNAL, UNKNOWN, UNIMPLEMENTED, CANCELLED, another RESOURCE_EXHAUSTED without
ErrorInfo, a reason this client does not know yet) becomes a plain :class:`StratalogError`
carrying the code and reason it got; it is retriable only for UNAVAILABLE, DEADLINE_EXCEEDED and
CANCELLED (the server cancelled the call). Why each flag is what it is: docs/api.md, "Errors".
"""

from __future__ import annotations

import logging
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from stratalog.v1 import broker_pb2

if TYPE_CHECKING:
    from .tls_diagnosis import TlsProblem

__all__ = [
    "DOMAIN",
    "ERRORS_BY_REASON",
    "AuthenticationError",
    "BrokerUnavailableError",
    "CommitFailedError",
    "ConcurrentRpcLimitError",
    "ConcurrentTransactionsError",
    "CoordinationUnavailableError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptRecordError",
    "DeliveryTimeoutError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "FencedInstanceIdError",
    "FencedLeaderEpochError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "InconsistentGroupProtocolError",
    "InvalidConfigError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidSessionTimeoutError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "LeaderNotAvailableError",
    "MemberIdRequiredError",
    "MessageTooLargeError",
    "NoOffsetForPartitionError",
    "NoReassignmentInProgressError",
    "NonEmptyGroupError",
    "NotAuthorizedError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PreferredLeaderNotAvailableError",
    "ProducerFencedError",
    "RebalanceInProgressError",
    "RecordTooLargeError",
    "ReplicationTimeoutError",
    "RequestTimeoutError",
    "ResourceLimitExceededError",
    "ShuttingDownError",
    "StorageError",
    "StorageFullError",
    "StratalogError",
    "TlsHandshakeError",
    "TopicAlreadyExistsError",
    "TransactionAbortedError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdNotFoundError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownTopicOrPartitionError",
    "UnstableOffsetCommitError",
    "from_error_reason",
    "from_rpc_error",
    "from_session_error",
]

logger = logging.getLogger(__name__)

#: ``ErrorInfo.domain`` of the errors our server sends; ErrorInfo of other domains is ignored.
DOMAIN = "stratalog"

# The trailer grpcio-status writes the serialized google.rpc.Status into.
_STATUS_DETAILS_KEY = "grpc-status-details-bin"

# Status codes that mean "try again" whatever sent them (gRPC's own guidance for UNAVAILABLE).
# CANCELLED reaches a caller only when the other side cancelled the call (a cancel of our own
# raises asyncio.CancelledError instead): a server stopping cancels what is left after its
# shutdown grace, and the request's outcome is then unknown, as after a lost connection.
_RETRIABLE_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)


class StratalogError(Exception):
    """A request failed; the base of every error the client raises for a server's answer.

    Holds ``code`` (grpc.StatusCode), ``reason`` (an ErrorReason name, or ``None`` when the
    status carried no ErrorInfo), ``message`` (the status message), ``metadata`` (the ErrorInfo's
    string pairs, possibly empty) and ``retriable`` (whether sending the same request again may
    succeed). Subclasses fix ``code``, ``reason`` and ``retriable`` as class attributes; an
    instance may override them (an unknown reason arrives as a plain StratalogError).
    Immutable after construction by convention; safe to share between threads and tasks.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    reason: str | None = None
    retriable: bool = False

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
        retriable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if reason is not None:
            self.reason = reason
        if retriable is not None:
            self.retriable = retriable
        self.metadata: dict[str, str] = dict(metadata or {})

    def __str__(self) -> str:
        label = self.reason or self.code.name
        return f"{label}: {self.message}" if self.message else label

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, code={self.code.name}, "
            f"reason={self.reason!r}, retriable={self.retriable}, metadata={self.metadata!r})"
        )


class UnknownTopicOrPartitionError(StratalogError):
    """No such topic, or no such partition of it."""

    code = grpc.StatusCode.NOT_FOUND
    reason = "UNKNOWN_TOPIC_OR_PARTITION"


class OffsetOutOfRangeError(StratalogError):
    """The offset is below the log start offset or past the log end offset.

    ``log_start_offset`` and ``log_end_offset`` hold the partition's bounds when the server sent
    them (it always does), else ``None``: a consumer resets to one of them.
    """

    code = grpc.StatusCode.OUT_OF_RANGE
    reason = "OFFSET_OUT_OF_RANGE"

    def __init__(self, message: str, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.log_start_offset = _int_or_none(self.metadata.get("log_start_offset"))
        self.log_end_offset = _int_or_none(self.metadata.get("log_end_offset"))


class CorruptRecordError(StratalogError):
    """The record batches sent do not parse (CRC mismatch, truncation, bad lengths)."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "CORRUPT_RECORD"


class InvalidRecordError(StratalogError):
    """The batches parse but hold something the server refuses (magic, counts, codec id)."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_RECORD"


class RecordTooLargeError(StratalogError):
    """A batch or an append larger than the topic or server allows."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "RECORD_TOO_LARGE"


class InvalidTopicError(StratalogError):
    """A topic name or partition count that is not allowed."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_TOPIC"


class InvalidTimestampError(StratalogError):
    """A record timestamp outside the topic's accepted window."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_TIMESTAMP"


class InvalidConfigError(StratalogError):
    """An unknown topic config name or a value out of its range."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_CONFIG"


class InvalidRequestError(StratalogError):
    """A request of the wrong shape (both or neither records fields, a negative max_bytes)."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_REQUEST"


class TopicAlreadyExistsError(StratalogError):
    """A topic of that name exists already."""

    code = grpc.StatusCode.ALREADY_EXISTS
    reason = "TOPIC_ALREADY_EXISTS"


class StorageFullError(StratalogError):
    """The server's disk is full; not retried, as only retention or an operator frees space."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "STORAGE_FULL"


class StorageError(StratalogError):
    """The server failed to read or write its log files (I/O error, damaged index)."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "STORAGE_ERROR"
    retriable = True


class ShuttingDownError(StratalogError):
    """The server is stopping (or the partition's log was closed under the request)."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "SHUTTING_DOWN"
    retriable = True


class ResourceLimitExceededError(StratalogError):
    """A limit on what one client, or the server as a whole, may hold was reached (concurrent
    streams or long polls of a connection or principal, connections, open files); retriable:
    the limit frees as other requests end. ``limit`` names the server setting."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "RESOURCE_LIMIT_EXCEEDED"
    retriable = True

    @property
    def limit(self) -> str | None:
        """The name of the setting whose limit was reached, when the server said."""
        return self.metadata.get("limit")

    @property
    def retry_after_ms(self) -> int | None:
        """How long to wait before trying again, when the server said (a throttled client's
        Produce backlog: until it drains at the quota; a host's failed logins: until the
        oldest ages out), as Kafka's ``throttle_time_ms`` asks a client since KIP-219."""
        value = self.metadata.get("retry_after_ms", "")
        return int(value) if value.isdigit() else None


class ConcurrentRpcLimitError(ResourceLimitExceededError):
    """gRPC's own refusal, without ErrorInfo: the server was already serving as many calls as
    its ``max_concurrent_rpcs`` allows ("Concurrent RPC limit exceeded!"). Retriable, as the
    server's own limits are: the limit frees as calls end. ``limit`` is
    ``"max_concurrent_rpcs"``, the setting of a stratalog server that gRPC enforces."""

    reason = None

    def __init__(self, message: str, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.metadata.setdefault("limit", "max_concurrent_rpcs")


class MessageTooLargeError(StratalogError):
    """gRPC's own refusal, without ErrorInfo: a message larger than one side allows (a request
    over the server's ``max_request_bytes`` or the client's ``max_message_bytes``, an answer
    over the server's ``max_response_bytes`` or the client's ``max_message_bytes``). Not
    retriable: the same request fails again; send less, ask for less, or raise the limit."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


# The producer-state reasons of issue 12 (the partition refused a batch; nothing was written).
# Not retried as they are: the producer must resend in order, bump its epoch or stop.


class OutOfOrderSequenceError(StratalogError):
    """A batch whose sequence does not follow the producer's last one in the partition."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "OUT_OF_ORDER_SEQUENCE"


class InvalidProducerEpochError(StratalogError):
    """The producer's epoch is older than the partition's: a newer instance fenced it."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "INVALID_PRODUCER_EPOCH"


class UnknownProducerIdError(StratalogError):
    """The partition has no state for the producer (expired) and the sequence is not 0."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "UNKNOWN_PRODUCER_ID"


class InvalidTxnStateError(StratalogError):
    """A write that the producer's transaction state does not allow."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "INVALID_TXN_STATE"


class TransactionCoordinatorFencedError(StratalogError):
    """A transaction marker from an older transaction coordinator epoch."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "TRANSACTION_COORDINATOR_FENCED"


# The transaction coordinator's reasons (docs/transactions.md).


class ConcurrentTransactionsError(StratalogError):
    """The transactional id's previous transaction is still completing; retry shortly."""

    code = grpc.StatusCode.ABORTED
    reason = "CONCURRENT_TRANSACTIONS"
    retriable = True


class CoordinatorLoadInProgressError(StratalogError):
    """The transaction or group coordinator is still loading its state log
    (``__transaction_state`` or ``__consumer_offsets``); retry shortly."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class ProducerFencedError(StratalogError):
    """A newer instance with the same transactional id bumped the epoch: this one must stop."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "PRODUCER_FENCED"


class InvalidProducerIdMappingError(StratalogError):
    """The producer id does not belong to the transactional id."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "INVALID_PRODUCER_ID_MAPPING"


class TransactionalIdNotFoundError(StratalogError):
    """The coordinator knows no such transactional id (never initialised, or expired)."""

    code = grpc.StatusCode.NOT_FOUND
    reason = "TRANSACTIONAL_ID_NOT_FOUND"


class InvalidTransactionTimeoutError(StratalogError):
    """transaction.timeout.ms outside 1 .. transaction.max.timeout.ms."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_TRANSACTION_TIMEOUT"


# The replication reasons of issue 17 (server/cluster/errors.py; Kafka's error codes).


class NotLeaderOrFollowerError(StratalogError):
    """The server does not lead the partition (Kafka's NOT_LEADER_OR_FOLLOWER): nothing was
    done. ``leader_id`` (``None``: unknown), ``leader_epoch`` and ``leader_address`` (``None``:
    unknown) are the server's view of who does, a hint the Client goes to without asking for
    metadata first (Kafka's KIP-951)."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "NOT_LEADER_OR_FOLLOWER"
    retriable = True

    @property
    def leader_id(self) -> int | None:
        """The node id of the leader the server knows of, or None (-1 on the wire)."""
        value = _int_or_none(self.metadata.get("leader_id"))
        return value if value is not None and value >= 0 else None

    @property
    def leader_epoch(self) -> int | None:
        """The leader epoch of that hint, or None."""
        value = _int_or_none(self.metadata.get("leader_epoch"))
        return value if value is not None and value >= 0 else None

    @property
    def leader_address(self) -> str | None:
        """HOST:PORT the leader advertises, or None."""
        return self.metadata.get("leader_address") or None


class LeaderNotAvailableError(StratalogError):
    """The partition has no leader now (an election is pending, or no in-sync replica lives):
    retry after a metadata refresh."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "LEADER_NOT_AVAILABLE"
    retriable = True


class UnknownLeaderEpochError(StratalogError):
    """The server has not yet seen the leader epoch the request names: its view lags the
    controller's. Retriable."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "UNKNOWN_LEADER_EPOCH"
    retriable = True


class FencedLeaderEpochError(StratalogError):
    """The request's leader epoch is older than the partition's: the sender acts on a stale
    view. Not retried as it is; the view must be refreshed first."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "FENCED_LEADER_EPOCH"


class NotEnoughReplicasError(StratalogError):
    """acks=all and the in-sync replicas are fewer than ``min.insync.replicas``: nothing was
    written. Retriable: a follower may catch up."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "NOT_ENOUGH_REPLICAS"
    retriable = True


class NotEnoughReplicasAfterAppendError(StratalogError):
    """acks=all: the leader wrote the records, but the ISR shrank below
    ``min.insync.replicas`` before they were replicated. Retriable: the idempotent Producer's
    resend is answered as a duplicate if they are kept."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    retriable = True


class ReplicationTimeoutError(StratalogError):
    """acks=all: the in-sync replicas did not all reach the records within the request's
    timeout (Kafka's REQUEST_TIMED_OUT). The leader has them; retriable as the two above."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    reason = "REQUEST_TIMED_OUT"
    retriable = True


class InvalidReplicationFactorError(StratalogError):
    """CreateTopic asked for a replication factor below 1 or above the live brokers."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_REPLICATION_FACTOR"


class InvalidPartitionsError(StratalogError):
    """CreatePartitions asked for a partition count not above the topic's: partitions are only
    ever added (Kafka's INVALID_PARTITIONS)."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_PARTITIONS"


class CoordinationUnavailableError(StratalogError):
    """etcd did not answer an operation that needs it (CreateTopic in a cluster); retriable:
    the data path keeps serving, and etcd may come back."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "COORDINATION_UNAVAILABLE"
    retriable = True


# The consumer-group reasons of issue 27 (server/groups/group_errors.py; Kafka's error codes).


class CoordinatorNotAvailableError(StratalogError):
    """The group has no coordinator now (its partition is moving, or the group was just
    deleted): find the coordinator again, after a backoff."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class NotCoordinatorError(StratalogError):
    """This server does not coordinate the group (any more): ask FindCoordinator again."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "NOT_COORDINATOR"
    retriable = True


class UnknownMemberIdError(StratalogError):
    """The member id is not in the group (its session expired, or it never joined): the member
    has lost its partitions and joins again with an empty member id."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "UNKNOWN_MEMBER_ID"


class IllegalGenerationError(StratalogError):
    """The request names a past generation of the group: the member has lost its partitions
    and joins again (keeping its member id, as Kafka's consumer does)."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "ILLEGAL_GENERATION"


class RebalanceInProgressError(StratalogError):
    """The group is rebalancing: join again (retriable: the next generation accepts it)."""

    code = grpc.StatusCode.ABORTED
    reason = "REBALANCE_IN_PROGRESS"
    retriable = True


class FencedInstanceIdError(StratalogError):
    """Another member holds this ``group_instance_id`` (a newer process of the same static
    member): this one must stop."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "FENCED_INSTANCE_ID"


class MemberIdRequiredError(StratalogError):
    """A dynamic member's first JoinGroup (KIP-394): join again with ``member_id``, the id the
    coordinator gave it."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "MEMBER_ID_REQUIRED"

    @property
    def member_id(self) -> str | None:
        """The member id to join again with, when the server said (it always does)."""
        return self.metadata.get("member_id") or None


class GroupMaxSizeReachedError(StratalogError):
    """The group already has ``group.max.size`` members."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "GROUP_MAX_SIZE_REACHED"


class InconsistentGroupProtocolError(StratalogError):
    """The member's protocol type, or every protocol it offers, does not fit the group's."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "INCONSISTENT_GROUP_PROTOCOL"


class InvalidGroupIdError(StratalogError):
    """An empty group id, or one longer than the server allows."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_GROUP_ID"


class InvalidSessionTimeoutError(StratalogError):
    """``session_timeout_ms`` outside the server's ``group.min/max.session.timeout.ms``."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_SESSION_TIMEOUT"


class NonEmptyGroupError(StratalogError):
    """The group still has members (DeleteGroups, an offset reset)."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "NON_EMPTY_GROUP"


class GroupIdNotFoundError(StratalogError):
    """No such group."""

    code = grpc.StatusCode.NOT_FOUND
    reason = "GROUP_ID_NOT_FOUND"


class UnstableOffsetCommitError(StratalogError):
    """OffsetFetch with ``require_stable``: an open transaction holds offsets of the partitions
    asked for (KIP-447); retriable once it commits or aborts."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "UNSTABLE_OFFSET_COMMIT"
    retriable = True


class OffsetMetadataTooLargeError(StratalogError):
    """A commit's metadata string is longer than ``offset.metadata.max.bytes``."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "OFFSET_METADATA_TOO_LARGE"


class GroupSubscribedToTopicError(StratalogError):
    """OffsetDelete of a topic a member of the group still subscribes to."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "GROUP_SUBSCRIBED_TO_TOPIC"


class ElectionNotNeededError(StratalogError):
    """ElectLeaders: the partition is led as asked already (issue 29; Kafka's name)."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "ELECTION_NOT_NEEDED"


class PreferredLeaderNotAvailableError(StratalogError):
    """ElectLeaders: the partition's preferred replica is down or not in sync."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "PREFERRED_LEADER_NOT_AVAILABLE"


class EligibleLeadersNotAvailableError(StratalogError):
    """ElectLeaders (unclean): no replica of the partition is live."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "ELIGIBLE_LEADERS_NOT_AVAILABLE"


class InvalidReplicaAssignmentError(StratalogError):
    """AlterPartitionReassignments: the target replicas name a broker twice, or one that is
    not live; DrainBroker: no broker can take a replica (Kafka's name)."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_REPLICA_ASSIGNMENT"


class NoReassignmentInProgressError(StratalogError):
    """AlterPartitionReassignments: a cancellation of a partition not being reassigned."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "NO_REASSIGNMENT_IN_PROGRESS"


class AuthenticationError(StratalogError):
    """The server (or a proxy before it) did not accept the caller's credentials."""

    code = grpc.StatusCode.UNAUTHENTICATED
    reason = "AUTHENTICATION_FAILED"


class NotAuthorizedError(StratalogError):
    """The caller is known but may not do this: ``operation`` (``"WRITE"``) on ``resource``
    (``"Topic:orders"``), when the server said."""

    code = grpc.StatusCode.PERMISSION_DENIED
    reason = "NOT_AUTHORIZED"

    @property
    def operation(self) -> str | None:
        """The ACL operation refused (Kafka's name), when the server said."""
        return self.metadata.get("operation")

    @property
    def resource(self) -> str | None:
        """The resource it was refused on, ``"<type>:<name>"``, when the server said."""
        return self.metadata.get("resource")


class BrokerUnavailableError(StratalogError):
    """No answer from a stratalog servicer: nothing listening, connection lost, TLS failure.

    ``unsent`` is True when the request provably never left the client: gRPC failed the call
    because it found no connection to send it on (:data:`_NO_CONNECTION_DETAILS`), so a
    Produce may go to another broker without risking a second append. False otherwise: a
    connection lost after the request was written leaves its outcome unknown.
    """

    code = grpc.StatusCode.UNAVAILABLE
    retriable = True

    def __init__(self, message: str, *, unsent: bool = False, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.unsent = unsent


class TlsHandshakeError(BrokerUnavailableError):
    """The connection failed because the client's TLS set-up does not match the server's: the
    server requires TLS or a client certificate, refused the client's certificate, or the
    server's certificate did not verify (:mod:`stratalog.client.tls_diagnosis` tells which
    from gRPC's details or a probe). ``problem`` is a
    :class:`~stratalog.client.tls_diagnosis.TlsProblem`, ``detail`` the certificate
    verifier's reason (or ""), ``address`` the server's. Not retriable: the same request fails
    the same way until a configuration changes (Kafka's ``SslAuthenticationException`` is not
    retriable either). Still a BrokerUnavailableError: the server did not answer."""

    retriable = False

    def __init__(
        self, message: str, *, problem: TlsProblem, detail: str = "", address: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.problem = problem
        self.detail = detail
        self.address = address


class RequestTimeoutError(StratalogError):
    """The deadline passed first. A timed-out Produce may still have been appended."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    retriable = True


# Raised by the Producer itself, for what no single server answer says.


class DeliveryTimeoutError(RequestTimeoutError):
    """A batch was not acknowledged within the Producer's ``delivery_timeout_ms`` (Kafka's
    "Expiring N record(s)" TimeoutException). If it was sent, it may still have been stored.
    Raised by ``send()`` itself when the topic's partition count could not be had in that time
    (or ``max_block_ms``, if shorter; the message names the one), e.g. no server listening.

    ``attempts`` is how many Produce requests carried it (0: it was never sent, e.g. no
    producer id could be had); ``last_error`` is the error of the last attempt, if any.
    """

    def __init__(
        self, message: str, *, attempts: int = 0, last_error: BaseException | None = None,
        **kwargs,
    ) -> None:
        super().__init__(message, **kwargs)
        self.attempts = attempts
        self.last_error = last_error


class TransactionAbortedError(StratalogError):
    """The record's batch was dropped unsent because its transaction was aborted, or failed
    and must be aborted (Kafka's TransactionAbortedException)."""

    code = grpc.StatusCode.ABORTED



class CommitFailedError(StratalogError):
    """A commit the group refused for good (Kafka's CommitFailedException): it named a past
    generation, or a member no longer in the group, so another member may own the partitions
    now. Raised by the Consumer for a commit its group member could not make; the member joins
    the group again and the commit is not retried. ``cause`` is the server's error, if any."""

    code = grpc.StatusCode.FAILED_PRECONDITION

    def __init__(self, message: str, *, cause: StratalogError | None = None, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.cause = cause


class NoOffsetForPartitionError(StratalogError):
    """A partition assigned to the group member has no committed offset and
    ``auto_offset_reset`` is "none" (Kafka's NoOffsetForPartitionException). ``partitions``:
    the partitions without one."""

    code = grpc.StatusCode.OUT_OF_RANGE

    def __init__(self, message: str, *, partitions: tuple = (), **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.partitions = tuple(partitions)


def _table_by_reason(*classes: type[StratalogError]) -> Mapping[str, type[StratalogError]]:
    for cls in classes:
        # Fails at import time on a typo: every reason must be a value of broker.proto's enum.
        broker_pb2.ErrorReason.Value(cls.reason)
    return types.MappingProxyType({cls.reason: cls for cls in classes})


#: The one table: ErrorReason name -> exception class (which fixes code and retriable).
ERRORS_BY_REASON: Mapping[str, type[StratalogError]] = _table_by_reason(
    UnknownTopicOrPartitionError,
    OffsetOutOfRangeError,
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    InvalidTopicError,
    InvalidTimestampError,
    InvalidConfigError,
    InvalidRequestError,
    TopicAlreadyExistsError,
    StorageFullError,
    StorageError,
    ShuttingDownError,
    ResourceLimitExceededError,
    AuthenticationError,
    NotAuthorizedError,
    OutOfOrderSequenceError,
    InvalidProducerEpochError,
    UnknownProducerIdError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    ProducerFencedError,
    InvalidProducerIdMappingError,
    TransactionalIdNotFoundError,
    InvalidTransactionTimeoutError,
    NotLeaderOrFollowerError,
    LeaderNotAvailableError,
    UnknownLeaderEpochError,
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotEnoughReplicasAfterAppendError,
    ReplicationTimeoutError,
    InvalidReplicationFactorError,
    CoordinationUnavailableError,
    InvalidPartitionsError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    UnknownMemberIdError,
    IllegalGenerationError,
    RebalanceInProgressError,
    FencedInstanceIdError,
    MemberIdRequiredError,
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    NonEmptyGroupError,
    GroupIdNotFoundError,
    UnstableOffsetCommitError,
    OffsetMetadataTooLargeError,
    GroupSubscribedToTopicError,
    ElectionNotNeededError,
    PreferredLeaderNotAvailableError,
    EligibleLeadersNotAvailableError,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
)

# Statuses without ErrorInfo that still have a class of their own: transport failures, and
# authentication refused by an interceptor or proxy before our servicer ran.
_ERRORS_BY_CODE_WITHOUT_INFO: Mapping[grpc.StatusCode, type[StratalogError]] = {
    grpc.StatusCode.UNAVAILABLE: BrokerUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: RequestTimeoutError,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: NotAuthorizedError,
}


# gRPC's own RESOURCE_EXHAUSTED answers carry no ErrorInfo: the words of grpc core's status
# details are all that tells them apart (the same since grpc 1.x's message size filter and the
# aio server's concurrency limit). The first entry found in the details wins.
_GRPC_RESOURCE_EXHAUSTED: tuple[tuple[str, type[StratalogError]], ...] = (
    ("Concurrent RPC limit exceeded", ConcurrentRpcLimitError),
    ("message larger than max", MessageTooLargeError),
)


# How gRPC core words an UNAVAILABLE call that it failed before sending it anywhere: the load
# balancing policy found no connection to pick (wait_for_ready is off, so the call fails at
# once). pick_first, the default policy, fails its picks so while in TRANSIENT_FAILURE
# (grpc's src/core/load_balancing/pick_first/pick_first.cc; gRFC A62); round_robin with its own
# words (src/core/load_balancing/round_robin/round_robin.cc); a target resolving to no address
# never picks at all. A call that was written before its connection broke ends with the
# transport's words instead ("Socket closed", "Connection reset", GOAWAY), and a call the server
# never saw because its stream was refused or left behind by a GOAWAY is sent again by gRPC
# itself (gRFC A6's transparent retry), ending with one of these if no connection is left.
_NO_CONNECTION_DETAILS = (
    "failed to connect to all addresses",
    "connections to all backends failing",
    "empty address list",
)


def _without_info(code: grpc.StatusCode, message: str) -> StratalogError:
    """The error for a status that carried no ErrorInfo of ours: by its code (and for gRPC's
    own RESOURCE_EXHAUSTED and UNAVAILABLE, by its details)."""
    cls = _ERRORS_BY_CODE_WITHOUT_INFO.get(code, StratalogError)
    if cls is BrokerUnavailableError:
        unsent = any(words in message for words in _NO_CONNECTION_DETAILS)
        return BrokerUnavailableError(message, code=code, unsent=unsent)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        for words, candidate in _GRPC_RESOURCE_EXHAUSTED:
            if words in message:
                cls = candidate
                break
    if cls is StratalogError:
        return StratalogError(message, code=code, retriable=code in _RETRIABLE_CODES)
    return cls(message, code=code)


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _call_code(err: grpc.RpcError) -> grpc.StatusCode:
    code = getattr(err, "code", None)
    value = code() if callable(code) else None
    return value if isinstance(value, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def _call_details(err: grpc.RpcError) -> str:
    details = getattr(err, "details", None)
    value = details() if callable(details) else None
    return value if isinstance(value, str) else ""


def _rich_status(err: grpc.RpcError, code: grpc.StatusCode) -> status_pb2.Status | None:
    """The google.rpc.Status in the trailers, or None when absent or not about this call."""
    if not callable(getattr(err, "trailing_metadata", None)):
        return None
    try:
        return rpc_status.from_call(err)
    except ValueError as mismatch:
        # from_call refuses a Status whose message differs from grpc-message; a proxy may have
        # rewritten the message, but the reason still holds if the code agrees.
        logger.debug("status details disagree with the call: %s", mismatch)
    except DecodeError:
        return None
    for key, value in err.trailing_metadata() or ():
        if key == _STATUS_DETAILS_KEY:
            try:
                status = status_pb2.Status.FromString(value)
            except DecodeError:
                return None
            return status if status.code == code.value[0] else None
    return None


def _error_info(status: status_pb2.Status | None) -> error_details_pb2.ErrorInfo | None:
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == DOMAIN:
                return info
    return None


def from_rpc_error(err: grpc.RpcError) -> StratalogError:
    """The exception for a failed call (sync ``grpc.RpcError`` or ``grpc.aio.AioRpcError``).

    Reads the status code, the message and the ErrorInfo from the trailing metadata
    (``grpc_status.rpc_status.from_call``). Never raises for malformed or foreign trailers: those
    give the class for the status code alone. Use as ``raise from_rpc_error(e) from e``.
    """
    code = _call_code(err)
    message = _call_details(err)
    info = _error_info(_rich_status(err, code))
    if info is None:
        return _without_info(code, message)
    return _with_reason(code, message, info.reason, dict(info.metadata))


#: grpc.StatusCode by its numeric value, for SessionError.code.
_CODES_BY_VALUE: Mapping[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}
_REASON_UNSPECIFIED = broker_pb2.ERROR_REASON_UNSPECIFIED


def from_session_error(error: broker_pb2.SessionError) -> StratalogError:
    """The exception for a request answered with a ``SessionError`` on a Session stream: the
    same class, code, message, reason and metadata as :func:`from_rpc_error` gives for the
    unary call the server would have ended with that status (a SessionError is that status:
    broker.proto). A reason this client does not know, or a code that is no gRPC code, is
    kept as it came in a plain StratalogError. Use as ``raise from_session_error(e)``.
    """
    code = _CODES_BY_VALUE.get(error.code, grpc.StatusCode.UNKNOWN)
    if error.reason == _REASON_UNSPECIFIED:
        return _without_info(code, error.message)
    try:
        reason = broker_pb2.ErrorReason.Name(error.reason)
    except ValueError:  # a reason from a newer server, by its number
        reason = str(error.reason)
    return _with_reason(code, error.message, reason, dict(error.metadata))


def from_error_reason(reason: int, message: str) -> StratalogError | None:
    """The exception of a per-item error in an answer (broker.proto's ``LeftMember``,
    ``DescribedGroup``, ``DeletedGroup``: an ErrorReason and a message, no status), or None
    for ERROR_REASON_UNSPECIFIED (no error). The class fixes the code and retriable flag, as
    for a status with that reason; a reason this client does not know is a plain
    StratalogError carrying its number."""
    if reason == _REASON_UNSPECIFIED:
        return None
    try:
        name = broker_pb2.ErrorReason.Name(reason)
    except ValueError:  # a reason from a newer server, by its number
        return StratalogError(message, reason=str(reason))
    cls = ERRORS_BY_REASON.get(name)
    if cls is None:
        return StratalogError(message, reason=name)
    return cls(message)


def _with_reason(
    code: grpc.StatusCode, message: str, reason: str, metadata: dict[str, str]
) -> StratalogError:
    cls = ERRORS_BY_REASON.get(reason)
    if cls is None:
        # A reason from a newer server: keep what it said, decide retrying by the code.
        return StratalogError(
            message, code=code, reason=reason, metadata=metadata,
            retriable=code in _RETRIABLE_CODES,
        )
    # The code the server sent wins over the class default, so nothing it said is lost.
    return cls(message, code=code, metadata=metadata)
