"""The error tree of ``stratalog.server.storage``.

Operating errors (bad input, bad files, full disks) are exceptions from this tree, or from
:mod:`stratalog.records.errors` when the bytes of a batch are at fault; ``server/rpc/status.py`` is the
one place that turns both into gRPC statuses. Programmer errors are assertions.

    StorageError
    ├── OffsetOutOfRangeError      a read or lookup outside [log_start_offset, log_end_offset]
    ├── UnexpectedAppendOffsetError  a follower append starting below the log end offset
    ├── InvalidOffsetError         an index append that is not strictly increasing
    ├── OffsetOverflowError        an offset too far from a segment's base offset (> 2^31 - 1)
    ├── CorruptIndexError          an index file that fails its sanity check
    ├── CorruptCheckpointError     a checkpoint or meta.properties file of a log directory that
    │                              does not parse (names the file and the line)
    ├── IndexFullError             an append to an index with no free slot (the log must roll first)
    ├── InvalidSegmentFileNameError  a file name that is not <20-digit offset>.<suffix> (also ValueError)
    ├── RecordBatchTooLargeError   an append larger than segment.bytes
    ├── InvalidTimestampError      a CreateTime outside message.timestamp.{before,after}.max.ms
    ├── InvalidConfigError         an unknown config name or a value out of its range
    │   └── LogNotCompactedError   a clean asked of a log whose cleanup.policy has no compact
    ├── InvalidTopicError          a topic name or partition count that is not allowed
    ├── UnknownTopicOrPartitionError
    ├── TopicAlreadyExistsError
    ├── LogDirLockedError          another process holds a log directory's .lock
    ├── LogClosedError             an operation on a closed log
    ├── CleaningAbortedError       a cleaning given up because its log changed under it
    │                              (truncated, deleted, closed): nothing was replaced
    ├── ProducerStateError         a batch the producer state refuses (nothing is written)
    │   ├── OutOfOrderSequenceError   a sequence that does not follow the producer's last one
    │   ├── InvalidProducerEpochError an epoch older than the producer's (a fenced producer)
    │   ├── UnknownProducerIdError    a non-zero sequence from a producer the log does not know
    │   ├── InvalidTxnStateError      a non-transactional write inside an open transaction
    │   └── TransactionCoordinatorFencedError  a marker from an older coordinator epoch
    ├── ResourceLimitExceededError a request the server's resources cannot take (``limit``
    │                              names the limit: RLIMIT_NOFILE for file descriptors)
    │   └── OutOfDescriptorsError  an append that needed a descriptor when the process had
    │                              none free (EMFILE, ENFILE): nothing written, retriable
    ├── TooManyOpenFilesError      the log directories need more descriptors than the process
    │                              may open: the server cannot start
    ├── LogDirOfflineError         a partition whose log directory went offline after an I/O
    │                              error (names the topic-partition, never a path)
    ├── InsufficientSpaceError     segment files to preallocate that the disk has no room for
    └── StorageIOError             an OSError while reading or writing a log (disk full, EIO)
"""

from __future__ import annotations

__all__ = [
    "CleaningAbortedError",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "IndexFullError",
    "InsufficientSpaceError",
    "InvalidConfigError",
    "InvalidOffsetError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidSegmentFileNameError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "LogClosedError",
    "LogDirLockedError",
    "LogDirOfflineError",
    "LogNotCompactedError",
    "OffsetOutOfRangeError",
    "OffsetOverflowError",
    "OutOfDescriptorsError",
    "OutOfOrderSequenceError",
    "ProducerStateError",
    "RecordBatchTooLargeError",
    "ResourceLimitExceededError",
    "StorageError",
    "StorageIOError",
    "TooManyOpenFilesError",
    "TopicAlreadyExistsError",
    "TransactionCoordinatorFencedError",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
    "UnknownTopicOrPartitionError",
]


class StorageError(Exception):
    """Base of every operating error of the storage engine."""


class OffsetOutOfRangeError(StorageError):
    """An offset below the log start offset or above the log end offset.

    Carries the log's bounds so that a client can tell which side it fell off.
    """

    def __init__(self, message: str, *, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class UnexpectedAppendOffsetError(StorageError):
    """A follower append whose first offset is below the log end offset (Kafka's
    UnexpectedAppendOffsetException): the follower fetched from the wrong offset, or must
    truncate first. Carries the append's first and last offsets and the log end offset."""

    def __init__(
        self, message: str, *, first_offset: int, last_offset: int, log_end_offset: int
    ) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_end_offset = log_end_offset


class InvalidOffsetError(StorageError):
    """An index append whose offset does not increase (Kafka's InvalidOffsetException)."""


class OffsetOverflowError(StorageError):
    """An offset more than 2^31 - 1 past a segment's base offset cannot be indexed in it."""


class CorruptIndexError(StorageError):
    """An ``.index``/``.timeindex`` file fails its sanity check (Kafka's CorruptIndexException)."""


class CorruptCheckpointError(StorageError):
    """A metadata file of a log directory that does not parse: an offset checkpoint
    (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``) or ``meta.properties``.

    Kafka raises ``IOException("Malformed line ...")`` and friends here. ``path`` is the file and
    ``line_number`` the 1-based line at fault, or ``None`` when the fault is not one line (an
    entry count that does not match the entries, bytes that are not text).
    """

    def __init__(self, message: str, *, path: str, line_number: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line_number = line_number


class IndexFullError(StorageError):
    """An append to an index whose slots are all used (Kafka's "Attempt to append to a full index").

    Callers check ``is_full`` before appending (a full index forces a segment roll), so this is
    raised only when that check was skipped.
    """


class InvalidSegmentFileNameError(StorageError, ValueError):
    """A file name that does not start with a decimal offset followed by a dot.

    Also a ``ValueError``, as Kafka's ``offsetFromFileName`` fails with ``NumberFormatException``.
    """


class RecordBatchTooLargeError(StorageError):
    """An append larger than ``segment.bytes``: no segment could ever hold it."""


class InvalidTimestampError(StorageError):
    """A CreateTime timestamp outside the topic's accepted window, or a bad timestamp type."""


class InvalidConfigError(StorageError):
    """An unknown config name, or a value that does not parse or is out of range."""


class LogNotCompactedError(InvalidConfigError):
    """A cleaning asked of a partition whose ``cleanup.policy`` does not contain ``compact``."""


class CleaningAbortedError(StorageError):
    """A cleaning that gave up before replacing anything: its log was truncated, had segments
    deleted, was closed or went offline while the cleaner read it (Kafka's
    ``LogCleaningAbortedException``). The ``.cleaned`` files written so far are removed; the
    log is as it was, and a later cleaning starts again."""


class InvalidTopicError(StorageError):
    """A topic name or partition count that is not allowed."""


class InvalidPartitionsError(StorageError):
    """A partition count that is not allowed (Kafka's INVALID_PARTITIONS): CreatePartitions
    asked for a count not above the topic's (a topic's partitions are only ever added), or a
    request's count is outside 1..``topic_partitions_max`` (server/broker/admin_manager.py)."""


class UnknownTopicOrPartitionError(StorageError):
    """No such topic, or no such partition of it."""


class TopicAlreadyExistsError(StorageError):
    """A topic of that name exists already."""


class LogDirLockedError(StorageError):
    """Another process holds the ``.lock`` of a log directory."""


class LogClosedError(StorageError):
    """The log was closed (or is shutting down) and takes no more operations."""


class ProducerStateError(StorageError):
    """A batch (or transaction marker) that the partition's producer state refuses.

    Raised before anything is written. ``producer_id`` names the producer at fault.
    """

    def __init__(self, message: str, *, producer_id: int) -> None:
        super().__init__(message)
        self.producer_id = producer_id


class OutOfOrderSequenceError(ProducerStateError):
    """A sequence number that is not the producer's last one + 1 (Kafka's
    OUT_OF_ORDER_SEQUENCE_NUMBER); also a new epoch that does not start at sequence 0."""


class InvalidProducerEpochError(ProducerStateError):
    """An epoch below the producer's current one: a zombie, fenced (INVALID_PRODUCER_EPOCH)."""


class UnknownProducerIdError(ProducerStateError):
    """A non-zero sequence from a producer the log has no state for, for example because it
    expired after ``producer.id.expiration.ms`` (UNKNOWN_PRODUCER_ID)."""


class InvalidTxnStateError(ProducerStateError):
    """A non-transactional batch from a producer whose transaction is open (INVALID_TXN_STATE)."""


class TransactionCoordinatorFencedError(ProducerStateError):
    """A transaction marker whose coordinator epoch is below the last one seen for the producer
    (TRANSACTION_COORDINATOR_FENCED)."""


class StorageIOError(StorageError):
    """An ``OSError`` while reading or writing log files (disk full, I/O error, permissions)."""


class ResourceLimitExceededError(StorageError):
    """A request that would take the server past one of its limits (RESOURCE_LIMIT_EXCEEDED).

    ``limit`` names the limit, as an operator would raise it (``RLIMIT_NOFILE``: the process's
    open files limit). Raised before anything is written; the message names no path.
    """

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class OutOfDescriptorsError(ResourceLimitExceededError):
    """An append (or the roll it needed, or a flush) found no file descriptor free: the process
    was at its ``RLIMIT_NOFILE`` (EMFILE) or the system at ``fs.file-max`` (ENFILE). Nothing
    was written (a flush: nothing moved) and the partition stays online: the same call
    succeeds once descriptors are free again (a retriable RESOURCE_LIMIT_EXCEEDED). Not an I/O error of the disk, which would take the
    log directory offline (:class:`LogDirOfflineError`).

    Names the topic-partition only (``topic``, ``partition``), never a path.
    """

    def __init__(self, topic: str, partition: int, action: str, *, limit: str) -> None:
        super().__init__(
            f"partition {topic}-{partition}: the server has no file descriptor free for a "
            f"{action} ({limit} reached); nothing was lost and the partition stays online: "
            "retry",
            limit=limit,
        )
        self.topic = topic
        self.partition = partition


class TooManyOpenFilesError(StorageError):
    """The log directories hold more partitions than the open files limit lets the server
    keep open (or opening them ran out of descriptors): the message says how many are needed
    and what to raise. A start-up error."""


class LogDirOfflineError(StorageError):
    """The partition's log directory went offline after an I/O error (Kafka's
    KAFKA_STORAGE_ERROR for an offline log dir): reads and writes are refused until the
    server restarts and recovers it.

    Names the topic-partition only (``topic``, ``partition``): the message is safe to send to
    a client, which must not learn the server's paths.
    """

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(
            f"partition {topic}-{partition} is unavailable: its log directory is offline after "
            "an I/O error (the server recovers it at its next start)"
        )
        self.topic = topic
        self.partition = partition


class InsufficientSpaceError(StorageError):
    """Segment files to preallocate (``preallocate=true``) that need more bytes than the log
    directory's file system has free: refused before anything is created (STORAGE_FULL).

    ``need_bytes`` and ``free_bytes`` say how far off it is; the message names no path.
    """

    def __init__(self, message: str, *, need_bytes: int, free_bytes: int) -> None:
        super().__init__(message)
        self.need_bytes = need_bytes
        self.free_bytes = free_bytes
