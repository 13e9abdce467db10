"""message_schema: every copied schema, every version, against kafka-python's schema interpreter.

kafka-python 3 reads Kafka's message JSON with its own, independently written interpreter
(``kafka.protocol.api_data.ApiData``). Loading our copies of the schemas into it gives a second
codec for every ``__consumer_offsets`` key and value, including the flexible ones with tagged
fields (ConsumerGroup*, ShareGroup*): bytes we write must read back field for field there, and
its re-encoding must be our bytes.
"""

from __future__ import annotations

import importlib
import re
import shutil
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_data import ApiData
from kafka.protocol.data_container import DataContainer

from stratalog.records import consumer_offsets
from stratalog.records.errors import CorruptMessageError, UnsupportedMessageVersionError
from stratalog.records.message_schema import (
    FieldSpec,
    MessageSchema,
    StructSpec,
    Versions,
    jackson_json,
)

SCHEMA_DIR = Path(consumer_offsets.__file__).parent / "schemas"
SCHEMA_NAMES = sorted(p.stem for p in SCHEMA_DIR.glob("*.json"))


@pytest.fixture(scope="module")
def oracle_package(tmp_path_factory):
    """Our schema files as an importable package, which kafka-python's loader wants."""
    root = tmp_path_factory.mktemp("oracle")
    package = root / "stratalog_oracle_schemas"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for path in SCHEMA_DIR.glob("*.json"):
        shutil.copy(path, package / path.name)
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("stratalog_oracle_schemas")
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("stratalog_oracle_schemas", None)


def snake(name: str) -> str:
    return re.sub(r"([A-Z])", r"_\1", name).lower()


def oracle_values(obj, version: int) -> dict:
    """A kafka-python object as our dicts: snake_case names, the version's fields only."""
    out = {}
    for field in obj._struct._fields:
        if field.for_version_q(version):
            value = getattr(obj, field.name)
            if field.type_str == "uuid" and value is None:
                value = bytes(16)  # kafka-python reads Uuid.ZERO_UUID as None
            out[field.name] = plain(value, version)
    return out


def plain(value, version: int):
    if isinstance(value, DataContainer):
        return oracle_values(value, version)
    if isinstance(value, list):
        return [plain(v, version) for v in value]
    if isinstance(value, uuid.UUID):
        return value.bytes
    return value


def ours_snake(value):
    if isinstance(value, dict):
        return {snake(k): ours_snake(v) for k, v in value.items()}
    if isinstance(value, list):
        return [ours_snake(v) for v in value]
    return value


_RANGES = {"int8": 7, "int16": 15, "uint16": None, "int32": 31, "int64": 63}


def values_of(spec: StructSpec, version: int) -> st.SearchStrategy[dict]:
    """Random values for every field of ``spec`` that ``version`` has."""
    fields = {f.name: value_of(f, version) for f in spec.fields if version in f.versions}
    return st.fixed_dictionaries(fields)


def value_of(field: FieldSpec, version: int) -> st.SearchStrategy:
    if field.element is not None:
        item = (values_of(field.struct, version) if field.struct is not None
                else scalar(field.element))
        inner = st.lists(item, max_size=3)
    elif field.struct is not None:
        inner = values_of(field.struct, version)
    else:
        inner = scalar(field.type)
    return st.none() | inner if field.nullable(version) else inner


def scalar(type_name: str) -> st.SearchStrategy:
    if type_name == "string":
        return st.text(max_size=12)
    if type_name == "bytes":
        return st.binary(max_size=12)
    if type_name == "uuid":
        return st.binary(min_size=16, max_size=16)
    if type_name == "bool":
        return st.booleans()
    bits = _RANGES[type_name]
    if bits is None:
        return st.integers(0, 2**16 - 1)
    return st.integers(-(2**bits), 2**bits - 1)


CASES = [
    (name, version)
    for name in SCHEMA_NAMES
    for version in range(
        consumer_offsets.load_schema(name).valid_versions.low,
        consumer_offsets.load_schema(name).valid_versions.high + 1,
    )
]


def test_every_schema_file_is_copied_with_kafkas_license_header():
    assert len(SCHEMA_NAMES) == 32  # 15 record types' keys and values, and the consumer protocol
    for name in SCHEMA_NAMES:
        text = (SCHEMA_DIR / f"{name}.json").read_text()
        assert text.startswith("// Licensed to the Apache Software Foundation (ASF)"), name


@pytest.mark.parametrize(("name", "version"), CASES)
@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_bytes_agree_with_kafka_pythons_interpreter(oracle_package, name, version, data):
    schema = consumer_offsets.load_schema(name)
    oracle = type(name, (ApiData,), {}, load_json=oracle_package)
    values = data.draw(values_of(schema.root, version))
    encoded = schema.encode(values, version)
    theirs = oracle.decode(encoded, version=version, header=False)
    assert oracle_values(theirs, version) == ours_snake(values)
    assert theirs.encode(version=version, header=False) == encoded
    decoded, end = schema.decode(encoded, version)
    assert end == len(encoded)
    assert decoded == values


def test_versions_parse_as_the_schemas_write_them():
    assert Versions.parse("0+") == Versions(0, 0x7FFF)
    assert 4 in Versions.parse("0-4") and 5 not in Versions.parse("0-4")
    assert 1 in Versions.parse("1") and 0 not in Versions.parse("1")
    assert 0 not in Versions.parse("none")
    assert [str(Versions.parse(t)) for t in ("0+", "1", "0-4", "none")] == [
        "0+", "1", "0-4", "none"
    ]


def test_tagged_fields_are_written_only_when_not_default():
    schema = consumer_offsets.value_schema(5)  # ConsumerGroupMemberMetadataValue, tag 0
    plain = schema.encode({}, 0)
    assert plain[-1] == 0  # no tagged fields
    assert schema.to_json_tree({}, 0).get("classicMemberMetadata", "absent") == "absent"
    with_tag = schema.encode({"classicMemberMetadata": {"sessionTimeoutMs": 1}}, 0)
    # count 1, tag 0, size 7 (marker 1, int32, empty array, empty tag buffer), marker 1
    assert with_tag[len(plain) - 1 :] == bytes.fromhex("01 00 07 01 00000001 01 00")
    tree = schema.to_json_tree(schema.decode(with_tag, 0)[0], 0)
    assert tree["classicMemberMetadata"] == {"sessionTimeoutMs": 1, "supportedProtocols": []}


def test_json_tree_as_kafkas_converter_writes_it():
    schema = consumer_offsets.value_schema(7)  # ConsumerGroupTargetAssignmentMemberValue
    topic_id = bytes(range(16))
    values = {"topicPartitions": [{"topicId": topic_id, "partitions": [1, 2]}]}
    decoded, _ = schema.decode(schema.encode(values, 0), 0)
    # Uuid.toString: URL-safe base64 without padding.
    assert jackson_json(schema.to_json_tree(decoded, 0)) == (
        '{"topicPartitions":[{"topicId":"AAECAwQFBgcICQoLDA0ODw","partitions":[1,2]}]}'
    )


def test_jackson_escapes():
    assert jackson_json({"a": 'q"\\\b\t\n\f\r\x01\x1fé€😀/'}) == (
        '{"a":"q\\"\\\\\\b\\t\\n\\f\\r\\u0001\\u001Fé€😀/"}'
    )
    assert jackson_json([None, True, False, -1, 2**63 - 1, {}]) == (
        "[null,true,false,-1,9223372036854775807,{}]"
    )


def test_non_ignorable_fields_refuse_a_value_their_version_lacks():
    schema = MessageSchema.from_json(
        '{"type": "data", "name": "T", "validVersions": "0-1", "flexibleVersions": "none",'
        ' "fields": [{"name": "A", "type": "int32", "versions": "1+"},'
        '            {"name": "B", "type": "int32", "versions": "1+", "ignorable": true}]}'
    )
    assert schema.encode({"b": 5}, 0) == b""  # ignorable: dropped
    assert schema.encode({"a": 0}, 0) == b""  # the default: nothing to lose
    with pytest.raises(ValueError, match="non-default a at version 0 of T"):
        schema.encode({"a": 5}, 0)


def test_nullable_struct_marker_when_not_tagged():
    schema = MessageSchema.from_json(
        '{"type": "data", "name": "T", "validVersions": "0", "flexibleVersions": "none",'
        ' "fields": [{"name": "S", "type": "Inner", "versions": "0+", "nullableVersions": "0+",'
        '  "fields": [{"name": "X", "type": "int8", "versions": "0+"}]}]}'
    )
    assert schema.encode({"s": None}, 0) == b"\xff"
    assert schema.encode({"s": {"x": 3}}, 0) == b"\x01\x03"
    assert schema.decode(b"\xff", 0)[0] == {"s": None}
    assert schema.decode(b"\x01\x03", 0)[0] == {"s": {"x": 3}}


def test_decode_errors_name_message_field_and_position():
    schema = consumer_offsets.value_schema(8)  # ConsumerGroupCurrentMemberAssignmentValue
    good = schema.encode({"assignedPartitions": [{"topicId": bytes(16), "partitions": [1]}]}, 0)
    for cut in range(len(good)):
        with pytest.raises(CorruptMessageError, match=r"ConsumerGroupCurrentMemberAssignmentValue"
                                                      r": \S+ at position \d+: "):
            schema.decode(good[:cut], 0)
    with pytest.raises(UnsupportedMessageVersionError, match="Can't read version 1 of "):
        schema.decode(good, 1)
    # A varint longer than Kafka's 5 bytes.
    with pytest.raises(CorruptMessageError, match="longer than 5 bytes"):
        schema.decode(good[:9] + b"\xff" * 6, 0)  # memberEpoch, previousMemberEpoch, state


# --- the generated readers against the generic reader ------------------------------------------


def outcome(read, data: bytes, version: int):
    """What a reader gives for ``data``: its values and end, or the error's class and text."""
    try:
        values, end = read(data, version, 0)
    except CorruptMessageError as exc:
        return type(exc), str(exc), exc.position, exc.field, exc.problem
    return values, end


@pytest.mark.parametrize(("name", "version"), CASES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_generated_readers_agree_with_the_generic_reader(name, version, data):
    """Random valid values, then the same bytes damaged (cut, one byte changed, extended):
    decode (generated reader, generic fallback) and decode_tuple give what decode_generic
    gives, values or error, text, position and field alike."""
    schema = consumer_offsets.load_schema(name)
    encoded = schema.encode(data.draw(values_of(schema.root, version)), version)
    damaged = bytearray(encoded)
    if damaged:
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    for candidate in (encoded, encoded[:cut], bytes(damaged), encoded + data.draw(st.binary())):
        expected = outcome(schema.decode_generic, candidate, version)
        assert outcome(schema.decode, candidate, version) == expected
        if isinstance(expected[0], dict):
            values, end = schema.decode_tuple(candidate, version)
            assert (dict(zip(schema.field_names(version), values, strict=True)), end) == expected
        else:
            assert outcome(schema.decode_tuple, candidate, version)[:3] == expected[:3]


@pytest.mark.parametrize("name", ["OffsetCommitKey", "OffsetCommitValue", "GroupMetadataValue",
                                  "ConsumerProtocolSubscription"])
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=48), version=st.integers(0, 4))
def test_generated_readers_agree_on_arbitrary_bytes(name, data, version):
    schema = consumer_offsets.load_schema(name)
    if version not in schema.valid_versions:
        with pytest.raises(UnsupportedMessageVersionError):
            schema.decode(data, version)
        return
    assert outcome(schema.decode, data, version) == outcome(schema.decode_generic, data, version)


def test_the_generated_reader_reads_a_memoryview_and_leaves_trailing_bytes():
    schema = consumer_offsets.load_schema("OffsetCommitValue")
    encoded = schema.encode({"offset": 7, "metadata": "m", "commitTimestamp": 9}, 3)
    values, end = schema.decode(memoryview(b"xx" + encoded + b"tail"), 3, 2)
    assert values == {"offset": 7, "leaderEpoch": -1, "metadata": "m", "commitTimestamp": 9}
    assert end == 2 + len(encoded)


def test_negative_lengths_other_than_minus_one_are_refused():
    # Kafka's writers write -1 for null and no other negative; a -2 is damage, not a null.
    schema = consumer_offsets.load_schema("GroupMetadataValue")
    data = bytes.fromhex("0000 00000001 fffe 0000")  # protocolType "", generation 1, protocol -2
    with pytest.raises(CorruptMessageError, match="protocol at position 6: string length -2"):
        schema.decode(data, 0)
