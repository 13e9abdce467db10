"""Validating client batches and assigning their offsets: the leader side of Kafka's LogValidator.

A producer sends whole RecordBatch v2 batches with base offset 0. Before they reach a segment the
log checks them the way a Kafka leader does (``UnifiedLog.analyzeAndValidateRecords`` and
``LogValidator``, Kafka LogValidator and UnifiedLog.analyzeAndValidateRecords;
docs/kafka-behaviours.md#validation) and then stamps them in copies of their headers:

    per batch, in this order                                  error
    whole, size field >= 14, magic 2, >= 61 bytes             CorruptRecord / InvalidRecord
    base offset 0                                             InvalidRecord
    size <= max.message.bytes                                 RecordTooLarge
    CRC-32C matches                                           CorruptRecord
    last_offset_delta + 1 == records_count > 0                InvalidRecord
    not a control batch; producer id set => base seq >= 0     InvalidRecord
    records well formed, deltas 0..n-1, nothing left over     CorruptRecord / InvalidRecord
    the append's records decompress to at most                RecordBatchTooLarge
      decompressed_bytes_max, all batches together
    compacted topic: every record has a key                   InvalidRecord
    CreateTime topic: every record's timestamp -1 (none) or   InvalidTimestamp
      in 0..2^63-1
    CreateTime topic: timestamps within before/after.max.ms;  InvalidTimestamp
      LogAppendTime attribute only with real timestamps
    LogAppendTime topic: the batch must not claim it          InvalidTimestamp
    the whole append <= segment.bytes                         RecordBatchTooLarge

    then, in a copy of the header: base offset := next offset, partition leader epoch := the
    log's,
    max timestamp := append time (LogAppendTime topic) or the records' max (CreateTime; the
    CRC is recomputed only when the header changes)

Records are walked (:func:`stratalog.records.reader.summarize_records`), never built into
objects, except to name the offending record of a timestamp error or when a batch mixes records
without timestamps with a configured timestamp window.

Bounded work: a compressed batch is decompressed to be checked (Kafka's broker does the same), so
an append's cost is its decompressed size, which a small request can make huge (a batch of a few
KiB of zstd can hold 64 MiB of zeros). ``decompressed_bytes_max`` bounds the whole append, not
only each batch: the budget left is each batch's decompression limit, so decompression stops as
soon as the append passes it (:func:`stratalog.records.compression.decompress` is bounded
incrementally for every codec) and nothing larger than the budget is ever allocated.

Timestamps: a record's timestamp is ``base_timestamp + timestamp_delta``, two int64s whose sum
can leave int64 (Kafka's Java reader would wrap it around). Like Kafka's record builder
(``MemoryRecordsBuilder``: "Invalid negative timestamp"), the log accepts only -1 (no timestamp)
and 0..2^63-1, for every record of a CreateTime topic, whatever its timestamp window (a
LogAppendTime topic stamps every batch with the append time, which its records then read as).

Differences from Kafka, on purpose: several batches per append are accepted (Kafka takes exactly
one v2 batch per partition per produce request; stratalog's Produce takes "one or more"); bytes
after the last whole batch are an error (Kafka drops a partial tail silently); a compressed batch
whose records do not have offset deltas 0..n-1 is rejected (Kafka rebuilds it, for clients older
than v2).
"""

from __future__ import annotations

from dataclasses import dataclass

from stratalog.records.batch import (
    LENGTH_FIELD,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    Compression,
    TimestampType,
    check_crc,
    check_framing,
    set_base_offset,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from stratalog.records.batch_walk import iter_batch_headers, single_batch_header
from stratalog.records.errors import (
    CorruptRecordError,
    DecompressionLimitError,
    InvalidRecordError,
    RecordError,
    RecordTooLargeError,
)
from stratalog.records.reader import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    RecordsSummary,
    iter_records,
    summarize_records,
)

from .config import INT64_MAX, LogConfig
from .errors import InvalidTimestampError, RecordBatchTooLargeError

__all__ = ["ValidatedAppend", "validate_and_assign_offsets"]


@dataclass(frozen=True, slots=True)
class ValidatedAppend:
    """Client batches that passed validation, with offsets assigned, ready for a segment.

    ``pieces`` are buffers whose concatenation is the append as it must be stored: per batch,
    either a stamped copy of its 61-byte header (base offset and partition leader epoch set,
    which the CRC does not cover) followed by a view of the rest of the input, or, when the
    header's CRC-covered fields change (max timestamp, attributes: a new CRC), a stamped copy
    of the whole batch. So a 1 MiB batch is never copied whole; a segment writes the pieces
    with one gathered write. The views keep the input alive and must not outlive a mutation
    of it (the input is a request's immutable bytes).

    ``max_timestamp`` and ``shallow_offset_of_max_timestamp`` are what ``Segment.append``
    indexes (Kafka UnifiedLog.analyzeAndValidateRecords; docs/kafka-behaviours.md#append): the
    largest timestamp and the last offset of the earliest batch holding it (CreateTime), or the
    append time and the last offset of the append (LogAppendTime).
    """

    pieces: tuple[bytes | bytearray | memoryview, ...]
    size_bytes: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    record_count: int
    batch_count: int
    # The client's batch headers as parsed (base offset 0; positions in the input), one per
    # batch in order: the producer state reads producer id, epoch, sequence and flags here.
    headers: tuple[BatchHeader, ...] = ()
    # The leader epoch every batch was stamped with (-1: not stamped, a follower's append of
    # the leader's batches, whose epochs are in their headers).
    partition_leader_epoch: int = -1

    @property
    def records(self) -> bytes:
        """The pieces joined: the append as one buffer (a copy)."""
        return b"".join(self.pieces)


def validate_and_assign_offsets(
    record_batches: bytes | bytearray | memoryview,
    config: LogConfig,
    *,
    first_offset: int,
    now_ms: int,
    partition_leader_epoch: int,
    allow_control: bool = False,
    decompressed_bytes_max: int | None = None,
) -> ValidatedAppend:
    """Validate client batches (table above) and return them stamped with offsets from
    ``first_offset``, as :class:`ValidatedAppend` pieces.

    The input is not modified (and is referenced by the pieces). O(total bytes): one CRC pass
    and one record walk per batch, plus a copy and a CRC per batch whose CRC-covered header
    fields are rewritten; other batches have only their 61-byte header copied.

    Raises:
        CorruptRecordError: truncated or partial batches, CRC mismatch, malformed records.
        InvalidRecordError: a value Kafka refuses (magic, base offset, counts, control batch,
            sequence, records without keys on a compacted topic).
        RecordTooLargeError: a batch larger than ``max.message.bytes``.
        InvalidTimestampError: a timestamp outside the accepted window or outside -1 and
            0..2^63-1, or a LogAppendTime attribute Kafka refuses.
        RecordBatchTooLargeError: the whole append is larger than ``segment.bytes``, or its
            records decompress to more than ``decompressed_bytes_max`` bytes.

    ``allow_control`` is for the log's own transaction markers (Kafka's COORDINATOR origin):
    control batches, without a sequence, are accepted. Client batches never set it.
    ``decompressed_bytes_max`` bounds the bytes all the batches' records decompress to (the
    server passes its ``produce_decompressed_bytes_max``); None bounds each batch alone, by
    :data:`~stratalog.records.reader.DEFAULT_MAX_DECOMPRESSED_BYTES`, which also caps each
    batch under a larger budget.
    """
    with memoryview(record_batches) as view:
        headers = _walk_headers(view, config)
        total_bytes = len(view)
        if total_bytes > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"the append of {total_bytes} bytes ({len(headers)} batches) is larger than "
                f"segment.bytes ({config.segment_bytes}): no segment can hold it"
            )
        log_append_time = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
        batch_max_timestamps = []
        record_count = 0
        budget = _DecompressionBudget(decompressed_bytes_max)
        for index, header in enumerate(headers):
            summary = _validate_batch(
                view, index, header, config, now_ms, allow_control, budget
            )
            batch_max_timestamps.append(max(summary.max_timestamp, NO_TIMESTAMP))
            record_count += summary.count

    source = memoryview(record_batches)  # the pieces' views (the walk's view is released)
    pieces: list[bytes | bytearray | memoryview] = []
    next_offset = first_offset
    max_timestamp = NO_TIMESTAMP
    shallow_offset_of_max = -1
    for header, batch_max in zip(headers, batch_max_timestamps, strict=True):
        position = header.position
        end = position + header.size_bytes
        rewrite_header = log_append_time or (
            header.timestamp_type is not TimestampType.CREATE_TIME
            or header.max_timestamp != batch_max
        )
        # A CRC-covered field changes: the CRC runs over the whole batch, so copy it whole.
        # Otherwise only the 61 header bytes are copied and stamped.
        stamped = bytearray(source[position : end if rewrite_header else
                                   position + RECORD_BATCH_OVERHEAD])
        set_base_offset(stamped, 0, next_offset)
        set_partition_leader_epoch(stamped, 0, partition_leader_epoch)
        next_offset += header.records_count
        last_offset = next_offset - 1
        if log_append_time:
            set_log_append_time(stamped, 0, header.size_bytes, now_ms)
        elif rewrite_header:
            set_max_timestamp(
                stamped, 0, header.size_bytes, TimestampType.CREATE_TIME, batch_max
            )
        pieces.append(stamped)
        if not rewrite_header:
            pieces.append(source[position + RECORD_BATCH_OVERHEAD : end])
        if not log_append_time and batch_max > max_timestamp:
            max_timestamp = batch_max
            shallow_offset_of_max = last_offset
    if log_append_time:
        # Kafka (LogValidator, v2): the append time, at the last offset of the append.
        max_timestamp = now_ms
        shallow_offset_of_max = next_offset - 1
    return ValidatedAppend(
        pieces=tuple(pieces),
        size_bytes=total_bytes,
        first_offset=first_offset,
        last_offset=next_offset - 1,
        max_timestamp=max_timestamp,
        shallow_offset_of_max_timestamp=shallow_offset_of_max,
        log_append_time=now_ms if log_append_time else NO_TIMESTAMP,
        record_count=record_count,
        batch_count=len(headers),
        headers=tuple(headers),
        partition_leader_epoch=partition_leader_epoch,
    )


def _walk_headers(view: memoryview, config: LogConfig) -> list[BatchHeader]:
    """Split the input into whole batches (the one walk of batches,
    :func:`~stratalog.records.batch_walk.iter_batch_headers`, or
    :func:`~stratalog.records.batch_walk.single_batch_header` for one); check base offset and
    batch size.

    A partial batch is an error here, unlike at the end of a log: a client sent it whole.
    """
    max_length = config.max_message_bytes - LOG_OVERHEAD
    # The common append, one batch the log takes, in one call; anything else (several
    # batches, a batch refused or malformed) is walked below, which says what is wrong.
    single = single_batch_header(view)
    if single is not None and single.base_offset == 0 and single.length <= max_length:
        return [single]
    headers: list[BatchHeader] = []
    refused = None
    try:
        for header in iter_batch_headers(view):
            if header.base_offset != 0 or header.length > max_length:
                refused = header  # (raised below, outside the framing errors' handler)
                break
            headers.append(header)
    except RecordError as exc:
        # The framing rules of every batch reader say which error (a size field below 14,
        # magic, the 61-byte header); the message says which batch.
        raise type(exc)(f"batch {len(headers)}: {exc}") from None
    if refused is not None:
        _refuse(refused, len(headers), config)
    end = len(view)
    walked = headers[-1].end_position if headers else 0
    if walked < end:
        _raise_partial(view, walked, end, len(headers))
    return headers


def _refuse(header: BatchHeader, index: int, config: LogConfig) -> None:
    """Raise for a well-framed client batch whose base offset or size the log refuses."""
    if header.base_offset != 0:
        raise InvalidRecordError(
            f"batch {index} at position {header.position}: the base offset of a client "
            f"batch must be 0, but it is {header.base_offset}"
        )
    raise RecordTooLargeError(
        f"batch {index} at position {header.position} is {header.size_bytes} bytes, "
        f"which exceeds the maximum configured value of max.message.bytes "
        f"({config.max_message_bytes})"
    )


def _raise_partial(view: memoryview, position: int, end: int, index: int) -> None:
    """The walk stopped at ``position``, before ``end``: a partial batch. Raises, saying what
    the bytes there declare."""
    remaining = end - position
    if remaining < LOG_OVERHEAD:
        raise CorruptRecordError(
            f"{remaining} bytes after the last whole batch (batch {index} at position "
            f"{position}): a partial batch"
        )
    try:
        # (17 bytes or fewer end a walk before their size field is read: one below 14 is
        # still corrupt, not partial.)
        check_framing(view, position, end)
    except RecordError as exc:
        raise type(exc)(f"batch {index}: {exc}") from None
    (length,) = LENGTH_FIELD.unpack_from(view, position + LENGTH_OFFSET)
    raise CorruptRecordError(
        f"batch {index} at position {position} declares {length + LOG_OVERHEAD} bytes but only "
        f"{remaining} remain: a partial batch"
    )


class _DecompressionBudget:
    """What is left of an append's decompressed bytes; spent batch by batch.

    ``total_bytes`` None: no bound on the append, each batch has the per-batch default.
    """

    __slots__ = ("spent_bytes", "total_bytes")

    def __init__(self, total_bytes: int | None) -> None:
        self.total_bytes = total_bytes
        self.spent_bytes = 0

    def batch_limit_bytes(self) -> int:
        """The most the next batch may decompress to: what is left, and never more than one
        batch may (the records reader's default)."""
        if self.total_bytes is None:
            return DEFAULT_MAX_DECOMPRESSED_BYTES
        return min(DEFAULT_MAX_DECOMPRESSED_BYTES, self.total_bytes - self.spent_bytes)

    def binds(self, batch_limit_bytes: int) -> bool:
        """Whether a batch that passed ``batch_limit_bytes`` ran out of this budget (rather
        than past the per-batch limit alone)."""
        return (
            self.total_bytes is not None
            and batch_limit_bytes == self.total_bytes - self.spent_bytes
        )


def _summarize(
    view: memoryview, where: str, header: BatchHeader, budget: _DecompressionBudget
) -> RecordsSummary:
    """The batch's records walked (:func:`summarize_records`), its decompression bounded by
    what is left of the append's budget, which it then spends."""
    limit_bytes = budget.batch_limit_bytes()
    try:
        summary = summarize_records(
            view, header.position, verify_crc=False, header=header,
            max_decompressed_bytes=limit_bytes,
        )
    except DecompressionLimitError:
        if not budget.binds(limit_bytes):
            raise
        raise RecordBatchTooLargeError(
            f"{where}: its records decompress to more than the {limit_bytes} bytes left of the "
            f"append's bound after {budget.spent_bytes} decompressed bytes in the batches before "
            f"it: all the batches of one Produce may decompress to at most "
            f"{budget.total_bytes} bytes (produce_decompressed_bytes_max)"
        ) from None
    if header.compression != Compression.NONE:
        budget.spent_bytes += summary.records_size_bytes
    return summary


def _validate_batch(
    view: memoryview,
    index: int,
    header: BatchHeader,
    config: LogConfig,
    now_ms: int,
    allow_control: bool,
    budget: _DecompressionBudget,
) -> RecordsSummary:
    """Every per-batch check after framing; returns the records' summary."""
    position = header.position
    where = f"batch {index} at position {position}"
    check_crc(view, header)  # framing and magic were checked by _walk_headers
    count_from_offsets = header.last_offset_delta + 1
    if count_from_offsets <= 0:
        raise InvalidRecordError(
            f"{where} has an invalid offset range: [0, {header.last_offset_delta}]"
        )
    if header.records_count <= 0:
        raise InvalidRecordError(f"{where}: invalid reported count {header.records_count}")
    if count_from_offsets != header.records_count:
        raise InvalidRecordError(
            f"{where}: inconsistent offset range [0, {header.last_offset_delta}] and count of "
            f"records {header.records_count}"
        )
    if header.is_control and not allow_control:
        raise InvalidRecordError(f"{where}: clients are not allowed to write control records")
    if header.producer_id >= 0 and header.base_sequence < 0 and not header.is_control:
        raise InvalidRecordError(
            f"{where}: invalid sequence number {header.base_sequence} in a batch with "
            f"producer id {header.producer_id}"
        )
    summary = _summarize(view, where, header, budget)
    if config.is_compacted and summary.has_null_key:
        raise InvalidRecordError(
            f"{where}: a compacted topic cannot accept a record without a key"
        )
    if config.message_timestamp_type is TimestampType.CREATE_TIME:
        # (A LogAppendTime topic stamps the batch: its records all read as the append time.)
        _check_timestamps_representable(view, where, header, summary)
    _validate_timestamps(view, where, header, summary, config, now_ms)
    return summary


def _check_timestamps_representable(
    view: memoryview, where: str, header: BatchHeader, summary: RecordsSummary
) -> None:
    """Every record's timestamp is -1 (none) or in 0..2^63-1: the values Kafka's record
    builder writes, and all an int64 field (the index, the header's max, a reader's long)
    holds."""
    if summary.count == 0 or (
        summary.min_timestamp >= NO_TIMESTAMP and summary.max_timestamp <= INT64_MAX
    ):
        return
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        # Every record reads as the header's max timestamp (an int64: only a negative fails).
        raise InvalidTimestampError(
            f"{where}: its LogAppendTime timestamp {header.max_timestamp}, which every record "
            f"reads as, is negative; a timestamp is -1 (none) or in 0..{INT64_MAX}"
        )
    # Only on this error path are records built, to name the first one at fault.
    for record in iter_records(
        view, header.position, verify_crc=False,
        max_decompressed_bytes=summary.records_size_bytes,
    ):
        timestamp = record.timestamp
        if timestamp < NO_TIMESTAMP or timestamp > INT64_MAX:
            raise InvalidTimestampError(
                f"{where}: the record with offset delta {record.offset - header.base_offset} "
                f"has timestamp {timestamp} (base timestamp {header.base_timestamp} + delta "
                f"{timestamp - header.base_timestamp}); a timestamp is -1 (none) or in "
                f"0..{INT64_MAX}"
            )
    raise AssertionError(f"{where}: the summary's timestamps disagree with its records")


def _validate_timestamps(
    view: memoryview,
    where: str,
    header: BatchHeader,
    summary: RecordsSummary,
    config: LogConfig,
    now_ms: int,
) -> None:
    """Kafka's ``LogValidator.validateTimestamp`` for every record of one batch (Kafka
    LogValidator.validateTimestamp; docs/kafka-behaviours.md#validation)."""
    claims_log_append_time = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    if config.message_timestamp_type is TimestampType.LOG_APPEND_TIME:
        if claims_log_append_time:
            raise InvalidTimestampError(
                f"{where}: invalid timestamp type LogAppendTime; producers must not set it"
            )
        return
    if claims_log_append_time and summary.max_timestamp == NO_TIMESTAMP:
        # Every record of a LogAppendTime batch reads as its max timestamp: here, none.
        raise InvalidTimestampError(
            f"{where}: invalid timestamp type LogAppendTime in a batch without timestamps; "
            "producers must not set it"
        )
    before_ms = config.effective_timestamp_before_max_ms
    after_ms = config.effective_timestamp_after_max_ms
    if before_ms == INT64_MAX and after_ms == INT64_MAX:
        return  # no window: nothing can be outside it
    # When no record lacks a timestamp (min would be -1), min and max bound every record.
    if summary.min_timestamp != NO_TIMESTAMP and not (
        _out_of_window(summary.min_timestamp, now_ms, before_ms, after_ms)
        or _out_of_window(summary.max_timestamp, now_ms, before_ms, after_ms)
    ):
        return
    for record in iter_records(
        view, header.position, verify_crc=False,
        max_decompressed_bytes=summary.records_size_bytes,
    ):
        if record.timestamp != NO_TIMESTAMP and _out_of_window(
            record.timestamp, now_ms, before_ms, after_ms
        ):
            raise InvalidTimestampError(
                f"{where}: timestamp {record.timestamp} of the record with offset delta "
                f"{record.offset - header.base_offset} is out of range; it must be within "
                f"[{_java_long(now_ms - before_ms)}, {_java_long(now_ms + after_ms)}] "
                f"(message.timestamp.before.max.ms {before_ms}, "
                f"message.timestamp.after.max.ms {after_ms})"
            )


def _out_of_window(timestamp: int, now_ms: int, before_ms: int, after_ms: int) -> bool:
    # Java long arithmetic, as Kafka computes it (so extreme timestamps behave the same).
    difference = _java_long(now_ms - timestamp)
    return difference > before_ms or _java_long(-difference) > after_ms


def _java_long(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value

