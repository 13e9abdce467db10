"""Authentication against a live server over TLS: every RPC with no, wrong and right credentials.

One server per module serves TLS with the test PKI and a credential file of two users and a
token; anonymous access is then refused (``authentication_anonymous = auto``). Each Broker
method is called with an empty request, as generic gRPC calls built from broker.proto's
descriptor, so a method added later is covered without a change here.
"""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from stratalog.client import Client, Credentials, SyncClient, TlsConfig
from stratalog.client.errors import AuthenticationError, from_rpc_error
from stratalog.server.security.credentials import CredentialFile
from stratalog.server.security.principal import Principal
from stratalog.v1 import broker_pb2

from .conftest import CALL_TIMEOUT_S, ServerProcess, launch_server

_SERVICE = broker_pb2.DESCRIPTOR.services_by_name["Broker"]
_METHODS = [m.name for m in _SERVICE.methods]
# Fewer iterations than the CLI's default: the tests check the rule, not the cost.
_ITERATIONS = 4096


def basic(user: str, password: str) -> tuple[tuple[str, str], ...]:
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    return (("authorization", f"Basic {pair}"),)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


class Secured:
    """The module's server and what the tests need to call it."""

    def __init__(self, server: ServerProcess, pki: object, token: str, credentials: Path):
        self.server = server
        self.pki = pki
        self.token = token
        self.credentials = credentials


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("authn")
    store = (CredentialFile()
             .with_user("alice", "alice-secret", _ITERATIONS)
             .with_user("bob", "bob-secret", _ITERATIONS))
    store, token = store.with_new_token(Principal.user("etl"), _ITERATIONS)
    credentials = directory / "credentials.json"
    store.save(credentials)
    server = launch_server(
        directory / "data",
        "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
        "--authentication-credentials-file", str(credentials),
        # Every RPC is tried with wrong credentials from this one host: more failures than
        # the per-host limit allows by default (test_server_authentication_attacks.py).
        "--authentication-failures-per-host-max", "1000",
    )
    yield Secured(server, pki, token, credentials)
    assert server.stop(signal.SIGTERM) == 0, server.log_text()[-4000:]


@pytest.fixture(scope="module")
def tls_channel(secured: Secured) -> Iterator[grpc.Channel]:
    creds = grpc.ssl_channel_credentials(root_certificates=secured.pki.ca.read_bytes())
    with grpc.secure_channel(secured.server.target, creds) as channel:
        grpc.channel_ready_future(channel).result(timeout=CALL_TIMEOUT_S)
        yield channel


def call(channel: grpc.Channel, method: str, metadata=None) -> grpc.StatusCode:
    """Call ``method`` with an empty request; the status code it ends with."""
    descriptor = _SERVICE.methods_by_name[method]
    request_class = getattr(broker_pb2, descriptor.input_type.name)
    response_class = getattr(broker_pb2, descriptor.output_type.name)
    path = f"/{_SERVICE.full_name}/{method}"
    kind = channel.unary_stream if descriptor.server_streaming else channel.unary_unary
    stub = kind(path, request_serializer=request_class.SerializeToString,
                response_deserializer=response_class.FromString)
    try:
        result = stub(request_class(), timeout=5, metadata=metadata)
        if descriptor.server_streaming:
            next(iter(result), None)  # a Subscribe to nothing fails, or waits: one message
    except grpc.RpcError as err:
        if err.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
            return grpc.StatusCode.OK  # a Subscribe that was let in and waits for records
        if err.code() is grpc.StatusCode.UNAUTHENTICATED:
            assert from_rpc_error(err).reason == "AUTHENTICATION_FAILED", err
        return err.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("method", [m for m in _METHODS if m != "WhoAmI"])
def test_every_rpc_without_credentials_is_refused(tls_channel: grpc.Channel, method: str) -> None:
    assert call(tls_channel, method) is grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("metadata", [
    basic("alice", "wrong"),
    basic("mallory", "alice-secret"),
    bearer("0123456789ab.not-the-secret"),
    bearer("no-dot-in-this-token"),
    (("authorization", "Basic !!not base64!!"),),
    (("authorization", "Digest username=alice"),),
    (("authorization", "Basic " + base64.b64encode(b"no-colon").decode()),),
], ids=["wrong-password", "unknown-user", "wrong-token", "malformed-token", "bad-base64",
        "unknown-scheme", "no-colon"])
@pytest.mark.parametrize("method", _METHODS)
def test_every_rpc_with_wrong_credentials_is_refused(
    tls_channel: grpc.Channel, method: str, metadata
) -> None:
    assert call(tls_channel, method, metadata) is grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("method", _METHODS)
def test_every_rpc_with_right_credentials_reaches_the_servicer(
    tls_channel: grpc.Channel, secured: Secured, method: str
) -> None:
    # An empty request is mostly a bad request: any answer but UNAUTHENTICATED came from the
    # servicer (or from the interceptors after this one).
    for metadata in (basic("alice", "alice-secret"), bearer(secured.token)):
        assert call(tls_channel, method, metadata) is not grpc.StatusCode.UNAUTHENTICATED


def test_who_am_i_names_the_principal_and_how(secured: Secured) -> None:
    tls = TlsConfig.from_files(secured.pki.ca)
    target = secured.server.target
    with SyncClient(target, tls=tls, auth=Credentials.password("alice", "alice-secret")) as c:
        me = c.who_am_i()
        assert (me.principal, me.authenticated_by, me.host) == (
            "User:alice", "password", "127.0.0.1")
    with SyncClient(target, tls=tls, auth=Credentials.token(secured.token)) as c:
        assert c.who_am_i()[:2] == ("User:etl", "token")
    with SyncClient(target, tls=tls) as c:
        # Open to every client: it says who the server takes an anonymous caller for.
        assert c.who_am_i()[:2] == ("User:ANONYMOUS", "none")
        with pytest.raises(AuthenticationError):
            c.list_topics()


def test_health_stays_open(tls_channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(tls_channel)
    answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=CALL_TIMEOUT_S)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_needs_credentials_unless_open(tls_channel: grpc.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(tls_channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.ServerReflectionInfo(iter([request]), timeout=CALL_TIMEOUT_S))
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
    answers = list(stub.ServerReflectionInfo(
        iter([request]), timeout=CALL_TIMEOUT_S, metadata=basic("bob", "bob-secret")))
    names = {s.name for s in answers[0].list_services_response.service}
    assert "stratalog.v1.Broker" in names


async def test_produce_and_consume_with_a_token(secured: Secured) -> None:
    from stratalog.client import Consumer, Producer

    tls = TlsConfig.from_files(secured.pki.ca)
    auth = Credentials.token(secured.token)
    async with Client(secured.server.target, tls=tls, auth=auth) as client:
        await client.create_topic("authn-token", partitions=2)
        async with Producer(client) as producer:
            futures = [await producer.send("authn-token", f"v{i}".encode()) for i in range(20)]
            for future in futures:
                await future
    # A Consumer from a target string makes its own Client with the same security.
    async with Consumer(secured.server.target, "authn-token", tls=tls, auth=auth) as consumer:
        values = sorted([record.value async for record in consumer])
    assert values == sorted(f"v{i}".encode() for i in range(20))


def test_credential_file_reload_on_sighup(secured: Secured) -> None:
    """SIGHUP reads the file again: a removed user is refused (its cached check is forgotten),
    a new one accepted; a broken file is refused and the previous one stays."""
    tls = TlsConfig.from_files(secured.pki.ca)
    target = secured.server.target

    def principal(user: str, password: str) -> str | None:
        with SyncClient(target, tls=tls, auth=Credentials.password(user, password)) as c:
            try:
                return c.who_am_i().principal
            except AuthenticationError:
                return None

    assert principal("bob", "bob-secret") == "User:bob"  # now cached
    original = secured.credentials.read_bytes()
    try:
        store = CredentialFile.parse(original).without_user("bob").with_user(
            "carol", "carol-secret", _ITERATIONS)
        store.save(secured.credentials)
        secured.server.process.send_signal(signal.SIGHUP)
        wait_for(lambda: principal("carol", "carol-secret") == "User:carol")
        assert principal("bob", "bob-secret") is None
        assert principal("alice", "alice-secret") == "User:alice"

        secured.credentials.write_text("{ not json")
        secured.server.process.send_signal(signal.SIGHUP)
        wait_for(lambda: "credential file reload failed" in secured.server.log_text())
        assert principal("carol", "carol-secret") == "User:carol"
    finally:
        secured.credentials.write_bytes(original)
        secured.server.process.send_signal(signal.SIGHUP)
        wait_for(lambda: principal("bob", "bob-secret") == "User:bob")


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Poll ``condition`` until true; a reload is asynchronous to the signal."""
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


# ------------------------------------------------------------------------ plaintext


def test_credentials_without_tls_stop_the_start(tmp_path: Path) -> None:
    CredentialFile().with_user("alice", "pw", _ITERATIONS).save(tmp_path / "c.json")
    result = subprocess.run(
        [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
         "--log-dirs", str(tmp_path / "data"),
         "--authentication-credentials-file", str(tmp_path / "c.json")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "TLS is off" in result.stderr and "authentication_plaintext_allowed" in result.stderr


def test_plaintext_credentials_when_allowed(tmp_path: Path, start_server) -> None:
    CredentialFile().with_user("alice", "pw", _ITERATIONS).save(tmp_path / "c.json")
    server = start_server(
        tmp_path / "data",
        "--authentication-credentials-file", str(tmp_path / "c.json"),
        "--authentication-plaintext-allowed", "true",
    )
    # The client refuses to send a password in the clear unless told it may.
    with pytest.raises(ValueError, match="without TLS"):
        SyncClient(server.target, auth=Credentials.password("alice", "pw"))
    auth = Credentials.password("alice", "pw", plaintext_allowed=True)
    with SyncClient(server.target, auth=auth) as client:
        assert client.who_am_i()[:2] == ("User:alice", "password")
    with SyncClient(server.target) as client, pytest.raises(AuthenticationError):
        client.list_topics()


def test_anonymous_allowed_beside_credentials(tmp_path: Path, start_server, pki) -> None:
    CredentialFile().with_user("alice", "pw", _ITERATIONS).save(tmp_path / "c.json")
    server = start_server(
        tmp_path / "data",
        "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
        "--authentication-credentials-file", str(tmp_path / "c.json"),
        "--authentication-anonymous", "allowed",
    )
    tls = TlsConfig.from_files(pki.ca)
    with SyncClient(server.target, tls=tls) as client:
        assert client.list_topics() == []
        assert client.who_am_i()[:2] == ("User:ANONYMOUS", "none")
    wrong = Credentials.password("alice", "no")
    with SyncClient(server.target, tls=tls, auth=wrong) as c, pytest.raises(AuthenticationError):
        c.list_topics()


def test_credentials_to_a_server_without_a_credential_file(start_server, pki, tmp_path) -> None:
    server = start_server(
        tmp_path / "data",
        "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
    )
    tls = TlsConfig.from_files(pki.ca)
    auth = Credentials.password("alice", "pw")
    with (SyncClient(server.target, tls=tls, auth=auth) as c,
          pytest.raises(AuthenticationError, match="no credential file")):
        c.list_topics()
    with SyncClient(server.target, tls=tls) as client:
        assert client.who_am_i()[:2] == ("User:ANONYMOUS", "none")
        assert client.list_topics() == []
