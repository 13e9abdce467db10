"""A minimal blocking Kafka-protocol client for the listener's tests: requests encoded and
responses decoded by kafka-python's message classes (generated from Kafka's JSON schemas: the
oracle), framing by hand, nothing else — so a test sees exactly what the server sent."""

from __future__ import annotations

import contextlib
import random
import re
import socket
import struct
import uuid
from typing import Any

from kafka.protocol.api_message import ApiMessage

CLIENT_ID = "stratalog-tests"


def encode_request(request: ApiMessage, version: int, correlation_id: int,
                   client_id: str | None = CLIENT_ID) -> bytes:
    """The whole frame of ``request`` at ``version`` (size prefix, header, body)."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return request.encode(version=version, header=True, framed=True)


class KafkaWire:
    """One TCP connection to a Kafka listener; ``call`` sends a request and reads its answer."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._correlation = 0

    def close(self) -> None:
        """Close the connection; a read waiting in another thread ends (shutdown first: a
        close alone would leave it blocked and the connection open)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, request: ApiMessage, version: int) -> int:
        """Send ``request``; its correlation id."""
        self._correlation += 1
        self.sock.sendall(encode_request(request, version, self._correlation))
        return self._correlation

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive_frame(self) -> bytes:
        """The next response frame's bytes (after the size prefix); b"" when the server closed
        the connection."""
        head = self._read(4)
        if len(head) < 4:
            return b""
        (size,) = struct.unpack(">i", head)
        return self._read(size)

    def receive(self, response_class: type[ApiMessage], version: int,
                flexible_header: bool | None = None) -> tuple[int, Any]:
        """The next response: (correlation id, decoded body)."""
        frame = self.receive_frame()
        assert frame, "the server closed the connection"
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        flexible = (response_class.flexible_version_q(version) if flexible_header is None
                    else flexible_header)
        body = memoryview(frame)[5 if flexible else 4:]
        return correlation_id, response_class.decode(body, version=version)

    def call(self, request: ApiMessage, response_class: type[ApiMessage], version: int) -> Any:
        sent = self.send(request, version)
        flexible_header = False if response_class.API_KEY == 18 else None
        correlation_id, response = self.receive(response_class, version, flexible_header)
        assert correlation_id == sent
        return response

    def closed_by_server(self, timeout_s: float = 10.0) -> bool:
        """Whether the server closed the connection (reads EOF within ``timeout_s``)."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def _read(self, count: int) -> bytes:
        chunks = []
        while count:
            chunk = self.sock.recv(count)
            if not chunk:
                break
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)


def ask(wire: KafkaWire, request: ApiMessage, version: int) -> Any:
    """``wire.call`` with the response class of ``request``'s API: send, then the decoded
    answer (its correlation id checked)."""
    from stratalog.server.kafka.codec import RESPONSE_CLASSES

    return wire.call(request, RESPONSE_CLASSES[request.API_KEY], version)


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
