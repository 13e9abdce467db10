"""A fetch session's answer on the wire: written around the batches the leader read, read back
as views of the bytes the follower received.

Intuition: an answer of ReplicaFetchSession (replication.proto) is nearly all batches. protobuf's
Python runtime copies a ``bytes`` field when a message is built, again when it is serialized,
and on the receiving side when it parses and again each time the field is read: four copies of
every replicated megabyte beside gRPC's own, which measured more than the rest of a follower's
round (docs/performance.md, "Issue 29"). Kafka's fetcher hands the follower's log the
``MemoryRecords`` of the response buffer as they are; this module does the same on both sides:

* the leader (:func:`encode_response`) serializes each PartitionData without its records, and
  writes the records after it as field 15, one ``bytes.join`` for the whole answer::

      0a <varint length>                 field 1 (partitions), length-delimited, per partition:
         <PartitionData without records, as protobuf serializes it>
         7a <varint length> <batches>    field 15 (records), left out when there are none

* the follower (:func:`decode_response`) walks the answer's fields, keeps each partition's
  field 15 as a ``memoryview`` of the received bytes, and lets protobuf parse the rest of the
  partition (a few dozen bytes). The view goes to ``append_as_follower`` as it is.

A protobuf parser takes fields in any order, so the bytes are exactly a ReplicaFetchResponse:
``ReplicaFetchResponse.FromString(encode_response(...))`` is equal, field by field, to the
message with the records set (tests/unit/server/cluster/test_fetch_session_wire.py). Whatever the
walker does not expect (another field of the response, a repeated records field, a group, a
truncated or malformed tag or length) goes to ``FromString`` whole, so that malformed input gets
protobuf's reading (or its ``DecodeError``), never a second interpretation.

Concurrency: pure functions over immutable ``bytes``; a view keeps the received answer alive for
as long as the follower's append holds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stratalog.records.varint import read_unsigned_varint_within, unsigned_varint_bytes
from stratalog.v1 import replication_pb2

__all__ = ["PartitionAnswer", "decode_response", "encode_response"]

_WIRE_LEN = 2
_WIRE_VARINT, _WIRE_I64, _WIRE_I32 = 0, 1, 5
_PARTITIONS_FIELD = replication_pb2.ReplicaFetchResponse.DESCRIPTOR.fields_by_name[
    "partitions"].number
_RECORDS_FIELD = replication_pb2.PartitionData.DESCRIPTOR.fields_by_name["records"].number
_PARTITIONS_TAG = unsigned_varint_bytes(_PARTITIONS_FIELD << 3 | _WIRE_LEN)
_RECORDS_TAG = unsigned_varint_bytes(_RECORDS_FIELD << 3 | _WIRE_LEN)


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """One partition of a decoded answer: ``data`` is its PartitionData without records,
    ``records`` its batches (a view of the received bytes, or bytes)."""

    data: replication_pb2.PartitionData
    records: bytes | memoryview


def encode_response(
    partitions: Iterable[tuple[replication_pb2.PartitionData, bytes | memoryview]],
) -> bytes:
    """A serialized ReplicaFetchResponse of ``(PartitionData without records, records)``
    pairs, the records copied once (module docstring)."""
    parts: list[bytes | memoryview] = []
    for data, records in partitions:
        assert not data.records
        head = data.SerializeToString()
        size = len(records)
        if size:
            tail = unsigned_varint_bytes(size)
            length = len(head) + len(_RECORDS_TAG) + len(tail) + size
            parts += (_PARTITIONS_TAG, unsigned_varint_bytes(length), head, _RECORDS_TAG, tail,
                      records)
        else:
            parts += (_PARTITIONS_TAG, unsigned_varint_bytes(len(head)), head)
    return b"".join(parts)


def _skip(data: bytes, position: int, end: int, wire_type: int) -> int | None:
    """The position after a field's value of ``wire_type`` at ``position``; None when the
    walker does not take it (a group, or a truncated value)."""
    if wire_type == _WIRE_VARINT:
        parsed = read_unsigned_varint_within(data, position, end)
        return None if parsed is None else parsed[1]
    if wire_type == _WIRE_I64:
        after = position + 8
    elif wire_type == _WIRE_I32:
        after = position + 4
    elif wire_type == _WIRE_LEN:
        parsed = read_unsigned_varint_within(data, position, end)
        if parsed is None:
            return None
        after = parsed[1] + parsed[0]
    else:
        return None
    return after if after <= end else None


def _partition(data: bytes, view: memoryview, start: int, end: int) -> PartitionAnswer | None:
    """The PartitionData in ``data[start:end]`` with its records as a view; None when the
    walker does not take it."""
    records: memoryview | None = None
    head = bytearray()
    position = start
    while position < end:
        parsed = read_unsigned_varint_within(data, position, end)
        if parsed is None:
            return None
        tag, value_start = parsed
        after = _skip(data, value_start, end, tag & 7)
        if after is None:
            return None
        if tag >> 3 == _RECORDS_FIELD and tag & 7 == _WIRE_LEN:
            if records is not None:
                return None  # a repeated singular field: protobuf's rule, FromString's job
            length, records_start = read_unsigned_varint_within(  # type: ignore[misc]
                data, value_start, end)
            records = view[records_start:records_start + length]
        else:
            head += data[position:after]
        position = after
    message = replication_pb2.PartitionData.FromString(bytes(head))
    return PartitionAnswer(message, records if records is not None else b"")


def decode_response(data: bytes) -> Sequence[PartitionAnswer]:
    """The partitions of a serialized ReplicaFetchResponse, records as views of ``data``.

    Raises:
        google.protobuf.message.DecodeError: ``data`` is no ReplicaFetchResponse.
    """
    view = memoryview(data)
    answers: list[PartitionAnswer] = []
    position, end = 0, len(data)
    while position < end:
        parsed = read_unsigned_varint_within(data, position, end)
        if parsed is None or parsed[0] != (_PARTITIONS_FIELD << 3 | _WIRE_LEN):
            return _decode_whole(data)
        length_parsed = read_unsigned_varint_within(data, parsed[1], end)
        if length_parsed is None or length_parsed[1] + length_parsed[0] > end:
            return _decode_whole(data)
        length, start = length_parsed
        answer = _partition(data, view, start, start + length)
        if answer is None:
            return _decode_whole(data)
        answers.append(answer)
        position = start + length
    return answers


def _decode_whole(data: bytes) -> Sequence[PartitionAnswer]:
    """protobuf's own reading of ``data`` (the records copied)."""
    response = replication_pb2.ReplicaFetchResponse.FromString(data)
    answers = []
    for partition in response.partitions:
        records = partition.records
        partition.ClearField("records")
        answers.append(PartitionAnswer(partition, records))
    return answers
