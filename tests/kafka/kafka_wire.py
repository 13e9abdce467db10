"""Kafka requests on a raw socket, for the tests that need what a client library hides: a
chosen version, the raw error codes and KIP-951 hints, or bytes that are not Kafka's at all.

Requests and responses are kafka-python's ``kafka.protocol`` classes (Kafka's own schemas),
so the codec under test is checked against an independent one.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from stratalog.server.kafka.codec import RESPONSE_CLASSES

__all__ = ["KafkaSocket", "encode_request"]

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
