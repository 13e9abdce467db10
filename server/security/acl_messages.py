"""broker.proto's ACL messages to :mod:`.acls`'s model, and back.

The enums share Kafka's numbers with broker.proto's, so a value crosses as it is; a number the
model does not know stays a plain ``int`` here and is refused, with its field named, by the
model's ``validated`` (never a ValueError from an enum constructor). An unset optional string of
an ``AclBindingFilter`` is ``None`` (matches everything), a set one is matched exactly, the empty
string included.

Concurrency: pure functions.
"""

from __future__ import annotations

import enum
from typing import Any

from stratalog.v1 import broker_pb2

from .acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = ["binding_from_message", "binding_message", "filter_from_message"]


def _enum(enum_type: type[enum.IntEnum], value: int) -> Any:
    # Unknown numbers stay ints for validated() to refuse with the field's name.
    return enum_type._value2member_map_.get(value, value)


def binding_from_message(message: broker_pb2.AclBinding) -> AclBinding:
    """The model's binding for ``message`` (not yet validated)."""
    return AclBinding(
        resource_type=_enum(ResourceType, message.resource_type),
        resource_name=message.resource_name,
        pattern_type=_enum(PatternType, message.pattern_type),
        principal=message.principal,
        host=message.host,
        operation=_enum(AclOperation, message.operation),
        permission_type=_enum(AclPermissionType, message.permission_type),
    )


def filter_from_message(message: broker_pb2.AclBindingFilter) -> AclBindingFilter:
    """The model's filter for ``message`` (not yet validated)."""
    return AclBindingFilter(
        resource_type=_enum(ResourceType, message.resource_type),
        resource_name=message.resource_name if message.HasField("resource_name") else None,
        pattern_type=_enum(PatternType, message.pattern_type),
        principal=message.principal if message.HasField("principal") else None,
        host=message.host if message.HasField("host") else None,
        operation=_enum(AclOperation, message.operation),
        permission_type=_enum(AclPermissionType, message.permission_type),
    )


def binding_message(binding: AclBinding) -> broker_pb2.AclBinding:
    """``binding`` as broker.proto's message."""
    return broker_pb2.AclBinding(
        resource_type=int(binding.resource_type),
        resource_name=binding.resource_name,
        pattern_type=int(binding.pattern_type),
        principal=binding.principal,
        host=binding.host,
        operation=int(binding.operation),
        permission_type=int(binding.permission_type),
    )
