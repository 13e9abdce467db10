"""A Kafka connection's SASL session: the exchange under way, who it authenticated as, until
when, and the raw tokens of SaslHandshake version 0.

Kafka's ``SaslServerAuthenticator``
(clients/src/main/java/org/apache/kafka/common/security/authenticator/SaslServerAuthenticator.java)
and ``KafkaChannel`` (clients/src/main/java/org/apache/kafka/common/network/KafkaChannel.java)
run a connection's authentication as a small state machine; this module is ours, kept in
``ConnectionState.sasl`` from the connection's first SaslHandshake on::

    (no exchange) --SaslHandshake(mechanism offered)--> EXCHANGING
    EXCHANGING --token accepted, more expected--> EXCHANGING
    EXCHANGING --last token accepted--> AUTHENTICATED (principal, expires_at_s)
    EXCHANGING --token refused--> the answer, then the connection closes
    EXCHANGING --any request but SaslAuthenticate--> the connection closes
    AUTHENTICATED --SaslHandshake (same mechanism, lifetime on, >= 1 s since the last)-->
        EXCHANGING (a re-authentication: KIP-368; the principal must not change)

How the tokens travel depends on the handshake's version:

* **version 1**: each token is a SaslAuthenticate request and its answer a SaslAuthenticate
  response (apis/sasl.py translates them);
* **version 0** (KIP-43; kafka-python with ``api_version=(0, 10, 0)``, librdkafka with
  ``api.version.request=false`` and ``broker.version.fallback=0.10.0``): the frames after the
  handshake are the raw tokens, each with the 4-byte size prefix of every Kafka frame and no
  request header, and each answer is the raw token with a size prefix (an empty one after a
  PLAIN message); a refused token gets no answer, the connection closes (a raw token has no
  room for an error code). The connection hands such a frame to :func:`answer_raw_token`
  instead of decoding a request. The frames are bounded as every frame of an exchange is
  (``kafka_sasl_receive_bytes_max``, connection.py) and the tokens by their mechanism (4 KiB).

Mechanisms: PLAIN (RFC 4616), checked by the
:class:`~stratalog.server.security.authentication.Authenticator` as a gRPC call's Basic
credentials (its cache, bounded check queue, per-host failure limit and thread pool);
SCRAM-SHA-256 and SCRAM-SHA-512 (server/security/scram.py) against the credential file's stored
keys of that mechanism. Failures answer one message that names no user.

Session lifetime (KIP-368, Kafka's ``connections.max.reauth.ms``): with
``kafka_connections_max_reauth_ms`` above 0, a successful exchange gives the session that
lifetime, answered as SaslAuthenticate's ``session_lifetime_ms`` (versions 1 and up); the client
re-authenticates on the same connection before it ends (librdkafka and kafka-python do by
themselves). A connection whose session ended is closed at its next request other than
SaslHandshake and SaslAuthenticate, as Kafka's ``SocketServer`` closes an expired channel
(its in-flight requests were answered: requests are served one at a time). A client of version
0 cannot learn the lifetime and is closed all the same, as Kafka does; 0 (the default) keeps
sessions for the connection's life.

Concurrency: event-loop only; one :class:`SaslSession` per connection, used by the one task
that serves its requests in order.
"""

from __future__ import annotations

import logging
import struct
import time
from typing import TYPE_CHECKING

from kafka.protocol.api_key import ApiKey

from stratalog.server.client_text import loggable
from stratalog.server.kafka.error_codes import Code
from stratalog.server.security.credentials import SCRAM_MECHANISMS
from stratalog.server.security.errors import (
    AuthenticationFailedError,
    AuthenticationThrottledError,
)
from stratalog.server.security.principal import CallIdentity, Principal
from stratalog.server.security.scram import ScramError, ScramServerExchange

if TYPE_CHECKING:
    from stratalog.server.kafka.context import ConnectionState, KafkaServices

__all__ = [
    "PLAIN",
    "SaslSession",
    "SessionRefusal",
    "answer_raw_token",
    "begin_exchange",
    "exchange_token",
    "offered_mechanisms",
]

logger = logging.getLogger(__name__)

PLAIN = "PLAIN"
#: Longest PLAIN message read: a user name (256 characters), a password (1 KiB) and an authzid.
PLAIN_BYTES_MAX = 4096
#: Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS: a client may not start
#: re-authentications more often.
REAUTH_INTERVAL_MIN_S = 1.0
#: The API keys a connection whose session ended may still send (to re-authenticate).
_REAUTHENTICATION = frozenset({ApiKey.SaslHandshake, ApiKey.SaslAuthenticate})
_SIZE = struct.Struct(">i")


class SessionRefusal(Exception):
    """A SASL request the session's state refuses (a SaslHandshake amid an exchange or not
    allowed to re-authenticate, a mechanism not offered, a SaslAuthenticate without an
    exchange): ``code`` is its answer's error code; the connection closes after the answer
    (as Kafka's authenticator fails the channel)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


class SaslSession:
    """One connection's SASL state (module docstring): the exchange under way (``mechanism``
    not None; ``scram`` its SCRAM state), whether its tokens come raw (``raw_tokens``: a
    version 0 handshake), and once authenticated, who (``principal``), with which mechanism
    and until when (``expires_at_s``, monotonic; None: no end).

    Invariant: ``raw_tokens`` implies an exchange under way. Event-loop only.
    """

    __slots__ = ("expires_at_s", "mechanism", "principal", "principal_mechanism",
                 "raw_tokens", "reauth_started_s", "scram")

    def __init__(self) -> None:
        self.mechanism: str | None = None
        self.raw_tokens = False
        self.scram: ScramServerExchange | None = None
        self.principal: Principal | None = None
        self.principal_mechanism: str | None = None
        self.expires_at_s: float | None = None
        self.reauth_started_s = 0.0

    @property
    def exchanging(self) -> bool:
        return self.mechanism is not None

    def refusal(self, api_key: int, now_s: float) -> tuple[str, str] | None:
        """Why a request with ``api_key`` closes the connection now, as (the
        stratalog_kafka_connections_closed reason, a sentence for the log), or None: its
        session ended and it is not a re-authentication (Kafka's SocketServer), or an exchange
        is under way and it is not SaslAuthenticate (SaslServerAuthenticator: "Unexpected
        Kafka request during SASL authentication"; a SaslHandshake is begin_exchange's to
        refuse). O(1): called for every request of a connection that began a SASL exchange."""
        if self.mechanism is not None:
            if api_key in _REAUTHENTICATION:
                return None
            return ("unauthenticated", f"{ApiKey(api_key).name} during its SASL exchange"
                    " (only SaslAuthenticate may follow SaslHandshake)")
        expires_at_s = self.expires_at_s
        if (expires_at_s is not None and now_s > expires_at_s
                and api_key not in _REAUTHENTICATION):
            return ("session_expired", "its SASL session ended"
                    " (kafka_connections_max_reauth_ms) and it did not re-authenticate")
        return None

    def _end_exchange(self) -> None:
        self.mechanism = None
        self.raw_tokens = False
        self.scram = None


def offered_mechanisms(services: KafkaServices, tls: bool) -> list[str]:
    """The mechanisms a connection may use: ``kafka_sasl_mechanisms``, none without a
    credential file, PLAIN only over TLS unless ``authentication_plaintext_allowed`` (it
    sends the password, as the gRPC listener refuses passwords without TLS)."""
    authenticator = services.authenticator
    if authenticator is None or authenticator.credentials is None:
        return []
    settings = services.settings
    plain_allowed = tls or settings.authentication_plaintext_allowed
    return [m for m in settings.kafka_sasl_mechanisms if m != PLAIN or plain_allowed]


def begin_exchange(services: KafkaServices, state: ConnectionState, mechanism: str,
                   version: int) -> list[str]:
    """Start an exchange of ``mechanism`` on the connection (a SaslHandshake of
    ``version``): the mechanisms offered, for the answer.

    Raises:
        SessionRefusal: an exchange is under way, a re-authentication is not allowed now or
            changes the mechanism, or the mechanism is not offered.
    """
    offered = offered_mechanisms(services, state.tls)
    session = state.sasl
    if session is None:
        session = SaslSession()
    elif session.exchanging:
        raise SessionRefusal(Code.ILLEGAL_SASL_STATE, "a SASL exchange is already under way")
    elif session.principal is not None:
        _check_reauthentication(session, mechanism, version)
    if mechanism not in offered:
        why = _refusal(services, mechanism)
        logger.info("Kafka connection %s asked for SASL mechanism %s: %s (offered: %s)",
                    loggable(state.connection_id), loggable(mechanism), why,
                    ", ".join(offered) or "none")
        raise SessionRefusal(Code.UNSUPPORTED_SASL_MECHANISM, why)
    if session.principal is not None:
        session.reauth_started_s = time.monotonic()
    session.mechanism = mechanism
    session.raw_tokens = version == 0
    state.sasl = session
    return offered


def _check_reauthentication(session: SaslSession, mechanism: str, version: int) -> None:
    """Raise SessionRefusal unless a re-authentication may begin (KafkaChannel's
    maybeBeginServerReauthentication: sessions have a lifetime, and the last one began at
    least a second ago; SaslServerAuthenticator: the same mechanism)."""
    if session.expires_at_s is None:
        raise SessionRefusal(Code.ILLEGAL_SASL_STATE, "already authenticated (re-authentication"
                             " is off: kafka_connections_max_reauth_ms is 0)")
    if time.monotonic() - session.reauth_started_s < REAUTH_INTERVAL_MIN_S:
        raise SessionRefusal(Code.ILLEGAL_SASL_STATE, "re-authentication more than once a second")
    if version == 0:
        raise SessionRefusal(Code.ILLEGAL_SASL_STATE,
                             "re-authentication takes SaslHandshake version 1")
    if mechanism != session.principal_mechanism:
        raise SessionRefusal(Code.ILLEGAL_SASL_STATE,
                             f"SASL mechanism {mechanism[:40]!r} requested by client is not"
                             " supported for re-authentication of mechanism"
                             f" {session.principal_mechanism!r}")


def _refusal(services: KafkaServices, mechanism: str) -> str:
    """Why ``mechanism`` is not offered to this connection, for the log."""
    authenticator = services.authenticator
    if authenticator is None or authenticator.credentials is None:
        return "the server has no credential file (authentication_credentials_file)"
    if mechanism not in services.settings.kafka_sasl_mechanisms:
        return "not in kafka_sasl_mechanisms"
    return ("PLAIN sends the password, and this connection is not TLS"
            " (authentication_plaintext_allowed is off)")


async def exchange_token(services: KafkaServices, state: ConnectionState,
                         token: bytes) -> tuple[bytes, int]:
    """The server's answer to the client's next token of the exchange under way, and the
    session's lifetime in ms when this token completed it (0: not complete, or no lifetime).
    On completion the connection's identity is the exchange's principal.

    Raises:
        SessionRefusal: no exchange under way (ILLEGAL_SASL_STATE).
        AuthenticationFailedError: the token is malformed or its credentials wrong; a
            re-authentication as another principal.
        AuthenticationThrottledError: the host has its limit of recent failures, or the
            check queue is full.
        In both, the exchange is over: the caller answers and closes the connection.
    """
    session = state.sasl
    authenticator = services.authenticator
    if session is None or not session.exchanging or authenticator is None:
        raise SessionRefusal(Code.ILLEGAL_SASL_STATE,
                             "SaslAuthenticate before a SaslHandshake chose a mechanism")
    mechanism = session.mechanism
    assert mechanism is not None
    try:
        if mechanism == PLAIN:
            user, password = _plain_message(token)
            verified = await authenticator.check_password(user, password, state.host)
            _authenticated(state, session, CallIdentity(
                verified.principal, state.host, verified.authenticated_by,
                verified.credential))
            return b"", _start_lifetime(services, session)
        answer = _scram_step(services, state, session, token)
        if not session.exchanging:
            return answer, _start_lifetime(services, session)
        return answer, 0
    except AuthenticationFailedError as exc:
        # Counted with the gRPC calls' (stratalog_authentication_failures_total).
        services.metrics.observe_authentication_failure(exc.failure)
        session._end_exchange()
        raise
    except Exception:
        session._end_exchange()
        raise


def _scram_step(services: KafkaServices, state: ConnectionState, session: SaslSession,
                token: bytes) -> bytes:
    authenticator = services.authenticator
    assert authenticator is not None and session.mechanism is not None
    mechanism = session.mechanism
    scram = session.scram
    if scram is None:
        credentials = authenticator.credentials
        if credentials is None:  # removed by a reload since the handshake
            raise AuthenticationFailedError("authentication failed: this server accepts no"
                                            " passwords", failure="credentials_not_accepted")
        authenticator.admit_exchange(state.host)
        scram = session.scram = ScramServerExchange(
            credentials, authenticator.derived_secret, mechanism=SCRAM_MECHANISMS[mechanism])
    try:
        answer = scram.step(token)
    except ScramError as exc:
        authenticator.exchange_failed(state.host, mechanism, scram.user)
        raise AuthenticationFailedError(f"authentication failed: {exc}",
                                        failure="malformed_credentials") from None
    if scram.failed:
        if scram.lacks_credential:
            # The file holds the user, with no credential of this mechanism (written before
            # SCRAM-SHA-512 credentials were stored): only the server's log says so.
            logger.warning("Kafka connection %s: user %s has no %s credential in the"
                           " credential file; set its password again (stratalog credentials"
                           " add) to store one", loggable(state.connection_id),
                           loggable(scram.user), mechanism)
        raise authenticator.exchange_failed(state.host, mechanism, scram.user)
    if scram.done:
        assert scram.principal is not None
        # A SCRAM-SHA-256 credential is the user's password entry ("password"), which a
        # reload that changes the password replaces; a SHA-512 one is named by its mechanism
        # (Authenticator.still_valid looks each up where it lives).
        kind = "password" if mechanism == "SCRAM-SHA-256" else mechanism
        _authenticated(state, session, CallIdentity(scram.principal, state.host, "password",
                                                    (kind, scram.user, scram.entry)))
    return answer


def _plain_message(token: bytes) -> tuple[str, str]:
    """``(user, password)`` of a PLAIN message (RFC 4616).

    Raises:
        AuthenticationFailedError: not ``authzid NUL user NUL password`` in UTF-8, or an
            authzid other than the user (refused as Kafka's ``PlainSaslServer`` does).
    """
    parts = token.split(b"\0") if len(token) <= PLAIN_BYTES_MAX else []
    try:
        authzid, user, password = (part.decode("utf-8") for part in parts)
    except (ValueError, UnicodeDecodeError):
        raise AuthenticationFailedError(
            "authentication failed: a PLAIN message is 'authzid NUL user NUL password' in"
            f" UTF-8, at most {PLAIN_BYTES_MAX} bytes", failure="malformed_credentials",
        ) from None
    if not user or not password:
        raise AuthenticationFailedError("authentication failed: PLAIN without a user or"
                                        " password", failure="malformed_credentials")
    if authzid and authzid != user:
        raise AuthenticationFailedError(
            "authentication failed: a PLAIN authorization id other than the user itself is not"
            " supported", failure="malformed_credentials")
    return user, password


def _authenticated(state: ConnectionState, session: SaslSession,
                   identity: CallIdentity) -> None:
    """The exchange succeeded: the connection is ``identity`` from its next request on. A
    re-authentication must keep the principal (SaslServerAuthenticator's
    ensurePrincipalUnchanged)."""
    previous = session.principal
    mechanism = session.mechanism
    session._end_exchange()
    if previous is not None and identity.principal != previous:
        raise AuthenticationFailedError(
            f"authentication failed: cannot change principals during re-authentication from"
            f" {previous} to {identity.principal}", failure="wrong_credentials")
    session.principal = identity.principal
    session.principal_mechanism = mechanism
    state.identity = identity
    state.authenticated = True


def _start_lifetime(services: KafkaServices, session: SaslSession) -> int:
    """Begin the session's lifetime (module docstring); its length in ms (0: none)."""
    lifetime_ms = services.settings.kafka_connections_max_reauth_ms
    if lifetime_ms <= 0:
        session.expires_at_s = None
        return 0
    session.expires_at_s = time.monotonic() + lifetime_ms / 1000
    return lifetime_ms


async def answer_raw_token(services: KafkaServices, state: ConnectionState,
                           frame: bytes) -> list[bytes] | None:
    """The size-prefixed answer to a raw token (the frame after a version 0 handshake), or
    None when the exchange failed and the connection must close (logged here)."""
    try:
        answer, _ = await exchange_token(services, state, frame)
    except (AuthenticationFailedError, SessionRefusal) as exc:
        logger.info("Kafka connection %s: SASL authentication (handshake version 0) failed:"
                    " %s", loggable(state.connection_id), exc)
        return None
    except AuthenticationThrottledError as exc:  # retriable, but a raw token cannot say so
        logger.info("Kafka connection %s: SASL authentication (handshake version 0) refused:"
                    " %s", loggable(state.connection_id), exc)
        return None
    return [_SIZE.pack(len(answer)), answer]
