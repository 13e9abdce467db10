"""server.decoding: Produce parsed as protobuf does, batches not copied; bad bytes as values."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from stratalog.server.rpc.decoding import (
    ProduceRequestView,
    UndecodableRequest,
    add_broker_service,
    parse_produce_request,
    parse_session_request,
)
from stratalog.v1 import broker_pb2 as pb


def _fields(view: ProduceRequestView) -> tuple:
    return (view.topic, view.partition, [(r.key, r.value) for r in view.records],
            bytes(view.record_batches), view.compression, view.flush, view.producer_id,
            view.producer_epoch, view.base_sequence, view.transactional)


def _expected(data: bytes) -> tuple:
    """The fields as protobuf reads them from the whole message (not through the view)."""
    message = pb.ProduceRequest.FromString(data)
    return (message.topic, message.partition, [(r.key, r.value) for r in message.records],
            message.record_batches, message.compression, message.flush,
            message.producer_id if message.HasField("producer_id") else None,
            message.producer_epoch, message.base_sequence, message.transactional)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, wire_type: int, value: bytes) -> bytes:
    return _varint(number << 3 | wire_type) + value


def _len_field(number: int, value: bytes) -> bytes:
    return _field(number, 2, _varint(len(value)) + value)


def test_batches_are_a_view_of_the_received_bytes_not_a_copy():
    batches = bytes(range(256)) * 64
    data = pb.ProduceRequest(topic="t", partition=3, record_batches=batches, flush=True,
                             compression=pb.COMPRESSION_LZ4).SerializeToString()
    view = parse_produce_request(data)
    assert isinstance(view.record_batches, memoryview)
    assert view.record_batches.obj is data
    assert view.record_batches == batches
    assert (view.topic, view.partition, view.flush, view.compression) == (
        "t", 3, True, pb.COMPRESSION_LZ4)


def test_producer_fields_come_with_the_batch_view():
    data = pb.ProduceRequest(topic="t", record_batches=b"batches", producer_id=0,
                             producer_epoch=2, base_sequence=9,
                             transactional=True).SerializeToString()
    view = parse_produce_request(data)
    assert isinstance(view.record_batches, memoryview)
    assert (view.producer_id, view.producer_epoch, view.base_sequence, view.transactional) == (
        0, 2, 9, True)
    unset = parse_produce_request(pb.ProduceRequest(topic="t", record_batches=b"b")
                                  .SerializeToString())
    assert (unset.producer_id, unset.producer_epoch, unset.base_sequence,
            unset.transactional) == (None, 0, 0, False)


def test_records_requests_are_parsed_by_protobuf_whole():
    data = pb.ProduceRequest(topic="t", records=[pb.Record(value=b"v", key=b"k")]).SerializeToString()
    view = parse_produce_request(data)
    assert [(r.key, r.value) for r in view.records] == [(b"k", b"v")]
    assert view.record_batches == b""


@given(
    topic=st.text(max_size=20),
    partition=st.integers(-(2**31), 2**31 - 1),
    batches=st.binary(max_size=300),
    compression=st.integers(0, 4),
    flush=st.booleans(),
    records=st.lists(st.binary(max_size=5), max_size=3),
    producer=st.one_of(st.none(), st.tuples(
        st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**31), 2**31 - 1), st.booleans(),
    )),
)
def test_equal_to_protobuf_for_any_message(topic, partition, batches, compression, flush, records,
                                           producer):
    message = pb.ProduceRequest(topic=topic, partition=partition, record_batches=batches,
                                compression=compression, flush=flush,
                                records=[pb.Record(value=v) for v in records])
    if producer is not None:
        (message.producer_id, message.producer_epoch, message.base_sequence,
         message.transactional) = producer
    data = message.SerializeToString()
    assert _fields(parse_produce_request(data)) == _expected(data)


@given(pieces=st.lists(st.sampled_from([
    _len_field(1, b"topic"),
    _field(2, 0, _varint(7)),
    _len_field(4, b"first"),
    _len_field(4, b"second"),     # a repeat: the last one wins
    _field(5, 0, _varint(2)),
    _field(6, 0, b"\x01"),
    _field(99, 0, _varint(300)),  # unknown fields of each wire type
    _field(98, 1, b"\x00" * 8),
    _field(97, 5, b"\x00" * 4),
    _len_field(96, b"unknown"),
    _field(4, 0, _varint(5)),     # field 4 with the wrong wire type
    _field(7, 0, _varint(0)),     # producer_id present and 0: not the same as unset
    _field(7, 0, _varint(2**64 - 1)),  # producer_id -1
    _field(8, 0, _varint(3)),
    _field(9, 0, _varint(2**64 - 5)),  # base_sequence -5 (an int32 as a 10-byte varint)
    _field(10, 0, b"\x01"),
]), max_size=8))
def test_equal_to_protobuf_in_any_field_order_with_repeats_and_unknown_fields(pieces):
    data = b"".join(pieces)
    assert _fields(parse_produce_request(data)) == _expected(data)


@pytest.mark.parametrize("data", [
    _len_field(1, b"t") + _field(4, 2, _varint(10) + b"short"),  # length past the end
    _len_field(1, b"t") + b"\x22",                               # tag without its length
    _len_field(4, b"x") + b"\x80" * 11,                          # a varint too long
    _len_field(1, b"\xff\xfe") + _len_field(4, b"batches"),      # a topic that is not UTF-8
    _len_field(4, b"x") + _field(7, 3, b""),                      # a group
])
def test_malformed_input_gets_protobufs_own_error(data):
    with pytest.raises(DecodeError):
        pb.ProduceRequest.FromString(data)
    with pytest.raises(DecodeError):
        parse_produce_request(data)


@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_parse_as_protobuf_does_or_fail_as_it_does(data):
    try:
        expected = _expected(data)
    except DecodeError:
        with pytest.raises(DecodeError):
            parse_produce_request(data)
    else:
        assert _fields(parse_produce_request(data)) == expected


def test_every_broker_method_is_registered_with_its_streaming_kind():
    """The handlers built from the descriptor cover what the generated registration does."""

    class Recorder:
        def add_generic_rpc_handlers(self, handlers):
            self.generic = handlers

        def add_registered_method_handlers(self, service, handlers):
            self.service, self.handlers = service, handlers

    class Servicer:
        def __getattr__(self, name):
            return name

    server = Recorder()
    add_broker_service(Servicer(), server)
    service = pb.DESCRIPTOR.services_by_name["Broker"]
    assert server.service == "stratalog.v1.Broker"
    assert set(server.handlers) == {m.name for m in service.methods}
    for method in service.methods:
        handler = server.handlers[method.name]
        assert isinstance(handler, grpc.RpcMethodHandler)
        assert handler.response_streaming == method.server_streaming
        assert handler.request_streaming == method.client_streaming
        kind = {(False, False): "unary_unary", (False, True): "unary_stream",
                (True, False): "stream_unary", (True, True): "stream_stream"}[
                    method.client_streaming, method.server_streaming]
        assert getattr(handler, kind) == method.name
    produce = server.handlers["Produce"].request_deserializer
    data = pb.ProduceRequest(topic="t", record_batches=b"batches").SerializeToString()
    assert isinstance(produce(data).record_batches, memoryview)
    fetch = server.handlers["FetchByOffset"].request_deserializer
    assert fetch(pb.FetchByOffsetRequest(topic="t", offset=5).SerializeToString()).offset == 5
    # Bytes that are no message become a value the servicer refuses, not an exception.
    assert produce(b"\x22\xff") == UndecodableRequest(
        "stratalog.v1.ProduceRequest", produce(b"\x22\xff").error)
    assert isinstance(fetch(b"\x0a\x05pf"), UndecodableRequest)
    assert fetch(b"\x0a\x05pf").message_type == "stratalog.v1.FetchByOffsetRequest"
    # A streaming method may write bytes it serialized itself (Subscribe does): sent as they
    # are; a message is serialized as usual. A unary method's serializer takes messages only.
    subscribe = server.handlers["Subscribe"].response_serializer
    response = pb.FetchResponse(topic="t", record_batches=b"batches", next_offset=9)
    serialized = response.SerializeToString()
    assert subscribe(serialized) is serialized
    assert subscribe(response) == serialized
    assert server.handlers["FetchByOffset"].response_serializer(response) == serialized


# ------------------------------------------------------------------------ Session requests


def _inner_fields(request) -> object:  # type: ignore[no-untyped-def]
    if isinstance(request, ProduceRequestView):
        return _fields(request)
    return request


def _expected_session(data: bytes) -> tuple:
    """(id, rpc, the inner request) as protobuf reads the whole SessionRequest."""
    message = pb.SessionRequest.FromString(data)
    member = message.WhichOneof("request")
    if member is None:
        return message.id, None, None
    inner = getattr(message, member).SerializeToString()
    rpc = {"produce": "Produce", "fetch_by_offset": "FetchByOffset",
           "fetch_by_timestamp": "FetchByTimestamp", "list_offsets": "ListOffsets"}[member]
    if rpc == "Produce":
        return message.id, rpc, _fields(parse_produce_request(inner))
    return message.id, rpc, getattr(message, member)


def _session_fields(data: bytes) -> tuple:
    view = parse_session_request(data)
    return view.id, view.rpc, _inner_fields(view.request)


def test_a_sessions_produce_batches_are_a_view_of_the_received_bytes():
    batches = bytes(range(256)) * 64
    data = pb.SessionRequest(id=2**64 - 1, produce=pb.ProduceRequest(
        topic="t", partition=3, record_batches=batches)).SerializeToString()
    view = parse_session_request(data)
    assert (view.id, view.rpc) == (2**64 - 1, "Produce")
    assert isinstance(view.request.record_batches, memoryview)
    assert view.request.record_batches.obj is data
    assert view.request.record_batches == batches
    assert view.request.request_bytes == len(pb.ProduceRequest(
        topic="t", partition=3, record_batches=batches).SerializeToString())


@given(
    request_id=st.integers(0, 2**64 - 1),
    kind=st.sampled_from(["produce", "fetch_by_offset", "fetch_by_timestamp", "list_offsets",
                          None]),
    topic=st.text(max_size=10),
    number=st.integers(-(2**31), 2**31 - 1),
    batches=st.binary(max_size=40),
)
def test_session_requests_equal_to_protobuf_for_any_message(request_id, kind, topic, number,
                                                            batches):
    inner = {
        "produce": lambda: pb.ProduceRequest(topic=topic, partition=number,
                                             record_batches=batches),
        "fetch_by_offset": lambda: pb.FetchByOffsetRequest(topic=topic, offset=number,
                                                           max_records=1),
        "fetch_by_timestamp": lambda: pb.FetchByTimestampRequest(topic=topic,
                                                                 timestamp=number),
        "list_offsets": lambda: pb.ListOffsetsRequest(topic=topic, timestamp=number),
    }
    message = pb.SessionRequest(id=request_id)
    if kind is not None:
        getattr(message, kind).CopyFrom(inner[kind]())
    data = message.SerializeToString()
    assert _session_fields(data) == _expected_session(data)


@given(pieces=st.lists(st.sampled_from([
    _field(1, 0, _varint(5)),
    _field(1, 0, _varint(2**70)),  # an id past 64 bits: truncated, as protobuf does
    _len_field(2, _len_field(1, b"p") + _len_field(4, b"batch")),
    _len_field(2, _field(2, 0, _varint(3))),          # a second produce merges into the first
    _len_field(3, _len_field(1, b"f") + _field(3, 0, _varint(9))),
    _len_field(4, _len_field(1, b"t")),
    _len_field(5, _len_field(1, b"l")),
    _len_field(31, b"a newer kind"),                  # unknown fields
    _field(30, 0, _varint(1)),
    _field(1, 2, _varint(0)),                          # the id with the wrong wire type
]), max_size=6))
def test_session_requests_equal_to_protobuf_in_any_order_with_repeats_and_unknown_fields(pieces):
    data = b"".join(pieces)
    try:
        expected = _expected_session(data)
    except DecodeError:
        view = parse_session_request(data)
        assert view.rpc is None and isinstance(view.request, UndecodableRequest)
        return
    assert _session_fields(data) == expected


@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_as_a_session_request_never_raise(data):
    view = parse_session_request(data)
    try:
        expected = _expected_session(data)
    except DecodeError:
        assert isinstance(view.request, UndecodableRequest)
        if view.rpc is None:
            assert view.request.message_type == "stratalog.v1.SessionRequest"
        else:
            # protobuf parses the request inside the envelope at once, so a corrupt request
            # makes the whole envelope corrupt to it; the lazy parser names the call whose
            # request does not parse (b'"\n' + ten zero bytes: FetchByTimestamp).
            assert view.request.message_type == f"stratalog.v1.{view.rpc}Request"
        return
    if view.rpc is not None and isinstance(view.request, UndecodableRequest):
        # The envelope parsed, its request did not: named as the unary call would name it.
        assert expected[1] == view.rpc
        return
    assert _session_fields(data) == expected


def test_a_request_inside_that_does_not_parse_is_named_by_its_type():
    view = parse_session_request(_field(1, 0, _varint(3)) + _len_field(3, b"\xff\xff"))
    assert (view.id, view.rpc) == (3, "FetchByOffset")
    assert isinstance(view.request, UndecodableRequest)
    assert view.request.message_type == "stratalog.v1.FetchByOffsetRequest"


def test_a_request_whose_inner_message_is_corrupt_names_its_call():
    """Found by Hypothesis: field 4 (FetchByTimestamp) holding ten zero bytes (field number 0
    is invalid): protobuf calls the whole envelope corrupt; the view names the call."""
    view = parse_session_request(b'"\n' + bytes(10))
    assert view.rpc == "FetchByTimestamp"
    assert isinstance(view.request, UndecodableRequest)
    assert view.request.message_type == "stratalog.v1.FetchByTimestampRequest"
