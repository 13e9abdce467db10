"""SaslHandshake (key 17, version 1) and SaslAuthenticate (key 36, versions 0 to 2): a Kafka
connection proves who it is with PLAIN or SCRAM-SHA-256 against the server's credential file,
as Kafka's ``SaslServerAuthenticator``
(clients/src/main/java/org/apache/kafka/common/security/authenticator/SaslServerAuthenticator.java)
runs the exchange.

* The mechanisms offered are ``kafka_sasl_mechanisms`` (PLAIN, SCRAM-SHA-256), none without a
  credential file. PLAIN carries the password itself, so over a plaintext connection it is
  offered only with ``authentication_plaintext_allowed`` (the gRPC listener's rule for
  passwords without TLS); a client that asks for it otherwise is answered
  UNSUPPORTED_SASL_MECHANISM with the mechanisms it may use, and the connection closes.
* SaslHandshake v0 (raw SASL tokens after the handshake, without SaslAuthenticate's framing)
  is not served: every client this server is tested with sends v1 (docs/kafka-protocol.md).
* PLAIN (RFC 4616: ``authzid NUL user NUL password``; an authzid other than the user is
  refused, as Kafka's ``PlainSaslServer``) is checked by the
  :class:`~stratalog.server.security.authentication.Authenticator`, as a gRPC call's Basic
  credentials: its cache, its bounded check queue and per-host failure limit, its thread pool
  for the PBKDF2 (never the event loop).
* SCRAM-SHA-256 (server/security/scram.py) is checked against the file's stored keys; the
  client does the hashing. A host past its failure limit cannot start an exchange; a failed
  exchange counts as a failure of its host.
* A failure of either is answered SASL_AUTHENTICATION_FAILED with one message that names no
  user, and the connection closes, as Kafka's does. A second exchange on an authenticated
  connection (Kafka's re-authentication, KIP-368) is refused ILLEGAL_SASL_STATE.

After a success the connection's principal is ``User:<user>`` for its next requests (ACLs,
quotas); a reload of the credential file that removes the user or changes its password closes
the connection at its next request (connection.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kafka.protocol.api_key import ApiKey
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from stratalog.server.client_text import loggable
from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, message_of
from stratalog.server.security.errors import (
    AuthenticationFailedError,
    AuthenticationThrottledError,
)
from stratalog.server.security.principal import CallIdentity
from stratalog.server.security.scram import ScramError, ScramServerExchange

__all__ = ["offered_mechanisms", "sasl_authenticate", "sasl_handshake"]

logger = logging.getLogger(__name__)

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
#: Longest PLAIN message read: a user name (256 characters), a password (1 KiB) and an authzid.
_PLAIN_BYTES_MAX = 4096


@dataclass(slots=True)
class SaslExchange:
    """A connection's exchange after its SaslHandshake: the mechanism chosen and, for SCRAM,
    the exchange's state. Kept in ``ConnectionState.sasl``; event-loop only."""

    mechanism: str
    scram: ScramServerExchange | None = field(default=None)


def offered_mechanisms(ctx: RequestContext) -> list[str]:
    """The mechanisms this connection may use (module docstring)."""
    services = ctx.services
    authenticator = services.authenticator
    if authenticator is None or authenticator.credentials is None:
        return []
    settings = services.settings
    plain_allowed = ctx.connection.tls or settings.authentication_plaintext_allowed
    return [m for m in settings.kafka_sasl_mechanisms if m != PLAIN or plain_allowed]


@kafka_api(ApiKey.SaslHandshake, versions=(1, 1))
async def sasl_handshake(ctx: RequestContext,
                         request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    state = ctx.connection
    offered = offered_mechanisms(ctx)
    if state.sasl is not None or state.identity.authenticated_by == "password":
        ctx.close_after_answer = True
        return SaslHandshakeResponse(error_code=Code.ILLEGAL_SASL_STATE, mechanisms=offered)
    mechanism = request.mechanism
    if mechanism not in offered:
        why = _refusal(ctx, mechanism)
        logger.info("Kafka connection %s asked for SASL mechanism %s: %s (offered: %s)",
                    loggable(state.connection_id), loggable(mechanism), why,
                    ", ".join(offered) or "none")
        ctx.close_after_answer = True
        return SaslHandshakeResponse(error_code=Code.UNSUPPORTED_SASL_MECHANISM,
                                     mechanisms=offered)
    state.sasl = SaslExchange(mechanism)
    return SaslHandshakeResponse(error_code=Code.NONE, mechanisms=offered)


@kafka_api(ApiKey.SaslAuthenticate, versions=(0, 2))
async def sasl_authenticate(ctx: RequestContext,
                            request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    state = ctx.connection
    exchange = state.sasl
    authenticator = ctx.services.authenticator
    if not isinstance(exchange, SaslExchange) or authenticator is None:
        ctx.close_after_answer = True
        return _answer(Code.ILLEGAL_SASL_STATE,
                       "SaslAuthenticate before a SaslHandshake chose a mechanism")
    token = bytes(request.auth_bytes or b"")
    try:
        if exchange.mechanism == PLAIN:
            user, password = _plain_message(token)
            verified = await authenticator.check_password(user, password, state.host)
            _authenticated(ctx, CallIdentity(verified.principal, state.host,
                                             verified.authenticated_by, verified.credential))
            return _answer(Code.NONE, None)
        return _scram_step(ctx, exchange, token)
    except (AuthenticationFailedError, AuthenticationThrottledError) as exc:
        if isinstance(exc, AuthenticationFailedError):
            # Counted with the gRPC calls' (stratalog_authentication_failures_total).
            ctx.services.metrics.observe_authentication_failure(exc.failure)
        ctx.close_after_answer = True
        state.sasl = None
        return _answer(Code.SASL_AUTHENTICATION_FAILED, message_of(exc))


def _scram_step(ctx: RequestContext, exchange: SaslExchange,
                token: bytes) -> SaslAuthenticateResponse:
    state = ctx.connection
    authenticator = ctx.services.authenticator
    assert authenticator is not None
    scram = exchange.scram
    if scram is None:
        credentials = authenticator.credentials
        if credentials is None:  # removed by a reload since the handshake
            raise AuthenticationFailedError("authentication failed: this server accepts no"
                                            " passwords", failure="credentials_not_accepted")
        authenticator.admit_exchange(state.host)
        scram = exchange.scram = ScramServerExchange(credentials, authenticator.derived_secret)
    try:
        answer = scram.step(token)
    except ScramError as exc:
        authenticator.exchange_failed(state.host, SCRAM_SHA_256, scram.user)
        raise AuthenticationFailedError(f"authentication failed: {exc}",
                                        failure="malformed_credentials") from None
    if scram.failed:
        raise authenticator.exchange_failed(state.host, SCRAM_SHA_256, scram.user)
    if scram.done:
        assert scram.principal is not None
        _authenticated(ctx, CallIdentity(scram.principal, state.host, "password",
                                         ("password", scram.user, scram.entry)))
    return _answer(Code.NONE, None, answer)


def _refusal(ctx: RequestContext, mechanism: str) -> str:
    """Why ``mechanism`` is not offered to this connection, for the log."""
    authenticator = ctx.services.authenticator
    if authenticator is None or authenticator.credentials is None:
        return "the server has no credential file (authentication_credentials_file)"
    if mechanism not in ctx.services.settings.kafka_sasl_mechanisms:
        return "not in kafka_sasl_mechanisms"
    return ("PLAIN sends the password, and this connection is not TLS"
            " (authentication_plaintext_allowed is off)")


def _plain_message(token: bytes) -> tuple[str, str]:
    """``(user, password)`` of a PLAIN message (RFC 4616).

    Raises:
        AuthenticationFailedError: not ``authzid NUL user NUL password`` in UTF-8, or an
            authzid other than the user.
    """
    parts = token.split(b"\0") if len(token) <= _PLAIN_BYTES_MAX else []
    try:
        authzid, user, password = (part.decode("utf-8") for part in parts)
    except (ValueError, UnicodeDecodeError):
        raise AuthenticationFailedError(
            "authentication failed: a PLAIN message is 'authzid NUL user NUL password' in"
            f" UTF-8, at most {_PLAIN_BYTES_MAX} bytes", failure="malformed_credentials",
        ) from None
    if not user or not password:
        raise AuthenticationFailedError("authentication failed: PLAIN without a user or"
                                        " password", failure="malformed_credentials")
    if authzid and authzid != user:
        raise AuthenticationFailedError(
            "authentication failed: a PLAIN authorization id other than the user itself is not"
            " supported", failure="malformed_credentials")
    return user, password


def _authenticated(ctx: RequestContext, identity: CallIdentity) -> None:
    state = ctx.connection
    state.identity = identity
    state.authenticated = True
    state.sasl = None


def _answer(code: int, message: str | None, token: bytes = b"") -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=token,
                                    session_lifetime_ms=0)
