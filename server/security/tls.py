"""TLS on the server's listeners: certificate files, mTLS, and reloading them without a restart.

One set of files serves every listener: the gRPC port, the Kafka port and the Prometheus
endpoint::

    tls_cert_file     PEM certificate chain of the server (leaf first)
    tls_key_file      PEM private key of that certificate
    tls_ca_file       PEM CA certificates that client certificates must chain to (mTLS)
    tls_client_auth   "none": no client certificate asked for;
                      "required": every client presents one that chains to tls_ca_file, or the
                      handshake fails (Kafka's ssl.client.auth=required)

Kafka's third value, ``requested`` (verify a certificate if one is presented, accept clients
without), has no counterpart in gRPC's Python server: its credentials either ask for no
certificate or require and verify one (grpcio's ``server_credentials_ssl*`` pass only
``GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE`` or ``..._REQUIRE_..._AND_VERIFY`` to the core).
The settings refuse it with that explanation (docs/security.md).

The principal of an mTLS client is the subject of its certificate as RFC 2253 writes it,
``User:CN=client-1,O=example``: what Kafka's default ``ssl.principal.mapping.rules`` (DEFAULT)
gives, read from gRPC's ``auth_context()`` property ``x509_subject``
(:func:`certificate_principal`), or from the ``ssl`` module's verified peer certificate on the
Kafka listener (:func:`peer_certificate_principal`: the same RFC 2253 text, which gRPC's core
writes with OpenSSL's ``XN_FLAG_RFC2253``: the RDNs last to first, short attribute names).

Reload (SIGHUP): :meth:`ServerTls.reload` reads the three files again and checks them (the key
matches the certificate, the PEMs parse). If they are good, the next TLS handshake on either
listener uses them; connections already open keep the certificate they were made with (gRPC
asks :meth:`ServerTls._fetch` for a configuration at each new handshake, the metrics
endpoint takes :attr:`ServerTls.ssl_context` for each accepted socket, and the Kafka
listener's context, :meth:`ServerTls.listener_context`, swaps the current one in from its
``sni_callback``, which OpenSSL calls at every handshake, with or without SNI). If they are not, the
error names the file and the previous certificate stays in use.

Concurrency: :meth:`reload` runs on any thread (the server calls it in its thread pool); gRPC
calls the fetcher from its own threads; one lock guards the handover.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc

from .errors import SecurityConfigError
from .principal import Principal

__all__ = [
    "CLIENT_AUTH_MODES",
    "ServerTls",
    "TlsFiles",
    "certificate_principal",
    "is_tls",
    "peer_certificate_principal",
]

#: Values of ``tls_client_auth``.
CLIENT_AUTH_MODES = ("none", "required")
#: A PEM file is read whole; larger ones are refused (a CA bundle is ~200 KiB).
PEM_FILE_BYTES_MAX = 4 * 1024 * 1024

# gRPC's auth-context property names (grpc/grpc_security_constants.h).
_TRANSPORT_SECURITY_TYPE = "transport_security_type"
_X509_SUBJECT = "x509_subject"
_SSL = b"ssl"


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the server's TLS material is and whether clients must show a certificate."""

    cert_file: str
    key_file: str
    ca_file: str = ""
    client_auth: str = "none"

    def __post_init__(self) -> None:
        assert self.client_auth in CLIENT_AUTH_MODES, self.client_auth
        assert self.cert_file and self.key_file

    @property
    def client_certificate_required(self) -> bool:
        return self.client_auth == "required"


@dataclass(frozen=True, slots=True)
class _Material:
    """The PEM bytes of one load, checked; and the metrics endpoint's context built from them."""

    cert_chain: bytes
    private_key: bytes
    ca_certs: bytes | None
    ssl_context: ssl.SSLContext

    def grpc_configuration(self) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration(
            [(self.private_key, self.cert_chain)], root_certificates=self.ca_certs
        )


def _read_pem(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(PEM_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise SecurityConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if len(data) > PEM_FILE_BYTES_MAX:
        raise SecurityConfigError(f"the {what} {path} is larger than {PEM_FILE_BYTES_MAX} bytes")
    if b"-----BEGIN " not in data:
        raise SecurityConfigError(f"the {what} {path} holds no PEM block")
    return data


def _load(files: TlsFiles) -> _Material:
    """Read and check the files: the chain and key must load together into an SSL context
    (OpenSSL checks that the key is the certificate's), the CA file must hold certificates."""
    cert_chain = _read_pem(files.cert_file, "TLS certificate file (tls_cert_file)")
    private_key = _read_pem(files.key_file, "TLS key file (tls_key_file)")
    ca_certs = None
    if files.client_certificate_required:
        if not files.ca_file:
            raise SecurityConfigError(
                "tls_client_auth is 'required' but tls_ca_file is not set: the server needs "
                "the CA certificates that client certificates must chain to"
            )
        ca_certs = _read_pem(files.ca_file, "CA file (tls_ca_file)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # The ssl module loads from files only; the files were just read, so load the same
        # paths (a change between the two reads is caught by the next reload, not here).
        context.load_cert_chain(files.cert_file, files.key_file)
    except (ssl.SSLError, OSError) as exc:
        raise SecurityConfigError(
            f"the TLS certificate {files.cert_file} and key {files.key_file} do not load "
            f"together (is the key the certificate's, both PEM?): {exc}"
        ) from None
    if ca_certs is not None:
        try:
            context.load_verify_locations(cadata=ca_certs.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError) as exc:
            raise SecurityConfigError(f"the CA file {files.ca_file} holds no usable "
                                      f"certificate: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return _Material(cert_chain, private_key, ca_certs, context)


class ServerTls:
    """The server's current TLS material and its reload.

    Holds the files' paths and the last good load. Crash behaviour: nothing on disk is
    written. Concurrency: thread-safe (see the module docstring).
    """

    def __init__(self, files: TlsFiles) -> None:
        """Load the files. Raises SecurityConfigError naming the file at fault."""
        self.files = files
        self._lock = threading.Lock()
        self._material = _load(files)
        self._pending: grpc.ServerCertificateConfiguration | None = None

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The context for the next metrics connection (the last good load)."""
        with self._lock:
            return self._material.ssl_context

    def listener_context(self) -> ssl.SSLContext:
        """A context for an asyncio server (the Kafka listener) that serves the last good load
        at each new handshake: its ``sni_callback`` moves the handshake onto
        :attr:`ssl_context` (OpenSSL's ``SSL_set_SSL_CTX``: the certificate, key and client CA
        of the current load). The verify mode is the base context's, which a reload does not
        change (``tls_client_auth`` is not reloaded)."""
        base = _load(self.files).ssl_context

        def swap(ssl_object: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                 context: ssl.SSLContext) -> None:
            current = self.ssl_context
            if current is not context:
                ssl_object.context = current

        base.sni_callback = swap
        return base

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Credentials for ``add_secure_port`` that pick up reloads at each new handshake."""
        with self._lock:
            initial = self._material.grpc_configuration()
        return grpc.dynamic_ssl_server_credentials(
            initial, self._fetch,
            require_client_authentication=self.files.client_certificate_required,
        )

    def reload(self) -> None:
        """Read the files again; new handshakes use them from now on. Blocking.

        Raises:
            SecurityConfigError: a file is missing or bad; the previous material stays.
        """
        material = _load(self.files)
        with self._lock:
            self._material = material
            self._pending = material.grpc_configuration()

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        # gRPC's certificate_configuration_fetcher, called at every new handshake: a new
        # configuration once after a reload, None ("unchanged") otherwise.
        with self._lock:
            pending, self._pending = self._pending, None
        return pending


def _first(values: Sequence[bytes] | None) -> bytes | None:
    return values[0] if values else None


def is_tls(auth_context: Mapping[str, Sequence[bytes]]) -> bool:
    """Whether the call came over TLS, from ``ServicerContext.auth_context()``."""
    return _first(auth_context.get(_TRANSPORT_SECURITY_TYPE)) == _SSL


def certificate_principal(auth_context: Mapping[str, Sequence[bytes]]) -> Principal | None:
    """``User:<subject>`` of the client certificate the TLS handshake verified, or None when
    the call came without one (plaintext, or TLS with ``tls_client_auth = "none"``)."""
    if not is_tls(auth_context):
        return None
    subject = _first(auth_context.get(_X509_SUBJECT))
    if not subject:
        return None
    return Principal.user(subject.decode("utf-8", "replace"))



# OpenSSL's long attribute names (what ``SSLSocket.getpeercert()`` gives) -> the short names
# RFC 2253 and OpenSSL's XN_FLAG_RFC2253 write; others are written as OpenSSL names them.
_SHORT_NAMES = {
    "commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
    "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
_RFC2253_SPECIAL = frozenset(',+"\\<>;')


def _rfc2253_value(value: str) -> str:
    escaped = "".join(f"\\{c}" if c in _RFC2253_SPECIAL else c for c in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and len(escaped) > 1:
        escaped = escaped[:-1] + "\\ "
    return escaped


def peer_certificate_principal(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> Principal | None:
    """``User:<subject>`` of the client certificate a handshake of the ``ssl`` module verified
    (RFC 2253, as :func:`certificate_principal` reads it from gRPC), or None without one
    (no TLS, or no certificate asked for)."""
    if ssl_object is None:
        return None
    certificate = ssl_object.getpeercert()
    if not certificate:
        return None
    subject = certificate.get("subject") or ()
    rdns = []
    for rdn in reversed(subject):  # RFC 2253 writes the last RDN first
        rdns.append("+".join(f"{_SHORT_NAMES.get(name, name)}={_rfc2253_value(value)}"
                             for name, value in rdn))
    if not rdns:
        return None
    return Principal.user(",".join(rdns))
