"""The security package's errors: one small tree, mapped to statuses by server/status.py only.

    SecurityError                        base of every refusal this package decides
    ├── AuthenticationFailedError        UNAUTHENTICATED + AUTHENTICATION_FAILED: the call's
    │                                    credentials are wrong, missing where required, or sent
    │                                    where they may not be
    └── SecurityConfigError              the TLS or credential files will not load (a start-up
                                         or SIGHUP-reload failure; never sent to a client)

Messages of :class:`AuthenticationFailedError` go to the client, so they never say whether a user
exists (that would let a client list the users) nor name a file on the server.
"""

from __future__ import annotations

__all__ = ["AuthenticationFailedError", "SecurityConfigError", "SecurityError"]


class SecurityError(Exception):
    """Base of the security package's errors."""


class AuthenticationFailedError(SecurityError):
    """The call is refused before it reaches the servicer: who is asking is not established."""


class SecurityConfigError(SecurityError):
    """A TLS or credential file is missing, unreadable or malformed; the message names it."""
