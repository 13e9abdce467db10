"""Kafka request and response messages to and from bytes, sans-IO, on kafka-python's codec.

kafka-python 3.x generates its ``kafka.protocol`` message classes from Kafka's own JSON message
schemas (``clients/src/main/resources/common/message/*.json``): every field, version range,
flexible version (compact types, tagged fields) and default as Kafka has them. This module uses
them for every request body and response body, and writes the two small headers itself:

Request (inside a frame, framing.py; Kafka's ``RequestHeader.json``)::

    int16 api_key | int16 api_version | int32 correlation_id | int16 client_id length + bytes
    (-1: null) | header v2 only: tagged fields (uvarint count, then uvarint tag, uvarint size,
    bytes each) | body

The header is v2 when the request's API version is flexible, else v1; client_id is never a
compact string (Kafka kept it so, for ApiVersions' sake).

Response: ``int32 size | int32 correlation_id | header v1 only: tagged fields (one 0 byte:
none) | body``; ApiVersions' response header is always v0 (KIP-511: a client that does not
know the broker's versions must still read it).

Produce and Fetch bodies, nearly every request a producer or consumer sends, are read and
written by hot_messages.py instead (by hand, byte for byte kafka-python's, which its tests
hold it to); a Fetch answer's frame is then pieces, its records written as they are.

Errors: :class:`RequestHeaderError` for a header that does not parse (the connection closes:
Kafka's ``InvalidRequestException``), :class:`UnknownApiError` for an API key or version this
server does not serve (the caller decides: ApiVersions answers, anything else closes, as
Kafka's ``SocketServer`` does), and :class:`RequestBodyError` for a body that does not decode.

Concurrency: none (pure functions over bytes); safe from any thread.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

from kafka.protocol import admin, consumer, metadata, producer, sasl
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage

from stratalog.server.kafka import hot_messages
from stratalog.server.kafka.framing import frame_size_prefix

__all__ = [
    "REQUEST_CLASSES",
    "RESPONSE_CLASSES",
    "RequestBodyError",
    "RequestHeader",
    "RequestHeaderError",
    "UnknownApiError",
    "decode_body",
    "decode_header",
    "encode_response",
    "is_flexible",
]

_HEAD = struct.Struct(">hhih")
_CORRELATION = struct.Struct(">i")
#: A body's first piece up to this size is joined to the frame's head (a copy cheaper than a
#: buffer more to write); a larger one is written after it as it is.
_JOINED_HEAD_BYTES_MAX = 4096


def _classes(kind: str) -> dict[int, type[ApiMessage]]:
    found: dict[int, type[ApiMessage]] = {}
    for module in (admin, consumer, metadata, producer, sasl):
        for name in dir(module):
            value = getattr(module, name)
            if (isinstance(value, type) and issubclass(value, ApiMessage)
                    and value is not ApiMessage and name.endswith(kind)
                    and getattr(value, "_json", None) is not None):
                found[value.API_KEY] = value
    return found


#: The request class of each API key kafka-python knows (its schemas are Kafka's).
REQUEST_CLASSES: Mapping[int, type[ApiMessage]] = _classes("Request")
#: The response class of each API key.
RESPONSE_CLASSES: Mapping[int, type[ApiMessage]] = _classes("Response")


#: API key -> the hand-written decoder of its request body (hot_messages.py).
_HOT_DECODERS: Mapping[int, Any] = {
    ApiKey.Produce: hot_messages.decode_produce_request,
    ApiKey.Fetch: hot_messages.decode_fetch_request,
}


def _encode_produce(response: Any, version: int) -> list[Any]:
    return [hot_messages.encode_produce_response(response, version)]


#: API key -> the hand-written encoder of its response body, as pieces (hot_messages.py).
_HOT_ENCODERS: Mapping[int, Any] = {
    ApiKey.Produce: _encode_produce,
    ApiKey.Fetch: hot_messages.encode_fetch_response,
}
#: API key -> the versions its hand-written codec covers (both ends in).
_HOT_VERSIONS: Mapping[int, tuple[int, int]] = {
    ApiKey.Produce: hot_messages.PRODUCE_VERSIONS,
    ApiKey.Fetch: hot_messages.FETCH_VERSIONS,
}


class RequestHeaderError(Exception):
    """A request header that does not parse: the connection closes."""


class UnknownApiError(Exception):
    """An API key or version this server does not serve."""

    def __init__(self, message: str, api_key: int, api_version: int,
                 correlation_id: int) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class RequestBodyError(Exception):
    """A request body that does not decode as its API key and version say."""


class RequestHeader(NamedTuple):
    """What a request header says, and where its body starts in the frame. (A named tuple:
    one is made per request, and a tuple is made faster than a frozen dataclass.)"""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


@functools.cache
def is_flexible(message_class: type[ApiMessage], version: int) -> bool:
    """Whether ``version`` of ``message_class`` uses compact types and tagged fields (asked
    twice per request: cached, at most one entry per message class and version)."""
    return bool(message_class.flexible_version_q(version))


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(frame):
            raise RequestHeaderError("the request header's tagged fields are cut short")
        byte = frame[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise RequestHeaderError("a varint in the request header is longer than 5 bytes")


def decode_header(frame: bytes, served: Mapping[int, tuple[int, int]]) -> RequestHeader:
    """The header of ``frame`` (a whole request, framing.py), checked against ``served``
    (the version range of each API key this server answers).

    Raises:
        RequestHeaderError: the header is cut short or malformed.
        UnknownApiError: the key is not served, or the version is outside its range; the
            header's fields are on the exception (an ApiVersions request is answered anyway).
    """
    if len(frame) < _HEAD.size:
        raise RequestHeaderError(f"a request of {len(frame)} bytes cannot hold its header")
    api_key, api_version, correlation_id, client_id_length = _HEAD.unpack_from(frame, 0)
    pos = _HEAD.size
    client_id: str | None = None
    if client_id_length >= 0:
        end = pos + client_id_length
        if end > len(frame):
            raise RequestHeaderError("the request header's client_id is cut short")
        try:
            client_id = frame[pos:end].decode("utf-8")
        except UnicodeDecodeError:
            raise RequestHeaderError("the request header's client_id is not UTF-8") from None
        pos = end
    elif client_id_length != -1:
        raise RequestHeaderError(f"the request header's client_id length is {client_id_length}")
    versions = served.get(api_key)
    request_class = REQUEST_CLASSES.get(api_key)
    if versions is None or request_class is None:
        name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else "unknown"
        raise UnknownApiError(
            f"API key {api_key} ({name}) is not served by this server", api_key, api_version,
            correlation_id,
        )
    low, high = versions
    if not low <= api_version <= high:
        raise UnknownApiError(
            f"{request_class.name} version {api_version} is not served (versions {low} to "
            f"{high} are)", api_key, api_version, correlation_id,
        )
    if is_flexible(request_class, api_version):
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
            if pos > len(frame):
                raise RequestHeaderError("a tagged field of the request header is cut short")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def decode_body(frame: bytes, header: RequestHeader) -> Any:
    """The request body of ``frame`` as kafka-python's message object.

    Raises:
        RequestBodyError: the body does not decode (cut short, a bad length, bad UTF-8, a
            null where the schema allows none).
            Bytes after its last field are ignored, as Kafka ignores them.
    """
    api_key, version = header.api_key, header.api_version
    hot = _HOT_DECODERS.get(api_key)
    if hot is not None and _covers(api_key, version):
        try:
            return hot(frame, header.body_offset, version)
        except hot_messages.HotDecodeError as exc:
            raise RequestBodyError(
                f"{ApiKey(api_key).name}Request v{version} does not decode: {exc}") from None
    request_class = REQUEST_CLASSES[api_key]
    view = memoryview(frame)[header.body_offset:]
    try:
        message, end = _body_decoder(request_class, version)(view, 0)
    except Exception as exc:  # the library raises struct.error, ValueError, IndexError, ...
        raise RequestBodyError(
            f"{request_class.name} v{version} does not decode: {type(exc).__name__}: {exc}"
        ) from None
    # The library slices a bytes field (a Produce's records) or a string as its length
    # prefix says, and a slice past the end of a memoryview is silently short: a frame cut
    # inside its last such field decodes "whole" unless the end is checked. Bytes after the
    # last field are left unread, as Kafka's parser leaves them (librdkafka's Metadata v12
    # carries three: refusing them would refuse librdkafka).
    if end > len(view):
        raise RequestBodyError(
            f"{request_class.name} v{version} is cut short: its fields take {end} bytes, the"
            f" frame holds {len(view)} after the header"
        )
    # The library reads a null (length -1, or a compact length 0) into any array or string,
    # nullable or not: a handler would meet None where the schema promises a value. Kafka's
    # generated readers refuse it ("non-nullable field ... was serialized as null").
    null = _first_null(message, request_class._struct, version)  # type: ignore[attr-defined]
    if null is not None:
        raise RequestBodyError(
            f"{request_class.name} v{version}: {null} is null, and that field is not nullable"
        )
    return message


#: The field types the library reads as None for a null length (-1, or a compact 0). Not
#: "uuid": it reads the zero UUID, which is no null on the wire, as None too.
_NULLABLE_TYPES = frozenset({"string", "bytes", "records"})
#: (struct field, version) -> the checks of :func:`_first_null`: (attribute, kind, field).
_NULL_CHECKS: dict[tuple[int, int], list[tuple[str, str, Any]]] = {}


def _null_checks(struct_field: Any, version: int) -> list[tuple[str, str, Any]]:
    """What :func:`_first_null` looks at in a struct at ``version``, worked out once: each
    field present that may be None, as "null" (must not be), "structs" (an array of structs:
    walk each), "array" (no null element), "struct" (walk it) or "walk" (a nullable struct or
    struct array: walk it when present)."""
    key = (id(struct_field), version)
    checks = _NULL_CHECKS.get(key)
    if checks is None:
        checks = []
        for name, field in struct_field.fields.items():
            if not field.for_version_q(version):
                continue
            nullable = field.nullable_for_version_q(version) or field.tagged_field_q(version)
            if field.is_struct_array():
                checks.append((name, "walk-structs" if nullable else "structs", field))
            elif field.is_array():
                checks.append((name, "walk-array" if nullable else "array", field))
            elif field.is_struct():
                checks.append((name, "walk-struct" if nullable else "struct", field))
            elif not nullable and field.type_str in _NULLABLE_TYPES:
                checks.append((name, "null", field))
        _NULL_CHECKS[key] = checks  # bounded: the schemas' structs times their versions
    return checks


def _first_null(message: Any, struct_field: Any, version: int, path: str = "") -> str | None:
    """The path of the first field of ``message`` (as ``struct_field``, kafka-python's schema
    of it, defines it) that is null without being nullable at ``version``, or None. Walks
    the nested structs and arrays: O(the fields of the message that may be null)."""
    for name, kind, field in _null_checks(struct_field, version):
        value = getattr(message, name, None)
        if value is None:
            if not kind.startswith("walk"):
                return f"{path}{name}"
            continue
        if kind.endswith("structs"):
            for n, item in enumerate(value):
                null = _first_null(item, field, version, f"{path}{name}[{n}].")
                if null is not None:
                    return null
        elif kind.endswith("array"):
            for n, item in enumerate(value):
                if item is None:
                    return f"{path}{name}[{n}]"
        elif kind.endswith("struct"):
            null = _first_null(value, field, version, f"{path}{name}.")
            if null is not None:
                return null
    return None


def _body_decoder(request_class: type[ApiMessage], version: int) -> Any:
    """kafka-python's decoder of ``request_class`` at ``version``, which returns the message
    and the position after it (``ApiMessage.decode`` returns the message only; this is its
    own call, with the end kept)."""
    flexible = is_flexible(request_class, version)
    return request_class._struct.compiled_decode_from(  # type: ignore[attr-defined]
        version, compact=flexible, tagged=flexible,
        data_class=request_class[None],  # type: ignore[index]
    )


def _covers(api_key: int, version: int) -> bool:
    low, high = _HOT_VERSIONS[api_key]
    return low <= version <= high


def encode_response(
    header: RequestHeader, response: Any, flexible_header: bool | None = None
) -> list[Any]:
    """The frame of ``response`` to the request ``header``, as pieces to write in order:
    bytes, and for a Fetch answer its records as they are (bytes, views or file regions:
    hot_messages.py).

    ``flexible_header`` forces the response header's version (ApiVersions: never flexible);
    by default it follows the request's version.
    """
    api_key, version = header.api_key, header.api_version
    if flexible_header is None:
        flexible_header = is_flexible(RESPONSE_CLASSES[api_key], version)
    head = _CORRELATION.pack(header.correlation_id) + (b"\x00" if flexible_header else b"")
    hot = _HOT_ENCODERS.get(api_key)
    if hot is not None and _covers(api_key, version):
        pieces = hot(response, version)
    else:
        pieces = [response.encode(version=version)]
    size = len(head)
    for piece in pieces:
        size += len(piece)
    if len(pieces[0]) <= _JOINED_HEAD_BYTES_MAX:
        pieces[0] = frame_size_prefix(size) + head + pieces[0]  # one piece fewer to write
    else:
        pieces.insert(0, frame_size_prefix(size) + head)
    return pieces
