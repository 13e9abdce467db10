"""Kafka's ACL model and its matching rules: bindings, filters, and who may do what.

An ACL *binding* allows or denies one principal one operation on the resources a *pattern*
selects, from one host (Kafka's ``AclBinding`` = ``ResourcePattern`` + ``AccessControlEntry``)::

    ResourcePattern(TOPIC, "orders-", PREFIXED)   every topic whose name starts with "orders-"
    AccessControlEntry("User:alice", "*", READ, ALLOW)

The enums carry Kafka's numbers (``org.apache.kafka.common.resource`` and ``.acl``); they are
broker.proto's, made into Python enums once by ``stratalog.client.acls`` and imported here. A
resource pattern is LITERAL (the name itself; ``"*"`` is every resource of the type) or
PREFIXED (every name starting with it). The only cluster is named
``"kafka-cluster"``. An entry's principal is ``"User:<name>"`` or ``"User:*"`` (every
principal); its host an IP address or ``"*"`` (every host).

How a request is decided (Kafka's ``AclAuthorizer.authorizeAction``), for principal P from host
H asking operation O on resource (type T, name N):

1. a super user is allowed everything (the authorizer checks this, before the ACLs);
2. the ACLs that *match the resource* are those on (T, N, LITERAL), (T, "*", LITERAL) and every
   (T, prefix, PREFIXED) with N starting with prefix, whatever their principal, host or
   operation. If there are none, the answer is ``allow.everyone.if.no.acl.found``;
3. an ACL *applies* to the request when its principal is P or ``User:*``, its host is H or
   ``*``, and its operation is O or ALL;
4. **deny wins**: an applying DENY refuses the request;
5. otherwise an applying ALLOW allows it, where an ALLOW of READ, WRITE, DELETE or ALTER also
   allows DESCRIBE, and an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS (implied
   operations; a DENY implies nothing: denying READ does not deny DESCRIBE);
6. anything else is refused.

:meth:`AclIndex.authorize_by_resource_type` answers Kafka's other question, "may P do O on *some*
resource of type T?" (an idempotent producer's InitProducerId: WRITE on any topic), with
Kafka's rules for it (``AclAuthorizer.authorizeByResourceType``).

Filters (``AclBindingFilter``) select bindings for DescribeAcls and DeleteAcls: an ANY value or
an unset string matches everything; pattern type MATCH selects the bindings that would apply to
the name given (literal equal or ``"*"``, or prefixes of it).

Concurrency: every value here is immutable; an :class:`AclIndex` is built once and then only
read, so threads and tasks share one freely and an update swaps in a new one.
"""

from __future__ import annotations

import contextlib
import enum
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# The enums are defined once, from broker.proto, in the client's ACL model (as Kafka's broker
# uses the clients module's org.apache.kafka.common.acl and .resource enums).
from stratalog.client.acls import AclOperation, AclPermissionType, PatternType, ResourceType

from .errors import InvalidAclError
from .principal import Principal

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AclBinding",
    "AclBindingFilter",
    "AclIndex",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
    "implied_operations",
    "resource_label",
]

#: The name of the one cluster resource (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"
#: A LITERAL resource name that stands for every resource of its type.
WILDCARD_RESOURCE = "*"
#: An entry principal that stands for every principal.
WILDCARD_PRINCIPAL = "User:*"
#: An entry host that stands for every host.
WILDCARD_HOST = "*"

#: Longest resource name or principal accepted in a binding, in characters: far above any
#: topic (249) or transactional id a client can use, small enough that one binding stays small.
_NAME_CHARS_MAX = 1024


_CONCRETE_RESOURCE_TYPES = frozenset({
    ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID, ResourceType.GROUP,
})
_CONCRETE_PATTERNS = frozenset({PatternType.LITERAL, PatternType.PREFIXED})
_INDEFINITE_OPERATIONS = frozenset({AclOperation.UNKNOWN, AclOperation.ANY})
_CONCRETE_PERMISSIONS = frozenset({AclPermissionType.DENY, AclPermissionType.ALLOW})

# The ALLOWs that allow an operation (Kafka's AclAuthorizer.allowOps); ALL is added by matching.
_ALLOWED_BY: Mapping[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({
        AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
        AclOperation.ALTER,
    }),
    AclOperation.DESCRIBE_CONFIGS: frozenset({
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    }),
}


def implied_operations(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations whose ALLOW allows ``operation`` (itself included, ALL not)."""
    return _ALLOWED_BY.get(operation, frozenset({operation}))


def resource_label(resource_type: ResourceType, name: str) -> str:
    """``Topic:orders``: how errors and logs name one resource (Kafka's ``type:name``)."""
    return f"{resource_type.kafka_name}:{name}"


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: pattern (``resource_type``, ``resource_name``, ``pattern_type``) and entry
    (``principal``, ``host``, ``operation``, ``permission_type``). Immutable, hashable; two
    equal bindings are one ACL (creating it twice stores it once, as Kafka does).

    Build stored bindings with :meth:`validated`, which refuses filter-only values and
    normalises the host.
    """

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def validated(self, field: str = "binding") -> AclBinding:
        """This binding checked as Kafka's ``AclControlManager.validateNewAcl`` does, with the
        host written canonically (``::1``, not ``0:0:0:0:0:0:0:1``).

        Raises:
            InvalidAclError: naming ``field`` + the bad part: a filter-only or unknown enum
                value, an empty or over-long name, a cluster not named ``kafka-cluster``, a principal that is not
                ``type:name``, a host that is neither ``*`` nor an IP address.
        """
        if self.resource_type not in _CONCRETE_RESOURCE_TYPES:
            raise InvalidAclError(
                f"{field}.resource_type",
                f"must be TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID, got "
                f"{_enum_name(ResourceType, self.resource_type)}",
            )
        if self.pattern_type not in _CONCRETE_PATTERNS:
            raise InvalidAclError(
                f"{field}.pattern_type",
                f"must be LITERAL or PREFIXED, got {_enum_name(PatternType, self.pattern_type)}",
            )
        if self.operation in _INDEFINITE_OPERATIONS or not _known(AclOperation, self.operation):
            raise InvalidAclError(
                f"{field}.operation",
                f"must be a concrete operation (ALL, READ, WRITE, ...), got "
                f"{_enum_name(AclOperation, self.operation)}",
            )
        if self.permission_type not in _CONCRETE_PERMISSIONS:
            raise InvalidAclError(
                f"{field}.permission_type",
                f"must be ALLOW or DENY, got "
                f"{_enum_name(AclPermissionType, self.permission_type)}",
            )
        _check_name(f"{field}.resource_name", self.resource_name)
        if self.resource_type == ResourceType.CLUSTER and (
            self.resource_name != CLUSTER_NAME or self.pattern_type != PatternType.LITERAL
        ):
            raise InvalidAclError(
                f"{field}.resource_name",
                f"the only cluster resource is the LITERAL {CLUSTER_NAME!r}, got "
                f"{self.pattern_type.name} {self.resource_name!r}",
            )
        principal = _check_principal(f"{field}.principal", self.principal)
        host = _check_host(f"{field}.host", self.host)
        return AclBinding(
            ResourceType(self.resource_type), self.resource_name, PatternType(self.pattern_type),
            principal, host, AclOperation(self.operation),
            AclPermissionType(self.permission_type),
        )

    def __str__(self) -> str:
        return (
            f"{self.permission_type.name} {self.principal} {self.operation.name} on "
            f"{self.resource_type.kafka_name} {self.pattern_type.name} {self.resource_name!r} "
            f"from {self.host}"
        )


def _known(enum_type: type[enum.IntEnum], value: int) -> bool:
    return value in enum_type._value2member_map_


def _enum_name(enum_type: type[enum.IntEnum], value: int) -> str:
    try:
        return enum_type(value).name
    except ValueError:
        return str(value)


def _check_name(field: str, name: str) -> None:
    if not name:
        raise InvalidAclError(field, "must not be empty")
    if len(name) > _NAME_CHARS_MAX:
        raise InvalidAclError(field, f"{len(name)} characters; at most {_NAME_CHARS_MAX}")


def _check_principal(field: str, principal: str) -> str:
    _check_name(field, principal)
    try:
        Principal.parse(principal)
    except ValueError as exc:
        raise InvalidAclError(field, str(exc)) from None
    return principal


def _check_host(field: str, host: str) -> str:
    if host == WILDCARD_HOST:
        return host
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        raise InvalidAclError(
            field, f"must be '*' or an IP address (ACLs match the client's address), got {host!r}"
        ) from None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings (Kafka's ``AclBindingFilter``): ANY enum values and ``None`` strings
    match everything; pattern type MATCH selects the bindings that apply to
    ``resource_name`` (see the module docstring). Immutable."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def validated(self, field: str = "filter") -> AclBindingFilter:
        """This filter with every enum known and not UNKNOWN (Kafka's
        ``findIndefiniteField``), and an IP-address host written canonically.

        Raises:
            InvalidAclError: naming ``field`` + the bad part.
        """
        for name, enum_type in (
            ("resource_type", ResourceType), ("pattern_type", PatternType),
            ("operation", AclOperation), ("permission_type", AclPermissionType),
        ):
            value = getattr(self, name)
            if value == 0 or not _known(enum_type, value):
                raise InvalidAclError(
                    f"{field}.{name}",
                    f"unknown value {_enum_name(enum_type, value)}; use ANY to match every "
                    f"{name.replace('_', ' ')}",
                )
        host = self.host
        if host is not None and host != WILDCARD_HOST:
            # Filters compare exactly: a host no binding can have matches none.
            with contextlib.suppress(ValueError):
                host = str(ipaddress.ip_address(host))
        return AclBindingFilter(
            ResourceType(self.resource_type), self.resource_name,
            PatternType(self.pattern_type), self.principal, host,
            AclOperation(self.operation), AclPermissionType(self.permission_type),
        )

    def matches(self, binding: AclBinding) -> bool:
        """Whether ``binding`` is one this filter selects (Kafka's ``AclBindingFilter.matches``:
        ``ResourcePatternFilter.matches`` and ``AccessControlEntryFilter.matches``)."""
        if self.resource_type != ResourceType.ANY and self.resource_type != binding.resource_type:
            return False
        pattern_type = self.pattern_type
        if pattern_type not in (PatternType.ANY, PatternType.MATCH) and (
            pattern_type != binding.pattern_type
        ):
            return False
        name = self.resource_name
        if name is not None:
            if pattern_type in (PatternType.ANY, binding.pattern_type):
                if name != binding.resource_name:
                    return False
            elif binding.pattern_type == PatternType.LITERAL:  # MATCH
                if name != binding.resource_name and binding.resource_name != WILDCARD_RESOURCE:
                    return False
            elif not name.startswith(binding.resource_name):  # MATCH, PREFIXED
                return False
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != binding.operation:
            return False
        return (self.permission_type == AclPermissionType.ANY
                or self.permission_type == binding.permission_type)


# The entry part of a binding, for matching: (principal, host, operation, permission_type).
_Entry = tuple[str, str, AclOperation, AclPermissionType]


class AclIndex:
    """An immutable set of bindings, indexed for the authorizer's questions.

    Holds the bindings in the order given (duplicates dropped), and per resource type a dict
    of LITERAL names and a dict of PREFIXED names to their entries. Finding the ACLs on a
    resource costs two dict lookups for the literal name and ``"*"`` plus one per prefix of the
    name (``len(name) + 1``, at most 250 for a topic); the authorizer caches decisions, so this
    runs once per (principal, host, operation, resource) until the ACLs change.

    Concurrency: immutable after construction; share it freely.
    """

    __slots__ = ("_bindings", "_literal", "_members", "_prefixed")

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        unique = dict.fromkeys(bindings)
        self._bindings: tuple[AclBinding, ...] = tuple(unique)
        self._members = frozenset(unique)
        self._literal: dict[ResourceType, dict[str, list[_Entry]]] = {}
        self._prefixed: dict[ResourceType, dict[str, list[_Entry]]] = {}
        for binding in self._bindings:
            table = (self._literal if binding.pattern_type == PatternType.LITERAL
                     else self._prefixed)
            entry = (binding.principal, binding.host, binding.operation, binding.permission_type)
            table.setdefault(binding.resource_type, {}).setdefault(
                binding.resource_name, []
            ).append(entry)

    @property
    def bindings(self) -> tuple[AclBinding, ...]:
        """Every binding, in the order they were created."""
        return self._bindings

    def __len__(self) -> int:
        return len(self._bindings)

    def __contains__(self, binding: object) -> bool:
        return binding in self._members

    def matching(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings ``acl_filter`` selects, in creation order."""
        return [binding for binding in self._bindings if acl_filter.matches(binding)]

    def with_added(self, bindings: Sequence[AclBinding]) -> AclIndex:
        """A new index with ``bindings`` added (ones already present are not repeated)."""
        return AclIndex((*self._bindings, *bindings))

    def without(self, removed: Iterable[AclBinding]) -> AclIndex:
        """A new index without ``removed``."""
        gone = set(removed)
        return AclIndex(b for b in self._bindings if b not in gone)

    def _entries_on(self, resource_type: ResourceType, name: str) -> list[_Entry]:
        """The entries of every binding whose pattern matches (``resource_type``, ``name``)."""
        entries: list[_Entry] = []
        literal = self._literal.get(resource_type)
        if literal:
            entries += literal.get(name, ())
            if name != WILDCARD_RESOURCE:
                entries += literal.get(WILDCARD_RESOURCE, ())
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for end in range(1, len(name) + 1):
                found = prefixed.get(name[:end])
                if found:
                    entries += found
        return entries

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        allow_if_no_acl: bool = False,
    ) -> bool:
        """Whether the ACLs allow ``principal`` (``"User:alice"``) from ``host`` to do
        ``operation`` on (``resource_type``, ``name``): rules 2-6 of the module docstring
        (super users are the caller's to check first)."""
        entries = self._entries_on(resource_type, name)
        if not entries:
            return allow_if_no_acl
        allowed_by = implied_operations(operation)
        allowed = False
        for acl_principal, acl_host, acl_operation, permission in entries:
            if acl_principal != principal and acl_principal != WILDCARD_PRINCIPAL:
                continue
            if acl_host != host and acl_host != WILDCARD_HOST:
                continue
            if permission == AclPermissionType.DENY:
                if acl_operation == operation or acl_operation == AclOperation.ALL:
                    return False  # deny wins, whatever else applies
            elif acl_operation in allowed_by or acl_operation == AclOperation.ALL:
                allowed = True
        return allowed

    def authorize_by_resource_type(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        *,
        allow_if_no_acl: bool = False,
    ) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on at least one resource of
        ``resource_type`` (Kafka's ``AclAuthorizer.authorizeByResourceType``).

        Only bindings of exactly ``operation`` or ALL count (no implied operations), for
        ``principal`` or ``User:*``, from ``host`` or ``*``. Refused if a LITERAL ``"*"`` is
        denied; allowed if ``allow_if_no_acl``; otherwise allowed if some allowed pattern is not
        covered by a deny: a PREFIXED allow not under a denied prefix, or a LITERAL allow
        (``"*"`` always counts) neither denied literally nor under a denied prefix.
        """

        def names(pattern_type: PatternType, permission: AclPermissionType) -> set[str]:
            table = (self._literal if pattern_type == PatternType.LITERAL
                     else self._prefixed).get(resource_type, {})
            found = set()
            for name, entries in table.items():
                for acl_principal, acl_host, acl_operation, acl_permission in entries:
                    if (acl_permission == permission
                            and acl_principal in (principal, WILDCARD_PRINCIPAL)
                            and acl_host in (host, WILDCARD_HOST)
                            and acl_operation in (operation, AclOperation.ALL)):
                        found.add(name)
                        break
            return found

        deny_literals = names(PatternType.LITERAL, AclPermissionType.DENY)
        if WILDCARD_RESOURCE in deny_literals:
            return False
        if allow_if_no_acl:
            return True
        deny_prefixes = names(PatternType.PREFIXED, AclPermissionType.DENY)

        def under_denied_prefix(name: str) -> bool:
            return any(name[:end] in deny_prefixes for end in range(len(name) + 1))

        if any(not under_denied_prefix(prefix)
               for prefix in names(PatternType.PREFIXED, AclPermissionType.ALLOW)):
            return True
        return any(
            literal == WILDCARD_RESOURCE
            or (literal not in deny_literals and not under_denied_prefix(literal))
            for literal in names(PatternType.LITERAL, AclPermissionType.ALLOW)
        )
