"""records.file_names: segment file names (Kafka's ``LogFileUtils``), against the reference."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records import file_names
from stratalog.records.errors import (
    InvalidFileNameError,
    LayoutError,
    RecordError,
)

LONG_MAX = 2**63 - 1


@pytest.mark.parametrize(
    ("offset", "prefix"),
    [
        (0, "00000000000000000000"),
        (1234, "00000000000000001234"),
        (LONG_MAX, "09223372036854775807"),
    ],
)
def test_filename_prefix_is_twenty_zero_padded_digits(offset: int, prefix: str) -> None:
    assert file_names.filename_prefix_from_offset(offset) == prefix


@pytest.mark.parametrize("offset", [-1, LONG_MAX + 1])
def test_filename_prefix_rejects_offsets_outside_a_java_long(offset: int) -> None:
    with pytest.raises(ValueError, match=str(offset)):
        file_names.filename_prefix_from_offset(offset)


def test_suffix_constants_are_kafkas() -> None:
    assert file_names.LOG_FILE_SUFFIX == ".log"
    assert file_names.INDEX_FILE_SUFFIX == ".index"
    assert file_names.TIME_INDEX_FILE_SUFFIX == ".timeindex"
    assert file_names.TXN_INDEX_FILE_SUFFIX == ".txnindex"
    assert file_names.SNAPSHOT_FILE_SUFFIX == ".snapshot"
    assert file_names.DELETED_FILE_SUFFIX == ".deleted"
    assert file_names.CLEANED_FILE_SUFFIX == ".cleaned"
    assert file_names.SWAP_FILE_SUFFIX == ".swap"


def test_segment_file_name_puts_temporary_suffixes_last() -> None:
    assert file_names.segment_file_name(0, ".log") == "00000000000000000000.log"
    assert file_names.segment_file_name(100, ".index", ".swap") == "00000000000000000100.index.swap"
    assert (
        file_names.segment_file_name(7, file_names.LOG_FILE_SUFFIX, file_names.DELETED_FILE_SUFFIX)
        == "00000000000000000007.log.deleted"
    )


@pytest.mark.parametrize(
    ("name", "offset"),
    [
        ("00000000000000000000.log", 0),
        ("00000000000000001234.index", 1234),
        ("00000000000000000100.index.swap", 100),
        ("09223372036854775807.timeindex", LONG_MAX),
        ("42.log", 42),  # Kafka parses any digits, padded or not
        ("/some/dir/00000000000000000007.snapshot", 7),
        ("topic.v2-0/00000000000000000077.log.deleted", 77),  # dots in the directory: ignored
    ],
)
def test_offset_from_file_name(name: str, offset: int) -> None:
    assert file_names.offset_from_file_name(name) == offset


@pytest.mark.parametrize(
    "name",
    [
        "00000000000000000000",  # no suffix
        ".log",  # no digits
        "leader-epoch-checkpoint",
        "abc.log",
        "-1.log",
        "+1.log",
        " 1.log",
        "1_000.log",
        "١٢٣.log",  # Arabic-Indic digits: int() would take them, Kafka would not
        "09223372036854775808.log",  # Long.MAX + 1
        "",
    ],
)
def test_offset_from_file_name_rejects_bad_names(name: str) -> None:
    with pytest.raises(InvalidFileNameError) as caught:
        file_names.offset_from_file_name(name)
    assert isinstance(caught.value, ValueError)  # as Kafka's NumberFormatException
    assert isinstance(caught.value, LayoutError)
    assert not isinstance(caught.value, RecordError)  # not a bad batch: no client sent it
    assert repr(name) in str(caught.value)


@given(
    st.integers(min_value=0, max_value=LONG_MAX),
    st.sampled_from([".log", ".index", ".timeindex", ".txnindex", ".snapshot"]),
    st.sampled_from(["", ".deleted", ".cleaned", ".swap"]),
)
def test_names_round_trip(offset: int, suffix: str, temp_suffix: str) -> None:
    name = file_names.segment_file_name(offset, suffix, temp_suffix)
    assert len(name) == 20 + len(suffix) + len(temp_suffix)
    assert file_names.offset_from_file_name(name) == offset
    assert file_names.is_log_file(name) is (suffix == ".log" and temp_suffix == "")
    assert file_names.is_index_file(name) is (
        suffix in (".index", ".timeindex", ".txnindex") and temp_suffix == ""
    )


@given(st.text(max_size=30), st.sampled_from([".log", ".index.swap", ""]))
def test_names_not_starting_with_ascii_digits_and_a_dot_are_rejected(
    stem: str, suffix: str
) -> None:
    name = stem + suffix
    base = name.rsplit("/", 1)[-1]
    head, dot, _ = base.partition(".")
    if dot and head and head.isascii() and head.isdigit() and int(head) <= LONG_MAX:
        assert file_names.offset_from_file_name(name) == int(head)
    else:
        with pytest.raises(InvalidFileNameError):
            file_names.offset_from_file_name(name)


@given(st.lists(st.integers(min_value=0, max_value=LONG_MAX), min_size=2, max_size=20))
def test_names_sort_like_offsets(offsets: list[int]) -> None:
    # The reason for the padding: `ls` order is offset order.
    names = [file_names.filename_prefix_from_offset(o) for o in offsets]
    assert [file_names.offset_from_file_name(n + ".log") for n in sorted(names)] == sorted(offsets)


@pytest.mark.parametrize(
    ("name", "is_log", "is_index"),
    [
        ("00000000000000000000.log", True, False),
        ("00000000000000000000.index", False, True),
        ("00000000000000000000.timeindex", False, True),
        ("00000000000000000000.txnindex", False, True),
        ("00000000000000000000.snapshot", False, False),
        ("00000000000000000000.log.deleted", False, False),
        ("00000000000000000000.index.swap", False, False),
        ("00000000000000000000.timeindex.cleaned", False, False),
        ("leader-epoch-checkpoint", False, False),
        ("partition.metadata", False, False),
    ],
)
def test_is_log_file_and_is_index_file(name: str, is_log: bool, is_index: bool) -> None:
    assert file_names.is_log_file(name) is is_log
    assert file_names.is_index_file(name) is is_index
