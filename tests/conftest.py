"""Shared test fixtures: the Kafka-written segment files kept in tests/fixtures, a test PKI
(a CA, server and client certificates) for the TLS and mTLS tests, and batches no builder
writes; and how pytest-xdist splits the suite among its workers.

``make test`` runs the suite in two phases (docs/development.md, "Two phases"): every test
not marked ``serial`` in parallel (``pytest -n auto --dist loadfile``), then the ``serial``
ones (memory, rate and latency measurements, which the parallel load would fail) in one
process. In the parallel phase a test module is one unit of work: its tests run in one worker,
in order, and share its module-scoped server as in a serial run. The Spark tests are one unit
together, so that one worker starts the session's JVM (6-18 s, ~1 GB) and not every worker;
and the workers take the slow directories first, so that a long unit does not start last and
run alone. What a test touches is its own: ports come from the OS (``127.0.0.1:0``, or
``free_port()`` of tests/integration/conftest.py), files go under ``tmp_path`` (a base
directory per worker), environment variables are set with ``monkeypatch`` or for a child
process only (docs/development.md, "Writing a test that runs in parallel").
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example deadline: Hypothesis's 200 ms deadline is a timing assertion, and on these
# shared machines (the parallel phase, other work beside it) an example that takes 325 ms
# failed a codec test as "flaky". Every test still bounds its examples by count.
settings.register_profile("stratalog", deadline=None)
settings.load_profile("stratalog")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Real Apache Kafka output, committed byte for byte (tests/fixtures/kafka-written/README.md).
KAFKA_WRITTEN = PROJECT_ROOT / "tests" / "fixtures" / "kafka-written"


# ------------------------------------------------------------------------ pytest-xdist

#: The directories in the order the parallel phase's workers take them: the slowest units first
#: (a Spark run is minutes, a crash loop half a minute, a cluster test seconds of etcd and
#: elections; a unit test module a second or two), so that the last units are short ones and
#: the workers finish together. Anything else comes after them, in collection order.
SLOW_FIRST = ("tests/spark/", "tests/crash/", "tests/cluster/", "tests/integration/",
              "tests/unit/")
#: The unit of work that holds every Spark test (the others' unit is their module).
SPARK_UNIT = "tests/spark/"


def _slowness_rank(nodeid: str) -> int:
    return next((rank for rank, prefix in enumerate(SLOW_FIRST) if nodeid.startswith(prefix)),
                len(SLOW_FIRST))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Only in an xdist worker: every worker sorts alike (xdist checks that they collected the
    # same list), and the scheduler hands out units in this order (make test passes
    # --no-loadscope-reorder; by default xdist would hand them out by test count, most
    # first). A serial run keeps pytest's own order. The sort is stable: a module's tests
    # keep theirs.
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: _slowness_rank(item.nodeid))


try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # pragma: no cover - a run without pytest-xdist is serial anyway
    LoadFileScheduling = None

if LoadFileScheduling is not None:

    class ModuleScheduling(LoadFileScheduling):
        """``--dist loadfile`` (a module per worker at a time), with every Spark test in one
        unit (:data:`SPARK_UNIT`)."""

        def _split_scope(self, nodeid: str) -> str:
            return SPARK_UNIT if nodeid.startswith(SPARK_UNIT) else super()._split_scope(nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
        """:class:`ModuleScheduling` for ``--dist loadfile``; xdist's own for other modes."""
        if config.getvalue("dist") != "loadfile":
            return None
        return ModuleScheduling(config, log)


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


@pytest.fixture(scope="session")
def batch_with_timestamp_delta() -> Callable[[int, int], bytes]:
    """``make(base_timestamp, delta)``: a CRC-valid one-record batch (base offset 0, value
    ``b"v"``) whose record's timestamp is ``base_timestamp + delta``, any int64s, even when the
    sum leaves int64 (which no builder writes: the probe's batches of issue 13, defect 5).

    The batch is built with a timestamp delta of 0, whose one-byte varint is then replaced by
    the delta's (small deltas only), the base and max timestamps set, and the CRC recomputed.
    """
    from stratalog.records.batch import rewrite_crc
    from stratalog.records.builder import build_batch
    from stratalog.records.varint import varlong_bytes

    delta_position = 61 + 2  # after the header: the record's length varint and attributes

    def make(base_timestamp: int, delta: int) -> bytes:
        batch = bytearray(build_batch([(0, None, b"v", ())]))
        encoded = varlong_bytes(delta)
        assert len(encoded) == 1 and batch[delta_position] == 0, "a small delta, in place of 0"
        batch[delta_position] = encoded[0]
        struct.pack_into(">qq", batch, 27, base_timestamp, base_timestamp)  # base, max
        rewrite_crc(batch, 0, len(batch))
        return bytes(batch)

    return make
