"""The principal of a call: who the server believes is asking (Kafka's ``KafkaPrincipal``).

Format: ``<type>:<name>``, as Kafka writes principals in ACLs and logs: ``User:alice``,
``User:CN=client-1,O=example`` (an mTLS certificate's subject), ``User:ANONYMOUS`` (no
credentials, when anonymous access is allowed). ``User:*`` is not a principal but an ACL
wildcard.

The authentication interceptor decides the principal of each call (or refuses it) and publishes
it, with the client's host and how it was authenticated, in :data:`current_identity` for the
call's task: the authorizer, the quotas and the servicer's ``WhoAmI`` read it from there. gRPC's
asyncio server runs each call's handler in a task of its own, so a context variable set by the
interceptor around the handler is the call's alone.

Concurrency: values are immutable; the context variable is per task.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

__all__ = [
    "ANONYMOUS",
    "USER_TYPE",
    "CallIdentity",
    "Principal",
    "current_identity",
]

#: Kafka's only principal type for users.
USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class Principal:
    """``type:name``; compares by both. Immutable."""

    type: str
    name: str

    def __post_init__(self) -> None:
        assert self.type and ":" not in self.type, f"bad principal type {self.type!r}"
        assert self.name, "a principal has a name"

    @classmethod
    def user(cls, name: str) -> Principal:
        return cls(USER_TYPE, name)

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``"User:alice"`` -> ``Principal("User", "alice")`` (the name may hold ``:``).

        Raises:
            ValueError: no ``type:`` prefix, or an empty type or name.
        """
        type_, sep, name = text.partition(":")
        if not sep or not type_ or not name:
            raise ValueError(f"a principal is '<type>:<name>', e.g. 'User:alice'; got {text!r}")
        return cls(type_, name)

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


#: The principal of a call that brought no credentials (Kafka's ``User:ANONYMOUS``).
ANONYMOUS = Principal(USER_TYPE, "ANONYMOUS")


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """Who made a call: the principal, the client's host (an IP address, as ACLs name hosts)
    and how the principal was established: ``"none"`` (anonymous), ``"tls"`` (an mTLS
    certificate), ``"password"`` or ``"token"``; for the last two, ``credential``: the
    credential file's entry the call was verified against (``(mechanism, user or token id,
    entry)``), which a long-lived stream is re-checked against after a reload
    (authentication.py). Immutable."""

    principal: Principal
    host: str
    authenticated_by: str = "none"
    credential: tuple[str, str, object] | None = field(default=None, compare=False)


#: The identity of the call the current task serves; unset outside a call (or when no
#: authentication interceptor is installed: readers then treat the caller as anonymous).
current_identity: contextvars.ContextVar[CallIdentity] = contextvars.ContextVar(
    "stratalog_call_identity"
)
