"""The broker identity (issue 24): only the cluster's servers may replicate, each as its own node.

Real etcd and real servers on 127.0.0.1, secured as an operator would secure them: TLS on every
listener, and the servers proving who they are to each other with a password
(``inter_broker_user``) or their certificate (mTLS), ACLs on. What is checked is what a client
and an attacker see (statuses and reasons, what Produce acknowledges, what a fetch returns after
a failover), what etcd holds (ISRs, registrations) and the replicas' files; never a private
state.

The certificates are made here: each server needs one that is both a server and a client
certificate (it presents it to its peers), with a subject of its own (``CN=broker-N``).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from stratalog.server.security.credentials import CredentialFile
from stratalog.server.security.principal import Principal
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc, replication_pb2
from tests.integration.conftest import ServerProcess, launch_server

from .conftest import EtcdProcess, metadata, wait_for
from .replica_fetch_call import replica_fetch
from .test_replication import (
    KEYS,
    LAG_FLAGS,
    create_topic,
    error_of,
    etcdctl,
    produce,
    produce_when_ready,
    read_state,
    refused,
    same_log,
)

#: PBKDF2 iterations of the test users: cheap, the cost is not what is tested.
_ITERATIONS = 4096


# ------------------------------------------------------------------------ certificates


@dataclass(frozen=True)
class BrokerPki:
    """A CA and ``(cert, key)`` paths: ``brokers[n]`` (subject ``CN=broker-n``, server and
    client use, SANs localhost and 127.0.0.1), ``admin`` and ``alice`` (client certificates)."""

    ca: Path
    brokers: dict[int, tuple[Path, Path]]
    admin: tuple[Path, Path]
    alice: tuple[Path, Path]


def make_broker_pki(directory: Path, nodes: Sequence[int]) -> BrokerPki:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def builder(subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
                ) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                .issuer_name(issuer).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=30)))

    def write(stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
              ) -> tuple[Path, Path]:
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        return cert_path, key_path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stratalog brokers CA")])
    ca_cert = (builder("stratalog brokers CA", ca_name, ca_key)
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .sign(ca_key, hashes.SHA256()))

    def leaf(stem: str, server: bool) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        made = builder(stem, ca_name, key)
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            made = made.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]), critical=False)
        made = made.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        return write(stem, made.sign(ca_key, hashes.SHA256()), key)

    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return BrokerPki(ca_path, {n: leaf(f"broker-{n}", True) for n in nodes},
                     leaf("admin", False), leaf("alice", False))


# ------------------------------------------------------------------------ clients


@dataclass(frozen=True)
class Caller:
    """How a test client calls a server: over TLS trusting ``ca``, with a client certificate
    and/or a user's password, or neither (anonymous)."""

    ca: Path
    cert: tuple[Path, Path] | None = None
    user: tuple[str, str] | None = None

    def channel(self, server: ServerProcess) -> grpc.Channel:
        key = chain = None
        if self.cert is not None:
            chain, key = self.cert[0].read_bytes(), self.cert[1].read_bytes()
        credentials = grpc.ssl_channel_credentials(self.ca.read_bytes(), key, chain)
        return grpc.secure_channel(server.target, credentials)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...] | None:
        if self.user is None:
            return None
        pair = base64.b64encode(f"{self.user[0]}:{self.user[1]}".encode()).decode()
        return (("authorization", f"Basic {pair}"),)

    def broker(self, server: ServerProcess, method: str, request: object) -> object:
        with self.channel(server) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            return getattr(stub, method)(request, timeout=60, metadata=self.metadata)

    def produce(self, server: ServerProcess, topic: str, values: list[bytes]
                ) -> pb.ProduceResponse:
        return self.broker(server, "Produce", pb.ProduceRequest(  # type: ignore[return-value]
            topic=topic, partition=0, acks=-1, records=[pb.Record(value=v) for v in values]))

    def values(self, server: ServerProcess, topic: str) -> list[bytes]:
        response = self.broker(server, "FetchByOffset", pb.FetchByOffsetRequest(
            topic=topic, partition=0, offset=0, format=pb.FETCH_FORMAT_RECORDS))
        return [record.value for record in response.records]  # type: ignore[attr-defined]

    def replica_fetch(self, server: ServerProcess, topic: str, replica_id: int, epoch: int,
                      fetch_offset: int) -> replication_pb2.PartitionData:
        """A follower's fetch, as the probe of issue 24 sent it: from ``fetch_offset`` (the
        leader's end: "I have everything"), at the current epoch, without waiting."""
        with self.channel(server) as channel:
            return replica_fetch(channel, topic, replica_id, epoch, metadata=self.metadata,
                                 fetch_offset=fetch_offset, last_fetched_epoch=epoch)


def produced_when_ready(caller: Caller, server: ServerProcess, topic: str,
                        values: list[bytes]) -> pb.ProduceResponse:
    """acks=all Produce once ``server`` leads with its ISR (until then it refuses)."""
    answer: list[pb.ProduceResponse] = []

    def attempt() -> bool:
        try:
            answer.append(caller.produce(server, topic, values))
        except grpc.RpcError as exc:
            reason, _ = error_of(exc)
            assert reason in ("NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION",
                              "LEADER_NOT_AVAILABLE", "NOT_ENOUGH_REPLICAS",
                              "REQUEST_TIMED_OUT"), (reason, exc)
            return False
        return True

    wait_for(attempt, f"an acks=all produce to {server.target} accepted")
    return answer[0]


def permission_denied(call: Callable[[], object]) -> str:
    """Run ``call``; the message of the PERMISSION_DENIED + NOT_AUTHORIZED it must fail with."""
    try:
        call()
    except grpc.RpcError as exc:
        assert exc.code() is grpc.StatusCode.PERMISSION_DENIED, exc
        assert error_of(exc)[0] == "NOT_AUTHORIZED", exc
        return exc.details() or ""
    raise AssertionError("the call succeeded")


def registration(etcd: EtcdProcess, node_id: int) -> str:
    return etcdctl(etcd, "get", "--print-value-only", KEYS.broker(node_id).decode()).strip()


# ------------------------------------------------------------------------ tests


def test_nobody_but_the_follower_puts_it_back_into_the_isr(
    etcd: EtcdProcess, start_member, pki, tmp_path: Path,
) -> None:
    """Issue 24, finding 1, replayed on a secured cluster: TLS, a password and a token (one
    principal per server), ACLs, and the ACL that docs/cluster.md used to ask for (CLUSTER_ACTION for
    User:ANONYMOUS), plus the same for an ordinary user: neither may fetch as the follower."""
    store = CredentialFile()
    for user in ("broker-1", "admin", "alice"):
        store = store.with_user(user, f"{user}-secret", _ITERATIONS)
    # Server 2 proves who it is with a token rather than a password.
    store, token = store.with_new_token(Principal.user("broker-2"), _ITERATIONS)
    credentials = tmp_path / "credentials.json"
    store.save(credentials)
    (tmp_path / "broker-1.password").write_text("broker-1-secret\n")
    (tmp_path / "broker-2.token").write_text(token + "\n")
    proof = {1: ("--inter-broker-user", "broker-1",
                 "--inter-broker-password-file", str(tmp_path / "broker-1.password")),
             2: ("--inter-broker-token-file", str(tmp_path / "broker-2.token"))}
    servers = {
        n: start_member(
            n, "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
            "--inter-broker-tls-ca-file", str(pki.ca),
            "--authentication-credentials-file", str(credentials),
            "--authentication-anonymous", "allowed", "--authorizer", "acl",
            "--super-users", "User:admin", "--broker-principals", "User:broker-1;User:broker-2",
            *proof[n], *LAG_FLAGS,
        )
        for n in (1, 2)
    }
    admin = Caller(pki.ca, user=("admin", "admin-secret"))
    alice = Caller(pki.ca, user=("alice", "alice-secret"))
    anonymous = Caller(pki.ca)
    broker_1 = Caller(pki.ca, user=("broker-1", "broker-1-secret"))
    leader, follower = servers[1], servers[2]
    # The old advice, given on the leader: the ACLs let both call ReplicaFetch.
    admin.broker(leader, "CreateAcls", pb.CreateAclsRequest(creations=[
        pb.AclBinding(resource_type=pb.RESOURCE_TYPE_CLUSTER, resource_name="kafka-cluster",
                      pattern_type=pb.PATTERN_TYPE_LITERAL, principal=principal, host="*",
                      operation=pb.ACL_OPERATION_CLUSTER_ACTION,
                      permission_type=pb.ACL_PERMISSION_TYPE_ALLOW)
        for principal in ("User:ANONYMOUS", "User:alice")]))
    assert '"principal": "User:broker-2"' in registration(etcd, 2)

    create_topic(etcd, "ledger", [1, 2], {"min.insync.replicas": "2"})
    assert produced_when_ready(admin, leader, "ledger", [b"a"]).base_offset == 0
    assert admin.produce(leader, "ledger", [b"b"]).base_offset == 1
    wait_for(lambda: same_log([leader, follower], "ledger"), "both replicas hold a, b")

    # A server's principal fetches as its own node only.
    message = permission_denied(lambda: broker_1.replica_fetch(leader, "ledger", 2, 0, 0))
    assert "User:broker-1 may not fetch as replica 2: node 2 registered as User:broker-2" in (
        message)

    os.kill(follower.process.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: read_state(etcd, "ledger", 0).isr == (1,), "node 2 out of the ISR")
        # The probe: ReplicaFetch as node 2, claiming the leader's end, in a loop. Each is
        # refused before it reaches the partition, and reads nothing (finding 2 too).
        for _ in range(10):
            for caller, principal in ((anonymous, "User:ANONYMOUS"), (alice, "User:alice")):
                message = permission_denied(
                    lambda c=caller: c.replica_fetch(leader, "ledger", 2, 0, 2))
                assert f"{principal} is not a server of this cluster" in message
        assert read_state(etcd, "ledger", 0).isr == (1,)
        # With the follower out, acks=all is refused, nothing written; the ISR did not move.
        for _ in range(3):
            reason, _ = refused(lambda: admin.produce(leader, "ledger", [b"lost?"]))
            assert reason == "NOT_ENOUGH_REPLICAS"
        assert read_state(etcd, "ledger", 0).isr == (1,)
    finally:
        os.kill(follower.process.pid, signal.SIGCONT)

    # The real follower rejoins by itself (its own credentials), and then the leader dies:
    # the follower, elected, holds everything that was ever acknowledged.
    wait_for(lambda: read_state(etcd, "ledger", 0).isr == (1, 2), "node 2 back in the ISR")
    assert admin.produce(leader, "ledger", [b"c"]).base_offset == 2
    leader.kill()
    wait_for(lambda: read_state(etcd, "ledger", 0).leader == 2, "node 2 elected")
    wait_for(lambda: _readable(admin, follower, "ledger") == [b"a", b"b", b"c"],
             "every acknowledged record on the new leader")


def _readable(caller: Caller, server: ServerProcess, topic: str) -> list[bytes] | None:
    try:
        return caller.values(server, topic)
    except grpc.RpcError:
        return None  # not leading yet


def test_a_cluster_secured_with_mtls_and_acls_replicates_over_tls(
    etcd: EtcdProcess, start_member, tmp_path: Path,
) -> None:
    """Three servers, each with a certificate of its own (CN=broker-N) that it serves with and
    presents to its peers; client certificates required; ACLs on. An RF=3 topic keeps all
    three in its ISR; acks=all writes reach every replica."""
    certificates = make_broker_pki(tmp_path / "pki", (1, 2, 3))
    principals = ";".join(f"User:CN=broker-{n}" for n in (1, 2, 3))
    servers = {
        n: start_member(
            n, "--tls-cert-file", str(certificates.brokers[n][0]),
            "--tls-key-file", str(certificates.brokers[n][1]),
            "--tls-ca-file", str(certificates.ca), "--tls-client-auth", "required",
            "--authorizer", "acl", "--super-users", "User:CN=admin",
            "--broker-principals", principals, "--replica-lag-time-max-ms", "5000",
        )
        for n in (1, 2, 3)
    }
    for n in (1, 2, 3):
        assert f'"principal": "User:CN=broker-{n}"' in registration(etcd, n)
    admin = Caller(certificates.ca, cert=certificates.admin)
    admin.broker(servers[1], "CreateTopic", pb.CreateTopicRequest(
        name="payments", partitions=1, replication_factor=3,
        configs={"min.insync.replicas": "3"}))
    wait_for(lambda: sorted(read_state(etcd, "payments", 0).isr) == [1, 2, 3],
             "all three replicas in the ISR")
    leader = servers[read_state(etcd, "payments", 0).leader]
    produced_when_ready(admin, leader, "payments", [b"p1", b"p2"])
    assert admin.produce(leader, "payments", [b"p3"]).base_offset == 2
    assert admin.values(leader, "payments") == [b"p1", b"p2", b"p3"]
    # acks=all with min.insync.replicas=3, a follower that cannot fetch out of the ISR within
    # 5 s (acks=all waits for it before that): p3 was acknowledged, so all three fetched it
    # over TLS. Byte for byte:
    wait_for(lambda: same_log(list(servers.values()), "payments"), "the same log on 3 servers")
    assert sorted(read_state(etcd, "payments", 0).isr) == [1, 2, 3]
    # SIGHUP: every server reads its files again and reaches its peers on new channels.
    for server in servers.values():
        os.kill(server.process.pid, signal.SIGHUP)
    for server in servers.values():
        wait_for(lambda s=server: "reloaded the inter-broker TLS and credential files"
                 in s.log_text(), "the inter-broker files reloaded")
    assert admin.produce(leader, "payments", [b"p4"]).base_offset == 3
    wait_for(lambda: same_log(list(servers.values()), "payments"), "p4 on 3 servers")

    # An ordinary client certificate (no ACL gives it CLUSTER_ACTION: the authorizer refuses
    # it first), and a server's certificate posing as another node (a super user: the ACLs
    # let it through, the broker identity does not).
    alice = Caller(certificates.ca, cert=certificates.alice)
    epoch = read_state(etcd, "payments", 0).leader_epoch
    message = permission_denied(lambda: alice.replica_fetch(leader, "payments", 2, epoch, 0))
    assert "User:CN=alice may not CLUSTER_ACTION Cluster:kafka-cluster" in message
    other = next(n for n in (1, 2, 3) if servers[n] is not leader)
    poser = next(n for n in (1, 2, 3) if n != other and servers[n] is not leader)
    broker = Caller(certificates.ca, cert=certificates.brokers[poser])
    message = permission_denied(lambda: broker.replica_fetch(leader, "payments", other, epoch, 0))
    assert f"may not fetch as replica {other}" in message


def test_a_server_that_cannot_reach_its_peers_as_a_broker_does_not_start(
    etcd: EtcdProcess, tmp_path: Path,
) -> None:
    """A certificate that is not among broker_principals: its fetches would all be refused,
    so the start fails and says why (before it registers). Likewise a TLS handshake that its
    peers would refuse."""
    certificates = make_broker_pki(tmp_path / "pki", (1,))
    with pytest.raises(AssertionError) as failed:
        server = launch_server(
            tmp_path / "node-1", "--cluster", etcd.url, "--node-id", "1",
            "--tls-cert-file", str(certificates.brokers[1][0]),
            "--tls-key-file", str(certificates.brokers[1][1]),
            "--tls-ca-file", str(certificates.ca), "--tls-client-auth", "required",
            "--broker-principals", "User:CN=broker-2",
        )
        # Printed its port before joining: the join fails after.
        wait_for(lambda: server.process.poll() is not None, "the server exited", 30)
        assert server.process.returncode == 1
        raise AssertionError(server.log_text())
    assert ("authenticates to its peers as User:CN=broker-1, which is not one of"
            " broker_principals") in str(failed.value)
    assert registration(etcd, 1) == ""
    # TLS on and no broker principals: a peer's handshake that cannot succeed (nothing says
    # which CA signed the servers' certificates) fails the start too, instead of leaving every
    # ISR shrunk to its leader.
    with pytest.raises(AssertionError, match=r"(?s)cannot call itself at 127\.0\.0\.1:\d+ as"
                                             r" its peers will call it.*CERTIFICATE_VERIFY"):
        launch_server(tmp_path / "node-2", "--cluster", etcd.url, "--node-id", "2",
                      "--tls-cert-file", str(certificates.brokers[1][0]),
                      "--tls-key-file", str(certificates.brokers[1][1]))
    assert registration(etcd, 2) == ""


def test_an_unsecured_cluster_lets_no_departed_node_back_into_the_isr(
    etcd: EtcdProcess, start_member,
) -> None:
    """No security at all (the test default): replication works as before, and the cluster
    trusts its network; still, a fetch in the name of a node that is not a live server (its
    registration expired) is refused, and cannot move the ISR or the high watermark."""
    servers = {n: start_member(n, *LAG_FLAGS) for n in (1, 2)}
    leader = servers[1]
    create_topic(etcd, "audit", [1, 2], {"min.insync.replicas": "2"})
    assert produce_when_ready(leader, "audit", [b"a"]).base_offset == 0
    # No principal registered without broker_principals: nothing to check a fetch against.
    assert json.loads(registration(etcd, 2)) == {
        "node_id": 2, "address": servers[2].target,
        "kafka_address": servers[2].kafka_bootstrap}  # its Kafka listener (issue 28)
    servers[2].kill()
    wait_for(lambda: read_state(etcd, "audit", 0).isr == (1,), "node 2 out of the ISR")
    wait_for(lambda: [b.node_id for b in metadata(leader).brokers] == [1],
             "the leader's broker list without node 2")

    with grpc.insecure_channel(leader.target) as channel:
        for replica_id in (2, 3):  # gone, and never a server
            reason, _ = refused(lambda r=replica_id: replica_fetch(
                channel, "audit", r, 0, fetch_offset=1, last_fetched_epoch=0))
            assert reason == "NOT_LEADER_OR_FOLLOWER"
    assert read_state(etcd, "audit", 0).isr == (1,)
    reason, _ = refused(lambda: produce(leader, "audit", [b"b"]))
    assert reason == "NOT_ENOUGH_REPLICAS"
    assert "node 2 is not a live server of the cluster" in _replica_fetch_details(leader, 2)


def _replica_fetch_details(server: ServerProcess, replica_id: int) -> str:
    with grpc.insecure_channel(server.target) as channel:
        try:
            replica_fetch(channel, "audit", replica_id, 0, fetch_offset=1, last_fetched_epoch=0)
        except grpc.RpcError as exc:
            return exc.details() or ""
    raise AssertionError("the fetch succeeded")
