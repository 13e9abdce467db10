"""What the benchmarks need to run a server with TLS, authentication and ACLs on (issue 13).

A test PKI (tests/conftest.py's, made with the ``cryptography`` package of the dev extras) and a
credential file with one user, ``bench``, at the CLI's default 100,000 PBKDF2 iterations: the
figures then include the first, uncached check, as a real deployment's would.

:func:`authorizer_flags` turns the authorizer on with one ACL (ALL on every topic for the
benchmark's principal, written into the server's log directory before it starts) and byte-rate
quotas far above what a benchmark moves, so that every call is authorized and every answer
measured by the quota code, and none delayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stratalog.client import Credentials, TlsConfig

__all__ = ["ANONYMOUS", "SecureSetup", "authorizer_flags", "make_secure_setup"]

USER = "bench"
PASSWORD = "bench-password"
#: The principal of calls without credentials (the plaintext servers').
ANONYMOUS = "User:ANONYMOUS"
#: Quotas no benchmark reaches (bytes per second).
UNREACHED_BYTE_RATE = 10**12


@dataclass(frozen=True)
class SecureSetup:
    """The server's flags and the client's TLS and credentials for a TLS + password server."""

    server_flags: tuple[str, ...]
    tls: TlsConfig
    auth: Credentials
    ca_file: Path
    #: The server's certificate and key (also in ``server_flags``).
    cert_file: Path
    key_file: Path


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
        cert_file=pki.server[0],
        key_file=pki.server[1],
    )


def authorizer_flags(log_dir: Path, principal: str) -> tuple[str, ...]:
    """Server flags for the authorizer with one ACL, ALL on every topic for ``principal``
    (``User:bench`` with :func:`make_secure_setup`'s credentials, :data:`ANONYMOUS` without),
    written into ``log_dir`` now, and quotas that are measured but never reached."""
    from stratalog.server.security.acl_store import AclStore
    from stratalog.server.security.acls import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    log_dir.mkdir(parents=True, exist_ok=True)
    AclStore.open([log_dir]).write([AclBinding(
        ResourceType.TOPIC, "*", PatternType.LITERAL, principal, "*", AclOperation.ALL,
        AclPermissionType.ALLOW,
    )])
    return ("--authorizer", "acl",
            "--quota-producer-byte-rate", str(UNREACHED_BYTE_RATE),
            "--quota-consumer-byte-rate", str(UNREACHED_BYTE_RATE))
