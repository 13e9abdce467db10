"""Kafka requests on a raw socket, for the tests that need what a client library hides: a
chosen version, the raw error codes and KIP-951 hints, or bytes that are not Kafka's at all.

Requests and responses are kafka-python's ``kafka.protocol`` classes (Kafka's own schemas),
so the codec under test is checked against an independent one.
"""

from __future__ import annotations

import random
import re
import socket
import struct
import uuid
from typing import Any

from stratalog.server.kafka.codec import RESPONSE_CLASSES

__all__ = ["KafkaSocket", "encode_request", "sample_request"]

_SIZE = struct.Struct(">i")


def encode_request(request: Any, version: int, correlation_id: int = 1,
                   client_id: str = "stratalog-test") -> bytes:
    """``request``'s whole frame (size prefix, header, body) at ``version``."""
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


class KafkaSocket:
    """One connection to a Kafka listener; requests answered one at a time."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._correlation_id = 0

    def __enter__(self) -> KafkaSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def call(self, request: Any, version: int) -> Any:
        """Send ``request`` at ``version`` and decode its answer."""
        self._correlation_id += 1
        self.sock.sendall(encode_request(request, version, self._correlation_id))
        frame = self.read_frame()
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        assert correlation_id == self._correlation_id, (correlation_id, self._correlation_id)
        response_class = RESPONSE_CLASSES[request.API_KEY]
        flexible = response_class.flexible_version_q(version) and request.API_KEY != 18
        body = memoryview(frame)[5 if flexible else 4:]
        return response_class.decode(body, version=version)

    def read_frame(self) -> bytes:
        """The next response frame (after its size prefix); EOFError when the server closed."""
        (size,) = _SIZE.unpack(self._read_exactly(4))
        return self._read_exactly(size)

    def _read_exactly(self, count: int) -> bytes:
        chunks = []
        while count:
            chunk = self.sock.recv(count)
            if not chunk:
                raise EOFError("the server closed the connection")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)


# ---------------------------------------------------------------- sample requests

_SCALARS = {
    "int8": lambda rng: rng.randrange(-1, 3),
    "int16": lambda rng: rng.randrange(-1, 5),
    "uint16": lambda rng: rng.randrange(0, 5),
    "int32": lambda rng: rng.randrange(-1, 100),
    "uint32": lambda rng: rng.randrange(0, 100),
    "int64": lambda rng: rng.randrange(-2, 1000),
    "float64": lambda rng: rng.random(),
    "bool": lambda rng: bool(rng.randrange(2)),
    "string": lambda rng: rng.choice(["t", "topic-a", "g", "x" * rng.randrange(0, 40)]),
    "bytes": lambda rng: rng.randbytes(rng.randrange(0, 30)),
    "records": lambda rng: rng.randbytes(rng.randrange(0, 80)),
    "uuid": lambda rng: uuid.UUID(int=rng.getrandbits(128)),
}


def sample_request(request_class: Any, version: int, rng: random.Random) -> Any:
    """A request of ``request_class`` at ``version`` with every field of that version set to
    a random value of its type (but types :func:`_known` does not know), and arrays of 0 to 2
    elements: built from the class's own
    schema (Kafka's JSON message schema), so it covers every API kafka-python knows."""
    return _build(request_class, request_class._json["fields"], version, rng)


def _build(owner: Any, fields: list[dict[str, Any]], version: int, rng: random.Random) -> Any:
    values = {}
    for spec in fields:
        if _in_versions(spec.get("versions"), version) and _known(spec["type"]):
            values[_snake(spec["name"])] = _value(owner, spec, version, rng)
    return owner(**values)


def _known(kind: str) -> bool:
    """Whether a field of this type gets a random value (a struct, an array, or a scalar of
    :data:`_SCALARS`); others (a response's ``bitfield``) keep the class's default."""
    element = kind.removeprefix("[]")
    return element in _SCALARS or element[:1].isupper()


def _value(owner: Any, spec: dict[str, Any], version: int, rng: random.Random) -> Any:
    kind = spec["type"]
    if kind.startswith("[]"):
        element = kind[2:]
        if "fields" in spec:
            return [_build(getattr(owner, element), spec["fields"], version, rng)
                    for _ in range(rng.randrange(3))]
        return [_SCALARS[element](rng) for _ in range(rng.randrange(3))]
    if "fields" in spec:
        return _build(getattr(owner, kind), spec["fields"], version, rng)
    return _SCALARS[kind](rng)


def _in_versions(spec: str | None, version: int) -> bool:
    if not spec or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
