"""The on-disk layout around the record batches: a map of the files, one module per format.

Kafka stores a partition as a directory of segments; each segment is a ``.log`` of record batches
(:mod:`stratalog.records.batch` owns their layout) with index files beside it, all named after the
segment's base offset. A log directory holds the partition directories and the offset
checkpoints::

    <log dir>/
        recovery-point-offset-checkpoint    offset checkpoint text   §7  offset_checkpoint.py
        log-start-offset-checkpoint         offset checkpoint text   §7  offset_checkpoint.py
        replication-offset-checkpoint       (high watermarks)        §7  offset_checkpoint.py
        orders-0/                           <topic>-<partition>      §2  partition_dirs.py
            00000000000000000000.log        record batches           §1  file_names.py, batch.py
            00000000000000000000.index      offset index entries     §3  offset_index_file.py
            00000000000000000000.timeindex  time index entries       §4  time_index_file.py
            00000000000000000000.txnindex   aborted transactions     §5  txn_index_file.py
            00000000000000004096.snapshot   producer state at 4096   §6  producer_snapshot.py
            leader-epoch-checkpoint         leader epochs            §8  leader_epoch_checkpoint.py
        orders-1.<32 hex>-delete/           a deleted partition, removed in the background

(The section numbers are those other modules cite: "``log_layout`` §8" is
``leader_epoch_checkpoint.py``.)

Each module opens with its format's byte (or text) layout; the two checkpoint texts share their
container (:mod:`~stratalog.records.checkpoint_text`), the three index files their fixed-size
entries (:mod:`~stratalog.records.entry_field`). Every name, number and layout is defined once,
so that the storage engine, ``stratalog dump-log`` and the Spark file reader cannot drift apart.
All of it is sans-IO like the rest of :mod:`stratalog.records`: names and bytes in, values out,
nothing opened. The storage engine joins the names with directories (``server/storage/files.py``)
and turns the errors (:class:`~stratalog.records.errors.LayoutError`) into its own, adding the
path.

This module re-exports the public names of those modules, for callers that import them all from
one place.
"""

from __future__ import annotations

from .entry_field import (
    EntryField,
    SanityRule,
)
from .file_names import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SNAPSHOT_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    filename_prefix_from_offset,
    is_index_file,
    is_log_file,
    offset_from_file_name,
    segment_file_name,
)
from .leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    format_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
)
from .offset_checkpoint import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    OFFSET_CHECKPOINT_VERSION,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    format_offset_checkpoint,
    parse_offset_checkpoint,
)
from .offset_index_file import (
    OFFSET_INDEX_ENTRY,
    OFFSET_INDEX_POSITION,
    OFFSET_INDEX_RELATIVE_OFFSET,
    OffsetIndexEntry,
    offset_index_sanity,
    unpack_offset_index,
)
from .partition_dirs import (
    DELETE_DIR_SUFFIX,
    DIR_NAME_LENGTH_MAX,
    FUTURE_DIR_SUFFIX,
    PARTITION_MAX,
    STRAY_DIR_SUFFIX,
    TOPIC_NAME_LENGTH_MAX,
    PartitionDirKind,
    deleted_dir_name,
    is_deleted_dir_name,
    is_future_dir_name,
    is_stray_dir_name,
    is_valid_topic_name,
    parse_partition_dir_name,
    partition_dir_kind,
    partition_dir_name,
    validate_partition,
    validate_topic_name,
)
from .producer_snapshot import (
    PRODUCER_SNAPSHOT_CRC_START,
    PRODUCER_SNAPSHOT_ENTRY,
    PRODUCER_SNAPSHOT_HEADER,
    PRODUCER_SNAPSHOT_VERSION,
    ProducerSnapshot,
    ProducerSnapshotEntry,
    pack_producer_snapshot,
    unpack_producer_snapshot,
)
from .time_index_file import (
    TIME_INDEX_ENTRY,
    TIME_INDEX_RELATIVE_OFFSET,
    TIME_INDEX_TIMESTAMP,
    TimeIndexEntry,
    time_index_sanity,
    unpack_time_index,
)
from .txn_index_file import (
    TXN_INDEX_ENTRY,
    TXN_INDEX_VERSION,
    TxnIndexEntry,
    pack_txn_index_entry,
    unpack_txn_index,
    unpack_txn_index_entry,
)

__all__ = [
    "CLEANED_FILE_SUFFIX",
    "DELETED_FILE_SUFFIX",
    "DELETE_DIR_SUFFIX",
    "DIR_NAME_LENGTH_MAX",
    "FUTURE_DIR_SUFFIX",
    "INDEX_FILE_SUFFIX",
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "LOG_FILE_SUFFIX",
    "LOG_START_OFFSET_CHECKPOINT_FILE",
    "OFFSET_CHECKPOINT_VERSION",
    "OFFSET_INDEX_ENTRY",
    "OFFSET_INDEX_POSITION",
    "OFFSET_INDEX_RELATIVE_OFFSET",
    "PARTITION_MAX",
    "PRODUCER_SNAPSHOT_CRC_START",
    "PRODUCER_SNAPSHOT_ENTRY",
    "PRODUCER_SNAPSHOT_HEADER",
    "PRODUCER_SNAPSHOT_VERSION",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "REPLICATION_OFFSET_CHECKPOINT_FILE",
    "SNAPSHOT_FILE_SUFFIX",
    "STRAY_DIR_SUFFIX",
    "SWAP_FILE_SUFFIX",
    "TIME_INDEX_ENTRY",
    "TIME_INDEX_FILE_SUFFIX",
    "TIME_INDEX_RELATIVE_OFFSET",
    "TIME_INDEX_TIMESTAMP",
    "TOPIC_NAME_LENGTH_MAX",
    "TXN_INDEX_ENTRY",
    "TXN_INDEX_FILE_SUFFIX",
    "TXN_INDEX_VERSION",
    "EntryField",
    "OffsetIndexEntry",
    "PartitionDirKind",
    "ProducerSnapshot",
    "ProducerSnapshotEntry",
    "SanityRule",
    "TimeIndexEntry",
    "TxnIndexEntry",
    "deleted_dir_name",
    "filename_prefix_from_offset",
    "format_leader_epoch_checkpoint",
    "format_offset_checkpoint",
    "is_deleted_dir_name",
    "is_future_dir_name",
    "is_index_file",
    "is_log_file",
    "is_stray_dir_name",
    "is_valid_topic_name",
    "offset_from_file_name",
    "offset_index_sanity",
    "pack_producer_snapshot",
    "pack_txn_index_entry",
    "parse_leader_epoch_checkpoint",
    "parse_offset_checkpoint",
    "parse_partition_dir_name",
    "partition_dir_kind",
    "partition_dir_name",
    "segment_file_name",
    "time_index_sanity",
    "unpack_offset_index",
    "unpack_producer_snapshot",
    "unpack_time_index",
    "unpack_txn_index",
    "unpack_txn_index_entry",
    "validate_partition",
    "validate_topic_name",
]
