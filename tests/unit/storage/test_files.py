"""Segment file naming (stratalog.server.storage.files), against LogFileUtils and spec §1.2."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.server.storage import files
from stratalog.server.storage.errors import InvalidSegmentFileNameError, StorageError

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
    assert files.filename_prefix_from_offset(offset) == prefix


@pytest.mark.parametrize("offset", [-1, LONG_MAX + 1])
def test_filename_prefix_rejects_offsets_outside_a_java_long(offset: int) -> None:
    with pytest.raises(ValueError, match=str(offset)):
        files.filename_prefix_from_offset(offset)


def test_suffix_constants_are_kafkas() -> None:
    assert files.LOG_FILE_SUFFIX == ".log"
    assert files.INDEX_FILE_SUFFIX == ".index"
    assert files.TIME_INDEX_FILE_SUFFIX == ".timeindex"
    assert files.TXN_INDEX_FILE_SUFFIX == ".txnindex"
    assert files.SNAPSHOT_FILE_SUFFIX == ".snapshot"
    assert files.DELETED_FILE_SUFFIX == ".deleted"
    assert files.CLEANED_FILE_SUFFIX == ".cleaned"
    assert files.SWAP_FILE_SUFFIX == ".swap"


def test_segment_file_paths(tmp_path: Path) -> None:
    assert files.log_file(tmp_path, 0) == tmp_path / "00000000000000000000.log"
    assert files.offset_index_file(tmp_path, 1234) == tmp_path / "00000000000000001234.index"
    assert files.time_index_file(tmp_path, 5) == tmp_path / "00000000000000000005.timeindex"
    assert files.transaction_index_file(tmp_path, 7) == tmp_path / "00000000000000000007.txnindex"
    assert files.producer_snapshot_file(tmp_path, 9) == tmp_path / "00000000000000000009.snapshot"


def test_temporary_suffixes_go_after_the_normal_suffix(tmp_path: Path) -> None:
    assert (
        files.log_file(tmp_path, 0, files.DELETED_FILE_SUFFIX).name
        == "00000000000000000000.log.deleted"
    )
    assert (
        files.offset_index_file(tmp_path, 100, files.SWAP_FILE_SUFFIX).name
        == "00000000000000000100.index.swap"
    )
    assert (
        files.time_index_file(tmp_path, 100, files.CLEANED_FILE_SUFFIX).name
        == "00000000000000000100.timeindex.cleaned"
    )
    assert (
        files.transaction_index_file(tmp_path, 3, ".swap").name
        == "00000000000000000003.txnindex.swap"
    )


def test_paths_accept_a_string_directory() -> None:
    assert files.log_file("/data/t-0", 42) == Path("/data/t-0/00000000000000000042.log")


@pytest.mark.parametrize(
    ("name", "offset"),
    [
        ("00000000000000000000.log", 0),
        ("00000000000000001234.index", 1234),
        ("00000000000000000100.index.swap", 100),
        ("09223372036854775807.timeindex", LONG_MAX),
        ("42.log", 42),  # Kafka parses any digits, padded or not
        ("/some/dir/00000000000000000007.snapshot", 7),
    ],
)
def test_offset_from_file_name(name: str, offset: int) -> None:
    assert files.offset_from_file_name(name) == offset


def test_offset_from_file_uses_the_last_path_component(tmp_path: Path) -> None:
    # A directory name with dots and digits must not confuse the parser.
    path = tmp_path / "topic.v2-0" / "00000000000000000077.log.deleted"
    assert files.offset_from_file(path) == 77
    assert files.offset_from_file_name(path) == 77


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
    with pytest.raises(InvalidSegmentFileNameError) as caught:
        files.offset_from_file_name(name)
    # A ValueError (as asked of the API) and a StorageError (our tree), naming the file.
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, StorageError)
    assert repr(name) in str(caught.value)


@given(st.integers(min_value=0, max_value=LONG_MAX), st.sampled_from([".log", ".index.swap"]))
def test_prefix_and_parse_round_trip(offset: int, suffix: str) -> None:
    name = files.filename_prefix_from_offset(offset) + suffix
    assert len(name) == 20 + len(suffix)
    assert files.offset_from_file_name(name) == offset


@given(st.lists(st.integers(min_value=0, max_value=LONG_MAX), min_size=2, max_size=20))
def test_names_sort_like_offsets(offsets: list[int]) -> None:
    # The reason for the padding: `ls` order is offset order.
    names = [files.filename_prefix_from_offset(o) for o in offsets]
    assert [files.offset_from_file_name(n + ".log") for n in sorted(names)] == sorted(offsets)


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
    assert files.is_log_file(name) is is_log
    assert files.is_index_file(name) is is_index
    assert files.is_log_file(Path("/d") / name) is is_log
    assert files.is_index_file(Path("/d") / name) is is_index
