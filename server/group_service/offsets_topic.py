"""The ``__consumer_offsets`` topic as the group coordinators use it: its configs, the batch one
coordinator write becomes, and the records a load replays.

The coordinator core (server/groups/) speaks in :mod:`~stratalog.server.groups.group_records`
values; the bytes are Kafka's, from :mod:`stratalog.records.consumer_offsets` (keys and values
at the versions Kafka 3.x/4.x write: docs/groups.md, "The record formats"). This module is the
translation between the two, in both directions, and nothing else:

* :func:`topic_configs`: the topic's config overrides, as Kafka's
  ``GroupCoordinatorService.groupMetadataTopicConfigs`` (``cleanup.policy=compact``,
  ``segment.bytes`` = offsets.topic.segment.bytes; Kafka's ``compression.type=producer`` is
  what our storage always does, it has no such config).
* :func:`append_batch`: one :class:`~stratalog.server.groups.Append` as one record batch (Kafka's
  ``CoordinatorPartitionWriter`` writes each coordinator result as one batch too), each record
  a key and a value (``None`` for a tombstone), timestamped with the write's time; a
  TxnOffsetCommit's is a transactional batch of its producer.
* :func:`replay_items`: the batches of a stretch of the partition as what a loading coordinator
  applies, in log order: the rows of a run of offset commit records (``rows``, for the core's
  ``replay_offset_commits``), ``(offset, GroupRecord, producer_id)`` for another record,
  ``(offset, None, producer_id, committed)`` for a transaction marker. A record that does not decode is skipped
  with a log line naming its offset (issue 27, "Bad input and faults"), and so is a whole batch
  that does not (a failed CRC), naming its offsets; records of the newer
  group types (3-15: the consumer protocol's, share groups) are skipped without one, as a
  classic-only coordinator has no use for them.

Sans-IO: bytes in, values out. Thread-safe (no state): loads decode in the thread pool.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator
from typing import NamedTuple

from stratalog.records.batch import NO_PRODUCER_ID, NO_SEQUENCE
from stratalog.records.batch_walk import iter_batch_headers
from stratalog.records.builder import BatchBuilder
from stratalog.records.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_record,
    encode_key,
    encode_value,
    offset_commit_rows,
)
from stratalog.records.control import ControlRecordType, decode_control_key
from stratalog.records.errors import RecordError
from stratalog.records.reader import decode_batch_columns
from stratalog.server.groups import (
    Append,
    CommitRow,
    CommittedOffset,
    GroupMetadataRecord,
    GroupMetadataTombstone,
    GroupRecord,
    OffsetCommitRecord,
    OffsetCommitTombstone,
)
from stratalog.server.groups import MemberMetadata as GroupMember
from stratalog.server.storage.log_manager import GROUP_METADATA_TOPIC

__all__ = [
    "GROUP_METADATA_TOPIC",
    "ReplayItem",
    "append_batch",
    "decode_group_record",
    "encode_group_record",
    "replay_items",
    "topic_configs",
]

logger = logging.getLogger(__name__)


def topic_configs(segment_bytes: int) -> dict[str, str]:
    """The config overrides ``__consumer_offsets`` is created with (module docstring)."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(segment_bytes),
    }


# --- writing ------------------------------------------------------------------------------------


def encode_group_record(record: GroupRecord) -> tuple[bytes, bytes | None]:
    """The key and value bytes Kafka writes for ``record`` (value None: a tombstone)."""
    if isinstance(record, OffsetCommitRecord):
        key = encode_key(OffsetCommitKey(record.group_id, record.topic, record.partition))
        return key, encode_value(OffsetCommitValue(
            offset=record.offset,
            metadata=record.metadata,
            commit_timestamp_ms=record.commit_timestamp_ms,
            leader_epoch=record.leader_epoch,
            expire_timestamp_ms=record.expire_timestamp_ms,
        ))
    if isinstance(record, OffsetCommitTombstone):
        return encode_key(OffsetCommitKey(record.group_id, record.topic, record.partition)), None
    if isinstance(record, GroupMetadataRecord):
        return encode_key(GroupMetadataKey(record.group_id)), encode_value(GroupMetadataValue(
            protocol_type=record.protocol_type,
            generation=record.generation,
            protocol=record.protocol,
            leader=record.leader,
            current_state_timestamp_ms=record.current_state_timestamp_ms,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.subscription,
                    assignment=m.assignment,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    group_instance_id=m.group_instance_id,
                )
                for m in record.members
            ),
        ))
    if isinstance(record, GroupMetadataTombstone):
        return encode_key(GroupMetadataKey(record.group_id)), None
    raise TypeError(f"not a group record: {record!r}")  # pragma: no cover - closed union


def append_batch(append: Append, now_ms: int, base_sequence: int = NO_SEQUENCE) -> bytes:
    """One record batch holding ``append``'s records, in order, each timestamped ``now_ms``.

    A transactional append (``producer_id >= 0``: TxnOffsetCommit) is a transactional batch of
    that producer and epoch starting at ``base_sequence`` (the caller knows the producer's next
    sequence in the partition), as Kafka's coordinator writes it into the producer's
    transaction; its offsets become visible with the transaction's COMMIT marker.
    """
    if append.producer_id == NO_PRODUCER_ID:
        builder = BatchBuilder()
    else:
        assert base_sequence >= 0, "a transactional batch needs its base sequence"
        builder = BatchBuilder(producer_id=append.producer_id,
                               producer_epoch=append.producer_epoch,
                               base_sequence=base_sequence, is_transactional=True)
    for record in append.records:
        key, value = encode_group_record(record)
        builder.append(now_ms, key, value, ())
    return builder.build()


# --- loading ------------------------------------------------------------------------------------


def decode_group_record(key: bytes | None, value: bytes | None) -> GroupRecord | None:
    """The classic group record of a ``__consumer_offsets`` record; None for the newer record
    types a classic coordinator does not use.

    Raises:
        CorruptMessageError (a RecordError): the key or value does not parse.
    """
    decoded = decode_record(key, value)
    record_key = decoded.key
    if isinstance(record_key, OffsetCommitKey):
        if decoded.value is None:
            return OffsetCommitTombstone(record_key.group, record_key.topic, record_key.partition)
        offset_value = decoded.value
        assert isinstance(offset_value, OffsetCommitValue)
        return OffsetCommitRecord(
            record_key.group, record_key.topic, record_key.partition, offset_value.offset,
            offset_value.leader_epoch, offset_value.metadata, offset_value.commit_timestamp_ms,
            offset_value.expire_timestamp_ms,
        )
    if isinstance(record_key, GroupMetadataKey):
        if decoded.value is None:
            return GroupMetadataTombstone(record_key.group)
        group = decoded.value
        assert isinstance(group, GroupMetadataValue)
        return GroupMetadataRecord(
            group_id=record_key.group,
            protocol_type=group.protocol_type,
            generation=group.generation,
            protocol=group.protocol,
            leader=group.leader,
            current_state_timestamp_ms=group.current_state_timestamp_ms,
            members=tuple(
                GroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.subscription,
                    assignment=m.assignment,
                )
                for m in group.members
            ),
        )
    return None


class ReplayItem(NamedTuple):
    """One step of a load: a run of offset commit records to ``replay_offset_commits``
    (``rows`` set: the rows of consecutive records of one batch, ``offset`` the first's), a
    record to ``replay`` (``record`` set), or a transaction marker to
    ``replay_end_transaction`` (``record`` and ``rows`` None, ``committed`` set)."""

    offset: int
    record: GroupRecord | None
    producer_id: int
    committed: bool = False
    rows: list[CommitRow] | None = None


def replay_items(data: bytes | memoryview, topic_partition: str,
                 end_offset: int | None = None,
                 partitions: dict[tuple[str, int], tuple[str, int]] | None = None,
                 ) -> Iterator[ReplayItem]:
    """What the whole batches in ``data`` (read from ``topic_partition``) ask a loading
    coordinator to apply, in log order (module docstring), up to the record before
    ``end_offset`` (None: all). A partial batch at the end is left for the next read.

    Each batch is decoded into columns (no ``Record`` per record), and its offset commits
    (nearly every record of the topic; a load decodes them all) into the store's rows at once
    by :func:`~stratalog.records.consumer_offsets.offset_commit_rows` (in C when built): a
    batch of commits is one item. Its other records, and any commit that reader leaves alone
    (one that does not parse, whose error is then logged), go through
    :func:`decode_group_record` one by one, in their place (docs/performance.md, "Issue 27:
    the group coordinator"). ``partitions``: the load's memo of ``(topic, partition)``
    tuples, so that every group's offset of a partition shares one (``offset_commit_rows``).

    A batch whose contents do not decode (its CRC fails, a record inside is cut) is skipped
    whole with a log line naming its offsets, as a record that does not decode is.

    Raises:
        RecordError: the batches' framing itself is damaged (a length that runs past the data
            or is too small, a bad magic): no next batch can be found; the load stops.
    """
    for header in iter_batch_headers(data, partial_tail_ok=True):
        if end_offset is not None and header.base_offset >= end_offset:
            return
        try:
            _, columns = decode_batch_columns(data, header.position)
        except RecordError as exc:
            # A batch whose frame is whole but whose contents are damaged (its CRC fails, a
            # record inside does not parse): storage recovery checks CRCs only after an
            # unclean shutdown, so one can reach a load. It stops nothing: skipped as a
            # record that does not decode is, the walk goes on at the next batch.
            logger.warning("%s: skipping the batch at offsets %d-%d, which does not decode:"
                           " %s", topic_partition, header.base_offset, header.last_offset, exc)
            continue
        producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
        offsets = columns.offsets
        count = len(offsets)
        if end_offset is not None and header.base_offset + header.last_offset_delta >= end_offset:
            count = bisect.bisect_left(offsets, end_offset)
        if header.is_control:
            for offset, key in zip(offsets[:count], columns.keys, strict=False):
                _, control_type = decode_control_key(key)
                if control_type in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    yield ReplayItem(offset, None, header.producer_id,
                                     control_type == ControlRecordType.COMMIT)
            continue
        keys, values = columns.keys, columns.values
        rows = offset_commit_rows(offsets, keys, values, CommittedOffset, partitions)
        if count == len(rows) and None not in rows:  # a batch of commits: nearly always
            if rows:
                yield ReplayItem(offsets[0], None, producer_id, rows=rows)
            continue
        run_start = 0
        for i in range(count):
            if rows[i] is not None:
                continue
            if run_start < i:
                yield ReplayItem(offsets[run_start], None, producer_id,
                                 rows=rows[run_start:i])
            run_start = i + 1
            try:
                group_record = decode_group_record(keys[i], values[i])
            except RecordError as exc:
                logger.warning("%s: skipping the record at offset %d, which does not decode:"
                               " %s", topic_partition, offsets[i], exc)
                continue
            if group_record is not None:
                yield ReplayItem(offsets[i], group_record, producer_id)
        if run_start < count:
            yield ReplayItem(offsets[run_start], None, producer_id,
                             rows=rows[run_start:count])
