"""Why a connection failed, when TLS is the reason: the client's words for it.

gRPC reports a failed TLS set-up in words meant for its own developers, and in four cases out of
seven with none at all. What grpcio 1.85 says (the status details of the failed call):

    plaintext client, TLS server          "... ipv4:127.0.0.1:33241: Socket closed"
    no client certificate, mTLS server    "... ipv4:127.0.0.1:39665: Socket closed"
    client certificate the server refuses "... Socket closed"
    plaintext client, mTLS server         "... Socket closed"
    server certificate not trusted        "... Tls handshake failed (TSI_PROTOCOL_FAILURE):
                                           SSL_ERROR_SSL: error:1000007d:SSL routines:
                                           OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: unable to
                                           get local issuer certificate: OK"
    certificate not for the host name     "... Custom verification check failed with error:
                                           UNAUTHENTICATED: Hostname Verification Check failed."
    TLS client, plaintext server          "... SSL_ERROR_SSL: ... WRONG_VERSION_NUMBER ...: OK"

Two ways of telling them apart, tried in this order:

1. :func:`from_details` (no I/O): when the client's own side of the handshake failed, gRPC's
   details name the cause (the server's certificate did not verify, or not for this name, or
   the server answered the TLS ClientHello with something that is not TLS).
2. :func:`probe` (blocking, bounded by ``timeout_s``): when the server closed the connection
   ("Socket closed"; or no details at all, a cluster client's connection wait), the client
   connects once more with Python's :mod:`ssl` and looks at what the server does:

   * a plaintext client's server completes a TLS handshake: the server requires TLS;
   * a TLS client's server completes the handshake (the probe presents no client
     certificate) and then closes the connection without a byte of HTTP/2 (a gRPC server
     sends its SETTINGS frame first, unless it refused the client certificate, which with TLS
     1.3 happens after the client's side of the handshake finished) or with an alert: the
     server requires a client certificate, and refused the one gRPC presented if there was one;
   * the probe's own verification (the client's CA and server name) fails: as in 1.

   Anything else (the connection refused, a healthy answer, a timeout) is no TLS problem, and
   the caller keeps gRPC's error as it was. The probe sends nothing but a TLS handshake and the
   HTTP/2 connection preface, never credentials, and presents no client certificate (its key
   stays in gRPC's hands).

The probe runs only on the error path, and each caller bounds how often
(:class:`~stratalog.client.broker_connection.BrokerConnection`, the SyncClient): a failing
client costs the server one more connection per diagnosis, not one per retry.

A diagnosis becomes a :class:`~stratalog.client.errors.TlsHandshakeError` (not retriable: the
same request fails the same way until a configuration changes), whose ``problem`` the command
line turns into its own advice (cli/connection.py).
"""

from __future__ import annotations

import enum
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass

import grpc

from .credentials import TlsConfig
from .errors import BrokerUnavailableError, StratalogError, TlsHandshakeError

__all__ = [
    "PROBE_INTERVAL_S",
    "PROBE_TIMEOUT_S",
    "Diagnoser",
    "Diagnosis",
    "TlsProblem",
    "from_details",
    "host_and_port",
    "message",
    "probe",
    "unknown_issuer",
    "wants_probe",
]

#: The longest a probe takes in all (connect, handshake, first read): it runs on an error path
#: that the caller is waiting on.
PROBE_TIMEOUT_S = 2.0

#: A :class:`Diagnoser` probes an address at most once in this long, and gives the failures in
#: between the last probe's answer: retries and concurrent requests that fail together cost the
#: server one probe connection.
PROBE_INTERVAL_S = 1.0

# HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113 section 3.4): what a
# gRPC client sends first; a gRPC server answers it with its own SETTINGS.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"

# OpenSSL's and BoringSSL's reasons for a TLS record that is not TLS: the other side speaks
# plaintext (an HTTP/2 frame, an HTTP/1 answer).
_NOT_TLS_REASONS = ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL",
                    "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE")

# gRPC's details of a connection the server closed: worth a probe.
_CLOSED_BY_SERVER = ("Socket closed", "Connection reset by peer", "connection reset")

# The verification error text in gRPC's details, up to gRPC's own ": OK" suffix.
_VERIFY_FAILED = re.compile(r"CERTIFICATE_VERIFY_FAILED:\s*([^:]+?)\s*(?::\s*OK)?\s*$")


class TlsProblem(enum.Enum):
    """What went wrong; the value is the words a message starts with."""

    SERVER_REQUIRES_TLS = "the server requires TLS"
    SERVER_REQUIRES_CLIENT_CERTIFICATE = "the server requires a client certificate"
    CLIENT_CERTIFICATE_REFUSED = "the server refused the client certificate"
    SERVER_CERTIFICATE_UNTRUSTED = "certificate not trusted"
    SERVER_NAME_MISMATCH = "the server's certificate is not for this name"
    SERVER_NOT_TLS = "the server does not speak TLS"


@dataclass(frozen=True)
class Diagnosis:
    """A problem and, for a certificate that did not verify, the verifier's reason (e.g.
    "unable to get local issuer certificate", "certificate has expired"; empty otherwise)."""

    problem: TlsProblem
    detail: str = ""


def from_details(details: str, tls: bool) -> Diagnosis | None:
    """The problem gRPC's status ``details`` name, for a client with TLS on (``tls``) or off;
    None when they name none (then :func:`wants_probe` says whether to probe). No I/O."""
    if not tls:
        return None
    if "Hostname Verification Check failed" in details:
        return Diagnosis(TlsProblem.SERVER_NAME_MISMATCH)
    if "CERTIFICATE_VERIFY_FAILED" in details:
        match = _VERIFY_FAILED.search(details)
        return Diagnosis(TlsProblem.SERVER_CERTIFICATE_UNTRUSTED,
                         match.group(1) if match else "")
    if any(reason in details for reason in _NOT_TLS_REASONS):
        return Diagnosis(TlsProblem.SERVER_NOT_TLS)
    return None


def wants_probe(details: str | None) -> bool:
    """Whether a connection failure with these details (None: none known, e.g. a channel that
    went to TRANSIENT_FAILURE) may be the server refusing this client's TLS set-up."""
    return details is None or any(words in details for words in _CLOSED_BY_SERVER)


def host_and_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a ``HOST:PORT``, ``[IPV6]:PORT``, ``ipv4:HOST:PORT`` or
    ``dns:///HOST:PORT`` target; None for what a probe cannot dial (a unix socket, a name
    without a port, a list)."""
    if address.startswith(("unix:", "unix-abstract:", "vsock:")) or "," in address:
        return None
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if address.startswith(scheme):
            address = address[len(scheme):]
            break
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = address.rpartition(":")
    if not host or not (port.isascii() and port.isdigit()):
        return None
    return host, int(port)


def probe(
    address: str,
    tls: TlsConfig | None,
    *,
    tls_on: bool,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> Diagnosis | None:
    """Connect to ``address`` once and tell why a client with this TLS set-up was refused
    (module docstring); None when no TLS problem shows. ``tls`` is the client's TlsConfig
    (None with raw gRPC credentials: then the server's certificate is not checked here);
    ``tls_on`` whether the client uses TLS at all. Blocking, at most about ``timeout_s``;
    never raises for what the server does."""
    target = host_and_port(address)
    if target is None:
        return None
    host, port = target
    deadline = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return None  # nothing there: gRPC's own error says so
    with sock:
        context = _context(tls if tls_on else None)
        if context is None:
            return None
        name = (tls.server_name if tls is not None else None) or host
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.01))
            wrapped = context.wrap_socket(sock, server_hostname=name)
        except ssl.SSLCertVerificationError as err:
            if not tls_on:
                return Diagnosis(TlsProblem.SERVER_REQUIRES_TLS)
            if err.verify_code == 62 or "Hostname mismatch" in (err.verify_message or ""):
                return Diagnosis(TlsProblem.SERVER_NAME_MISMATCH)  # X509_V_ERR_HOSTNAME_MISMATCH
            return Diagnosis(TlsProblem.SERVER_CERTIFICATE_UNTRUSTED, err.verify_message or "")
        except ssl.SSLError as err:
            if tls_on and (err.reason or "") in _NOT_TLS_REASONS:
                return Diagnosis(TlsProblem.SERVER_NOT_TLS)
            if "ALERT" in (err.reason or ""):
                return _refused_after_handshake(tls, tls_on)  # TLS 1.2: refused within it
            return None
        except OSError:
            return None
        if not tls_on:
            return Diagnosis(TlsProblem.SERVER_REQUIRES_TLS)
        with wrapped:
            try:
                wrapped.settimeout(max(deadline - time.monotonic(), 0.01))
                wrapped.sendall(_HTTP2_PREFACE)
                first = wrapped.recv(9)
            except ssl.SSLError as err:
                if "ALERT" in (err.reason or "") or "EOF" in str(err):
                    return _refused_after_handshake(tls, tls_on)
                return None
            except OSError:
                return None  # a timeout, a reset: nothing certain
            if first:
                return None  # the server talks to a client without a certificate
            return _refused_after_handshake(tls, tls_on)


def _context(tls: TlsConfig | None) -> ssl.SSLContext | None:
    """A client context that verifies the server as ``tls`` says (the CA given, else the
    system's), or nothing at all without it; ALPN h2, as gRPC offers. None when the CA does
    not load (gRPC would have said so first)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_alpn_protocols(["h2"])
    if tls is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        if tls.ca_pem is not None:
            context.load_verify_locations(cadata=tls.ca_pem.decode("ascii", "replace"))
        else:
            context.load_default_certs()
    except (ssl.SSLError, ValueError):
        return None
    return context


def _refused_after_handshake(tls: TlsConfig | None, tls_on: bool) -> Diagnosis:
    if not tls_on:
        return Diagnosis(TlsProblem.SERVER_REQUIRES_TLS)
    if tls is not None and tls.cert_pem is not None:
        return Diagnosis(TlsProblem.CLIENT_CERTIFICATE_REFUSED)
    return Diagnosis(TlsProblem.SERVER_REQUIRES_CLIENT_CERTIFICATE)


#: What the library's message advises, per problem (the command line has its own flags).
_ADVICE = {
    TlsProblem.SERVER_REQUIRES_TLS:
        "connect with TLS (tls=TlsConfig.from_files(ca_file) with the CA that signed its"
        " certificate, or TlsConfig() for the system's CAs)",
    TlsProblem.SERVER_REQUIRES_CLIENT_CERTIFICATE:
        "give one (TlsConfig.from_files(ca_file, cert_file, key_file)) signed by a CA the"
        " server trusts (its tls_ca_file)",
    TlsProblem.CLIENT_CERTIFICATE_REFUSED:
        "it is not signed by a CA the server trusts (its tls_ca_file), or it has expired",
    TlsProblem.SERVER_CERTIFICATE_UNTRUSTED:
        "trust the CA that signed it (TlsConfig.from_files(ca_file))",
    TlsProblem.SERVER_NAME_MISMATCH:
        "give the name the certificate is for (TlsConfig(server_name=...))",
    TlsProblem.SERVER_NOT_TLS:
        "it listens without TLS: connect without tls=",
}


def unknown_issuer(diagnosis: Diagnosis) -> bool:
    """Whether a certificate that did not verify was signed by a CA the client does not trust
    (the advice is then to trust that CA), rather than, e.g., expired (it is to renew it)."""
    detail = diagnosis.detail.lower()
    return not detail or "issuer" in detail or "self signed" in detail or "self-signed" in detail


def message(diagnosis: Diagnosis, address: str, advice: str | None = None) -> str:
    """The one-line message: the problem, the verifier's reason, the address and what to do
    (``advice``, default the library's), e.g. ``certificate not trusted (unable to get local
    issuer certificate) at 127.0.0.1:50051: trust the CA that signed it
    (TlsConfig.from_files(ca_file))``."""
    if advice is None:
        advice = _ADVICE[diagnosis.problem]
        if (diagnosis.problem is TlsProblem.SERVER_CERTIFICATE_UNTRUSTED
                and not unknown_issuer(diagnosis)):
            advice = "the server needs a valid certificate"
    detail = f" ({diagnosis.detail})" if diagnosis.detail else ""
    return f"{diagnosis.problem.value}{detail} at {address}: {advice}"


class Diagnoser:
    """One server address's diagnoses, for the connection (async) or channel (sync) to it.

    Holds the client's TLS set-up, the last probe's answer and time, and whether the server
    ever answered (``connected``, set by the caller). :meth:`diagnosed` turns a connection
    failure into a :class:`~stratalog.client.errors.TlsHandshakeError` when TLS is why. Probes
    at most once per :data:`PROBE_INTERVAL_S` (callers that fail meanwhile wait for the probe
    under way, then share its answer), and never once the server answered. Thread-safe; blocking when it
    probes (:meth:`may_block` says whether it would: the async client then calls it in a
    thread). Holds nothing durable.
    """

    def __init__(self, address: str, tls: TlsConfig | None, *, tls_on: bool) -> None:
        self.address = address
        self._tls = tls
        self._tls_on = tls_on
        self._lock = threading.Lock()
        self._probed_at = -float("inf")
        self._probed: Diagnosis | None = None
        #: Set once the server answered (or the channel connected): a connection that fails
        #: after that is a server gone or restarting, not a TLS set-up it refuses, and is not
        #: probed (a probe of a vanished host would hold up the failover by its timeout).
        self.connected = False

    def may_block(self, error: StratalogError, details: str | None) -> bool:
        """Whether :meth:`diagnosed` would probe (block) for this failure now."""
        return (type(error) is BrokerUnavailableError
                and not self.connected
                and from_details(details or "", self._tls_on) is None
                and wants_probe(details)
                and time.monotonic() - self._probed_at >= PROBE_INTERVAL_S)

    def diagnosed(
        self, error: StratalogError, details: str | None, *, may_probe: bool = True
    ) -> StratalogError:
        """``error``, or the TlsHandshakeError that says why it happened.

        Args:
            error: what a failed call or connection wait raised; only a plain
                BrokerUnavailableError is looked into.
            details: gRPC's status details of the failure, None when there are none (a
                channel that went to TRANSIENT_FAILURE while waited on).
            may_probe: False: never block, use the last probe's answer (the event loop's
                call after :meth:`may_block` said no).
        """
        if type(error) is not BrokerUnavailableError:
            return error
        diagnosis = from_details(details or "", self._tls_on)
        if diagnosis is None and not self.connected and wants_probe(details):
            with self._lock:
                if may_probe and time.monotonic() - self._probed_at >= PROBE_INTERVAL_S:
                    self._probed = probe(self.address, self._tls, tls_on=self._tls_on)
                    self._probed_at = time.monotonic()
                diagnosis = self._probed
        if diagnosis is None:
            return error
        if diagnosis.problem is TlsProblem.SERVER_NAME_MISMATCH and not diagnosis.detail:
            host = (host_and_port(self.address) or (self.address, 0))[0]
            name = (self._tls.server_name if self._tls is not None else None) or host
            diagnosis = Diagnosis(diagnosis.problem, name)
        return TlsHandshakeError(
            message(diagnosis, self.address), problem=diagnosis.problem,
            detail=diagnosis.detail, address=self.address, code=grpc.StatusCode.UNAVAILABLE,
        )
