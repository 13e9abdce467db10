"""The Kafka APIs this server answers: each handler with its API key and version range.

A handler is ``async def handler(ctx: RequestContext, request) -> response | None`` (None: no
answer, as for an acks=0 Produce), registered with :func:`kafka_api`. ApiVersions advertises
exactly what is registered here (apis/api_versions.py); a request outside it closes the
connection (ApiVersions excepted), as Kafka's ``SocketServer`` does.

Concurrency: registration at import time only; lookups from the event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from stratalog.server.kafka.codec import REQUEST_CLASSES, RESPONSE_CLASSES

__all__ = ["HANDLERS", "SERVED_VERSIONS", "Handler", "KafkaApi", "kafka_api"]

Handler = Callable[[Any, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class KafkaApi:
    """One API's handler and the versions it answers."""

    api_key: int
    min_version: int
    max_version: int
    handler: Handler


#: API key -> its handler.
HANDLERS: dict[int, KafkaApi] = {}
#: API key -> (min, max) version served; what ApiVersions advertises.
SERVED_VERSIONS: dict[int, tuple[int, int]] = {}


def kafka_api(api_key: int, versions: tuple[int, int]) -> Callable[[Handler], Handler]:
    """Register the decorated handler for ``api_key``, versions ``versions`` (both ends in)."""
    low, high = versions
    request_class = REQUEST_CLASSES.get(api_key)
    assert request_class is not None and api_key in RESPONSE_CLASSES, api_key
    assert 0 <= low <= high <= request_class.max_version, (api_key, versions)

    def register(handler: Handler) -> Handler:
        assert api_key not in HANDLERS, f"API key {api_key} registered twice"
        HANDLERS[api_key] = KafkaApi(api_key, low, high, handler)
        SERVED_VERSIONS[api_key] = (low, high)
        return handler

    return register
