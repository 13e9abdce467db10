"""The storage engine: partition logs in Apache Kafka's on-disk format, usable in-process.

The embedded API, like SQLite's: open a directory, append Kafka v2 record batches, read them back
by offset or by timestamp::

    from stratalog.server.storage import PartitionLog
    from stratalog.records import build_batch

    with PartitionLog.open("data/orders-0", {"segment.bytes": "1048576"}) as log:
        info = log.append(build_batch([(1700000000000, b"key", b"value", ())]))
        batches = log.read(info.first_offset, max_bytes=1 << 20)
        found = log.offset_for_timestamp(1700000000000)

Synchronous and single-writer per log; reads may run in other threads (see
:class:`PartitionLog`). Nothing here imports grpc.

A whole data directory of topics (what the server runs on) is a :class:`LogManager`::

    from stratalog.server.storage import LogManager

    with LogManager.open(["data"]) as manager:      # locks, recovers after a crash
        manager.create_topic("orders", partitions=3, configs={"retention.ms": "86400000"})
        log = manager.get_log("orders", 0)
        manager.start_background()                  # flush.ms, retention, checkpoints,
                                                    # and the log cleaner's threads
        manager.clean_now("changelog", 0)           # compact one partition now
"""

from __future__ import annotations

from .cleaner import CleaningResult
from .cleaner_manager import CleanerPartitionStatus, CleanerStats
from .config import TOPIC_CONFIG_NAMES, LogConfig
from .errors import (
    CleaningAbortedError,
    CorruptIndexError,
    InvalidConfigError,
    InvalidOffsetError,
    InvalidTimestampError,
    InvalidTopicError,
    LogClosedError,
    LogNotCompactedError,
    OffsetOutOfRangeError,
    OffsetOverflowError,
    RecordBatchTooLargeError,
    StorageError,
    StorageIOError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from .log_manager import LogManager, PartitionDescription, TopicDescription
from .partition_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    PartitionLog,
)
from .segment import LogOffsetPosition, Segment
from .segments import Segments
from .time_index import TimestampOffset

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "TOPIC_CONFIG_NAMES",
    "AppendInfo",
    "CleanerPartitionStatus",
    "CleanerStats",
    "CleaningAbortedError",
    "CleaningResult",
    "CorruptIndexError",
    "InvalidConfigError",
    "InvalidOffsetError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "LogClosedError",
    "LogConfig",
    "LogManager",
    "LogNotCompactedError",
    "LogOffsetPosition",
    "OffsetOutOfRangeError",
    "OffsetOverflowError",
    "PartitionDescription",
    "PartitionLog",
    "RecordBatchTooLargeError",
    "Segment",
    "Segments",
    "StorageError",
    "StorageIOError",
    "TimestampOffset",
    "TopicAlreadyExistsError",
    "TopicDescription",
    "UnknownTopicOrPartitionError",
]
