"""Requests off the wire: Produce's batches without a copy, and bytes that are no message.

Registered by :func:`add_broker_service` in place of the generated
``add_BrokerServicer_to_server``, with three differences, all in how request bytes become the
objects the servicer gets:

* **Produce's record batches are a view, not two copies.** The batches are the whole of a large
  Produce request. protobuf's Python runtime (upb) copies a ``bytes`` field twice, once into the
  message's arena when it parses and again into a new ``bytes`` object each time the field is
  read. Kafka appends a produce request's batches as a view of the request buffer
  (``MemoryRecords`` over it); :func:`parse_produce_request` does the same: it finds field 4
  (``record_batches``) in the serialized message, keeps it as a ``memoryview`` of the bytes gRPC
  received, and lets protobuf parse the rest (topic, partition, compression, flush, the producer
  fields, unknown fields: a few dozen bytes).
* **A Session request is read in place.** A SessionRequest wraps one unary request (its id,
  then e.g. a ProduceRequest); :func:`parse_session_request` reads the id and hands the inner
  bytes, as offsets into the received message, to the parser that RPC's requests get, so a
  Produce on a session is appended from a view of the received bytes as a unary one is.
* **Bytes that are no message are a value, not an exception.** gRPC answers a deserializer's
  exception with UNKNOWN ("Unexpected DecodeError"); every request deserializer here returns an
  :class:`UndecodableRequest` instead, which the servicer refuses with INVALID_ARGUMENT and
  reason INVALID_REQUEST, naming the message type and protobuf's complaint.

Format (protobuf's wire format): a sequence of (tag varint = field << 3 | wire type, value);
wire type 0 varint, 1 eight bytes, 2 length varint + bytes, 5 four bytes; 3 and 4 (groups) are
not in broker.proto. Serializers write fields in field order; a parser must accept any order and
repeats, the last value of a singular field winning.

Invariant: a :func:`parse_produce_request` result is equal, field by field, to
``ProduceRequest.FromString(data)``; a :func:`parse_session_request` result holds the id and the
request of ``SessionRequest.FromString(data)``. Whatever the scanners do not handle (a
``records`` field, a second ``record_batches``, an unknown field, a group, a malformed tag or
length) goes to ``FromString`` whole, so unusual and malformed input gets exactly protobuf's
reading (or its ``DecodeError``), never a second interpretation.

Concurrency: pure functions over immutable ``bytes``; the view keeps the received message alive
for as long as the append holds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from stratalog.records.varint import read_unsigned_varint_within
from stratalog.v1 import broker_pb2

from .fetch_answer import serialize_fetch_answer

_RECORDS_FIELD = 3
_RECORD_BATCHES_FIELD = 4
_WIRE_VARINT, _WIRE_I64, _WIRE_LEN, _WIRE_I32 = 0, 1, 2, 5


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
    #: Kafka's acks: 0, 1 or -1 (all); -1 when the field is unset (issue 17).
    acks: int = -1
    #: A transactional produce's transactional id; None when unset.
    transactional_id: str | None = None

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
            message.acks if message.HasField("acks") else -1,
            message.transactional_id if message.HasField("transactional_id") else None,
        )


def parse_produce_request(
    data: bytes, start: int = 0, end: int | None = None
) -> ProduceRequestView:
    """``data[start:end]`` (a serialized ProduceRequest) as a view whose batches are not copied.

    ``start`` and ``end`` (default: all of ``data``) let a Produce inside a larger message (a
    Session request, :func:`parse_session_request`) be read in place.

    Raises:
        google.protobuf.message.DecodeError: the bytes are not a valid ProduceRequest (raised
            by protobuf's own parser, to which malformed input is handed).
    """
    if end is None:
        end = len(data)
    batches: tuple[int, int] | None = None  # (start, end) of field 4's value
    field_start = start  # where field 4's tag begins
    position = start
    while position < end:
        tag = read_unsigned_varint_within(data, position, end)
        if tag is None:
            return _parse_whole(data, start, end)
        key, after_tag = tag
        field, wire_type = key >> 3, key & 7
        if wire_type == _WIRE_LEN:
            length = read_unsigned_varint_within(data, after_tag, end)
            if length is None or length[1] + length[0] > end:
                return _parse_whole(data, start, end)
            value_start = length[1]
            value_end = value_start + length[0]
            if field == _RECORDS_FIELD or (field == _RECORD_BATCHES_FIELD and batches):
                return _parse_whole(data, start, end)  # records: the encoder's path; a repeat
            if field == _RECORD_BATCHES_FIELD:
                batches, field_start = (value_start, value_end), position
            position = value_end
        elif wire_type == _WIRE_VARINT:
            value = read_unsigned_varint_within(data, after_tag, end)
            if value is None:
                return _parse_whole(data, start, end)
            position = value[1]
        elif wire_type == _WIRE_I64:
            position = after_tag + 8
        elif wire_type == _WIRE_I32:
            position = after_tag + 4
        else:
            return _parse_whole(data, start, end)
    if position != end or batches is None:
        return _parse_whole(data, start, end)
    batches_start, batches_end = batches
    # Everything but field 4 (tens of bytes) goes to protobuf: it decodes and checks the topic's
    # UTF-8, the enum, unknown fields, exactly as it would in the whole message.
    message = broker_pb2.ProduceRequest.FromString(
        data[start:field_start] + data[batches_end:end]
    )
    return ProduceRequestView.of_message(
        message, memoryview(data)[batches_start:batches_end], end - start
    )


def _parse_whole(data: bytes, start: int, end: int) -> ProduceRequestView:
    whole = data[start:end] if start or end != len(data) else data
    return ProduceRequestView.of_message(
        broker_pb2.ProduceRequest.FromString(whole), None, end - start
    )


# ------------------------------------------------------------------------ Session requests

#: SessionRequest's field numbers: the id, and each request kind's oneof member with the
#: parser its unary RPC's requests get.
_SESSION_ID_FIELD = 1
_SESSION_KINDS: dict[int, tuple[str, str]] = {
    # field: (oneof member name, unary RPC name)
    2: ("produce", "Produce"),
    3: ("fetch_by_offset", "FetchByOffset"),
    4: ("fetch_by_timestamp", "FetchByTimestamp"),
    5: ("list_offsets", "ListOffsets"),
}
_SESSION_REQUEST_TYPE = broker_pb2.SessionRequest.DESCRIPTOR.full_name


@dataclass(frozen=True, slots=True)
class SessionRequestView:
    """One request of a Session stream: its ``id``, the unary RPC it stands for (``rpc``:
    "Produce", "FetchByOffset", "FetchByTimestamp", "ListOffsets"; None when no request kind
    this server knows is set), and ``request``: what that RPC's deserializer would have made of
    the inner message (a :class:`ProduceRequestView` for Produce, a message otherwise, an
    :class:`UndecodableRequest` when the inner bytes are no such message). A SessionRequest
    that is not a message at all has ``rpc`` None and an UndecodableRequest naming it."""

    id: int
    rpc: str | None
    request: Any


def _parse_inner(rpc: str, data: bytes, start: int, end: int) -> Any:
    if rpc == "Produce":
        try:
            return parse_produce_request(data, start, end)
        except DecodeError as exc:
            return UndecodableRequest(broker_pb2.ProduceRequest.DESCRIPTOR.full_name, str(exc))
    request_class = _SESSION_REQUEST_CLASSES[rpc]
    try:
        return request_class.FromString(memoryview(data)[start:end])
    except DecodeError as exc:
        return UndecodableRequest(request_class.DESCRIPTOR.full_name, str(exc))


def parse_session_request(data: bytes) -> SessionRequestView:
    """``data`` (a serialized SessionRequest) as its id and the unary request inside, parsed
    in place (a Produce's batches stay a view of ``data``). Never raises.

    The common shape (the id, then one request field, each once) is read by a scan; anything
    else (unknown fields, repeats, another order of the same fields is fine) goes to
    ``SessionRequest.FromString`` whole, so that every input gets protobuf's own reading: the
    last id wins, the last oneof member set wins, a repeated message field merges.
    """
    request_id = 0
    found: tuple[int, int, int] | None = None  # (field, start, end) of the request
    position, size = 0, len(data)
    while position < size:
        tag = read_unsigned_varint_within(data, position, size)
        if tag is None:
            return _parse_session_whole(data)
        key, after_tag = tag
        field, wire_type = key >> 3, key & 7
        if field == _SESSION_ID_FIELD and wire_type == _WIRE_VARINT:
            value = read_unsigned_varint_within(data, after_tag, size)
            if value is None:
                return _parse_session_whole(data)
            request_id, position = value
            request_id &= 0xFFFF_FFFF_FFFF_FFFF  # uint64, as protobuf truncates it
        elif field in _SESSION_KINDS and wire_type == _WIRE_LEN and found is None:
            length = read_unsigned_varint_within(data, after_tag, size)
            if length is None or length[1] + length[0] > size:
                return _parse_session_whole(data)
            found = (field, length[1], length[1] + length[0])
            position = found[2]
        else:
            return _parse_session_whole(data)
    if found is None:
        return _parse_session_whole(data)
    field, start, end = found
    rpc = _SESSION_KINDS[field][1]
    return SessionRequestView(request_id, rpc, _parse_inner(rpc, data, start, end))


def _parse_session_whole(data: bytes) -> SessionRequestView:
    try:
        message = broker_pb2.SessionRequest.FromString(data)
    except DecodeError as exc:
        return SessionRequestView(0, None, UndecodableRequest(_SESSION_REQUEST_TYPE, str(exc)))
    member = message.WhichOneof("request")
    if member is None:
        return SessionRequestView(message.id, None, None)
    rpc = _SESSION_RPC_OF_MEMBER[member]
    inner = getattr(message, member).SerializeToString()
    return SessionRequestView(message.id, rpc, _parse_inner(rpc, inner, 0, len(inner)))


_SESSION_REQUEST_CLASSES = {
    "FetchByOffset": broker_pb2.FetchByOffsetRequest,
    "FetchByTimestamp": broker_pb2.FetchByTimestampRequest,
    "ListOffsets": broker_pb2.ListOffsetsRequest,
}
_SESSION_RPC_OF_MEMBER = {member: rpc for member, rpc in _SESSION_KINDS.values()}


def _bytes_or(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A response serializer that sends ``bytes`` as they are (a message the servicer
    serialized itself) and serializes anything else with ``serialize``."""

    def serialize_unless_bytes(message: Any) -> bytes:
        return message if type(message) is bytes else serialize(message)

    return serialize_unless_bytes


# The requests not parsed by their class's FromString.
_PARSERS: dict[str, Callable[[bytes], Any]] = {
    "Produce": parse_produce_request,
    "Session": parse_session_request,
}

# gRPC's handler factory for each (client streaming, server streaming) kind of method.
_HANDLERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def add_broker_service(servicer: Any, server: grpc.aio.Server) -> None:
    """Register ``servicer``'s methods as the Broker service on ``server``.

    What ``broker_pb2_grpc.add_BrokerServicer_to_server`` does, with four differences:
    Produce's requests are parsed by :func:`parse_produce_request` (and Session's by
    :func:`parse_session_request`, the Produce inside read the same way), every request that does not
    parse reaches the servicer as an :class:`UndecodableRequest`, and a streaming method may
    write a message it serialized itself (``bytes``): Subscribe does, so that it holds only
    the serialized message while gRPC's flow control waits for the client (Session writes its
    answers so too), and a fetch's answer may be a
    :class:`~stratalog.server.rpc.fetch_answer.FetchAnswer` (its batches serialized without a
    protobuf copy). The handlers come from the service's
    descriptor, so a method added to broker.proto is registered without a change here.
    """
    service = broker_pb2.DESCRIPTOR.services_by_name["Broker"]
    handlers = {}
    for method in service.methods:
        request_class = getattr(broker_pb2, method.input_type.name)
        response_class = getattr(broker_pb2, method.output_type.name)
        handler = _HANDLERS[method.client_streaming, method.server_streaming]
        parse = _PARSERS.get(method.name, request_class.FromString)
        serialize = response_class.SerializeToString
        if response_class is broker_pb2.FetchResponse:
            # A fetch answers with a FetchAnswer: its batches not copied into the message.
            serialize = serialize_fetch_answer
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
