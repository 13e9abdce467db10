"""The gRPC front end's quotas: a server interceptor over the QuotaManager.

The byte-rate quotas, their windows and the Produce backlog are
:mod:`stratalog.server.security.quotas`'s; this module applies them to the RPCs that move
records: Produce (request bytes, held back before it is served), FetchByOffset and
FetchByTimestamp (answer bytes) and Subscribe (each message's bytes: answers delayed), and sets
``throttle_time_ms`` in the answers.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from stratalog.server.security.authentication import peer_host
from stratalog.server.security.errors import QuotaBacklogExceededError
from stratalog.server.security.principal import (
    ANONYMOUS,
    CallIdentity,
    Principal,
    current_identity,
)
from stratalog.server.security.quotas import ProduceAdmission, QuotaManager
from stratalog.v1 import broker_pb2

from . import status
from .decoding import UndecodableRequest
from .handlers import WrappedHandlers

if TYPE_CHECKING:
    from stratalog.server.metrics import ServerMetrics

__all__ = ["QuotaInterceptor", "RequestQuotas", "backlog_client", "principal_name"]

# The metrics' names of the two quotas (their "quota" label).
_PRODUCE_QUOTA = "produce"
_FETCH_QUOTA = "fetch"
_SERVICE = broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name
_ANONYMOUS = str(ANONYMOUS)


@functools.lru_cache(maxsize=4096)
def _name(principal: Principal) -> str:
    return str(principal)


def _produce_bytes(request: Any) -> int:
    batches = request.record_batches
    if batches:
        return len(batches)
    return sum(record.ByteSize() for record in request.records)


def _fetch_bytes(response: broker_pb2.FetchResponse) -> int:
    batches = response.record_batches
    return len(batches) if batches else response.ByteSize()


class RequestQuotas:
    """The quotas of one request, as the interceptor applies them to a call and the Session
    stream to each of its requests: ``serve`` is what answers the request.

    * Produce: while its principal is over its produce quota, the request waits in the
      principal's queue (``admission``) before it is served; its bytes count once admitted,
      whether the servicer then accepts them or not; its answer carries the throttle time its
      principal's next request waits;
    * fetches: ``max_bytes`` is capped by the principal's quota, and the answer is held back
      by the throttle time its bytes earn (and says so).

    Each delayed answer is counted in ``metrics``. Event-loop only.
    """

    def __init__(self, manager: QuotaManager, admission: ProduceAdmission,
                 fetch_max_bytes_default: int, metrics: ServerMetrics) -> None:
        self.manager = manager
        self._admission = admission
        self._fetch_max_bytes_default = fetch_max_bytes_default
        self._metrics = metrics

    async def produce(self, principal: str, client: str, request: Any,
                      serve: Callable[[], Awaitable[Any]]) -> Any:
        """Produce ``request`` of ``principal`` (whose Produce backlog ``client`` counts in)
        through ``serve`` within the produce quota.

        Raises:
            QuotaBacklogExceededError: the client's backlog is full; nothing was served.
        """
        if type(request) is UndecodableRequest or not self.manager.produce_quota(principal):
            return await serve()
        admission = self._admission
        size_bytes = _produce_bytes(request)
        # Waits here, before the servicer, while the principal is over its quota; its bytes
        # count once admitted, whether the servicer then accepts them or not.
        throttle_ms = await admission.admit(principal, client, size_bytes)
        try:
            response = await serve()
        finally:
            admission.release(client, size_bytes)
        if throttle_ms:
            response.throttle_time_ms = throttle_ms
            self._metrics.observe_throttle(_PRODUCE_QUOTA, throttle_ms)
        return response

    async def fetch(self, principal: str, request: Any,
                    serve: Callable[[], Awaitable[Any]]) -> Any:
        """Fetch ``request`` of ``principal`` through ``serve`` within the fetch quota."""
        if type(request) is UndecodableRequest:
            return await serve()
        manager = self.manager
        limit_bytes = manager.fetch_bytes_max(principal)
        if (limit_bytes is not None
                and (request.max_bytes or self._fetch_max_bytes_default) > limit_bytes):
            request.max_bytes = limit_bytes
        response = await serve()
        throttle_ms = manager.record_fetch(principal, _fetch_bytes(response))
        if throttle_ms:
            response.throttle_time_ms = throttle_ms
            await _hold_back(self._metrics, _FETCH_QUOTA, throttle_ms)
        return response


def principal_name(identity: CallIdentity | None) -> str:
    """Whose quota a request counts in: its principal's name (anonymous without an identity)."""
    return _ANONYMOUS if identity is None else _name(identity.principal)


def backlog_client(principal: str, identity: CallIdentity | None, peer: str | None) -> str:
    """Whose Produce backlog a request counts in: its principal (``"User:alice"``), or its
    host (``"host:10.0.0.5"``) for an anonymous one, as server/client_limits.py names
    clients."""
    if principal != _ANONYMOUS:
        return principal
    host = identity.host if identity is not None and identity.host else peer_host(peer)
    return f"host:{host}"


class QuotaInterceptor(grpc.aio.ServerInterceptor):
    """Applies :class:`RequestQuotas` to Produce, FetchByOffset and FetchByTimestamp, and to
    each message of Subscribe (answers delayed), setting ``throttle_time_ms``. Other methods
    pass untouched, and all do while no quota is set.

    Order: the last interceptor, after authorization (a refused call costs no quota). The
    handlers it wraps are made once per method and reused. Each delayed answer is counted in
    ``metrics``, with its delay (``stratalog_quota_throttles_total``,
    ``stratalog_quota_throttle_seconds_total``, by quota: produce or fetch; for Produce, the
    throttle time its answer carries, which its principal's next request waits). Event-loop
    only.
    """

    def __init__(self, quotas: RequestQuotas, metrics: ServerMetrics) -> None:
        self._quotas = quotas
        self._manager = quotas.manager
        self._metrics = metrics
        self._wrapped = WrappedHandlers()
        self._wrappers = {
            f"/{_SERVICE}/Produce": self._produce,
            f"/{_SERVICE}/FetchByOffset": self._fetch,
            f"/{_SERVICE}/FetchByTimestamp": self._fetch,
            f"/{_SERVICE}/Subscribe": self._subscribe,
        }

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or not self._manager.enabled:
            return handler
        method = handler_call_details.method
        if method not in self._wrappers:
            return handler
        return self._wrapped.get(method, handler, self._wrap)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        return self._wrappers[method](handler)

    def _produce(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        inner = handler.unary_unary
        quotas = self._quotas

        async def produce(request: Any, context: grpc.aio.ServicerContext) -> Any:
            identity = current_identity.get(None)
            principal = principal_name(identity)
            try:
                return await quotas.produce(
                    principal, backlog_client(principal, identity, context.peer()), request,
                    functools.partial(inner, request, context),
                )
            except QuotaBacklogExceededError as exc:
                await context.abort_with_status(status.to_status(exc))

        return handler._replace(unary_unary=produce)

    def _fetch(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        inner = handler.unary_unary
        quotas = self._quotas

        async def fetch(request: Any, context: grpc.aio.ServicerContext) -> Any:
            principal = principal_name(current_identity.get(None))
            return await quotas.fetch(principal, request,
                                      functools.partial(inner, request, context))

        return handler._replace(unary_unary=fetch)

    def _subscribe(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        inner = handler.unary_stream
        manager = self._manager
        metrics = self._metrics

        async def subscribe(request: Any, context: grpc.aio.ServicerContext) -> Any:
            principal = principal_name(current_identity.get(None))
            return await inner(request, _ThrottledStream(context, manager, metrics, principal))

        return handler._replace(unary_stream=subscribe)


async def _hold_back(metrics: ServerMetrics, quota: str, throttle_ms: int) -> None:
    """Hold an answer of ``quota`` ("produce" or "fetch") back ``throttle_ms``, counted in
    ``metrics``: the call's task sleeps, holding no lock and not the event loop."""
    metrics.observe_throttle(quota, throttle_ms)
    await asyncio.sleep(throttle_ms / 1000)


# FetchResponse.throttle_time_ms as protobuf wire bytes: its tag (field number, varint type).
# Appended to a serialized message it sets the field: the last value of a scalar field wins,
# and the servicer never sets this one itself.
_THROTTLE_TAG = bytes([broker_pb2.FetchResponse.DESCRIPTOR.fields_by_name[
    "throttle_time_ms"].number << 3])
assert len(_THROTTLE_TAG) == 1 and _THROTTLE_TAG[0] < 0x80


def _with_throttle_time(serialized: bytes, throttle_ms: int) -> bytes:
    """``serialized`` (a FetchResponse) with ``throttle_time_ms`` set to ``throttle_ms``."""
    assert throttle_ms > 0
    varint = bytearray()
    while throttle_ms >= 0x80:
        varint.append((throttle_ms & 0x7F) | 0x80)
        throttle_ms >>= 7
    varint.append(throttle_ms)
    return serialized + _THROTTLE_TAG + varint


class _ThrottledStream:
    """A Subscribe call's context whose ``write`` holds each message back by the throttle time
    it earns (and says so in it); everything else is the call's own context. Messages come
    as FetchResponse objects or, as the servicer sends them, already serialized (``bytes``:
    counted by their length, the throttle time appended as its field)."""

    __slots__ = ("_context", "_manager", "_metrics", "_principal")

    def __init__(
        self, context: grpc.aio.ServicerContext, manager: QuotaManager, metrics: ServerMetrics,
        principal: str,
    ) -> None:
        self._context = context
        self._manager = manager
        self._metrics = metrics
        self._principal = principal

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def write(self, message: broker_pb2.FetchResponse | bytes) -> None:
        serialized = isinstance(message, bytes)
        size = len(message) if serialized else _fetch_bytes(message)  # type: ignore[arg-type]
        throttle_ms = self._manager.record_fetch(self._principal, size)
        if throttle_ms:
            if serialized:
                message = _with_throttle_time(message, throttle_ms)  # type: ignore[arg-type]
            else:
                message.throttle_time_ms = throttle_ms  # type: ignore[union-attr]
            await _hold_back(self._metrics, _FETCH_QUOTA, throttle_ms)
        await self._context.write(message)
