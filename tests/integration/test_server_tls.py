"""TLS and mTLS on a live server: the listener and the metrics endpoint, and SIGHUP reloads.

Certificates come from the session's test PKI (tests/conftest.py, made with ``cryptography``).
Which certificate a listener serves is read from a TLS handshake of Python's ``ssl`` module
(ALPN h2, as a gRPC client offers), so a reload is observed on a new connection while an open
Subscribe stream shows that the connection made before it still works.
"""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from stratalog.client import Credentials, SyncClient, TlsConfig
from stratalog.client.errors import BrokerUnavailableError
from stratalog.server.security.credentials import CredentialFile

from .conftest import ServerProcess


def served_certificate(port: int, ca: Path, client: tuple[Path, Path] | None = None) -> bytes:
    """The DER certificate a TLS handshake with 127.0.0.1:``port`` receives."""
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2"])
    if client is not None:
        context.load_cert_chain(str(client[0]), str(client[1]))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, \
            context.wrap_socket(sock, server_hostname="localhost") as tls:
        certificate = tls.getpeercert(binary_form=True)
    assert certificate is not None
    return certificate


def der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def scrape(server: ServerProcess, ca: Path, client: tuple[Path, Path] | None = None) -> str:
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(str(client[0]), str(client[1]))
    url = f"https://localhost:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, context=context, timeout=10) as answer:
        return answer.read().decode()


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def tls_flags(cert: Path, key: Path, *more: str) -> tuple[str, ...]:
    return ("--tls-cert-file", str(cert), "--tls-key-file", str(key), *more)


def test_tls_listener_and_metrics(start_server, pki, tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", *tls_flags(*pki.server))
    assert served_certificate(server.port, pki.ca) == der(pki.server[0])
    with SyncClient(server.target, tls=TlsConfig.from_files(pki.ca)) as client:
        client.create_topic("tls-topic")
        assert [t.name for t in client.list_topics()] == ["tls-topic"]
    assert "stratalog_requests_total" in scrape(server, pki.ca)
    # A plaintext client does not get through, nor one that trusts another CA.
    with SyncClient(server.target, timeout_s=5) as client, \
            pytest.raises(BrokerUnavailableError):
        client.list_topics()
    with SyncClient(server.target, tls=TlsConfig.from_files(pki.other_ca), timeout_s=5) as c, \
            pytest.raises(BrokerUnavailableError):
        c.list_topics()


def test_mtls_principal_is_the_certificate_subject(start_server, pki, tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", *tls_flags(
        *pki.server, "--tls-ca-file", str(pki.ca), "--tls-client-auth", "required"))
    with_cert = TlsConfig.from_files(pki.ca, *pki.client)
    with SyncClient(server.target, tls=with_cert) as client:
        me = client.who_am_i()
        assert (me.principal, me.authenticated_by) == (f"User:{pki.CLIENT_SUBJECT}", "tls")
        assert client.list_topics() == []
    # Without a certificate, or with one from another CA, the handshake fails.
    for tls in (TlsConfig.from_files(pki.ca), TlsConfig.from_files(pki.ca, *pki.stranger)):
        with SyncClient(server.target, tls=tls, timeout_s=5) as client, \
                pytest.raises(BrokerUnavailableError):
            client.who_am_i()
    # The metrics endpoint asks for a client certificate too.
    assert "stratalog_requests_total" in scrape(server, pki.ca, pki.client)
    with pytest.raises((ssl.SSLError, OSError)):
        scrape(server, pki.ca)


def test_mtls_with_a_password_the_password_names_the_principal(
    start_server, pki, tmp_path: Path
) -> None:
    CredentialFile().with_user("alice", "pw", 4096).save(tmp_path / "c.json")
    server = start_server(tmp_path / "data", *tls_flags(
        *pki.server, "--tls-ca-file", str(pki.ca), "--tls-client-auth", "required",
        "--authentication-credentials-file", str(tmp_path / "c.json")))
    tls = TlsConfig.from_files(pki.ca, *pki.client)
    with SyncClient(server.target, tls=tls, auth=Credentials.password("alice", "pw")) as c:
        assert c.who_am_i()[:2] == ("User:alice", "password")
    with SyncClient(server.target, tls=tls) as client:
        assert client.who_am_i()[:2] == (f"User:{pki.CLIENT_SUBJECT}", "tls")


def test_certificate_reload_on_sighup(start_server, pki, tmp_path: Path) -> None:
    """A new connection sees the new certificate; an open one keeps working."""
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    shutil.copy(pki.server[0], cert)
    shutil.copy(pki.server[1], key)
    server = start_server(tmp_path / "data", *tls_flags(cert, key))
    tls = TlsConfig.from_files(pki.ca)
    with SyncClient(server.target, tls=tls) as old:
        old.create_topic("reload")
        old.produce("reload", 0, [b"before"])
        stream = old.subscribe("reload", 0, offset=0, timeout_s=60)
        assert [r.value for r in next(stream).records] == [b"before"]

        shutil.copy(pki.server2[0], cert)
        shutil.copy(pki.server2[1], key)
        server.process.send_signal(signal.SIGHUP)
        wait_for(lambda: served_certificate(server.port, pki.ca) == der(pki.server2[0]))
        # The server logs the reload after it serves the new certificate: wait for the line too.
        wait_for(lambda: "reloaded the TLS certificate" in server.log_text())
        context = ssl.create_default_context(cafile=str(pki.ca))
        with urllib.request.urlopen(f"https://localhost:{server.metrics_port}/metrics",
                                    context=context, timeout=10) as answer:
            assert answer.status == 200

        with SyncClient(server.target, tls=tls) as new:
            new.produce("reload", 0, [b"after"])
        # The stream opened before the reload is still on its connection and gets the record.
        assert [r.value for r in next(stream).records] == [b"after"]
        stream.close()

        # A key that is not the certificate's: refused, the previous certificate stays.
        shutil.copy(pki.server[1], key)
        server.process.send_signal(signal.SIGHUP)
        wait_for(lambda: "TLS reload failed" in server.log_text())
        assert served_certificate(server.port, pki.ca) == der(pki.server2[0])
        assert old.list_topics()[0].name == "reload"


def test_a_missing_certificate_stops_the_start(tmp_path: Path, pki) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
         "--log-dirs", str(tmp_path / "data"),
         *tls_flags(tmp_path / "nowhere.crt", pki.server[1])],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert "nowhere.crt" in result.stderr and "tls_cert_file" in result.stderr


def test_the_image_health_check_speaks_tls(start_server, pki, tmp_path: Path) -> None:
    """deploy/healthcheck.py reads the server's TLS settings from the environment, as in the
    container, and asks grpc.health.v1 over TLS (no credentials needed)."""
    import os
    import subprocess
    import sys

    server = start_server(tmp_path / "data", *tls_flags(*pki.server))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
    env.update({
        "STRATALOG_TLS_CERT_FILE": str(pki.server[0]),
        "STRATALOG_TLS_KEY_FILE": str(pki.server[1]),
        "STRATALOG_HEALTHCHECK_TARGET": server.target,
    })
    script = Path(__file__).resolve().parents[2] / "deploy" / "healthcheck.py"

    def run(**more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(script)], env={**env, **more},
                              capture_output=True, text=True, timeout=60)

    healthy = run(STRATALOG_HEALTHCHECK_CA_FILE=str(pki.ca))
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.startswith("SERVING")
    # Trusting the wrong CA: the check fails rather than skipping verification.
    assert run(STRATALOG_HEALTHCHECK_CA_FILE=str(pki.other_ca)).returncode == 1
