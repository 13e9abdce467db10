"""ACLs as the client hands them: Kafka's model (bindings, filters and their enums).

A binding allows or denies one principal one operation on the resources a pattern selects,
from one host::

    AclBinding(ResourceType.TOPIC, "orders-", PatternType.PREFIXED,
               "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)

The enums carry Kafka's numbers, which are broker.proto's. The server checks what only it can
(a principal is ``type:name``, a host ``*`` or an IP address, the cluster is
``kafka-cluster``) and answers INVALID_REQUEST naming the field; the client checks types.
:meth:`AclOperation.parse` and friends read the names kafka-acls.sh takes (``Read``,
``IdempotentWrite``, ``idempotent-write``, ``IDEMPOTENT_WRITE``).

docs/security.md has the rules a server applies to them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "CLUSTER_NAME",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
]

#: The name of the one cluster resource, as in Kafka.
CLUSTER_NAME = "kafka-cluster"


class _Named(enum.IntEnum):
    @classmethod
    def parse(cls, text: str) -> _Named:
        """The member named ``text``, written any of Kafka's ways (``IdempotentWrite``,
        ``idempotent-write``, ``IDEMPOTENT_WRITE``), or a ValueError listing them."""
        if isinstance(text, cls):
            return text
        if not isinstance(text, str):
            raise TypeError(f"expected a {cls.__name__} or its name, got {text!r}")
        wanted = text.replace("-", "").replace("_", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == wanted:
                return member
        names = ", ".join(m.name for m in cls if m.name != "UNKNOWN")
        raise ValueError(f"{text!r} is not a {cls.__name__}; one of {names}")


class ResourceType(_Named):
    """Kafka's ``ResourceType``. ANY only in filters; stratalog checks no GROUP ACLs."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(_Named):
    """Kafka's ``PatternType``. ANY and MATCH only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    """Kafka's ``AclOperation``. ANY only in filters; ALL in a binding is every operation."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(_Named):
    """Kafka's ``AclPermissionType``. ANY only in filters."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: the resource pattern and the entry. Immutable and hashable.

    ``principal`` is ``"User:<name>"`` (``"User:*"``: every principal); ``host`` an IP address
    or ``"*"`` (every host).
    """

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission_type.name})")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings for describe_acls and delete_acls: ANY values and ``None`` strings
    match everything; ``PatternType.MATCH`` selects the bindings that apply to
    ``resource_name`` (literal equal or ``*``, and prefixes of it). The default selects every
    binding."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY
