"""The Kafka listener's security against real clients: TLS and its reload, mTLS principals,
SASL PLAIN and SCRAM-SHA-256 over TLS (SCRAM-SHA-512, SaslHandshake v0 and re-authentication:
test_kafka_sasl.py), the refusals before authentication, ACLs managed
through Kafka's admin API and enforced on both listeners, and produce quotas
(docs/kafka-protocol.md, "Security").

Certificates are the session's test PKI (tests/conftest.py); credential files are made as the
gRPC authentication tests make them (with fewer iterations than the CLI's default: the tests
check the rules, not the cost).
"""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

from stratalog.client import Credentials, SyncClient, TlsConfig
from stratalog.client import acls as client_acls
from stratalog.client.errors import StratalogError
from stratalog.records.builder import build_batch
from stratalog.server.security.credentials import CredentialFile
from tests.integration.conftest import ServerProcess, launch_server, wait_until

_ITERATIONS = 4096
_WAIT_S = 30.0


def _topic(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _credentials(directory: Path) -> Path:
    path = directory / "credentials.json"
    (CredentialFile()
     .with_user("alice", "alice-secret", _ITERATIONS)
     .with_user("admin", "admin-secret", _ITERATIONS)).save(path)
    return path


def _tls_flags(pki, cert: tuple[Path, Path] | None = None) -> tuple[str, ...]:
    cert = cert or pki.server
    return ("--tls-cert-file", str(cert[0]), "--tls-key-file", str(cert[1]))


def sasl_settings(server: ServerProcess, pki, mechanism: str, user: str, password: str,
          **more: object) -> dict[str, object]:
    """librdkafka's settings for SASL_SSL as ``user``."""
    return {"bootstrap.servers": server.kafka_bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca), "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, **more}


def librdkafka_produce(config: dict[str, object], topic: str, values: list[bytes]) -> list[KafkaError]:
    """Produce ``values`` with librdkafka; the delivery errors (empty: all delivered)."""
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: object) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer({**config, "message.timeout.ms": 20_000})
    for value in values:
        producer.produce(topic, value=value, on_delivery=delivered)
    assert producer.flush(_WAIT_S) == 0, "records left undelivered"
    return errors


def _consume(config: dict[str, object], topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": "g-" + topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + _WAIT_S
        while len(values) < count:
            assert time.monotonic() < deadline, f"only {len(values)} of {count} records read"
            message = consumer.poll(1)
            if message is None:
                continue
            assert message.error() is None, message.error()
            values.append(message.value())
    finally:
        consumer.close()
    return values


def _first_error(config: dict[str, object]) -> KafkaError:
    """The first error librdkafka reports for a client with ``config`` (e.g. a failed
    authentication), waiting at most _WAIT_S."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + _WAIT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    return errors[0]


# ---------------------------------------------------------------- SASL over TLS


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki) -> Iterator[ServerProcess]:
    """TLS, a credential file (alice, admin), the ACL authorizer with admin a super user and
    resources without ACLs open to everyone."""
    directory = tmp_path_factory.mktemp("kafka-secured")
    server = launch_server(
        directory / "data", *_tls_flags(pki),
        "--authentication-credentials-file", str(_credentials(directory)),
        "--authorizer", "acl", "--super-users", "User:admin",
        "--allow-everyone-if-no-acl-found", "true",
    )
    yield server
    assert server.stop(signal.SIGTERM) == 0, server.log_text()[-4000:]


def test_confluent_scram_sha_256_over_tls_produces_and_consumes(secured, pki):
    topic = _topic()
    config = sasl_settings(secured, pki, "SCRAM-SHA-256", "alice", "alice-secret")
    values = [f"v{i}".encode() for i in range(20)]
    assert librdkafka_produce(config, topic, values) == []
    assert _consume(config, topic, 20) == values


def test_confluent_plain_over_tls_produces(secured, pki):
    topic = _topic()
    assert librdkafka_produce(sasl_settings(secured, pki, "PLAIN", "alice", "alice-secret"), topic, [b"x"]) == []


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_a_wrong_password_fails_authentication(secured, pki, mechanism):
    error = _first_error(sasl_settings(secured, pki, mechanism, "alice", "wrong"))
    assert error.code() == KafkaError._AUTHENTICATION, error
    # The server's message names no user: the same for a user that does not exist.
    unknown = _first_error(sasl_settings(secured, pki, mechanism, "nobody", "wrong"))
    assert unknown.code() == KafkaError._AUTHENTICATION, unknown
    assert "alice" not in error.str() and "nobody" not in unknown.str()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_kafka_python_sasl_ssl(secured, pki, mechanism):
    topic = _topic()
    settings = dict(bootstrap_servers=secured.kafka_bootstrap, security_protocol="SASL_SSL",
                    ssl_cafile=str(pki.ca), sasl_mechanism=mechanism,
                    sasl_plain_username="alice", sasl_plain_password="alice-secret")
    producer = KafkaProducer(acks="all", enable_idempotence=False, **settings)
    offsets = [producer.send(topic, value=f"k{i}".encode()).get(timeout=_WAIT_S).offset
               for i in range(5)]
    producer.close()
    assert offsets == list(range(5))
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", group_id=None,
                             consumer_timeout_ms=10_000, **settings)
    values = [m.value for _, m in zip(range(5), consumer, strict=False)]
    consumer.close()
    assert values == [f"k{i}".encode() for i in range(5)]


def _frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    client_id = b"raw"
    head = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(head) + len(body)) + head + body


def _tls_socket(server: ServerProcess, pki) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(pki.ca))
    sock = socket.create_connection(("127.0.0.1", server.kafka_port), timeout=_WAIT_S)
    return context.wrap_socket(sock, server_hostname="localhost")


def test_metadata_before_authentication_closes_the_connection(secured, pki):
    with _tls_socket(secured, pki) as tls:
        tls.sendall(_frame(3, 1, MetadataRequest(topics=None).encode(version=1)))
        assert tls.recv(4096) == b"", "answered a Metadata request before SASL"


# ---------------------------------------------------------------- ACLs through Kafka's admin API


def _admin(server: ServerProcess, pki) -> AdminClient:
    return AdminClient(sasl_settings(server, pki, "SCRAM-SHA-256", "admin", "admin-secret"))


def test_acls_through_the_admin_client_are_the_grpc_sides_and_enforced_on_both(secured, pki):
    topic = _topic("acl")
    admin = _admin(secured, pki)
    deny = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)
    for future in admin.create_acls([deny], request_timeout=_WAIT_S).values():
        assert future.result() is None
    described = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY), request_timeout=_WAIT_S).result()
    assert described == [deny]
    tls = TlsConfig.from_files(pki.ca)
    with SyncClient(secured.target, tls=tls,
                    auth=Credentials.password("admin", "admin-secret")) as client:
        seen = client.describe_acls(client_acls.AclBindingFilter(resource_name=topic))
    assert [(b.principal, b.operation.name, b.permission_type.name) for b in seen] == [
        ("User:alice", "WRITE", "DENY")]
    # Enforced on the Kafka listener ...
    alice = sasl_settings(secured, pki, "SCRAM-SHA-256", "alice", "alice-secret")
    errors = librdkafka_produce(alice, topic, [b"denied"])
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], errors
    # ... and on the gRPC one.
    with SyncClient(secured.target, tls=tls,
                    auth=Credentials.password("alice", "alice-secret")) as client, \
            pytest.raises(StratalogError) as refused:
        client.produce(topic, 0, [b"denied"])
    assert "NOT_AUTHORIZED" in repr(refused.value) or "denied" in str(refused.value).lower()
    deleted = admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None, AclOperation.ANY,
        AclPermissionType.ANY)], request_timeout=_WAIT_S)
    assert [f.result() for f in deleted.values()] == [[deny]]
    assert librdkafka_produce(alice, topic, [b"allowed"]) == []


def test_acl_calls_need_rights_on_the_cluster(secured, pki):
    alice = AdminClient(sasl_settings(secured, pki, "SCRAM-SHA-256", "alice", "alice-secret"))
    # No ACL names the cluster and everyone may use what no ACL names: give the cluster one.
    admin = _admin(secured, pki)
    grant = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                       "User:admin", "*", AclOperation.ALL, AclPermissionType.ALLOW)
    for future in admin.create_acls([grant], request_timeout=_WAIT_S).values():
        future.result()
    try:
        binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL,
                             "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
        for future in alice.create_acls([binding], request_timeout=_WAIT_S).values():
            with pytest.raises(KafkaException) as refused:
                future.result()
            assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    finally:
        admin.delete_acls([AclBindingFilter(
            ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, None, None,
            AclOperation.ANY, AclPermissionType.ANY)], request_timeout=_WAIT_S)


# ---------------------------------------------------------------- plaintext


def _answer(sock: socket.socket, response_class: type, version: int) -> object | None:
    """The next answer on ``sock`` (response header v0: not a flexible version), or None at
    EOF."""
    def read(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                return data
            data += chunk
        return data

    head = read(4)
    if len(head) < 4:
        return None
    frame = read(struct.unpack(">i", head)[0])
    return response_class.decode(frame[4:], version=version)


def test_plain_over_plaintext_is_refused_without_a_credential_file(server):
    with socket.create_connection(("127.0.0.1", server.kafka_port), timeout=_WAIT_S) as sock:
        sock.sendall(_frame(17, 1, SaslHandshakeRequest(mechanism="PLAIN").encode(version=1)))
        answer = _answer(sock, SaslHandshakeResponse, 1)
        assert answer is not None
        assert (answer.error_code, answer.mechanisms) == (33, [])  # UNSUPPORTED_SASL_MECHANISM
        assert _answer(sock, SaslHandshakeResponse, 1) is None  # and the connection closed
    assert "asked for SASL mechanism 'PLAIN': the server has no credential file" in server.log_text()


def test_plain_over_plaintext_where_allowed(start_server, tmp_path):
    server = start_server(
        tmp_path / "data", "--authentication-credentials-file", str(_credentials(tmp_path)),
        "--authentication-plaintext-allowed", "true")
    config = {"bootstrap.servers": server.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": "alice",
              "sasl.password": "alice-secret"}
    assert librdkafka_produce(config, _topic(), [b"x"]) == []


# ---------------------------------------------------------------- mTLS


def test_mtls_principal_is_what_acls_see(start_server, tmp_path, pki):
    server = start_server(
        tmp_path / "data", *_tls_flags(pki), "--tls-ca-file", str(pki.ca),
        "--tls-client-auth", "required",
        "--authentication-credentials-file", str(_credentials(tmp_path)),
        "--authorizer", "acl", "--super-users", "User:admin")
    allowed, denied = _topic("mine"), _topic("theirs")
    principal = f"User:{pki.CLIENT_SUBJECT}"
    tls = TlsConfig.from_files(pki.ca, *pki.client)
    with SyncClient(server.target, tls=tls,
                    auth=Credentials.password("admin", "admin-secret")) as client:
        client.create_topic(allowed)
        client.create_topic(denied)
        client.create_acls([client_acls.AclBinding(
            client_acls.ResourceType.TOPIC, allowed, client_acls.PatternType.LITERAL,
            principal, "*", client_acls.AclOperation.WRITE,
            client_acls.AclPermissionType.ALLOW)])
    config = {"bootstrap.servers": server.kafka_bootstrap, "security.protocol": "SSL",
              "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(pki.client[0]),
              "ssl.key.location": str(pki.client[1])}
    assert librdkafka_produce(config, allowed, [b"ok"]) == []
    errors = librdkafka_produce(config, denied, [b"no"])
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], errors
    # A client without a certificate does not get through the handshake.
    error = _first_error({"bootstrap.servers": server.kafka_bootstrap,
                          "security.protocol": "SSL", "ssl.ca.location": str(pki.ca)})
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


# ---------------------------------------------------------------- TLS reload


def test_new_kafka_connections_get_the_certificate_reloaded_on_sighup(start_server, tmp_path,
                                                                      pki):
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    shutil.copy(pki.server[0], cert)
    shutil.copy(pki.server[1], key)
    server = start_server(tmp_path / "data", *_tls_flags(pki, (cert, key)))

    def served() -> bytes:
        with _tls_socket(server, pki) as tls:
            certificate = tls.getpeercert(binary_form=True)
        assert certificate is not None
        return certificate

    def der(path: Path) -> bytes:
        return ssl.PEM_cert_to_DER_cert(path.read_text())

    assert served() == der(pki.server[0])
    config = {"bootstrap.servers": server.kafka_bootstrap, "security.protocol": "SSL",
              "ssl.ca.location": str(pki.ca)}
    assert librdkafka_produce(config, _topic(), [b"before"]) == []
    shutil.copy(pki.server2[0], cert)
    shutil.copy(pki.server2[1], key)
    server.process.send_signal(signal.SIGHUP)
    wait_until(lambda: "reloaded the TLS certificate" in server.log_text(), "the TLS reload")
    assert served() == der(pki.server2[0])
    assert librdkafka_produce(config, _topic(), [b"after"]) == []


# ---------------------------------------------------------------- quotas


@pytest.mark.serial
def test_a_produce_quota_throttles_a_confluent_producer(start_server, tmp_path):
    rate = 200_000
    # Windows of 100 ms: the rate is measured over at least a second (10 windows), so a
    # megabyte is past the first burst the quota lets through.
    server = start_server(tmp_path / "data", "--quota-producer-byte-rate", str(rate),
                          "--quota-window-size-ms", "100")
    throttles: list[int] = []
    lock = threading.Lock()

    def throttled(event: object) -> None:
        with lock:
            throttles.append(event.throttle_time)  # type: ignore[attr-defined]

    topic = _topic()
    value = b"x" * 1000
    total = 1000  # 1 MB: five seconds at the quota
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 5,
                         "batch.size": 16384, "throttle_cb": throttled})
    started = time.monotonic()
    for _ in range(total):
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    elapsed = time.monotonic() - started
    producer.poll(0)
    with lock:
        assert throttles and max(throttles) > 0, "no throttle_time_ms reported"
    measured = total * len(value) / elapsed
    # The quota's window lets the first burst through; past it the rate is held near the
    # quota (Kafka's throttling is approximate): well under the unthrottled rate.
    assert measured < 2.0 * rate, f"{measured:.0f} B/s against a quota of {rate} B/s"


# ---------------------------------------------------------------- authorization rules


def test_transactional_batches_without_a_transactional_id_are_refused(server):
    """Kafka's handleProduceRequest: transactional records need WRITE on the transactional id
    the request names, and a request that names none has none."""
    batch = build_batch([(1_700_000_000_000, None, b"v", [])], producer_id=7,
                        producer_epoch=0, base_sequence=0, is_transactional=True)
    topic_data = ProduceRequest.TopicProduceData(
        name=_topic(), partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000,
                             topic_data=[topic_data])
    with socket.create_connection(("127.0.0.1", server.kafka_port), timeout=_WAIT_S) as sock:
        sock.sendall(_frame(0, 8, request.encode(version=8)))
        answer = _answer(sock, ProduceResponse, 8)
    assert answer is not None
    codes = [p.error_code for t in answer.responses for p in t.partition_responses]
    assert codes == [53]  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_metadata_that_would_create_a_topic_the_caller_may_not_create(start_server, tmp_path,
                                                                      pki):
    """Kafka's handleTopicMetadataRequest: a topic to be created automatically by a caller
    without CREATE is answered TOPIC_AUTHORIZATION_FAILED (DESCRIBE alone is not enough)."""
    server = start_server(
        tmp_path / "data", *_tls_flags(pki),
        "--authentication-credentials-file", str(_credentials(tmp_path)),
        "--authorizer", "acl", "--super-users", "User:admin")
    topic = _topic("nocreate")
    tls = TlsConfig.from_files(pki.ca)
    with SyncClient(server.target, tls=tls,
                    auth=Credentials.password("admin", "admin-secret")) as client:
        client.create_acls([client_acls.AclBinding(
            client_acls.ResourceType.TOPIC, topic, client_acls.PatternType.LITERAL,
            "User:alice", "*", client_acls.AclOperation.DESCRIBE,
            client_acls.AclPermissionType.ALLOW)])
    # librdkafka's producer asks with allow_auto_topic_creation (allow.auto.create.topics).
    producer = Producer(sasl_settings(server, pki, "SCRAM-SHA-256", "alice", "alice-secret"))
    answer = producer.list_topics(topic, timeout=_WAIT_S).topics[topic]
    assert answer.error is not None
    assert answer.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, answer.error


def test_failed_exchanges_count_against_their_host(start_server, tmp_path):
    """security/authentication.py's per-host failure limit holds for SASL as for gRPC calls:
    past it, even the right password is refused until the failures age out."""
    server = start_server(
        tmp_path / "data", "--authentication-credentials-file", str(_credentials(tmp_path)),
        "--authentication-plaintext-allowed", "true",
        "--authentication-failures-per-host-max", "2")

    def config(mechanism: str, password: str) -> dict[str, object]:
        return {"bootstrap.servers": server.kafka_bootstrap,
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                "sasl.username": "alice", "sasl.password": password,
                # One attempt each within the test: no reconnection adds a failure.
                "reconnect.backoff.ms": 60_000, "reconnect.backoff.max.ms": 60_000}

    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        error = _first_error(config(mechanism, "wrong"))
        assert error.code() == KafkaError._AUTHENTICATION, error
        assert "authentication refused for now" not in error.str()
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        error = _first_error(config(mechanism, "alice-secret"))
        assert error.code() == KafkaError._AUTHENTICATION, error
        assert "authentication refused for now" in error.str(), error.str()


def test_a_throttled_connection_serves_nothing_for_its_throttle_time(start_server, tmp_path):
    """Kafka mutes a throttled connection: a request pipelined behind a throttled Produce is
    answered no sooner than the throttle time after the Produce's answer. (A lower bound only:
    a slow machine makes the gap longer, never shorter.)"""
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    server = start_server(tmp_path / "data", "--quota-producer-byte-rate", "100000",
                          "--quota-window-size-ms", "100")
    batch = build_batch([(1_700_000_000_000, None, b"x" * 400_000, [])])
    topic_data = ProduceRequest.TopicProduceData(
        name=_topic(), partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])
    produce = ProduceRequest(transactional_id=None, acks=1, timeout_ms=10_000,
                             topic_data=[topic_data])
    with socket.create_connection(("127.0.0.1", server.kafka_port), timeout=_WAIT_S) as sock:
        # 400 KB against 100 KB/s measured over at least a second: the Produce is throttled.
        sock.sendall(_frame(0, 8, produce.encode(version=8), correlation_id=1)
                     + _frame(18, 0, ApiVersionsRequest().encode(version=0), correlation_id=2))
        answer = _answer(sock, ProduceResponse, 8)
        answered = time.monotonic()
        assert answer is not None
        after = _answer(sock, ApiVersionsResponse, 0)
        gap_s = time.monotonic() - answered
    assert after is not None
    throttle_ms = answer.throttle_time_ms
    assert throttle_ms > 0, answer
    assert gap_s >= throttle_ms / 1000 - 0.05, (gap_s, throttle_ms)


def test_acl_calls_without_an_authorizer_are_security_disabled(server):
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding], request_timeout=_WAIT_S).values():
        with pytest.raises(KafkaException) as refused:
            future.result()
        assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED
        assert "authorizer" in refused.value.args[0].str()


def test_each_acl_creation_is_checked_on_its_own(secured, pki):
    admin = _admin(secured, pki)
    topic = _topic("each")
    good = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)
    bad = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob",
                     "not-an-address", AclOperation.READ, AclPermissionType.ALLOW)
    futures = admin.create_acls([good, bad], request_timeout=_WAIT_S)
    assert futures[good].result() is None
    with pytest.raises(KafkaException) as refused:
        futures[bad].result()
    error = refused.value.args[0]
    assert error.code() == KafkaError.INVALID_REQUEST and "creations[1].host" in error.str()
    described = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY), request_timeout=_WAIT_S).result()
    assert described == [good]


def test_a_large_request_before_authentication_closes_the_connection(secured, pki):
    """kafka_sasl_receive_bytes_max (Kafka's sasl.server.max.receive.size): the size prefix
    alone closes the connection; nothing of the body is awaited."""
    with _tls_socket(secured, pki) as tls:
        tls.sendall(struct.pack(">i", 512 * 1024 + 1) + b"\0" * 64)
        assert tls.recv(4096) == b""
    assert "before the SASL authentication this listener requires" in secured.log_text()


def test_sasl_out_of_order_is_an_illegal_state(start_server, tmp_path):
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

    server = start_server(
        tmp_path / "data", "--authentication-credentials-file", str(_credentials(tmp_path)),
        "--authentication-plaintext-allowed", "true")

    def connect() -> socket.socket:
        return socket.create_connection(("127.0.0.1", server.kafka_port), timeout=_WAIT_S)

    def authenticate(token: bytes) -> bytes:
        return _frame(36, 1, SaslAuthenticateRequest(auth_bytes=token).encode(version=1))

    def handshake(mechanism: str) -> bytes:
        return _frame(17, 1, SaslHandshakeRequest(mechanism=mechanism).encode(version=1))

    with connect() as sock:  # SaslAuthenticate before a mechanism was chosen
        sock.sendall(authenticate(b"\0alice\0alice-secret"))
        answer = _answer(sock, SaslAuthenticateResponse, 1)
        assert answer is not None and answer.error_code == 34  # ILLEGAL_SASL_STATE
        assert _answer(sock, SaslAuthenticateResponse, 1) is None
    with connect() as sock:  # PLAIN, then a second exchange (no re-authentication)
        sock.sendall(handshake("PLAIN"))
        answer = _answer(sock, SaslHandshakeResponse, 1)
        assert answer is not None and answer.error_code == 0
        assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        sock.sendall(authenticate(b"\0alice\0alice-secret"))
        answer = _answer(sock, SaslAuthenticateResponse, 1)
        assert answer is not None and (answer.error_code, answer.error_message) == (0, None)
        sock.sendall(handshake("PLAIN"))
        answer = _answer(sock, SaslHandshakeResponse, 1)
        assert answer is not None and answer.error_code == 34
        assert _answer(sock, SaslHandshakeResponse, 1) is None
    with connect() as sock:  # a PLAIN message that is not authzid NUL user NUL password
        sock.sendall(handshake("PLAIN") + authenticate(b"alice:alice-secret"))
        assert _answer(sock, SaslHandshakeResponse, 1) is not None
        answer = _answer(sock, SaslAuthenticateResponse, 1)
        assert answer is not None and answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert "authzid NUL user NUL password" in answer.error_message


def test_a_reload_that_removes_the_user_closes_its_connections(start_server, tmp_path):
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

    credentials = _credentials(tmp_path)
    server = start_server(
        tmp_path / "data", "--authentication-credentials-file", str(credentials),
        "--authentication-plaintext-allowed", "true")
    api_versions = _frame(18, 0, ApiVersionsRequest().encode(version=0))
    with socket.create_connection(("127.0.0.1", server.kafka_port), timeout=_WAIT_S) as sock:
        sock.sendall(_frame(17, 1, SaslHandshakeRequest(mechanism="PLAIN").encode(version=1))
                     + _frame(36, 1, SaslAuthenticateRequest(
                         auth_bytes=b"\0alice\0alice-secret").encode(version=1)))
        assert _answer(sock, SaslHandshakeResponse, 1).error_code == 0
        assert _answer(sock, SaslAuthenticateResponse, 1).error_code == 0
        sock.sendall(api_versions)
        assert _answer(sock, ApiVersionsResponse, 0) is not None
        CredentialFile.load(credentials).without_user("alice").save(credentials)
        server.process.send_signal(signal.SIGHUP)
        wait_until(lambda: "reloaded the credential file" in server.log_text(),
                   "the credential file's reload")
        sock.sendall(api_versions)
        assert _answer(sock, ApiVersionsResponse, 0) is None
    assert "credentials it authenticated with are no longer valid" in server.log_text()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_aiokafka_scram_over_tls(secured, pki, mechanism):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = _topic()
    settings = dict(bootstrap_servers=secured.kafka_bootstrap, security_protocol="SASL_SSL",
                    ssl_context=create_ssl_context(cafile=str(pki.ca)),
                    sasl_mechanism=mechanism, sasl_plain_username="alice",
                    sasl_plain_password="alice-secret")

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**settings)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **settings)
        await consumer.start()
        try:
            return [(await asyncio.wait_for(consumer.getone(), _WAIT_S)).value
                    for _ in range(3)]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"a0", b"a1", b"a2"]
