"""A client whose TLS set-up is not the server's is told which way, by the library and the CLI.

Issue 25 item 6: a plaintext client of a TLS server, or a client without a certificate of an
mTLS server, got gRPC's "Socket closed"; with ``--tls`` and a private CA, a C-core log line
(``ssl_transport_security.cc ... Handshake failed``) and a message ending in ": OK". Three real
servers on 127.0.0.1 (TLS, mTLS, plaintext) with the session's test PKI (tests/conftest.py),
and every mismatch of a client against them: the SyncClient, the async Client (unary calls and
its Session stream), a cluster client (several bootstrap targets: its connection wait has no
gRPC details, so the probe tells), a Consumer and a Producer (not retried: the error is not
retriable), and the ``stratalog`` command's one line and exit code.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratalog.client import Client, Consumer, Producer, SyncClient, TlsConfig
from stratalog.client.errors import BrokerUnavailableError, TlsHandshakeError
from stratalog.client.tls_diagnosis import TlsProblem

from .conftest import ServerProcess, launch_server

DEADLINE_S = 60
CLI = [sys.executable, "-m", "stratalog.cli"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, pki) -> Iterator[dict[str, ServerProcess]]:
    directory = tmp_path_factory.mktemp("tls-diagnosis")
    tls = ("--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]))
    started = {
        "tls": launch_server(directory / "tls", *tls),
        "mtls": launch_server(directory / "mtls", *tls, "--tls-ca-file", str(pki.ca),
                              "--tls-client-auth", "required"),
        "plain": launch_server(directory / "plain"),
    }
    yield started
    for server in started.values():
        assert server.stop(signal.SIGTERM) == 0, server.log_text()[-4000:]


def _cases(pki, servers) -> list[tuple[str, str, TlsConfig | None, TlsProblem, str]]:
    """(name, target, client TLS, the problem, words of the message) for every mismatch."""
    ca = TlsConfig.from_files(pki.ca)
    return [
        ("plaintext client, TLS server", servers["tls"].target, None,
         TlsProblem.SERVER_REQUIRES_TLS, "the server requires TLS"),
        ("plaintext client, mTLS server", servers["mtls"].target, None,
         TlsProblem.SERVER_REQUIRES_TLS, "the server requires TLS"),
        ("system CAs, private CA", servers["tls"].target, TlsConfig(),
         TlsProblem.SERVER_CERTIFICATE_UNTRUSTED,
         "certificate not trusted (unable to get local issuer certificate)"),
        ("another CA", servers["tls"].target, TlsConfig.from_files(pki.other_ca),
         TlsProblem.SERVER_CERTIFICATE_UNTRUSTED, "certificate not trusted"),
        ("no client certificate", servers["mtls"].target, ca,
         TlsProblem.SERVER_REQUIRES_CLIENT_CERTIFICATE,
         "the server requires a client certificate"),
        ("a certificate from another CA", servers["mtls"].target,
         TlsConfig.from_files(pki.ca, *pki.stranger),
         TlsProblem.CLIENT_CERTIFICATE_REFUSED, "the server refused the client certificate"),
        ("TLS client, plaintext server", servers["plain"].target, ca,
         TlsProblem.SERVER_NOT_TLS, "the server does not speak TLS"),
        ("a name the certificate is not for", servers["tls"].target,
         TlsConfig.from_files(pki.ca, server_name="elsewhere.example"),
         TlsProblem.SERVER_NAME_MISMATCH,
         "the server's certificate is not for this name (elsewhere.example)"),
    ]


def _check(error: BaseException, target: str, problem: TlsProblem, words: str) -> None:
    assert isinstance(error, TlsHandshakeError), repr(error)
    assert isinstance(error, BrokerUnavailableError)  # still: the server did not answer
    assert (error.problem, error.address) == (problem, target)
    assert not error.retriable
    assert error.message.startswith(words), error.message
    assert f"at {target}: " in error.message
    assert ": OK" not in error.message and "Socket closed" not in error.message


def test_sync_client_says_which_mismatch(servers, pki) -> None:
    for _name, target, tls, problem, words in _cases(pki, servers):
        with SyncClient(target, tls=tls, timeout_s=10) as client:
            with pytest.raises(TlsHandshakeError) as caught:
                client.list_topics()
            _check(caught.value, target, problem, words)
            with pytest.raises(TlsHandshakeError):  # the wait for a connection too
                client.wait_ready(timeout_s=0.5)
    # What works still works, and a dead address is no TLS problem.
    with SyncClient(servers["mtls"].target, tls=TlsConfig.from_files(pki.ca, *pki.client)) as ok:
        assert ok.list_topics() == []
    with SyncClient(servers["plain"].target) as ok:
        assert ok.list_topics() == []
    with SyncClient("127.0.0.1:1", timeout_s=5) as nobody, \
            pytest.raises(BrokerUnavailableError) as caught:
        nobody.list_topics()
    assert type(caught.value) is BrokerUnavailableError and caught.value.retriable


async def test_async_client_says_which_mismatch(servers, pki) -> None:
    async def run() -> None:
        for _name, target, tls, problem, words in _cases(pki, servers):
            async with Client(target, tls=tls, timeout_s=10) as client:
                with pytest.raises(TlsHandshakeError) as caught:
                    await client.list_topics()  # a unary call
                _check(caught.value, target, problem, words)
                with pytest.raises(TlsHandshakeError) as caught:
                    await client.list_offsets("t", 0, -1)  # on the Session stream
                _check(caught.value, target, problem, words)
            # A cluster client waits for a connection first: no gRPC details, the probe tells.
            port = target.rsplit(":", 1)[1]
            async with Client([target, f"localhost:{port}"], tls=tls, timeout_s=10) as client:
                with pytest.raises(TlsHandshakeError) as caught:
                    await client.list_topics()
                assert caught.value.problem == problem, repr(caught.value)

    await asyncio.wait_for(run(), DEADLINE_S)


async def test_consumer_and_producer_fail_at_once(servers, pki) -> None:
    """Not retriable: a Consumer with many retries and a Producer with a long delivery
    timeout raise the diagnosis instead of retrying until they give up."""
    target = servers["tls"].target

    async def run() -> None:
        with pytest.raises(TlsHandshakeError) as caught:
            async with Consumer(target, "t", retries=1000, retry_backoff_ms=1000) as consumer:
                [r async for r in consumer]
        assert caught.value.problem is TlsProblem.SERVER_REQUIRES_TLS
        async with Client(target) as client:
            producer = Producer(client, delivery_timeout_ms=600_000, max_block_ms=600_000)
            with pytest.raises(TlsHandshakeError):
                async with producer:
                    await (await producer.send("t", b"v", partition=0))

    await asyncio.wait_for(run(), DEADLINE_S)


def _stratalog(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("STRATALOG_", "GRPC_VERBOSITY", "GRPC_TRACE"))}
    clean.update(env or {})
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          env=clean)


def test_cli_prints_one_line_with_the_option_to_pass(servers, pki, tmp_path: Path) -> None:
    tls, mtls, plain = (servers[n].target for n in ("tls", "mtls", "plain"))
    ca = ("--ca-file", str(pki.ca))
    expected = [
        (("--target", tls, "topics", "list"),
         f"stratalog topics list: the server requires TLS at {tls}: pass --ca-file"),
        (("--target", tls, "--tls", "topics", "list"),
         "stratalog topics list: certificate not trusted (unable to get local issuer "
         f"certificate) at {tls}: pass --ca-file with the CA that signed it"),
        (("--target", mtls, *ca, "whoami"),
         f"stratalog whoami: the server requires a client certificate at {mtls}: "
         "pass --cert-file and --key-file"),
        (("consume", "t", "--target", mtls, *ca, "--cert-file", str(pki.stranger[0]),
          "--key-file", str(pki.stranger[1])),
         f"stratalog consume: the server refused the client certificate at {mtls}: "
         "--cert-file is not signed by a CA the server trusts"),
        (("--target", plain, *ca, "topics", "list"),
         f"stratalog topics list: the server does not speak TLS at {plain}: it listens "
         "without TLS"),
        (("--target", tls, *ca, "--server-name", "elsewhere.example", "topics", "list"),
         "stratalog topics list: the server's certificate is not for this name "
         f"(elsewhere.example) at {tls}: pass --server-name"),
    ]
    for args, start in expected:
        run = _stratalog(*args)
        assert run.returncode == 3, (args, run.stderr)
        # One line: no C-core log line (ssl_transport_security.cc), no traceback.
        assert run.stderr.count("\n") == 1 and run.stderr.startswith(start), (args, run.stderr)
        assert ": OK" not in run.stderr
    # gRPC's log stays the user's to turn on: its handshake line is back with GRPC_VERBOSITY.
    loud = _stratalog("--target", tls, "--tls", "topics", "list",
                      env={"GRPC_VERBOSITY": "INFO"})
    assert loud.returncode == 3 and "Handshake failed" in loud.stderr, loud.stderr
