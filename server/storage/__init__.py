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
"""

from __future__ import annotations

from .config import TOPIC_CONFIG_NAMES, LogConfig
from .errors import (
    CorruptIndexError,
    InvalidConfigError,
    InvalidOffsetError,
    InvalidTimestampError,
    LogClosedError,
    OffsetOutOfRangeError,
    OffsetOverflowError,
    RecordBatchTooLargeError,
    StorageError,
    StorageIOError,
)
from .partition_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    PartitionLog,
)
from .segment import FetchSlice, LogOffsetPosition, Segment
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
    "CorruptIndexError",
    "FetchSlice",
    "InvalidConfigError",
    "InvalidOffsetError",
    "InvalidTimestampError",
    "LogClosedError",
    "LogConfig",
    "LogOffsetPosition",
    "OffsetOutOfRangeError",
    "OffsetOverflowError",
    "PartitionLog",
    "RecordBatchTooLargeError",
    "Segment",
    "Segments",
    "StorageError",
    "StorageIOError",
    "TimestampOffset",
]
