"""cli/connection.py's words for a TLS set-up the server refused: the command's options, not
TlsConfig's (the library's message, tests/unit/client/test_tls_diagnosis.py)."""

from __future__ import annotations

from stratalog.cli.connection import tls_failure
from stratalog.client.errors import TlsHandshakeError
from stratalog.client.tls_diagnosis import TlsProblem


def test_the_advice_names_the_option_to_pass() -> None:
    untrusted = TlsHandshakeError(
        "m", problem=TlsProblem.SERVER_CERTIFICATE_UNTRUSTED,
        detail="unable to get local issuer certificate", address="db1:50051")
    assert tls_failure(untrusted) == (
        "certificate not trusted (unable to get local issuer certificate) at db1:50051: "
        "pass --ca-file with the CA that signed it")
    expired = TlsHandshakeError("m", problem=TlsProblem.SERVER_CERTIFICATE_UNTRUSTED,
                                detail="certificate has expired", address="db1:50051")
    assert tls_failure(expired) == ("certificate not trusted (certificate has expired) at "
                                    "db1:50051: the server needs a valid certificate")
    assert tls_failure(TlsHandshakeError(
        "m", problem=TlsProblem.SERVER_REQUIRES_TLS, address="db1:50051")) == (
        "the server requires TLS at db1:50051: pass --ca-file with the CA that signed its "
        "certificate (--tls: the system's CAs)")
    for problem in TlsProblem:  # every problem has its advice
        text = tls_failure(TlsHandshakeError("m", problem=problem, address="a:1"))
        assert text.startswith(f"{problem.value} at a:1: ") and "--" in text
