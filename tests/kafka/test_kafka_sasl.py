"""SASL on the Kafka listener beyond test_kafka_security.py's: SCRAM-SHA-512 with
confluent-kafka and kafka-python over TLS (aiokafka's is test_kafka_security.py's, both
mechanisms), a credential file from before SHA-512
credentials, SaslHandshake version 0's raw tokens (by hand, and with kafka-python told the
broker is 0.10: librdkafka 2.x sends version 1 even without ApiVersions and with a 0.10.0
fallback) and KIP-368's session lifetime and re-authentication
(server/kafka/sasl_session.py; docs/kafka-protocol.md, "Security").
"""

from __future__ import annotations

import json
import signal
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaConsumer, KafkaProducer
from kafka.net.sasl.scram import ScramClient
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from stratalog.server.security.credentials import CredentialFile
from tests.integration.conftest import ServerProcess, launch_server, wait_until
from tests.kafka.kafka_wire import KafkaWire
from tests.kafka.test_kafka_security import librdkafka_produce, sasl_settings

_ITERATIONS = 4096
_WAIT_S = 30.0
_SIZE = struct.Struct(">i")


def _topic() -> str:
    return f"sasl-{uuid.uuid4().hex[:10]}"


def _credentials(directory: Path) -> Path:
    """alice and bob with both credentials; carol with a SCRAM-SHA-256 one only, as a file
    written before SHA-512 credentials were stored holds it (no "scram_sha_512")."""
    path = directory / "credentials.json"
    (CredentialFile()
     .with_user("alice", "alice-secret", _ITERATIONS)
     .with_user("bob", "bob-secret", _ITERATIONS)
     .with_user("carol", "carol-secret", _ITERATIONS)).save(path)
    document = json.loads(path.read_text())
    del document["users"]["carol"]["scram_sha_512"]
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("kafka-sasl")
    server = launch_server(
        directory / "data", "--tls-cert-file", str(pki.server[0]),
        "--tls-key-file", str(pki.server[1]),
        "--authentication-credentials-file", str(_credentials(directory)))
    yield server
    assert server.stop(signal.SIGTERM) == 0, server.log_text()[-4000:]


def _first_error(config: dict[str, object]) -> KafkaError:
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + _WAIT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    return errors[0]


# ---------------------------------------------------------------- SCRAM-SHA-512


def test_confluent_scram_sha_512_over_tls(secured, pki):
    topic = _topic()
    config = sasl_settings(secured, pki, "SCRAM-SHA-512", "alice", "alice-secret")
    assert librdkafka_produce(config, topic, [b"one", b"two"]) == []
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config, "group.id": "g-" + topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + _WAIT_S
    try:
        while len(values) < 2 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"one", b"two"]


def test_kafka_python_scram_sha_512_over_tls(secured, pki):
    topic = _topic()
    settings = dict(bootstrap_servers=secured.kafka_bootstrap, security_protocol="SASL_SSL",
                    ssl_cafile=str(pki.ca), sasl_mechanism="SCRAM-SHA-512",
                    sasl_plain_username="bob", sasl_plain_password="bob-secret")
    producer = KafkaProducer(acks="all", enable_idempotence=False, **settings)
    offsets = [producer.send(topic, value=b"k%d" % i).get(timeout=_WAIT_S).offset
               for i in range(3)]
    producer.close()
    assert offsets == [0, 1, 2]


def test_a_user_without_a_sha_512_credential_fails_sha_512_only(secured, pki):
    """carol's entry predates SHA-512 credentials: SCRAM-SHA-512 fails as a wrong password
    does (the client is not told the user exists), the log says why; SHA-256 and PLAIN work."""
    error = _first_error(sasl_settings(secured, pki, "SCRAM-SHA-512", "carol", "carol-secret"))
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "carol" not in error.str()
    wait_until(lambda: "user 'carol' has no SCRAM-SHA-512 credential" in secured.log_text(),
               "the log line that names the missing credential", _WAIT_S)
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        config = sasl_settings(secured, pki, mechanism, "carol", "carol-secret")
        assert librdkafka_produce(config, _topic(), [b"x"]) == []
    # The very answer of a wrong password: the code and the words.
    answers = [_scram_v1(_tls_wire(secured, pki), user, password, "SCRAM-SHA-512")
               for user, password in (("carol", "carol-secret"), ("alice", "wrong"))]
    assert answers[0] == answers[1] == (58, "authentication failed: unknown user or token, or"
                                        " wrong password")


def _tls_wire(server: ServerProcess, pki) -> KafkaWire:
    import ssl

    wire = KafkaWire(server.kafka_bootstrap)
    context = ssl.create_default_context(cafile=str(pki.ca))
    wire.sock = context.wrap_socket(wire.sock, server_hostname="localhost")
    return wire


def _scram_v1(wire: KafkaWire, user: str, password: str, mechanism: str) -> tuple[int, str]:
    """A SCRAM exchange through SaslHandshake v1 and SaslAuthenticate: the last answer's
    (error code, message)."""
    with wire:
        assert _handshake(wire, mechanism, 1).error_code == 0
        client = ScramClient(user, password, mechanism)
        first = wire.call(SaslAuthenticateRequest(auth_bytes=client.first_message()),
                          SaslAuthenticateResponse, 1)
        assert first.error_code == 0
        client.process_server_first_message(first.auth_bytes)
        final = wire.call(SaslAuthenticateRequest(auth_bytes=client.final_message()),
                          SaslAuthenticateResponse, 1)
        return final.error_code, final.error_message


# ---------------------------------------------------------------- SaslHandshake v0


@pytest.fixture(scope="module")
def plaintext(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """SASL over plaintext (allowed), sessions of 2 s (kafka_connections_max_reauth_ms)."""
    directory = tmp_path_factory.mktemp("kafka-sasl-plain")
    server = launch_server(
        directory / "data", "--authentication-credentials-file", str(_credentials(directory)),
        "--authentication-plaintext-allowed", "true",
        "--kafka-connections-max-reauth-ms", "2000")
    yield server
    assert server.stop(signal.SIGTERM) == 0, server.log_text()[-4000:]


def _raw(wire: KafkaWire, token: bytes) -> bytes | None:
    """Send a raw SASL token (after a v0 handshake); its raw answer, None at EOF."""
    wire.send_raw(_SIZE.pack(len(token)) + token)
    head = wire._read(4)
    if len(head) < 4:
        return None
    return wire._read(_SIZE.unpack(head)[0])


def _handshake(wire: KafkaWire, mechanism: str, version: int) -> SaslHandshakeResponse:
    return wire.call(SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse, version)


def _requests(server: ServerProcess, api: str) -> float:
    return server.metric(f'stratalog_kafka_requests_total{{api="{api}"}}')


def _sasl_authenticate_requests(server: ServerProcess) -> float:
    return _requests(server, "SaslAuthenticate")


def _metadata(wire: KafkaWire) -> MetadataResponse:
    return wire.call(MetadataRequest(topics=[]), MetadataResponse, 1)


def test_handshake_v0_then_raw_plain_and_scram_tokens(plaintext):
    with KafkaWire(plaintext.kafka_bootstrap) as wire:
        assert _handshake(wire, "PLAIN", 0).error_code == 0
        assert _raw(wire, b"\0alice\0alice-secret") == b""  # PLAIN's empty answer
        assert len(_metadata(wire).brokers) == 1  # authenticated: requests served
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        with KafkaWire(plaintext.kafka_bootstrap) as wire:
            assert _handshake(wire, mechanism, 0).error_code == 0
            client = ScramClient("bob", "bob-secret", mechanism)
            server_first = _raw(wire, client.first_message())
            assert server_first is not None and server_first.startswith(b"r=")
            client.process_server_first_message(server_first)
            server_final = _raw(wire, client.final_message())
            assert server_final is not None
            client.process_server_final_message(server_final)  # checks the server's signature
            assert len(_metadata(wire).brokers) == 1


def test_handshake_v0_refusals_close_without_an_answer(plaintext):
    with KafkaWire(plaintext.kafka_bootstrap) as wire:  # a wrong password
        assert _handshake(wire, "PLAIN", 0).error_code == 0
        assert _raw(wire, b"\0alice\0wrong") is None
    with KafkaWire(plaintext.kafka_bootstrap) as wire:  # not a PLAIN message
        assert _handshake(wire, "PLAIN", 0).error_code == 0
        assert _raw(wire, b"alice:alice-secret") is None
    with KafkaWire(plaintext.kafka_bootstrap) as wire:  # a raw token beyond the bound
        assert _handshake(wire, "SCRAM-SHA-256", 0).error_code == 0
        wire.send_raw(_SIZE.pack(512 * 1024 + 1) + b"n,,n=alice")
        assert wire.closed_by_server()
    with KafkaWire(plaintext.kafka_bootstrap) as wire:  # a request where a token is due
        assert _handshake(wire, "SCRAM-SHA-256", 0).error_code == 0
        wire.send(MetadataRequest(topics=[]), 1)
        assert wire.closed_by_server()
    with KafkaWire(plaintext.kafka_bootstrap) as wire:  # a user without a SHA-512 credential
        assert _handshake(wire, "SCRAM-SHA-512", 0).error_code == 0
        client = ScramClient("carol", "carol-secret", "SCRAM-SHA-512")
        server_first = _raw(wire, client.first_message())
        assert server_first is not None  # challenged as any user
        client.process_server_first_message(server_first)
        assert _raw(wire, client.final_message()) is None
    assert "handshake version 0) failed" in plaintext.log_text()


def test_kafka_python_of_kafka_0_10_authenticates_with_handshake_v0(plaintext):
    """kafka-python told the broker is 0.10.0 sends SaslHandshake v0 and raw tokens."""
    before = _sasl_authenticate_requests(plaintext)
    consumer = KafkaConsumer(bootstrap_servers=plaintext.kafka_bootstrap,
                             api_version=(0, 10, 0), security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                             sasl_plain_password="alice-secret")
    try:
        assert isinstance(consumer.topics(), set)
    finally:
        consumer.close()
    assert _sasl_authenticate_requests(plaintext) == before  # raw tokens, no SaslAuthenticate


# ---------------------------------------------------------------- KIP-368


def _authenticate_v1(wire: KafkaWire, user: str, password: str,
                     mechanism: str = "PLAIN") -> SaslAuthenticateResponse:
    assert _handshake(wire, mechanism, 1).error_code == 0
    token = f"\0{user}\0{password}".encode()
    return wire.call(SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse, 1)


def test_a_connection_that_does_not_reauthenticate_is_closed_at_its_next_request(plaintext):
    with KafkaWire(plaintext.kafka_bootstrap) as wire:
        answer = _authenticate_v1(wire, "alice", "alice-secret")
        assert (answer.error_code, answer.session_lifetime_ms) == (0, 2000)
        ends_at = time.monotonic() + answer.session_lifetime_ms / 1000
        assert len(_metadata(wire).brokers) == 1
        time.sleep(max(0.0, ends_at - time.monotonic()) + 0.1)  # the session's end
        wire.send(MetadataRequest(topics=[]), 1)
        assert wire.receive_frame() == b""  # closed, not answered
    assert "did not re-authenticate" in plaintext.log_text()


def test_reauthentication_renews_the_session_and_keeps_the_principal(plaintext):
    with KafkaWire(plaintext.kafka_bootstrap) as wire:
        first_at = time.monotonic()
        assert _authenticate_v1(wire, "alice", "alice-secret").error_code == 0
        time.sleep(max(0.0, first_at + 1.0 - time.monotonic()))  # half the first session
        renewed = _authenticate_v1(wire, "alice", "alice-secret")
        assert (renewed.error_code, renewed.session_lifetime_ms) == (0, 2000)
        time.sleep(max(0.0, first_at + 2.2 - time.monotonic()))  # past the first session
        assert len(_metadata(wire).brokers) == 1  # the renewed one serves
    with KafkaWire(plaintext.kafka_bootstrap) as wire:
        assert _authenticate_v1(wire, "alice", "alice-secret").error_code == 0
        assert _authenticate_v1(wire, "alice", "alice-secret").error_code == 0
        # Not twice within a second (Kafka's KafkaChannel): refused, and closed.
        assert _handshake(wire, "PLAIN", 1).error_code == 34  # ILLEGAL_SASL_STATE
        assert wire.closed_by_server()
    with KafkaWire(plaintext.kafka_bootstrap) as wire:  # another principal: refused
        assert _authenticate_v1(wire, "alice", "alice-secret").error_code == 0
        answer = _authenticate_v1(wire, "bob", "bob-secret")
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert "cannot change principals" in answer.error_message
        assert wire.closed_by_server()
    with KafkaWire(plaintext.kafka_bootstrap) as wire:  # a request amid the exchange
        assert _authenticate_v1(wire, "alice", "alice-secret").error_code == 0
        assert _handshake(wire, "PLAIN", 1).error_code == 0
        wire.send(MetadataRequest(topics=[]), 1)
        assert wire.receive_frame() == b""  # closed, not answered
    with KafkaWire(plaintext.kafka_bootstrap) as wire:  # another mechanism: refused
        assert _authenticate_v1(wire, "alice", "alice-secret").error_code == 0
        assert _handshake(wire, "SCRAM-SHA-256", 1).error_code == 34
        assert wire.closed_by_server()


def test_without_a_session_lifetime_a_second_handshake_is_refused(secured, pki):
    """kafka_connections_max_reauth_ms 0 (the default): SaslAuthenticate answers lifetime 0,
    and there is no re-authentication (KafkaChannel: no session expiration, no re-auth)."""
    with _tls_wire(secured, pki) as wire:
        answer = _authenticate_v1(wire, "alice", "alice-secret")
        assert (answer.error_code, answer.session_lifetime_ms) == (0, 0)
        assert _handshake(wire, "PLAIN", 1).error_code == 34
        assert wire.closed_by_server()


def test_confluent_producer_reauthenticates_by_itself_across_three_lifetimes(plaintext):
    """librdkafka reads session_lifetime_ms and re-authenticates before it ends (KIP-368):
    records produced over three 2-second lifetimes all land, the connection re-authenticated
    and never closed."""
    topic = _topic()
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": plaintext.kafka_bootstrap,
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": "alice", "sasl.password": "alice-secret",
                         "message.timeout.ms": 20_000, "error_cb": errors.append})
    closes_before = plaintext.log_text().count("closing Kafka connection")
    handshakes_before: float | None = None
    started = time.monotonic()
    sent = 0
    while time.monotonic() < started + 6.0:  # three lifetimes
        producer.produce(topic, value=b"r%d" % sent)
        sent += 1
        assert producer.flush(_WAIT_S) == 0
        if handshakes_before is None:  # connected and authenticated: count from here
            handshakes_before = _requests(plaintext, "SaslHandshake")
        time.sleep(0.2)
    assert errors == []
    # It re-authenticated (a SaslHandshake per lifetime after its first) ...
    assert handshakes_before is not None
    assert _requests(plaintext, "SaslHandshake") - handshakes_before >= 2
    consumer = KafkaConsumer(topic, bootstrap_servers=plaintext.kafka_bootstrap,
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="alice", sasl_plain_password="alice-secret",
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    values = [m.value for _, m in zip(range(sent), consumer, strict=False)]
    consumer.close()
    assert values == [b"r%d" % i for i in range(sent)]
    # ... and was never closed by the server (which logs each close: a session that ended, a
    # refused handshake) and reconnected.
    assert plaintext.log_text().count("closing Kafka connection") == closes_before


def test_kafka_python_producer_reauthenticates_by_itself(plaintext):
    """kafka-python 3.x re-authenticates too (its SaslReauthenticator, KIP-368)."""
    topic = _topic()
    closes_before = plaintext.log_text().count("closing Kafka connection")
    producer = KafkaProducer(bootstrap_servers=plaintext.kafka_bootstrap,
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                             sasl_plain_username="bob", sasl_plain_password="bob-secret",
                             acks="all", enable_idempotence=False)
    try:
        offsets = [producer.send(topic, value=b"first").get(timeout=_WAIT_S).offset]
        handshakes_before = _requests(plaintext, "SaslHandshake")
        started = time.monotonic()
        while time.monotonic() < started + 5.0:  # two lifetimes and a half
            offsets.append(producer.send(topic, value=b"x").get(timeout=_WAIT_S).offset)
            time.sleep(0.2)
    finally:
        producer.close()
    assert offsets == list(range(len(offsets)))
    assert _requests(plaintext, "SaslHandshake") - handshakes_before >= 2
    assert plaintext.log_text().count("closing Kafka connection") == closes_before
