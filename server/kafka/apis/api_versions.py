"""ApiVersions (key 18, versions 0 to 3): the API keys and version ranges this server serves.

Exactly what apis/registry.py holds. A client that asks with a version this server does not
serve gets a version 0 answer with UNSUPPORTED_VERSION and the ranges (KIP-511: it then picks a
version both know); ApiVersions' response header is never flexible (connection.py writes it so).
"""

from __future__ import annotations

import struct

from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from stratalog.server.kafka.apis.registry import SERVED_VERSIONS, kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code

__all__ = ["api_versions", "unsupported_version_answer"]

_ApiVersion = ApiVersionsResponse.ApiVersion


def _ranges() -> list[_ApiVersion]:
    return [_ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in sorted(SERVED_VERSIONS.items())]


@kafka_api(ApiKey.ApiVersions, versions=(0, 3))
async def api_versions(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=Code.NONE, api_keys=_ranges(), throttle_time_ms=0,
        supported_features=[], finalized_features_epoch=-1, finalized_features=[],
        zk_migration_ready=False,
    )


def unsupported_version_answer(correlation_id: int) -> list[bytes]:
    """The whole frame answering an ApiVersions request of a version not served: header v0,
    body v0 with UNSUPPORTED_VERSION and the ranges (Kafka's ``ApiVersionsRequest
    .getErrorResponse``)."""
    body = ApiVersionsResponse(
        error_code=Code.UNSUPPORTED_VERSION, api_keys=_ranges()).encode(version=0)
    head = struct.pack(">i", correlation_id)
    return [struct.pack(">i", len(head) + len(body)) + head, body]
