"""gRPC method handlers as the front end's interceptors wrap them: their kind, the identity's
context variable around them, and a cache of the wrapped ones.

A grpc.aio interceptor cannot run code inside the call's task before the servicer's method
except by returning a handler of its own: the same ``grpc.RpcMethodHandler`` with its behaviour
(``unary_unary``, ``unary_stream``, ``stream_unary`` or ``stream_stream``: the one not None) in
a wrapper. The interceptors (authentication.py, authorization.py, quotas.py,
metrics_interceptor.py) all do that; this module holds what they share.

Concurrency: event-loop only (the cache is a plain dict).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable
from contextvars import Token
from typing import Any

import grpc
import grpc.aio

from stratalog.server.security.principal import CallIdentity, current_identity

__all__ = [
    "Enter",
    "WrappedHandlers",
    "WrappingInterceptor",
    "behaviour_of",
    "wrap_handler",
]

_KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")

Enter = Callable[[grpc.aio.ServicerContext], Awaitable[Token[CallIdentity] | None]]


def behaviour_of(handler: grpc.RpcMethodHandler) -> tuple[str, Any]:
    """``(kind, behaviour)``: which of gRPC's four kinds ``handler`` is (its field name, as
    ``handler._replace(**{kind: ...})`` takes it) and the behaviour in that field."""
    kind = next(name for name in _KINDS if getattr(handler, name) is not None)
    return kind, getattr(handler, kind)


def _reset(token: Token[CallIdentity] | None) -> None:
    if token is not None:
        # A stream's generator closed from another context cannot reset; its task is ending.
        with contextlib.suppress(ValueError):
            current_identity.reset(token)


def wrap_handler(handler: grpc.RpcMethodHandler, enter: Enter) -> grpc.RpcMethodHandler:
    """``handler`` with ``await enter(context)`` run before its behaviour, in the call's own
    task, and the context variable token it returns reset after.

    For any of gRPC's four handler kinds, coroutine or async-generator behaviours alike. An
    interceptor that needs the call's identity (the authorizer, the quotas) wraps the handler
    the same way: it runs inside this one's ``enter``, so :data:`current_identity` is set.
    """
    kind, inner = behaviour_of(handler)
    if inspect.isasyncgenfunction(inner):

        async def generator(request: Any, context: grpc.aio.ServicerContext) -> Any:
            token = await enter(context)
            try:
                async for response in inner(request, context):
                    yield response
            finally:
                _reset(token)

        return handler._replace(**{kind: generator})

    async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
        token = await enter(context)
        try:
            return await inner(request, context)
        finally:
            _reset(token)

    return handler._replace(**{kind: behaviour})


class WrappedHandlers:
    """The handlers an interceptor wrapped, one per method, made once and reused: gRPC gives
    an interceptor the same handler object for every call of a method, so the wrapper made for
    the first call serves the next ones (a handler that changed is wrapped again).

    Holds method path -> (the handler given, its wrapper). Bounded by the server's methods.
    """

    __slots__ = ("_wrapped",)

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def get(
        self,
        method: str,
        handler: grpc.RpcMethodHandler,
        wrap: Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler],
    ) -> grpc.RpcMethodHandler:
        """The wrapper of ``handler`` for ``method``: ``wrap(method, handler)`` the first
        time, then the same one. O(1)."""
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped


class WrappingInterceptor(grpc.aio.ServerInterceptor):
    """A server interceptor that wraps each method's handler, once per handler object
    (:class:`WrappedHandlers`): subclasses say how in :meth:`_wrap`. Methods the server does
    not have (no handler) pass through untouched. Event-loop only."""

    def __init__(self) -> None:
        self._wrapped = WrappedHandlers()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        return self._wrapped.get(handler_call_details.method, handler, self._wrap)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        raise NotImplementedError(f"{type(self).__name__} must say how it wraps a handler")
