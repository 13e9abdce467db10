"""The etcd client of one endpoint, over TLS and with etcd's auth when configured.

etcd is the cluster's root of trust (docs/security.md, "etcd"): whoever can write its keys
changes topics, leaders and ACLs. So the connection can be secured as etcd itself offers:

- **TLS** (``--cluster etcds://...``): etcd's certificate is verified against ``etcd_ca_file``
  (the system's roots when empty) and its name against the endpoint's host, as gRPC does for
  any TLS channel. ``etcd_cert_file`` and ``etcd_key_file`` give the client certificate etcd's
  ``--client-cert-auth`` asks for.
- **Credentials** (``etcd_username``, ``etcd_password_file``): etcd's ``Authenticate`` call
  trades them for a token sent with every call. etcd's simple tokens live in etcd's memory
  (``--auth-token-ttl``, 300 s, renewed by each use; lost when etcd restarts): a call refused
  with ``invalid auth token`` makes the session connect again, which authenticates again
  (session.py).

aetcd 1.x opens plaintext channels only; :class:`_SecureClient` is its ``Client`` with the
channel opened by ``grpc.aio.secure_channel`` instead: the rest (stubs, calls, errors) is
aetcd's.

:func:`start_failure` turns what a first call raised into the error that names the cause: etcd
unreachable (:class:`~.errors.CoordinationUnavailableError`), a TLS failure
(:class:`~.errors.EtcdTlsError`), or credentials etcd refused
(:class:`~.errors.EtcdAuthenticationError`).

Concurrency: event-loop only. :meth:`EtcdSecurity.load` reads files: call it from an executor.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path

import aetcd
import grpc
from aetcd import exceptions as aetcd_exceptions
from aetcd import rpc, watcher

from .endpoints import Endpoint, uses_tls
from .errors import (
    ClusterConfigError,
    ClusterError,
    CoordinationUnavailableError,
    EtcdAuthenticationError,
    EtcdTlsError,
)

__all__ = ["EtcdSecurity", "is_token_expired", "new_client", "start_failure"]

#: Largest PEM or password file read (bytes): certificate chains are a few KiB.
_FILE_BYTES_MAX = 1024 * 1024

# What gRPC's message says when the TLS handshake failed, on either side.
_TLS_MARKERS = ("Tls handshake failed", "SSL_ERROR", "CERTIFICATE_VERIFY_FAILED",
                "TSI_PROTOCOL_FAILURE", "WRONG_VERSION_NUMBER", "ssl_transport_security",
                "security handshaker")
# etcd's messages (etcd's api/v3rpc/rpctypes/error.go).
_AUTH_FAILED = "authentication failed"
_USER_EMPTY = "user name is empty"
_PERMISSION_DENIED = "permission denied"
_INVALID_TOKEN = "invalid auth token"


@dataclass(frozen=True, slots=True)
class EtcdSecurity:
    """How to reach etcd: TLS (with the CA and the client certificate, PEM bytes) and the
    etcd user. Immutable; ``repr`` leaves the password and the key out."""

    tls: bool = False
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        return (f"EtcdSecurity(tls={self.tls}, ca={self.ca_pem is not None}, "
                f"client_cert={self.cert_pem is not None}, username={self.username!r})")

    @classmethod
    def load(cls, url: str, *, ca_file: str = "", cert_file: str = "", key_file: str = "",
             username: str = "", password_file: str = "") -> EtcdSecurity:
        """Read the files the settings name (blocking).

        Raises:
            ClusterConfigError: a file that cannot be read or is too large, a PEM file without
                a PEM block, or a password file that is not UTF-8 or whose first line is
                empty; the message names the setting and the path.
        """
        password = None
        if username:
            try:
                lines = _read(password_file, "etcd_password_file").decode().splitlines()
            except UnicodeDecodeError:
                raise ClusterConfigError(
                    f"etcd_password_file {password_file}: not UTF-8 text") from None
            password = lines[0] if lines else ""
            if not password:
                raise ClusterConfigError(
                    f"etcd_password_file {password_file}: the first line is empty")
        security = cls(
            tls=uses_tls(url),
            ca_pem=_read_pem(ca_file, "etcd_ca_file") if ca_file else None,
            cert_pem=_read_pem(cert_file, "etcd_cert_file") if cert_file else None,
            key_pem=_read_pem(key_file, "etcd_key_file") if key_file else None,
            username=username or None,
            password=password,
        )
        _check_tls_files(ca_file, cert_file, key_file)
        return security

    def channel_credentials(self) -> grpc.ChannelCredentials:
        assert self.tls
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_pem, private_key=self.key_pem,
            certificate_chain=self.cert_pem,
        )


def _check_tls_files(ca_file: str, cert_file: str, key_file: str) -> None:
    """Load the files as Python's ssl module does: gRPC only says "Failed to create security
    handshaker" at the first call for a key that does not match its certificate, or a file
    that does not parse."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca_file:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ClusterConfigError(
                f"etcd_ca_file {ca_file}: not PEM CA certificates ({exc})") from None
    if cert_file:
        try:
            context.load_cert_chain(cert_file, key_file)
        except (ssl.SSLError, OSError) as exc:
            raise ClusterConfigError(
                f"etcd_cert_file {cert_file} and etcd_key_file {key_file}: not a PEM"
                f" certificate chain and its private key ({exc})") from None


def _read(path: str, setting: str) -> bytes:
    try:
        with Path(path).open("rb") as file:
            data = file.read(_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise ClusterConfigError(f"{setting} {path}: cannot read it: {exc.strerror}") from None
    if len(data) > _FILE_BYTES_MAX:
        raise ClusterConfigError(f"{setting} {path}: larger than {_FILE_BYTES_MAX} bytes")
    return data


def _read_pem(path: str, setting: str) -> bytes:
    data = _read(path, setting)
    if b"-----BEGIN " not in data:
        raise ClusterConfigError(f"{setting} {path}: no PEM block (-----BEGIN ...) in it")
    return data


class _SecureClient(aetcd.Client):
    """aetcd's client with its channel opened over TLS (module docstring)."""

    def __init__(self, *args: object, credentials: grpc.ChannelCredentials,
                 **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._credentials = credentials

    async def connect(self) -> None:
        # aetcd's Client.connect, with secure_channel for insecure_channel.
        if self._connected.is_set():
            return
        if self._is_connecting:  # another task is connecting: wait for it, as aetcd does
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        self._is_connecting = True
        try:
            self.channel = rpc.secure_channel(f"{self._host}:{self._port}", self._credentials,
                                              options=self._options.items())
            if self._username is not None and self._password is not None:
                self.auth_stub = rpc.AuthStub(self.channel)
                reply = await self.auth_stub.Authenticate(
                    rpc.AuthenticateRequest(name=self._username, password=self._password),
                    timeout=self._timeout,
                )
                self.metadata = (("token", reply.token),)
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(rpc.WatchStub(self.channel),
                                            timeout=self._timeout, metadata=self.metadata)
            self._connected.set()
        except rpc.AioRpcError as exc:
            aetcd_exceptions._handle_exception(exc)  # aetcd's error classes, as its connect
        finally:
            self._is_connecting = False


def new_client(endpoint: Endpoint, security: EtcdSecurity, timeout_s: float) -> aetcd.Client:
    """An etcd client of ``endpoint``, not yet connected (its first call connects, and
    authenticates when credentials are set)."""
    kwargs = {
        "host": endpoint.host, "port": endpoint.port, "timeout": timeout_s,
        "username": security.username, "password": security.password,
    }
    if security.tls:
        return _SecureClient(credentials=security.channel_credentials(), **kwargs)
    return aetcd.Client(**kwargs)  # type: ignore[arg-type]


def is_token_expired(exc: BaseException) -> bool:
    """Whether etcd refused a call for its auth token (etcd restarted, or the token's TTL
    passed): connecting again authenticates again."""
    return isinstance(exc, aetcd_exceptions.UnauthenticatedError) and _INVALID_TOKEN in str(exc)


def start_failure(endpoint: Endpoint, security: EtcdSecurity, exc: BaseException,
                  prefix: str = "") -> ClusterError:
    """The error naming why the first calls to ``endpoint`` failed with ``exc``."""
    text = str(exc) or type(exc).__name__
    if any(marker in text for marker in _TLS_MARKERS):
        return EtcdTlsError(
            f"etcd {endpoint}: the TLS handshake failed ({text}); check that etcd's certificate"
            " chains to etcd_ca_file and names this host, and, when etcd checks client"
            " certificates (--client-cert-auth), that etcd_cert_file chains to etcd's"
            " --trusted-ca-file"
        )
    if security.tls and "Socket closed" in text:
        return EtcdTlsError(
            f"etcd {endpoint}: the connection closed during the TLS handshake ({text}); is"
            " this endpoint serving plaintext (use etcd://)?"
        )
    if not security.tls and "Socket closed" in text:
        return EtcdTlsError(
            f"etcd {endpoint}: the connection was closed at once ({text}); if etcd serves"
            " TLS on this port, write etcds:// and set etcd_ca_file"
        )
    if _AUTH_FAILED in text:
        return EtcdAuthenticationError(
            f"etcd {endpoint} refused etcd_username {security.username!r}: {text} (check"
            " the user and the password in etcd_password_file)"
        )
    if _USER_EMPTY in text or isinstance(exc, aetcd_exceptions.UnauthenticatedError):
        return EtcdAuthenticationError(
            f"etcd {endpoint} has authentication enabled and this server gave no credentials"
            f" ({text}): set etcd_username and etcd_password_file"
        )
    if _PERMISSION_DENIED in text:
        who = f"etcd user {security.username!r}" if security.username else "this server"
        return EtcdAuthenticationError(
            f"etcd {endpoint}: {who} may not read and write {prefix or 'the cluster prefix'}"
            f" ({text}); grant its role readwrite on the prefix (etcdctl role"
            f" grant-permission ROLE --prefix=true readwrite {prefix}/)"
        )
    return CoordinationUnavailableError(f"etcd {endpoint} did not answer: {text}")
