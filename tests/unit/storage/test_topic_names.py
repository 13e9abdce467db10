"""Topic names and partition directory names: what keeps user input inside the data directories."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.server.storage.errors import InvalidTopicError
from stratalog.server.storage.topic_names import (
    DIR_NAME_LENGTH_MAX,
    PARTITION_MAX,
    TOPIC_NAME_LENGTH_MAX,
    PartitionDirKind,
    deleted_dir_name,
    is_deleted_dir_name,
    is_future_dir_name,
    is_stray_dir_name,
    is_valid_topic_name,
    parse_partition_dir_name,
    partition_dir_kind,
    partition_dir_name,
    topic_collision_key,
    validate_partition,
    validate_topic_name,
)

UID = "0123456789abcdef0123456789abcdef"
LEGAL = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
valid_topics = st.text(alphabet=LEGAL, min_size=1, max_size=TOPIC_NAME_LENGTH_MAX).filter(
    lambda name: name not in (".", "..")
)


# --- validate_topic_name -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["orders", "a", "A.b_c-d", "0", "...", "-", "_", "x" * 249, "__consumer_offsets", ".hidden"],
)
def test_valid_names(name: str) -> None:
    assert validate_topic_name(name) == name
    assert is_valid_topic_name(name)


@pytest.mark.parametrize(
    ("name", "fragments"),
    [
        ("", ["empty"]),
        (".", ["'.'", "not allowed"]),
        ("..", ["'..'", "not allowed"]),
        ("x" * 250, ["250 characters", "249"]),
        ("x" * 10_000, ["10000 characters"]),
        ("../x", ["'/'", "U+002F", "index 2"]),
        ("a/b", ["'/'", "index 1"]),
        ("/etc", ["'/'", "index 0"]),
        ("a\\b", ["U+005C"]),
        ("a\x00b", ["U+0000", "index 1"]),
        ("tópico", ["U+00F3", "index 1"]),
        ("ｏrders", ["U+FF4F", "index 0"]),  # a full-width look-alike
        ("٣", ["U+0663"]),  # a non-ASCII digit
        ("a b", ["U+0020"]),
        ("a\nb", ["U+000A"]),
        ("a:b", ["':'"]),
        ("a*", ["'*'"]),
        ("x\u200b", ["U+200B"]),  # zero-width space
    ],
)
def test_invalid_names_say_what_is_wrong(name: str, fragments: list[str]) -> None:
    assert not is_valid_topic_name(name)
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name(name)
    message = str(info.value)
    assert message.startswith("Topic name is invalid: ")
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize("name", [None, 5, b"orders", ["orders"]])
def test_non_strings_are_invalid(name: object) -> None:
    assert not is_valid_topic_name(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidTopicError, match="must be a string"):
        validate_topic_name(name)  # type: ignore[arg-type]


def test_length_limit_is_249() -> None:
    assert TOPIC_NAME_LENGTH_MAX == 249
    assert is_valid_topic_name("a" * 249)
    assert not is_valid_topic_name("a" * 250)


@given(st.text(max_size=300))
def test_validity_matches_the_rule(name: str) -> None:
    expected = (
        re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", name, re.ASCII) is not None
        and name not in (".", "..")
    )
    assert is_valid_topic_name(name) == expected


@given(st.text(max_size=300))
def test_a_valid_name_is_one_plain_path_component(name: str) -> None:
    # The property that matters for safety: a valid topic, as a directory name, stays where it
    # is put. No separator, no parent reference, no NUL, nothing that normalises away.
    if is_valid_topic_name(name):
        assert os.sep not in name and "\x00" not in name
        assert name not in (".", "..")
        base = Path("/data/log-dir")
        assert (base / partition_dir_name(name, 0)).parent == base
        assert os.path.normpath(base / name) == str(base / name)


def test_collision_key_unifies_dot_and_underscore() -> None:
    assert topic_collision_key("a.b") == topic_collision_key("a_b") == "a_b"
    assert topic_collision_key("a-b") != topic_collision_key("a_b")


# --- partitions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("partition", [0, 1, 99999, PARTITION_MAX])
def test_valid_partitions(partition: int) -> None:
    assert validate_partition(partition) == partition


@pytest.mark.parametrize(
    ("partition", "fragment"),
    [
        (-1, "outside"),
        (PARTITION_MAX + 1, "outside"),
        (True, "must be an int"),
        (1.0, "must be an int"),
        ("1", "must be an int"),
        (None, "must be an int"),
    ],
)
def test_invalid_partitions(partition: object, fragment: str) -> None:
    with pytest.raises(InvalidTopicError, match=fragment):
        validate_partition(partition)  # type: ignore[arg-type]


# --- live partition directory names --------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "partition", "name"),
    [
        ("orders", 0, "orders-0"),
        ("my-topic", 12, "my-topic-12"),
        ("a.b_c", 2147483647, "a.b_c-2147483647"),
        ("-", 3, "--3"),
    ],
)
def test_partition_dir_name_and_back(topic: str, partition: int, name: str) -> None:
    assert partition_dir_name(topic, partition) == name
    assert parse_partition_dir_name(name) == (topic, partition)
    assert partition_dir_kind(name) is PartitionDirKind.LIVE


@pytest.mark.parametrize(
    ("topic", "partition"),
    [("../x", 0), ("a/b", 0), ("", 0), ("x" * 250, 0), ("a\x00", 0), ("ü", 0), (".", 0),
     ("..", 0), ("ok", -1), ("ok", 2**31)],
)
def test_partition_dir_name_refuses_bad_input(topic: str, partition: int) -> None:
    with pytest.raises(InvalidTopicError):
        partition_dir_name(topic, partition)


def test_partition_dir_name_over_255_characters_is_refused() -> None:
    topic = "t" * 249
    assert len(partition_dir_name(topic, 99999)) == DIR_NAME_LENGTH_MAX
    with pytest.raises(InvalidTopicError, match="256 characters"):
        partition_dir_name(topic, 100000)


@given(topic=valid_topics, partition=st.integers(0, PARTITION_MAX))
def test_live_names_round_trip(topic: str, partition: int) -> None:
    try:
        name = partition_dir_name(topic, partition)
    except InvalidTopicError:
        assert len(topic) + 1 + len(str(partition)) > DIR_NAME_LENGTH_MAX
        return
    assert parse_partition_dir_name(name) == (topic, partition)
    assert not is_deleted_dir_name(name)


# --- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "empty"),
        ("orders", "no '-'"),
        ("orders-", "empty"),
        ("-0", "empty"),
        ("orders-x", "'x'"),
        ("orders-1.5", "'1.5'"),
        ("orders-+1", "'+1'"),  # Java's parseInt would take it; one partition, one name
        ("orders-01", "'01'"),
        ("orders-٣", "'٣'"),  # a non-ASCII digit
        ("orders-2147483648", "over"),
        ("a/b-0", "topic 'a/b' is invalid"),
        ("..-0", "topic '..' is invalid"),
        ("orders-0-delete", "without '.<unique id>'"),
        ("orders-0.-delete", "without '.<unique id>'"),
        ("orders-0.abc-future-x", "partition 'x'"),  # no suffix: split at the last '-'
        ("orders-0.a b-delete", "without '.<unique id>'"),  # \S+ in Kafka's pattern
    ],
)
def test_parse_rejects_non_partition_names(name: str, fragment: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        parse_partition_dir_name(name)
    message = str(info.value)
    assert fragment in message
    assert repr(name) in message


def test_trailing_dash_one_parses_as_kafka_does() -> None:
    # "orders--1" is not partition -1 of "orders": the last '-' splits it into topic "orders-"
    # and partition 1, as Kafka's parser does. (Valid, since "orders-" is a legal topic.)
    assert parse_partition_dir_name("orders--1") == ("orders-", 1)


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(InvalidTopicError):
        parse_partition_dir_name(None)  # type: ignore[arg-type]


# --- deletion, future and stray names ------------------------------------------------------------


def test_deleted_dir_name_format() -> None:
    name = deleted_dir_name("orders", 3, "0123456789abcdef0123456789abcdef")
    assert name == "orders-3.0123456789abcdef0123456789abcdef-delete"
    assert is_deleted_dir_name(name)
    assert not is_future_dir_name(name) and not is_stray_dir_name(name)
    assert parse_partition_dir_name(name) == ("orders", 3)
    assert partition_dir_kind(name) is PartitionDirKind.DELETE


def test_deleted_dir_names_are_unique_uuid_hex() -> None:
    first = deleted_dir_name("orders", 0)
    second = deleted_dir_name("orders", 0)
    assert first != second
    assert re.fullmatch(r"orders-0\.[0-9a-f]{32}-delete", first)


def test_deleted_dir_name_is_capped_at_255_by_truncating_the_topic() -> None:
    topic = "t" * 249
    name = deleted_dir_name(topic, 2147483647)
    assert len(name) == 255
    suffix = name[name.rindex("-2147483647.") :]
    assert len(suffix) == len("-2147483647.") + 32 + len("-delete")
    truncated_topic, partition = parse_partition_dir_name(name)
    assert partition == 2147483647
    assert topic.startswith(truncated_topic)
    assert len(truncated_topic) == 255 - len(suffix)


def test_short_deleted_dir_name_keeps_the_whole_topic() -> None:
    name = deleted_dir_name("a.b-c", 7)
    assert parse_partition_dir_name(name) == ("a.b-c", 7)


@pytest.mark.parametrize(
    "unique_id", ["", "XYZ", "0123456789abcdef0123456789abcdef0", "a-b", "../"]
)
def test_deleted_dir_name_refuses_bad_unique_ids(unique_id: str) -> None:
    with pytest.raises(InvalidTopicError, match="unique id"):
        deleted_dir_name("orders", 0, unique_id)


@pytest.mark.parametrize(("topic", "partition"), [("../x", 0), ("a/b", 1), ("ok", -1)])
def test_deleted_dir_name_refuses_bad_input(topic: str, partition: int) -> None:
    with pytest.raises(InvalidTopicError):
        deleted_dir_name(topic, partition)


@given(topic=valid_topics, partition=st.integers(0, PARTITION_MAX))
def test_deleted_names_are_at_most_255_and_parse_back(topic: str, partition: int) -> None:
    name = deleted_dir_name(topic, partition)
    assert len(name) <= DIR_NAME_LENGTH_MAX
    assert is_deleted_dir_name(name)
    parsed_topic, parsed_partition = parse_partition_dir_name(name)
    assert parsed_partition == partition
    assert topic.startswith(parsed_topic)
    if len(topic) + len(name) - len(parsed_topic) <= DIR_NAME_LENGTH_MAX:
        assert parsed_topic == topic


@pytest.mark.parametrize(
    ("name", "kind", "parsed"),
    [
        (f"orders-3.{UID}-future", PartitionDirKind.FUTURE, ("orders", 3)),
        (f"orders-3.{UID}-stray", PartitionDirKind.STRAY, ("orders", 3)),
        ("my.topic-10.abcdef-delete", PartitionDirKind.DELETE, ("my.topic", 10)),
        ("a-b-c-0.ff-delete", PartitionDirKind.DELETE, ("a-b-c", 0)),
    ],
)
def test_special_suffixes(name: str, kind: PartitionDirKind, parsed: tuple[str, int]) -> None:
    assert partition_dir_kind(name) is kind
    assert parse_partition_dir_name(name) == parsed
    assert is_deleted_dir_name(name) == (kind is PartitionDirKind.DELETE)
    assert is_future_dir_name(name) == (kind is PartitionDirKind.FUTURE)
    assert is_stray_dir_name(name) == (kind is PartitionDirKind.STRAY)


@pytest.mark.parametrize(
    "name",
    ["orders-0", "orders", "", "meta.properties", ".lock", "orders-0-delete", "x.abc-delete"],
)
def test_is_deleted_dir_name_is_false_for_anything_else(name: str) -> None:
    assert not is_deleted_dir_name(name)


def test_topic_named_like_a_suffix_is_still_live() -> None:
    # A topic may itself end in "-delete": its live directory ends in "-<partition>".
    name = partition_dir_name("x-delete", 0)
    assert partition_dir_kind(name) is PartitionDirKind.LIVE
    assert parse_partition_dir_name(name) == ("x-delete", 0)
