"""ACLs as the client hands them: Kafka's model (bindings, filters and their enums).

A binding allows or denies one principal one operation on the resources a pattern selects,
from one host::

    AclBinding(ResourceType.TOPIC, "orders-", PatternType.PREFIXED,
               "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)

The enums are made from broker.proto's (their one definition), which carry Kafka's numbers and
names; the server's authorizer uses these same classes. The server checks what only it can
(a principal is ``type:name``, a host ``*`` or an IP address, the cluster is
``kafka-cluster``) and answers INVALID_REQUEST naming the field; the client checks types.
:meth:`AclOperation.parse` and friends read the names kafka-acls.sh takes (``Read``,
``IdempotentWrite``, ``idempotent-write``, ``IDEMPOTENT_WRITE``).

docs/security.md has the rules a server applies to them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from stratalog.v1 import broker_pb2

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
    """An ACL enum: broker.proto's values without their prefix, Kafka's names and numbers."""

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

    @property
    def kafka_name(self) -> str:
        """Kafka's spelling in ACL listings and resource labels: ``Topic``,
        ``TransactionalId``, ``IdempotentWrite``."""
        return "".join(word.capitalize() for word in self.name.split("_"))


def _from_proto(name: str, values: EnumTypeWrapper, prefix: str, doc: str) -> type[_Named]:
    """The enum ``name`` with broker.proto's members of ``values``, each named without
    ``prefix`` (``RESOURCE_TYPE_TOPIC = 2`` becomes ``ResourceType.TOPIC = 2``)."""
    members = []
    for proto_name, number in values.items():
        assert proto_name.startswith(prefix), f"{proto_name} lacks the prefix {prefix}"
        members.append((proto_name.removeprefix(prefix), number))
    enum_class = _Named(name, members, module=__name__, qualname=name)
    enum_class.__doc__ = doc
    return enum_class


# The enums are broker.proto's (the one definition, with Kafka's numbers): the wire, the server's
# authorizer (server/security/acls.py) and the command line all use these classes. Kafka keeps its
# own in the clients module too, used by the broker: clients/src/main/java/org/apache/kafka/common/
# resource/ResourceType.java, PatternType.java, and common/acl/AclOperation.java,
# AclPermissionType.java.
ResourceType = _from_proto(
    "ResourceType", broker_pb2.ResourceType, "RESOURCE_TYPE_",
    "Kafka's ``ResourceType``. ANY only in filters; UNKNOWN never valid; GROUP is a consumer"
    " group, by group id.",
)
PatternType = _from_proto(
    "PatternType", broker_pb2.PatternType, "PATTERN_TYPE_",
    "Kafka's ``PatternType``. ANY and MATCH only in filters.",
)
AclOperation = _from_proto(
    "AclOperation", broker_pb2.AclOperation, "ACL_OPERATION_",
    "Kafka's ``AclOperation``. ANY only in filters; ALL in a binding is every operation.",
)
AclPermissionType = _from_proto(
    "AclPermissionType", broker_pb2.AclPermissionType, "ACL_PERMISSION_TYPE_",
    "Kafka's ``AclPermissionType``. ANY only in filters.",
)


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
