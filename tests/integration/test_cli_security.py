"""The `stratalog` command with security: `credentials add|remove|list`, then TLS, passwords,
tokens and mTLS against a live server, with the options before or after the subcommand and from
the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stratalog.server.security.credentials import CredentialFile

CLI = [sys.executable, "-m", "stratalog.cli"]


def stratalog(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
    clean.update(env or {})
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, timeout=120, env=clean)


def test_credentials_add_list_remove(tmp_path: Path) -> None:
    file = tmp_path / "creds.json"
    (tmp_path / "pw").write_text("alice-secret\n")
    added = stratalog("credentials", "add", "--file", str(file), "--user", "alice",
                      "--password-file", str(tmp_path / "pw"), "--iterations", "4096")
    assert added.returncode == 0, added.stderr
    assert oct(file.stat().st_mode & 0o777) == "0o600"
    from_stdin = stratalog("credentials", "add", "--file", str(file), "--user", "bob",
                           stdin=b"bob-secret\n")
    assert from_stdin.returncode == 0, from_stdin.stderr
    token_run = stratalog("credentials", "add", "--file", str(file), "--user", "etl", "--token")
    assert token_run.returncode == 0, token_run.stderr
    token = token_run.stdout.decode().strip()
    token_id = token.partition(".")[0]

    text = file.read_text()
    for secret in ("alice-secret", "bob-secret", token.partition(".")[2]):
        assert secret not in text  # hashes only
    store = CredentialFile.load(file)
    assert store.verify_password("alice", "alice-secret") is not None
    assert store.users["bob"].iterations == 100_000  # the default for a password
    assert str(store.verify_token(token)) == "User:etl"

    listed = json.loads(stratalog("credentials", "list", "--file", str(file), "--json").stdout)
    assert [u["user"] for u in listed["users"]] == ["alice", "bob"]
    assert listed["tokens"] == [{"token_id": token_id, "principal": "User:etl",
                                 "iterations": 4096}]
    assert "stored_key" not in json.dumps(listed)

    assert stratalog("credentials", "remove", "--file", str(file), "--user", "bob").returncode == 0
    assert stratalog("credentials", "remove", "--file", str(file),
                     "--token", token_id).returncode == 0
    missing = stratalog("credentials", "remove", "--file", str(file), "--user", "bob")
    assert missing.returncode == 1 and b"no user 'bob'" in missing.stderr
    assert list(CredentialFile.load(file).users) == ["alice"]
    bad_name = stratalog("credentials", "add", "--file", str(file), "--user", "a:b",
                         stdin=b"x\n")
    assert bad_name.returncode == 2 and b"no ':'" in bad_name.stderr


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki):
    from .conftest import launch_server

    directory = tmp_path_factory.mktemp("cli-security")
    file = directory / "creds.json"
    (directory / "pw").write_text("alice-secret\n")
    assert stratalog("credentials", "add", "--file", str(file), "--user", "alice",
                     "--password-file", str(directory / "pw"),
                     "--iterations", "4096").returncode == 0
    token = stratalog("credentials", "add", "--file", str(file), "--user", "etl",
                      "--token").stdout.decode().strip()
    (directory / "token").write_text(token + "\n")
    server = launch_server(
        directory / "data",
        "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
        "--tls-ca-file", str(pki.ca),
        "--authentication-credentials-file", str(file),
    )
    yield server, directory
    assert server.stop() == 0


def test_whoami_with_options_before_or_after_the_subcommand(secured, pki) -> None:
    server, directory = secured
    security = ["--ca-file", str(pki.ca), "--user", "alice",
                "--password-file", str(directory / "pw")]
    before = stratalog(*security, "whoami", "--target", server.target)
    after = stratalog("whoami", "--target", server.target, *security, "--json")
    assert before.returncode == 0, before.stderr
    assert before.stdout.decode().strip() == "User:alice (password) from 127.0.0.1"
    assert json.loads(after.stdout) == {
        "principal": "User:alice", "authenticated_by": "password", "host": "127.0.0.1"}


def test_environment_token_and_a_round_trip(secured, pki) -> None:
    server, directory = secured
    env = {"STRATALOG_TARGET": server.target, "STRATALOG_TLS_CA_FILE": str(pki.ca),
           "STRATALOG_TOKEN_FILE": str(directory / "token")}
    assert stratalog("whoami", env=env).stdout.decode().startswith("User:etl (token)")
    assert stratalog("topics", "create", "cli-secure", env=env).returncode == 0
    produced = stratalog("produce", "cli-secure", stdin=b"one\ntwo\n", env=env)
    assert produced.returncode == 0, produced.stderr
    consumed = stratalog("consume", "cli-secure", "--max-records", "2", env=env)
    assert consumed.stdout.decode().split() == ["one", "two"]


def test_refusals_and_their_exit_codes(secured, pki, tmp_path: Path) -> None:
    server, _ = secured
    target = ["--target", server.target]
    anonymous = stratalog("--ca-file", str(pki.ca), "topics", "list", *target)
    assert anonymous.returncode == 1
    assert b"AUTHENTICATION_FAILED" in anonymous.stderr
    (tmp_path / "wrong").write_text("nope\n")
    wrong = stratalog("--ca-file", str(pki.ca), "--user", "alice", "--password-file",
                      str(tmp_path / "wrong"), "topics", "list", *target)
    assert wrong.returncode == 1 and b"AUTHENTICATION_FAILED" in wrong.stderr
    plaintext = stratalog("topics", "list", *target)
    assert plaintext.returncode == 3  # no TLS handshake: the server is unreachable this way
    refused = stratalog("--user", "alice", "--password-file", str(tmp_path / "wrong"),
                        "topics", "list", *target)
    assert refused.returncode == 2 and b"without TLS" in refused.stderr
    unpaired = stratalog("--ca-file", str(pki.ca), "--user", "alice", "topics", "list", *target)
    assert unpaired.returncode == 2 and b"--password-file" in unpaired.stderr


def test_mtls_client_certificate(start_server, pki, tmp_path: Path) -> None:
    server = start_server(
        tmp_path / "data",
        "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
        "--tls-ca-file", str(pki.ca), "--tls-client-auth", "required",
    )
    me = stratalog("whoami", "--target", server.target, "--ca-file", str(pki.ca),
                   "--cert-file", str(pki.client[0]), "--key-file", str(pki.client[1]))
    assert me.returncode == 0, me.stderr
    assert me.stdout.decode().strip() == f"User:{pki.CLIENT_SUBJECT} (tls) from 127.0.0.1"
