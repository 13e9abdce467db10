"""A minimal blocking Kafka client for tests: one connection, one request at a time, bodies on
kafka-python's protocol classes (Kafka's own schemas), the headers written here.

    with KafkaWire("127.0.0.1:9092") as wire:
        response = wire.send(HeartbeatRequest(group_id="g", ...), version=3)

Request header v1 (v2, one empty tagged-field section more, for a flexible version):
``int16 api_key | int16 api_version | int32 correlation_id | int16 length + client_id``;
response header v0 (v1: its tagged fields follow) is the correlation id. Every read has a
timeout: a missing answer fails the test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from typing import Any

__all__ = ["KafkaWire"]

_HEADER = struct.Struct(">hhih")
_INT32 = struct.Struct(">i")
TIMEOUT_S = 30.0


class KafkaWire:
    """One connection to a Kafka listener (module docstring)."""

    def __init__(self, bootstrap: str, client_id: str = "kafka-wire") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self._socket = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self._client_id = client_id.encode()
        self._correlation_id = 0

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection; a ``send`` waiting in another thread ends (shutdown first:
        a close alone would leave its read blocked and the connection open)."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()

    def send(self, request: Any, version: int) -> Any:
        """Send ``request`` as ``version`` and return the decoded response."""
        self._correlation_id += 1
        flexible = bool(type(request).flexible_version_q(version))
        header = _HEADER.pack(request.API_KEY, version, self._correlation_id,
                              len(self._client_id)) + self._client_id
        if flexible:
            header += b"\x00"
        body = request.encode(version=version)
        self._socket.sendall(_INT32.pack(len(header) + len(body)) + header + body)
        (size,) = _INT32.unpack(self._read(4))
        frame = self._read(size)
        (correlation_id,) = _INT32.unpack_from(frame, 0)
        assert correlation_id == self._correlation_id, (correlation_id, self._correlation_id)
        response_class = _response_class(request)
        # ApiVersions' response header is never flexible (KIP-511); every other's follows
        # the version.
        skip = 5 if flexible and request.API_KEY != 18 else 4
        return response_class.decode(frame[skip:], version=version)

    def _read(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self._socket.recv(size)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)


def _response_class(request: Any) -> Any:
    from stratalog.server.kafka.codec import RESPONSE_CLASSES

    return RESPONSE_CLASSES[request.API_KEY]
