"""benchmarks/nats_wire.py's protocol, without a server: what it writes for a publish and a
direct get, and how it reads MSG and HMSG answers that arrive in pieces (the NATS protocol:
https://docs.nats.io/reference/reference-protocols/nats-protocol)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

# benchmarks/ is a folder of scripts run from the repository root, not an installed package.
PROJECT_ROOT = Path(__file__).resolve().parents[3]
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks.nats_wire import NatsError, NatsWire  # noqa: E402


class _Transport:
    """Collects what the client writes."""

    def __init__(self) -> None:
        self.written = bytearray()

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, pieces: list[bytes]) -> None:
        for piece in pieces:
            self.written += piece

    def is_closing(self) -> bool:
        return False


def _connected() -> tuple[NatsWire, _Transport]:
    wire, transport = NatsWire(), _Transport()
    wire.connection_made(transport)  # type: ignore[arg-type]
    wire.data_received(b'INFO {"server_id":"x","headers":true}\r\n')
    assert transport.written.startswith(b"CONNECT {")
    assert b"PING\r\nSUB _INBOX." in transport.written
    wire.data_received(b"PONG\r\n")
    transport.written.clear()
    return wire, transport


def _feed_in_pieces(wire: NatsWire, data: bytes) -> None:
    for i in range(0, len(data), 7):
        wire.data_received(data[i:i + 7])


async def test_a_publish_writes_pub_and_reads_its_ack_in_pieces():
    wire, transport = _connected()
    publish = asyncio.ensure_future(wire.publish("orders", b"hello"))
    await asyncio.sleep(0)  # (the client's own task writes the PUB)
    line, payload, _ = bytes(transport.written).split(b"\r\n")
    verb, subject, reply, size = line.split()
    assert (verb, subject, int(size), payload) == (b"PUB", b"orders", 5, b"hello")
    ack = b'{"stream":"orders","seq":42}'
    _feed_in_pieces(wire, b"PING\r\nMSG %s 1 %d\r\n%s\r\n" % (reply, len(ack), ack))
    assert await publish == 42
    assert transport.written.endswith(b"PONG\r\n")  # the server's PING answered


async def test_a_direct_get_reads_headers_and_data_and_a_404_fails():
    wire, transport = _connected()
    got = asyncio.ensure_future(wire.direct_get("s", 5))
    await asyncio.sleep(0)
    line = bytes(transport.written).split(b"\r\n")[0]
    assert line.split()[1] == b"$JS.API.DIRECT.GET.s"
    assert bytes(transport.written).split(b"\r\n")[1] == b'{"seq":5}'
    reply = line.split()[2]
    headers = b"NATS/1.0\r\nNats-Stream: s\r\nNats-Sequence: 5\r\n\r\n"
    data = b"the\r\nvalue"  # CRLF inside a payload is data
    _feed_in_pieces(wire, b"HMSG %s 1 %d %d\r\n%s%s\r\n" % (
        reply, len(headers), len(headers) + len(data), headers, data))
    assert await got == ({"Nats-Stream": "s", "Nats-Sequence": "5"}, data)

    transport.written.clear()
    missing = asyncio.ensure_future(wire.direct_get("s", 99))
    await asyncio.sleep(0)
    reply = bytes(transport.written).split(b"\r\n")[0].split()[2]
    headers = b"NATS/1.0 404 Message Not Found\r\n\r\n"
    wire.data_received(b"HMSG %s 1 %d %d\r\n%s\r\n" % (reply, len(headers), len(headers),
                                                        headers))
    with pytest.raises(NatsError, match="404"):
        await missing
