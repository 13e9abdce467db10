"""fetch_session_wire.py: answers written around the batches equal protobuf's own, and read back
as views of the received bytes equal to protobuf's reading (Hypothesis both ways)."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from stratalog.server.cluster.fetch_session_wire import decode_response, encode_response
from stratalog.v1 import broker_pb2, replication_pb2

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def partitions(draw: st.DrawFn) -> tuple[replication_pb2.PartitionData, bytes]:
    data = replication_pb2.PartitionData(
        topic=draw(st.text(max_size=20)), partition=draw(INT32),
        fetch_offset=draw(INT64), high_watermark=draw(INT64),
        log_start_offset=draw(INT64), log_end_offset=draw(INT64))
    if draw(st.booleans()):
        data.diverging_epoch.epoch = draw(INT32)
        data.diverging_epoch.end_offset = draw(INT64)
    if draw(st.booleans()):
        data.error.code = 9
        data.error.message = draw(st.text(max_size=30))
        data.error.reason = broker_pb2.OFFSET_OUT_OF_RANGE
        data.error.metadata["log_end_offset"] = "4"
    return data, draw(st.binary(max_size=300))


def full(pairs: list[tuple[replication_pb2.PartitionData, bytes]]
         ) -> replication_pb2.ReplicaFetchResponse:
    response = replication_pb2.ReplicaFetchResponse()
    for data, records in pairs:
        response.partitions.add().CopyFrom(data)
        response.partitions[-1].records = records
    return response


@given(st.lists(partitions(), max_size=5))
def test_encoded_answers_are_protobufs_message_and_decode_to_views(
    pairs: list[tuple[replication_pb2.PartitionData, bytes]],
) -> None:
    wire = encode_response(pairs)
    assert replication_pb2.ReplicaFetchResponse.FromString(wire) == full(pairs)
    answers = decode_response(wire)
    assert [(a.data, bytes(a.records)) for a in answers] == pairs
    for answer, (_, records) in zip(answers, pairs, strict=True):
        if records:
            assert isinstance(answer.records, memoryview)  # not a copy
            assert answer.records.obj is wire


@given(st.lists(partitions(), max_size=3))
def test_protobufs_own_serialization_decodes_the_same(
    pairs: list[tuple[replication_pb2.PartitionData, bytes]],
) -> None:
    wire = full(pairs).SerializeToString()
    assert [(a.data, bytes(a.records)) for a in decode_response(wire)] == pairs


def test_a_repeated_records_field_is_protobufs_reading_the_last_wins() -> None:
    head = replication_pb2.PartitionData(topic="t").SerializeToString()
    inner = head + b"\x7a\x01a" + b"\x7a\x02bc"
    wire = b"\x0a" + bytes([len(inner)]) + inner
    (answer,) = decode_response(wire)
    assert (answer.data.topic, bytes(answer.records)) == ("t", b"bc")


def test_bytes_that_are_no_answer_raise_protobufs_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_response(b"\x0a\x05ab")  # a partition longer than the bytes
