"""etcd's connection settings read at start, and the start errors that name the cause
(server/cluster/etcd_client.py). The errors against a real etcd (TLS refused, wrong
credentials, no permission) are tests/cluster/test_etcd_security.py's; here, each of etcd's
and gRPC's messages as they arrive is classified as that test saw it."""

from __future__ import annotations

from pathlib import Path

import aetcd
import pytest
from aetcd.exceptions import UnauthenticatedError

from stratalog.server.cluster.endpoints import Endpoint
from stratalog.server.cluster.errors import (
    ClusterConfigError,
    CoordinationUnavailableError,
    EtcdAuthenticationError,
    EtcdTlsError,
)
from stratalog.server.cluster.etcd_client import EtcdSecurity, is_token_expired, start_failure
from tests.conftest import make_test_pki

ENDPOINT = Endpoint("10.0.0.5", 2379)
PLAIN = EtcdSecurity()
TLS = EtcdSecurity(tls=True)
USER = EtcdSecurity(username="strata", password="secret")


def test_load_reads_the_files_the_settings_name(tmp_path: Path) -> None:
    ca = make_test_pki(tmp_path).ca
    password = tmp_path / "password"
    password.write_text("s3cret\nignored second line\n")
    security = EtcdSecurity.load("etcds://h:1", ca_file=str(ca), username="strata",
                                 password_file=str(password))
    assert security.tls and security.ca_pem == ca.read_bytes()
    assert (security.username, security.password) == ("strata", "s3cret")
    assert "s3cret" not in repr(security)  # logs and tracebacks never show the password
    assert not EtcdSecurity.load("etcd://h:1").tls


@pytest.mark.parametrize(("setting", "content", "named"), [
    ("ca_file", None, "etcd_ca_file {path}: cannot read it"),
    ("ca_file", "not a certificate", "etcd_ca_file {path}: no PEM block"),
    ("password_file", "\n", "etcd_password_file {path}: the first line is empty"),
    ("password_file", b"\xff\xfe", "etcd_password_file {path}: not UTF-8 text"),
])
def test_load_refuses_unreadable_files_naming_setting_and_path(
        tmp_path: Path, setting: str, content: str | bytes | None, named: str) -> None:
    path = tmp_path / "file"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    kwargs = {setting: str(path)}
    if setting == "password_file":
        kwargs["username"] = "strata"
    with pytest.raises(ClusterConfigError, match=named.format(path=path)):
        EtcdSecurity.load("etcds://h:1", **kwargs)


def test_load_refuses_a_key_that_is_not_the_certificates(tmp_path: Path) -> None:
    pki = make_test_pki(tmp_path)
    security = EtcdSecurity.load("etcds://h:1", ca_file=str(pki.ca),
                                 cert_file=str(pki.client[0]), key_file=str(pki.client[1]))
    assert security.cert_pem == pki.client[0].read_bytes()
    # gRPC would only say "Failed to create security handshaker" at the first call.
    with pytest.raises(ClusterConfigError, match="KEY_VALUES_MISMATCH"):
        EtcdSecurity.load("etcds://h:1", cert_file=str(pki.client[0]),
                          key_file=str(pki.stranger[1]))
    not_a_ca = tmp_path / "bad-ca.pem"
    not_a_ca.write_text("-----BEGIN CERTIFICATE-----\nnonsense\n-----END CERTIFICATE-----\n")
    with pytest.raises(ClusterConfigError, match=f"etcd_ca_file {not_a_ca}: not PEM CA"):
        EtcdSecurity.load("etcds://h:1", ca_file=str(not_a_ca))


def test_start_failures_are_named_by_cause() -> None:
    handshake = aetcd.ConnectionFailedError(
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.5:2379: Tls"
        " handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL"
        " routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED")
    assert isinstance(start_failure(ENDPOINT, TLS, handshake), EtcdTlsError)
    closed = aetcd.ConnectionFailedError(
        "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:10.0.0.5:2379:"
        " Socket closed")
    assert "write etcds://" in str(start_failure(ENDPOINT, PLAIN, closed))
    assert "use etcd://" in str(start_failure(ENDPOINT, TLS, closed))
    wrong = aetcd.InvalidArgumentError(
        "etcdserver: authentication failed, invalid user ID or password")
    failure = start_failure(ENDPOINT, USER, wrong)
    assert isinstance(failure, EtcdAuthenticationError)
    assert "refused etcd_username 'strata'" in str(failure)
    anonymous = aetcd.InvalidArgumentError("etcdserver: user name is empty")
    assert "set etcd_username" in str(start_failure(ENDPOINT, PLAIN, anonymous))
    denied = aetcd.ClientError("etcdserver: permission denied")
    assert "may not read and write /stratalog" in str(
        start_failure(ENDPOINT, USER, denied, "/stratalog"))
    refused = aetcd.ConnectionFailedError(
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.5:2379: Failed"
        " to connect to remote host: Connection refused")
    failure = start_failure(ENDPOINT, PLAIN, refused)
    assert type(failure) is CoordinationUnavailableError
    assert str(failure).startswith("etcd 10.0.0.5:2379 did not answer")


def test_an_expired_token_is_told_from_other_refusals() -> None:
    assert is_token_expired(UnauthenticatedError("etcdserver: invalid auth token"))
    assert not is_token_expired(aetcd.InvalidArgumentError("etcdserver: user name is empty"))
    assert not is_token_expired(aetcd.ConnectionFailedError("Connection refused"))
