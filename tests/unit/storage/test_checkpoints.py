"""OffsetCheckpointFile: Kafka's text format both ways, every read error of Kafka's
``CheckpointFile.CheckpointReadBuffer`` (server-common/src/main/java/org/apache/kafka/server/
common/CheckpointFile.java), atomic writes.

The text itself is records.offset_checkpoint's (tests/unit/records/test_offset_checkpoint.py runs
the same cases on the parser); here every case goes through the file, whose errors name it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records.offset_checkpoint import OFFSET_CHECKPOINT_VERSION
from stratalog.server.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from stratalog.server.storage.durable import tmp_path_for
from stratalog.server.storage.errors import (
    CorruptCheckpointError,
    InvalidTopicError,
    StorageIOError,
)

# The example of records/offset_checkpoint.py's docstring, byte for byte as Kafka writes it.
KAFKA_EXAMPLE = b"0\n2\norders 0 1234\norders 1 0\n"


def checkpoint_with(tmp_path: Path, content: bytes) -> OffsetCheckpointFile:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT_FILE
    path.write_bytes(content)
    return OffsetCheckpointFile(path)


def test_file_names_are_kafkas() -> None:
    assert RECOVERY_POINT_CHECKPOINT_FILE == "recovery-point-offset-checkpoint"
    assert LOG_START_OFFSET_CHECKPOINT_FILE == "log-start-offset-checkpoint"
    assert OFFSET_CHECKPOINT_VERSION == 0


def test_reads_kafkas_example(tmp_path: Path) -> None:
    checkpoint = checkpoint_with(tmp_path, KAFKA_EXAMPLE)
    assert checkpoint.read() == {("orders", 0): 1234, ("orders", 1): 0}


def test_writes_kafkas_example_byte_for_byte(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT_FILE)
    # Given out of order: lines come out sorted by (topic, partition).
    checkpoint.write({("orders", 1): 0, ("orders", 0): 1234})
    assert checkpoint.path.read_bytes() == KAFKA_EXAMPLE


def test_write_sorts_by_topic_then_partition_numerically(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "c")
    checkpoint.write({("b", 10): 1, ("b", 9): 2, ("a", 100): 3})
    assert checkpoint.path.read_bytes() == b"0\n3\na 100 3\nb 9 2\nb 10 1\n"


def test_empty_checkpoint_round_trip(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "c")
    checkpoint.write({})
    assert checkpoint.path.read_bytes() == b"0\n0\n"
    assert checkpoint.read() == {}


def test_constructor_creates_a_missing_file_empty(tmp_path: Path) -> None:
    path = tmp_path / LOG_START_OFFSET_CHECKPOINT_FILE
    checkpoint = OffsetCheckpointFile(path)
    assert path.is_file()
    assert path.read_bytes() == b""
    assert checkpoint.read() == {}


def test_constructor_leaves_an_existing_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "c"
    path.write_bytes(KAFKA_EXAMPLE)
    OffsetCheckpointFile(path)
    assert path.read_bytes() == KAFKA_EXAMPLE


def test_constructor_can_be_told_not_to_create(tmp_path: Path) -> None:
    path = tmp_path / "c"
    checkpoint = OffsetCheckpointFile(path, create_if_missing=False)
    assert not path.exists()
    # A missing file reads as empty.
    assert checkpoint.read() == {}


def test_constructor_in_a_missing_directory_is_a_storage_io_error(tmp_path: Path) -> None:
    with pytest.raises(StorageIOError, match="no-such-dir"):
        OffsetCheckpointFile(tmp_path / "no-such-dir" / "c")


def test_file_deleted_after_construction_reads_empty(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "c")
    checkpoint.path.unlink()
    assert checkpoint.read() == {}


# The text's parse is records.offset_checkpoint's, tested case by case in
# tests/unit/records/test_offset_checkpoint.py; here, that the file reads through it.
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", {}),  # empty file
        (b"0\r\n1\r\nt 0 5\r\n", {("t", 0): 5}),  # CRLF, as readLine accepts
        (b"0\n2\nt 0 5\nt 0 9\n", {("t", 0): 9}),  # a repeated partition: the last line wins
        ("0\n1\nt\u00e9 0 1\n".encode(), {("t\u00e9", 0): 1}),  # UTF-8, not validated on read
    ],
)
def test_reads_what_kafka_reads(tmp_path: Path, content: bytes, expected: dict) -> None:
    assert checkpoint_with(tmp_path, content).read() == expected


# Every malformed text is in tests/unit/records/test_offset_checkpoint.py; here, that the file's
# error names the file as well as the line.
@pytest.mark.parametrize(
    ("content", "line_number", "fragment"),
    [
        (b"1\n0\n", 1, "Unrecognised version 1"),  # version mismatch
        (b"0\n-1\n", 2, "the entry count is negative"),
        (b"0\n1\norders x 1\n", 3, "'x' is not a decimal integer"),  # partition not an int
        (b"0\n2\na 0 1\nb 0 2\nc\n", 5, "found 1 fields"),  # the error names the bad line
    ],
)
def test_malformed_content_names_file_and_line(
    tmp_path: Path, content: bytes, line_number: int, fragment: str
) -> None:
    checkpoint = checkpoint_with(tmp_path, content)
    with pytest.raises(CorruptCheckpointError) as info:
        checkpoint.read()
    error = info.value
    assert fragment in str(error)
    assert str(checkpoint.path) in str(error)
    assert error.path == str(checkpoint.path)
    assert error.line_number == line_number
    if line_number > 1:
        assert f"line {line_number}" in str(error)


@pytest.mark.parametrize(
    ("content", "expected", "found"),
    [
        (b"0\n3\na 0 1\nb 0 2\n", 3, 2),  # fewer entries than the count
        (b"0\n1\na 0 1\nb 0 2\n", 1, 2),  # more entries than the count
        (b"0\n1\n", 1, 0),
    ],
)
def test_entry_count_mismatch(tmp_path: Path, content: bytes, expected: int, found: int) -> None:
    checkpoint = checkpoint_with(tmp_path, content)
    with pytest.raises(CorruptCheckpointError) as info:
        checkpoint.read()
    assert f"Expected [{expected}] entries" in str(info.value)
    assert f"found [{found}]" in str(info.value)
    assert str(checkpoint.path) in str(info.value)
    assert info.value.line_number is None


def test_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    checkpoint = checkpoint_with(tmp_path, b"0\n1\nt\xff 0 1\n")
    with pytest.raises(CorruptCheckpointError) as info:
        checkpoint.read()
    assert "not UTF-8" in str(info.value)
    assert "byte 5" in str(info.value)
    assert str(checkpoint.path) in str(info.value)


def test_a_directory_in_place_of_the_file_is_a_storage_io_error(tmp_path: Path) -> None:
    path = tmp_path / "c"
    path.mkdir()
    checkpoint = OffsetCheckpointFile(path)
    with pytest.raises(StorageIOError, match="cannot read checkpoint file"):
        checkpoint.read()


def test_write_refuses_what_could_not_be_read_back(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "c")
    checkpoint.write({("ok", 0): 1})
    bad_entries = [
        ({("has space", 0): 1}, InvalidTopicError),
        ({("new\nline", 0): 1}, InvalidTopicError),
        ({("", 0): 1}, InvalidTopicError),
        ({("t", -1): 1}, ValueError),
        ({("t", 2**31): 1}, ValueError),
        ({("t", True): 1}, ValueError),
        ({("t", 0): 2**63}, ValueError),
        ({("t", 0): 1.5}, ValueError),
    ]
    for entries, error in bad_entries:
        with pytest.raises(error):
            checkpoint.write(entries)
    # Nothing of the refused writes reached the file.
    assert checkpoint.read() == {("ok", 0): 1}


def test_write_over_a_stray_tmp_from_a_crash(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT_FILE)
    checkpoint.write({("t", 0): 100})
    # A crash during the next write leaves a torn .tmp; the checkpoint still reads as before.
    tmp_path_for(checkpoint.path).write_bytes(b"0\n5\nt 0 2")
    assert checkpoint.read() == {("t", 0): 100}
    checkpoint.write({("t", 0): 200})
    assert checkpoint.read() == {("t", 0): 200}
    assert not tmp_path_for(checkpoint.path).exists()


def test_two_objects_on_one_file_see_each_others_writes(tmp_path: Path) -> None:
    path = tmp_path / "c"
    first = OffsetCheckpointFile(path)
    second = OffsetCheckpointFile(path)
    first.write({("t", 0): 1})
    assert second.read() == {("t", 0): 1}


topics = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=249,
).filter(lambda name: name not in (".", ".."))
entries_strategy = st.dictionaries(
    st.tuples(topics, st.integers(0, 2**31 - 1)),
    st.integers(-(2**63), 2**63 - 1),
    max_size=30,
)


@given(entries=entries_strategy)
def test_round_trip(tmp_path_factory: pytest.TempPathFactory, entries: dict) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path_factory.mktemp("ckpt") / "c")
    checkpoint.write(entries)
    assert checkpoint.read() == entries
    text = checkpoint.path.read_text("utf-8")
    lines = text.split("\n")
    # Kafka's layout: version, count, one "<topic> <partition> <offset>" line each, final "\n".
    assert lines[0] == "0"
    assert lines[1] == str(len(entries))
    assert lines[-1] == ""
    assert len(lines) == len(entries) + 3


@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_give_entries_or_a_corrupt_checkpoint_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "c"
    path.write_bytes(data)
    try:
        result = OffsetCheckpointFile(path).read()
    except CorruptCheckpointError as error:
        assert str(path) in str(error)
    else:
        assert isinstance(result, dict)
