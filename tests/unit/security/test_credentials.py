"""The credential file: SCRAM-SHA-256 secrets, the JSON format, its checks and atomic saves."""

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

    def counting(password: bytes, salt: bytes, iterations: int) -> bytes:
        rounds.append(iterations)
        return real(password, salt, iterations)

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
