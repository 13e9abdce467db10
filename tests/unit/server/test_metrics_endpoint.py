"""The /metrics endpoint on the event loop: what it answers, and every bound it keeps.

Each test starts an endpoint on 127.0.0.1:0 in the test's own event loop and talks to it over
real sockets (blocking clients in a thread, so that the loop serves meanwhile). Waits are on
conditions (the endpoint's connection count, a socket the server closed), never sleeps.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import re
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stratalog.server.metrics import ServerMetrics
from stratalog.server.metrics_endpoint import MetricsEndpoint, MetricsEndpointLimits
from stratalog.server.security.authentication import Authenticator
from stratalog.server.security.credentials import CredentialFile

TIMEOUT_S = 10.0


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.02)


async def _blocking(function: Callable[..., object], *args: object) -> object:
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


def _get(url: str, headers: dict[str, str] | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection, read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (blocks up to the socket's timeout)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
async def endpoint_factory() -> AsyncIterator[Callable[..., object]]:
    started: list[MetricsEndpoint] = []

    async def start(limits: MetricsEndpointLimits | None = None, **kwargs: object
                    ) -> tuple[MetricsEndpoint, ServerMetrics, int]:
        authenticator = kwargs.pop("authenticator", None)
        metrics = ServerMetrics()
        endpoint = MetricsEndpoint(metrics, limits, authenticator)  # type: ignore[arg-type]
        port = await endpoint.start("127.0.0.1", 0, **kwargs)  # type: ignore[arg-type]
        started.append(endpoint)
        return endpoint, metrics, port

    yield start
    for endpoint in started:
        await endpoint.close()


async def test_serves_the_exposition_on_metrics_and_root(endpoint_factory) -> None:
    endpoint, metrics, port = await endpoint_factory()
    metrics.observe_produce("orders", 7, 700)
    status, headers, body = await _blocking(_get, f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    assert 'stratalog_records_in_total{topic="orders"} 7.0' in text
    assert "process_resident_memory_bytes" in text
    assert "stratalog_metrics_connections 1.0" in text  # this scrape's own connection
    status, _, body = await _blocking(_get, f"http://127.0.0.1:{port}/")
    assert status == 200 and b"stratalog_records_in_total" in body
    status, _, _ = await _blocking(_get, f"http://127.0.0.1:{port}/other")
    assert status == 404
    # As prometheus-client's own server: gzip when accepted, OpenMetrics when asked for,
    # name[] restricts the answer.
    status, headers, body = await _blocking(
        _get, f"http://127.0.0.1:{port}/metrics?name[]=stratalog_build_info",
        {"Accept-Encoding": "gzip", "Accept": "application/openmetrics-text; version=1.0.0"})
    assert headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    text = gzip.decompress(body).decode()
    assert "stratalog_build_info{" in text
    assert "process_resident_memory_bytes" not in text and text.endswith("# EOF\n")
    await endpoint.close()
    await endpoint.close()  # idempotent


async def test_keep_alive_serves_several_requests_on_one_connection(endpoint_factory) -> None:
    _, _, port = await endpoint_factory()
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    head_only = b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = await _blocking(_exchange, port, request + request + head_only)
    assert answer.count(b"HTTP/1.1 200 OK") == 3
    assert answer.count(b"# TYPE stratalog_build_info gauge") == 2  # HEAD: no body
    assert b"Connection: close" in answer


async def test_a_large_answer_is_sent_whole_before_the_connection_closes(
    endpoint_factory,
) -> None:
    _, metrics, port = await endpoint_factory()
    for topic in range(20_000):  # some 2 MB of exposition
        metrics.observe_produce(f"topic-{topic:05d}", 1, 1)
    answer = await _blocking(
        _exchange, port, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    assert length > 2_000_000 and len(body) == length
    assert b'stratalog_records_in_total{topic="topic-19999"} 1.0' in body


async def test_bad_requests_are_answered_and_closed(endpoint_factory) -> None:
    _, metrics, port = await endpoint_factory(MetricsEndpointLimits(request_bytes_max=1024))
    answer = await _blocking(
        _exchange, port, b"POST /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 405 ")
    answer = await _blocking(
        _exchange, port, b"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
    assert answer.startswith(b"HTTP/1.1 400 ") and b"no request body" in answer
    answer = await _blocking(_exchange, port, b"hello there\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    # A head larger than the limit is refused before it is all read.
    answer = await _blocking(
        _exchange, port, b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 4000 + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431 ") and b"metrics_request_bytes_max" in answer
    text = metrics.render().decode()
    assert 'stratalog_metrics_connections_refused_total{reason="request_too_large"} 1.0' in text
    assert 'stratalog_metrics_connections_refused_total{reason="bad_request"} 2.0' in text


async def test_the_cap_closes_extra_connections_and_frees_with_them(endpoint_factory) -> None:
    cap = 4
    endpoint, metrics, port = await endpoint_factory(MetricsEndpointLimits(connections_max=cap))
    held = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
            for _ in range(cap)]
    try:
        await _until(lambda: endpoint.connections == cap, "the cap's connections accepted")
        extra = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        with extra:
            assert await _blocking(_closed_by_server, extra)
        assert endpoint.connections == cap
        text = metrics.render().decode()
        assert 'stratalog_metrics_connections_refused_total{reason="connections_max"} 1.0' in text
    finally:
        for sock in held:
            sock.close()
    await _until(lambda: endpoint.connections == 0, "the closed connections forgotten")
    status, _, _ = await _blocking(_get, f"http://127.0.0.1:{port}/metrics")
    assert status == 200


async def test_idle_and_slow_connections_are_closed_after_their_timeouts(
    endpoint_factory,
) -> None:
    endpoint, metrics, port = await endpoint_factory(MetricsEndpointLimits(
        connections_max_idle_ms=300, request_timeout_ms=300))
    idle = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    slow = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    with idle, slow:
        slow.sendall(b"GET /metr")  # a request begun and never finished (slowloris)
        assert await _blocking(_closed_by_server, idle)
        assert await _blocking(_closed_by_server, slow)
    await _until(lambda: endpoint.connections == 0, "both connections forgotten")
    text = metrics.render().decode()
    assert 'stratalog_metrics_connections_refused_total{reason="idle"} 1.0' in text
    assert 'stratalog_metrics_connections_refused_total{reason="request_timeout"} 1.0' in text


async def test_authentication_required_refuses_without_credentials(
    endpoint_factory, tmp_path: Path
) -> None:
    credentials = CredentialFile().with_user("prometheus", "scrape-secret", 4096)
    with ThreadPoolExecutor(1) as pool:
        authenticator = Authenticator(credentials, anonymous_allowed=False, executor=pool,
                                      cache_entries_max=10)
        _, metrics, port = await endpoint_factory(
            MetricsEndpointLimits(authentication_required=True), authenticator=authenticator)
        url = f"http://127.0.0.1:{port}/metrics"
        status, headers, body = await _blocking(_get, url)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert b"stratalog_" not in body
        wrong = base64.b64encode(b"prometheus:guess").decode()
        status, _, body = await _blocking(_get, url, {"Authorization": f"Basic {wrong}"})
        assert status == 401 and b"stratalog_" not in body
        right = base64.b64encode(b"prometheus:scrape-secret").decode()
        status, _, body = await _blocking(_get, url, {"Authorization": f"Basic {right}"})
        assert status == 200 and b"stratalog_build_info" in body
        text = metrics.render().decode()
        assert 'stratalog_metrics_connections_refused_total{reason="unauthenticated"} 2.0' in text


async def test_tls_with_the_context_of_the_moment_and_client_certificates(
    endpoint_factory, pki
) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*map(str, pki.server))
    context.load_verify_locations(str(pki.ca))
    context.verify_mode = ssl.CERT_REQUIRED
    with ThreadPoolExecutor(1) as pool:
        authenticator = Authenticator(None, anonymous_allowed=False, executor=pool,
                                      cache_entries_max=10)
        _, _, port = await endpoint_factory(
            MetricsEndpointLimits(authentication_required=True, request_timeout_ms=2000),
            authenticator=authenticator, ssl_context_source=lambda: context,
            client_certificates=True)
        client = ssl.create_default_context(cafile=str(pki.ca))
        client.load_cert_chain(*map(str, pki.client))
        url = f"https://localhost:{port}/metrics"
        status, _, body = await _blocking(_get, url, None, client)
        assert status == 200 and b"stratalog_build_info" in body
        # No certificate: the handshake fails; a plaintext client gets nothing either.
        with pytest.raises((ssl.SSLError, OSError)):
            await _blocking(_get, url, None, ssl.create_default_context(cafile=str(pki.ca)))
        answer = await _blocking(_exchange, port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert b"stratalog_" not in answer
