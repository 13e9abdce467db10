"""Shared test fixtures: the Kafka-written segment files kept in tests/fixtures, and a test PKI
(a CA, server and client certificates) for the TLS and mTLS tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Real Apache Kafka output, committed byte for byte (tests/fixtures/kafka-written/README.md).
KAFKA_WRITTEN = PROJECT_ROOT / "tests" / "fixtures" / "kafka-written"


@pytest.fixture(scope="session")
def kafka_written_dir() -> Path:
    if not KAFKA_WRITTEN.is_dir():
        pytest.fail(f"Kafka-written fixtures not found at {KAFKA_WRITTEN}")
    return KAFKA_WRITTEN


# ------------------------------------------------------------------------ a test PKI (TLS, mTLS)


@dataclass(frozen=True)
class TestPki:
    """PEM files of a test public-key infrastructure, made with the ``cryptography`` package.

    ``ca`` signs ``server`` (SANs ``localhost`` and ``127.0.0.1``), ``server2`` (the same
    names, another key and serial: a renewed certificate for reload tests) and ``client``
    (subject ``O=example, CN=client-1``, which RFC 2253 writes ``CN=client-1,O=example``);
    ``other_ca`` signs ``stranger``, a client certificate the server must refuse.
    Each certificate is ``(cert_path, key_path)``.
    """

    directory: Path
    ca: Path
    other_ca: Path
    server: tuple[Path, Path]
    server2: tuple[Path, Path]
    client: tuple[Path, Path]
    stranger: tuple[Path, Path]

    CLIENT_SUBJECT = "CN=client-1,O=example"


def make_test_pki(directory: Path) -> TestPki:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(*parts: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
        return x509.Name([x509.NameAttribute(oid, value) for oid, value in parts])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        path.write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        return path

    def write_cert(cert: x509.Certificate, path: Path) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    def authority(label: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = name((NameOID.ORGANIZATION_NAME, "stratalog tests"),
                       (NameOID.COMMON_NAME, label))
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return cert, key

    def leaf(stem: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
             subject: x509.Name, server: bool) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(subject)
                   .issuer_name(issuer[0].subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.ExtendedKeyUsage(
                       [ExtendedKeyUsageOID.SERVER_AUTH if server
                        else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]), critical=False)
        cert = builder.sign(issuer[1], hashes.SHA256())
        return (write_cert(cert, directory / f"{stem}.crt"),
                write_key(key, directory / f"{stem}.key"))

    ca = authority("stratalog test CA")
    other = authority("another CA")
    server_name = name((NameOID.COMMON_NAME, "localhost"))
    return TestPki(
        directory=directory,
        ca=write_cert(ca[0], directory / "ca.crt"),
        other_ca=write_cert(other[0], directory / "other-ca.crt"),
        server=leaf("server", ca, server_name, True),
        server2=leaf("server2", ca, server_name, True),
        client=leaf("client", ca, name((NameOID.ORGANIZATION_NAME, "example"),
                                       (NameOID.COMMON_NAME, "client-1")), False),
        stranger=leaf("stranger", other, name((NameOID.COMMON_NAME, "client-1")), False),
    )


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """A test CA with server and client certificates (see :class:`TestPki`)."""
    return make_test_pki(tmp_path_factory.mktemp("pki"))
