"""This server's channels to its peers, secured as their listeners are: the client side of
Kafka's inter-broker listener.

Every server-to-server call (a follower's ReplicaFetchSession stream; the WhoAmI a server sends itself when
it joins, broker_identity.py) goes through one channel per peer address, made here from the
server's own settings, as Kafka's brokers reach each other with the inter-broker listener's
``security.protocol`` and keystore::

    TLS on (tls_cert_file)        the peer is reached over TLS; its certificate must chain to
                                  inter_broker_tls_ca_file, else tls_ca_file, else the system's
                                  roots, and name the host it advertised; this server presents
                                  its own tls_cert_file as its client certificate (the peer
                                  verifies it when tls_client_auth = required: mTLS)
    inter_broker_user             Basic user:password (inter_broker_password_file's first line)
    inter_broker_token_file       Bearer <token>
                                  both sent as the ``authorization`` metadata of every call,
                                  exactly as a client sends them (stratalog.client.credentials
                                  builds them: one encoding for clients and servers)

The files are read at start and on SIGHUP (:meth:`PeerChannels.reload`): a certificate that
was renewed on disk is presented from the next connection; the channels open at the reload
are closed once the calls on them ended (the longest a fetch may wait, plus slack), so that
no fetch is cut: a follower's fetch session moves to the new channel at its next request
(replica_fetcher.py), before the old one closes.

Limits: one channel per peer address, and only for live servers: when a channel to a new
address is made (a server restarted on another port, or moved), the channels to addresses no
live server registered any more are closed (gracefully, as at a reload), so the channels never
outnumber the cluster's servers plus those leaving. A fetch answer holds up to
replica_fetch_response_max_bytes of batches and always a first batch whole, up to the leader's
caps (FETCH_MAX_BYTES_MAX per partition, FETCH_RESPONSE_MAX_BYTES_MAX in all): gRPC's default
4 MiB receive limit would refuse a larger answer, so the channels allow it. A fetch session's
answers are received as bytes (fetch_session_wire.py reads them in place).

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from stratalog.client.credentials import (
    TlsConfig,
    channel_security,
    credentials_from,
)
from stratalog.server.security.errors import SecurityConfigError
from stratalog.v1 import broker_pb2, broker_pb2_grpc, replication_pb2

if TYPE_CHECKING:
    from stratalog.server.settings import Settings

__all__ = [
    "FETCH_MAX_BYTES_MAX",
    "FETCH_MAX_WAIT_MS_MAX",
    "FETCH_RESPONSE_MAX_BYTES_MAX",
    "RESPONSE_OVERHEAD_BYTES",
    "PeerChannels",
    "ReplicationPeer",
]

#: Bounds on what a follower may ask for in one fetch: the leader caps a request's max wait and
#: max bytes to them (server/rpc/replication_service.py), and these channels take answers that
#: large.
FETCH_MAX_WAIT_MS_MAX = 30_000
FETCH_MAX_BYTES_MAX = 64 * 1024 * 1024
FETCH_RESPONSE_MAX_BYTES_MAX = 64 * 1024 * 1024

#: Room for a fetch answer's fields besides its batches.
RESPONSE_OVERHEAD_BYTES = 64 * 1024
#: How long a channel replaced by a reload, or to a server that left, stays open for the calls
#: still on it: the longest a leader holds a fetch (FETCH_MAX_WAIT_MS_MAX)
#: and some slack.
RETIRE_GRACE_S = 35.0


_FETCH_SESSION_METHOD = "/stratalog.v1.Replication/ReplicaFetchSession"


def _as_is(data: bytes) -> bytes:
    return data


class _Security:
    """What one read of the files gives: channel credentials (None: plaintext), channel
    options, and the metadata of every call (None: no credentials). Immutable."""

    __slots__ = ("channel_credentials", "metadata", "options")

    def __init__(self, settings: Settings) -> None:
        tls = None
        try:
            if settings.tls_enabled:
                tls = TlsConfig.from_files(
                    settings.inter_broker_tls_ca_file or settings.tls_ca_file or None,
                    settings.tls_cert_file, settings.tls_key_file,
                )
            credentials = credentials_from(
                settings.inter_broker_user or None,
                settings.inter_broker_password_file or None,
                settings.inter_broker_token_file or None,
                plaintext_allowed=settings.authentication_plaintext_allowed,
            )
            channel_credentials, options, metadata = channel_security(
                "the cluster's servers", tls, credentials, None
            )
        except ValueError as exc:
            raise SecurityConfigError(f"inter-broker security: {exc}") from None
        self.channel_credentials = channel_credentials
        self.options: list[tuple[str, Any]] = [
            *options,
            ("grpc.max_receive_message_length",
             FETCH_RESPONSE_MAX_BYTES_MAX + RESPONSE_OVERHEAD_BYTES),
        ]
        self.metadata = metadata


class ReplicationPeer:
    """The Replication service of one peer, called with this server's credentials."""

    __slots__ = ("_channel", "_metadata")

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...] | None
                 ) -> None:
        self._channel = channel
        self._metadata = metadata

    @property
    def channel(self) -> grpc.aio.Channel:
        """The channel the calls go on (a reload or a move of the peer replaces it)."""
        return self._channel

    def fetch_session(self) -> grpc.aio.StreamStreamCall:
        """A new ReplicaFetchSession stream: requests written as messages, answers read as
        their serialized bytes (fetch_session_wire.decode_response reads them). Its calls raise
        grpc.aio.AioRpcError as a stub's do."""
        method = self._channel.stream_stream(
            _FETCH_SESSION_METHOD,
            request_serializer=replication_pb2.ReplicaFetchRequest.SerializeToString,
            response_deserializer=_as_is,
        )
        return method(metadata=self._metadata)


class PeerChannels:
    """The channels to the peers by address, and the security they are made with (module
    docstring). :meth:`open` reads the files; :meth:`close` once at the end."""

    def __init__(self, settings: Settings, security: _Security) -> None:
        self._settings = settings
        self._security = security
        self._channels: dict[str, grpc.aio.Channel] = {}
        #: Channels retired (a reload, a server gone), each closing once its calls ended.
        self._retiring: dict[grpc.aio.Channel, asyncio.Task[None]] = {}

    @classmethod
    def open(cls, settings: Settings) -> PeerChannels:
        """Read the TLS and secret files the settings name. Blocking (small files).

        Raises:
            SecurityConfigError: a file is missing, unreadable or not what it should be.
        """
        return cls(settings, _Security(settings))

    def _new_channel(self, address: str) -> grpc.aio.Channel:
        security = self._security
        if security.channel_credentials is None:
            return grpc.aio.insecure_channel(address, options=security.options)
        return grpc.aio.secure_channel(address, security.channel_credentials,
                                       options=security.options)

    def replication(self, address: str, live_addresses: Callable[[], Collection[str]]
                    ) -> ReplicationPeer:
        """The Replication service of the server at ``address`` (HOST:PORT). O(1) when a
        channel to it is open; a new one first retires the channels to addresses not in
        ``live_addresses()`` (the live servers')."""
        return ReplicationPeer(self.channel(address, live_addresses), self._security.metadata)

    def channel(self, address: str, live_addresses: Callable[[], Collection[str]]
                ) -> grpc.aio.Channel:
        """The channel to the server at ``address``, for any internal service's stub (the
        transaction coordinators' markers too); made as :meth:`replication` says. Its calls
        carry :attr:`call_metadata`."""
        channel = self._channels.get(address)
        if channel is None:
            live = live_addresses()
            self._retire([a for a in self._channels if a not in live])
            channel = self._channels[address] = self._new_channel(address)
        return channel

    @property
    def call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The credentials every call to a peer sends (None: none configured)."""
        return self._security.metadata

    async def who_am_i(self, address: str, timeout_s: float) -> str:
        """The principal the server at ``address`` authenticates this server as.

        Raises:
            grpc.aio.AioRpcError: the call failed (a handshake refused, wrong credentials).
        """
        # A channel of its own: this server never fetches from itself.
        async with self._new_channel(address) as channel:
            answer = await broker_pb2_grpc.BrokerStub(channel).WhoAmI(
                broker_pb2.WhoAmIRequest(), timeout=timeout_s, metadata=self._security.metadata)
        return str(answer.principal)

    async def reload(self, executor: Executor) -> None:
        """Read the files again (SIGHUP; in ``executor``): new calls use new channels made
        with them; the old channels close once their calls ended (at most
        :data:`RETIRE_GRACE_S`).

        Raises:
            SecurityConfigError: a file is bad; the channels in use stay as they are.
        """
        loop = asyncio.get_running_loop()
        self._security = await loop.run_in_executor(executor, _Security, self._settings)
        self._retire(list(self._channels))

    def _retire(self, addresses: list[str]) -> None:
        """Close the channels to ``addresses`` once the calls on them ended (at most
        :data:`RETIRE_GRACE_S`); new calls get new channels."""
        for address in addresses:
            channel = self._channels.pop(address)
            task = asyncio.get_running_loop().create_task(channel.close(grace=RETIRE_GRACE_S))
            self._retiring[channel] = task
            task.add_done_callback(lambda _, c=channel: self._retiring.pop(c, None))

    async def close(self) -> None:
        """Close every channel now, retiring ones included (their calls end CANCELLED)."""
        retiring, self._retiring = self._retiring, {}
        for task in retiring.values():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        channels, self._channels = [*self._channels.values(), *retiring], {}
        for channel in channels:
            await channel.close()
