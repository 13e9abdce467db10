"""The HTTP(S) endpoint of ``/metrics``: served from the event loop, every resource bounded.

Prometheus scrapes ``GET /metrics`` (``/`` answers the same); the answer is prometheus-client's
exposition of the server's registry (:func:`prometheus_client.exposition.choose_encoder`: the
text format, or OpenMetrics when the scraper's ``Accept`` asks for it; gzip when its
``Accept-Encoding`` allows; ``name[]`` query parameters restrict it to those metrics, as
prometheus-client's own server does). Any other path is 404, any other method 405.

What a client of this port can make the server hold, and what bounds it (docs/server.md,
"What a client can make the server hold")::

    connections       metrics_connections_max at once; one more is closed as soon as it is
                      accepted (counted: stratalog_metrics_connections_refused_total)
    time              metrics_request_timeout_ms for the TLS handshake, for each request once
                      its first byte came, and for writing each answer;
                      metrics_connections_max_idle_ms between requests (keep-alive) and before
                      the first one: past either, the connection is closed
    memory            a request head (request line and headers) of at most
                      metrics_request_bytes_max; no request body is read (a request announcing
                      one is answered 400 and closed); one rendered answer per connection
    threads           none per connection: connections are coroutines of the event loop; the
                      exposition is rendered on one thread of the endpoint's own (it reads
                      /proc and takes the collectors' locks: not on the loop), one scrape at a
                      time

The descriptors these connections may hold are taken out of ``RLIMIT_NOFILE`` before the
storage's share is computed (server/storage/descriptor_budget.py), so that no number of
scrapers can make a segment roll fail for want of a descriptor.

Kafka's ``SocketServer`` (``core/src/main/scala/kafka/network/SocketServer.scala``) stops
accepting at ``max.connections`` and lets new connections wait in the listen backlog; this
endpoint accepts and closes them at once, as gRPC's ``grpc.max_allowed_incoming_connections``
does on the API port, so that a scraper learns at once that it was refused (docs/server.md).
An accept that fails for want of a descriptor leaves the connection in the kernel's backlog
and is tried again after :data:`_ACCEPT_BACKOFF_S`.

The accept loop is the endpoint's own (``sock_accept``), and each connection becomes a stream
with ``connect_accepted_socket``: with TLS, with the context the server's TLS material gives at
that moment (server/security/tls.py: reloaded on SIGHUP), so a reloaded certificate serves the
next connection. (Upgrading a plain stream with ``start_tls`` instead lost, on uvloop, a
ClientHello that arrived before the upgrade: the handshake then waited for its timeout.) With ``metrics_authentication = "required"`` a scrape must show who it is,
as an API call does (docs/security.md, "Metrics"): an ``Authorization: Basic`` (user and
password) or ``Bearer`` (token) header that the API's :class:`Authenticator` accepts, or a
client certificate verified by the handshake (``tls_client_auth = "required"``); otherwise it
is answered 401 and closed. The exposition names every topic, which is why it can be closed.

Concurrency: event-loop only (:meth:`MetricsEndpoint.start`, :meth:`MetricsEndpoint.close` and
every connection); the rendering thread only calls the registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import socket
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from prometheus_client.exposition import choose_encoder, gzip_accepted

from stratalog.server.security.errors import AuthenticationFailedError

if TYPE_CHECKING:
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.security.authentication import Authenticator

__all__ = [
    "REFUSAL_REASONS",
    "MetricsEndpoint",
    "MetricsEndpointLimits",
]

#: Why the endpoint closed a connection early (the ``reason`` label of
#: ``stratalog_metrics_connections_refused_total``): a fixed set, never a client's address.
REFUSAL_REASONS = (
    "connections_max",   # the cap was reached when it was accepted
    "idle",              # no request within metrics_connections_max_idle_ms
    "request_timeout",   # TLS handshake, request head or answer not done in time
    "request_too_large", # a request head over metrics_request_bytes_max
    "bad_request",       # not HTTP/1.x, a request body, a failed TLS handshake
    "unauthenticated",   # authentication required and not given (or wrong)
)

#: Connections the kernel queues for the accept loop (beyond them, clients' SYNs wait).
_BACKLOG = 128
#: After a failed accept (no descriptor free): how long the accept loop waits to try again.
_ACCEPT_BACKOFF_S = 0.5
_PATHS = frozenset({"/metrics", "/"})
_METHODS = frozenset({"GET", "HEAD"})
_HEAD_END = b"\r\n\r\n"
_STATUS_TEXT = {
    200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
    405: "Method Not Allowed", 431: "Request Header Fields Too Large",
}

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MetricsEndpointLimits:
    """The endpoint's limits, from the settings of the same names (server/settings.py).

    Invariants: every value is positive (the settings' parser checks their ranges).
    """

    connections_max: int = 32
    connections_max_idle_ms: int = 120_000
    request_timeout_ms: int = 10_000
    request_bytes_max: int = 8192
    authentication_required: bool = False


class _Refused(Exception):
    """Close the connection, after answering ``status`` if it is not 0; ``reason`` one of
    :data:`REFUSAL_REASONS`."""

    def __init__(self, reason: str, status: int = 0, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    keep_alive: bool


def _parse_request_head(head: bytes) -> _Request:
    """The request of ``head`` (request line and headers, ending in an empty line).

    Raises:
        _Refused: not an HTTP/1.0 or 1.1 request head, or one that announces a body.
    """
    try:
        text = head.decode("latin-1")
        request_line, *header_lines = text[: -len(_HEAD_END)].split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        raise _Refused("bad_request", 400, "not an HTTP/1.x request line") from None
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _Refused("bad_request", 400, f"unsupported protocol {version[:16]!r}")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _Refused("bad_request", 400, "a header line is not 'name: value'")
        headers[name.lower()] = value.strip()
    # A scrape has no body; reading one would be memory a client chooses.
    if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
        raise _Refused("bad_request", 400, "a scrape carries no request body")
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    parts = urlsplit(target)
    return _Request(method, parts.path, parse_qs(parts.query), headers, keep_alive)


def _response(status: int, headers: list[tuple[str, str]], body: bytes, *,
              keep_alive: bool, send_body: bool = True) -> bytes:
    lines = [f"HTTP/1.1 {status} {_STATUS_TEXT[status]}"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append(f"Content-Length: {len(body)}")
    if not keep_alive:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if send_body else head


class MetricsEndpoint:
    """The ``/metrics`` server of one :class:`ServerMetrics`, on the running event loop.

    Holds the listening socket, the accept loop's task and the open connections' tasks from
    :meth:`start` until :meth:`close`, and the one rendering thread. ``connections`` is how many are open now
    (exported as ``stratalog_metrics_connections``).

    Crash behaviour: holds nothing durable; a scrape cut by a stop gets a closed connection.
    Concurrency: event-loop only.
    """

    def __init__(
        self,
        metrics: ServerMetrics,
        limits: MetricsEndpointLimits | None = None,
        authenticator: Authenticator | None = None,
    ) -> None:
        self._metrics = metrics
        self._limits = limits or MetricsEndpointLimits()
        if self._limits.authentication_required:
            assert authenticator is not None, "authentication required without an authenticator"
        self._authenticator = authenticator
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._ssl_context_source: Callable[[], ssl.SSLContext] | None = None
        self._client_certificates = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._render_thread: ThreadPoolExecutor | None = None
        self.connections = 0
        metrics.metrics_connections.set_function(lambda: self.connections)

    async def start(
        self,
        host: str,
        port: int,
        ssl_context_source: Callable[[], ssl.SSLContext] | None = None,
        *,
        client_certificates: bool = False,
    ) -> int:
        """Listen on ``host:port`` (0 = any free port) and return the bound port; HTTPS with
        the contexts ``ssl_context_source`` returns, plain HTTP without one.
        ``client_certificates``: the contexts require and verify a client certificate, which
        then authenticates every scrape of its connection.

        Raises:
            OSError: the address cannot be bound (in use, not local, not resolved).
        """
        loop = asyncio.get_running_loop()
        family, _, _, _, address = (await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE))[0]
        listener = socket.create_server(address[:2], family=family, backlog=_BACKLOG)
        listener.setblocking(False)
        self._listener = listener
        self._ssl_context_source = ssl_context_source
        self._client_certificates = client_certificates and ssl_context_source is not None
        self._render_thread = ThreadPoolExecutor(max_workers=1,
                                                 thread_name_prefix="stratalog-metrics")
        self._accepting = loop.create_task(self._accept(listener), name="stratalog-metrics")
        bound: int = listener.getsockname()[1]
        return bound

    async def close(self) -> None:
        """Stop listening, close every connection, stop the rendering thread. Idempotent."""
        accepting, self._accepting = self._accepting, None
        tasks = [accepting, *self._tasks] if accepting is not None else list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        render_thread, self._render_thread = self._render_thread, None
        if render_thread is not None:
            render_thread.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ accepting

    async def _accept(self, listener: socket.socket) -> None:
        """Accept connections until cancelled: one over the cap is closed at once, before
        anything is made for it; the others are served each by a task of their own."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, _ = await loop.sock_accept(listener)
            except OSError as exc:
                # EMFILE, ENFILE, ENOBUFS: the connection stays in the kernel's backlog (the
                # server holds nothing for it) until a descriptor is free; say so, at most
                # once a backoff, and try again.
                logger.warning("metrics endpoint cannot accept a connection: %s; retrying in "
                               "%.1f s", exc, _ACCEPT_BACKOFF_S)
                await asyncio.sleep(_ACCEPT_BACKOFF_S)
                continue
            if self.connections >= self._limits.connections_max:
                connection.close()
                self._metrics.observe_metrics_refusal("connections_max")
                continue
            self.connections += 1
            task = loop.create_task(self._serve(connection))
            self._tasks.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self.connections -= 1

    # ------------------------------------------------------------------ one connection

    async def _serve(self, connection: socket.socket) -> None:
        limits = self._limits
        request_timeout_s = limits.request_timeout_ms / 1000
        peer = None
        with contextlib.suppress(OSError):
            peer = connection.getpeername()
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await self._open_stream(connection, request_timeout_s)
            keep_alive = True
            while keep_alive:
                keep_alive = await self._serve_one(reader, writer, request_timeout_s)
        except _Refused as refused:
            self._metrics.observe_metrics_refusal(refused.reason)
            logger.debug("metrics connection from %s closed: %s %s", peer, refused.reason,
                         refused.detail)
            if refused.status and writer is not None:
                body = f"{refused.detail}\n".encode()
                headers = [("Content-Type", "text/plain; charset=utf-8")]
                if refused.status == 401:
                    headers.append(("WWW-Authenticate", 'Basic realm="stratalog metrics"'))
                with contextlib.suppress(OSError, TimeoutError, ConnectionError):
                    writer.write(_response(refused.status, headers, body, keep_alive=False))
                    await asyncio.wait_for(writer.drain(), request_timeout_s)
        except (OSError, ConnectionError, asyncio.IncompleteReadError) as exc:
            logger.debug("metrics connection from %s ended: %s", peer, exc)
        finally:
            if writer is not None:
                writer.transport.abort()
            connection.close()  # a no-op once the transport owns it and closed it

    async def _open_stream(
        self, connection: socket.socket, timeout_s: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The connection as a stream, after the TLS handshake when TLS is on (with the
        context of this moment: a reloaded certificate serves the next connection). The
        reader's limit bounds what one request head may buffer.

        Raises:
            _Refused: the handshake failed or took longer than ``timeout_s``.
        """
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=self._limits.request_bytes_max, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        context = None if self._ssl_context_source is None else self._ssl_context_source()
        try:
            transport, _ = await asyncio.wait_for(
                loop.connect_accepted_socket(
                    lambda: protocol, connection, ssl=context,
                    ssl_handshake_timeout=timeout_s if context is not None else None,
                ),
                timeout_s,
            )
        except TimeoutError:
            raise _Refused("request_timeout", detail="TLS handshake not done in time") from None
        except (ssl.SSLError, OSError, ConnectionError) as exc:
            # No certificate, another CA, a plaintext client: the client's business.
            raise _Refused("bad_request", detail=f"TLS handshake failed: {exc}") from None
        # drain() then returns only once the answer is all with the kernel: a connection is
        # closed with abort() (no wait on a client that stopped reading), which would drop
        # what a buffer still held.
        transport.set_write_buffer_limits(high=0)
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         request_timeout_s: float) -> bool:
        """Read one request and answer it; whether the connection stays open for another."""
        limits = self._limits
        try:
            first = await asyncio.wait_for(reader.read(1),
                                           limits.connections_max_idle_ms / 1000)
        except TimeoutError:
            raise _Refused("idle") from None
        if not first:
            return False  # the client closed it
        try:
            rest = await asyncio.wait_for(reader.readuntil(_HEAD_END), request_timeout_s)
        except TimeoutError:
            raise _Refused("request_timeout", 0, "request head not complete in time") from None
        except asyncio.LimitOverrunError:
            raise _Refused(
                "request_too_large", 431,
                f"request head over {limits.request_bytes_max} bytes"
                " (metrics_request_bytes_max)",
            ) from None
        request = _parse_request_head(first + rest)
        if request.method not in _METHODS:
            await self._answer(writer, request_timeout_s, _response(
                405, [("Allow", "GET, HEAD")], b"", keep_alive=request.keep_alive))
            return request.keep_alive
        if request.path not in _PATHS:
            await self._answer(writer, request_timeout_s, _response(
                404, [], b"", keep_alive=request.keep_alive))
            return request.keep_alive
        if limits.authentication_required:
            await self._authenticate(writer, request)
        headers, body = await asyncio.get_running_loop().run_in_executor(
            self._render_thread, self._render, request
        )
        await self._answer(writer, request_timeout_s, _response(
            200, headers, body, keep_alive=request.keep_alive,
            send_body=request.method == "GET"))
        return request.keep_alive

    async def _authenticate(self, writer: asyncio.StreamWriter, request: _Request) -> None:
        """Pass a scrape that shows who it is (see the module docstring).

        Raises:
            _Refused: it does not (401), or its credentials are wrong (401).
        """
        if self._client_certificates and writer.get_extra_info("peercert"):
            return  # the handshake verified its certificate against tls_ca_file
        authorization = request.headers.get("authorization")
        if authorization is None:
            raise _Refused("unauthenticated", 401, "authentication required")
        assert self._authenticator is not None
        try:
            verified = await self._authenticator.authenticate([("authorization", authorization)])
        except AuthenticationFailedError as exc:
            raise _Refused("unauthenticated", 401, str(exc)) from None
        if verified is None:
            raise _Refused("unauthenticated", 401, "authentication required")

    async def _answer(self, writer: asyncio.StreamWriter, timeout_s: float, data: bytes) -> None:
        writer.write(data)
        try:
            await asyncio.wait_for(writer.drain(), timeout_s)
        except TimeoutError:
            raise _Refused("request_timeout", 0, "answer not taken in time") from None

    def _render(self, request: _Request) -> tuple[list[tuple[str, str]], bytes]:
        """The exposition for ``request`` (on the rendering thread): headers and body, as
        prometheus-client's own server makes them."""
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        registry = self._metrics.registry
        names = request.query.get("name[]")
        body = encoder(registry.restricted_registry(names) if names else registry)
        headers = [("Content-Type", content_type)]
        if gzip_accepted(request.headers.get("accept-encoding", "")):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        return headers, body
