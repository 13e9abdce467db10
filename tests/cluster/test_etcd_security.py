"""A server reaching etcd over TLS with a client certificate, with etcd credentials, and
through the second of two endpoints; and the start refused, with the cause named, when etcd's
certificate, its client-certificate check or its auth refuses the server
(server/cluster/etcd_client.py, session.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.integration.conftest import ServerProcess, launch_server

from .conftest import (
    SESSION_TIMEOUT_MS,
    EtcdProcess,
    free_port,
    metadata,
    start_etcd_cluster,
    wait_for,
)

if TYPE_CHECKING:
    from tests.conftest import TestPki

USER, PASSWORD = "stratalog-1", "etcd-secret"


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """``launch(url, node_id, *flags)``: a cluster server of its own directory; killed after."""
    started: list[ServerProcess] = []

    def start(url: str, node_id: int, *flags: str) -> ServerProcess:
        server = launch_server(
            tmp_path / f"node-{node_id}-{len(started)}", "--cluster", url, "--node-id",
            str(node_id), "--cluster-session-timeout-ms", str(SESSION_TIMEOUT_MS), *flags,
        )
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.kill()


def refused_start(directory: Path, url: str, *flags: str) -> str:
    """Start a server that must not start; its log (AssertionError if it served)."""
    try:
        launch_server(directory, "--cluster", url, "--node-id", "9", *flags)
    except AssertionError as exc:
        message = str(exc)
    else:
        raise AssertionError(f"a server started with --cluster {url} {' '.join(flags)}")
    assert "exited with 1" in message, message
    return message


def joined(server: ServerProcess, node_id: int) -> None:
    wait_for(lambda: [b.node_id for b in metadata(server).brokers] == [node_id],
             f"node {node_id} registered")


def test_a_server_joins_an_etcd_over_tls_with_a_client_certificate(
        etcd_tls: EtcdProcess, pki: TestPki, launch, tmp_path: Path) -> None:
    server = launch(etcd_tls.url, 1, *etcd_tls.server_tls_flags())
    joined(server, 1)
    # etcd holds its registration: read back over TLS by etcdctl.
    assert "/stratalog/brokers/1" in etcd_tls.etcdctl("get", "--prefix", "/stratalog/brokers/")


def test_tls_failures_are_refused_at_start_and_named(
        etcd_tls: EtcdProcess, pki: TestPki, tmp_path: Path) -> None:
    ca, cert, key = str(pki.ca), pki.client[0], pki.client[1]
    # A client certificate of another CA: etcd's --client-cert-auth refuses it.
    message = refused_start(tmp_path / "stranger", etcd_tls.url, "--etcd-ca-file", ca,
                            "--etcd-cert-file", str(pki.stranger[0]),
                            "--etcd-key-file", str(pki.stranger[1]))
    assert "no TLS connection to any etcd endpoint" in message, message
    assert "the TLS handshake failed" in message and "BAD_CERTIFICATE" in message
    assert "etcd_cert_file chains to etcd's --trusted-ca-file" in message
    # No client certificate at all: refused the same way.
    message = refused_start(tmp_path / "no-cert", etcd_tls.url, "--etcd-ca-file", ca)
    assert "the TLS handshake failed" in message, message
    # etcd's certificate checked against another CA: it does not verify.
    message = refused_start(tmp_path / "other-ca", etcd_tls.url, "--etcd-ca-file",
                            str(pki.other_ca), "--etcd-cert-file", str(cert),
                            "--etcd-key-file", str(key))
    assert "CERTIFICATE_VERIFY_FAILED" in message and "etcd_ca_file" in message, message
    # Plaintext to a TLS port.
    plaintext = etcd_tls.url.replace("etcds://", "etcd://")
    message = refused_start(tmp_path / "plaintext", plaintext)
    assert "write etcds://" in message, message


def test_a_server_joins_with_etcd_credentials_and_wrong_ones_are_refused(
        etcd: EtcdProcess, launch, tmp_path: Path) -> None:
    etcd.enable_auth(USER, PASSWORD)
    password_file = tmp_path / "etcd.password"
    password_file.write_text(PASSWORD + "\n")
    server = launch(etcd.url, 1, "--etcd-username", USER,
                    "--etcd-password-file", str(password_file))
    joined(server, 1)
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    message = refused_start(tmp_path / "wrong", etcd.url, "--etcd-username", USER,
                            "--etcd-password-file", str(wrong))
    assert f"refused etcd_username '{USER}'" in message, message
    assert "authentication failed" in message
    # No credentials while etcd's auth is on.
    message = refused_start(tmp_path / "anonymous", etcd.url)
    assert "has authentication enabled" in message, message
    assert "set etcd_username and etcd_password_file" in message
    # Right credentials, but the user's role does not cover this cluster's prefix.
    message = refused_start(tmp_path / "prefix", etcd.url, "--etcd-username", USER,
                            "--etcd-password-file", str(password_file),
                            "--cluster-prefix", "/another")
    assert f"etcd user '{USER}' may not read and write /another" in message, message


def test_two_endpoints_the_first_down_the_server_joins_through_the_second(
        etcd: EtcdProcess, launch, tmp_path: Path) -> None:
    down = free_port()  # nothing listens there
    server = launch(f"etcd://127.0.0.1:{down},127.0.0.1:{etcd.client_port}", 1)
    joined(server, 1)
    # Every endpoint down: unreachable, named per endpoint.
    message = refused_start(tmp_path / "none", f"etcd://127.0.0.1:{down}")
    assert "no etcd endpoint answered" in message and f"127.0.0.1:{down}" in message, message


def test_when_the_etcd_member_in_use_dies_the_server_goes_on_through_the_next(
        launch, tmp_path: Path) -> None:
    members = start_etcd_cluster(tmp_path / "etcd-cluster", 3)
    try:
        url = "etcd://" + ",".join(f"127.0.0.1:{m.client_port}" for m in members)
        server = launch(url, 1)
        joined(server, 1)
        members[0].stop()  # the member the server uses: the first that answered
        # The server moves to the next member: its lease lives on there, and etcd writes
        # through it work.
        wait_for(lambda: f"using 127.0.0.1:{members[1].client_port}" in server.log_text(),
                 "the session moved to the second member")

        def created() -> bool:
            with grpc.insecure_channel(server.target) as channel:
                try:
                    broker_pb2_grpc.BrokerStub(channel).CreateTopic(
                        pb.CreateTopicRequest(name="after-failover", partitions=1), timeout=10)
                except grpc.RpcError as err:
                    return err.code() == grpc.StatusCode.ALREADY_EXISTS
                return True

        wait_for(created, "CreateTopic through the second member")
        registered = members[1].etcdctl("get", "--print-value-only", "/stratalog/brokers/1")
        assert server.target in registered
        assert [b.node_id for b in metadata(server).brokers] == [1]
    finally:
        for member in members:
            member.discard()


def test_after_an_etcd_restart_the_server_authenticates_again(
        etcd: EtcdProcess, launch, tmp_path: Path) -> None:
    etcd.enable_auth(USER, PASSWORD)
    password_file = tmp_path / "etcd.password"
    password_file.write_text(PASSWORD + "\n")
    server = launch(etcd.url, 1, "--etcd-username", USER,
                    "--etcd-password-file", str(password_file))
    joined(server, 1)
    # etcd's simple tokens live in its memory: after a restart the server's token is refused
    # ("invalid auth token") until it authenticates again.
    etcd.stop()
    etcd.start()

    def created() -> bool:
        with grpc.insecure_channel(server.target) as channel:
            try:
                broker_pb2_grpc.BrokerStub(channel).CreateTopic(
                    pb.CreateTopicRequest(name="after-restart", partitions=1), timeout=10)
            except grpc.RpcError as err:  # etcd refusing the old token: COORDINATION_UNAVAILABLE
                return err.code() == grpc.StatusCode.ALREADY_EXISTS
            return True

    wait_for(created, "CreateTopic through etcd after its restart")
    assert "/stratalog/topics/after-restart" in etcd.etcdctl(
        "get", "--prefix", "--keys-only", "/stratalog/topics/", user="root:root-password")
    assert "no longer takes this server's auth token" in server.log_text()
