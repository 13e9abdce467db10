"""client/groups/consumer_protocol.py: Kafka's ConsumerProtocolSubscription and Assignment bytes.

Checked three ways: golden bytes written out by hand from the schemas (the module docstring's
worked example among them), a round trip over generated values at every version, and the bytes
of kafka-python's schema-driven implementation (``kafka.protocol.consumer.metadata``, written from
the same JSON schemas, versions 0-3) in both directions. Then the malformed inputs, each refused
with an error naming the field.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as KafkaAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as KafkaSubscription,
)

from stratalog.client.errors import StratalogError
from stratalog.client.groups.consumer_protocol import (
    VERSION_MAX,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    read_version,
)
from stratalog.client.types import TopicPartition as TP

VERSIONS = range(VERSION_MAX + 1)

names = st.text(min_size=0, max_size=12)
partition_ids = st.integers(min_value=0, max_value=2**31 - 1)
subscriptions = st.builds(
    Subscription,
    topics=st.lists(names, max_size=5, unique=True).map(lambda t: tuple(sorted(t))),
    user_data=st.none() | st.binary(max_size=20),
    owned_partitions=st.lists(st.tuples(names, partition_ids).map(lambda p: TP(*p)), max_size=8,
                              unique=True).map(lambda ps: tuple(sorted(ps))),
    generation_id=st.none() | st.integers(min_value=0, max_value=2**31 - 1),
    rack_id=st.none() | st.text(min_size=1, max_size=8),
)


def grouped_in_order(parts: list[TP]) -> tuple[TP, ...]:
    """The order an assignment reads back in: grouped by topic, topics by first appearance."""
    order: dict[str, list[TP]] = {}
    for tp in parts:
        order.setdefault(tp.topic, []).append(tp)
    return tuple(tp for group in order.values() for tp in group)


assignments = st.builds(
    Assignment,
    partitions=st.lists(st.tuples(names, partition_ids).map(lambda p: TP(*p)), max_size=8,
                        unique=True).map(grouped_in_order),
    user_data=st.none() | st.binary(max_size=20),
)


def at_version(sub: Subscription, version: int) -> Subscription:
    """What survives encoding at ``version``: the fields it lacks read back as their defaults."""
    return Subscription(
        sub.topics,
        sub.user_data,
        sub.owned_partitions if version >= 1 else (),
        sub.generation_id if version >= 2 else None,
        sub.rack_id if version >= 3 else None,
    )


# -- golden bytes ------------------------------------------------------------------------------


def test_the_docstring_example_version_1():
    sub = Subscription(("b", "a"), b"xy", (TP("a", 1), TP("a", 0)))
    assert encode_subscription(sub, 1) == bytes.fromhex(
        "0001" "00000002" "000161" "000162" "00000002" "7879"
        "00000001" "000161" "00000002" "00000000" "00000001"
    )


def test_subscription_version_3_appends_generation_and_rack():
    sub = Subscription(("t",), None, (), 7, "r1")
    assert encode_subscription(sub) == bytes.fromhex(
        "0003" "00000001" "000174" "ffffffff" "00000000" "00000007" "0002" "7231"
    )


def test_assignment_groups_partitions_by_topic_in_first_appearance_order():
    a = Assignment((TP("b", 2), TP("a", 0), TP("b", 1)))
    assert encode_assignment(a, 0) == bytes.fromhex(
        "0000" "00000002" "000162" "00000002" "00000002" "00000001"
        "000161" "00000001" "00000000" "ffffffff"
    )
    assert decode_assignment(encode_assignment(a)).partitions == (TP("b", 2), TP("b", 1), TP("a", 0))


def test_encoding_at_a_lower_version_drops_the_fields_it_lacks():
    sub = Subscription(("t",), b"u", (TP("t", 0),), 4, "rack")
    assert decode_subscription(encode_subscription(sub, 0)) == Subscription(("t",), b"u")
    assert decode_subscription(encode_subscription(sub, 2)) == Subscription(("t",), b"u", (TP("t", 0),), 4)


def test_generation_minus_one_and_empty_rack_read_as_none():
    raw = bytes.fromhex("0003" "00000000" "ffffffff" "00000000" "ffffffff" "0000")
    assert decode_subscription(raw) == Subscription(())


# -- round trips and the oracle -----------------------------------------------------------------


@given(subscriptions, st.sampled_from(VERSIONS))
def test_subscription_round_trip(sub, version):
    data = encode_subscription(sub, version)
    assert read_version(data) == version
    assert decode_subscription(data) == at_version(sub, version)


@given(assignments, st.sampled_from(VERSIONS))
def test_assignment_round_trip(a, version):
    assert decode_assignment(encode_assignment(a, version)) == a


def kafka_subscription(sub: Subscription, version: int) -> KafkaSubscription:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(sub.owned_partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return KafkaSubscription(
        version=version,
        topics=sorted(sub.topics),
        user_data=sub.user_data,
        owned_partitions=[KafkaSubscription.TopicPartition(topic=t, partitions=p)
                          for t, p in by_topic.items()],
        generation_id=-1 if sub.generation_id is None else sub.generation_id,
        rack_id=sub.rack_id,
    )


@given(subscriptions, st.sampled_from(VERSIONS))
def test_subscription_bytes_equal_kafka_pythons(sub, version):
    ours = encode_subscription(sub, version)
    assert ours == kafka_subscription(sub, version).encode()
    theirs = KafkaSubscription.decode(ours)
    assert list(theirs.topics) == sorted(sub.topics)
    assert theirs.user_data == sub.user_data


@given(subscriptions, st.sampled_from(VERSIONS))
def test_kafka_pythons_subscription_bytes_decode_to_the_same_values(sub, version):
    assert decode_subscription(kafka_subscription(sub, version).encode()) == at_version(sub, version)


@given(assignments, st.sampled_from(VERSIONS))
def test_assignment_bytes_equal_kafka_pythons(a, version):
    by_topic: dict[str, list[int]] = {}
    for tp in a.partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    theirs = KafkaAssignment(
        version=version,
        assigned_partitions=[KafkaAssignment.TopicPartition(topic=t, partitions=p)
                             for t, p in by_topic.items()],
        user_data=a.user_data,
    )
    assert encode_assignment(a, version) == theirs.encode()
    assert decode_assignment(theirs.encode()) == a
    assert KafkaAssignment.decode(encode_assignment(a, version)).partitions() == list(a.partitions)


# -- versions and malformed bytes ---------------------------------------------------------------


def test_a_newer_version_is_read_with_the_newest_layout_and_trailing_bytes_are_ignored():
    v3 = encode_subscription(Subscription(("t",), None, (TP("t", 1),), 5, "r"))
    v9 = struct.pack(">h", 9) + v3[2:] + b"fields of version 9"
    assert decode_subscription(v9) == Subscription(("t",), None, (TP("t", 1),), 5, "r")
    a = encode_assignment(Assignment((TP("t", 0),)), 0) + b"\x00\x01"
    assert decode_assignment(a) == Assignment((TP("t", 0),))


def test_negative_version_is_refused():
    with pytest.raises(ConsumerProtocolError, match="unsupported version -1"):
        decode_subscription(b"\xff\xff")
    with pytest.raises(ConsumerProtocolError, match="unsupported version -2"):
        decode_assignment(b"\xff\xfe" + bytes(8))


def test_encoding_an_unknown_version_is_a_programmer_error():
    with pytest.raises(ValueError, match="version 4"):
        encode_subscription(Subscription(()), 4)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", r"needs 2 bytes for the version, got 0"),
        (b"\x00", r"needs 2 bytes for the version, got 1"),
        (bytes.fromhex("0000 0000"), r"v0: topics: needs 4 bytes, 2 left at byte 2 of 4"),
        (bytes.fromhex("0000 ffffffff"), r"topics: count -1 for an array that cannot be null"),
        (bytes.fromhex("0000 7fffffff"), r"topics: count 2147483647 needs at least"),
        (bytes.fromhex("0000 00000001 0005 6162"), r"topics\[0\]: needs 5 bytes, 2 left at byte 8"),
        (bytes.fromhex("0000 00000001 ffff"), r"topics\[0\]: length -1 for a string that cannot"),
        (bytes.fromhex("0000 00000001 0001 ff 00000000"), r"topics\[0\]: 1 bytes that are not UTF-8"),
        (bytes.fromhex("0000 00000000 fffffffe"), r"user_data: bytes length -2 at byte 6"),
        (bytes.fromhex("0000 00000000 00000009 00"), r"user_data: needs 9 bytes, 1 left"),
        (bytes.fromhex("0001 00000000 ffffffff 00000001 000161 00000002 00000000"),
         r"v1: owned_partitions\[0\].partitions: count 2 needs at least 8 bytes, 4 left"),
        (bytes.fromhex("0002 00000000 ffffffff 00000000 0000"), r"v2: generation_id: needs 4 bytes"),
        (bytes.fromhex("0003 00000000 ffffffff 00000000 ffffffff fffe"), r"rack_id: string length -2"),
    ],
)
def test_malformed_subscription(data, problem):
    with pytest.raises(ConsumerProtocolError, match=problem) as raised:
        decode_subscription(data)
    assert isinstance(raised.value, StratalogError)
    assert not raised.value.retriable


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (bytes.fromhex("0000 00000001 000161 00000001 0000"),
         r"^ConsumerProtocolAssignment v0: assigned_partitions\[0\].partitions: count 1 needs at "
         r"least 4 bytes, 2 left at byte 9 of 15$"),
        (bytes.fromhex("0000 00000000"), r"user_data: needs 4 bytes, 0 left at byte 6 of 6"),
    ],
)
def test_malformed_assignment(data, problem):
    with pytest.raises(ConsumerProtocolError, match=problem):
        decode_assignment(data)


@given(subscriptions, st.sampled_from(VERSIONS), st.data())
def test_every_truncation_raises_the_protocol_error_never_another(sub, version, data):
    encoded = encode_subscription(sub, version)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(encoded[:cut])


@given(st.binary(max_size=60))
def test_arbitrary_bytes_decode_or_raise_the_protocol_error(data):
    """Whatever decodes is a value that encodes and decodes back to itself: nothing half-read."""
    for decode, encode in ((decode_subscription, encode_subscription),
                           (decode_assignment, encode_assignment)):
        try:
            value = decode(data)
        except ConsumerProtocolError:
            continue
        version = min(read_version(data), VERSION_MAX)
        assert decode(encode(value, version)) == value


def test_memoryview_input():
    data = encode_assignment(Assignment((TP("t", 3),), b"u"))
    assert decode_assignment(memoryview(data)) == Assignment((TP("t", 3),), b"u")


def test_the_bytes_are_the_schema_readers():
    """One codec: what this module writes is what records/message_schema writes from Kafka's
    JSON (behind the int16 version), and its errors are the schema reader's, reworded."""
    from stratalog.records.consumer_offsets import CONSUMER_PROTOCOL_SUBSCRIPTION

    sub = Subscription(("t",), b"u", (TP("t", 2),), 4, "r")
    values = {"topics": ["t"], "userData": b"u",
              "ownedPartitions": [{"topic": "t", "partitions": [2]}],
              "generationId": 4, "rackId": "r"}
    assert encode_subscription(sub) == b"\x00\x03" + CONSUMER_PROTOCOL_SUBSCRIPTION.encode(values, 3)
    damaged = bytes.fromhex("0001 00000000 ffffffff 00000001 0001")
    with pytest.raises(ConsumerProtocolError) as raised:
        decode_subscription(damaged)
    assert str(raised.value) == (
        "ConsumerProtocolSubscription v1: owned_partitions: count 1 needs at least 6 bytes, "
        "2 left at byte 10 of 16"
    )
