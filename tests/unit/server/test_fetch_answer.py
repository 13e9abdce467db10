"""server/rpc/fetch_answer.py: a fetch answer serialized without a protobuf copy of its
batches parses to the message protobuf would have built, field by field."""

from __future__ import annotations

import pytest

from stratalog.records import build_batch
from stratalog.server.rpc.fetch_answer import FetchAnswer, serialize_fetch_answer
from stratalog.v1 import broker_pb2 as pb


def _fields(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = dict(
        topic="orders", partition=3, high_watermark=1_000, log_start_offset=7,
        next_offset=42, matched_offset=-1, matched_timestamp=-1, last_stable_offset=990,
    )
    fields.update(overrides)
    return fields


@pytest.mark.parametrize("batches", [
    b"",  # nothing read: protobuf leaves the field out
    build_batch([(1_700_000_000_000, b"k", b"v", ())]),
    build_batch([(1_700_000_000_000 + i, None, b"x" * 300, ()) for i in range(50)]),  # 15 kB
    b"\x00" * 127, b"\x00" * 128, b"\x00" * 16_384,  # the length's varint at 1, 2, 3 bytes
])
@pytest.mark.parametrize("as_view", [False, True])
def test_the_answer_parses_to_the_message_protobuf_builds(batches: bytes, as_view: bool) -> None:
    expected = pb.FetchResponse(record_batches=batches, **_fields())  # type: ignore[arg-type]
    expected.aborted_transactions.add(producer_id=5, first_offset=40)
    message = pb.FetchResponse(**_fields())  # type: ignore[arg-type]
    message.aborted_transactions.add(producer_id=5, first_offset=40)
    answer = FetchAnswer(message, memoryview(batches) if as_view else batches)
    # A quota sets the throttle time on the answer after it was built.
    answer.throttle_time_ms = 250
    expected.throttle_time_ms = 250
    serialized = serialize_fetch_answer(answer)
    assert pb.FetchResponse.FromString(serialized) == expected
    assert answer.ByteSize() == len(serialized) == expected.ByteSize()
    # Read as the message would be.
    assert answer.record_batches == batches
    assert (answer.topic, answer.next_offset, answer.throttle_time_ms) == ("orders", 42, 250)
    assert [(t.producer_id, t.first_offset) for t in answer.aborted_transactions] == [(5, 40)]
    assert not answer.records


def test_a_plain_message_serializes_as_protobuf_does() -> None:
    message = pb.FetchResponse(records=[pb.Record(offset=3, value=b"v")], **_fields())  # type: ignore[arg-type]
    assert serialize_fetch_answer(message) == message.SerializeToString()


def test_the_message_must_not_hold_batches_of_its_own() -> None:
    with pytest.raises(AssertionError):
        FetchAnswer(pb.FetchResponse(record_batches=b"x"), b"y")
