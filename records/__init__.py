"""stratalog.records: the sans-IO codec of Kafka's RecordBatch v2 (magic 2) format.

Bytes in, values out, errors from :mod:`.errors`; no files, sockets or event loops. The server
and the client share it, as Kafka's broker and clients share ``common.record``.

* :mod:`.batch`: the 61-byte batch header, validation, in-place patches (offset, append time,
  producer state).
* :mod:`.batch_walk`: the one walk from batch to batch (framing and tail rules),
  :func:`iter_batch_headers`.
* :mod:`.record`: :class:`Record` and the record-level encoder/decoder.
* :mod:`.varint`: zig-zag varints. :mod:`.crc`: CRC-32C. :mod:`.compression`: the four codecs.
* :mod:`.builder`: :class:`BatchBuilder`, :func:`build_batch`.
* :mod:`.reader`: :func:`decode_batch`, :func:`decode_batch_columns` (five parallel lists, no
  object per record), :func:`iter_records`, :func:`iter_batches`,
  :func:`summarize_records`.
* :mod:`.control`: transaction markers and other control records.
* :mod:`.aborted_filter`: which batches a READ_COMMITTED reader drops (aborted transactions).
* everything on disk around the batches, one module per format, each opening with its layout
  (:mod:`.log_layout` maps them and re-exports their names; they are not re-exported here):
  :mod:`.file_names` (segment files), :mod:`.partition_dirs` (topic and partition directory
  names), :mod:`.offset_index_file`, :mod:`.time_index_file`, :mod:`.txn_index_file`,
  :mod:`.producer_snapshot`, :mod:`.offset_checkpoint` and :mod:`.leader_epoch_checkpoint`
  (whose text container is :mod:`.checkpoint_text`).
* the keys and values of ``__consumer_offsets`` (not re-exported here):
  :mod:`.consumer_offsets`, on Kafka's message schemas in ``schemas/`` read by
  :mod:`.message_schema`; :mod:`.group_partition`, a group's partition of that topic.
* :mod:`.errors`: ``RecordError`` > ``CorruptRecordError``, ``InvalidRecordError`` > ...;
  ``LayoutError`` > ... for the on-disk layouts.
"""

from __future__ import annotations

from . import errors
from .aborted_filter import AbortedTransactionFilter
from .batch import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    Compression,
    TimestampType,
    parse_header,
    rewrite_crc,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    set_producer_state,
    validate_batch,
)
from .batch_walk import iter_batch_headers
from .builder import BatchBuilder, build_batch
from .compression import compress, decompress
from .control import ControlRecordType, EndTransactionMarker, decode_control_key
from .crc import crc32c
from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from .reader import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    RecordsSummary,
    decode_batch,
    decode_batch_columns,
    iter_batches,
    iter_records,
    summarize_records,
)
from .record import Header, Record, wrap_int64

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "LOG_OVERHEAD",
    "RECORD_BATCH_OVERHEAD",
    "AbortedTransactionFilter",
    "BatchBuilder",
    "BatchHeader",
    "Compression",
    "ControlRecordType",
    "CorruptRecordError",
    "EndTransactionMarker",
    "Header",
    "InvalidRecordError",
    "Record",
    "RecordError",
    "RecordTooLargeError",
    "RecordsSummary",
    "TimestampType",
    "UnsupportedCompressionError",
    "build_batch",
    "compress",
    "crc32c",
    "decode_batch",
    "decode_batch_columns",
    "decode_control_key",
    "decompress",
    "errors",
    "iter_batch_headers",
    "iter_batches",
    "iter_records",
    "parse_header",
    "rewrite_crc",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "set_producer_state",
    "summarize_records",
    "validate_batch",
    "wrap_int64",
]
