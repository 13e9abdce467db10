"""The Kafka listener: a TCP server speaking Kafka's protocol beside the gRPC one.

``kafka_listen`` (default ``127.0.0.1:9092``; empty: no Kafka listener) is bound on the event loop
(uvloop's ``create_server``); every accepted connection is a
:class:`~stratalog.server.kafka.connection.KafkaConnection`. The listener holds what the
connections share: the services (context.py), the byte budget of requests being read or served
(``kafka_queued_request_bytes_max``), the count of open connections (``kafka_connections_max``:
one more is closed as it is accepted, as Kafka's ``max.connections``), the TLS context, and a
rate limit on the log lines about refused connections (a client sending garbage in a loop must
not fill the server's log).

Security (docs/kafka-protocol.md, "Security"): with the server's TLS files, the listener serves
TLS with the same certificate, reloaded on SIGHUP for new handshakes
(:meth:`~stratalog.server.security.tls.ServerTls.listener_context`). A connection's first
identity (:meth:`connection_state`) is its client certificate's subject (mTLS), else
``User:ANONYMOUS``; when the server has a credential file and refuses anonymous callers, a
connection without a certificate must pass a SASL exchange (apis/sasl.py) before anything but
ApiVersions and SASL's own requests is served, as the gRPC listener refuses such a call
(``authentication_anonymous``).

Crash behaviour: nothing here is durable. Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from kafka.protocol.api_key import ApiKey

from stratalog.server.byte_budget import ByteBudget
from stratalog.server.client_text import loggable
from stratalog.server.kafka import apis  # noqa: F401  (registers every API's handler)
from stratalog.server.kafka.connection import KafkaConnection
from stratalog.server.kafka.context import ConnectionState, KafkaServices
from stratalog.server.security.principal import ANONYMOUS, CallIdentity
from stratalog.server.security.tls import peer_certificate_principal
from stratalog.server.settings import Address, parse_address

if TYPE_CHECKING:
    import ssl

__all__ = ["KafkaListener"]

logger = logging.getLogger(__name__)

_REFUSALS_LOGGED_PER_S = 10


class KafkaListener:
    """The Kafka protocol's TCP server (module docstring). :meth:`start` once, then
    :meth:`stop` once."""

    def __init__(self, services: KafkaServices, ssl_context: ssl.SSLContext | None = None) -> None:
        self.services = services
        settings = services.settings
        self.address = parse_address(settings.kafka_listen)
        self.budget = ByteBudget("kafka_queued_request_bytes_max",
                                 settings.kafka_queued_request_bytes_max)
        self.port: int | None = None
        self._ssl_context = ssl_context
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[KafkaConnection] = set()
        # API key -> its request counter and latency histogram (children made once).
        self._observers: dict[int, tuple[Any, Any]] = {}
        self._refusals_second = 0.0
        self._refusals_logged = 0
        self._refusals_unlogged = 0

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def advertised(self) -> Address:
        """The address clients reach this listener at: ``kafka_advertised_listen``, else the
        listen host and the port bound (0.0.0.0 and :: are not addresses to connect to: the
        machine's name is given instead, as Kafka does for an empty host)."""
        settings = self.services.settings
        if settings.kafka_advertised_listen:
            return parse_address(settings.kafka_advertised_listen)
        host = self.address.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.getfqdn()
        return Address(host, self.port or self.address.port)

    async def start(self, port: int | None = None) -> int:
        """Bind (``port`` overrides the configured one) and serve; the port bound.

        Raises:
            OSError: the address would not bind.
        """
        loop = asyncio.get_running_loop()
        address = self.address
        self._server = await loop.create_server(
            lambda: KafkaConnection(self), address.host,
            address.port if port is None else port,
            ssl=self._ssl_context, reuse_address=True, backlog=1024,
        )
        sockets = self._server.sockets or ()
        self.port = sockets[0].getsockname()[1] if sockets else address.port
        return self.port

    async def stop(self) -> None:
        """Stop accepting, close every connection (a request being served is cancelled: its
        client retries elsewhere or later)."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except TimeoutError:
                logger.warning("the Kafka listener's connections did not close within 5 s")
            self._server = None

    # ---------------------------------------------------------------- connections

    def admit(self, connection: KafkaConnection) -> bool:
        """Count a new connection; False (close it) past ``kafka_connections_max``."""
        if len(self._connections) >= self.services.settings.kafka_connections_max:
            self.log_refusal("a new connection", "kafka_connections_max "
                             f"({self.services.settings.kafka_connections_max}) connections are"
                             " open")
            self.services.metrics.kafka_connections_closed.labels("connections_max").inc()
            return False
        self._connections.add(connection)
        self.services.metrics.kafka_connections.inc()
        return True

    def forget(self, connection: KafkaConnection) -> None:
        if connection in self._connections:
            self._connections.discard(connection)
            self.services.metrics.kafka_connections.dec()

    def observe(self, api_key: int, seconds: float) -> None:
        """Count one answered request of ``api_key`` and its time."""
        observers = self._observers.get(api_key)
        if observers is None:
            metrics = self.services.metrics
            name = ApiKey(api_key).name
            observers = self._observers[api_key] = (
                metrics.kafka_requests.labels(name), metrics.kafka_request_seconds.labels(name))
        observers[0].inc()
        observers[1].observe(seconds)

    def connection_state(self, connection_id: str, host: str,
                         transport: asyncio.BaseTransport) -> ConnectionState:
        """A new connection's state (the module docstring's "Security"): the client
        certificate's principal, else anonymous, which must authenticate with SASL first
        when anonymous callers are refused and the server has a credential file."""
        settings = self.services.settings
        ssl_object = transport.get_extra_info("ssl_object")
        principal = (peer_certificate_principal(ssl_object)
                     if settings.tls_client_auth == "required" else None)
        if principal is not None:
            return ConnectionState(connection_id, host, CallIdentity(principal, host, "tls"),
                                   tls=True)
        # Anonymous callers refused: SASL first (without a credential file it cannot pass,
        # and the connection gets nothing, as a gRPC call without credentials would not).
        return ConnectionState(connection_id, host, CallIdentity(ANONYMOUS, host),
                               authenticated=settings.anonymous_allowed,
                               tls=ssl_object is not None)

    def log_refusal(self, connection_id: str, problem: str) -> None:
        """Log why a connection was closed, at most a few lines a second."""
        now = time.monotonic()
        if now - self._refusals_second >= 1.0:
            self._refusals_second, self._refusals_logged = now, 0
        if self._refusals_logged >= _REFUSALS_LOGGED_PER_S:
            self._refusals_unlogged += 1
            return
        self._refusals_logged += 1
        unlogged, self._refusals_unlogged = self._refusals_unlogged, 0
        logger.info("closing Kafka connection %s: %s%s", loggable(connection_id),
                    loggable(problem), f" ({unlogged} more not logged)" if unlogged else "")
