"""stratalog.client.tls_diagnosis without a server: gRPC's words read back, targets split, the
messages. The probe and every mismatch against real servers: tests/integration/
test_client_tls_diagnosis.py."""

from __future__ import annotations

import socket

import pytest

from stratalog.client.errors import BrokerUnavailableError, TlsHandshakeError
from stratalog.client.tls_diagnosis import (
    Diagnoser,
    Diagnosis,
    TlsProblem,
    from_details,
    host_and_port,
    message,
    probe,
    wants_probe,
)

# grpcio 1.85's status details, as a failed call carried them.
UNTRUSTED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:33241: Tls "
    "handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:"
    "OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate: OK"
)
EXPIRED = UNTRUSTED.replace("unable to get local issuer certificate", "certificate has expired")
NOT_TLS = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:43883: Tls "
    "handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:100000f7:SSL routines:"
    "OPENSSL_internal:WRONG_VERSION_NUMBER: Invalid certificate verification context: OK"
)
NAME = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:33241: Custom "
    "verification check failed with error: UNAUTHENTICATED: Hostname Verification Check failed."
)
CLOSED = ("failed to connect to all addresses; last error: UNAVAILABLE: "
          "ipv4:127.0.0.1:33241: Socket closed")
REFUSED = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed "
           "to connect to remote host: Connection refused")


def test_from_details_reads_what_grpc_says() -> None:
    assert from_details(UNTRUSTED, True) == Diagnosis(
        TlsProblem.SERVER_CERTIFICATE_UNTRUSTED, "unable to get local issuer certificate")
    assert from_details(EXPIRED, True) == Diagnosis(
        TlsProblem.SERVER_CERTIFICATE_UNTRUSTED, "certificate has expired")
    assert from_details(NOT_TLS, True) == Diagnosis(TlsProblem.SERVER_NOT_TLS)
    assert from_details(NAME, True) == Diagnosis(TlsProblem.SERVER_NAME_MISMATCH)
    for details in (CLOSED, REFUSED, ""):
        assert from_details(details, True) is None
    # A plaintext client has no handshake of its own to fail.
    assert from_details(UNTRUSTED, False) is None


def test_only_a_connection_the_server_closed_is_probed() -> None:
    assert wants_probe(CLOSED) and wants_probe(None)
    assert not wants_probe(REFUSED) and not wants_probe(UNTRUSTED)


@pytest.mark.parametrize(("address", "expected"), [
    ("127.0.0.1:50051", ("127.0.0.1", 50051)),
    ("db1.example:9", ("db1.example", 9)),
    ("[::1]:50051", ("::1", 50051)),
    ("ipv4:10.0.0.1:50051", ("10.0.0.1", 50051)),
    ("dns:///db1:50051", ("db1", 50051)),
    ("unix:/run/stratalog.sock", None),
    ("db1", None),
    ("db1:port", None),
    ("a:1,b:2", None),
])
def test_host_and_port(address: str, expected: tuple[str, int] | None) -> None:
    assert host_and_port(address) == expected


def test_messages_name_the_problem_the_address_and_what_to_do() -> None:
    untrusted = from_details(UNTRUSTED, True)
    assert untrusted is not None
    assert message(untrusted, "db1:50051") == (
        "certificate not trusted (unable to get local issuer certificate) at db1:50051: "
        "trust the CA that signed it (TlsConfig.from_files(ca_file))")
    expired = from_details(EXPIRED, True)
    assert expired is not None
    # A CA file would not help an expired certificate: the advice says so.
    assert message(expired, "db1:50051").endswith(
        "(certificate has expired) at db1:50051: the server needs a valid certificate")
    for problem in TlsProblem:
        assert message(Diagnosis(problem), "a:1").startswith(f"{problem.value} at a:1: ")


def test_the_diagnoser_leaves_other_failures_alone() -> None:
    diagnoser = Diagnoser("127.0.0.1:1", None, tls_on=True)
    refused = BrokerUnavailableError(REFUSED)
    assert diagnoser.diagnosed(refused, REFUSED) is refused
    untrusted = diagnoser.diagnosed(BrokerUnavailableError(UNTRUSTED), UNTRUSTED)
    assert isinstance(untrusted, TlsHandshakeError)
    assert (untrusted.problem, untrusted.address) == (
        TlsProblem.SERVER_CERTIFICATE_UNTRUSTED, "127.0.0.1:1")
    assert not untrusted.retriable
    # Already diagnosed, or not a connection failure: as it is.
    assert diagnoser.diagnosed(untrusted, UNTRUSTED) is untrusted


def test_a_probe_of_what_does_not_answer_or_speaks_neither_finds_nothing() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert probe(f"127.0.0.1:{port}", None, tls_on=False) is None  # refused
    with socket.create_server(("127.0.0.1", 0)) as silent:
        # Accepts (the kernel's backlog) and never answers: the probe ends at its timeout.
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        assert probe(address, None, tls_on=False, timeout_s=0.3) is None
        assert probe(address, None, tls_on=True, timeout_s=0.3) is None


def test_a_server_that_answered_before_is_not_probed() -> None:
    """A connection that fails after the server answered is a server gone or restarting:
    no probe (of a vanished host it would hold up the failover by its timeout)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        diagnoser = Diagnoser(address, None, tls_on=False)
        diagnoser.connected = True
        closed = BrokerUnavailableError(CLOSED)
        assert not diagnoser.may_block(closed, CLOSED)
        assert diagnoser.diagnosed(closed, CLOSED) is closed
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
