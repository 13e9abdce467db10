"""A FetchResponse whose batches stay the bytes the storage read until the answer is
serialized: a fetch's data handed to gRPC without a protobuf copy of it.

Intuition: building ``FetchResponse(record_batches=data)`` copies ``data`` into the message, and
serializing the message copies it again, before gRPC takes its own copy; for a fetch of 1 MiB
the protobuf part costs about a millisecond of the event loop (docs/performance.md). A
:class:`FetchAnswer` keeps the other fields in a FetchResponse (small) and the batches aside,
and writes the serialized answer as the message's bytes followed by the batches as field 7::

    <FetchResponse without record_batches, as protobuf serializes it>
    3a <varint length> <the batches>        field 7 (record_batches), length-delimited;
                                            left out when there are none, as protobuf does

A protobuf parser reads the fields in any order, so the bytes parse to the message protobuf
would have built: ``FetchResponse.FromString(answer.SerializeToString())`` is equal, field by
field, to the FetchResponse with ``record_batches`` set (tests/unit/server/test_fetch_answer.py).
Everything else reads and writes the answer as it would the message (``response.next_offset``,
``response.throttle_time_ms = ...``), and ``record_batches`` is the batches as read.

Concurrency: event-loop only, as the message it wraps.
"""

from __future__ import annotations

from typing import Any

from stratalog.records.varint import unsigned_varint_bytes
from stratalog.v1 import broker_pb2

__all__ = ["FetchAnswer", "serialize_fetch_answer"]

_BATCHES_FIELD = broker_pb2.FetchResponse.DESCRIPTOR.fields_by_name["record_batches"]
# The field's tag: its number, and wire type 2 (length-delimited).
_BATCHES_TAG = unsigned_varint_bytes(_BATCHES_FIELD.number << 3 | 2)


class FetchAnswer:
    """A FetchResponse (``message``, its ``record_batches`` unset) and the batches it answers
    with (``batches``, the storage's bytes, not copied); module docstring."""

    __slots__ = ("_batches", "_message")

    def __init__(self, message: broker_pb2.FetchResponse, batches: bytes | memoryview) -> None:
        assert not message.record_batches
        object.__setattr__(self, "_message", message)
        object.__setattr__(self, "_batches", batches)

    @property
    def record_batches(self) -> bytes | memoryview:
        return self._batches

    def __getattr__(self, name: str) -> Any:
        return getattr(self._message, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._message, name, value)

    # SerializeToString and ByteSize: protobuf's names, which every caller of a message uses.

    def SerializeToString(self) -> bytes:
        """The answer as protobuf would serialize the full message (module docstring)."""
        head = self._message.SerializeToString()
        batches = self._batches
        if not len(batches):
            return head
        return b"".join((head, _BATCHES_TAG, unsigned_varint_bytes(len(batches)), batches))

    def ByteSize(self) -> int:
        """The length of :meth:`SerializeToString`'s bytes, as protobuf's ByteSize."""
        size = len(self._batches)
        if not size:
            return self._message.ByteSize()
        return (self._message.ByteSize() + len(_BATCHES_TAG)
                + len(unsigned_varint_bytes(size)) + size)


def serialize_fetch_answer(response: FetchAnswer | broker_pb2.FetchResponse) -> bytes:
    """The fetch RPCs' response serializer: a :class:`FetchAnswer` or a FetchResponse."""
    return response.SerializeToString()
