"""The keys and values of ``__consumer_offsets``, byte for byte as Kafka 3.x/4.x write them.

Every record of the topic is a coordinator record (Kafka's
``coordinator-common/.../runtime/CoordinatorRecordSerde.java``)::

    key   = record_type: int16 | key message      (the type is the key schema's "version")
    value = value_version: int16 | value message, or null: a tombstone

The record type picks the key and value schemas (``GroupCoordinatorRecordSerde.java``)::

    0, 1   OffsetCommitKey / OffsetCommitValue      a committed offset of (group, topic, partition)
    2      GroupMetadataKey / GroupMetadataValue    a classic group: generation, leader, members
    3-8    ConsumerGroup*Key / *Value               the consumer protocol's groups (KIP-848)
    9-15   ShareGroup*Key / *Value                  share groups (KIP-932)

A tombstone (null value) deletes the key: an expired or deleted offset (type 1), a deleted group
(type 2). Compaction keeps the latest record per key, so the topic converges to the live state.

Versions written, as Kafka 3.x/4.x choose them (``GroupCoordinatorRecordHelpers.java`` and
``MetadataVersion.offsetCommitValueVersion``/``groupMetadataValueVersion`` in
``server-common/src/main/java/org/apache/kafka/server/common/MetadataVersion.java``):
OffsetCommitKey as type 1; OffsetCommitValue version 3, or version 1 when the commit carries an
explicit expire timestamp (OffsetCommit requests v1-v4 could); GroupMetadataKey as type 2;
GroupMetadataValue version 3. Every version of the schemas is read: OffsetCommitValue 0-4 and
GroupMetadataValue 0-4 (4 is the first flexible one, with tagged fields; Kafka reads it and does
not write it yet).

Worked example, group "g", topic "t", partition 0, offset 100, commit time 1700000000000::

    key   00 01 | 00 01 67 | 00 01 74 | 00 00 00 00
          type 1  "g"        "t"        partition 0
    value 00 03 | 00 00 00 00 00 00 00 64 | ff ff ff ff | 00 00 | 00 00 01 8b cf e5 68 00
          v3      offset 100                leaderEpoch -1  ""      commitTimestamp

The field tables are Kafka's own JSON schemas, copied into ``records/schemas/`` and read by
:mod:`stratalog.records.message_schema`; nothing here spells a field's bytes. The classic
records become the typed values below; keys of the newer record types decode to
:class:`OtherRecordKey` (its ``name`` says which, e.g. ``ConsumerGroupMemberMetadataKey``) so that
a classic-only coordinator can skip them by name, and their values stay bytes unless asked for
(:func:`decode_value_fields`).

Errors: a key or value that is short, truncated, of an unknown record type or of an unknown
version raises a :class:`~stratalog.records.errors.CorruptMessageError` (leaf classes
``UnknownRecordTypeError``, ``UnsupportedMessageVersionError``) naming the message, the field and
the byte position. Bytes after a message are ignored, as Kafka's readers ignore them.

Speed: a coordinator's load decodes every record of its partition, nearly all offset commits.
Those are read through the readers :mod:`~stratalog.records.message_schema` generates per
version, into tuples and then the typed values; :func:`decode_offset_commit` stops at the flat
fields, without the three objects per record of :func:`decode_record` (docs/groups.md,
"Reading fast"); :func:`offset_commit_rows` reads a whole batch's commits at once into the rows
a load stores, in C when the extension is built (the bytes read directly; anything it does not
read, such as an error, left to the schema readers).

Sans-IO: bytes in, values out; the schemas are read from the package once, at import.
Immutable values; safe to share between threads.
"""

from __future__ import annotations

import importlib.resources
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .accel import offset_commit_rows_c as _offset_commit_rows_c
from .errors import CorruptMessageError, UnknownRecordTypeError
from .message_schema import MessageSchema

__all__ = [
    "CONSUMER_PROTOCOL_ASSIGNMENT",
    "CONSUMER_PROTOCOL_SUBSCRIPTION",
    "GROUP_METADATA_RECORD_TYPE",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_RECORD_TYPE",
    "OFFSET_COMMIT_VALUE_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY",
    "CoordinatorRecord",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "OtherRecordKey",
    "decode_key",
    "decode_key_fields",
    "decode_offset_commit",
    "decode_record",
    "decode_value",
    "decode_value_fields",
    "encode_key",
    "encode_value",
    "key_schema",
    "load_schema",
    "offset_commit_rows",
    "offset_commit_rows_reference",
    "value_schema",
]

#: The record type (key version) Kafka writes offset commits with; type 0 is read too.
OFFSET_COMMIT_RECORD_TYPE = 1
#: The record type of classic group metadata.
GROUP_METADATA_RECORD_TYPE = 2
#: The OffsetCommitValue version Kafka writes (the highest non-flexible one) ...
OFFSET_COMMIT_VALUE_VERSION = 3
#: ... and the one it writes when the commit has an explicit expire timestamp (only v1 has it).
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
#: The GroupMetadataValue version Kafka writes (the highest non-flexible one).
GROUP_METADATA_VALUE_VERSION = 3

_NO_TIMESTAMP = -1  # OffsetCommitRequest.DEFAULT_TIMESTAMP
_NO_LEADER_EPOCH = -1  # RecordBatch.NO_PARTITION_LEADER_EPOCH
_TYPE_PREFIX_BYTES = 2


def load_schema(name: str) -> MessageSchema:
    """The schema ``records/schemas/<name>.json``, parsed."""
    text = importlib.resources.files(__package__).joinpath("schemas", f"{name}.json").read_text(
        encoding="utf-8"
    )
    return MessageSchema.from_json(text)


# record type -> the stem of its Key and Value schema names (GroupCoordinatorRecordSerde).
_RECORD_TYPE_NAMES = {
    0: "OffsetCommit",
    1: "OffsetCommit",
    2: "GroupMetadata",
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    9: "ShareGroupPartitionMetadata",
    10: "ShareGroupMemberMetadata",
    11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata",
}
_KEY_SCHEMAS = {t: load_schema(f"{n}Key") for t, n in _RECORD_TYPE_NAMES.items()}
_VALUE_SCHEMAS = {t: load_schema(f"{n}Value") for t, n in _RECORD_TYPE_NAMES.items()}

#: The consumer protocol's subscription and assignment (the ``subscription`` and ``assignment``
#: bytes of a "consumer" group's members are these, each prefixed by its int16 version).
CONSUMER_PROTOCOL_SUBSCRIPTION = load_schema("ConsumerProtocolSubscription")
CONSUMER_PROTOCOL_ASSIGNMENT = load_schema("ConsumerProtocolAssignment")


def key_schema(record_type: int) -> MessageSchema:
    """The key schema of ``record_type``. Raises :class:`UnknownRecordTypeError`."""
    schema = _KEY_SCHEMAS.get(record_type)
    if schema is None:
        raise UnknownRecordTypeError(
            f"unknown __consumer_offsets record type {record_type}", record_type=record_type
        )
    return schema


def value_schema(record_type: int) -> MessageSchema:
    """The value schema of ``record_type``. Raises :class:`UnknownRecordTypeError`."""
    key_schema(record_type)
    return _VALUE_SCHEMAS[record_type]


# --- the typed values of the classic records ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """The key of a committed offset: which group, topic and partition (record type 0 or 1)."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset.

    ``offset`` is the next offset to consume; ``leader_epoch`` the epoch of the last consumed
    record (-1: unknown; versions 3+); ``commit_timestamp_ms`` when the coordinator accepted the
    commit; ``expire_timestamp_ms`` only in version 1 (-1: none, the group's retention applies).
    """

    offset: int
    metadata: str = ""
    commit_timestamp_ms: int = _NO_TIMESTAMP
    leader_epoch: int = _NO_LEADER_EPOCH
    expire_timestamp_ms: int = _NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """The key of a classic group's metadata (record type 2)."""

    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """A member of a classic group as the coordinator stored it at the last rebalance.

    ``subscription`` is the member's metadata for the chosen protocol, ``assignment`` what the
    leader assigned it; for protocol type "consumer" both are the consumer protocol's bytes
    (:data:`CONSUMER_PROTOCOL_SUBSCRIPTION`, :data:`CONSUMER_PROTOCOL_ASSIGNMENT`), opaque here.
    ``group_instance_id`` (static membership) exists from version 3, ``rebalance_timeout_ms``
    from version 1 (-1 before).
    """

    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout_ms: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A classic group: its protocol type (``""`` when empty), generation, chosen protocol and
    leader (``None`` when empty), when it entered its current state (-1 before version 2), and its
    members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = -1
    members: tuple[MemberMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class OtherRecordKey:
    """The key of a record type a classic coordinator does not use (3-15): its ``name``
    (``ConsumerGroupMetadataKey``, ...) and the group (and member) it belongs to."""

    record_type: int
    name: str
    group_id: str
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One decoded ``__consumer_offsets`` record.

    ``value`` is ``None`` for a tombstone; for record types 3-15 it is the undecoded value bytes
    (see :func:`decode_value_fields`); ``value_version`` is the value's version (``None`` for a
    tombstone).
    """

    record_type: int
    key: OffsetCommitKey | GroupMetadataKey | OtherRecordKey
    value: OffsetCommitValue | GroupMetadataValue | bytes | None
    value_version: int | None = field(default=None)

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


# Dataclass field -> schema field (camelCase), per typed value; the schema decides the bytes.
_OFFSET_COMMIT_VALUE_FIELDS = {
    "offset": "offset",
    "leader_epoch": "leaderEpoch",
    "metadata": "metadata",
    "commit_timestamp_ms": "commitTimestamp",
    "expire_timestamp_ms": "expireTimestamp",
}
_MEMBER_FIELDS = {
    "member_id": "memberId",
    "group_instance_id": "groupInstanceId",
    "client_id": "clientId",
    "client_host": "clientHost",
    "rebalance_timeout_ms": "rebalanceTimeout",
    "session_timeout_ms": "sessionTimeout",
    "subscription": "subscription",
    "assignment": "assignment",
}
_GROUP_FIELDS = {
    "protocol_type": "protocolType",
    "generation": "generation",
    "protocol": "protocol",
    "leader": "leader",
    "current_state_timestamp_ms": "currentStateTimestamp",
}


def _to_schema(obj: object, names: Mapping[str, str]) -> dict[str, Any]:
    return {schema_name: getattr(obj, attr) for attr, schema_name in names.items()}


def _from_schema(values: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    # A field the version lacks is absent from values: the dataclass default applies.
    return {attr: values[name] for attr, name in names.items() if name in values}


def _tuple_builder(
    cls: type, schema: MessageSchema, version: int, names: Mapping[str, str]
) -> Callable[[tuple[Any, ...]], Any]:
    """A function from :meth:`MessageSchema.decode_tuple`'s tuple of ``version`` to ``cls``:
    ``lambda t: cls(offset=t[0], leaderEpoch=t[1], ...)`` with the dataclass's names, the
    fields the version lacks left to their defaults."""
    index = {name: i for i, name in enumerate(schema.field_names(version))}
    arguments = ", ".join(
        f"{attr}=t[{index[name]}]" for attr, name in names.items() if name in index
    )
    builder: Callable[[tuple[Any, ...]], Any] = eval(f"lambda t: cls({arguments})", {"cls": cls})
    return builder


def _flat_builder(version: int) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """A function from OffsetCommitValue ``version``'s tuple to ``(offset, leader_epoch,
    metadata, commit_timestamp_ms, expire_timestamp_ms)``, defaults where the version lacks
    a field."""
    index = {name: i for i, name in enumerate(_OFFSET_COMMIT_VALUE_SCHEMA.field_names(version))}
    defaults = {"leaderEpoch": _NO_LEADER_EPOCH, "expireTimestamp": _NO_TIMESTAMP}
    items = ", ".join(
        f"t[{index[name]}]" if name in index else repr(defaults[name])
        for name in ("offset", "leaderEpoch", "metadata", "commitTimestamp", "expireTimestamp")
    )
    builder: Callable[[tuple[Any, ...]], tuple[Any, ...]] = eval(f"lambda t: ({items})")
    return builder


_OFFSET_COMMIT_VALUE_SCHEMA = _VALUE_SCHEMAS[OFFSET_COMMIT_RECORD_TYPE]
# OffsetCommitValue version -> its tuple's typed value (OffsetCommitValue's one type for all).
_OFFSET_COMMIT_VALUE_BUILDERS = {
    version: _tuple_builder(
        OffsetCommitValue, _OFFSET_COMMIT_VALUE_SCHEMA, version, _OFFSET_COMMIT_VALUE_FIELDS
    )
    for version in range(
        _OFFSET_COMMIT_VALUE_SCHEMA.valid_versions.low,
        _OFFSET_COMMIT_VALUE_SCHEMA.valid_versions.high + 1,
    )
}
_OFFSET_COMMIT_VALUE_FLAT = {
    version: _flat_builder(version) for version in _OFFSET_COMMIT_VALUE_BUILDERS
}


# --- encoding ----------------------------------------------------------------------------------


def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    """The key bytes Kafka writes for ``key``: record type 1 or 2, then the key message."""
    if isinstance(key, OffsetCommitKey):
        record_type = OFFSET_COMMIT_RECORD_TYPE
        values: dict[str, Any] = {
            "group": key.group, "topic": key.topic, "partition": key.partition
        }
    elif isinstance(key, GroupMetadataKey):
        record_type = GROUP_METADATA_RECORD_TYPE
        values = {"group": key.group}
    else:
        raise TypeError(f"not a classic __consumer_offsets key: {key!r}")
    schema = _KEY_SCHEMAS[record_type]
    return record_type.to_bytes(2, "big", signed=True) + schema.encode(values, record_type)


def encode_value(
    value: OffsetCommitValue | GroupMetadataValue | None, version: int | None = None
) -> bytes | None:
    """The value bytes for ``value``: its version (int16), then the message; ``None`` (a
    tombstone) for ``None``.

    ``version`` defaults to the one Kafka writes (module docstring); any version of the schema
    may be asked for (tests, and a coordinator that must write what older readers read). Fields
    the version lacks are dropped (they are ``ignorable`` in Kafka's schemas).

    Raises:
        ValueError: ``version`` is not a version of the value's schema, or a field does not fit
            (a string over 32767 bytes of UTF-8, an int out of range).
    """
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        schema = _VALUE_SCHEMAS[OFFSET_COMMIT_RECORD_TYPE]
        if version is None:
            version = (
                OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY
                if value.expire_timestamp_ms != _NO_TIMESTAMP
                else OFFSET_COMMIT_VALUE_VERSION
            )
        values = _to_schema(value, _OFFSET_COMMIT_VALUE_FIELDS)
    elif isinstance(value, GroupMetadataValue):
        schema = _VALUE_SCHEMAS[GROUP_METADATA_RECORD_TYPE]
        if version is None:
            version = GROUP_METADATA_VALUE_VERSION
        values = _to_schema(value, _GROUP_FIELDS)
        values["members"] = [_to_schema(m, _MEMBER_FIELDS) for m in value.members]
    else:
        raise TypeError(f"not a classic __consumer_offsets value: {value!r}")
    return version.to_bytes(2, "big", signed=True) + schema.encode(values, version)


# --- decoding ----------------------------------------------------------------------------------


_UNPACK_PREFIX = struct.Struct(">h").unpack_from
#: An offset commit key's last field, its partition: an int32.
_PARTITION_BYTES = 4
_UNPACK_PARTITION = struct.Struct(">i").unpack_from


def _prefix(data: bytes | bytearray | memoryview, what: str) -> int:
    try:
        return _UNPACK_PREFIX(data, 0)[0]
    except struct.error:
        raise CorruptMessageError(
            f"{what} is {len(data)} bytes: too short for its int16 version at position 0",
            message=what,
            position=0,
        ) from None


def decode_key_fields(data: bytes | bytearray | memoryview) -> tuple[int, dict[str, Any]]:
    """The record type of a key and its fields as the key schema names them.

    Raises:
        UnknownRecordTypeError: no schema has the key's type.
        CorruptMessageError: the key is shorter than its type, or its message is truncated.
    """
    record_type = _prefix(data, "key")
    schema = key_schema(record_type)
    # Every key schema has exactly the record type as its one valid version.
    values, _ = schema.decode(data, record_type, _TYPE_PREFIX_BYTES)
    return record_type, values


def decode_value_fields(
    record_type: int, data: bytes | bytearray | memoryview
) -> tuple[int, dict[str, Any]]:
    """A value's version and its fields as the value schema of ``record_type`` names them.

    Raises:
        UnknownRecordTypeError: no schema has ``record_type``.
        UnsupportedMessageVersionError: the value's version is not one of its schema's.
        CorruptMessageError: the value is shorter than its version, or its message is truncated.
    """
    schema = value_schema(record_type)
    version = _prefix(data, schema.name)
    values, _ = schema.decode(data, version, _TYPE_PREFIX_BYTES)
    return version, values


def decode_key(
    data: bytes | bytearray | memoryview,
) -> OffsetCommitKey | GroupMetadataKey | OtherRecordKey:
    """The typed key (raises as :func:`decode_key_fields`)."""
    record_type, values = decode_key_fields(data)
    return _typed_key(record_type, values)


def _typed_key(
    record_type: int, values: Mapping[str, Any]
) -> OffsetCommitKey | GroupMetadataKey | OtherRecordKey:
    if record_type in (0, 1):
        return OffsetCommitKey(values["group"], values["topic"], values["partition"])
    if record_type == GROUP_METADATA_RECORD_TYPE:
        return GroupMetadataKey(values["group"])
    return OtherRecordKey(
        record_type, _KEY_SCHEMAS[record_type].name, values["groupId"], values.get("memberId")
    )


def decode_value(
    record_type: int, data: bytes | bytearray | memoryview | None
) -> tuple[int | None, OffsetCommitValue | GroupMetadataValue | None]:
    """``(version, typed value)`` of a classic record's value; ``(None, None)`` for a tombstone.

    Raises as :func:`decode_value_fields`; ``ValueError`` for a record type other than 0-2
    (a programmer error: their values are not typed here).
    """
    if record_type not in (0, 1, GROUP_METADATA_RECORD_TYPE):
        raise ValueError(f"record type {record_type} has no typed value (use decode_value_fields)")
    if data is None:
        return None, None
    if record_type != GROUP_METADATA_RECORD_TYPE:
        return _offset_commit_value(data)
    version, values = decode_value_fields(record_type, data)
    members = tuple(MemberMetadata(**_from_schema(m, _MEMBER_FIELDS)) for m in values["members"])
    return version, GroupMetadataValue(**_from_schema(values, _GROUP_FIELDS), members=members)


def _offset_commit_value(data: bytes | bytearray | memoryview) -> tuple[int, OffsetCommitValue]:
    # Through the generated reader's tuple, no dict in between: a load decodes every one.
    version = _prefix(data, _OFFSET_COMMIT_VALUE_SCHEMA.name)
    fields, _ = _OFFSET_COMMIT_VALUE_SCHEMA.decode_tuple(data, version, _TYPE_PREFIX_BYTES)
    return version, _OFFSET_COMMIT_VALUE_BUILDERS[version](fields)


def decode_record(
    key: bytes | bytearray | memoryview | None, value: bytes | bytearray | memoryview | None
) -> CoordinatorRecord:
    """One record of ``__consumer_offsets`` from its key and value bytes (value ``None``: a
    tombstone).

    Raises:
        CorruptMessageError: the key is missing or does not parse, or the value does not parse
            (leaf classes as in :func:`decode_key_fields` and :func:`decode_value_fields`).
    """
    if key is None:
        raise CorruptMessageError(
            "a __consumer_offsets record must have a key", message="key", position=None
        )
    record_type = _prefix(key, "key")
    if record_type == OFFSET_COMMIT_RECORD_TYPE or record_type == 0:
        # Nearly every record of the topic: read through the generated readers' tuples, with
        # no dict in between (a coordinator's load decodes every record of its partition).
        (group, topic, partition), _ = _KEY_SCHEMAS[record_type].decode_tuple(
            key, record_type, _TYPE_PREFIX_BYTES
        )
        offset_key = OffsetCommitKey(group, topic, partition)
        if value is None:
            return CoordinatorRecord(record_type, offset_key, None)
        version, offset_value = _offset_commit_value(value)
        return CoordinatorRecord(record_type, offset_key, offset_value, version)
    record_type, key_values = decode_key_fields(key)
    typed_key = _typed_key(record_type, key_values)
    if record_type not in (0, 1, GROUP_METADATA_RECORD_TYPE):
        if value is None:
            return CoordinatorRecord(record_type, typed_key, None)
        return CoordinatorRecord(
            record_type, typed_key, bytes(value), _prefix(value, _VALUE_SCHEMAS[record_type].name)
        )
    version, typed_value = decode_value(record_type, value)
    return CoordinatorRecord(record_type, typed_key, typed_value, version)


def decode_offset_commit(
    key: bytes | bytearray | memoryview,
    value: bytes | bytearray | memoryview | None,
    names: dict[bytes, tuple[str, str]] | None = None,
) -> tuple[Any, ...] | None:
    """An offset commit record's fields as one flat tuple, for a coordinator's load: ``None``
    when ``key`` is not an offset commit's (record types 2-15: use :func:`decode_record`);
    ``(group, topic, partition)`` for a tombstone (``value`` None); else ``(group, topic,
    partition, offset, leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms)``,
    the fields a version lacks at :class:`OffsetCommitValue`'s defaults.

    The same bytes, values and errors as :func:`decode_record`, without its three objects per
    record (they are most of its cost); the order is that of the server's
    ``OffsetCommitRecord`` (server/groups/group_records.py), which the tuple unpacks into.

    ``names``: a memo the caller keeps over many calls (a load keeps one per chunk it reads,
    which bounds it): a key's bytes but its last four (the partition, the key's last field)
    to its group and topic. A group commits many partitions of a topic at once, so keys that
    differ only by partition follow each other; with the memo their strings are read once,
    and shared by every offset that holds them. Only a key read whole (no byte after the
    partition) is remembered, so a hit parses exactly as the reader would.

    Raises:
        CorruptMessageError: as :func:`decode_record`.
    """
    record_type = _prefix(key, "key")
    if record_type != OFFSET_COMMIT_RECORD_TYPE and record_type != 0:
        key_schema(record_type)  # an unknown type raises, as decode_record would
        return None
    group_topic: tuple[str, str] | None = None
    if names is not None:
        group_topic = names.get(bytes(key[:-_PARTITION_BYTES]))
    if group_topic is not None:
        group_topic_partition = (
            *group_topic, _UNPACK_PARTITION(key, len(key) - _PARTITION_BYTES)[0])
    else:
        group_topic_partition, end = _KEY_SCHEMAS[record_type].decode_tuple(
            key, record_type, _TYPE_PREFIX_BYTES
        )
        if names is not None and end == len(key):
            names[bytes(key[:-_PARTITION_BYTES])] = group_topic_partition[:2]
    if value is None:
        return group_topic_partition
    version = _prefix(value, "OffsetCommitValue")
    fields, _ = _OFFSET_COMMIT_VALUE_SCHEMA.decode_tuple(value, version, _TYPE_PREFIX_BYTES)
    return group_topic_partition + _OFFSET_COMMIT_VALUE_FLAT[version](fields)


def offset_commit_rows(
    offsets: list[int],
    keys: list[bytes | None],
    values: list[bytes | None],
    value_type: type[tuple[Any, ...]],
    partitions: dict[tuple[str, int], tuple[str, int]] | None = None,
) -> list[tuple[str, tuple[str, int], tuple[Any, ...] | None] | None]:
    """The offset commits among one batch's records, one row per record, for a coordinator's
    load: the batch's columns (record offsets, keys, values) in, ``(group, (topic,
    partition), value)`` out, ``value`` a ``value_type`` (a tuple subclass without fields of
    its own: the store's NamedTuple) of ``(offset, leader_epoch, metadata,
    commit_timestamp_ms, expire_timestamp_ms, record_offset)``, or ``None`` for a tombstone.

    A row is ``None`` for a record this reader leaves to :func:`decode_record` (through the
    caller): any record type but 0 and 1, a value of version 4 (flexible, which Kafka does
    not write yet), and a key or value that does not parse, so that the schema readers raise
    the error naming the problem. It never raises for the bytes.

    ``partitions``: a memo the caller keeps over many calls (a load keeps one for the whole
    partition: bounded by the distinct partitions it stores offsets of): each ``(topic,
    partition)`` tuple is kept once, and every group's row of that partition shares it (a
    tuple and maybe an int less per stored offset: the groups of one topic commit the same
    partitions).

    In C when the extension is built (:data:`~stratalog.records.accel.offset_commit_rows_c`:
    the bytes read directly, one group and one topic string shared by the consecutive keys
    that hold them, the batch's commit timestamp shared, the rows' tuples untracked by the
    garbage collector as they hold only strings and ints); else
    :func:`offset_commit_rows_reference`, which gives the same rows
    (tests/unit/records/test_consumer_offsets_rows.py compares them). O(bytes of the batch).

    Raises:
        ValueError: the three lists differ in length. TypeError: ``value_type`` is not such a
            tuple subclass, or the columns are not lists (C).
    """
    if _offset_commit_rows_c is not None:
        return _offset_commit_rows_c(offsets, keys, values, value_type, partitions)
    return offset_commit_rows_reference(offsets, keys, values, value_type, partitions)


def offset_commit_rows_reference(
    offsets: list[int],
    keys: list[bytes | None],
    values: list[bytes | None],
    value_type: type[tuple[Any, ...]],
    partitions: dict[tuple[str, int], tuple[str, int]] | None = None,
) -> list[tuple[str, tuple[str, int], tuple[Any, ...] | None] | None]:
    """:func:`offset_commit_rows` through the schema readers (:func:`decode_offset_commit`):
    the reference of the C reader, and the fallback without it."""
    if not len(offsets) == len(keys) == len(values):
        raise ValueError(
            f"offset_commit_rows(): {len(offsets)} offsets, {len(keys)} keys and"
            f" {len(values)} values: the lists must have one length")
    names: dict[bytes, tuple[str, str]] = {}
    rows = [
        _offset_commit_row(record_offset, key, value, value_type, names)
        for record_offset, key, value in zip(offsets, keys, values, strict=True)
    ]
    if partitions is None:
        return rows
    return [
        None if row is None else (row[0], partitions.setdefault(row[1], row[1]), row[2])
        for row in rows
    ]


def _offset_commit_row(
    record_offset: int,
    key: bytes | None,
    value: bytes | None,
    value_type: type[tuple[Any, ...]],
    names: dict[bytes, tuple[str, str]],
) -> tuple[str, tuple[str, int], tuple[Any, ...] | None] | None:
    if type(key) is not bytes or (value is not None and type(value) is not bytes):
        return None
    if len(key) < _TYPE_PREFIX_BYTES or key[0] != 0 or key[1] > OFFSET_COMMIT_RECORD_TYPE:
        return None
    # Version 4 is the first flexible one (tagged fields): left to decode_record.
    if value is not None and (
        len(value) < _TYPE_PREFIX_BYTES or value[0] != 0 or value[1] > OFFSET_COMMIT_VALUE_VERSION
    ):
        return None
    try:
        fields = decode_offset_commit(key, value, names)
    except CorruptMessageError:
        return None
    assert fields is not None  # record type 0 or 1
    group, topic, partition = fields[:3]
    if value is None:
        return group, (topic, partition), None
    return group, (topic, partition), tuple.__new__(value_type, (*fields[3:], record_offset))
