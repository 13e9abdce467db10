"""Authentication: who is calling, decided once per call in a gRPC server interceptor.

A call proves who it is in one of three ways, tried in this order:

1. **Credentials in the call's metadata** (gRPC call credentials), checked against the
   credential file (credentials.py)::

       authorization: Basic base64(<user>:<password>)   -> User:<user>,  authenticated_by "password"
       authorization: Bearer <token id>.<secret>        -> the token's principal,          "token"

   Wrong credentials, an unknown scheme, or credentials sent to a server without a credential
   file are refused: UNAUTHENTICATED + AUTHENTICATION_FAILED, whatever the method.
2. **A client certificate** verified by the TLS handshake (``tls_client_auth = "required"``):
   ``User:<subject>``, authenticated_by "tls" (tls.py).
3. **Nothing**: ``User:ANONYMOUS``, authenticated_by "none", if anonymous access is allowed;
   refused otherwise. ``authentication_anonymous = "auto"`` allows it exactly when no
   authentication is configured (no credential file, no client certificates required).

Open methods: ``grpc.health.v1.Health`` is never checked (load balancers and orchestrators
probe it without credentials); server reflection is checked unless ``reflection_open``;
``WhoAmI`` answers a caller without credentials as ``User:ANONYMOUS`` even when anonymous
access is refused, so a client can see why it is refused (wrong credentials are refused there
too).

The outcome is published in :data:`~stratalog.server.security.principal.current_identity`
while the method's handler runs (see :func:`.handlers.wrap_handler`), where the authorizer, the quotas
and ``WhoAmI`` read it. Metadata is checked in :meth:`AuthenticationInterceptor.intercept_service`,
before the request is even deserialized: a refused call costs no parsing of its body. The
certificate and the client's address are known only to the handler's ``ServicerContext``, so
the rest happens in the wrapped handler, before the servicer's method.

Cost: a password check is one PBKDF2 of the entry's iteration count (100,000 by default: tens
of milliseconds), far too slow per call. Checks run on a thread pool of their own
(``authentication_threads``), never on the event loop nor the storage pool, and a good result
is cached under a keyed hash of the presented secret (HMAC-SHA-256 with a key drawn at start,
never written anywhere): the next call with the same credentials costs one HMAC (~2 µs) and a
dictionary lookup. The cache holds at most ``authentication_cache_entries_max`` entries (least
recently used dropped first) and is emptied when the credential file is reloaded, so a removed
user or a changed password takes effect on SIGHUP. Failures are not cached (a flood of wrong
passwords cannot evict good entries); concurrent checks of the same new credentials share one
PBKDF2. docs/performance.md has the figures.

Concurrency: event-loop only, except the checks, which run in the pool on an immutable
:class:`~stratalog.server.security.credentials.CredentialFile`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from contextvars import Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from stratalog.server import status
from stratalog.server.client_text import loggable

from .credentials import CredentialFile
from .errors import AuthenticationFailedError
from .handlers import HEALTH_PREFIX, REFLECTION_PREFIXES, wrap_handler
from .principal import ANONYMOUS, CallIdentity, Principal, current_identity
from .tls import certificate_principal

if TYPE_CHECKING:
    from stratalog.server.metrics import ServerMetrics

__all__ = [
    "ANONYMOUS_MODES",
    "AuthenticationInterceptor",
    "Authenticator",
    "peer_host",
]

logger = logging.getLogger(__name__)

#: Values of ``authentication_anonymous``.
ANONYMOUS_MODES = ("auto", "allowed", "refused")

_AUTHORIZATION = "authorization"
_WHO_AM_I = "/stratalog.v1.Broker/WhoAmI"

_MALFORMED = "malformed_credentials"
# One message for every wrong credential: it must not tell a client which user names exist.
_WRONG = "authentication failed: unknown user or token, or wrong password"


@dataclass(frozen=True, slots=True)
class _Verified:
    principal: Principal
    authenticated_by: str


def peer_host(peer: str | None) -> str:
    """The client's address from ``ServicerContext.peer()``: ``"ipv4:10.0.0.5:41234"`` ->
    ``"10.0.0.5"``, ``"ipv6:[::1]:41234"`` -> ``"::1"``; anything else as it is."""
    if not peer:
        return ""
    kind, _, address = peer.partition(":")
    if kind == "ipv4":
        return address.rpartition(":")[0]
    if kind == "ipv6":
        host = address.rpartition(":")[0]
        return host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return peer


def _parse_authorization(value: str) -> tuple[str, str, str]:
    """``(mechanism, name, secret)`` from an ``authorization`` value; ``name`` is the user
    for Basic, empty for Bearer.

    Raises:
        AuthenticationFailedError: not ``Basic`` nor ``Bearer``, or not well formed.
    """
    scheme, _, credential = value.strip().partition(" ")
    credential = credential.strip()
    scheme = scheme.lower()
    if scheme == "bearer" and credential:
        return "token", "", credential
    if scheme == "basic" and credential:
        try:
            decoded = base64.b64decode(credential, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise AuthenticationFailedError(
                "authentication failed: Basic credentials are not base64 of UTF-8 user:password",
                failure=_MALFORMED,
            ) from None
        user, sep, password = decoded.partition(":")
        if not sep or not user:
            raise AuthenticationFailedError(
                "authentication failed: Basic credentials are not user:password",
                failure=_MALFORMED,
            )
        return "password", user, password
    raise AuthenticationFailedError(
        "authentication failed: the authorization metadata must be 'Basic <base64 user:password>'"
        " or 'Bearer <token>'",
        failure=_MALFORMED,
    )


class Authenticator:
    """Checks presented credentials against the credential file, with the cache described in
    the module docstring.

    Holds the current :class:`CredentialFile` (None: no passwords or tokens accepted), the
    anonymous policy, the cache and the in-flight checks. Event-loop only (checks run in
    ``executor``).
    """

    def __init__(
        self,
        credentials: CredentialFile | None,
        *,
        anonymous_allowed: bool,
        executor: Executor,
        cache_entries_max: int,
    ) -> None:
        assert cache_entries_max >= 0
        self.anonymous_allowed = anonymous_allowed
        self._credentials = credentials
        self._executor = executor
        self._cache_entries_max = cache_entries_max
        self._cache: OrderedDict[bytes, _Verified] = OrderedDict()
        self._checking: dict[bytes, asyncio.Task[_Verified | None]] = {}
        # Drawn per process: a cache key says nothing about the secret outside this process.
        self._cache_key = secrets.token_bytes(32)
        self._generation = 0

    @property
    def cached_entries(self) -> int:
        return len(self._cache)

    def replace_credentials(self, credentials: CredentialFile | None) -> None:
        """Use ``credentials`` from now on (a SIGHUP reload); forget every cached check."""
        self._credentials = credentials
        self._cache.clear()
        self._checking.clear()
        self._generation += 1

    async def authenticate(self, metadata: Sequence[tuple[str, Any]] | None) -> _Verified | None:
        """The principal of the call's credentials; None if it carries none.

        Raises:
            AuthenticationFailedError: wrong, malformed or unexpected credentials.
        """
        value = None
        for key, item in metadata or ():
            if key == _AUTHORIZATION:
                if value is not None:
                    raise AuthenticationFailedError(
                        "authentication failed: more than one authorization metadata entry",
                        failure=_MALFORMED,
                    )
                value = item
        if value is None:
            return None
        if not isinstance(value, str):
            raise AuthenticationFailedError("authentication failed: authorization is not text",
                                            failure=_MALFORMED)
        mechanism, name, secret = _parse_authorization(value)
        credentials = self._credentials
        if credentials is None:
            raise AuthenticationFailedError(
                "authentication failed: this server accepts no passwords or tokens"
                " (it has no credential file); connect without credentials",
                failure="credentials_not_accepted",
            )
        # hmac.new, not the one-shot hmac.digest: that one releases the GIL on every call, and
        # with pool threads waiting for it the loop then waits up to gil_switch_interval_us
        # to get it back (~130 µs a call measured with three busy threads, against ~1 µs).
        key = hmac.new(self._cache_key, f"{mechanism}\0{name}\0{secret}".encode(),
                       hashlib.sha256).digest()
        verified = self._cache.get(key)
        if verified is not None:
            self._cache.move_to_end(key)
            return verified
        check = self._checking.get(key)
        if check is None:
            # A task of its own: a caller that goes away does not cancel the check that
            # other callers with the same credentials wait for.
            check = asyncio.get_running_loop().create_task(
                self._check(credentials, mechanism, name, secret)
            )
            self._checking[key] = check
            check.add_done_callback(
                lambda done, generation=self._generation: self._checked(key, generation, done)
            )
        verified = await asyncio.shield(check)
        if verified is None:
            raise AuthenticationFailedError(_WRONG, failure="wrong_credentials")
        return verified

    async def _check(
        self, credentials: CredentialFile, mechanism: str, name: str, secret: str
    ) -> _Verified | None:
        loop = asyncio.get_running_loop()
        if mechanism == "password":
            principal = await loop.run_in_executor(
                self._executor, credentials.verify_password, name, secret
            )
        else:
            principal = await loop.run_in_executor(
                self._executor, credentials.verify_token, secret
            )
        if principal is None:
            logger.info("authentication failed: %s %s", mechanism, loggable(name or "(token)"))
            return None
        return _Verified(principal, mechanism)

    def _checked(
        self, key: bytes, generation: int, check: asyncio.Task[_Verified | None]
    ) -> None:
        if self._checking.get(key) is check:
            del self._checking[key]
        if check.cancelled() or check.exception() is not None:
            return
        verified = check.result()
        # A check that began before a reload used the old file: not remembered.
        if verified is None or generation != self._generation or self._cache_entries_max == 0:
            return
        self._cache[key] = verified
        while len(self._cache) > self._cache_entries_max:
            self._cache.popitem(last=False)


# ------------------------------------------------------------------------ the interceptor


def _refusing(handler: grpc.RpcMethodHandler, exc: Exception) -> grpc.RpcMethodHandler:
    """A handler that answers ``exc``'s status without parsing the request."""

    async def enter(context: grpc.aio.ServicerContext) -> None:
        await context.abort_with_status(status.to_status(exc))

    # The body of a refused call is never parsed: deserialize nothing.
    return wrap_handler(handler, enter)._replace(request_deserializer=_ignore_request)


def _ignore_request(data: bytes) -> None:
    return None


class AuthenticationInterceptor(grpc.aio.ServerInterceptor):
    """The first server interceptor: establishes each call's identity or refuses the call.

    Order (server/security/__init__.py): this one first; interceptors after it (authorization,
    quotas) read :data:`current_identity` inside their wrapped handlers. Each refusal is
    counted in ``metrics`` by its failure (``stratalog_authentication_failures_total``).
    Event-loop only.
    """

    def __init__(
        self,
        authenticator: Authenticator,
        *,
        client_certificates: bool,
        reflection_open: bool,
        metrics: ServerMetrics,
    ) -> None:
        self._authenticator = authenticator
        self._client_certificates = client_certificates
        self._reflection_open = reflection_open
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(HEALTH_PREFIX):
            return handler
        if self._reflection_open and method.startswith(REFLECTION_PREFIXES):
            return handler
        try:
            verified = await self._authenticator.authenticate(
                handler_call_details.invocation_metadata
            )
        except AuthenticationFailedError as exc:
            self._metrics.observe_authentication_failure(exc.failure)
            return _refusing(handler, exc)
        anonymous_allowed = self._authenticator.anonymous_allowed or method == _WHO_AM_I
        client_certificates = self._client_certificates
        metrics = self._metrics

        async def enter(context: grpc.aio.ServicerContext) -> Token[CallIdentity]:
            host = peer_host(context.peer())
            if verified is not None:
                identity = CallIdentity(verified.principal, host, verified.authenticated_by)
            else:
                principal = (certificate_principal(context.auth_context())
                             if client_certificates else None)
                if principal is not None:
                    identity = CallIdentity(principal, host, "tls")
                elif anonymous_allowed:
                    identity = CallIdentity(ANONYMOUS, host, "none")
                else:
                    metrics.observe_authentication_failure("credentials_required")
                    await context.abort_with_status(status.to_status(AuthenticationFailedError(
                        "authentication required: send a user and password or a token"
                        " (authorization metadata), or a client certificate",
                        failure="credentials_required",
                    )))
                    raise AssertionError("abort_with_status returned")  # pragma: no cover
            return current_identity.set(identity)

        return wrap_handler(handler, enter)
