"""How a client checks who the server is (TLS) and proves who it is (mTLS, password, token).

Two values, both immutable and picklable (a Spark task receives them):

* :class:`TlsConfig`: the CA that signed the server's certificate (``None``: the system's
  roots), and for mTLS the client's certificate and key; PEM bytes, read from files once.
* :class:`Credentials`: a user and password, or a token (``<id>.<secret>``, from ``stratalog
  credentials add --token``), sent with every call as gRPC call credentials, i.e. the
  ``authorization`` metadata entry::

      authorization: Basic base64(<user>:<password>)
      authorization: Bearer <token>

  They are sent as plain metadata on each call (no per-call callback into Python, which gRPC's
  ``metadata_call_credentials`` plugins cost), and refused over a plaintext channel unless
  ``plaintext_allowed``: without TLS anyone on the path reads them. The server's rule is the
  same (``authentication_plaintext_allowed``).

:func:`from_environment` builds both from the variables the command line reads::

    STRATALOG_TLS              "true" for TLS with the system's roots (implied by the others)
    STRATALOG_TLS_CA_FILE      CA certificates (PEM) to verify the server with
    STRATALOG_TLS_CERT_FILE    client certificate (PEM) for mTLS
    STRATALOG_TLS_KEY_FILE     its private key (PEM)
    STRATALOG_TLS_SERVER_NAME  the name to check the server's certificate against, when it
                               is not the target's host (an IP address, a tunnel)
    STRATALOG_USER             user name; the password from STRATALOG_PASSWORD_FILE
    STRATALOG_PASSWORD_FILE    file whose first line is the password
    STRATALOG_TOKEN_FILE       file whose first line is the token

Secrets come from files, not from variables or flags, which other users of the machine can
read in ``ps`` or ``/proc``. docs/client.md and docs/security.md show both in use.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

__all__ = [
    "AUTHORIZATION_METADATA",
    "Credentials",
    "TlsConfig",
    "channel_security",
    "credentials_from",
    "from_environment",
    "read_secret_file",
]

#: The metadata key credentials travel in (HTTP's Authorization header).
AUTHORIZATION_METADATA = "authorization"
#: A secret file is read up to this many bytes (a password or a token is far shorter).
SECRET_FILE_BYTES_MAX = 64 * 1024

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def _read_pem(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"the {what} {path} holds no PEM block")
    return data


def read_secret_file(path: str | os.PathLike[str], what: str = "secret file") -> str:
    """The first line of ``path``, without its line end (a password or a token).

    Raises:
        ValueError: unreadable, empty, or larger than SECRET_FILE_BYTES_MAX.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(SECRET_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise ValueError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if len(data) > SECRET_FILE_BYTES_MAX:
        raise ValueError(f"the {what} {path} is larger than {SECRET_FILE_BYTES_MAX} bytes")
    lines = data.decode("utf-8", "strict").splitlines()
    if not lines or not lines[0]:
        raise ValueError(f"the {what} {path} is empty: its first line is the secret")
    return lines[0]


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS towards the server: which CA to trust, and the client's certificate for mTLS.

    ``ca_pem`` None trusts the system's roots; ``cert_pem`` and ``key_pem`` go together.
    ``server_name`` overrides the name checked against the server's certificate.
    """

    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = field(default=None, repr=False)
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_pem is None) != (self.key_pem is None):
            raise ValueError("a client certificate and its key go together: give both or neither")

    @classmethod
    def from_files(
        cls,
        ca_file: str | os.PathLike[str] | None = None,
        cert_file: str | os.PathLike[str] | None = None,
        key_file: str | os.PathLike[str] | None = None,
        server_name: str | None = None,
    ) -> TlsConfig:
        """Read the PEM files now (a missing one fails here, naming it, not at first call)."""
        if (cert_file is None) != (key_file is None):
            raise ValueError("--cert-file and --key-file (a client certificate and its key) go"
                             " together: give both or neither")
        return cls(
            ca_pem=None if ca_file is None else _read_pem(ca_file, "CA file"),
            cert_pem=None if cert_file is None else _read_pem(cert_file, "certificate file"),
            key_pem=None if key_file is None else _read_pem(key_file, "key file"),
            server_name=server_name or None,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_pem,
            private_key=self.key_pem,
            certificate_chain=self.cert_pem,
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        if self.server_name is None:
            return []
        return [("grpc.ssl_target_name_override", self.server_name)]


@dataclass(frozen=True, slots=True)
class Credentials:
    """A user and password, or a token: who the client says it is, on every call.

    Build with :meth:`password` or :meth:`token`. The secret never shows in ``repr``.
    ``plaintext_allowed`` lets them go over a channel without TLS (see the module docstring).
    """

    user: str | None = None
    secret: str = field(default="", repr=False)
    plaintext_allowed: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.secret, str) or not self.secret:
            raise ValueError("credentials need a password or a token")
        if self.user is not None and (not self.user or ":" in self.user):
            raise ValueError(f"a user name is non-empty and has no ':', got {self.user!r}")

    @classmethod
    def password(cls, user: str, password: str, *, plaintext_allowed: bool = False
                 ) -> Credentials:
        return cls(user, password, plaintext_allowed)

    @classmethod
    def token(cls, token: str, *, plaintext_allowed: bool = False) -> Credentials:
        return cls(None, token, plaintext_allowed)

    @property
    def kind(self) -> str:
        """``"password"`` or ``"token"``."""
        return "token" if self.user is None else "password"

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata that carries them."""
        if self.user is None:
            value = f"Bearer {self.secret}"
        else:
            pair = f"{self.user}:{self.secret}".encode()
            value = f"Basic {base64.b64encode(pair).decode('ascii')}"
        return ((AUTHORIZATION_METADATA, value),)


def channel_security(
    target: str,
    tls: TlsConfig | None,
    credentials: Credentials | None,
    channel_credentials: grpc.ChannelCredentials | None,
) -> tuple[grpc.ChannelCredentials | None, list[tuple[str, Any]], tuple[tuple[str, str], ...] | None]:
    """What a client opens its channel with: channel credentials (None = plaintext), extra
    channel options, and the metadata of every call.

    Raises:
        ValueError: both ``tls`` and raw ``channel_credentials``; credentials over plaintext
            without ``plaintext_allowed``.
    """
    if tls is not None and channel_credentials is not None:
        raise ValueError("give tls= or credentials= (raw gRPC channel credentials), not both")
    options: list[tuple[str, Any]] = []
    if tls is not None:
        channel_credentials = tls.channel_credentials()
        options = tls.channel_options()
    if credentials is None:
        return channel_credentials, options, None
    if channel_credentials is None and not credentials.plaintext_allowed:
        raise ValueError(
            f"refusing to send a {credentials.kind} to {target} without TLS: anyone on the path"
            " could read it. Connect with TLS (tls=TlsConfig(...), --tls), or allow it"
            " (plaintext_allowed=True, --allow-plaintext-credentials) on loopback or behind"
            " a TLS-terminating proxy"
        )
    return channel_credentials, options, credentials.metadata


def _flag(environ: Mapping[str, str], name: str) -> bool:
    value = environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name} must be true or false, got {environ[name]!r}")


def from_environment(
    environ: Mapping[str, str] | None = None,
) -> tuple[TlsConfig | None, Credentials | None]:
    """The TLS configuration and the credentials the ``STRATALOG_*`` variables describe (see
    the module docstring); ``(None, None)`` when none is set.

    Raises:
        ValueError: a file that cannot be read, a user without a password file, both a
            password and a token.
    """
    env = os.environ if environ is None else environ
    ca, cert, key = (env.get(f"STRATALOG_TLS_{n}_FILE") or None for n in ("CA", "CERT", "KEY"))
    server_name = env.get("STRATALOG_TLS_SERVER_NAME") or None
    tls = None
    if _flag(env, "STRATALOG_TLS") or ca or cert or key or server_name:
        tls = TlsConfig.from_files(ca, cert, key, server_name)
    return tls, credentials_from(
        env.get("STRATALOG_USER") or None,
        env.get("STRATALOG_PASSWORD_FILE") or None,
        env.get("STRATALOG_TOKEN_FILE") or None,
    )


def credentials_from(
    user: str | None,
    password_file: str | os.PathLike[str] | None,
    token_file: str | os.PathLike[str] | None,
    *,
    plaintext_allowed: bool = False,
) -> Credentials | None:
    """Credentials from a user and a password file, or a token file; None if none is given.

    Raises:
        ValueError: a user without a password file (or the reverse), both kinds at once, or
            a file that cannot be read.
    """
    if token_file is not None and (user is not None or password_file is not None):
        raise ValueError("give a user and password file, or a token file, not both")
    if token_file is not None:
        return Credentials.token(read_secret_file(token_file, "token file"),
                                 plaintext_allowed=plaintext_allowed)
    if (user is None) != (password_file is None):
        raise ValueError("a user and a password file go together (--user with --password-file)")
    if user is None or password_file is None:
        return None
    return Credentials.password(user, read_secret_file(password_file, "password file"),
                                plaintext_allowed=plaintext_allowed)
