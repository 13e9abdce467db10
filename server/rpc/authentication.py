"""The gRPC front end's authentication: a server interceptor over the Authenticator.

Who a call is, and how credentials are checked, cached and throttled, is
:mod:`stratalog.server.security.authentication`'s; this module is its gRPC adapter. Metadata
is looked up in :meth:`AuthenticationInterceptor.intercept_service`, before the request is
even deserialized: a refused call costs no parsing of its body. The certificate and the
client's address are known only to the handler's ``ServicerContext``, so the rest happens in
the wrapped handler, before the servicer's method, which publishes the identity in
:data:`~stratalog.server.security.principal.current_identity` while the method runs.

Concurrency: event-loop only.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from contextvars import Token
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from stratalog.server.security.authentication import (
    WHO_AM_I,
    Authenticator,
    PendingCheck,
    VerifiedCredential,
    peer_host,
)
from stratalog.server.security.authorizer import HEALTH_PREFIX, REFLECTION_PREFIXES
from stratalog.server.security.errors import (
    AuthenticationFailedError,
    AuthenticationThrottledError,
)
from stratalog.server.security.principal import ANONYMOUS, CallIdentity, current_identity
from stratalog.server.security.tls import certificate_principal

from . import status
from .handlers import behaviour_of, wrap_handler

if TYPE_CHECKING:
    from stratalog.server.metrics import ServerMetrics

__all__ = ["AuthenticationInterceptor", "stale_credentials"]


def _refusing(handler: grpc.RpcMethodHandler, exc: Exception) -> grpc.RpcMethodHandler:
    """A handler that answers ``exc``'s status without parsing the request."""

    async def enter(context: grpc.aio.ServicerContext) -> None:
        await context.abort_with_status(status.to_status(exc))

    # The body of a refused call is never parsed: deserialize nothing.
    return wrap_handler(handler, enter)._replace(request_deserializer=_ignore_request)


def _ignore_request(data: bytes) -> None:
    return None


def _parsed_after(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` taking its request as gRPC's bytes and parsing it itself, when its
    behaviour runs (after the wrapper's ``enter``): a call refused before costs no parsing.
    Handlers of streamed requests parse each message as it is read: unchanged."""
    kind, inner = behaviour_of(handler)
    deserialize = handler.request_deserializer
    if kind.startswith("stream_") or deserialize is None:
        return handler
    if inspect.isasyncgenfunction(inner):

        async def generator(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            async for response in inner(deserialize(raw), context):
                yield response

        return handler._replace(**{kind: generator}, request_deserializer=None)

    async def behaviour(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        return await inner(deserialize(raw), context)

    return handler._replace(**{kind: behaviour}, request_deserializer=None)


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
        authenticator = self._authenticator
        try:
            found = authenticator.lookup(handler_call_details.invocation_metadata)
        except AuthenticationFailedError as exc:
            self._metrics.observe_authentication_failure(exc.failure)
            return _refusing(handler, exc)
        verified = found if isinstance(found, VerifiedCredential) else None
        pending = found if isinstance(found, PendingCheck) else None
        anonymous_allowed = authenticator.anonymous_allowed or method == WHO_AM_I
        client_certificates = self._client_certificates
        metrics = self._metrics

        async def enter(context: grpc.aio.ServicerContext) -> Token[CallIdentity]:
            host = peer_host(context.peer())
            checked = verified
            if pending is not None:
                # Checked here, where the client's host is known (module docstring).
                try:
                    checked = await authenticator.verify(pending, host)
                except AuthenticationFailedError as exc:
                    metrics.observe_authentication_failure(exc.failure)
                    await context.abort_with_status(status.to_status(exc))
                except AuthenticationThrottledError as exc:
                    await context.abort_with_status(status.to_status(exc))
            if checked is not None:
                identity = CallIdentity(checked.principal, host, checked.authenticated_by,
                                        checked.credential)
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

        if pending is not None:
            # The body is parsed only once the credentials passed.
            return wrap_handler(_parsed_after(handler), enter)
        return wrap_handler(handler, enter)


def stale_credentials() -> AuthenticationFailedError:
    """The refusal of a request on a Session stream whose credentials a reload (SIGHUP)
    removed or replaced: checked for each request (server/rpc/session.py), as a unary call is
    checked anew after a reload (the cache is emptied); a stream was authenticated once, when
    it opened, as Kafka checks a connection once (Kafka re-authenticates connections only
    with ``connections.max.reauth.ms``, KIP-368; here the reload is what triggers it)."""
    return AuthenticationFailedError(
        "authentication failed: the credentials this session was opened with are"
        " no longer valid (the user or token was removed, or the password"
        " changed); open a new session with valid credentials",
        failure="wrong_credentials",
    )
