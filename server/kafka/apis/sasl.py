"""SaslHandshake (key 17, versions 0 and 1) and SaslAuthenticate (key 36, versions 0 to 2):
a Kafka connection proves who it is with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 against the
server's credential file, as Kafka's ``SaslServerAuthenticator``
(clients/src/main/java/org/apache/kafka/common/security/authenticator/SaslServerAuthenticator.java)
runs the exchange. These handlers translate; the exchange, its mechanisms, its re-authentication
(KIP-368) and version 0's raw tokens are server/kafka/sasl_session.py's.

* The mechanisms offered are ``kafka_sasl_mechanisms``, none without a credential file, PLAIN
  only over TLS unless ``authentication_plaintext_allowed``; a client that asks for another is
  answered UNSUPPORTED_SASL_MECHANISM with the mechanisms it may use, and the connection
  closes.
* After a SaslHandshake of version 0 the client's next frames are raw SASL tokens, not
  requests (connection.py hands them to sasl_session.answer_raw_token).
* A failure is answered SASL_AUTHENTICATION_FAILED with one message that names no user, and
  the connection closes, as Kafka's does; a handshake while an exchange is under way, or on an
  authenticated connection that may not re-authenticate now, is ILLEGAL_SASL_STATE.
* SaslAuthenticate versions 1 and up answer the session's lifetime
  (``kafka_connections_max_reauth_ms``; 0: none).

After a success the connection's principal is ``User:<user>`` for its next requests (ACLs,
quotas); a reload of the credential file that removes the user or changes its password closes
the connection at its next request (connection.py).
"""

from __future__ import annotations

from kafka.protocol.api_key import ApiKey
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from stratalog.server.kafka import sasl_session
from stratalog.server.kafka.apis.registry import kafka_api
from stratalog.server.kafka.context import RequestContext
from stratalog.server.kafka.error_codes import Code, message_of
from stratalog.server.kafka.sasl_session import SessionRefusal
from stratalog.server.security.errors import (
    AuthenticationFailedError,
    AuthenticationThrottledError,
)

__all__ = ["sasl_authenticate", "sasl_handshake"]


@kafka_api(ApiKey.SaslHandshake, versions=(0, 1))
async def sasl_handshake(ctx: RequestContext,
                         request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    try:
        offered = sasl_session.begin_exchange(ctx.services, ctx.connection, request.mechanism,
                                              ctx.api_version)
    except SessionRefusal as exc:
        ctx.close_after_answer = True
        return SaslHandshakeResponse(
            error_code=exc.code,
            mechanisms=sasl_session.offered_mechanisms(ctx.services, ctx.connection.tls))
    return SaslHandshakeResponse(error_code=Code.NONE, mechanisms=offered)


@kafka_api(ApiKey.SaslAuthenticate, versions=(0, 2))
async def sasl_authenticate(ctx: RequestContext,
                            request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    token = bytes(request.auth_bytes or b"")
    try:
        answer, lifetime_ms = await sasl_session.exchange_token(ctx.services, ctx.connection,
                                                                token)
    except SessionRefusal as exc:
        ctx.close_after_answer = True
        return _answer(exc.code, str(exc))
    except (AuthenticationFailedError, AuthenticationThrottledError) as exc:
        ctx.close_after_answer = True
        return _answer(Code.SASL_AUTHENTICATION_FAILED, message_of(exc))
    return _answer(Code.NONE, None, answer, lifetime_ms)


def _answer(code: int, message: str | None, token: bytes = b"",
            lifetime_ms: int = 0) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=token,
                                    session_lifetime_ms=lifetime_ms)
