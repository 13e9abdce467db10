"""The ACL enums (client/acls.py): broker.proto's, defined once, with Kafka's names."""

from __future__ import annotations

import pytest

from stratalog.client import acls
from stratalog.server.security import acls as server_acls
from stratalog.v1 import broker_pb2

ENUMS = [
    (acls.ResourceType, broker_pb2.ResourceType, "RESOURCE_TYPE_"),
    (acls.PatternType, broker_pb2.PatternType, "PATTERN_TYPE_"),
    (acls.AclOperation, broker_pb2.AclOperation, "ACL_OPERATION_"),
    (acls.AclPermissionType, broker_pb2.AclPermissionType, "ACL_PERMISSION_TYPE_"),
]


@pytest.mark.parametrize(("enum_class", "proto_enum", "prefix"), ENUMS)
def test_each_enum_is_the_protos_without_its_prefix(enum_class, proto_enum, prefix) -> None:
    assert [(prefix + m.name, m.value) for m in enum_class] == proto_enum.items()
    assert enum_class.__module__ == "stratalog.client.acls" and enum_class.__doc__


def test_the_server_uses_the_same_classes() -> None:
    assert server_acls.ResourceType is acls.ResourceType
    assert server_acls.PatternType is acls.PatternType
    assert server_acls.AclOperation is acls.AclOperation
    assert server_acls.AclPermissionType is acls.AclPermissionType


def test_names_read_and_print_as_kafkas() -> None:
    assert acls.AclOperation.parse("IdempotentWrite") is acls.AclOperation.IDEMPOTENT_WRITE
    assert acls.AclOperation.parse("idempotent-write") is acls.AclOperation.IDEMPOTENT_WRITE
    assert acls.PatternType.parse("PREFIXED") is acls.PatternType.PREFIXED
    with pytest.raises(ValueError, match="not a ResourceType; one of ANY, TOPIC"):
        acls.ResourceType.parse("table")
    assert [t.kafka_name for t in acls.ResourceType] == [
        "Unknown", "Any", "Topic", "Group", "Cluster", "TransactionalId",
    ]
    assert server_acls.resource_label(acls.ResourceType.TRANSACTIONAL_ID, "tx") == (
        "TransactionalId:tx"
    )
