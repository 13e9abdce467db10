"""One broker's connection of an async Client: a gRPC channel, its stub and its Session stream.

A :class:`~stratalog.client.Client` talks to a cluster through one of these per broker address,
opened when the first request goes there (a single server: exactly one, as before issue 17).
Each holds what a single-server Client held: the ``grpc.aio`` channel (HTTP/2, multiplexing
every concurrent call), the stub, and the ``Session`` stream that carries Produce, the fetches
and ListOffsets (:mod:`stratalog.client.session`), with the fallback to unary calls when
sessions are off or the server refused the stream.

Concurrency: event-loop only; shared by every caller of its Client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio

from stratalog.v1 import broker_pb2_grpc

from .credentials import TlsConfig
from .errors import BrokerUnavailableError, StratalogError, from_rpc_error
from .session import ClientSession, SessionRefusedError
from .tls_diagnosis import Diagnoser

__all__ = ["SESSION_REQUEST_OVERHEAD_BYTES", "SESSION_RETRY_AFTER_S", "BrokerConnection"]

logger = logging.getLogger("stratalog.client.client")

#: After the server refused a session for the client's limit of waiting RPCs, requests go as
#: unary calls for this long before a session is tried again.
SESSION_RETRY_AFTER_S = 5.0

#: A SessionRequest's bytes beyond its unary request: the id and the member's tag and length.
SESSION_REQUEST_OVERHEAD_BYTES = 32


class BrokerConnection:
    """The channel, stub and session to one address.

    Holds ``address``, the channel (lazy: nothing connects until the first call), the stub,
    the call metadata (credentials), the session (``None`` until the first request that uses
    one, replaced when it broke), whether sessions are on, and the largest request the server
    took on a session (learnt when a larger one broke a stream), and the
    :class:`~.tls_diagnosis.Diagnoser` that tells a TLS set-up the server refuses from other
    connection failures. Crash: holds nothing durable.
    """

    def __init__(
        self,
        address: str,
        channel: grpc.aio.Channel,
        metadata: Sequence[tuple[str, str]] | None,
        *,
        sessions: bool,
        tls: TlsConfig | None = None,
        tls_on: bool = False,
    ) -> None:
        self.address = address
        self._diagnoser = Diagnoser(address, tls, tls_on=tls_on)
        self.channel = channel
        self.stub = broker_pb2_grpc.BrokerStub(channel)
        self.metadata = metadata
        self._sessions = sessions
        self._session: ClientSession | None = None
        self._session_retry_at = 0.0
        self._request_bytes_max: int | None = None

    @property
    def sessions(self) -> bool:
        """Whether requests go on a Session stream now."""
        return self._sessions and time.monotonic() >= self._session_retry_at

    async def close(self, grace_s: float | None = None) -> None:
        """Close the session at once and the channel after ``grace_s``."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        await self.channel.close(grace_s)

    async def ensure_ready(self, timeout_s: float) -> None:
        """Return once the channel is connected; BrokerUnavailableError as soon as a
        connection attempt failed, or after ``timeout_s`` without an answer.

        For a cluster's requests only (the Client's routing), so that the client looks for
        the new leader instead of waiting on a dead one:

        * A dead process on a reachable host refuses the connection at once: the channel goes
          to TRANSIENT_FAILURE within a round trip, and this raises then. A channel already in
          TRANSIENT_FAILURE (its last attempt failed, gRPC waits out its reconnect backoff
          before the next) raises at once too: gRPC keeps reconnecting in the background, so
          a server that comes back is connected within the backoff's maximum
          (``RECONNECT_BACKOFF_MAX_MS``), and answers the next request after that.
        * A server gone in a way that does not refuse connections (a container killed with
          its address, a frozen host, a name no longer resolving) leaves the channel
          CONNECTING: the wait is bounded by ``timeout_s``, whatever holds it up (DNS, TCP,
          TLS).

        A connected channel costs one state check.
        """
        state = self.channel.get_state(try_to_connect=True)
        if state is grpc.ChannelConnectivity.READY:
            self._diagnoser.connected = True
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while state is not grpc.ChannelConnectivity.READY:
            if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                error = BrokerUnavailableError(
                    f"no connection to {self.address}: the connection attempt failed"
                    " (refused, reset or timed out)",
                    code=grpc.StatusCode.UNAVAILABLE,
                )
                raise await self.diagnosed(error, None)
            if state is grpc.ChannelConnectivity.SHUTDOWN:
                raise BrokerUnavailableError(
                    f"no connection to {self.address}: the client closed the channel",
                    code=grpc.StatusCode.UNAVAILABLE,
                )
            try:
                await asyncio.wait_for(self.channel.wait_for_state_change(state),
                                       deadline - loop.time())
            except TimeoutError:
                raise BrokerUnavailableError(
                    f"no connection to {self.address} within {timeout_s:.1f} s",
                    code=grpc.StatusCode.UNAVAILABLE,
                ) from None
            state = self.channel.get_state(try_to_connect=True)
        self._diagnoser.connected = True

    async def diagnosed(self, error: StratalogError, details: str | None) -> StratalogError:
        """``error`` or, when the client's TLS set-up is why the connection failed, the
        TlsHandshakeError that says so (``details``: gRPC's, None when there are none). A
        probe, when one is due, runs in a thread (at most PROBE_TIMEOUT_S)."""
        if self._diagnoser.may_block(error, details):
            return await asyncio.to_thread(self._diagnoser.diagnosed, error, details)
        return self._diagnoser.diagnosed(error, details, may_probe=False)

    async def error_of(self, err: grpc.aio.AioRpcError) -> StratalogError:
        """The StratalogError of a failed call on this connection (diagnosed)."""
        error = from_rpc_error(err)
        return await self.diagnosed(error, error.message)

    async def call(self, method: Any, request: Any, timeout: float | None) -> Any:
        """A unary call of the stub's ``method``; a failure as its StratalogError."""
        try:
            response = await method(request, timeout=timeout, metadata=self.metadata)
        except grpc.aio.AioRpcError as err:
            raise await self.error_of(err) from err
        self._diagnoser.connected = True
        return response

    async def request(
        self, rpc: tuple[int, Any], unary_name: str, request: Any, timeout: float | None
    ) -> Any:
        """``request`` on the session (opened if there is none), or as the stub's unary call
        ``unary_name`` when sessions are off, the server refused the stream, or the request is
        over the server's largest (learnt when one broke a stream: a unary call fails alone)."""
        if self._sessions and time.monotonic() >= self._session_retry_at:
            session = self._session
            if session is None or session.closed:
                if session is not None and session.request_bytes_max is not None:
                    self._request_bytes_max = session.request_bytes_max
                session = self._session = ClientSession(self.channel, self.metadata)
            body = request.SerializeToString()
            limit = self._request_bytes_max
            if limit is None or len(body) + SESSION_REQUEST_OVERHEAD_BYTES <= limit:
                field, response_class = rpc
                try:
                    _, answer = await session.request(field, body, timeout)
                except BrokerUnavailableError as err:
                    # The stream's error (it broke, or never opened): gRPC's details in it.
                    raise await self.diagnosed(err, err.message) from err
                except SessionRefusedError as refused:
                    if refused.permanent:
                        self._sessions = False
                        logger.info("%s has no Session RPC: unary calls from now on (%s)",
                                    self.address, refused.error)
                    else:
                        self._session_retry_at = time.monotonic() + SESSION_RETRY_AFTER_S
                        logger.info("%s refused a session, unary calls for %.0f s: %s",
                                    self.address, SESSION_RETRY_AFTER_S, refused.error)
                else:
                    self._diagnoser.connected = True
                    return response_class.FromString(answer)
        return await self.call(getattr(self.stub, unary_name), request, timeout)
