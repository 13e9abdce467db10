"""Requests off the wire: Produce's batches without a copy, and bytes that are no message.

Registered by :func:`add_broker_service` in place of the generated
``add_BrokerServicer_to_server``, with two differences, both in how request bytes become the
objects the servicer gets:

* **Produce's record batches are a view, not two copies.** The batches are the whole of a large
  Produce request. protobuf's Python runtime (upb) copies a ``bytes`` field twice, once into the
  message's arena when it parses and again into a new ``bytes`` object each time the field is
  read. Kafka appends a produce request's batches as a view of the request buffer
  (``MemoryRecords`` over it); :func:`parse_produce_request` does the same: it finds field 4
  (``record_batches``) in the serialized message, keeps it as a ``memoryview`` of the bytes gRPC
  received, and lets protobuf parse the rest (topic, partition, compression, flush, the producer
  fields, unknown fields: a few dozen bytes).
* **Bytes that are no message are a value, not an exception.** gRPC answers a deserializer's
  exception with UNKNOWN ("Unexpected DecodeError"); every request deserializer here returns an
  :class:`UndecodableRequest` instead, which the servicer refuses with INVALID_ARGUMENT and
  reason INVALID_REQUEST, naming the message type and protobuf's complaint.

Format (protobuf's wire format): a sequence of (tag varint = field << 3 | wire type, value);
wire type 0 varint, 1 eight bytes, 2 length varint + bytes, 5 four bytes; 3 and 4 (groups) are
not in broker.proto. Serializers write fields in field order; a parser must accept any order and
repeats, the last value of a singular field winning.

Invariant: a :func:`parse_produce_request` result is equal, field by field, to
``ProduceRequest.FromString(data)``. Whatever the scanner does not handle (a ``records`` field, a
second ``record_batches``, a group, a malformed tag or length) goes to ``FromString`` whole, so
unusual and malformed input gets exactly protobuf's reading (or its ``DecodeError``), never a
second interpretation.

Concurrency: pure functions over immutable ``bytes``; the view keeps the received message alive
for as long as the append holds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from stratalog.v1 import broker_pb2

_RECORDS_FIELD = 3
_RECORD_BATCHES_FIELD = 4
_WIRE_VARINT, _WIRE_I64, _WIRE_LEN, _WIRE_I32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10


@dataclass(frozen=True, slots=True)
class UndecodableRequest:
    """Request bytes that are not a valid ``message_type``; ``error`` is protobuf's complaint."""

    message_type: str
    error: str


def _undecodable_as_value(
    parse: Callable[[bytes], Any], message_type: str
) -> Callable[[bytes], Any]:
    """``parse``, returning an :class:`UndecodableRequest` where it raises DecodeError."""

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as exc:
            return UndecodableRequest(message_type, str(exc))

    return deserialize


@dataclass(frozen=True, slots=True)
class ProduceRequestView:
    """The fields of a ProduceRequest, as the servicer reads them.

    ``record_batches`` is a ``memoryview`` into the received message when it came off the wire
    through :func:`parse_produce_request` (``bytes`` when built from a message).
    ``producer_id`` is None when the field is unset (proto3 ``optional``: a plain produce), the
    value otherwise, 0 included. ``request_bytes`` is the serialized request's size (what a
    records-form request's work is judged by: ``append_placement.py``).
    """

    topic: str
    partition: int
    records: Sequence[broker_pb2.Record]
    record_batches: bytes | memoryview
    compression: int
    flush: bool
    producer_id: int | None = None
    producer_epoch: int = 0
    base_sequence: int = 0
    transactional: bool = False
    request_bytes: int = 0

    @classmethod
    def of_message(
        cls,
        message: broker_pb2.ProduceRequest,
        record_batches: bytes | memoryview | None = None,
        request_bytes: int | None = None,
    ) -> ProduceRequestView:
        """The view of a parsed message (its own ``record_batches`` unless one is given;
        ``request_bytes`` the message's serialized size unless given)."""
        return cls(
            message.topic,
            message.partition,
            message.records,
            message.record_batches if record_batches is None else record_batches,
            message.compression,
            message.flush,
            message.producer_id if message.HasField("producer_id") else None,
            message.producer_epoch,
            message.base_sequence,
            message.transactional,
            message.ByteSize() if request_bytes is None else request_bytes,
        )


def _varint(data: bytes, position: int) -> tuple[int, int] | None:
    """The varint at ``position`` and the position after it; None if truncated or too long."""
    result = shift = 0
    for index in range(position, min(position + _MAX_VARINT_BYTES, len(data))):
        byte = data[index]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, index + 1
        shift += 7
    return None


def parse_produce_request(data: bytes) -> ProduceRequestView:
    """``data`` (a serialized ProduceRequest) as a view whose batches are not copied.

    Raises:
        google.protobuf.message.DecodeError: ``data`` is not a valid ProduceRequest (raised by
            protobuf's own parser, to which malformed input is handed).
    """
    batches: tuple[int, int] | None = None  # (start, end) of field 4's value
    field_start = 0  # where field 4's tag begins
    position, size = 0, len(data)
    while position < size:
        tag = _varint(data, position)
        if tag is None:
            return _parse_whole(data)
        key, after_tag = tag
        field, wire_type = key >> 3, key & 7
        if wire_type == _WIRE_LEN:
            length = _varint(data, after_tag)
            if length is None or length[1] + length[0] > size:
                return _parse_whole(data)
            value_start = length[1]
            value_end = value_start + length[0]
            if field == _RECORDS_FIELD or (field == _RECORD_BATCHES_FIELD and batches):
                return _parse_whole(data)  # records: the encoder's path; a repeat: rare
            if field == _RECORD_BATCHES_FIELD:
                batches, field_start = (value_start, value_end), position
            position = value_end
        elif wire_type == _WIRE_VARINT:
            value = _varint(data, after_tag)
            if value is None:
                return _parse_whole(data)
            position = value[1]
        elif wire_type == _WIRE_I64:
            position = after_tag + 8
        elif wire_type == _WIRE_I32:
            position = after_tag + 4
        else:
            return _parse_whole(data)
    if position != size or batches is None:
        return _parse_whole(data)
    start, end = batches
    # Everything but field 4 (tens of bytes) goes to protobuf: it decodes and checks the topic's
    # UTF-8, the enum, unknown fields, exactly as it would in the whole message.
    message = broker_pb2.ProduceRequest.FromString(data[:field_start] + data[end:])
    return ProduceRequestView.of_message(message, memoryview(data)[start:end], len(data))


def _parse_whole(data: bytes) -> ProduceRequestView:
    return ProduceRequestView.of_message(broker_pb2.ProduceRequest.FromString(data), None, len(data))


def _bytes_or(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A response serializer that sends ``bytes`` as they are (a message the servicer
    serialized itself) and serializes anything else with ``serialize``."""

    def serialize_unless_bytes(message: Any) -> bytes:
        return message if type(message) is bytes else serialize(message)

    return serialize_unless_bytes


# gRPC's handler factory for each (client streaming, server streaming) kind of method.
_HANDLERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def add_broker_service(servicer: Any, server: grpc.aio.Server) -> None:
    """Register ``servicer``'s methods as the Broker service on ``server``.

    What ``broker_pb2_grpc.add_BrokerServicer_to_server`` does, with three differences:
    Produce's requests are parsed by :func:`parse_produce_request`, every request that does not
    parse reaches the servicer as an :class:`UndecodableRequest`, and a streaming method may
    write a message it serialized itself (``bytes``): Subscribe does, so that it holds only
    the serialized message while gRPC's flow control waits for the client. The handlers come from the service's
    descriptor, so a method added to broker.proto is registered without a change here.
    """
    service = broker_pb2.DESCRIPTOR.services_by_name["Broker"]
    handlers = {}
    for method in service.methods:
        request_class = getattr(broker_pb2, method.input_type.name)
        response_class = getattr(broker_pb2, method.output_type.name)
        handler = _HANDLERS[method.client_streaming, method.server_streaming]
        parse = parse_produce_request if method.name == "Produce" else request_class.FromString
        serialize = response_class.SerializeToString
        if method.server_streaming:
            serialize = _bytes_or(serialize)
        handlers[method.name] = handler(
            getattr(servicer, method.name),
            request_deserializer=_undecodable_as_value(parse, method.input_type.full_name),
            response_serializer=serialize,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)
