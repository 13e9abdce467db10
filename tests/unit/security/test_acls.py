"""Kafka's ACL model: validation, filters, and the decision rules, against a plain model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.server.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    implied_operations,
)
from stratalog.server.security.errors import InvalidAclError

TOPIC, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def acl(
    name: str = "orders",
    operation: AclOperation = Op.READ,
    permission: AclPermissionType = ALLOW,
    principal: str = "User:alice",
    host: str = "*",
    pattern: PatternType = LITERAL,
    resource_type: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def allowed(index: AclIndex, operation: AclOperation, name: str = "orders",
            principal: str = "User:alice", host: str = "10.0.0.1",
            resource_type: ResourceType = TOPIC, allow_if_no_acl: bool = False) -> bool:
    return index.authorize(principal, host, operation, resource_type, name,
                           allow_if_no_acl=allow_if_no_acl)


# ------------------------------------------------------------------------ validation


def test_a_valid_binding_is_kept_and_its_host_written_canonically() -> None:
    binding = acl(host="0:0:0:0:0:0:0:1").validated()
    assert binding.host == "::1"
    assert acl().validated() == acl()
    assert acl(name=CLUSTER_NAME, resource_type=CLUSTER, operation=Op.ALTER).validated()


@pytest.mark.parametrize(("binding", "field", "words"), [
    (acl(resource_type=ResourceType.ANY), "resource_type", "TOPIC, GROUP, CLUSTER"),
    (acl(resource_type=9), "resource_type", "9"),  # type: ignore[arg-type]
    (acl(pattern=PatternType.MATCH), "pattern_type", "LITERAL or PREFIXED"),
    (acl(pattern=PatternType.ANY), "pattern_type", "ANY"),
    (acl(operation=Op.ANY), "operation", "concrete"),
    (acl(operation=Op.UNKNOWN), "operation", "UNKNOWN"),
    (acl(operation=42), "operation", "42"),  # type: ignore[arg-type]
    (acl(permission=AclPermissionType.ANY), "permission_type", "ALLOW or DENY"),
    (acl(name=""), "resource_name", "empty"),
    (acl(name="x" * 1025), "resource_name", "at most 1024"),
    (acl(name="other", resource_type=CLUSTER), "resource_name", "kafka-cluster"),
    (acl(name=CLUSTER_NAME, resource_type=CLUSTER, pattern=PREFIXED), "resource_name",
     "LITERAL"),
    (acl(principal="alice"), "principal", "User:alice"),
    (acl(principal=""), "principal", "empty"),
    (acl(host="localhost"), "host", "IP address"),
    (acl(host=""), "host", "IP address"),
])
def test_invalid_bindings_name_the_field(binding: AclBinding, field: str, words: str) -> None:
    with pytest.raises(InvalidAclError, match=words) as caught:
        binding.validated("creations[3]")
    assert caught.value.field == f"creations[3].{field}"


def test_filters_must_say_any_rather_than_unknown() -> None:
    assert AclBindingFilter().validated() == AclBindingFilter()
    with pytest.raises(InvalidAclError, match="use ANY") as caught:
        AclBindingFilter(operation=Op.UNKNOWN).validated("filters[0]")
    assert caught.value.field == "filters[0].operation"
    with pytest.raises(InvalidAclError, match="99"):
        AclBindingFilter(pattern_type=99).validated()  # type: ignore[arg-type]
    assert AclBindingFilter(host="0::1").validated().host == "::1"


# ------------------------------------------------------------------------ filters


def test_filter_matching_follows_kafka() -> None:
    literal = acl("orders")
    wildcard = acl("*")
    prefixed = acl("ord", pattern=PREFIXED)
    other_type = acl("orders", resource_type=TXN)
    bindings = [literal, wildcard, prefixed, other_type]

    def selected(acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [b for b in bindings if acl_filter.matches(b)]

    assert selected(AclBindingFilter()) == bindings
    assert selected(AclBindingFilter(TOPIC)) == [literal, wildcard, prefixed]
    # A named pattern type: the same type and exactly the name.
    assert selected(AclBindingFilter(TOPIC, "orders", LITERAL)) == [literal]
    assert selected(AclBindingFilter(TOPIC, "ord", PREFIXED)) == [prefixed]
    assert selected(AclBindingFilter(TOPIC, "orders", PREFIXED)) == []
    # ANY: either type, exactly the name.
    assert selected(AclBindingFilter(ResourceType.ANY, "orders")) == [literal, other_type]
    # MATCH: what applies to the name: the literal, "*", and prefixes of it.
    assert selected(AclBindingFilter(TOPIC, "orders", PatternType.MATCH)) == [
        literal, wildcard, prefixed,
    ]
    assert selected(AclBindingFilter(TOPIC, "payments", PatternType.MATCH)) == [wildcard]
    # Entry fields compare exactly ("*" is a value, not a wildcard, in a filter).
    assert selected(AclBindingFilter(principal="User:*")) == []
    assert selected(AclBindingFilter(host="*", operation=Op.READ, permission_type=ALLOW)) == (
        bindings
    )
    assert selected(AclBindingFilter(permission_type=DENY)) == []


# ------------------------------------------------------------------------ decisions


def test_no_acl_on_a_resource_is_the_default() -> None:
    index = AclIndex([acl("payments")])
    assert not allowed(index, Op.READ)
    assert allowed(index, Op.READ, allow_if_no_acl=True)
    # An ACL of anyone on the resource means the default no longer applies (Kafka's rule).
    index = AclIndex([acl(principal="User:bob")])
    assert not allowed(index, Op.READ, allow_if_no_acl=True)


def test_literal_wildcard_and_prefixed_patterns() -> None:
    index = AclIndex([
        acl("orders", Op.READ),
        acl("*", Op.DESCRIBE),
        acl("pay", Op.WRITE, pattern=PREFIXED),
    ])
    assert allowed(index, Op.READ, "orders")
    assert not allowed(index, Op.READ, "orders2")
    assert allowed(index, Op.DESCRIBE, "anything")
    assert allowed(index, Op.WRITE, "payments")
    assert allowed(index, Op.WRITE, "pay")
    assert not allowed(index, Op.WRITE, "pa")
    assert not allowed(index, Op.WRITE, "orders")
    # Resource types are apart.
    assert not allowed(index, Op.READ, "orders", resource_type=TXN)


def test_deny_wins_over_allow_and_all() -> None:
    index = AclIndex([
        acl("*", Op.ALL),
        acl("secret", Op.READ, DENY, principal="User:*"),
    ])
    assert allowed(index, Op.READ, "public")
    assert not allowed(index, Op.READ, "secret")
    assert allowed(index, Op.WRITE, "secret")
    # A deny of READ does not deny DESCRIBE, which READ implies (Kafka: denies imply nothing).
    assert allowed(index, Op.DESCRIBE, "secret")
    index = index.with_added([acl("sec", Op.ALL, DENY, pattern=PREFIXED)])
    assert not allowed(index, Op.DESCRIBE, "secret")
    assert allowed(index, Op.DESCRIBE, "public")


def test_implied_operations() -> None:
    for operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE):
        index = AclIndex([acl(operation=operation)])
        assert allowed(index, Op.DESCRIBE), operation
    for operation in (Op.CREATE, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE):
        assert not allowed(AclIndex([acl(operation=operation)]), Op.DESCRIBE), operation
    assert allowed(AclIndex([acl(operation=Op.ALTER_CONFIGS)]), Op.DESCRIBE_CONFIGS)
    assert not allowed(AclIndex([acl(operation=Op.READ)]), Op.WRITE)
    assert implied_operations(Op.WRITE) == {Op.WRITE}


def test_principals_and_hosts() -> None:
    index = AclIndex([
        acl(principal="User:alice", host="10.0.0.1"),
        acl(operation=Op.WRITE, principal="User:*"),
    ])
    assert allowed(index, Op.READ, principal="User:alice", host="10.0.0.1")
    assert not allowed(index, Op.READ, principal="User:alice", host="10.0.0.2")
    assert not allowed(index, Op.READ, principal="User:bob", host="10.0.0.1")
    assert allowed(index, Op.WRITE, principal="User:bob", host="192.168.1.1")
    # A deny from one host only.
    index = index.with_added([acl(operation=Op.ALL, permission=DENY, host="10.0.0.9",
                                  principal="User:*")])
    assert not allowed(index, Op.WRITE, principal="User:bob", host="10.0.0.9")
    assert allowed(index, Op.WRITE, principal="User:bob", host="10.0.0.8")


def test_index_is_a_set_of_bindings_in_creation_order() -> None:
    a, b, c = acl("a"), acl("b"), acl("c")
    index = AclIndex([a, b, a])
    assert index.bindings == (a, b)
    assert len(index.with_added([b, c])) == 3
    assert index.with_added([c]).without([a]).bindings == (b, c)
    assert a in index and c not in index
    assert index.matching(AclBindingFilter(TOPIC, "b", LITERAL)) == [b]


def test_authorize_by_resource_type_follows_kafka() -> None:
    def by_type(*bindings: AclBinding, allow_if_no_acl: bool = False) -> bool:
        return AclIndex(bindings).authorize_by_resource_type(
            "User:alice", "10.0.0.1", Op.WRITE, TOPIC, allow_if_no_acl=allow_if_no_acl
        )

    assert not by_type()
    assert by_type(allow_if_no_acl=True)
    assert by_type(acl("orders", Op.WRITE))
    assert by_type(acl("orders", Op.ALL))
    assert not by_type(acl("orders", Op.READ))  # no implied operations here
    assert not by_type(acl("orders", Op.WRITE, principal="User:bob"))
    assert not by_type(acl("orders", Op.WRITE, host="10.0.0.2"))
    assert by_type(acl("ord", Op.WRITE, pattern=PREFIXED))
    # Denied literally, or under a denied prefix: that allow does not count.
    assert not by_type(acl("orders", Op.WRITE), acl("orders", Op.WRITE, DENY))
    assert not by_type(acl("orders", Op.WRITE), acl("or", Op.WRITE, DENY, pattern=PREFIXED))
    assert not by_type(acl("ord", Op.WRITE, pattern=PREFIXED),
                       acl("o", Op.WRITE, DENY, pattern=PREFIXED))
    assert by_type(acl("orders", Op.WRITE), acl("pay", Op.WRITE, DENY, pattern=PREFIXED))
    # A literal "*" deny refuses whatever else is allowed, even with no ACL found allowed.
    assert not by_type(acl("orders", Op.WRITE), acl("*", Op.WRITE, DENY),
                       allow_if_no_acl=True)
    assert by_type(acl("*", Op.WRITE), acl("orders", Op.WRITE, DENY))


# ------------------------------------------------------------------------ against a plain model


def reference_authorize(
    bindings: list[AclBinding], principal: str, host: str, operation: AclOperation, name: str,
    allow_if_no_acl: bool,
) -> bool:
    """Kafka's AclAuthorizer.authorizeAction, written as plainly as possible."""
    on_resource = [
        b for b in bindings
        if b.resource_type == TOPIC and (
            (b.pattern_type == LITERAL and b.resource_name in (name, "*"))
            or (b.pattern_type == PREFIXED and name.startswith(b.resource_name))
        )
    ]
    if not on_resource:
        return allow_if_no_acl

    def applies(b: AclBinding, ops: set[AclOperation], permission: AclPermissionType) -> bool:
        return (b.permission_type == permission and b.principal in (principal, "User:*")
                and b.host in (host, "*") and (b.operation in ops or b.operation == Op.ALL))

    if any(applies(b, {operation}, DENY) for b in on_resource):
        return False
    allow_ops = {operation}
    if operation == Op.DESCRIBE:
        allow_ops |= {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    if operation == Op.DESCRIBE_CONFIGS:
        allow_ops |= {Op.ALTER_CONFIGS}
    return any(applies(b, allow_ops, ALLOW) for b in on_resource)


_NAMES = st.sampled_from(["a", "ab", "abc", "b", "*"])
_OPERATIONS = st.sampled_from([
    Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
    Op.ALTER_CONFIGS,
])
_BINDINGS = st.builds(
    AclBinding,
    st.just(TOPIC), _NAMES, st.sampled_from([LITERAL, PREFIXED]),
    st.sampled_from(["User:alice", "User:bob", "User:*"]),
    st.sampled_from(["*", "10.0.0.1", "10.0.0.2"]),
    _OPERATIONS, st.sampled_from([ALLOW, DENY]),
)


@settings(max_examples=400, deadline=None)
@given(
    bindings=st.lists(_BINDINGS, max_size=8),
    principal=st.sampled_from(["User:alice", "User:bob", "User:carol"]),
    host=st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    operation=_OPERATIONS.filter(lambda op: op != Op.ALL),
    name=st.sampled_from(["a", "ab", "abc", "abd", "b", "c"]),
    allow_if_no_acl=st.booleans(),
)
def test_decisions_equal_the_plain_model(
    bindings: list[AclBinding], principal: str, host: str, operation: AclOperation, name: str,
    allow_if_no_acl: bool,
) -> None:
    index = AclIndex(bindings)
    assert index.authorize(principal, host, operation, TOPIC, name,
                           allow_if_no_acl=allow_if_no_acl) == reference_authorize(
        bindings, principal, host, operation, name, allow_if_no_acl
    )
