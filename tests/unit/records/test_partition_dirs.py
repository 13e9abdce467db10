"""records.partition_dirs: topic names and partition directory names, against the reference."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records import partition_dirs
from stratalog.records.errors import (
    InvalidTopicNameError,
    LayoutError,
)

INT_MAX = 2**31 - 1
LEGAL = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
valid_topics = st.text(
    alphabet=LEGAL, min_size=1, max_size=partition_dirs.TOPIC_NAME_LENGTH_MAX
).filter(lambda name: name not in (".", ".."))


@given(topic=valid_topics, partition=st.integers(0, INT_MAX))
def test_partition_dir_names_round_trip(topic: str, partition: int) -> None:
    try:
        name = partition_dirs.partition_dir_name(topic, partition)
    except InvalidTopicNameError as error:
        assert len(f"{topic}-{partition}") > partition_dirs.DIR_NAME_LENGTH_MAX
        assert "over the file-name limit" in str(error)
        return
    assert name == f"{topic}-{partition}"
    assert partition_dirs.parse_partition_dir_name(name) == (topic, partition)
    assert partition_dirs.partition_dir_kind(name) is partition_dirs.PartitionDirKind.LIVE


@given(
    topic=valid_topics,
    partition=st.integers(0, INT_MAX),
    unique_id=st.text(alphabet="0123456789abcdef", min_size=1, max_size=32),
)
def test_deleted_dir_names_parse_back_with_a_capped_topic(
    topic: str, partition: int, unique_id: str
) -> None:
    name = partition_dirs.deleted_dir_name(topic, partition, unique_id)
    assert len(name) <= partition_dirs.DIR_NAME_LENGTH_MAX
    assert name.endswith(f"-{partition}.{unique_id}-delete")
    parsed_topic, parsed_partition = partition_dirs.parse_partition_dir_name(name)
    assert topic.startswith(parsed_topic) and parsed_partition == partition
    assert partition_dirs.partition_dir_kind(name) is partition_dirs.PartitionDirKind.DELETE
    assert partition_dirs.is_deleted_dir_name(name)
    assert not partition_dirs.is_future_dir_name(name) and not partition_dirs.is_stray_dir_name(name)


@given(
    topic=valid_topics,
    partition_text=st.one_of(
        st.integers(0, INT_MAX).map(lambda p: f"0{p}"),  # a leading zero
        st.integers(0, INT_MAX).map(lambda p: f"+{p}"),
        st.integers(INT_MAX + 1, 10**12).map(str),
        # No "-": "0--0" is topic "0-", partition 0, a canonical name (found by hypothesis).
        st.text(min_size=1, max_size=5).filter(
            lambda t: not (t.isascii() and t.isdigit()) and "-" not in t
        ),
    ),
)
def test_non_canonical_partitions_are_rejected(topic: str, partition_text: str) -> None:
    name = f"{topic}-{partition_text}"
    with pytest.raises(InvalidTopicNameError) as caught:
        partition_dirs.parse_partition_dir_name(name)
    assert isinstance(caught.value, LayoutError)
    assert not partition_dirs.is_deleted_dir_name(name)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("orders-0", partition_dirs.PartitionDirKind.LIVE),
        ("orders-0.0123456789abcdef0123456789abcdef-delete", partition_dirs.PartitionDirKind.DELETE),
        ("orders-0.0123456789abcdef0123456789abcdef-future", partition_dirs.PartitionDirKind.FUTURE),
        ("orders-0.0123456789abcdef0123456789abcdef-stray", partition_dirs.PartitionDirKind.STRAY),
    ],
)
def test_the_four_directory_forms(name: str, kind: partition_dirs.PartitionDirKind) -> None:
    assert partition_dirs.parse_partition_dir_name(name) == ("orders", 0)
    assert partition_dirs.partition_dir_kind(name) is kind


@pytest.mark.parametrize("name", ["", "orders", ".-0", "..-0", "a/b-0", "t\x00-0", "-0", "t-"])
def test_names_that_are_no_partition_directory(name: str) -> None:
    with pytest.raises(InvalidTopicNameError, match="is not of the form"):
        partition_dirs.parse_partition_dir_name(name)


def test_topic_name_errors_are_layout_errors() -> None:
    for call in (
        lambda: partition_dirs.validate_topic_name("a/b"),
        lambda: partition_dirs.validate_partition(-1),
        lambda: partition_dirs.partition_dir_name("", 0),
        lambda: partition_dirs.deleted_dir_name("t", 0, "XYZ"),
    ):
        with pytest.raises(InvalidTopicNameError):
            call()
    assert partition_dirs.validate_topic_name("orders") == "orders"
    assert partition_dirs.is_valid_topic_name("a.b_c-1") and not partition_dirs.is_valid_topic_name("..")
