"""The security metrics of a real server, scraped from /metrics after each kind of refusal and
throttle: authentication failures by reason, ACL denials by operation, quota throttles and
their delays by quota. None is labelled by principal (a label per user would grow without
bound): each test reads the totals before and after what it does.

One server per module: passwords over loopback (``authentication_plaintext_allowed``),
``authorizer = "acl"`` with ``User:admin`` the super user, and produce and fetch quotas for
``User:bob`` alone, measured over 2 windows of 500 ms.
"""

from __future__ import annotations

import base64
import signal
import urllib.request
from collections.abc import Callable, Iterator

import grpc
import pytest

from stratalog.client import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Credentials,
    PatternType,
    ResourceType,
    SyncClient,
)
from stratalog.client.errors import NotAuthorizedError
from stratalog.client.wire import FetchFormat
from stratalog.server.security.credentials import CredentialFile
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import CALL_TIMEOUT_S, ServerProcess, launch_server

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
QUOTA = 200_000  # bytes per second, bob's produce and fetch quotas
VALUE = b"v" * 40_000
_ITERATIONS = 4096  # the tests count refusals, not the cost of a password check


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("security-metrics")
    store = CredentialFile()
    for user, password in PASSWORDS.items():
        store = store.with_user(user, password, _ITERATIONS)
    store.save(directory / "credentials.json")
    config = directory / "stratalog.toml"
    config.write_text(
        'authorizer = "acl"\nsuper_users = ["User:admin"]\n'
        "authentication_plaintext_allowed = true\n"
        f'authentication_credentials_file = "{directory / "credentials.json"}"\n'
        "quota_window_num = 2\nquota_window_size_ms = 500\n"
        f'[quotas."User:bob"]\nproducer_byte_rate = {QUOTA}\nconsumer_byte_rate = {QUOTA}\n'
    )
    process = launch_server(directory / "data", "--config", str(config))
    yield process
    assert process.stop(signal.SIGTERM) == 0, process.log_text()[-4000:]


def _client(server: ServerProcess, user: str) -> SyncClient:
    return SyncClient(server.target, auth=Credentials.password(user, PASSWORDS[user],
                                                               plaintext_allowed=True))


def _counted(server: ServerProcess, samples: list[str]) -> Callable[[], dict[str, float]]:
    """``since()``: how much each sample grew since this call."""
    before = {sample: server.metric(sample) for sample in samples}
    return lambda: {sample: server.metric(sample) - before[sample] for sample in samples}


def _refused(method: Callable[..., object], request: object,
             metadata: tuple[tuple[str, str], ...]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as raised:
        method(request, timeout=CALL_TIMEOUT_S, metadata=metadata)
    return raised.value.code()


def test_authentication_failures_are_counted_by_reason(server: ServerProcess) -> None:
    reasons = ("wrong_credentials", "malformed_credentials", "credentials_required")
    since = _counted(server, [f'stratalog_authentication_failures_total{{reason="{reason}"}}'
                              for reason in reasons])
    wrong = base64.b64encode(b"alice:not-her-password").decode()
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        request = pb.ListTopicsRequest()
        for _ in range(3):
            assert _refused(stub.ListTopics, request, (("authorization", f"Basic {wrong}"),)) \
                == grpc.StatusCode.UNAUTHENTICATED
        assert _refused(stub.ListTopics, request, (("authorization", "Negotiate x"),)) \
            == grpc.StatusCode.UNAUTHENTICATED
        assert _refused(stub.ListTopics, request, ()) == grpc.StatusCode.UNAUTHENTICATED
        assert _refused(stub.ListTopics, request, ()) == grpc.StatusCode.UNAUTHENTICATED
    counted = since()
    assert counted == {
        'stratalog_authentication_failures_total{reason="wrong_credentials"}': 3,
        'stratalog_authentication_failures_total{reason="malformed_credentials"}': 1,
        'stratalog_authentication_failures_total{reason="credentials_required"}': 2,
    }
    # A call with good credentials counts nothing.
    with _client(server, "alice") as alice:
        alice.list_topics()
    assert since() == counted


def test_acl_denials_are_counted_by_operation(server: ServerProcess) -> None:
    with _client(server, "admin") as admin:
        admin.create_topic("denied")
    since = _counted(server, [f'stratalog_authorization_denials_total{{operation="{op}"}}'
                              for op in ("WRITE", "READ", "ALTER", "DESCRIBE")])
    with _client(server, "alice") as alice:
        for _ in range(2):
            with pytest.raises(NotAuthorizedError):
                alice.produce("denied", 0, [b"v"])
        with pytest.raises(NotAuthorizedError):
            alice.fetch_by_offset("denied", 0, 0)
        with pytest.raises(NotAuthorizedError):
            alice.create_acls([_allow("User:alice", "denied", AclOperation.READ)])
        # Left out of an answer is not refused: ListTopics drops what she may not see.
        assert "denied" not in {topic.name for topic in alice.list_topics()}
    counted = since()
    assert counted == {
        'stratalog_authorization_denials_total{operation="WRITE"}': 2,
        'stratalog_authorization_denials_total{operation="READ"}': 1,
        'stratalog_authorization_denials_total{operation="ALTER"}': 1,
        'stratalog_authorization_denials_total{operation="DESCRIBE"}': 0,
    }


def _allow(principal: str, topic: str, operation: AclOperation) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, PatternType.LITERAL, principal, "*", operation,
                      AclPermissionType.ALLOW)


def test_quota_throttles_and_their_delays_are_counted_by_quota(server: ServerProcess) -> None:
    with _client(server, "admin") as admin:
        admin.create_topic("throttled")
        admin.create_acls([_allow("User:bob", "throttled", AclOperation.ALL)])
    samples = [f'stratalog_quota_{name}_total{{quota="{quota}"}}'
               for name in ("throttles", "throttle_seconds") for quota in ("produce", "fetch")]
    since = _counted(server, samples)
    with _client(server, "bob") as bob:
        produced = [bob.produce("throttled", 0, [VALUE]).throttle_time_ms for _ in range(20)]
        offset, fetched = 0, []
        while offset < 20:
            result = bob.fetch_by_offset("throttled", 0, offset,
                                         fetch_format=FetchFormat.RECORD_BATCHES)
            offset = result.next_offset
            fetched.append(result.throttle_time_ms)
    # bob is the only principal with a quota: every throttle counted is one he was told of.
    assert sum(1 for ms in produced if ms) > 0 and sum(1 for ms in fetched if ms) > 0
    counted = since()
    assert counted[samples[0]] == sum(1 for ms in produced if ms)
    assert counted[samples[1]] == sum(1 for ms in fetched if ms)
    assert counted[samples[2]] == pytest.approx(sum(produced) / 1000)
    assert counted[samples[3]] == pytest.approx(sum(fetched) / 1000)


def test_no_metric_is_labelled_by_principal(server: ServerProcess) -> None:
    with urllib.request.urlopen(server.metrics_url, timeout=CALL_TIMEOUT_S) as response:
        text = response.read().decode()
    assert "stratalog_authorization_denials_total" in text  # the module's refusals are there
    for user in PASSWORDS:
        assert user not in text, f"User {user} in the metrics"


def _handled(method: str, code: str) -> str:
    return (f'grpc_server_handled_total{{grpc_code="{code}",grpc_method="{method}",'
            f'grpc_service="stratalog.v1.Broker",grpc_type="unary"}}')


def test_refused_calls_are_counted_in_the_grpc_server_metrics(server: ServerProcess) -> None:
    # The metrics interceptor is the first of the chain: what the later ones refuse is
    # counted with the code it was refused with, as go-grpc-prometheus counts it.
    with _client(server, "admin") as admin:
        admin.create_topic("refused")
    samples = [_handled("ListTopics", "Unauthenticated"), _handled("Produce", "PermissionDenied"),
               _handled("Produce", "OK")]
    since = _counted(server, samples)
    wrong = base64.b64encode(b"alice:not-her-password").decode()
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for _ in range(2):
            assert _refused(stub.ListTopics, pb.ListTopicsRequest(),
                            (("authorization", f"Basic {wrong}"),)) \
                == grpc.StatusCode.UNAUTHENTICATED
    with _client(server, "alice") as alice, pytest.raises(NotAuthorizedError):
        alice.produce("refused", 0, [b"v"])
    with _client(server, "admin") as admin:
        admin.produce("refused", 0, [b"v"])
    assert since() == {samples[0]: 2, samples[1]: 1, samples[2]: 1}
