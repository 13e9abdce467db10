"""The connector against a server with TLS and passwords: write and read back through Spark with
the TLS and credential options, refusals named, and the options' rules."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratalog.client import Credentials, SyncClient, TlsConfig
from stratalog.server.security.credentials import CredentialFile
from stratalog.server.security.principal import Principal
from stratalog.spark import OptionError
from stratalog.spark.options import parse_read_options

from .conftest import STARTUP_TIMEOUT_S, ServerProcess, _launch


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki) -> Iterator[tuple[ServerProcess, Path]]:
    directory = tmp_path_factory.mktemp("spark-secure")
    store = CredentialFile().with_user("spark", "spark-secret", 4096)
    store, token = store.with_new_token(Principal.user("etl"), 4096)
    store.save(directory / "creds.json")
    (directory / "pw").write_text("spark-secret\n")
    (directory / "token").write_text(token + "\n")
    server = _launch(
        directory / "data",
        "--tls-cert-file", str(pki.server[0]), "--tls-key-file", str(pki.server[1]),
        "--authentication-credentials-file", str(directory / "creds.json"),
    )
    yield server, directory
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(30) == 0, server.log_text()[-4000:]


def test_write_and_read_over_tls_with_a_password_and_a_token(spark, secured, pki) -> None:
    server, directory = secured
    tls = TlsConfig.from_files(pki.ca)
    with SyncClient(server.target, tls=tls,
                    auth=Credentials.password("spark", "spark-secret")) as client:
        client.wait_ready(STARTUP_TIMEOUT_S)
        client.create_topic("spark-secure", partitions=2)
    df = spark.createDataFrame([(f"v{i}",) for i in range(30)], "value string")
    (df.write.format("stratalog").option("target", server.target)
     .option("tls.rootCertificates", str(pki.ca))
     .option("user", "spark").option("passwordFile", str(directory / "pw"))
     .option("topic", "spark-secure").mode("append").save())
    rows = (spark.read.format("stratalog").option("target", server.target)
            .option("tls.rootCertificates", str(pki.ca))
            .option("tokenFile", str(directory / "token"))
            .option("subscribe", "spark-secure").load().collect())
    assert sorted(bytes(r["value"]).decode() for r in rows) == sorted(f"v{i}" for i in range(30))


def test_a_read_without_credentials_is_refused(spark, secured, pki) -> None:
    server, _ = secured
    with pytest.raises(Exception, match=r"AUTHENTICATION_FAILED|authentication required"):
        (spark.read.format("stratalog").option("target", server.target)
         .option("tls.rootCertificates", str(pki.ca))
         .option("subscribe", "spark-secure").load().collect())


def parse(options: dict[str, str]):
    return parse_read_options(options, streaming=False)


def test_credential_options(tmp_path: Path, pki) -> None:
    (tmp_path / "pw").write_text("secret\n")
    base = {"target": "127.0.0.1:1", "subscribe": "t"}
    parsed = parse({**base, "tls.rootCertificates": str(pki.ca), "user": "u",
                                 "passwordFile": str(tmp_path / "pw")})
    assert parsed.connection is not None and parsed.connection.credentials is not None
    assert parsed.connection.credentials.metadata == Credentials.password("u", "secret").metadata
    assert "secret" not in repr(parsed)
    with pytest.raises(OptionError, match="tls"):
        parse({**base, "user": "u", "passwordFile": str(tmp_path / "pw")})
    with pytest.raises(OptionError, match="go together"):
        parse({**base, "tls": "true", "user": "u"})
    with pytest.raises(OptionError, match="not both"):
        parse({**base, "tls": "true", "user": "u", "tokenFile": str(tmp_path / "pw")})
    with pytest.raises(OptionError, match="cannot read"):
        parse({**base, "tls": "true", "tokenFile": str(tmp_path / "missing")})
    allowed = parse({**base, "user": "u", "passwordFile": str(tmp_path / "pw"),
                                  "allowPlaintextCredentials": "true"})
    assert allowed.connection is not None and allowed.connection.tls is False
