"""SCRAM's server side (server/security/scram.py): RFC 7677's example exchange byte for byte,
kafka-python's SCRAM client as an independent client of SCRAM-SHA-256 and SCRAM-SHA-512, and
every refusal."""

from __future__ import annotations

import base64
import hashlib
import hmac
import types

import pytest
from kafka.net.sasl.scram import ScramClient

from stratalog.server.security.credentials import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    CredentialFile,
    ScramMechanism,
    ScramSecret,
)
from stratalog.server.security.scram import MESSAGE_BYTES_MAX, ScramError, ScramServerExchange


def _derived(purpose: bytes, data: bytes) -> bytes:
    return hmac.new(b"test key", purpose + b"\0" + data, hashlib.sha256).digest()


def _file(**users: ScramSecret) -> CredentialFile:
    return CredentialFile(types.MappingProxyType(users))


def test_rfc_7677_example_exchange() -> None:
    # RFC 7677 section 3: user "user", password "pencil", salt and iterations as sent.
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credentials = _file(user=ScramSecret.derive("pencil", 4096, salt))
    exchange = ScramServerExchange(credentials, _derived,
                                   server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server_first = exchange.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    server_final = exchange.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert exchange.done and not exchange.failed
    assert str(exchange.principal) == "User:user"
    assert exchange.entry is credentials.users["user"]


def _run(credentials: CredentialFile, user: str, password: str,
         mechanism: ScramMechanism = SCRAM_SHA_256) -> ScramServerExchange:
    """An exchange driven by kafka-python's ScramClient, which checks the server's signature."""
    client = ScramClient(user, password, mechanism.name)
    exchange = ScramServerExchange(credentials, _derived, mechanism=mechanism)
    client.process_server_first_message(exchange.step(client.first_message()))
    server_final = exchange.step(client.final_message())
    if not exchange.failed:
        client.process_server_final_message(server_final)  # raises on a wrong signature
    return exchange


def test_kafka_pythons_client_authenticates_and_checks_the_server() -> None:
    credentials = _file(alice=ScramSecret.derive("secret", 4096))
    exchange = _run(credentials, "alice", "secret")
    assert str(exchange.principal) == "User:alice"


def test_sha_512_against_kafka_pythons_client() -> None:
    credentials = CredentialFile().with_user("alice", "secret", 4096)
    exchange = _run(credentials, "alice", "secret", SCRAM_SHA_512)
    assert str(exchange.principal) == "User:alice"
    assert exchange.entry is credentials.users_sha512["alice"]
    # The SHA-256 exchange of the same user checks its other credential.
    assert _run(credentials, "alice", "secret").entry is credentials.users["alice"]
    assert _run(credentials, "alice", "wrong", SCRAM_SHA_512).failed


def test_a_user_without_a_sha_512_credential_fails_as_an_unknown_user_does() -> None:
    """A file from before SHA-512 credentials: the exchange is challenged (a decoy of the
    mechanism's key size) and fails at the proof; only lacks_credential tells the log why."""
    credentials = _file(alice=ScramSecret.derive("secret", 4096))
    lacking = _run(credentials, "alice", "secret", SCRAM_SHA_512)
    assert lacking.failed and lacking.principal is None and lacking.lacks_credential
    unknown = _run(credentials, "nobody", "secret", SCRAM_SHA_512)
    assert unknown.failed and not unknown.lacks_credential
    assert not _run(credentials, "alice", "secret").lacks_credential


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("nobody", "secret")])
def test_a_wrong_password_and_an_unknown_user_fail_alike(user: str, password: str) -> None:
    credentials = _file(alice=ScramSecret.derive("secret", 4096))
    exchange = _run(credentials, user, password)
    assert exchange.done and exchange.failed and exchange.principal is None


def test_an_unknown_user_is_challenged_like_a_known_one_and_the_same_each_time() -> None:
    credentials = _file(alice=ScramSecret.derive("secret", 8192))

    def challenge(user: str) -> dict[str, str]:
        answer = ScramServerExchange(credentials, _derived).step(f"n,,n={user},r=abc".encode())
        return dict(part.split("=", 1) for part in answer.decode().split(","))

    known, unknown, again = challenge("alice"), challenge("nobody"), challenge("nobody")
    assert known["i"] == unknown["i"] == "8192"  # the file's password iteration count
    assert len(base64.b64decode(unknown["s"])) == len(base64.b64decode(known["s"])) == 16
    assert unknown["s"] == again["s"] and unknown["r"] != again["r"]


def test_escaped_user_names() -> None:
    credentials = _file(**{"a,b=c": ScramSecret.derive("secret", 4096)})
    exchange = ScramServerExchange(credentials, _derived)
    exchange.step(b"n,,n=a=2Cb=3Dc,r=abc")
    assert exchange.user == "a,b=c" and exchange.entry is not None


@pytest.mark.parametrize(("first", "problem"), [
    (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
    (b"x,,n=alice,r=abc", "gs2 header"),
    (b"n,,r=abc,n=alice", "expected n=<user>,r=<nonce>"),
    (b"n,,n=alice", "expected n=<user>,r=<nonce>"),
    (b"n,,n=al=ce,r=abc", "'=' escape"),
    (b"n,,n=alice,r=a\x01c", "printable ASCII"),
    (b"n,,n=alice,r=abc,tokenauth=true", "delegation tokens"),
    (b"n,a=bob,n=alice,r=abc", "authorization id"),
    (b"n,,n=al ice,r=abc", "a user name has 1 to 256 characters"),
    (b"\xff", "not UTF-8"),
    (b"n,,n=alice,r=" + b"a" * MESSAGE_BYTES_MAX, "at most"),
])
def test_a_bad_client_first_message_names_the_problem(first: bytes, problem: str) -> None:
    exchange = ScramServerExchange(_file(alice=ScramSecret.derive("s", 4096)), _derived)
    with pytest.raises(ScramError, match=problem):
        exchange.step(first)


@pytest.mark.parametrize(("final", "problem"), [
    ("c=biws,r={nonce}", "no proof"),
    ("c=eSws,r={nonce},p=AAAA", "channel binding does not repeat"),
    ("c=biws,r=other,p=AAAA", "nonce is not the server's"),
    ("c=biws,r={nonce},p=!!!", "not base64"),
])
def test_a_bad_client_final_message_names_the_problem(final: str, problem: str) -> None:
    exchange = ScramServerExchange(_file(alice=ScramSecret.derive("s", 4096)), _derived)
    nonce = exchange.step(b"n,,n=alice,r=abc").decode().split(",")[0][2:]
    with pytest.raises(ScramError, match=problem):
        exchange.step(final.format(nonce=nonce).encode())


def test_a_proof_of_the_wrong_length_fails_and_nothing_follows_the_end() -> None:
    exchange = ScramServerExchange(_file(alice=ScramSecret.derive("s", 4096)), _derived)
    nonce = exchange.step(b"n,,n=alice,r=abc").decode().split(",")[0][2:]
    assert exchange.step(f"c=biws,r={nonce},p=AAAA".encode()) == b""
    assert exchange.failed
    with pytest.raises(ScramError, match="already ended"):
        exchange.step(b"n,,n=alice,r=abc")
