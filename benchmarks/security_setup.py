"""What the benchmarks need to run a server with TLS and authentication on (issue 13).

A test PKI (tests/conftest.py's, made with the ``cryptography`` package of the dev extras) and a
credential file with one user, ``bench``, at the CLI's default 100,000 PBKDF2 iterations: the
figures then include the first, uncached check, as a real deployment's would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stratalog.client import Credentials, TlsConfig

__all__ = ["SecureSetup", "make_secure_setup"]

USER = "bench"
PASSWORD = "bench-password"


@dataclass(frozen=True)
class SecureSetup:
    """The server's flags and the client's TLS and credentials for a TLS + password server."""

    server_flags: tuple[str, ...]
    tls: TlsConfig
    auth: Credentials
    ca_file: Path


def make_secure_setup(directory: Path) -> SecureSetup:
    from stratalog.server.security.credentials import CredentialFile
    from tests.conftest import make_test_pki

    pki = make_test_pki(directory)
    credentials = directory / "credentials.json"
    CredentialFile().with_user(USER, PASSWORD).save(credentials)
    return SecureSetup(
        server_flags=(
            "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
            "--authentication-credentials-file", str(credentials),
        ),
        tls=TlsConfig.from_files(pki.ca),
        auth=Credentials.password(USER, PASSWORD),
        ca_file=pki.ca,
    )
