"""server/client_limits.py: waiting RPCs admitted per connection, per client and in all.

The counts are checked against a plain model over random admissions and releases, with
``check()`` after every step; the order in which limits are named, who a client is (principal or
host), and the metrics (fixed labels only) are pinned on their own. The same limits against a
real server process: tests/integration/test_server_client_limits.py.
"""

from __future__ import annotations

import contextvars
import random
from collections import Counter

import pytest

from stratalog.server.client_limits import (
    ClientLimitExceededError,
    ClientLimits,
    Origin,
    WaitingRpcKind,
    call_origin,
    host_of_peer,
)
from stratalog.server.metrics import ServerMetrics
from stratalog.server.security.principal import ANONYMOUS, CallIdentity, Principal, current_identity

SUBSCRIBE = WaitingRpcKind.SUBSCRIBE
LONG_POLL = WaitingRpcKind.LONG_POLL


def origin(connection: str, client: str = "host:10.0.0.1") -> Origin:
    return Origin(connection, client)


def test_each_limit_refuses_with_its_setting_named_in_the_order_checked() -> None:
    limits = ClientLimits(per_connection_max=2, per_client_max=3, total_max=4)
    a1, a2, b1 = (origin("ipv4:10.0.0.1:1"), origin("ipv4:10.0.0.1:1"),
                  origin("ipv4:10.0.0.1:2"))
    limits.admit(a1, SUBSCRIBE)
    limits.admit(a2, LONG_POLL)
    with pytest.raises(ClientLimitExceededError) as refused:
        limits.admit(a1, SUBSCRIBE)  # the connection is full (and nothing else is)
    assert refused.value.limit == "waiting_rpcs_per_connection_max"
    assert "ipv4:10.0.0.1:1" in str(refused.value) and "=2" in str(refused.value)
    assert str(refused.value).startswith("Subscribe stream refused")
    limits.admit(b1, SUBSCRIBE)  # the client's other connection: its third
    with pytest.raises(ClientLimitExceededError) as refused:
        limits.admit(origin("ipv4:10.0.0.1:3"), LONG_POLL)
    assert refused.value.limit == "waiting_rpcs_per_client_max"
    assert "host:10.0.0.1" in str(refused.value)
    assert str(refused.value).startswith("long poll refused")
    limits.admit(origin("ipv4:10.0.0.2:1", "User:bob"), SUBSCRIBE)  # the fourth of the server
    with pytest.raises(ClientLimitExceededError) as refused:
        limits.admit(origin("ipv4:10.0.0.3:1", "User:carol"), SUBSCRIBE)
    assert refused.value.limit == "waiting_rpcs_max"
    limits.check()


def test_release_frees_the_slot_once_and_the_with_block_releases() -> None:
    limits = ClientLimits(per_connection_max=1, per_client_max=1, total_max=1)
    a = origin("ipv4:10.0.0.1:1")
    waiting = limits.admit(a, SUBSCRIBE)
    waiting.release()
    waiting.release()  # a second release changes nothing
    assert limits.total == 0 and limits.count(a) == (0, 0)
    with limits.admit(a, LONG_POLL):
        assert limits.count(a) == (1, 1) and limits.count_of(LONG_POLL) == 1
        with pytest.raises(ClientLimitExceededError):
            limits.admit(a, LONG_POLL)
    assert limits.total == 0 and limits.count_of(LONG_POLL) == 0
    limits.check()


def test_an_exception_in_the_with_block_releases_too() -> None:
    limits = ClientLimits(1, 1, 1)
    with pytest.raises(RuntimeError), limits.admit(origin("c"), SUBSCRIBE):
        raise RuntimeError("the stream ended")
    assert limits.total == 0
    limits.check()


def test_random_admissions_and_releases_agree_with_a_plain_model() -> None:
    rng = random.Random(13)
    limits = ClientLimits(per_connection_max=3, per_client_max=5, total_max=12)
    connections = [f"ipv4:10.0.0.{c}:{p}" for c in range(4) for p in range(3)]
    client_of = {conn: f"host:{conn.split(':')[1]}" for conn in connections}
    held: list[tuple[Origin, object]] = []
    by_connection: Counter[str] = Counter()
    by_client: Counter[str] = Counter()
    peak = 0  # the model's most held since the last take_peak_total
    for step in range(3000):
        if step % 37 == 0:
            assert limits.take_peak_total() == peak
            peak = len(held)
        if held and rng.random() < 0.45:
            which, waiting = held.pop(rng.randrange(len(held)))
            waiting.release()  # type: ignore[attr-defined]
            by_connection[which.connection] -= 1
            by_client[which.client] -= 1
        else:
            conn = rng.choice(connections)
            which = Origin(conn, client_of[conn])
            expected = (
                "waiting_rpcs_per_connection_max" if by_connection[conn] >= 3
                else "waiting_rpcs_per_client_max" if by_client[which.client] >= 5
                else "waiting_rpcs_max" if len(held) >= 12
                else None
            )
            try:
                waiting = limits.admit(which, rng.choice(list(WaitingRpcKind)))
            except ClientLimitExceededError as exc:
                assert exc.limit == expected
            else:
                assert expected is None
                held.append((which, waiting))
                peak = max(peak, len(held))
                by_connection[conn] += 1
                by_client[which.client] += 1
        limits.check()
        assert limits.total == len(held)
    for _, waiting in held:
        waiting.release()  # type: ignore[attr-defined]
    limits.check()
    assert limits.total == 0


def test_the_peak_counts_a_crowd_that_came_and_went_between_two_takes() -> None:
    limits = ClientLimits(per_connection_max=100, per_client_max=100, total_max=100)
    assert limits.take_peak_total() == 0
    crowd = [limits.admit(origin("ipv4:10.0.0.1:1"), SUBSCRIBE) for _ in range(40)]
    for waiting in crowd[1:]:
        waiting.release()
    assert limits.total == 1
    assert limits.take_peak_total() == 40  # what the maintenance pass sees, though gone now
    assert limits.take_peak_total() == 1  # started over from the count then
    crowd[0].release()
    assert limits.take_peak_total() == 1 and limits.take_peak_total() == 0


@pytest.mark.parametrize(("peer", "host"), [
    ("ipv4:10.0.0.5:53122", "10.0.0.5"),
    ("ipv6:[::1]:53122", "::1"),
    ("ipv6:[2001:db8::7]:1", "2001:db8::7"),
    ("unix:/tmp/socket", "unix:/tmp/socket"),
    ("ipv4:10.0.0.5", "10.0.0.5"),
])
def test_host_of_peer(peer: str, host: str) -> None:
    assert host_of_peer(peer) == host


class _Context:
    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


def _origin_with(identity: CallIdentity | None, peer: str) -> Origin:
    # A fresh context per call, as gRPC runs each call's handler in a task of its own.
    def read() -> Origin:
        if identity is not None:
            current_identity.set(identity)
        return call_origin(_Context(peer))  # type: ignore[arg-type]

    return contextvars.Context().run(read)


def test_a_client_is_its_principal_or_else_its_host() -> None:
    peer = "ipv4:10.0.0.5:53122"
    # No authentication interceptor: the host of the peer.
    assert _origin_with(None, peer) == Origin(peer, "host:10.0.0.5")
    # Authenticated: the principal, whatever the host.
    alice = CallIdentity(Principal.user("alice"), "10.0.0.5", "password")
    assert _origin_with(alice, peer) == Origin(peer, "User:alice")
    # Anonymous (allowed by the authentication settings): the host the interceptor saw.
    anonymous = CallIdentity(ANONYMOUS, "10.0.0.9")
    assert _origin_with(anonymous, peer) == Origin(peer, "host:10.0.0.9")


def test_metrics_count_by_kind_and_refusals_by_limit_only() -> None:
    metrics = ServerMetrics()
    limits = ClientLimits(1, 5, 5, metrics)
    a = origin("ipv4:10.0.0.1:1", "User:mallory")
    waiting = limits.admit(a, SUBSCRIBE)
    for _ in range(3):
        with pytest.raises(ClientLimitExceededError):
            limits.admit(a, LONG_POLL)
    text = metrics.render().decode()
    assert 'stratalog_waiting_rpcs{kind="subscribe"} 1.0' in text
    assert 'stratalog_waiting_rpcs{kind="long_poll"} 0.0' in text
    assert ('stratalog_waiting_rpcs_refused_total{limit="waiting_rpcs_per_connection_max"} 3.0'
            in text)
    assert "mallory" not in text and "10.0.0.1" not in text
    waiting.release()
    assert 'stratalog_waiting_rpcs{kind="subscribe"} 0.0' in metrics.render().decode()
