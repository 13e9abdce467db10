"""Authorization and quotas on a Session stream are exactly the unary calls' (issue 14).

Every request kind a session carries is sent both ways (``Client()`` on a session,
``Client(sessions=False)`` as unary calls) on topics the caller may read, may write, may only
describe, may not touch, and that do not exist; the outcomes must be the same: the same answer,
or the same exception with the same code, reason, message and metadata. Quotas: a principal over
its produce quota is throttled on the session as on unary calls, the two counting into one rate;
a fetch on the session is capped to what the fetch quota allows per answer, as a unary one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from stratalog.client import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Client,
    FetchFormat,
    PatternType,
    ResourceType,
)
from stratalog.client.errors import NotAuthorizedError, StratalogError
from stratalog.records import build_batch

from .conftest import ServerProcess

ANONYMOUS = "User:ANONYMOUS"
TOPICS = ("readable", "writable", "described", "secret")
GRANTS = {
    "readable": (AclOperation.READ,),  # READ implies DESCRIBE (Kafka's rule)
    "writable": (AclOperation.WRITE,),
    "described": (AclOperation.DESCRIBE,),
}


async def _outcome(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except StratalogError as error:
        return error


def _comparable(outcome: Any) -> Any:
    """What must be equal between a session's and a unary call's outcome: an error's class,
    code, reason, message and metadata; a Produce's shape (its offsets are the next ones);
    any other answer whole."""
    if isinstance(outcome, StratalogError):
        return (type(outcome), outcome.code, outcome.reason, outcome.message,
                outcome.metadata, outcome.retriable)
    if hasattr(outcome, "base_offset"):
        return (type(outcome), outcome.record_count, outcome.duplicate)
    return outcome


def _requests(topic: str) -> list[tuple[str, Callable[[Client], Awaitable[Any]]]]:
    batch = build_batch([(1_700_000_000_000, None, b"batch", ())])
    return [
        ("Produce records", lambda c: c.produce(topic, 0, [b"record"])),
        ("Produce batches", lambda c: c.produce(topic, 0, record_batches=batch)),
        ("FetchByOffset", lambda c: c.fetch_by_offset(topic, 0, 0)),
        ("FetchByOffset batches", lambda c: c.fetch_by_offset(
            topic, 0, 0, fetch_format=FetchFormat.RECORD_BATCHES)),
        ("FetchByTimestamp", lambda c: c.fetch_by_timestamp(topic, 0, 0)),
        ("ListOffsets", lambda c: c.list_offsets(topic, 0, -1)),
    ]


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A server with ``authorizer = "acl"`` whose ACLs give ANONYMOUS :data:`GRANTS`, made by
    a first run in which ANONYMOUS is a super user."""
    from .conftest import launch_server

    data = tmp_path_factory.mktemp("session-acls") / "data"
    yield data, launch_server


async def test_every_request_kind_is_authorized_on_a_session_as_unary(acl_server) -> None:
    data, launch = acl_server
    server: ServerProcess = launch(data, "--authorizer", "acl", "--super-users", ANONYMOUS)
    try:
        async with Client(server.target, sessions=False) as admin:
            for topic in TOPICS:
                await admin.create_topic(topic)
                await admin.produce(topic, 0, [b"seed"])
            await admin.create_acls([
                AclBinding(ResourceType.TOPIC, topic, PatternType.LITERAL, ANONYMOUS, "*",
                           operation, AclPermissionType.ALLOW)
                for topic, operations in GRANTS.items() for operation in operations
            ])
    finally:
        assert server.stop() == 0
    server = launch(data, "--authorizer", "acl")
    try:
        refused = served = 0
        async with Client(server.target) as session, Client(
            server.target, sessions=False
        ) as unary:
            for topic in (*TOPICS, "missing"):
                for name, call in _requests(topic):
                    on_session = await _outcome(call(session))
                    on_unary = await _outcome(call(unary))
                    assert _comparable(on_session) == _comparable(on_unary), (
                        topic, name, on_session, on_unary)
                    if isinstance(on_session, NotAuthorizedError):
                        refused += 1
                    elif not isinstance(on_session, StratalogError):
                        served += 1
            assert session.sessions, "the requests went on a session"
        # Both kinds of outcome were compared: each topic gets exactly what its ACLs grant.
        assert refused and served
    finally:
        assert server.stop() == 0


QUOTA = 100_000  # bytes per second
WINDOW = ("--quota-window-num", "2", "--quota-window-size-ms", "500")


async def test_quotas_hold_a_session_as_unary_calls(start_server, tmp_path: Path) -> None:
    server = start_server(None, "--quota-producer-byte-rate", str(QUOTA),
                          "--quota-consumer-byte-rate", str(QUOTA), *WINDOW)
    value = b"v" * 20_000
    async with Client(server.target) as session, Client(server.target, sessions=False) as unary:
        await unary.create_topic("quota")
        # Far over the quota at once, half on the session, half as unary calls: each request's
        # bytes count into the principal's one rate, and those recorded past the quota are
        # throttled, on the session as on unary calls (the answers are held back; the
        # session's later requests are not: only a Produce's append is ordered).
        session_calls = [session.produce("quota", 0, [value]) for _ in range(8)]
        unary_calls = [unary.produce("quota", 0, [value]) for _ in range(8)]
        results = await asyncio.gather(*session_calls, *unary_calls)
        assert max(r.throttle_time_ms for r in results[:8]) > 0, results
        assert max(r.throttle_time_ms for r in results[8:]) > 0, results
        # A fetch asks for at most what the fetch quota allows per answer (QUOTA x 0.5 s:
        # 50 KB, so 2 batches of 20 KB and change), the same on both.
        by_session = await session.fetch_by_offset(
            "quota", 0, 0, max_bytes=10 * 1024 * 1024, fetch_format=FetchFormat.RECORD_BATCHES)
        by_unary = await unary.fetch_by_offset(
            "quota", 0, 0, max_bytes=10 * 1024 * 1024, fetch_format=FetchFormat.RECORD_BATCHES)
        assert len(by_session.record_batches) == len(by_unary.record_batches)
        assert len(by_session.record_batches) < QUOTA
        assert by_session.throttle_time_ms > 0 or by_unary.throttle_time_ms > 0
