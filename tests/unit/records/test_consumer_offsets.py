"""The __consumer_offsets keys and values against an independent parser of Kafka's schemas.

The oracle below is written by hand from Kafka's JSON (group-coordinator/src/main/resources/
common/message/{OffsetCommitKey,OffsetCommitValue,GroupMetadataKey,GroupMetadataValue}.json), one
kafka-python type per field and version: nothing of it comes from records/schemas or from
stratalog.records.message_schema, so a mistake in the schema interpreter shows up as a mismatch.
"""

from __future__ import annotations

import io
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.old.types import (
    Array,
    Bytes,
    CompactArray,
    CompactBytes,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    String,
    TaggedFields,
)

from stratalog.records.consumer_offsets import (
    CONSUMER_PROTOCOL_SUBSCRIPTION,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    OtherRecordKey,
    decode_key,
    decode_offset_commit,
    decode_record,
    decode_value,
    decode_value_fields,
    encode_key,
    encode_value,
    value_schema,
)
from stratalog.records.errors import (
    CorruptMessageError,
    UnknownRecordTypeError,
    UnsupportedMessageVersionError,
)

# --- the oracle: Kafka's schemas, field by field ---------------------------------------------

OFFSET_COMMIT_KEY = Schema(("group", String()), ("topic", String()), ("partition", Int32))
GROUP_METADATA_KEY = Schema(("group", String()))
OFFSET_COMMIT_VALUE = {
    0: Schema(("offset", Int64), ("metadata", String()), ("commitTimestamp", Int64)),
    1: Schema(("offset", Int64), ("metadata", String()), ("commitTimestamp", Int64),
              ("expireTimestamp", Int64)),
    2: Schema(("offset", Int64), ("metadata", String()), ("commitTimestamp", Int64)),
    3: Schema(("offset", Int64), ("leaderEpoch", Int32), ("metadata", String()),
              ("commitTimestamp", Int64)),
    4: Schema(("offset", Int64), ("leaderEpoch", Int32), ("metadata", CompactString()),
              ("commitTimestamp", Int64), ("tags", TaggedFields)),
}


def member_schema(version: int) -> Schema:
    flexible = version >= 4
    text = CompactString() if flexible else String()
    blob = CompactBytes if flexible else Bytes
    fields = [("memberId", text)]
    if version >= 3:
        fields.append(("groupInstanceId", text))
    fields += [("clientId", text), ("clientHost", text)]
    if version >= 1:
        fields.append(("rebalanceTimeout", Int32))
    fields += [("sessionTimeout", Int32), ("subscription", blob), ("assignment", blob)]
    if flexible:
        fields.append(("tags", TaggedFields))
    return Schema(*fields)


def group_value_schema(version: int) -> Schema:
    flexible = version >= 4
    text = CompactString() if flexible else String()
    fields = [("protocolType", text), ("generation", Int32), ("protocol", text), ("leader", text)]
    if version >= 2:
        fields.append(("currentStateTimestamp", Int64))
    members = member_schema(version)
    fields.append(("members", CompactArray(members) if flexible else Array(members)))
    if flexible:
        fields.append(("tags", TaggedFields))
    return Schema(*fields)


def oracle_offset_value(value: OffsetCommitValue, version: int) -> bytes:
    row = {
        "offset": value.offset,
        "leaderEpoch": value.leader_epoch,
        "metadata": value.metadata,
        "commitTimestamp": value.commit_timestamp_ms,
        "expireTimestamp": value.expire_timestamp_ms,
        "tags": {},
    }
    schema = OFFSET_COMMIT_VALUE[version]
    return Int16.encode(version) + schema.encode([row[name] for name in schema.names])


def oracle_group_value(value: GroupMetadataValue, version: int) -> bytes:
    members_schema = member_schema(version)
    members = []
    for m in value.members:
        row = {
            "memberId": m.member_id, "groupInstanceId": m.group_instance_id,
            "clientId": m.client_id, "clientHost": m.client_host,
            "rebalanceTimeout": m.rebalance_timeout_ms, "sessionTimeout": m.session_timeout_ms,
            "subscription": m.subscription, "assignment": m.assignment, "tags": {},
        }
        members.append([row[name] for name in members_schema.names])
    row = {
        "protocolType": value.protocol_type, "generation": value.generation,
        "protocol": value.protocol, "leader": value.leader,
        "currentStateTimestamp": value.current_state_timestamp_ms, "members": members,
        "tags": {},
    }
    schema = group_value_schema(version)
    return Int16.encode(version) + schema.encode([row[name] for name in schema.names])


def oracle_decode_offset_value(data: bytes) -> dict:
    buf = io.BytesIO(data)
    version = Int16.decode(buf)
    schema = OFFSET_COMMIT_VALUE[version]
    return dict(zip(schema.names, schema.decode(buf), strict=False))


# --- strategies -------------------------------------------------------------------------------

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
SHORT_TEXT = st.text(max_size=20)
OFFSET_VALUES = st.builds(
    OffsetCommitValue,
    offset=INT64, metadata=SHORT_TEXT, commit_timestamp_ms=INT64, leader_epoch=INT32,
    expire_timestamp_ms=INT64,
)
MEMBERS = st.builds(
    MemberMetadata,
    member_id=SHORT_TEXT, client_id=SHORT_TEXT, client_host=SHORT_TEXT,
    session_timeout_ms=INT32, subscription=st.binary(max_size=40),
    assignment=st.binary(max_size=40), rebalance_timeout_ms=INT32,
    group_instance_id=st.none() | SHORT_TEXT,
)
GROUP_VALUES = st.builds(
    GroupMetadataValue,
    protocol_type=SHORT_TEXT, generation=INT32, protocol=st.none() | SHORT_TEXT,
    leader=st.none() | SHORT_TEXT, current_state_timestamp_ms=INT64,
    members=st.lists(MEMBERS, max_size=3).map(tuple),
)


def as_read_at(value, version: int):
    """What a reader of ``version`` gets back: the fields the version lacks at their default."""
    if isinstance(value, OffsetCommitValue):
        return OffsetCommitValue(
            offset=value.offset, metadata=value.metadata,
            commit_timestamp_ms=value.commit_timestamp_ms,
            leader_epoch=value.leader_epoch if version >= 3 else -1,
            expire_timestamp_ms=value.expire_timestamp_ms if version == 1 else -1,
        )
    members = tuple(
        MemberMetadata(
            m.member_id, m.client_id, m.client_host, m.session_timeout_ms, m.subscription,
            m.assignment, m.rebalance_timeout_ms if version >= 1 else -1,
            m.group_instance_id if version >= 3 else None,
        )
        for m in value.members
    )
    return GroupMetadataValue(
        value.protocol_type, value.generation, value.protocol, value.leader,
        value.current_state_timestamp_ms if version >= 2 else -1, members,
    )


# --- keys ---------------------------------------------------------------------------------------


def test_worked_example_of_the_module_docstring():
    key = encode_key(OffsetCommitKey("g", "t", 0))
    value = encode_value(OffsetCommitValue(100, "", 1700000000000))
    assert key == bytes.fromhex("0001 000167 000174 00000000")
    assert value == bytes.fromhex("0003 0000000000000064 ffffffff 0000 0000018bcfe56800")


@given(SHORT_TEXT, SHORT_TEXT, INT32)
def test_offset_commit_key_matches_the_oracle(group, topic, partition):
    key = OffsetCommitKey(group, topic, partition)
    data = encode_key(key)
    assert data == Int16.encode(1) + OFFSET_COMMIT_KEY.encode([group, topic, partition])
    assert decode_key(data) == key
    # Type 0, which Kafka before 2.x wrote, has the same fields and decodes to the same key.
    assert decode_key(Int16.encode(0) + data[2:]) == key


@given(SHORT_TEXT)
def test_group_metadata_key_matches_the_oracle(group):
    data = encode_key(GroupMetadataKey(group))
    assert data == Int16.encode(2) + GROUP_METADATA_KEY.encode([group])
    assert decode_key(data) == GroupMetadataKey(group)


@pytest.mark.parametrize(
    ("record_type", "name", "fields"),
    [
        (3, "ConsumerGroupMetadataKey", ["grp"]),
        (4, "ConsumerGroupPartitionMetadataKey", ["grp"]),
        (5, "ConsumerGroupMemberMetadataKey", ["grp", "member-1"]),
        (6, "ConsumerGroupTargetAssignmentMetadataKey", ["grp"]),
        (7, "ConsumerGroupTargetAssignmentMemberKey", ["grp", "member-1"]),
        (8, "ConsumerGroupCurrentMemberAssignmentKey", ["grp", "member-1"]),
        (9, "ShareGroupPartitionMetadataKey", ["grp"]),
        (10, "ShareGroupMemberMetadataKey", ["grp", "member-1"]),
        (11, "ShareGroupMetadataKey", ["grp"]),
        (12, "ShareGroupTargetAssignmentMetadataKey", ["grp"]),
        (13, "ShareGroupTargetAssignmentMemberKey", ["grp", "member-1"]),
        (14, "ShareGroupCurrentMemberAssignmentKey", ["grp", "member-1"]),
        (15, "ShareGroupStatePartitionMetadataKey", ["grp"]),
    ],
)
def test_keys_of_the_newer_record_types_decode_by_name(record_type, name, fields):
    key = Int16.encode(record_type) + b"".join(String().encode(f) for f in fields)
    member = fields[1] if len(fields) > 1 else None
    expected = OtherRecordKey(record_type, name, "grp", member)
    assert decode_key(key) == expected
    record = decode_record(key, b"\x00\x00\x01\x02")
    assert record.key == expected
    assert record.value == b"\x00\x00\x01\x02"  # left undecoded for a classic coordinator
    assert record.value_version == 0
    assert decode_record(key, None).is_tombstone


# --- values -----------------------------------------------------------------------------------


@settings(max_examples=60)
@given(OFFSET_VALUES, st.integers(0, 4))
def test_offset_commit_value_matches_the_oracle_at_every_version(value, version):
    data = encode_value(value, version)
    assert data == oracle_offset_value(value, version)
    assert decode_value(1, data) == (version, as_read_at(value, version))


@settings(max_examples=40)
@given(GROUP_VALUES, st.integers(0, 4))
def test_group_metadata_value_matches_the_oracle_at_every_version(value, version):
    data = encode_value(value, version)
    assert data == oracle_group_value(value, version)
    assert decode_value(2, data) == (version, as_read_at(value, version))


# Golden bytes per version, spaced field by field (written by the oracle above, then pinned).
GOLDEN_OFFSET_VALUE = OffsetCommitValue(100, "m", 1700000000000, leader_epoch=5,
                                        expire_timestamp_ms=1700000000001)
GOLDEN_OFFSET_BYTES = {
    0: "0000 0000000000000064 0001 6d 0000018bcfe56800",
    1: "0001 0000000000000064 0001 6d 0000018bcfe56800 0000018bcfe56801",
    2: "0002 0000000000000064 0001 6d 0000018bcfe56800",
    3: "0003 0000000000000064 00000005 0001 6d 0000018bcfe56800",
    4: "0004 0000000000000064 00000005 02 6d 0000018bcfe56800 00",
}
GOLDEN_GROUP_VALUE = GroupMetadataValue(
    "consumer", 7, "range", "m", 1700000000000,
    (MemberMetadata("m", "c", "h", 45000, b"S", b"A", 300000, "i"),),
)
GOLDEN_GROUP_BYTES = {
    0: "0000 0008 636f6e73756d6572 00000007 0005 72616e6765 0001 6d | 00000001"
       " 0001 6d 0001 63 0001 68 0000afc8 00000001 53 00000001 41",
    1: "0001 0008 636f6e73756d6572 00000007 0005 72616e6765 0001 6d | 00000001"
       " 0001 6d 0001 63 0001 68 000493e0 0000afc8 00000001 53 00000001 41",
    2: "0002 0008 636f6e73756d6572 00000007 0005 72616e6765 0001 6d 0000018bcfe56800 | 00000001"
       " 0001 6d 0001 63 0001 68 000493e0 0000afc8 00000001 53 00000001 41",
    3: "0003 0008 636f6e73756d6572 00000007 0005 72616e6765 0001 6d 0000018bcfe56800 | 00000001"
       " 0001 6d 0001 69 0001 63 0001 68 000493e0 0000afc8 00000001 53 00000001 41",
    4: "0004 09 636f6e73756d6572 00000007 06 72616e6765 02 6d 0000018bcfe56800 | 02"
       " 02 6d 02 69 02 63 02 68 000493e0 0000afc8 02 53 02 41 00 | 00",
}


@pytest.mark.parametrize("version", range(5))
def test_golden_bytes_per_version(version):
    offset_bytes = bytes.fromhex(GOLDEN_OFFSET_BYTES[version])
    assert encode_value(GOLDEN_OFFSET_VALUE, version) == offset_bytes
    assert offset_bytes == oracle_offset_value(GOLDEN_OFFSET_VALUE, version)
    assert decode_value(1, offset_bytes) == (version, as_read_at(GOLDEN_OFFSET_VALUE, version))
    group_bytes = bytes.fromhex(GOLDEN_GROUP_BYTES[version].replace("|", ""))
    assert encode_value(GOLDEN_GROUP_VALUE, version) == group_bytes
    assert group_bytes == oracle_group_value(GOLDEN_GROUP_VALUE, version)
    assert decode_value(2, group_bytes) == (version, as_read_at(GOLDEN_GROUP_VALUE, version))


def test_versions_written_are_kafkas():
    # MetadataVersion.offsetCommitValueVersion: 3, or 1 with an explicit expire timestamp.
    plain = encode_value(OffsetCommitValue(5, "m", 10, leader_epoch=2))
    assert plain[:2] == b"\x00\x03"
    assert oracle_decode_offset_value(plain) == {
        "offset": 5, "leaderEpoch": 2, "metadata": "m", "commitTimestamp": 10,
    }
    expiring = encode_value(OffsetCommitValue(5, "m", 10, leader_epoch=2, expire_timestamp_ms=99))
    assert expiring[:2] == b"\x00\x01"
    assert oracle_decode_offset_value(expiring) == {
        "offset": 5, "metadata": "m", "commitTimestamp": 10, "expireTimestamp": 99,
    }
    # groupMetadataValueVersion: 3.
    group = GroupMetadataValue("", 0, None, None, 123)
    assert encode_value(group)[:2] == b"\x00\x03"


def test_empty_group_as_kafka_writes_it():
    # GroupCoordinatorRecordHelpers.newEmptyGroupMetadataRecord: protocol type "", generation 0,
    # protocol and leader null, no members.
    data = encode_value(GroupMetadataValue("", 0, None, None, 1700000000000))
    assert data == bytes.fromhex("0003 0000 00000000 ffff ffff 0000018bcfe56800 00000000")


def test_tombstones():
    key = encode_key(OffsetCommitKey("g", "t", 3))
    assert encode_value(None) is None
    record = decode_record(key, None)
    assert record.is_tombstone
    assert record.key == OffsetCommitKey("g", "t", 3)
    assert record.value_version is None
    assert decode_record(encode_key(GroupMetadataKey("g")), None).is_tombstone


def test_flexible_version_skips_unknown_tagged_fields():
    # Version 4 with a tagged field of a newer writer (tag 7, 3 bytes): read past, as Java does.
    base = bytes.fromhex("0004 0000000000000001 ffffffff 01 0000000000000002")
    data = base + bytes.fromhex("01 07 03 aabbcc")
    assert decode_value(1, data) == (4, OffsetCommitValue(1, "", 2))


def test_embedded_consumer_protocol_schema_reads_kafka_clients_bytes():
    # ConsumerProtocol.serializeSubscription(new Subscription(["foo"], null, [foo-0], 0, "rack"))
    # as kafka-python's oracle types write the v3 layout.
    oracle = Int16.encode(3) + Schema(
        ("topics", Array(String())), ("userData", Bytes),
        ("owned", Array(Schema(("topic", String()), ("partitions", Array(Int32))))),
        ("generationId", Int32), ("rackId", String()),
    ).encode([["foo"], None, [["foo", [0]]], 0, "rack"])
    values, _ = CONSUMER_PROTOCOL_SUBSCRIPTION.decode(oracle, 3, 2)
    assert values == {
        "topics": ["foo"], "userData": None,
        "ownedPartitions": [{"topic": "foo", "partitions": [0]}],
        "generationId": 0, "rackId": "rack",
    }


# --- malformed input ------------------------------------------------------------------------


GOOD_KEY = encode_key(OffsetCommitKey("group", "topic", 7))
GOOD_VALUES = [
    encode_value(OffsetCommitValue(1, "meta", 2), version) for version in range(5)
] + [
    encode_value(
        GroupMetadataValue("consumer", 3, "range", "m", 4,
                           (MemberMetadata("m", "c", "h", 5, b"sub", b"asg", 6, "i"),)),
        version,
    )
    for version in range(5)
]


@pytest.mark.parametrize("cut", range(len(GOOD_KEY)))
def test_every_truncated_key_is_a_corrupt_message(cut):
    with pytest.raises(CorruptMessageError) as info:
        decode_record(GOOD_KEY[:cut], None)
    assert "position" in str(info.value)


@pytest.mark.parametrize("value", GOOD_VALUES)
def test_every_truncated_value_is_a_corrupt_message(value):
    record_type = 2 if b"consumer" in value else 1
    for cut in range(len(value)):
        with pytest.raises(CorruptMessageError, match="position"):
            decode_value(record_type, value[:cut])


def test_error_messages_name_the_field_and_position():
    value = encode_value(OffsetCommitValue(1, "meta", 2))
    with pytest.raises(CorruptMessageError) as info:
        decode_value(1, value[:16])  # inside metadata: 2 + 8 + 4 + 2 bytes of length, no text
    assert str(info.value) == (
        "OffsetCommitValue: metadata at position 16: needs 4 bytes, 0 left"
    )
    assert info.value.message == "OffsetCommitValue"
    assert info.value.position == 16
    assert (info.value.field, info.value.problem) == ("metadata", "needs 4 bytes, 0 left")


@pytest.mark.parametrize("record_type", [-1, 16, 32767])
def test_unknown_record_types(record_type):
    key = struct.pack(">h", record_type) + String().encode("g")
    with pytest.raises(UnknownRecordTypeError) as info:
        decode_record(key, None)
    assert info.value.record_type == record_type
    assert f"unknown __consumer_offsets record type {record_type}" in str(info.value)


@pytest.mark.parametrize(("record_type", "version"), [(1, 5), (1, -1), (2, 5), (2, 32767)])
def test_unknown_value_versions(record_type, version):
    data = struct.pack(">h", version) + bytes(40)
    with pytest.raises(UnsupportedMessageVersionError) as info:
        decode_value(record_type, data)
    assert info.value.version == version
    assert f"Can't read version {version} of " in str(info.value)


def test_missing_key_and_short_prefixes():
    with pytest.raises(CorruptMessageError, match="must have a key"):
        decode_record(None, None)
    with pytest.raises(CorruptMessageError, match="0 bytes: too short"):
        decode_record(b"", None)
    with pytest.raises(CorruptMessageError, match="1 bytes: too short"):
        decode_value(1, b"\x00")


def test_null_in_a_non_nullable_field():
    key = Int16.encode(1) + Int16.encode(-1) + String().encode("t") + Int32.encode(0)
    with pytest.raises(CorruptMessageError, match="group at position 2: length -1 for a string that cannot be null"):
        decode_key(key)


def test_string_that_is_not_utf8():
    key = Int16.encode(2) + Int16.encode(2) + b"\xff\xfe"
    with pytest.raises(CorruptMessageError, match="not UTF-8"):
        decode_key(key)


def test_array_count_beyond_the_bytes_is_refused_before_allocating():
    value = Int16.encode(3) + String().encode("consumer") + Int32.encode(1) + \
        Int16.encode(-1) + Int16.encode(-1) + Int64.encode(0) + Int32.encode(2**31 - 1)
    with pytest.raises(CorruptMessageError, match="members at position 28: count 2147483647 needs at least"):
        decode_value(2, value)


def test_tagged_field_whose_size_does_not_match_its_content():
    # OffsetCommitValue v4 declares no tagged field; ConsumerGroupMemberMetadataValue does (tag 0:
    # ClassicMemberMetadata), whose declared size must be what its struct reads.
    schema = value_schema(5)
    member = {"clientId": "c", "clientHost": "h", "subscribedTopicNames": ["t"]}
    classic = {"sessionTimeoutMs": 5, "supportedProtocols": [{"name": "range", "metadata": b""}]}
    plain = schema.encode(member, 0)
    tagged = schema.encode({**member, "classicMemberMetadata": classic}, 0)
    assert plain[-1] == 0 and tagged[: len(plain) - 1] == plain[:-1]
    section = tagged[len(plain) - 1 :]  # count 1, tag 0, size, then the field
    assert section[:2] == b"\x01\x00" and section[2] == len(section) - 3
    assert decode_value_fields(5, b"\x00\x00" + tagged)[1]["classicMemberMetadata"] == {
        **classic, "supportedProtocols": [{"name": "range", "metadata": b""}]
    }
    longer = plain[:-1] + section[:2] + bytes([section[2] + 1]) + section[3:] + b"\x00"
    with pytest.raises(CorruptMessageError, match=r"classicMemberMetadata at position \d+: tagged"):
        decode_value_fields(5, b"\x00\x00" + longer)
    shorter = plain[:-1] + section[:2] + bytes([section[2] - 1]) + section[3:]
    with pytest.raises(CorruptMessageError, match="classicMemberMetadata"):
        decode_value_fields(5, b"\x00\x00" + shorter)


@settings(max_examples=300)
@given(st.binary(max_size=64), st.none() | st.binary(max_size=64))
def test_random_bytes_decode_or_raise_a_corrupt_message(key, value):
    try:
        record = decode_record(key, value)
    except CorruptMessageError as exc:
        assert exc.message and str(exc)
    else:
        assert record.record_type in range(16)
        assert record.is_tombstone == (value is None)


@settings(max_examples=200)
@given(st.sampled_from(GOOD_VALUES), st.data())
def test_flipped_bytes_decode_or_raise_a_corrupt_message(value, data):
    position = data.draw(st.integers(0, len(value) - 1))
    damaged = bytearray(value)
    damaged[position] ^= data.draw(st.integers(1, 255))
    record_type = 2 if b"consumer" in value else 1
    try:
        version, decoded = decode_value(record_type, bytes(damaged))
    except CorruptMessageError as exc:
        assert exc.message in ("OffsetCommitValue", "GroupMetadataValue")
    else:
        assert version in range(5)
        assert isinstance(decoded, OffsetCommitValue | GroupMetadataValue)


def test_encoding_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="over 32767"):
        encode_key(OffsetCommitKey("g" * 40000, "t", 0))
    with pytest.raises(ValueError, match="Can't write version 5"):
        encode_value(OffsetCommitValue(1), 5)
    with pytest.raises(ValueError, match="partition"):
        encode_key(OffsetCommitKey("g", "t", 2**31))


def test_the_python_example_of_docs_groups_md_runs():
    text = (Path(__file__).resolve().parents[3] / "docs" / "groups.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/groups.md", "exec"), {})


@given(OFFSET_VALUES, st.sampled_from(range(5)), st.booleans())
def test_the_flat_offset_commit_fields_are_decode_records(value, version, tombstone):
    key = encode_key(OffsetCommitKey("group", "topic", 3))
    data = None if tombstone else encode_value(value, version)
    record = decode_record(key, data)
    flat = decode_offset_commit(key, data)
    assert flat[:3] == (record.key.group, record.key.topic, record.key.partition)
    if tombstone:
        assert len(flat) == 3
    else:
        v = record.value
        assert flat[3:] == (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms,
                            v.expire_timestamp_ms)


def test_the_flat_offset_commit_fields_of_other_keys_and_bad_bytes():
    assert decode_offset_commit(encode_key(GroupMetadataKey("g")), None) is None
    with pytest.raises(UnknownRecordTypeError):
        decode_offset_commit(struct.pack(">h", 16), None)
    key = encode_key(OffsetCommitKey("group", "topic", 3))
    for cut in range(len(key)):
        with pytest.raises(CorruptMessageError):
            decode_offset_commit(key[:cut], None)
    with pytest.raises(UnsupportedMessageVersionError):
        decode_offset_commit(key, struct.pack(">h", 5) + bytes(30))


@given(st.lists(st.tuples(st.sampled_from(["g", "group-2", "ü"]), st.sampled_from(["t", "topic"]),
                          st.one_of(st.integers(0, 600), st.sampled_from([-1, 2**31 - 1])),
                          st.sampled_from(["whole", "cut", "longer"])),
                max_size=30))
def test_the_memo_of_names_changes_no_answer(keys):
    # decode_offset_commit with one memo over many keys (as a load's stretch keeps it) answers
    # exactly as without it: keys that differ only by partition, a key cut short, and a key
    # with a byte after its partition (read as the reader reads it, never remembered) among
    # them.
    names: dict[bytes, tuple[str, str]] = {}
    value = encode_value(OffsetCommitValue(7))
    for group, topic, partition, shape in keys:
        key = encode_key(OffsetCommitKey(group, topic, partition))
        key = {"whole": key, "cut": key[:-1], "longer": key + b"\x00"}[shape]
        try:
            expected: object = decode_offset_commit(key, value)
        except CorruptMessageError as exc:
            expected = type(exc)
        try:
            got: object = decode_offset_commit(key, value, names)
        except CorruptMessageError as exc:
            got = type(exc)
        assert got == expected
    assert all(len(prefix) + 4 == len(encode_key(OffsetCommitKey(*names[prefix], 0)))
               for prefix in names)
