"""The interceptor that counts every call as the standard gRPC server metrics do.

Intuition: go-grpc-prometheus counts a call when it starts and when it ends (with its status
code), and times it, in a server interceptor; dashboards and alerts written for it read
``grpc_server_handled_total{grpc_code!="OK"}`` and ``grpc_server_handling_seconds``. This
interceptor does the same into :class:`~stratalog.server.metrics.GrpcServerCollector`.

Where it sits: first in the server's chain (server/app.py), so that a call refused by a later
interceptor (authentication, ACLs) is counted with the code it was refused with. A request on
a Session stream is counted as a unary call of its own RPC (``Produce``, ``FetchByOffset`` ...)
by the stream (server/rpc/session.py's ``SessionRequests``, into the same collector), its
stream once more as the ``Session`` bidi stream. A call to a method the server does not have
(no handler: gRPC answers UNIMPLEMENTED) is not counted, so the label sets stay bounded.

What a call's code is: OK when its behaviour returns (or the code it set), the code it aborted
with, CANCELLED when it was cancelled (the client went away), UNKNOWN for an exception that got
out of it (gRPC answers UNKNOWN then).

Concurrency: event-loop only (the handler cache is a plain dict; the collector locks itself).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import grpc
import grpc.aio

from stratalog.server.metrics import GRPC_CODE_NAMES, GrpcServerCollector

from .handlers import WrappingInterceptor, behaviour_of

__all__ = ["MetricsInterceptor"]

#: A handler's field (its kind) -> go-grpc-prometheus's ``grpc_type``.
_GRPC_TYPES = {
    "unary_unary": "unary",
    "unary_stream": "server_stream",
    "stream_unary": "client_stream",
    "stream_stream": "bidi_stream",
}
_OK = GRPC_CODE_NAMES[grpc.StatusCode.OK]
_CANCELLED = GRPC_CODE_NAMES[grpc.StatusCode.CANCELLED]
_UNKNOWN = GRPC_CODE_NAMES[grpc.StatusCode.UNKNOWN]


def _code_of(context: Any, default: str) -> str:
    """The code ``context`` holds (set or aborted with), ``default`` if none."""
    code = context.code()
    return GRPC_CODE_NAMES.get(code, default) if isinstance(code, grpc.StatusCode) else default


class MetricsInterceptor(WrappingInterceptor):
    """Counts each call of a known method into a :class:`GrpcServerCollector`: started when
    its behaviour starts, handled with its code and time when it ends.

    Holds the collector, the labels of each method path seen (bounded by the server's
    methods) and the handlers it wrapped (reused while the handler given is the same object).
    """

    def __init__(self, collector: GrpcServerCollector) -> None:
        self._collector = collector
        super().__init__()

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        kind, inner = behaviour_of(handler)
        # "/stratalog.v1.Broker/Produce" -> ("stratalog.v1.Broker", "Produce")
        service, _, name = method.lstrip("/").rpartition("/")
        labels = (_GRPC_TYPES[kind], service, name)
        collector = self._collector

        if inspect.isasyncgenfunction(inner):

            async def generator(request: Any, context: grpc.aio.ServicerContext) -> Any:
                collector.observe_started(labels)
                started = time.perf_counter()
                code = _UNKNOWN
                try:
                    async for response in inner(request, context):
                        yield response
                    code = _code_of(context, _OK)
                except grpc.aio.AbortError:
                    code = _code_of(context, _UNKNOWN)
                    raise
                except (asyncio.CancelledError, GeneratorExit):
                    code = _CANCELLED
                    raise
                finally:
                    collector.observe_handled(labels, code, time.perf_counter() - started)

            return handler._replace(**{kind: generator})

        async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
            collector.observe_started(labels)
            started = time.perf_counter()
            code = _UNKNOWN
            try:
                response = await inner(request, context)
                code = _code_of(context, _OK)
                return response
            except grpc.aio.AbortError:
                code = _code_of(context, _UNKNOWN)
                raise
            except asyncio.CancelledError:
                code = _CANCELLED
                raise
            finally:
                collector.observe_handled(labels, code, time.perf_counter() - started)

        return handler._replace(**{kind: behaviour})
