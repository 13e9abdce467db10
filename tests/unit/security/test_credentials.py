"""The credential file: SCRAM-SHA-256 and SCRAM-SHA-512 secrets, the JSON format, its checks
and atomic saves."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from pathlib import Path

import pytest

from stratalog.server.security.credentials import (
    ITERATIONS_MIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    CredentialFile,
    ScramSecret,
    check_user_name,
)
from stratalog.server.security.errors import SecurityConfigError
from stratalog.server.security.principal import Principal


def test_secret_is_rfc5802_stored_key_and_server_key() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")  # RFC 7677's example salt
    secret = ScramSecret.derive("pencil", 4096, salt)
    # Independently, from RFC 5802 section 3's definitions.
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    assert secret.stored_key == hashlib.sha256(client_key).digest()
    assert secret.server_key == hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    assert secret.verify("pencil")
    assert not secret.verify("pencil ")
    assert not secret.verify("")


def test_sha_512_secret_is_rfc5802_with_sha_512() -> None:
    salt = b"0123456789abcdef"
    secret = ScramSecret.derive("pencil", 4096, salt, SCRAM_SHA_512)
    salted = hashlib.pbkdf2_hmac("sha512", b"pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha512).digest()
    assert secret.stored_key == hashlib.sha512(client_key).digest()
    assert secret.server_key == hmac.new(salted, b"Server Key", hashlib.sha512).digest()
    assert len(secret.stored_key) == 64 and secret.verify("pencil")
    assert secret.to_json()["mechanism"] == "SCRAM-SHA-512"


def test_a_user_gets_a_credential_per_mechanism_each_with_its_salt(tmp_path: Path) -> None:
    store = CredentialFile().with_user("alice", "pw", ITERATIONS_MIN)
    sha256 = store.scram_secret("alice", SCRAM_SHA_256)
    sha512 = store.scram_secret("alice", SCRAM_SHA_512)
    assert sha256 is store.users["alice"] and sha512 is store.users_sha512["alice"]
    assert sha512.mechanism is SCRAM_SHA_512 and sha512.salt != sha256.salt
    assert sha512.verify("pw") and sha512.iterations == ITERATIONS_MIN
    path = tmp_path / "creds.json"
    store.save(path)
    entry = json.loads(path.read_text())["users"]["alice"]
    assert entry["mechanism"] == "SCRAM-SHA-256"  # what a server of version 1 reads
    assert entry["scram_sha_512"]["mechanism"] == "SCRAM-SHA-512"
    assert CredentialFile.load(path) == store
    assert store.without_user("alice").users_sha512 == {}
    assert store.scram_secret("nobody", SCRAM_SHA_512) is None


def test_a_file_with_sha_256_credentials_only_keeps_working() -> None:
    """A file written before SCRAM-SHA-512 credentials were stored (entries without
    scram_sha_512): its users' passwords check, and they have no SHA-512 credential."""
    old = CredentialFile.parse(_document(), "old.json")
    assert old.verify_password("alice", "pw") == Principal.user("alice")
    assert old.scram_secret("alice", SCRAM_SHA_256) is not None
    assert old.scram_secret("alice", SCRAM_SHA_512) is None
    renewed = old.with_user("alice", "pw2", ITERATIONS_MIN)  # setting the password again
    assert renewed.scram_secret("alice", SCRAM_SHA_512) is not None


def test_each_derivation_has_its_own_salt() -> None:
    first, second = (ScramSecret.derive("same", ITERATIONS_MIN) for _ in range(2))
    assert first.salt != second.salt and first.stored_key != second.stored_key


@pytest.mark.parametrize("iterations", [ITERATIONS_MIN - 1, 10_000_001])
def test_iterations_are_bounded(iterations: int) -> None:
    with pytest.raises(ValueError, match="iterations"):
        ScramSecret.derive("pw", iterations)


def test_round_trip_and_no_secret_at_rest(tmp_path: Path) -> None:
    store = CredentialFile().with_user("alice", "alice-pw", ITERATIONS_MIN)
    store, token = store.with_new_token(Principal.user("etl"), ITERATIONS_MIN)
    path = tmp_path / "creds.json"
    store.save(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["creds.json"]  # no temporary left
    text = path.read_text()
    assert "alice-pw" not in text and token.partition(".")[2] not in text
    loaded = CredentialFile.load(path)
    assert loaded == store
    assert loaded.verify_password("alice", "alice-pw") == Principal.user("alice")
    assert loaded.verify_password("alice", "wrong") is None
    assert loaded.verify_password("nobody", "alice-pw") is None
    assert loaded.verify_token(token) == Principal.user("etl")
    assert loaded.verify_token(token + "x") is None
    assert loaded.verify_token("no-dot") is None
    assert loaded.without_user("alice").users == {}
    token_id = token.partition(".")[0]
    assert loaded.without_token(token_id).tokens == {}
    with pytest.raises(KeyError):
        loaded.without_token("000000000000")


def _document(**changes: object) -> bytes:
    entry = ScramSecret.derive("pw", ITERATIONS_MIN).to_json()
    document: dict[str, object] = {"format": "stratalog-credentials", "version": 1,
                                   "users": {"alice": entry}, "tokens": {}}
    document.update(changes)
    return json.dumps(document).encode()


@pytest.mark.parametrize(("data", "message"), [
    (b"\xff", "not UTF-8 JSON"),
    (b"[]", "not a stratalog credential file"),
    (_document(version=2), "version 2 is not supported"),
    (_document(users=[]), "must be objects"),
    (_document(users={"a:b": {}}), "no ':'"),
    (_document(users={"alice": {"mechanism": "MD5"}}), "mechanism"),
    (_document(users={"alice": {**ScramSecret.derive("p", 4096).to_json(), "iterations": 1}}),
     "iterations"),
    (_document(users={"alice": {**ScramSecret.derive("p", 4096).to_json(), "salt": "%%"}}),
     "salt must be base64"),
    (_document(users={"alice": {**ScramSecret.derive("p", 4096).to_json(),
                                "stored_key": base64.b64encode(b"short").decode()}}),
     "stored_key must be base64 of 32 bytes"),
    (_document(users={"alice": {**ScramSecret.derive("p", 4096).to_json(),
                                "scram_sha_512": ScramSecret.derive("p", 4096).to_json()}}),
     "user 'alice' scram_sha_512: mechanism must be 'SCRAM-SHA-512'"),
    (_document(users={"alice": {**ScramSecret.derive("p", 4096).to_json(), "scram_sha_512": {
        **ScramSecret.derive("p", 4096, mechanism=SCRAM_SHA_512).to_json(),
        "server_key": base64.b64encode(b"x" * 32).decode()}}}),
     "server_key must be base64 of 64 bytes"),
    (_document(tokens={"XYZ": {}}), "12 lower-case hex"),
    (_document(tokens={"0123456789ab": {"mechanism": "SCRAM-SHA-256"}}), "principal"),
])
def test_malformed_files_are_refused_with_the_entry_named(data: bytes, message: str) -> None:
    with pytest.raises(SecurityConfigError, match=message):
        CredentialFile.parse(data, "creds.json")


def test_unreadable_and_oversized_files(tmp_path: Path) -> None:
    with pytest.raises(SecurityConfigError, match="cannot read the credential file"):
        CredentialFile.load(tmp_path / "missing.json")
    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.truncate(16 * 1024 * 1024 + 1)
    with pytest.raises(SecurityConfigError, match="larger than"):
        CredentialFile.load(big)


@pytest.mark.parametrize("name", ["", "a:b", "a b", "tab\t", "x" * 257, "bell\a"])
def test_user_names_refused(name: str) -> None:
    with pytest.raises(ValueError):
        check_user_name(name)


def test_save_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "creds.json"
    CredentialFile().with_user("a", "1", ITERATIONS_MIN).save(path)
    inode = os.stat(path).st_ino
    CredentialFile().with_user("b", "2", ITERATIONS_MIN).save(path)
    assert os.stat(path).st_ino != inode  # a new file renamed over the old one
    assert list(CredentialFile.load(path).users) == ["b"]


def test_every_check_costs_the_files_largest_iteration_count(monkeypatch) -> None:
    from stratalog.server.security import credentials as module

    rounds: list[int] = []
    real = module._salted_password

    def counting(password: bytes, salt: bytes, iterations: int,
                 hash_name: str = "sha256") -> bytes:
        assert hash_name == "sha256"  # passwords are checked against the SHA-256 credential
        rounds.append(iterations)
        return real(password, salt, iterations, hash_name)

    file = (CredentialFile().with_user("cheap", "pw", iterations=4096)
            .with_user("dear", "pw", iterations=20_000))
    assert file.password_iterations == 20_000
    monkeypatch.setattr(module, "_salted_password", counting)
    for user, password in (("cheap", "pw"), ("cheap", "wrong"), ("dear", "pw"),
                           ("dear", "wrong"), ("nobody", "pw"), ("cheap", "x" * 5000)):
        rounds.clear()
        file.verify_password(user, password)
        assert sum(rounds) == 20_000, (user, password, rounds)
    assert file.verify_password("cheap", "pw") == Principal.user("cheap")
    assert file.verify_password("dear", "wrong") is None
