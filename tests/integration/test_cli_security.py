"""The `stratalog` command with security: `credentials add|remove|list`, then TLS, passwords,
tokens and mTLS against a live server, with the options before or after the subcommand and from
the environment."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
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
    # A SCRAM-SHA-512 credential too (the Kafka listener's SCRAM-SHA-512), its own salt.
    assert store.users_sha512["alice"].verify("alice-secret")
    assert store.users_sha512["alice"].salt != store.users["alice"].salt
    assert str(store.verify_token(token)) == "User:etl"

    listed = json.loads(stratalog("credentials", "list", "--file", str(file), "--json").stdout)
    assert [u["user"] for u in listed["users"]] == ["alice", "bob"]
    assert listed["users"][0]["mechanisms"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
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


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory, pki):
    """A TLS server with the authorizer on: ``admin`` a super user, ``alice`` allowed to READ
    topic ``orders`` (so that the producer's first Metadata passes) but not to WRITE it."""
    from .conftest import launch_server

    directory = tmp_path_factory.mktemp("cli-acls")
    file = directory / "creds.json"
    for user in ("admin", "alice"):
        (directory / f"{user}.pw").write_text(f"{user}-secret\n")
        assert stratalog("credentials", "add", "--file", str(file), "--user", user,
                         "--password-file", str(directory / f"{user}.pw"),
                         "--iterations", "4096").returncode == 0
    server = launch_server(
        directory / "data",
        "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
        "--authentication-credentials-file", str(file),
        "--authorizer", "acl", "--super-users", "User:admin",
    )

    def as_user(user: str) -> list[str]:
        return ["--target", server.target, "--ca-file", str(pki.ca), "--user", user,
                "--password-file", str(directory / f"{user}.pw")]

    for command in (("topics", "create", "orders", "--partitions", "2"),
                    ("acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                     "--topic", "orders")):
        done = stratalog(*as_user("admin"), *command)
        assert done.returncode == 0, done.stderr
    yield as_user, server
    assert server.stop() == 0


def _assert_one_write_refusal(printed: str) -> None:
    """Issue 25 item 9: the refusal said `may not IDEMPOTENT_WRITE Cluster:kafka-cluster`
    three times; it must name WRITE, the grant that gives it, once."""
    assert printed.count("may not") == 1, printed
    assert "User:alice may not WRITE" in printed, printed
    assert ("stratalog acls add --allow-principal User:alice --operation WRITE --topic"
            in printed), printed
    assert "may not IDEMPOTENT_WRITE" not in printed, printed


@pytest.mark.parametrize("lines", [1, 5000])
def test_a_produce_without_write_is_refused_in_one_line(acl_server, lines: int) -> None:
    """The whole input at once (the summary line reports the refusal), small and in several
    batches."""
    data = "".join(f"{i}\n" for i in range(lines)).encode()
    as_user, _ = acl_server
    refused = stratalog(*as_user("alice"), "produce", "orders", stdin=data)
    assert refused.returncode == 1, refused.stderr
    assert refused.stdout == b""
    _assert_one_write_refusal(refused.stderr.decode())


def test_a_streamed_produce_without_write_is_refused_at_once_in_one_line(acl_server) -> None:
    """Input still open when the refusal comes (a terminal, ``tail -f``): the refusal is printed
    while the input stays open (it was printed only at its end, and never at Ctrl-C), and once:
    not again by the summary, nor by the sends that follow it."""
    as_user, _ = acl_server
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
    process = subprocess.Popen([*CLI, *as_user("alice"), "produce", "orders"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=clean)
    assert process.stdin is not None and process.stderr is not None
    assert process.stdout is not None
    try:
        process.stdin.write(b"first\n")
        process.stdin.flush()
        printed = b""
        deadline = time.monotonic() + 60
        with selectors.DefaultSelector() as selector:
            selector.register(process.stderr, selectors.EVENT_READ)
            while b"may not" not in printed:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"no refusal within 60 s of the first line: {printed!r}"
                if selector.select(remaining):
                    chunk = os.read(process.stderr.fileno(), 65536)
                    assert chunk, f"it exited {process.wait()}, input open: {printed!r}"
                    printed += chunk
        assert process.poll() is None  # still reading its input
        process.stdin.write(b"second\nthird\n")
        process.stdin.close()
        assert process.wait(60) == 1
        printed += process.stderr.read()
        assert process.stdout.read() == b""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            stream.close()
    _assert_one_write_refusal(printed.decode())


def test_acls_on_a_group(acl_server) -> None:
    """``acls add --consumer --topic T --group G`` lets alice read T as a member of G (READ on
    the group, as kafka-acls.sh's --consumer); ``acls list --group G`` shows it; once removed,
    her ``consume --group`` is refused, naming the group."""
    as_user, _ = acl_server
    for command in (("topics", "create", "ledger"),
                    ("acls", "add", "--allow-principal", "User:alice", "--consumer",
                     "--topic", "ledger", "--group", "billing")):
        done = stratalog(*as_user("admin"), *command)
        assert done.returncode == 0, done.stderr
    produced = stratalog(*as_user("admin"), "produce", "ledger", stdin=b"entry\n")
    assert produced.returncode == 0, produced.stderr
    listed = stratalog(*as_user("admin"), "acls", "list", "--group", "billing", "--format",
                       "json")
    assert listed.returncode == 0, listed.stderr
    assert [(b["resource_type"], b["resource_name"], b["operation"])
            for b in json.loads(listed.stdout)] == [("GROUP", "billing", "READ")]

    read = stratalog(*as_user("alice"), "consume", "ledger", "--group", "billing",
                     "--from-beginning", "--max-records", "1")
    assert read.returncode == 0, read.stderr
    assert read.stdout == b"entry\n"

    removed = stratalog(*as_user("admin"), "acls", "remove", "--group", "billing")
    assert removed.returncode == 0, removed.stderr
    refused = stratalog(*as_user("alice"), "consume", "ledger", "--group", "billing",
                        "--max-records", "1")
    assert refused.returncode == 1, refused.stderr
    # Once, in the command's words (not restated by the group member's log lines).
    assert refused.stderr.decode().splitlines() == [
        "stratalog consume: not authorized: User:alice may not DESCRIBE Group:billing "
        "[NOT_AUTHORIZED]"]
