"""Authorization with real identities: TLS, passwords, a token and a client certificate, each
principal held to its own ACLs and quotas, against a live server process.

One server per module: TLS with the test PKI, a credential file (users ``admin``, ``alice``,
``bob``; a token of ``User:etl``), ``authorizer = "acl"`` with ``User:admin`` the super user, and
a produce quota for ``User:alice`` alone. A second server checks the principal of an mTLS client
certificate (a subject with a comma in it).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from stratalog.client import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Credentials,
    PatternType,
    ResourceType,
    SyncClient,
    TlsConfig,
)
from stratalog.client.errors import NotAuthorizedError, StratalogError
from stratalog.server.security.credentials import CredentialFile
from stratalog.server.security.principal import Principal
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .acl_calls import (
    ACLS_FOR_EVERY_CALL,
    group_acls_for_every_call,
    outcome,
    rpc_calls,
)
from .conftest import ServerProcess, launch_server

# Fewer iterations than the CLI's default: the tests check the rules, not the cost.
_ITERATIONS = 4096
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
CLI = [sys.executable, "-m", "stratalog.cli"]


class Secured:
    def __init__(self, server: ServerProcess, pki: Any, token: str, directory: Path) -> None:
        self.server, self.pki, self.token, self.directory = server, pki, token, directory

    @property
    def tls(self) -> TlsConfig:
        return TlsConfig.from_files(self.pki.ca)

    def client(self, user: str | None = None, *, token: bool = False) -> SyncClient:
        auth = (Credentials.token(self.token) if token
                else Credentials.password(user, PASSWORDS[user]) if user else None)
        return SyncClient(self.server.target, tls=self.tls, auth=auth)

    def stratalog(self, user: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        password_file = self.directory / f"{user}.password"
        password_file.write_text(PASSWORDS[user] + "\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
        return subprocess.run(
            [*CLI, "--ca-file", str(self.pki.ca), "--user", user, "--password-file",
             str(password_file), *args, "--target", self.server.target],
            capture_output=True, timeout=120, env=env,
        )


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Any) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("authz")
    store = CredentialFile()
    for user, password in PASSWORDS.items():
        store = store.with_user(user, password, _ITERATIONS)
    store, token = store.with_new_token(Principal.user("etl"), _ITERATIONS)
    credentials = directory / "credentials.json"
    store.save(credentials)
    config = directory / "stratalog.toml"
    config.write_text(
        'authorizer = "acl"\nsuper_users = ["User:admin"]\n'
        "quota_window_num = 2\nquota_window_size_ms = 500\n"
        '[quotas."User:alice"]\nproducer_byte_rate = 100000\n'
    )
    server = launch_server(
        directory / "data", "--config", str(config),
        "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
        "--authentication-credentials-file", str(credentials),
    )
    secured = Secured(server, pki, token, directory)
    with secured.client("admin") as admin:
        admin.create_topic("orders")
        admin.produce("orders", 0, [b"first"])
    yield secured
    assert server.stop(signal.SIGTERM) == 0, server.log_text()[-4000:]


def allow(principal: str, name: str, operation: AclOperation, *,
          permission: AclPermissionType = AclPermissionType.ALLOW,
          pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", operation, permission)


class _WithMetadata:
    """A stub whose every call carries the caller's credentials."""

    def __init__(self, stub: broker_pb2_grpc.BrokerStub, metadata: Any) -> None:
        self._stub, self._metadata = stub, metadata

    def __getattr__(self, name: str) -> Any:
        return functools.partial(getattr(self._stub, name), metadata=self._metadata)


def test_a_principal_gets_exactly_what_its_acls_grant(secured: Secured) -> None:
    """bob, authenticated, with no ACL: every RPC refused but WhoAmI (and ListTopics, which
    lists nothing); granted the ACLs the calls need (by the super user, with `stratalog acls`),
    every one served; alice, who holds none of them, still refused."""
    creds = grpc.ssl_channel_credentials(root_certificates=secured.pki.ca.read_bytes())
    with grpc.secure_channel(secured.server.target, creds) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        bob = _WithMetadata(stub, Credentials.password("bob", PASSWORDS["bob"]).metadata)
        for name, call in rpc_calls(bob):
            result = outcome(call)
            if name == "WhoAmI":
                assert (result.principal, result.authenticated_by) == ("User:bob", "password")
            elif name == "ListTopics":
                assert list(result.topics) == []
            elif name == "ListGroups":
                assert list(result.groups) == []
            else:
                assert isinstance(result, NotAuthorizedError), (name, result)
                assert "User:bob may not" in result.message

        for grant in ACLS_FOR_EVERY_CALL:
            added = secured.stratalog("admin", "acls", "add", "--allow-principal", "User:bob",
                                      *grant)
            assert added.returncode == 0, added.stderr.decode()
        with secured.client("admin") as admin:
            admin.create_acls(group_acls_for_every_call("User:bob"))
        for name, call in rpc_calls(bob):
            result = outcome(call)
            assert not isinstance(result, StratalogError), (name, result)

        alice = _WithMetadata(stub, Credentials.password("alice", PASSWORDS["alice"]).metadata)
        refused = outcome(lambda: alice.FetchByOffset(pb.FetchByOffsetRequest(topic="orders"),
                                                      timeout=30))
        assert isinstance(refused, NotAuthorizedError)
    with secured.client("admin") as admin:
        admin.delete_acls([AclBindingFilter(principal="User:bob")])


def test_acls_are_per_principal_with_wildcards_and_denies(secured: Secured) -> None:
    with secured.client("admin") as admin:
        admin.create_topic("shared")
        admin.create_acls([allow("User:alice", "shared", AclOperation.READ)])
    with secured.client("alice") as alice, secured.client("bob") as bob:
        assert alice.fetch_by_offset("shared", 0, 0).records == []
        with pytest.raises(NotAuthorizedError):
            bob.fetch_by_offset("shared", 0, 0)
        with secured.client("admin") as admin:
            admin.create_acls([allow("User:*", "shared", AclOperation.READ)])
        bob.fetch_by_offset("shared", 0, 0)
        with secured.client("admin") as admin:
            admin.create_acls([allow("User:bob", "shared", AclOperation.ALL,
                                     permission=AclPermissionType.DENY)])
        with pytest.raises(NotAuthorizedError):
            bob.fetch_by_offset("shared", 0, 0)
        alice.fetch_by_offset("shared", 0, 0)


def test_a_token_principal(secured: Secured) -> None:
    with secured.client("admin") as admin:
        admin.create_topic("etl-out")
        admin.create_acls([allow("User:etl", "etl-", AclOperation.WRITE,
                                 pattern=PatternType.PREFIXED)])
    with secured.client(token=True) as etl:
        assert etl.who_am_i().principal == "User:etl"
        etl.produce("etl-out", 0, [b"x"])
        with pytest.raises(NotAuthorizedError):
            etl.produce("orders", 0, [b"x"])


def test_without_alter_on_the_cluster_acls_cannot_be_changed(secured: Secured) -> None:
    refused = secured.stratalog("alice", "acls", "add", "--allow-principal", "User:alice",
                                "--operation", "All", "--topic", "*")
    assert refused.returncode == 1
    assert "NOT_AUTHORIZED" in refused.stderr.decode()
    assert "User:alice may not ALTER Cluster:kafka-cluster" in refused.stderr.decode()
    listed = secured.stratalog("admin", "acls", "list", "--principal", "User:alice", "--json")
    assert listed.returncode == 0, listed.stderr.decode()


def test_quotas_are_per_principal(secured: Secured) -> None:
    with secured.client("admin") as admin:
        admin.create_topic("quota-per-principal")
        admin.create_acls([allow("User:*", "quota-per-principal", AclOperation.WRITE)])
    value = b"v" * 40_000
    with secured.client("alice") as alice, secured.client("bob") as bob:
        assert max(alice.produce("quota-per-principal", 0, [value]).throttle_time_ms
                   for _ in range(10)) > 0  # 400 KB against 100,000 B/s
        assert max(bob.produce("quota-per-principal", 0, [value]).throttle_time_ms
                   for _ in range(10)) == 0  # no quota of bob's


def test_the_principal_of_a_client_certificate(tmp_path: Path, pki: Any) -> None:
    """mTLS: the certificate's subject is the principal ACLs name (commas and all); a
    password sent with the certificate wins, so the super user can still administer."""
    credentials = tmp_path / "credentials.json"
    CredentialFile().with_user("admin", "admin-secret", _ITERATIONS).save(credentials)
    subject = f"User:{pki.CLIENT_SUBJECT}"
    server = launch_server(
        tmp_path / "data", "--authorizer", "acl", "--super-users", "User:admin",
        "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
        "--tls-ca-file", str(pki.ca), "--tls-client-auth", "required",
        "--authentication-credentials-file", str(credentials),
    )
    tls = TlsConfig.from_files(pki.ca, *pki.client)
    try:
        with SyncClient(server.target, tls=tls,
                        auth=Credentials.password("admin", "admin-secret")) as admin:
            admin.create_topic("certs")
            admin.produce("certs", 0, [b"x"])
            admin.create_acls([allow(subject, "certs", AclOperation.READ)])
            assert admin.describe_acls()[0].principal == "User:CN=client-1,O=example"
        with SyncClient(server.target, tls=tls) as client:
            assert client.who_am_i().principal == subject
            assert client.fetch_by_offset("certs", 0, 0).records[0].value == b"x"
            with pytest.raises(NotAuthorizedError):
                client.produce("certs", 0, [b"y"])
    finally:
        assert server.stop() == 0
