"""Domain errors to Kafka's error codes: the one place where the Kafka front end decides what a
Kafka client is told.

The codes are Kafka's (``clients/src/main/java/org/apache/kafka/common/protocol/Errors.java``);
:class:`Code` names the ones this server sends. :func:`code_of` walks an exception's MRO and the
nearest class in :data:`ERROR_TABLE` wins (a leaf added to a tree later gets its base's code
until it has a row of its own), as server/rpc/status.py does for gRPC. The group coordinator's
errors carry their Kafka code themselves (server/groups/group_errors.py: they are Kafka's).

:func:`message_of` is the text for a response's ``error_message`` field: the exception's own
message for errors the client caused; a fixed sentence for the server's own trouble (storage
errors name files on the server's disk) and anything unexpected, which is logged whole here.
"""

from __future__ import annotations

import enum
import errno
import logging
import types
from collections.abc import Mapping

from stratalog.records import errors as record_errors
from stratalog.server import client_limits
from stratalog.server.client_text import clip_utf8
from stratalog.server.cluster import errors as cluster_errors
from stratalog.server.groups import group_errors
from stratalog.server.security import errors as security_errors
from stratalog.server.storage import errors as storage_errors
from stratalog.server.transactions import errors as transaction_errors

__all__ = ["ERROR_TABLE", "Code", "KafkaRequestError", "code_of", "message_of"]

logger = logging.getLogger(__name__)

#: Longest error_message sent, in UTF-8 bytes.
MESSAGE_BYTES_MAX = 1024


class Code(enum.IntEnum):
    """Kafka's error codes this server sends (Errors.java)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    INVALID_RECORD = 87
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    UNKNOWN_TOPIC_ID = 100
    TRANSACTIONAL_ID_NOT_FOUND = 105
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115


class KafkaRequestError(Exception):
    """A request the Kafka front end refuses by its own checks, with the code to answer
    (a field out of range: INVALID_REQUEST; a version's missing feature: UNSUPPORTED_VERSION)."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code


_C = Code

#: Exception class -> Kafka error code, looked up along the exception's MRO (nearest ancestor).
ERROR_TABLE: Mapping[type[BaseException], Code] = types.MappingProxyType({
    # The record codec: the bytes of a batch are at fault.
    record_errors.RecordError: _C.CORRUPT_MESSAGE,
    record_errors.CorruptRecordError: _C.CORRUPT_MESSAGE,
    record_errors.InvalidRecordError: _C.INVALID_RECORD,
    record_errors.UnsupportedMessageVersionError: _C.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    record_errors.UnsupportedCompressionError: _C.UNSUPPORTED_COMPRESSION_TYPE,
    record_errors.RecordTooLargeError: _C.MESSAGE_TOO_LARGE,
    # The storage engine: requests it refuses.
    storage_errors.OffsetOutOfRangeError: _C.OFFSET_OUT_OF_RANGE,
    storage_errors.UnknownTopicOrPartitionError: _C.UNKNOWN_TOPIC_OR_PARTITION,
    storage_errors.TopicAlreadyExistsError: _C.TOPIC_ALREADY_EXISTS,
    storage_errors.InvalidTopicError: _C.INVALID_TOPIC_EXCEPTION,
    storage_errors.InvalidPartitionsError: _C.INVALID_PARTITIONS,
    storage_errors.InvalidConfigError: _C.INVALID_CONFIG,
    storage_errors.InvalidTimestampError: _C.INVALID_TIMESTAMP,
    storage_errors.RecordBatchTooLargeError: _C.MESSAGE_TOO_LARGE,
    storage_errors.OutOfOrderSequenceError: _C.OUT_OF_ORDER_SEQUENCE_NUMBER,
    storage_errors.InvalidProducerEpochError: _C.INVALID_PRODUCER_EPOCH,
    storage_errors.UnknownProducerIdError: _C.UNKNOWN_PRODUCER_ID,
    storage_errors.InvalidTxnStateError: _C.INVALID_TXN_STATE,
    storage_errors.TransactionCoordinatorFencedError: _C.TRANSACTION_COORDINATOR_FENCED,
    # The server's own trouble (retriable for Kafka's clients: KAFKA_STORAGE_ERROR is).
    storage_errors.StorageError: _C.KAFKA_STORAGE_ERROR,
    storage_errors.LogClosedError: _C.NOT_LEADER_OR_FOLLOWER,
    storage_errors.ResourceLimitExceededError: _C.THROTTLING_QUOTA_EXCEEDED,
    storage_errors.LogNotCompactedError: _C.INVALID_CONFIG,
    # The transaction coordinator.
    transaction_errors.TransactionError: _C.INVALID_REQUEST,
    transaction_errors.ConcurrentTransactionsError: _C.CONCURRENT_TRANSACTIONS,
    transaction_errors.CoordinatorLoadInProgressError: _C.COORDINATOR_LOAD_IN_PROGRESS,
    transaction_errors.NotCoordinatorError: _C.NOT_COORDINATOR,
    transaction_errors.CoordinatorNotAvailableError: _C.COORDINATOR_NOT_AVAILABLE,
    transaction_errors.ProducerFencedError: _C.PRODUCER_FENCED,
    transaction_errors.InvalidProducerIdMappingError: _C.INVALID_PRODUCER_ID_MAPPING,
    transaction_errors.TransactionalIdNotFoundError: _C.TRANSACTIONAL_ID_NOT_FOUND,
    transaction_errors.InvalidTxnStateError: _C.INVALID_TXN_STATE,
    transaction_errors.InvalidTransactionTimeoutError: _C.INVALID_TRANSACTION_TIMEOUT,
    transaction_errors.InvalidTransactionalIdError: _C.INVALID_REQUEST,
    transaction_errors.TransactionsNotSupportedError: _C.INVALID_REQUEST,
    transaction_errors.CorruptTransactionLogError: _C.KAFKA_STORAGE_ERROR,
    transaction_errors.ProducerIdsExhaustedError: _C.KAFKA_STORAGE_ERROR,
    # Security.
    security_errors.AuthenticationFailedError: _C.SASL_AUTHENTICATION_FAILED,
    security_errors.AuthenticationThrottledError: _C.SASL_AUTHENTICATION_FAILED,
    security_errors.NotAuthorizedError: _C.CLUSTER_AUTHORIZATION_FAILED,
    security_errors.InvalidAclError: _C.INVALID_REQUEST,
    security_errors.AclLimitError: _C.POLICY_VIOLATION,
    security_errors.SecurityDisabledError: _C.SECURITY_DISABLED,
    security_errors.QuotaBacklogExceededError: _C.THROTTLING_QUOTA_EXCEEDED,
    client_limits.ClientLimitExceededError: _C.THROTTLING_QUOTA_EXCEEDED,
    # Replication (cluster mode).
    cluster_errors.ClusterError: _C.COORDINATOR_NOT_AVAILABLE,
    cluster_errors.NotLeaderOrFollowerError: _C.NOT_LEADER_OR_FOLLOWER,
    cluster_errors.UnregisteredReplicaError: _C.NOT_LEADER_OR_FOLLOWER,
    cluster_errors.NotEnoughReplicasError: _C.NOT_ENOUGH_REPLICAS,
    cluster_errors.NotEnoughReplicasAfterAppendError: _C.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    cluster_errors.FencedLeaderEpochError: _C.FENCED_LEADER_EPOCH,
    cluster_errors.UnknownLeaderEpochError: _C.UNKNOWN_LEADER_EPOCH,
    cluster_errors.LeaderNotAvailableError: _C.LEADER_NOT_AVAILABLE,
    cluster_errors.InvalidReplicationFactorError: _C.INVALID_REPLICATION_FACTOR,
    cluster_errors.UnsupportedInClusterError: _C.INVALID_REQUEST,
    cluster_errors.ReplicationTimeoutError: _C.REQUEST_TIMED_OUT,
    cluster_errors.ElectionNotNeededError: _C.ELECTION_NOT_NEEDED,
    cluster_errors.PreferredLeaderNotAvailableError: _C.PREFERRED_LEADER_NOT_AVAILABLE,
    cluster_errors.EligibleLeadersNotAvailableError: _C.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    cluster_errors.InvalidReplicaAssignmentError: _C.INVALID_REPLICA_ASSIGNMENT,
    cluster_errors.NoReassignmentInProgressError: _C.NO_REASSIGNMENT_IN_PROGRESS,
})

# The server's own trouble: a fixed sentence, the exception logged (its message names files).
_SERVER_SIDE = (storage_errors.StorageError, transaction_errors.CorruptTransactionLogError,
                transaction_errors.ProducerIdsExhaustedError)
_CLIENT_SIDE_STORAGE = (
    storage_errors.OffsetOutOfRangeError, storage_errors.UnknownTopicOrPartitionError,
    storage_errors.TopicAlreadyExistsError, storage_errors.InvalidTopicError,
    storage_errors.InvalidPartitionsError, storage_errors.InvalidConfigError,
    storage_errors.InvalidTimestampError, storage_errors.RecordBatchTooLargeError,
    storage_errors.ProducerStateError, storage_errors.ResourceLimitExceededError,
    storage_errors.LogDirOfflineError, storage_errors.InsufficientSpaceError,
)
_DISK_FULL = frozenset(c for c in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if c is not None)


def code_of(exc: BaseException) -> int:
    """Kafka's error code for ``exc`` (UNKNOWN_SERVER_ERROR for anything not in the table)."""
    if isinstance(exc, KafkaRequestError):
        return exc.code
    if isinstance(exc, group_errors.GroupError):
        return exc.code
    for klass in type(exc).__mro__:
        code = ERROR_TABLE.get(klass)
        if code is not None:
            return code
    return Code.UNKNOWN_SERVER_ERROR


def message_of(exc: BaseException) -> str:
    """The ``error_message`` for ``exc`` (module docstring); logs the server's own errors."""
    client_side = isinstance(exc, (KafkaRequestError, group_errors.GroupError,
                                   *_CLIENT_SIDE_STORAGE))
    if not client_side and (isinstance(exc, _SERVER_SIDE) or code_of(exc) == -1):
        if _disk_full(exc):
            logger.warning("a Kafka request failed, the storage is full: %s", exc)
            return "the server's storage is full"
        logger.error("a Kafka request failed on the server's side", exc_info=exc)
        return "storage error on the server" if isinstance(exc, _SERVER_SIDE) else (
            "internal server error")
    return clip_utf8(str(exc), MESSAGE_BYTES_MAX)


def _disk_full(exc: BaseException) -> bool:
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 16:
        if isinstance(current, OSError) and current.errno in _DISK_FULL:
            return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False
