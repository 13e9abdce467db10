"""The consumer protocol's bytes: what a Kafka consumer puts in JoinGroup and gets from SyncGroup.

Kafka's group protocol carries two opaque byte strings per member: the *metadata* a member sends
in JoinGroup (for protocol type ``"consumer"``: a ConsumerProtocolSubscription) and the
*assignment* the leader computes and the coordinator hands back in SyncGroup (a
ConsumerProtocolAssignment). The coordinator never reads them; the members do, so every member of
a group must write them as Kafka's clients do, or a Java consumer and a Python one cannot share a
group. Schemas: ``clients/src/main/resources/common/message/ConsumerProtocolSubscription.json``
and ``ConsumerProtocolAssignment.json``; the framing and the version rules:
``clients/src/main/java/org/apache/kafka/clients/consumer/internals/ConsumerProtocol.java``.

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
and the byte position. Counts and lengths are checked against the bytes left before anything is
allocated, so a corrupt count cannot make the decoder build a huge list.

No I/O, no state: pure functions of bytes and values, safe from any thread or task.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import grpc

from stratalog.client.errors import StratalogError
from stratalog.client.types import TopicPartition

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
VERSION_MIN = 0
VERSION_MAX = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
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
    _check_encode_version(version)
    out = bytearray(_INT16.pack(version))
    _write_array_count(out, len(subscription.topics), "topics")
    for topic in sorted(subscription.topics):
        _write_string(out, topic, "topics")
    _write_bytes(out, subscription.user_data)
    if version >= 1:
        _write_topic_partitions(out, _grouped(sorted(subscription.owned_partitions)))
    if version >= 2:
        generation = _NO_GENERATION if subscription.generation_id is None else subscription.generation_id
        out += _INT32.pack(generation)
    if version >= 3:
        _write_nullable_string(out, subscription.rack_id, "rack_id")
    return bytes(out)


def encode_assignment(assignment: Assignment, version: int = VERSION_MAX) -> bytes:
    """The version-prefixed bytes of ``assignment`` at ``version`` (0-3), as Kafka writes them.

    Partitions are grouped by topic, the topics in the order they first appear and each topic's
    partitions in the order given (ConsumerProtocol.serializeAssignment). Versions 0-3 share one
    layout; the version is written because readers check it.

    Raises:
        ValueError: ``version`` outside 0-3, or a string or list too long for its length field.
    """
    _check_encode_version(version)
    out = bytearray(_INT16.pack(version))
    _write_topic_partitions(out, _grouped(assignment.partitions))
    _write_bytes(out, assignment.user_data)
    return bytes(out)


def read_version(data: bytes | bytearray | memoryview) -> int:
    """The version prefix of a subscription or an assignment (ConsumerProtocol.deserializeVersion).

    Raises:
        ConsumerProtocolError: fewer than 2 bytes.
    """
    if len(data) < _INT16.size:
        raise ConsumerProtocolError(
            f"consumer protocol header: needs 2 bytes for the version, got {len(data)}"
        )
    return _INT16.unpack_from(data, 0)[0]


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """Read a version-prefixed ConsumerProtocolSubscription.

    A version above 3 is read as version 3; bytes after the last field are ignored.

    Raises:
        ConsumerProtocolError: a negative version, or bytes that end inside a field, a negative
            length or count where the schema has no null, or a string that is not UTF-8.
    """
    version = _check_decode_version(read_version(data), "ConsumerProtocolSubscription")
    reader = _Reader(data, f"ConsumerProtocolSubscription v{version}")
    topics = tuple(
        reader.string(f"topics[{i}]") for i in range(reader.count("topics", _STRING_SIZE_MIN))
    )
    user_data = reader.nullable_bytes("user_data")
    owned: tuple[TopicPartition, ...] = ()
    generation_id = None
    rack_id = None
    if version >= 1:
        owned = reader.topic_partitions("owned_partitions")
    if version >= 2:
        generation = reader.int32("generation_id")
        generation_id = generation if generation >= 0 else None
    if version >= 3:
        # Kafka's deserializeSubscription reads an empty rack as no rack.
        rack_id = reader.nullable_string("rack_id") or None
    return Subscription(topics, user_data, owned, generation_id, rack_id)


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """Read a version-prefixed ConsumerProtocolAssignment.

    A version above 3 is read as version 3; bytes after the last field are ignored.

    Raises:
        ConsumerProtocolError: as :func:`decode_subscription`.
    """
    version = _check_decode_version(read_version(data), "ConsumerProtocolAssignment")
    reader = _Reader(data, f"ConsumerProtocolAssignment v{version}")
    partitions = reader.topic_partitions("assigned_partitions")
    user_data = reader.nullable_bytes("user_data")
    return Assignment(partitions, user_data)


# The fewest bytes one element can take, to refuse a count the bytes left cannot hold.
_STRING_SIZE_MIN = _INT16.size
_TOPIC_PARTITIONS_SIZE_MIN = _INT16.size + _INT32.size


class _Reader:
    """A cursor over one message's bytes; every failure names the message, field and position."""

    __slots__ = ("_data", "_message", "_position")

    def __init__(self, data: bytes | bytearray | memoryview, message: str) -> None:
        self._data = memoryview(data).cast("B") if isinstance(data, memoryview) else data
        self._message = message
        self._position = _INT16.size  # past the version prefix

    def _fail(self, field: str, problem: str) -> ConsumerProtocolError:
        return ConsumerProtocolError(
            f"{self._message}: {field}: {problem} at byte {self._position} "
            f"of {len(self._data)}"
        )

    def _take(self, size: int, field: str) -> int:
        """Advance by ``size`` bytes and return where they start."""
        start = self._position
        if start + size > len(self._data):
            raise self._fail(field, f"needs {size} bytes, {len(self._data) - start} left")
        self._position = start + size
        return start

    def int16(self, field: str) -> int:
        return _INT16.unpack_from(self._data, self._take(_INT16.size, field))[0]

    def int32(self, field: str) -> int:
        return _INT32.unpack_from(self._data, self._take(_INT32.size, field))[0]

    def count(self, field: str, element_size_min: int) -> int:
        """An array's count, refused if negative or more than the bytes left can hold."""
        count = self.int32(field)
        if count < 0:
            self._position -= _INT32.size
            raise self._fail(field, f"count {count} for an array that cannot be null")
        left = len(self._data) - self._position
        if count * element_size_min > left:
            self._position -= _INT32.size
            raise self._fail(
                field, f"count {count} needs at least {count * element_size_min} bytes, {left} left"
            )
        return count

    def _utf8(self, size: int, field: str) -> str:
        start = self._take(size, field)
        try:
            return bytes(self._data[start : start + size]).decode("utf-8")
        except UnicodeDecodeError as e:
            self._position = start
            raise self._fail(field, f"{size} bytes that are not UTF-8 ({e.reason})") from None

    def string(self, field: str) -> str:
        size = self.int16(field)
        if size < 0:
            self._position -= _INT16.size
            raise self._fail(field, f"length {size} for a string that cannot be null")
        return self._utf8(size, field)

    def nullable_string(self, field: str) -> str | None:
        size = self.int16(field)
        if size == -1:
            return None
        if size < 0:
            self._position -= _INT16.size
            raise self._fail(field, f"string length {size}")
        return self._utf8(size, field)

    def nullable_bytes(self, field: str) -> bytes | None:
        size = self.int32(field)
        if size == -1:
            return None
        if size < 0:
            self._position -= _INT32.size
            raise self._fail(field, f"bytes length {size}")
        start = self._take(size, field)
        return bytes(self._data[start : start + size])

    def topic_partitions(self, field: str) -> tuple[TopicPartition, ...]:
        partitions: list[TopicPartition] = []
        for i in range(self.count(field, _TOPIC_PARTITIONS_SIZE_MIN)):
            topic = self.string(f"{field}[{i}].topic")
            name = f"{field}[{i}].partitions"
            for j in range(self.count(name, _INT32.size)):
                partitions.append(TopicPartition(topic, self.int32(f"{name}[{j}]")))
        return tuple(partitions)


def _check_encode_version(version: int) -> None:
    if not VERSION_MIN <= version <= VERSION_MAX:
        raise ValueError(f"consumer protocol version {version} is not one of {VERSION_MIN}-{VERSION_MAX}")


def _check_decode_version(version: int, message: str) -> int:
    # As ConsumerProtocol.checkSubscriptionVersion: below the lowest is an error, above the
    # highest is read as the highest (new versions only append fields).
    if version < VERSION_MIN:
        raise ConsumerProtocolError(f"{message}: unsupported version {version}")
    return min(version, VERSION_MAX)


def _grouped(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions by topic, topics in first-appearance order (dicts keep insertion order)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def _write_array_count(out: bytearray, count: int, field: str) -> None:
    if count > 0x7FFFFFFF:
        raise ValueError(f"{field}: {count} elements do not fit an int32 count")
    out += _INT32.pack(count)


def _write_string(out: bytearray, text: str, field: str) -> None:
    encoded = text.encode("utf-8")
    if len(encoded) > 0x7FFF:
        raise ValueError(f"{field}: a string of {len(encoded)} bytes does not fit an int16 length")
    out += _INT16.pack(len(encoded))
    out += encoded


def _write_nullable_string(out: bytearray, text: str | None, field: str) -> None:
    if text is None:
        out += _INT16.pack(-1)
    else:
        _write_string(out, text, field)


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _INT32.pack(-1)
    else:
        out += _INT32.pack(len(data))
        out += data


def _write_topic_partitions(out: bytearray, by_topic: dict[str, list[int]]) -> None:
    _write_array_count(out, len(by_topic), "partitions")
    for topic, partitions in by_topic.items():
        _write_string(out, topic, "topic")
        _write_array_count(out, len(partitions), topic)
        for partition in partitions:
            out += _INT32.pack(partition)
