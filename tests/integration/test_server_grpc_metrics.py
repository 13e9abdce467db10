"""The standard gRPC server metrics and the build info of a real server, scraped from /metrics
after a few calls: ``grpc_server_started_total``, ``grpc_server_handled_total`` by code and
``grpc_server_handling_seconds``, labelled as go-grpc-prometheus labels them, for unary calls
and for each request on a Session stream (under its own RPC's name), and
``stratalog_build_info``. Each test reads the samples before and after what it does (one
server per module, shared).

Refused calls (authentication, ACLs) are counted too: tests/integration/
test_server_security_metrics.py checks them on its authenticated server.
"""

from __future__ import annotations

import platform
import re
import urllib.request

import grpc
import pytest

import stratalog
from stratalog.client import Client, SyncClient
from stratalog.client.errors import UnknownTopicOrPartitionError

from .conftest import CALL_TIMEOUT_S, ServerProcess, until

SERVICE = "stratalog.v1.Broker"


def started(method: str, grpc_type: str = "unary") -> str:
    return (f'grpc_server_started_total{{grpc_method="{method}",grpc_service="{SERVICE}",'
            f'grpc_type="{grpc_type}"}}')


def handled(method: str, code: str, grpc_type: str = "unary") -> str:
    return (f'grpc_server_handled_total{{grpc_code="{code}",grpc_method="{method}",'
            f'grpc_service="{SERVICE}",grpc_type="{grpc_type}"}}')


def handling_count(method: str, grpc_type: str = "unary") -> str:
    return (f'grpc_server_handling_seconds_count{{grpc_method="{method}",'
            f'grpc_service="{SERVICE}",grpc_type="{grpc_type}"}}')


def scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=CALL_TIMEOUT_S) as response:
        return response.read().decode()


def sample(text: str, name: str) -> float:
    """One sample's value in a scrape; 0 when absent (a counter not yet incremented)."""
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def growth(server: ServerProcess, names: list[str]):
    """``since()``: how much each sample grew since this call."""
    text = scrape(server)
    before = {name: sample(text, name) for name in names}

    def since() -> dict[str, float]:
        after = scrape(server)
        return {name: sample(after, name) - before[name] for name in names}

    return since


def test_unary_calls_are_counted_started_handled_by_code_and_timed(server) -> None:
    names = [
        started("CreateTopic"), handled("CreateTopic", "OK"), handling_count("CreateTopic"),
        started("DescribeTopic"), handled("DescribeTopic", "OK"),
        handled("DescribeTopic", "NotFound"), handling_count("DescribeTopic"),
    ]
    since = growth(server, names)
    with SyncClient(server.target) as client:
        client.create_topic("gm-unary", 1)
        for _ in range(3):
            client.describe_topic("gm-unary")
        for _ in range(2):
            with pytest.raises(UnknownTopicOrPartitionError):
                client.describe_topic("gm-missing")
    assert since() == {
        started("CreateTopic"): 1, handled("CreateTopic", "OK"): 1,
        handling_count("CreateTopic"): 1,
        started("DescribeTopic"): 5, handled("DescribeTopic", "OK"): 3,
        handled("DescribeTopic", "NotFound"): 2, handling_count("DescribeTopic"): 5,
    }


async def test_session_requests_are_counted_under_their_own_rpc(server) -> None:
    names = [
        started("Produce"), handled("Produce", "OK"), handling_count("Produce"),
        handled("Produce", "NotFound"),
        started("FetchByOffset"), handled("FetchByOffset", "OK"),
        started("Session", "bidi_stream"),
    ]
    async with Client(server.target) as client:  # Produce and fetches on its Session stream
        await client.create_topic("gm-session", 1)
        since = growth(server, names)
        for i in range(4):
            await client.produce("gm-session", 0, [b"v%d" % i])
        with pytest.raises(UnknownTopicOrPartitionError):
            await client.produce("gm-session-missing", 0, [b"v"])
        await client.fetch_by_offset("gm-session", 0, 0)
        assert client.sessions  # the requests went on a session, not as unary calls
        counted = since()
    assert counted == {
        started("Produce"): 5, handled("Produce", "OK"): 4, handling_count("Produce"): 5,
        handled("Produce", "NotFound"): 1,
        started("FetchByOffset"): 1, handled("FetchByOffset", "OK"): 1,
        started("Session", "bidi_stream"): 1,
    }
    # The stream itself is handled once it ends, a moment after its client closed it (OK if
    # the server read the end of the stream first, Canceled if it saw the connection go).

    def stream_handled() -> bool:
        text = scrape(server)
        return sum(sample(text, handled("Session", code, "bidi_stream"))
                   for code in ("OK", "Canceled")) == 1

    await until(stream_handled, "the closed Session stream counted as handled")


def test_a_method_the_server_does_not_have_is_not_counted(server) -> None:
    with grpc.insecure_channel(server.target) as channel:
        call = channel.unary_unary(f"/{SERVICE}/NoSuchMethod")
        with pytest.raises(grpc.RpcError) as raised:
            call(b"", timeout=CALL_TIMEOUT_S)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "NoSuchMethod" not in scrape(server)


def test_build_info_names_the_versions(server) -> None:
    text = scrape(server)
    expected = (f'stratalog_build_info{{grpc="{grpc.__version__}",'
                f'python="{platform.python_version()}",version="{stratalog.__version__}"}}')
    assert sample(text, expected) == 1.0
    assert text.count("stratalog_build_info{") == 1
