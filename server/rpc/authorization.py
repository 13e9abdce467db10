"""The gRPC front end's authorization: a server interceptor over the Authorizer's rules.

What each RPC needs (:data:`~stratalog.server.security.authorizer.RULES`) and how a decision is
made and cached is :mod:`stratalog.server.security.authorizer`'s; this module checks each call
against its rule before the handler runs, and filters the answer. A refusal is
PERMISSION_DENIED + NOT_AUTHORIZED (status.py).

Concurrency: event-loop only.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from stratalog.server.security.authentication import peer_host
from stratalog.server.security.authorizer import (
    OPEN,
    RULES,
    Authorizer,
    Decider,
    Rule,
    decide_request,
    rule_for,
)
from stratalog.server.security.errors import NotAuthorizedError
from stratalog.server.security.principal import ANONYMOUS, CallIdentity, current_identity
from stratalog.server.storage.errors import InvalidTopicError

from . import status
from .decoding import UndecodableRequest
from .handlers import WrappingInterceptor, behaviour_of

if TYPE_CHECKING:
    from stratalog.server.metrics import ServerMetrics

__all__ = ["AuthorizationInterceptor", "call_identity"]


@functools.lru_cache(maxsize=4096)
def _anonymous_identity(peer: str) -> CallIdentity:
    # Made once per connection (the peer string holds the client's port), not per call.
    return CallIdentity(ANONYMOUS, peer_host(peer))


def call_identity(context: grpc.aio.ServicerContext) -> CallIdentity:
    """The identity the authentication interceptor set for this call; without one (a call it
    let through untouched: health, open reflection; or no authentication interceptor, as in
    tests), ``User:ANONYMOUS`` from the peer's address."""
    identity = current_identity.get(None)
    if identity is None:
        identity = _anonymous_identity(context.peer() or "")
    return identity


class AuthorizationInterceptor(WrappingInterceptor):
    """The authorizer at the edge: checks each call against its :class:`Rule` before the
    handler runs, and filters the answer.

    Order (server/security/__init__.py): after the authentication interceptor, whose
    :data:`current_identity` it reads, and before the quota interceptor, so a refused call
    costs no quota. The handlers it wraps are made once per method and reused. Each refused
    call is counted in ``metrics`` by the operation refused
    (``stratalog_authorization_denials_total``).

    Concurrency: event-loop only.
    """

    def __init__(
        self, authorizer: Authorizer, rules: Mapping[str, Rule] = RULES, *,
        reflection_open: bool = False, metrics: ServerMetrics,
    ) -> None:
        self._authorizer = authorizer
        self._rules = rules
        self._reflection_open = reflection_open
        self._metrics = metrics
        super().__init__()

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        rule = rule_for(method, self._rules, reflection_open=self._reflection_open)
        if rule is OPEN:
            return handler
        return _wrap(handler, self._authorizer, rule, self._metrics)


def _wrap(
    handler: grpc.RpcMethodHandler, authorizer: Authorizer, rule: Rule, metrics: ServerMetrics
) -> Any:
    """``handler`` with ``rule`` checked before its behaviour and applied to its answer; a
    refusal counted in ``metrics``."""
    kind, inner = behaviour_of(handler)
    check, answer = rule.check, rule.answer
    request_streaming = kind.startswith("stream_")
    if rule.single is not None and not request_streaming and not inspect.isasyncgenfunction(
        inner
    ):
        return handler._replace(**{kind: _single_check(inner, authorizer, rule, metrics)})

    async def admit(request: Any, context: grpc.aio.ServicerContext) -> Decider:
        identity = call_identity(context)
        # A request that did not parse reaches the servicer, which refuses it: there is no
        # resource to decide on, and nothing is done for it.
        if check is None or (not request_streaming and type(request) is UndecodableRequest):
            return Decider(authorizer, identity)
        try:
            return decide_request(authorizer, identity, rule, request)
        except NotAuthorizedError as exc:
            metrics.observe_authorization_denial(exc.operation)
            await context.abort_with_status(status.to_status(exc))
        except InvalidTopicError as exc:  # a name refused before any decision on it
            await context.abort_with_status(status.to_status(exc))
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    if inspect.isasyncgenfunction(inner):

        async def generator(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await admit(request, context)
            async for response in inner(request, context):
                yield response

        return handler._replace(**{kind: generator})

    async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
        decider = await admit(request, context)
        response = await inner(request, context)
        if answer is not None and response is not None:
            answer(decider, response)
        return response

    return handler._replace(**{kind: behaviour})


def _single_check(inner: Any, authorizer: Authorizer, rule: Rule, metrics: ServerMetrics
                  ) -> Any:
    """The behaviour ``inner`` behind a rule of one operation on one resource: the hot path
    (Produce, the fetches), decided with one cache lookup on a cache hit."""
    assert rule.single is not None
    answer = rule.answer

    async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
        identity = current_identity.get(None) or _anonymous_identity(context.peer() or "")
        decider = None
        # A request that did not parse reaches the servicer, which refuses it.
        if type(request) is not UndecodableRequest:
            try:
                decider = decide_request(authorizer, identity, rule, request)
            except NotAuthorizedError as exc:
                metrics.observe_authorization_denial(exc.operation)
                await context.abort_with_status(status.to_status(exc))
            except InvalidTopicError as exc:  # a name refused before any decision on it
                await context.abort_with_status(status.to_status(exc))
        response = await inner(request, context)
        if answer is not None and response is not None:
            answer(decider or Decider(authorizer, identity), response)
        return response

    return behaviour
