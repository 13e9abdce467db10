"""The client's TLS configuration and credentials: metadata, files, environment, plaintext."""

from __future__ import annotations

import base64
import pickle
from pathlib import Path

import pytest

from stratalog.client import Client, Credentials, Producer, SyncClient, TlsConfig
from stratalog.client.credentials import from_environment, read_secret_file


def test_metadata_of_a_password_and_a_token() -> None:
    basic = Credentials.password("alice", "pa:ss").metadata
    assert basic == (("authorization", "Basic " + base64.b64encode(b"alice:pa:ss").decode()),)
    assert Credentials.token("abc.def").metadata == (("authorization", "Bearer abc.def"),)
    assert "pa:ss" not in repr(Credentials.password("alice", "pa:ss"))
    assert pickle.loads(pickle.dumps(Credentials.token("t"))) == Credentials.token("t")
    for bad in (lambda: Credentials.password("a:b", "x"), lambda: Credentials.token("")):
        with pytest.raises(ValueError):
            bad()


async def test_credentials_are_refused_over_plaintext() -> None:
    with pytest.raises(ValueError, match="without TLS"):
        SyncClient("127.0.0.1:1", auth=Credentials.password("alice", "pw"))
    with pytest.raises(ValueError, match="without TLS"):
        Client("127.0.0.1:1", auth=Credentials.token("t"))
    with pytest.raises(ValueError, match="without TLS"):
        Producer("127.0.0.1:1", auth=Credentials.token("t"))
    SyncClient("127.0.0.1:1", auth=Credentials.token("t", plaintext_allowed=True)).close()
    SyncClient("127.0.0.1:1", tls=TlsConfig(), auth=Credentials.token("t")).close()


def test_files_and_environment(tmp_path: Path, pki) -> None:
    (tmp_path / "pw").write_text("secret\nignored\n")
    (tmp_path / "empty").write_text("")
    assert read_secret_file(tmp_path / "pw") == "secret"
    with pytest.raises(ValueError, match="empty"):
        read_secret_file(tmp_path / "empty")
    assert from_environment({}) == (None, None)
    tls, auth = from_environment({
        "STRATALOG_TLS_CA_FILE": str(pki.ca),
        "STRATALOG_TLS_CERT_FILE": str(pki.client[0]),
        "STRATALOG_TLS_KEY_FILE": str(pki.client[1]),
        "STRATALOG_USER": "alice", "STRATALOG_PASSWORD_FILE": str(tmp_path / "pw"),
    })
    assert tls is not None and tls.ca_pem == pki.ca.read_bytes()
    assert tls.cert_pem == pki.client[0].read_bytes()
    assert auth == Credentials.password("alice", "secret")
    tls, _ = from_environment({"STRATALOG_TLS": "true"})
    assert tls == TlsConfig()
    with pytest.raises(ValueError, match="go together"):
        from_environment({"STRATALOG_USER": "alice"})
    with pytest.raises(ValueError, match="not both"):
        from_environment({"STRATALOG_USER": "alice", "STRATALOG_TOKEN_FILE": "x"})
    with pytest.raises(ValueError, match="go together"):
        TlsConfig.from_files(pki.ca, pki.client[0])
    with pytest.raises(ValueError, match="no PEM block"):
        TlsConfig.from_files(tmp_path / "pw")
