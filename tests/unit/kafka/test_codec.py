"""server/kafka/codec.py against kafka-python's encoder (Kafka's schemas), for every API the
listener serves at every version served: valid frames decode to what was encoded, and any
other bytes raise one of the codec's three errors, never another exception (Hypothesis).

Frames cut short must not decode (bytes after the last field are ignored, as Kafka does): the library slices a length-prefixed field as its prefix
says, and a slice past the end of the frame is silently short (a Produce v3-v8 cut inside
its records "decoded"), so the codec checks where the body ends.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.server.kafka import listener  # noqa: F401  (registers the handlers)
from stratalog.server.kafka.apis.registry import SERVED_VERSIONS
from stratalog.server.kafka.codec import (
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    RequestBodyError,
    RequestHeaderError,
    UnknownApiError,
    decode_body,
    decode_header,
    encode_response,
)
from tests.kafka.kafka_wire import encode_request, sample_request

SERVED = sorted((key, version) for key, (low, high) in SERVED_VERSIONS.items()
                for version in range(low, high + 1))
CODEC_ERRORS = (RequestHeaderError, UnknownApiError, RequestBodyError)


def _frame(key: int, version: int, seed: int, client_id: str = "fuzz") -> bytes:
    request = sample_request(REQUEST_CLASSES[key], version, random.Random(seed))
    return encode_request(request, version, correlation_id=seed, client_id=client_id)[4:]


def _decode(frame: bytes):
    header = decode_header(frame, SERVED_VERSIONS)
    return header, decode_body(frame, header)


def _fields(message: object, shape: object) -> object:
    """``message``'s fields as plain values, the ones ``shape`` (the library's ``to_dict()`` of
    the same message: the fields of that version) names: Produce and Fetch requests are decoded
    by hand (server/kafka/hot_messages.py) into objects of their own, with the library's field
    names."""
    if isinstance(shape, dict):
        return {name: _fields(getattr(message, name), shape[name]) for name in shape}
    if isinstance(shape, list):
        assert isinstance(message, list) and len(message) == len(shape)
        return [_fields(item, item_shape) for item, item_shape in zip(message, shape, strict=True)]
    if isinstance(message, bytes | bytearray | memoryview):
        return bytes(message)
    return message


def _same_request(decoded: object, expected: object) -> bool:
    shape = expected.to_dict()  # type: ignore[attr-defined]
    return _fields(decoded, shape) == _fields(expected, shape)


@pytest.mark.parametrize(("key", "version"), SERVED)
def test_served_requests_round_trip(key, version):
    for seed in range(20):
        request = sample_request(REQUEST_CLASSES[key], version, random.Random(seed))
        frame = encode_request(request, version, correlation_id=seed, client_id="cli é")[4:]
        header, decoded = _decode(frame)
        assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
            key, version, seed, "cli é")
        # Equal field by field to what the library reads of its own encoding of the body.
        expected = REQUEST_CLASSES[key].decode(request.encode(version=version), version=version)
        assert _same_request(decoded, expected)


@pytest.mark.parametrize(("key", "version"), SERVED)
def test_every_cut_is_refused_and_extra_bytes_ignored(key, version):
    frame = _frame(key, version, 7)
    for end in range(len(frame)):
        with pytest.raises(CODEC_ERRORS):
            _decode(frame[:end])
    # Bytes after the last field are left unread, as Kafka's parser leaves them.
    _, decoded = _decode(frame + b"\x00\x01\x02")
    expected = REQUEST_CLASSES[key].decode(frame[_decode(frame)[0].body_offset:], version=version)
    assert _same_request(decoded, expected)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(SERVED), st.integers(0, 1 << 16), st.data())
def test_mutated_frames_decode_or_raise_a_codec_error(served, seed, data):
    frame = bytearray(_frame(*served, seed))
    mutation = data.draw(st.sampled_from(["flip", "length", "insert", "delete"]))
    position = data.draw(st.integers(0, len(frame) - 1))
    if mutation == "flip":
        frame[position] ^= 1 << data.draw(st.integers(0, 7))
    elif mutation == "length":
        # A length or count field made huge, negative or zero.
        frame[position:position + 4] = data.draw(st.sampled_from(
            [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00\x00\x00",
             b"\xff\xff\xff\x0f"]))
    elif mutation == "insert":
        frame[position:position] = data.draw(st.binary(min_size=1, max_size=8))
    else:
        del frame[position:position + data.draw(st.integers(1, 8))]
    _decodes_or_names_the_problem(bytes(frame))


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_random_frames_raise_only_codec_errors(frame):
    _decodes_or_names_the_problem(frame)


def _decodes_or_names_the_problem(frame: bytes) -> None:
    """A frame decodes to a request of the API its header names, or raises one of the
    codec's errors with a message (any other exception fails the test)."""
    try:
        header, message = _decode(frame)
    except CODEC_ERRORS as exc:
        assert str(exc)
    else:
        # The library's class, or for Produce and Fetch the hand-written one of that name.
        assert type(message).__name__.split("_v")[0] == REQUEST_CLASSES[header.api_key].name
        low, high = SERVED_VERSIONS[header.api_key]
        assert low <= header.api_version <= high


def test_unknown_keys_and_versions_are_named():
    frame = bytearray(_frame(*SERVED[0], 1))
    struct.pack_into(">h", frame, 0, 32_000)
    with pytest.raises(UnknownApiError, match="API key 32000"):
        _decode(bytes(frame))
    key = SERVED[0][0]
    struct.pack_into(">hh", frame, 0, key, SERVED_VERSIONS[key][1] + 1)
    with pytest.raises(UnknownApiError, match="is not served"):
        _decode(bytes(frame))


#: ApiVersions' response is left out: kafka-python reads a failed one as v0 whatever the
#: version (KIP-511), which a random error code would trip; real clients read it in
#: tests/kafka/ (every connection starts with it).
@pytest.mark.parametrize(("key", "version"), [s for s in SERVED if s[0] != 18])
def test_responses_frame_as_kafka_python_reads_them(key, version):
    frame = _frame(key, version, 3)
    header, _ = _decode(frame)
    response = sample_request(RESPONSE_CLASSES[key], version, random.Random(5))
    out = b"".join(encode_response(header, response))
    (size,) = struct.unpack_from(">i", out)
    assert size == len(out) - 4
    assert struct.unpack_from(">i", out, 4)[0] == header.correlation_id
    flexible = RESPONSE_CLASSES[key].flexible_version_q(version)
    body = memoryview(out)[9 if flexible else 8:]
    expected = RESPONSE_CLASSES[key].decode(response.encode(version=version), version=version)
    assert RESPONSE_CLASSES[key].decode(body, version=version).to_dict() == expected.to_dict()


@pytest.mark.parametrize("version", [3, 9, 11])
def test_a_null_where_the_schema_allows_none_is_refused(version):
    """kafka-python reads a null array into a non-nullable field; the handler would iterate
    None (found by tests/kafka/test_kafka_fuzz.py: Produce v10 with null topic_data)."""
    produce = REQUEST_CLASSES[0]
    data = produce.TopicProduceData
    frame = encode_request(produce(transactional_id=None, acks=1, timeout_ms=100,
                                   topic_data=None), version, 1)[4:]
    with pytest.raises(RequestBodyError, match="topic_data is null"):
        _decode(frame)
    nested = encode_request(produce(transactional_id=None, acks=1, timeout_ms=100, topic_data=[
        data(name="t", partition_data=None)]), version, 1)[4:]
    with pytest.raises(RequestBodyError, match=r"topic_data\[0\]\.partition_data is null"):
        _decode(nested)
    # records and transactional_id are nullable: a null is the handler's to answer.
    nullable = encode_request(produce(transactional_id=None, acks=1, timeout_ms=100, topic_data=[
        data(name="t", partition_data=[data.PartitionProduceData(index=0, records=None)])]),
        version, 1)[4:]
    assert _decode(nullable)[1].topic_data[0].partition_data[0].records is None
