"""A minimal NATS client for measuring one JetStream request at a time: the NATS protocol written
and parsed by hand on one raw asyncio connection, as benchmarks/kafka_wire.py is for Kafka.

Intuition: docs/performance.md compares one request at a time through the Kafka listener and
through NATS JetStream. Both sides go through a client of the same shape, so that neither
library's own overhead is measured as the server's: one connection, the request written by
hand, the answer parsed in full and checked, a future per request; no timeouts, no reconnects.

The protocol (https://docs.nats.io/reference/reference-protocols/nats-protocol), lines ending in
CRLF:

* the server opens with ``INFO {json}``; the client answers ``CONNECT {json}`` (headers on,
  verbose off) and ``PING``, and is connected at ``PONG``;
* the client subscribes to its inbox, ``SUB _INBOX.<token>.* 1``; each request is
  ``PUB <subject> _INBOX.<token>.<n> <size>`` then its payload, and its answer comes to
  that reply subject: ``MSG <subject> <sid> <size>`` then the payload, or with headers
  ``HMSG <subject> <sid> <header size> <total size>`` then ``NATS/1.0[ <status>]``, the header
  lines, an empty line and the payload;
* the server's ``PING`` is answered ``PONG``; ``-ERR`` fails every request waiting.

JetStream on top: a publish to a stream's subject is answered ``{"stream": .., "seq": ..}`` (or
``{"error": {..}}``); a direct get, ``PUB $JS.API.DIRECT.GET.<stream>`` with ``{"seq": n}``, is
answered the stored message with its ``Nats-*`` headers (a status 404 when there is none).

Concurrency: one event loop; a NatsWire is not shared between loops.
"""

from __future__ import annotations

import asyncio
import json
import secrets

__all__ = ["NatsWire"]

_CRLF = b"\r\n"


class NatsError(Exception):
    """A request's answer is an error (a JetStream error, a status other than 200, -ERR)."""


class NatsWire(asyncio.Protocol):
    """One connection to a NATS server (module docstring)."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._inbox = f"_INBOX.{secrets.token_hex(8)}."
        self._inbox_bytes = self._inbox.encode()
        self._next = 0
        self._pending: dict[bytes, asyncio.Future[tuple[bytes | None, bytes]]] = {}
        self._connected: asyncio.Future[None] | None = None
        self._lost: asyncio.Future[None] | None = None

    @classmethod
    async def connect(cls, address: str) -> NatsWire:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        _, wire = await loop.create_connection(cls, host, int(port))
        assert wire._connected is not None
        await wire._connected
        return wire

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        self._connected = loop.create_future()
        self._lost = loop.create_future()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        while True:
            end = buffer.find(_CRLF, start)
            if end < 0:
                break
            line = bytes(buffer[start:end])
            if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                fields = line.split()
                total = int(fields[-1])
                header_bytes = int(fields[-2]) if fields[0] == b"HMSG" else 0
                body = end + 2
                if len(buffer) < body + total + 2:
                    break  # the payload is not all here yet
                headers = bytes(buffer[body:body + header_bytes]) if header_bytes else None
                payload = bytes(buffer[body + header_bytes:body + total])
                start = body + total + 2
                future = self._pending.pop(fields[1], None)
                if future is not None and not future.done():
                    future.set_result((headers, payload))
                continue
            start = end + 2
            if line.startswith(b"INFO "):
                self._transport.write(  # type: ignore[union-attr]
                    b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
                    b'"no_responders":true,"protocol":1,"lang":"python","version":"wire"}\r\n'
                    b"PING\r\nSUB " + self._inbox_bytes + b"* 1\r\n")
            elif line == b"PONG":
                if self._connected is not None and not self._connected.done():
                    self._connected.set_result(None)
            elif line == b"PING":
                self._transport.write(b"PONG\r\n")  # type: ignore[union-attr]
            elif line.startswith(b"-ERR"):
                self._fail(NatsError(line.decode(errors="replace")))
        if start:
            del buffer[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("the server closed the connection"))
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    def _fail(self, error: Exception) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        if self._connected is not None and not self._connected.done():
            self._connected.set_exception(error)

    # ---------------------------------------------------------------- requests

    def request(self, subject: str, payload: bytes) -> asyncio.Future[tuple[bytes | None, bytes]]:
        """Publish ``payload`` to ``subject`` with a reply subject of this connection's inbox;
        a future of the answer's (header bytes or None, payload)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            raise ConnectionError("not connected")
        self._next += 1
        reply = b"%s%d" % (self._inbox_bytes, self._next)
        future: asyncio.Future[tuple[bytes | None, bytes]] = (
            asyncio.get_running_loop().create_future())
        self._pending[reply] = future
        transport.writelines((b"PUB %s %s %d\r\n" % (subject.encode(), reply, len(payload)),
                              payload, _CRLF))
        return future

    async def publish(self, subject: str, payload: bytes) -> int:
        """A JetStream publish, waited for: the sequence the stream stored it at.

        Raises:
            NatsError: the ack is an error, or no stream listens on ``subject``.
        """
        headers, answer = await self.request(subject, payload)
        if headers is not None:
            _check_status(headers)
        ack = json.loads(answer)
        if "error" in ack:
            raise NatsError(f"publish to {subject}: {ack['error']}")
        return ack["seq"]

    async def direct_get(self, stream: str, sequence: int) -> tuple[dict[str, str], bytes]:
        """The message at ``sequence`` of ``stream`` (a stream with ``allow_direct``): its
        headers (``Nats-Sequence``, ``Nats-Time-Stamp``, ...) and its data.

        Raises:
            NatsError: no message there (status 404), or another error.
        """
        headers, data = await self.request(f"$JS.API.DIRECT.GET.{stream}",
                                           b'{"seq":%d}' % sequence)
        if headers is None:
            raise NatsError(f"direct get of {stream} at {sequence}: an answer without headers")
        return _check_status(headers), data

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            if self._lost is not None:
                await self._lost


def _check_status(headers: bytes) -> dict[str, str]:
    """The header lines of an HMSG as a dict; NatsError when its status is not 200."""
    lines = headers.decode().split("\r\n")
    status = lines[0].split(" ", 2)  # NATS/1.0[ code[ description]]
    if len(status) > 1 and status[1] != "200":
        raise NatsError(f"status {' '.join(status[1:])}")
    out = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            out[name] = value.strip()
    return out
