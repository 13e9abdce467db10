"""Domain errors to gRPC statuses: the one place where the server decides what a client is told.

The record codec and the storage engine raise exceptions from two small trees
(:mod:`stratalog.records.errors`, :mod:`stratalog.server.storage.errors`); neither knows about
gRPC. A client needs three things from a failure: a gRPC status code, so that generic tooling and
retry policies work; a machine-readable *reason*, one of broker.proto's ``ErrorReason`` names; and,
for some reasons, numbers to act on (the log's bounds after an out-of-range fetch). This module
maps an exception to all three and packs them the standard way (grpcio-status)::

    google.rpc.Status {                      serialized into the `grpc-status-details-bin` trailer;
      code    = the gRPC status code         code and message also travel as grpc-status and
      message = what a person should read    grpc-message, as for any other error
      details = [ google.rpc.ErrorInfo {
        reason   = "OFFSET_OUT_OF_RANGE"     an ErrorReason name
        domain   = "stratalog"
        metadata = {"log_start_offset": "100", "log_end_offset": "250"}   decimal strings
      } ]
    }

Three rules decide the mapping (the table is :data:`ERROR_TABLE`, the codes
:data:`REASON_CODES`):

1. *Nearest ancestor.* The exception's MRO is walked and the first class in the table wins, so a
   leaf added to either tree later (say ``CorruptCheckpointError(StorageError)``) gets its base's
   mapping (``STORAGE_ERROR``) until someone gives it a row of its own.
2. *A full disk is not a broken disk.* An ``OSError`` with ``ENOSPC``/``EDQUOT`` anywhere in the
   ``__cause__``/``__context__`` chain of a storage error (or a bare ``OSError``) becomes
   ``RESOURCE_EXHAUSTED`` + ``STORAGE_FULL``.
3. *Nothing of the server's disk leaks.* Errors the client caused (bad records, unknown topics,
   offsets out of range) carry the exception's own message, which describes the client's input.
   Errors the server suffered (``STORAGE_ERROR``, ``STORAGE_FULL``, ``SHUTTING_DOWN``) and any
   unexpected exception (``INTERNAL``, no ErrorInfo) get a fixed sentence plus an incident id;
   the full message and traceback go to this module's logger under the same id, because those
   messages name files and directories on the server's disk. The exceptions whose messages
   are built without a path (:data:`_MESSAGES_WITHOUT_PATHS`: an offline log directory names
   the topic-partition, a preallocation beyond the free space the byte counts) keep them.

A request on a Session stream (server/rpc/session.py) fails with exactly the status its unary call
would have ended with, carried in the answer as a ``SessionError`` (:func:`session_error`: the
code, the message, the ErrorInfo's reason and metadata) instead of the call's trailers.

Messages are cut to :data:`MESSAGE_CHARS_MAX` characters and :data:`MESSAGE_BYTES_MAX` UTF-8
bytes, and each ErrorInfo metadata value to :data:`METADATA_VALUE_BYTES_MAX` (a topic name in it
may be a client's 256 KiB string): they travel in the trailers, the message twice (grpc-message,
percent-encoded, and inside the serialized Status, base64), and gRPC's default metadata limit is
8 KiB: past it the client sees RESOURCE_EXHAUSTED instead of this status
(server/client_text.py has the arithmetic).
"""

from __future__ import annotations

import errno
import logging
import types
import uuid
from collections.abc import Mapping
from typing import NamedTuple, NoReturn

import grpc
import grpc.aio
from google.rpc import error_details_pb2, status_pb2
from grpc._cython.cygrpc import ExecuteBatchError
from grpc_status import rpc_status

from stratalog.records import errors as record_errors
from stratalog.server import client_limits
from stratalog.server.client_text import clip_utf8, loggable
from stratalog.server.cluster import errors as cluster_errors
from stratalog.server.groups import group_errors
from stratalog.server.security import errors as security_errors
from stratalog.server.storage import errors as storage_errors
from stratalog.server.transactions import errors as transaction_errors
from stratalog.v1 import broker_pb2

__all__ = [
    "DOMAIN",
    "ERROR_TABLE",
    "MESSAGE_BYTES_MAX",
    "MESSAGE_CHARS_MAX",
    "METADATA_VALUE_BYTES_MAX",
    "REASON_CODES",
    "ErrorMapping",
    "abort_with_error",
    "call_ended",
    "classify",
    "error_reason",
    "invalid_request",
    "session_error",
    "to_rpc_status",
    "to_status",
]

logger = logging.getLogger(__name__)

#: ``ErrorInfo.domain`` of every error this server sends.
DOMAIN = "stratalog"

#: Longest status message sent, in characters; longer ones are cut and marked with an ellipsis.
MESSAGE_CHARS_MAX = 1024
#: Longest status message sent, in UTF-8 bytes: percent-encoded in grpc-message, ≤ 3 KiB.
MESSAGE_BYTES_MAX = 1024
#: Longest ErrorInfo metadata value sent, in UTF-8 bytes. With the message, a status's trailers
#: stay under ~6 KiB (a handful of metadata entries), inside gRPC's 8 KiB default.
METADATA_VALUE_BYTES_MAX = 256


def call_ended(context: grpc.aio.ServicerContext, exc: BaseException) -> bool:
    """True when ``exc`` is what the end of the call under its handler caused: the client
    cancelled it or its connection closed. Then there is no one to answer (an abort fails too)
    and it is not the server's error to log.

    A stream's ``context.write`` after the client's RST_STREAM raises gRPC core's
    ``ExecuteBatchError`` (not re-exported by ``grpc.aio``) before ``context.cancelled()`` says
    so: measured, 1,000 Subscribe streams cancelled while their writes were under way logged
    ~500 "internal errors" and as many failed aborts.
    """
    return context.cancelled() or isinstance(exc, ExecuteBatchError)


def _reason(name: str) -> str:
    # Fails at import time on a typo: every reason must be a value of broker.proto's ErrorReason.
    broker_pb2.ErrorReason.Value(name)
    return name


_Code = grpc.StatusCode

#: The status code of each ErrorReason, as broker.proto's contract comment lists them. One reason
#: has exactly one code, so the client can trust either.
REASON_CODES: Mapping[str, grpc.StatusCode] = types.MappingProxyType({
    _reason("UNKNOWN_TOPIC_OR_PARTITION"): _Code.NOT_FOUND,
    _reason("OFFSET_OUT_OF_RANGE"): _Code.OUT_OF_RANGE,
    _reason("CORRUPT_RECORD"): _Code.INVALID_ARGUMENT,
    _reason("INVALID_RECORD"): _Code.INVALID_ARGUMENT,
    _reason("RECORD_TOO_LARGE"): _Code.INVALID_ARGUMENT,
    _reason("INVALID_TOPIC"): _Code.INVALID_ARGUMENT,
    _reason("TOPIC_ALREADY_EXISTS"): _Code.ALREADY_EXISTS,
    _reason("INVALID_TIMESTAMP"): _Code.INVALID_ARGUMENT,
    _reason("INVALID_CONFIG"): _Code.INVALID_ARGUMENT,
    _reason("INVALID_REQUEST"): _Code.INVALID_ARGUMENT,
    _reason("STORAGE_FULL"): _Code.RESOURCE_EXHAUSTED,
    _reason("STORAGE_ERROR"): _Code.UNAVAILABLE,
    _reason("SHUTTING_DOWN"): _Code.UNAVAILABLE,
    _reason("AUTHENTICATION_FAILED"): _Code.UNAUTHENTICATED,
    _reason("NOT_AUTHORIZED"): _Code.PERMISSION_DENIED,
    _reason("OUT_OF_ORDER_SEQUENCE"): _Code.FAILED_PRECONDITION,
    _reason("INVALID_PRODUCER_EPOCH"): _Code.FAILED_PRECONDITION,
    _reason("UNKNOWN_PRODUCER_ID"): _Code.FAILED_PRECONDITION,
    _reason("INVALID_TXN_STATE"): _Code.FAILED_PRECONDITION,
    _reason("TRANSACTION_COORDINATOR_FENCED"): _Code.FAILED_PRECONDITION,
    _reason("CONCURRENT_TRANSACTIONS"): _Code.ABORTED,
    _reason("COORDINATOR_LOAD_IN_PROGRESS"): _Code.UNAVAILABLE,
    _reason("PRODUCER_FENCED"): _Code.FAILED_PRECONDITION,
    _reason("INVALID_PRODUCER_ID_MAPPING"): _Code.FAILED_PRECONDITION,
    _reason("TRANSACTIONAL_ID_NOT_FOUND"): _Code.NOT_FOUND,
    _reason("INVALID_TRANSACTION_TIMEOUT"): _Code.INVALID_ARGUMENT,
    _reason("RESOURCE_LIMIT_EXCEEDED"): _Code.RESOURCE_EXHAUSTED,
    _reason("NOT_LEADER_OR_FOLLOWER"): _Code.UNAVAILABLE,
    _reason("NOT_ENOUGH_REPLICAS"): _Code.UNAVAILABLE,
    _reason("NOT_ENOUGH_REPLICAS_AFTER_APPEND"): _Code.UNAVAILABLE,
    _reason("FENCED_LEADER_EPOCH"): _Code.FAILED_PRECONDITION,
    _reason("UNKNOWN_LEADER_EPOCH"): _Code.UNAVAILABLE,
    _reason("LEADER_NOT_AVAILABLE"): _Code.UNAVAILABLE,
    _reason("INVALID_REPLICATION_FACTOR"): _Code.INVALID_ARGUMENT,
    _reason("REQUEST_TIMED_OUT"): _Code.DEADLINE_EXCEEDED,
    _reason("COORDINATION_UNAVAILABLE"): _Code.UNAVAILABLE,
    _reason("INVALID_PARTITIONS"): _Code.INVALID_ARGUMENT,
    # Consumer groups (issue 27), as broker.proto's comments give them.
    _reason("COORDINATOR_NOT_AVAILABLE"): _Code.UNAVAILABLE,
    _reason("NOT_COORDINATOR"): _Code.UNAVAILABLE,
    _reason("UNKNOWN_MEMBER_ID"): _Code.FAILED_PRECONDITION,
    _reason("ILLEGAL_GENERATION"): _Code.FAILED_PRECONDITION,
    _reason("REBALANCE_IN_PROGRESS"): _Code.ABORTED,
    _reason("FENCED_INSTANCE_ID"): _Code.FAILED_PRECONDITION,
    _reason("MEMBER_ID_REQUIRED"): _Code.FAILED_PRECONDITION,
    _reason("GROUP_MAX_SIZE_REACHED"): _Code.RESOURCE_EXHAUSTED,
    _reason("INCONSISTENT_GROUP_PROTOCOL"): _Code.FAILED_PRECONDITION,
    _reason("INVALID_GROUP_ID"): _Code.INVALID_ARGUMENT,
    _reason("INVALID_SESSION_TIMEOUT"): _Code.INVALID_ARGUMENT,
    _reason("NON_EMPTY_GROUP"): _Code.FAILED_PRECONDITION,
    _reason("GROUP_ID_NOT_FOUND"): _Code.NOT_FOUND,
    _reason("UNSTABLE_OFFSET_COMMIT"): _Code.UNAVAILABLE,
    _reason("OFFSET_METADATA_TOO_LARGE"): _Code.INVALID_ARGUMENT,
    _reason("GROUP_SUBSCRIBED_TO_TOPIC"): _Code.FAILED_PRECONDITION,
    _reason("ELECTION_NOT_NEEDED"): _Code.FAILED_PRECONDITION,
    _reason("PREFERRED_LEADER_NOT_AVAILABLE"): _Code.UNAVAILABLE,
    _reason("ELIGIBLE_LEADERS_NOT_AVAILABLE"): _Code.UNAVAILABLE,
    _reason("INVALID_REPLICA_ASSIGNMENT"): _Code.INVALID_ARGUMENT,
    _reason("NO_REASSIGNMENT_IN_PROGRESS"): _Code.FAILED_PRECONDITION,
})

#: Exception class -> ErrorReason name. Looked up along the exception's MRO (nearest ancestor).
ERROR_TABLE: Mapping[type[BaseException], str] = types.MappingProxyType({
    # The record codec: the bytes of a batch are at fault.
    record_errors.RecordError: "INVALID_RECORD",
    record_errors.CorruptRecordError: "CORRUPT_RECORD",
    record_errors.InvalidRecordError: "INVALID_RECORD",
    record_errors.RecordTooLargeError: "RECORD_TOO_LARGE",
    # The storage engine: requests it refuses.
    storage_errors.OffsetOutOfRangeError: "OFFSET_OUT_OF_RANGE",
    # Issue 17: a follower append below the log end (replication fetched from the wrong offset).
    storage_errors.UnexpectedAppendOffsetError: "STORAGE_ERROR",
    storage_errors.UnknownTopicOrPartitionError: "UNKNOWN_TOPIC_OR_PARTITION",
    storage_errors.TopicAlreadyExistsError: "TOPIC_ALREADY_EXISTS",
    storage_errors.InvalidTopicError: "INVALID_TOPIC",
    # Issue 25: CreatePartitions with a count not above the topic's (Kafka's INVALID_PARTITIONS).
    storage_errors.InvalidPartitionsError: "INVALID_PARTITIONS",
    storage_errors.InvalidConfigError: "INVALID_CONFIG",
    storage_errors.InvalidTimestampError: "INVALID_TIMESTAMP",
    storage_errors.RecordBatchTooLargeError: "RECORD_TOO_LARGE",
    # The producer state of a partition (idempotent and transactional produce).
    storage_errors.OutOfOrderSequenceError: "OUT_OF_ORDER_SEQUENCE",
    storage_errors.InvalidProducerEpochError: "INVALID_PRODUCER_EPOCH",
    storage_errors.UnknownProducerIdError: "UNKNOWN_PRODUCER_ID",
    storage_errors.InvalidTxnStateError: "INVALID_TXN_STATE",
    storage_errors.TransactionCoordinatorFencedError: "TRANSACTION_COORDINATOR_FENCED",
    # The storage engine: the server's own trouble. A closed log means shutdown (or a topic being
    # deleted under the request); a retry gets either the answer or UNKNOWN_TOPIC_OR_PARTITION.
    storage_errors.LogClosedError: "SHUTTING_DOWN",
    storage_errors.StorageError: "STORAGE_ERROR",
    # Index and offset invariants the engine keeps for itself: seen by a client only when files
    # are damaged or the engine has a bug, so the partition is unusable, not the request wrong.
    storage_errors.CorruptIndexError: "STORAGE_ERROR",
    storage_errors.InvalidOffsetError: "STORAGE_ERROR",
    storage_errors.OffsetOverflowError: "STORAGE_ERROR",
    storage_errors.LogDirLockedError: "STORAGE_ERROR",
    storage_errors.StorageIOError: "STORAGE_ERROR",
    # Issue 13, storage: a CreateTopic the open files limit cannot take (``limit`` names it),
    # a partition whose log directory went offline after an I/O error, a start that needs
    # more descriptors than it may have.
    storage_errors.ResourceLimitExceededError: "RESOURCE_LIMIT_EXCEEDED",
    # Issue 24: an append that found no descriptor free (EMFILE, ENFILE): nothing written, the
    # partition online; retriable, as every RESOURCE_LIMIT_EXCEEDED (``limit`` names which).
    storage_errors.OutOfDescriptorsError: "RESOURCE_LIMIT_EXCEEDED",
    storage_errors.LogDirOfflineError: "STORAGE_ERROR",
    storage_errors.TooManyOpenFilesError: "STORAGE_ERROR",
    storage_errors.InsufficientSpaceError: "STORAGE_FULL",
    # Issue 16, the log cleaner: CleanPartition on a topic that is not compacted is the
    # request's fault (its message names the topic and its cleanup.policy); a cleaning given up
    # because the log was truncated, deleted or closed under it left the log as it was and may
    # be retried (retriable, as any STORAGE_ERROR).
    storage_errors.LogNotCompactedError: "INVALID_CONFIG",
    storage_errors.CleaningAbortedError: "STORAGE_ERROR",
    # The transaction coordinator. Retriable: CONCURRENT_TRANSACTIONS (the markers of the id's
    # last commit or abort are still being written) and COORDINATOR_LOAD_IN_PROGRESS.
    transaction_errors.TransactionError: "INVALID_REQUEST",
    transaction_errors.ConcurrentTransactionsError: "CONCURRENT_TRANSACTIONS",
    transaction_errors.CoordinatorLoadInProgressError: "COORDINATOR_LOAD_IN_PROGRESS",
    transaction_errors.NotCoordinatorError: "NOT_COORDINATOR",
    transaction_errors.CoordinatorNotAvailableError: "COORDINATOR_NOT_AVAILABLE",
    transaction_errors.ProducerFencedError: "PRODUCER_FENCED",
    transaction_errors.InvalidProducerIdMappingError: "INVALID_PRODUCER_ID_MAPPING",
    transaction_errors.TransactionalIdNotFoundError: "TRANSACTIONAL_ID_NOT_FOUND",
    transaction_errors.InvalidTxnStateError: "INVALID_TXN_STATE",
    transaction_errors.InvalidTransactionTimeoutError: "INVALID_TRANSACTION_TIMEOUT",
    transaction_errors.InvalidTransactionalIdError: "INVALID_REQUEST",
    transaction_errors.TransactionsNotSupportedError: "INVALID_REQUEST",
    # The server's own trouble: its state log is damaged, or it ran out of producer ids.
    transaction_errors.CorruptTransactionLogError: "STORAGE_ERROR",
    transaction_errors.ProducerIdsExhaustedError: "STORAGE_ERROR",
    # Security (server/security): who the caller is. The message is the client's to read and
    # names no user or file (security/errors.py).
    security_errors.AuthenticationFailedError: "AUTHENTICATION_FAILED",
    # Too many credential checks at once, or too many failures from one host (retriable).
    security_errors.AuthenticationThrottledError: "RESOURCE_LIMIT_EXCEEDED",
    # Authorization (server/security): what the caller may do, and the ACL requests.
    security_errors.NotAuthorizedError: "NOT_AUTHORIZED",
    security_errors.InvalidAclError: "INVALID_REQUEST",
    security_errors.AclLimitError: "RESOURCE_LIMIT_EXCEEDED",
    security_errors.SecurityDisabledError: "INVALID_REQUEST",
    # A throttled client's Produce backlog is full (retriable: it drains at the quota's rate).
    security_errors.QuotaBacklogExceededError: "RESOURCE_LIMIT_EXCEEDED",
    # Per-client limits on Subscribe streams and long polls (retriable: the client's own
    # waiting RPCs free the slot as they end); ``limit`` names the setting.
    client_limits.ClientLimitExceededError: "RESOURCE_LIMIT_EXCEEDED",
    # Replication (issue 17, server/cluster): who leads a partition, and whether enough
    # replicas have a record. Retriable but INVALID_REPLICATION_FACTOR and FENCED_LEADER_EPOCH.
    cluster_errors.ClusterError: "COORDINATION_UNAVAILABLE",
    cluster_errors.CoordinationUnavailableError: "COORDINATION_UNAVAILABLE",
    cluster_errors.NotLeaderOrFollowerError: "NOT_LEADER_OR_FOLLOWER",
    # A fetch from a node that is not registered: Kafka's leader answers a replica it does not
    # know NOT_LEADER_OR_FOLLOWER too (retriable: a new server is seen within a poll).
    cluster_errors.UnregisteredReplicaError: "NOT_LEADER_OR_FOLLOWER",
    cluster_errors.NotEnoughReplicasError: "NOT_ENOUGH_REPLICAS",
    cluster_errors.NotEnoughReplicasAfterAppendError: "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    cluster_errors.FencedLeaderEpochError: "FENCED_LEADER_EPOCH",
    cluster_errors.UnknownLeaderEpochError: "UNKNOWN_LEADER_EPOCH",
    cluster_errors.LeaderNotAvailableError: "LEADER_NOT_AVAILABLE",
    cluster_errors.InvalidReplicationFactorError: "INVALID_REPLICATION_FACTOR",
    # A request a cluster member does not serve yet (CreatePartitions): refused, not half done.
    cluster_errors.UnsupportedInClusterError: "INVALID_REQUEST",
    cluster_errors.ReplicationTimeoutError: "REQUEST_TIMED_OUT",
    # ElectLeaders (issue 29): a partition's election not made, and why (Kafka's names).
    cluster_errors.ElectionNotNeededError: "ELECTION_NOT_NEEDED",
    cluster_errors.PreferredLeaderNotAvailableError: "PREFERRED_LEADER_NOT_AVAILABLE",
    cluster_errors.EligibleLeadersNotAvailableError: "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    # AlterPartitionReassignments (issue 29): a partition's reassignment refused.
    cluster_errors.InvalidReplicaAssignmentError: "INVALID_REPLICA_ASSIGNMENT",
    cluster_errors.NoReassignmentInProgressError: "NO_REASSIGNMENT_IN_PROGRESS",
    # The group coordinator (issue 27, server/groups/group_errors.py): Kafka's error of the
    # same name. Retriable: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
    # NOT_COORDINATOR, REBALANCE_IN_PROGRESS (after a rejoin), UNSTABLE_OFFSET_COMMIT.
    # MEMBER_ID_REQUIRED carries the id to rejoin with as metadata "member_id".
    group_errors.CoordinatorLoadInProgressError: "COORDINATOR_LOAD_IN_PROGRESS",
    group_errors.CoordinatorNotAvailableError: "COORDINATOR_NOT_AVAILABLE",
    group_errors.NotCoordinatorError: "NOT_COORDINATOR",
    group_errors.OffsetMetadataTooLargeError: "OFFSET_METADATA_TOO_LARGE",
    group_errors.IllegalGenerationError: "ILLEGAL_GENERATION",
    group_errors.InconsistentGroupProtocolError: "INCONSISTENT_GROUP_PROTOCOL",
    group_errors.InvalidGroupIdError: "INVALID_GROUP_ID",
    group_errors.UnknownMemberIdError: "UNKNOWN_MEMBER_ID",
    group_errors.InvalidSessionTimeoutError: "INVALID_SESSION_TIMEOUT",
    group_errors.RebalanceInProgressError: "REBALANCE_IN_PROGRESS",
    group_errors.NonEmptyGroupError: "NON_EMPTY_GROUP",
    group_errors.GroupIdNotFoundError: "GROUP_ID_NOT_FOUND",
    group_errors.MemberIdRequiredError: "MEMBER_ID_REQUIRED",
    group_errors.GroupMaxSizeReachedError: "GROUP_MAX_SIZE_REACHED",
    group_errors.FencedInstanceIdError: "FENCED_INSTANCE_ID",
    group_errors.UnstableOffsetCommitError: "UNSTABLE_OFFSET_COMMIT",
    group_errors.GroupSubscribedToTopicError: "GROUP_SUBSCRIBED_TO_TOPIC",
    # A write to __consumer_offsets that failed unexpectedly: the server's trouble (logged
    # where it happened, server/group_service/partition_coordinator.py); retriable.
    group_errors.UnknownServerError: "STORAGE_ERROR",
})

# Reasons whose cause is on the server's side: their exception messages name server files.
_SERVER_SIDE_MESSAGES = {
    "STORAGE_ERROR": "storage error on the server",
    "STORAGE_FULL": "the server's storage is full",
    "SHUTTING_DOWN": "the server is shutting down or the partition's log is closed; retry",
}
_INTERNAL_MESSAGE = "internal server error"
# Server-side errors whose own message names no path (built from the topic-partition only), so
# the client gets it: which partition is offline, and why, is what it needs to act on.
_MESSAGES_WITHOUT_PATHS: tuple[type[BaseException], ...] = (
    storage_errors.LogDirOfflineError,
    storage_errors.InsufficientSpaceError,
)

# errno values that mean "no space", not "broken": ENOSPC, and EDQUOT where the platform has it.
_DISK_FULL_ERRNOS = frozenset(
    code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if code is not None
)
# Guards the cause-chain walk against pathological (very long) chains; cycles are tracked apart.
_CAUSE_CHAIN_MAX = 16

# Exception attributes copied into ErrorInfo.metadata when present (int or str values only).
_METADATA_ATTRIBUTES = (
    "topic", "partition", "offset", "log_start_offset", "log_end_offset", "limit",
    "need_bytes", "free_bytes", "operation", "resource", "field",
    "leader_id", "leader_epoch", "leader_address", "retry_after_ms",
    # MEMBER_ID_REQUIRED: the member id to join again with (server/rpc/group_rpcs.py sets it).
    "member_id",
)


class ErrorMapping(NamedTuple):
    """The status code and ErrorReason name an exception turns into."""

    code: grpc.StatusCode
    reason: str


def _cause_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from or during, nearest first, without repeats."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < _CAUSE_CHAIN_MAX and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _os_error_in_chain(exc: BaseException) -> OSError | None:
    return next((e for e in _cause_chain(exc) if isinstance(e, OSError)), None)


def classify(exc: BaseException) -> ErrorMapping | None:
    """The status code and reason for ``exc``; ``None`` when it is unexpected (INTERNAL).

    Runtime: O(depth of the MRO + length of the cause chain).
    """
    if isinstance(exc, storage_errors.StorageError | OSError):
        os_error = _os_error_in_chain(exc)
        if os_error is not None and os_error.errno in _DISK_FULL_ERRNOS:
            return ErrorMapping(REASON_CODES["STORAGE_FULL"], "STORAGE_FULL")
    for cls in type(exc).__mro__:
        reason = ERROR_TABLE.get(cls)
        if reason is not None:
            return ErrorMapping(REASON_CODES[reason], reason)
    return None


def error_reason(exc: BaseException) -> tuple[int, str]:
    """The ErrorReason value and the message of ``exc`` for an answer that carries errors per
    item (DescribeGroups, DeleteGroups, LeaveGroup's members) instead of a status: what
    :func:`to_rpc_status` would send, its code aside."""
    status = to_rpc_status(exc)
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return broker_pb2.ErrorReason.Value(info.reason), status.message
    return broker_pb2.ERROR_REASON_UNSPECIFIED, status.message


def _truncate(message: str) -> str:
    if len(message) > MESSAGE_CHARS_MAX:
        message = message[: MESSAGE_CHARS_MAX - 1] + "…"
    return clip_utf8(message, MESSAGE_BYTES_MAX)


def _metadata(exc: BaseException, reason: str) -> dict[str, str]:
    metadata: dict[str, str] = {}
    for name in _METADATA_ATTRIBUTES:
        value = getattr(exc, name, None)
        # bool is an int; a flag is not an offset.
        if isinstance(value, int | str) and not isinstance(value, bool):
            metadata[name] = str(value)
    if reason in ("STORAGE_FULL", "STORAGE_ERROR"):
        os_error = _os_error_in_chain(exc)
        if os_error is not None and os_error.errno in errno.errorcode:
            # The symbolic name (ENOSPC, EIO) tells an operator what broke without naming a file.
            metadata["errno"] = errno.errorcode[os_error.errno]
    return metadata


def _rich_status(
    code: grpc.StatusCode, message: str, reason: str | None, metadata: Mapping[str, str]
) -> status_pb2.Status:
    status = status_pb2.Status(code=code.value[0], message=_truncate(message))
    if reason is not None:
        metadata = {key: clip_utf8(value, METADATA_VALUE_BYTES_MAX)
                    for key, value in metadata.items()}
        info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata)
        status.details.add().Pack(info)
    return status


def to_rpc_status(exc: BaseException) -> status_pb2.Status:
    """The ``google.rpc.Status`` for ``exc``, logging what the client is not told.

    Client-caused errors carry ``str(exc)``; server-side ones and unexpected exceptions carry a
    fixed sentence with an incident id, and the full error with its traceback is logged at ERROR
    under that id (SHUTTING_DOWN at INFO, without traceback: it is routine).
    """
    mapping = classify(exc)
    if mapping is None:
        incident = uuid.uuid4().hex[:12]
        logger.error("internal error %s answering a request", incident, exc_info=exc)
        return _rich_status(
            grpc.StatusCode.INTERNAL, f"{_INTERNAL_MESSAGE} (incident {incident})", None, {}
        )
    metadata = _metadata(exc, mapping.reason)
    fixed = _SERVER_SIDE_MESSAGES.get(mapping.reason)
    if isinstance(exc, _MESSAGES_WITHOUT_PATHS):
        logger.warning("request refused with %s: %s", mapping.reason, loggable(exc, 1024))
        message = str(exc)
    elif fixed is None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("request refused with %s: %s", mapping.reason, loggable(exc, 1024))
        message = str(exc) or type(exc).__name__
    else:
        incident = uuid.uuid4().hex[:12]
        if mapping.reason == "SHUTTING_DOWN":
            logger.info("request refused, incident %s, SHUTTING_DOWN: %s", incident,
                        loggable(exc, 1024))
        else:
            logger.error("request failed, incident %s, %s", incident, mapping.reason, exc_info=exc)
        message = f"{fixed} (incident {incident})"
    return _rich_status(mapping.code, message, mapping.reason, metadata)


def to_status(exc: BaseException) -> grpc.Status:
    """A ``grpc.Status`` for ``exc`` (code, message, and the ErrorInfo in the trailers)."""
    return rpc_status.to_status(to_rpc_status(exc))


def invalid_request(
    message: str,
    reason: str = "INVALID_REQUEST",
    metadata: Mapping[str, str] | None = None,
) -> grpc.Status:
    """An ``INVALID_ARGUMENT`` status for a request-shape error found by the servicer.

    For checks that are not the engine's business: both or neither of ``records`` and
    ``record_batches``, a negative ``max_bytes``, an empty topic name. ``reason`` is one of the
    ErrorReasons sent with INVALID_ARGUMENT (INVALID_REQUEST, INVALID_TOPIC, INVALID_CONFIG, ...);
    ``metadata`` (e.g. ``{"field": "max_bytes"}``) goes into the ErrorInfo as is.

    Raises:
        ValueError: ``reason`` is not an ErrorReason sent with INVALID_ARGUMENT (a bug in the
            caller, caught by the first test that takes the path).
    """
    if REASON_CODES.get(reason) is not grpc.StatusCode.INVALID_ARGUMENT:
        allowed = sorted(r for r, c in REASON_CODES.items() if c is grpc.StatusCode.INVALID_ARGUMENT)
        raise ValueError(f"reason {reason!r} is not sent with INVALID_ARGUMENT; one of {allowed}")
    return rpc_status.to_status(
        _rich_status(grpc.StatusCode.INVALID_ARGUMENT, message, reason, dict(metadata or {}))
    )


_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = error_details_pb2.ErrorInfo


def session_error(status: grpc.Status) -> broker_pb2.SessionError:
    """The ``SessionError`` answering a Session request whose unary call would have ended with
    ``status`` (what :func:`to_status`, :func:`invalid_request` or gRPC made): the same code and
    message, and the reason and metadata of its ErrorInfo (``ERROR_REASON_UNSPECIFIED`` and no
    metadata when it carries none, as INTERNAL does).

    Runtime: O(size of the status); on the error path only.
    """
    error = broker_pb2.SessionError(code=status.code.value[0], message=status.details or "")
    for key, value in status.trailing_metadata or ():
        if key != _STATUS_DETAILS_KEY:
            continue
        for detail in status_pb2.Status.FromString(value).details:
            if detail.Is(_ERROR_INFO.DESCRIPTOR):
                info = _ERROR_INFO()
                detail.Unpack(info)
                if info.domain == DOMAIN:
                    error.reason = broker_pb2.ErrorReason.Value(info.reason)
                    error.metadata.update(info.metadata)
    return error


async def abort_with_error(context: grpc.aio.ServicerContext, exc: BaseException) -> NoReturn:
    """Ends the RPC of a grpc.aio servicer with the status for ``exc``; never returns.

    Use as ``except Exception as exc: await abort_with_error(context, exc)``. An abort already
    under way (``grpc.aio.AbortError``) and anything that is not an ``Exception`` (cancellation,
    KeyboardInterrupt) are re-raised untouched: they are not errors to report.

    Event-loop only.
    """
    if isinstance(exc, grpc.aio.AbortError) or not isinstance(exc, Exception):
        raise exc
    await context.abort_with_status(to_status(exc))
    # abort_with_status always raises; this line is for the type checker and a broken context.
    raise AssertionError("ServicerContext.abort_with_status returned")
