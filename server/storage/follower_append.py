"""Checking a follower's append: batches that keep the leader's offsets and epochs.

A follower copies its leader's log by fetching it: the batches arrive exactly as the leader
stored them, offsets assigned and headers stamped with the leader's epoch, and are appended
unchanged (Kafka's ``UnifiedLog.appendAsFollower``,
``core/src/main/scala/kafka/log/UnifiedLog.scala``). Nothing is re-stamped and no offset is
assigned, so the checks are those of a log file, not of a client's request (Kafka
UnifiedLog.analyzeAndValidateRecords; docs/kafka-behaviours.md#validation):

    check                                             error
    -----------------------------------------------   --------------------------------------
    each batch whole, magic 2                         CorruptRecordError / InvalidRecordError
    each batch's CRC                                  CorruptRecordError
    a batch over max.message.bytes                    RecordTooLargeError
    a base offset or last offset delta below 0        InvalidRecordError
    a partition leader epoch below 0                  InvalidRecordError (the leader stamps it)
    each base offset above the previous last offset   InvalidRecordError (Kafka's
                                                      OffsetsOutOfOrderException)
    the first base offset at or above the log end     UnexpectedAppendOffsetError
    the whole append over segment.bytes               RecordBatchTooLargeError

A first base offset *above* the log end is accepted, as in Kafka: a compacted leader's log has
gaps between batches, and a follower fetching at its log end gets the next batch the leader
kept. Timestamps, sequences and compaction keys are not checked: the leader did.

The batches are cut into *runs* that each fit one segment: a run's last offset lies within
2^31 - 1 of its first base offset, so that a segment rolled at the run's first offset can index
it (an offset index holds 32-bit relative offsets; a follower append may span more than that
after the leader compacted). Each run carries what the log needs to write it: a
:class:`ValidatedAppend` over views of the input, the producer-state view of its batches
(control batches' markers decoded) and the leader epochs that begin in it.

Sans-IO apart from nothing: bytes in, values out. The caller (``PartitionLog.append_as_follower``)
rolls, writes and updates the producer state and the leader epoch cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from stratalog.records.batch import (
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    BatchHeader,
    check_crc,
)
from stratalog.records.batch_walk import iter_batch_headers
from stratalog.records.control import EndTransactionMarker
from stratalog.records.errors import (
    InvalidRecordError,
    RecordError,
    RecordTooLargeError,
)
from stratalog.records.reader import iter_records

from .config import LogConfig
from .errors import RecordBatchTooLargeError, UnexpectedAppendOffsetError
from .producer_state import ProducerBatch
from .validation import ValidatedAppend

__all__ = ["RELATIVE_OFFSET_MAX", "FollowerRun", "validate_follower_batches"]

# An offset index entry holds offset - base offset in 32 bits (Kafka: Integer.MAX_VALUE).
RELATIVE_OFFSET_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class FollowerRun:
    """Consecutive batches of a follower append that one segment can hold.

    ``validated.headers`` are the stored headers (the leader's offsets, positions in the
    input); ``producer_batches`` the batches with a producer id, in order; ``epoch_starts``
    ``(epoch, base offset)`` for every batch whose epoch differs from the batch before it (the
    first batch always), for the leader epoch cache to assign.
    """

    validated: ValidatedAppend
    producer_batches: tuple[ProducerBatch, ...]
    epoch_starts: tuple[tuple[int, int], ...]


def validate_follower_batches(
    record_batches: bytes | bytearray | memoryview,
    config: LogConfig,
    *,
    log_end_offset: int,
    log_name: str = "",
) -> list[FollowerRun]:
    """Check the leader's batches (table above) and cut them into runs; [] for no bytes.

    O(total bytes): one CRC pass per batch; control batches have their one record decoded.

    Raises:
        CorruptRecordError, InvalidRecordError, RecordTooLargeError: a bad batch (nothing of
            the append may be written).
        UnexpectedAppendOffsetError: the first base offset is below ``log_end_offset``.
        RecordBatchTooLargeError: the append is larger than ``segment.bytes``.
    """
    view = memoryview(record_batches)
    if len(view) == 0:
        return []
    if len(view) > config.segment_bytes:
        raise RecordBatchTooLargeError(
            f"follower append of {len(view)} bytes to {log_name} is larger than segment.bytes "
            f"({config.segment_bytes})"
        )
    headers = _check_batches(view, config, log_name)
    first = headers[0]
    if first.base_offset < log_end_offset:
        raise UnexpectedAppendOffsetError(
            f"follower append to {log_name} starts at offset {first.base_offset} (batch at "
            f"position 0), below the log end offset {log_end_offset}: the follower must "
            f"truncate or fetch from its log end",
            first_offset=first.base_offset,
            last_offset=headers[-1].last_offset,
            log_end_offset=log_end_offset,
        )
    runs: list[FollowerRun] = []
    run: list[BatchHeader] = []
    for header in headers:
        if run and header.last_offset - run[0].base_offset > RELATIVE_OFFSET_MAX:
            runs.append(_run(view, run))
            run = []
        run.append(header)
    runs.append(_run(view, run))
    return runs


def _check_batches(view: memoryview, config: LogConfig, log_name: str) -> list[BatchHeader]:
    """The headers of the batches of ``view``, each checked (the table above, down to the
    order of offsets); walked by :func:`~stratalog.records.batch_walk.iter_batch_headers`,
    which refuses a partial batch: the leader sends whole batches. A batch is checked before
    the walk reads the next, so the first bad batch is the one reported."""
    headers: list[BatchHeader] = []
    previous_last_offset = -1
    for header in iter_batch_headers(view, partial_tail_ok=False):
        where = f"follower batch {len(headers)} at position {header.position} for {log_name}"
        if header.size_bytes > config.max_message_bytes:
            raise RecordTooLargeError(
                f"{where} is {header.size_bytes} bytes, which exceeds max.message.bytes "
                f"({config.max_message_bytes})"
            )
        check_crc(view, header)
        if header.base_offset < 0 or header.last_offset_delta < 0:
            raise InvalidRecordError(
                f"{where} has base offset {header.base_offset} and last offset delta "
                f"{header.last_offset_delta}: both must be >= 0"
            )
        if header.partition_leader_epoch < 0:
            raise InvalidRecordError(
                f"{where} (offset {header.base_offset}) has no partition leader epoch "
                f"({header.partition_leader_epoch}): a leader stamps every batch it stores"
            )
        if header.base_offset <= previous_last_offset:
            raise InvalidRecordError(
                f"out of order offsets in {where}: base offset {header.base_offset} is not "
                f"above the previous batch's last offset {previous_last_offset}"
            )
        previous_last_offset = header.last_offset
        headers.append(header)
    return headers


def _run(view: memoryview, headers: list[BatchHeader]) -> FollowerRun:
    start, end = headers[0].position, headers[-1].end_position
    max_timestamp = NO_TIMESTAMP
    shallow_offset_of_max = headers[0].last_offset
    producer_batches: list[ProducerBatch] = []
    epoch_starts: list[tuple[int, int]] = []
    last_epoch: int | None = None
    record_count = 0
    for header in headers:
        # Strictly greater: the earliest batch holding the max timestamp, as Segment.append
        # and the leader's validation index it (Kafka UnifiedLog.analyzeAndValidateRecords;
        # docs/kafka-behaviours.md#append).
        if header.max_timestamp > max_timestamp:
            max_timestamp = header.max_timestamp
            shallow_offset_of_max = header.last_offset
        record_count += header.records_count
        if header.partition_leader_epoch != last_epoch:
            last_epoch = header.partition_leader_epoch
            epoch_starts.append((last_epoch, header.base_offset))
        if header.producer_id != NO_PRODUCER_ID:
            batch = _producer_batch(view, header)
            if batch is not None:
                producer_batches.append(batch)
    validated = ValidatedAppend(
        pieces=(view[start:end],),
        size_bytes=end - start,
        first_offset=headers[0].base_offset,
        last_offset=headers[-1].last_offset,
        max_timestamp=max_timestamp,
        shallow_offset_of_max_timestamp=shallow_offset_of_max,
        log_append_time=NO_TIMESTAMP,
        record_count=record_count,
        batch_count=len(headers),
        headers=tuple(headers),
    )
    return FollowerRun(validated, tuple(producer_batches), tuple(epoch_starts))


def _producer_batch(view: memoryview, header: BatchHeader) -> ProducerBatch | None:
    """The producer-state view of one batch; None for a control batch that holds no
    transaction marker (another control type, such as Kafka's LEADER_CHANGE: the producer
    state skips it, as recovery's scan does)."""
    control_type = None
    coordinator_epoch = -1
    if header.is_control:
        batch_bytes = view[header.position:header.end_position]
        try:
            record = next(iter(iter_records(batch_bytes, 0)))
            marker = EndTransactionMarker.decode(record.key, record.value)
        except (RecordError, StopIteration):
            return None
        control_type, coordinator_epoch = marker.type, marker.coordinator_epoch
    return ProducerBatch(
        header.producer_id, header.producer_epoch, header.base_sequence, header.base_offset,
        header.last_offset, max(header.max_timestamp, NO_TIMESTAMP), header.is_transactional,
        control_type, coordinator_epoch,
    )
