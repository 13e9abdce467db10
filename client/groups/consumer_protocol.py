"""The consumer protocol's bytes: what a Kafka consumer puts in JoinGroup and gets from SyncGroup.

Kafka's group protocol carries two opaque byte strings per member: the *metadata* a member sends
in JoinGroup (for protocol type ``"consumer"``: a ConsumerProtocolSubscription) and the
*assignment* the leader computes and the coordinator hands back in SyncGroup (a
ConsumerProtocolAssignment). The coordinator never reads them; the members do, so every member of
a group must write them as Kafka's clients do, or a Java consumer and a Python one cannot share a
group. Schemas: ``clients/src/main/resources/common/message/ConsumerProtocolSubscription.json``
and ``ConsumerProtocolAssignment.json``; the framing and the version rules:
``clients/src/main/java/org/apache/kafka/clients/consumer/internals/ConsumerProtocol.java``.

The bytes are not spelled here: the schemas are Kafka's own JSON, copied into
``records/schemas/`` and read by :mod:`stratalog.records.message_schema` (the codec of the
``__consumer_offsets`` records too, where a classic group's members keep these bytes). This module
is the typed layer over it: Kafka's framing (the int16 version prefix), the order Kafka writes
topics and partitions in, the version rules below, and the dataclasses and error of the client.

Layout (big-endian, Kafka's classic non-flexible encoding: ``string`` is an int16 length and UTF-8
bytes, ``bytes`` an int32 length and the bytes, length -1 for null where nullable; an array is an
int32 count and its elements)::

    ConsumerProtocolSubscription            versions
      version              int16            (the prefix: which version follows)
      topics               [string]         0+   sorted
      user_data            bytes, nullable  0+   the assignor's own data
      owned_partitions     [topic string,   1+   sorted by topic, then partition
                            partitions [int32]]
      generation_id        int32            2+   -1: none
      rack_id              string, nullable 3+

    ConsumerProtocolAssignment
      version              int16
      assigned_partitions  [topic string,   0+   grouped by topic, in first-appearance order
                            partitions [int32]]
      user_data            bytes, nullable  0+

Worked example: a version-1 subscription to topics ``a`` and ``b``, user data ``b"xy"``, owning
partitions 0 and 1 of ``a``::

    0001                      version 1
    00000002 0001 61 0001 62  topics: 2 strings, "a", "b"
    00000002 7879             user_data: 2 bytes
    00000001 0001 61          owned_partitions: 1 topic, "a",
             00000002 00000000 00000001     2 partitions, 0 and 1

Version rules, as ConsumerProtocol.java: versions 0-3 are known; a higher version is read with
version 3's layout (the schema comments promise that new versions only append fields), and bytes
after the last known field are ignored, for the same reason; a negative version is refused.
Encoding at a lower version drops the fields it does not have (they are ``ignorable`` in the
schema), as Kafka's generated code does.

Malformed bytes raise :class:`ConsumerProtocolError` naming the message, its version, the field
and the byte position (the schema reader's :class:`~stratalog.records.errors.CorruptMessageError`,
worded for the client: snake_case field names, "at byte N of M"). Counts and lengths are checked
against the bytes left before anything is allocated, so a corrupt count cannot make the decoder
build a huge list; a negative length other than the -1 of a null is refused.

No I/O, no state: pure functions of bytes and values, safe from any thread or task.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from stratalog.client.errors import StratalogError
from stratalog.client.types import TopicPartition
from stratalog.records.consumer_offsets import (
    CONSUMER_PROTOCOL_ASSIGNMENT,
    CONSUMER_PROTOCOL_SUBSCRIPTION,
)
from stratalog.records.errors import CorruptMessageError
from stratalog.records.message_schema import MessageSchema

__all__ = [
    "PROTOCOL_TYPE",
    "VERSION_MAX",
    "VERSION_MIN",
    "Assignment",
    "ConsumerProtocolError",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "read_version",
]

#: JoinGroup's ``protocol_type`` for consumers (ConsumerProtocol.PROTOCOL_TYPE).
PROTOCOL_TYPE = "consumer"
#: The versions of both messages this module knows (the schemas' ``validVersions``).
VERSION_MIN = CONSUMER_PROTOCOL_SUBSCRIPTION.valid_versions.low
VERSION_MAX = CONSUMER_PROTOCOL_SUBSCRIPTION.valid_versions.high
# ConsumerProtocol.java checks both messages against one range.
assert CONSUMER_PROTOCOL_ASSIGNMENT.valid_versions == CONSUMER_PROTOCOL_SUBSCRIPTION.valid_versions

_VERSION_BYTES = 2
# The generation a subscription carries when it has none (AbstractStickyAssignor.DEFAULT_GENERATION).
_NO_GENERATION = -1


class ConsumerProtocolError(StratalogError):
    """Bytes that are not a consumer-protocol subscription or assignment (Kafka's SchemaException).

    They come from another member (the leader's assignment, a member's subscription), through the
    coordinator; sending the same request again gets the same bytes, so it is not retriable.
    """

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __str__(self) -> str:
        # No status label: the client found this in bytes it decoded, no server answered it.
        return self.message


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a member asks for when it joins (Kafka's ConsumerPartitionAssignor.Subscription).

    ``topics``: the topics it subscribes to. ``user_data``: the assignor's own bytes (the
    cooperative-sticky assignor's generation, for leaders that read version 0 or 1), ``None``
    when absent. ``owned_partitions``: what it holds now (version 1+), which the sticky
    assignors keep where they can. ``generation_id``: the generation in which it was given those
    partitions (version 2+), ``None`` when unknown (written as -1, and -1 or any negative read
    back as ``None``, as Kafka's Subscription does). ``rack_id``: the member's rack (version 3+),
    ``None`` when absent or empty.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int | None = None
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader gives one member (Kafka's ConsumerPartitionAssignor.Assignment).

    ``partitions`` in the order the assignor listed them; ``user_data`` the assignor's own bytes
    (none of ours writes any), ``None`` when absent.
    """

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


def encode_subscription(subscription: Subscription, version: int = VERSION_MAX) -> bytes:
    """The version-prefixed bytes of ``subscription`` at ``version`` (0-3), as Kafka writes them.

    Topics are written sorted, owned partitions sorted by (topic, partition) and grouped by topic
    (ConsumerProtocol.serializeSubscription); fields the version lacks are dropped.

    Raises:
        ValueError: ``version`` outside 0-3, or a string or list too long for its length field.
    """
    values = {
        "topics": sorted(subscription.topics),
        "userData": subscription.user_data,
        "ownedPartitions": _grouped(sorted(subscription.owned_partitions)),
        "generationId": (
            _NO_GENERATION if subscription.generation_id is None else subscription.generation_id
        ),
        "rackId": subscription.rack_id,
    }
    return _encode(CONSUMER_PROTOCOL_SUBSCRIPTION, values, version)


def encode_assignment(assignment: Assignment, version: int = VERSION_MAX) -> bytes:
    """The version-prefixed bytes of ``assignment`` at ``version`` (0-3), as Kafka writes them.

    Partitions are grouped by topic, the topics in the order they first appear and each topic's
    partitions in the order given (ConsumerProtocol.serializeAssignment). Versions 0-3 share one
    layout; the version is written because readers check it.

    Raises:
        ValueError: ``version`` outside 0-3, or a string or list too long for its length field.
    """
    values = {
        "assignedPartitions": _grouped(assignment.partitions),
        "userData": assignment.user_data,
    }
    return _encode(CONSUMER_PROTOCOL_ASSIGNMENT, values, version)


def read_version(data: bytes | bytearray | memoryview) -> int:
    """The version prefix of a subscription or an assignment (ConsumerProtocol.deserializeVersion).

    Raises:
        ConsumerProtocolError: fewer than 2 bytes.
    """
    if len(data) < _VERSION_BYTES:
        raise ConsumerProtocolError(
            f"consumer protocol header: needs 2 bytes for the version, got {len(data)}"
        )
    return int.from_bytes(data[:_VERSION_BYTES], "big", signed=True)


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """Read a version-prefixed ConsumerProtocolSubscription.

    A version above 3 is read as version 3; bytes after the last field are ignored.

    Raises:
        ConsumerProtocolError: a negative version, or bytes that end inside a field, a negative
            length or count where the schema has no null, or a string that is not UTF-8.
    """
    values = _decode(CONSUMER_PROTOCOL_SUBSCRIPTION, data)
    generation = values.get("generationId", _NO_GENERATION)
    return Subscription(
        topics=tuple(values["topics"]),
        user_data=values["userData"],
        owned_partitions=_partitions(values.get("ownedPartitions", ())),
        # Kafka's Subscription reads any negative generation as none.
        generation_id=generation if generation >= 0 else None,
        # Kafka's deserializeSubscription reads an empty rack as no rack.
        rack_id=values.get("rackId") or None,
    )


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """Read a version-prefixed ConsumerProtocolAssignment.

    A version above 3 is read as version 3; bytes after the last field are ignored.

    Raises:
        ConsumerProtocolError: as :func:`decode_subscription`.
    """
    values = _decode(CONSUMER_PROTOCOL_ASSIGNMENT, data)
    return Assignment(_partitions(values["assignedPartitions"]), values["userData"])


def _encode(schema: MessageSchema, values: dict[str, Any], version: int) -> bytes:
    if not VERSION_MIN <= version <= VERSION_MAX:
        raise ValueError(
            f"consumer protocol version {version} is not one of {VERSION_MIN}-{VERSION_MAX}"
        )
    return version.to_bytes(_VERSION_BYTES, "big", signed=True) + schema.encode(values, version)


def _decode(schema: MessageSchema, data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The message's fields, by the schema's camelCase names."""
    if isinstance(data, memoryview):
        data = data.cast("B")  # the schema reader indexes bytes
    # As ConsumerProtocol.checkSubscriptionVersion: below the lowest is an error, above the
    # highest is read as the highest (new versions only append fields).
    version = read_version(data)
    if version < VERSION_MIN:
        raise ConsumerProtocolError(f"{schema.name}: unsupported version {version}")
    version = min(version, VERSION_MAX)
    try:
        values, _ = schema.decode(data, version, _VERSION_BYTES)  # trailing bytes: ignored
    except CorruptMessageError as e:
        raise ConsumerProtocolError(
            f"{schema.name} v{version}: {_snake_case(e.field or 'message')}: {e.problem} "
            f"at byte {e.position} of {len(data)}"
        ) from None
    return values


_CAPITAL = re.compile(r"[A-Z]")


def _snake_case(path: str) -> str:
    """A field path in this module's words: ``ownedPartitions[0].partitions`` ->
    ``owned_partitions[0].partitions``."""
    return _CAPITAL.sub(lambda m: "_" + m.group().lower(), path)


def _grouped(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    """Partitions by topic as the schema's TopicPartition entries, topics in first-appearance
    order (dicts keep insertion order)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [{"topic": topic, "partitions": ids} for topic, ids in by_topic.items()]


def _partitions(entries: Iterable[dict[str, Any]]) -> tuple[TopicPartition, ...]:
    return tuple(
        TopicPartition(entry["topic"], partition)
        for entry in entries
        for partition in entry["partitions"]
    )
