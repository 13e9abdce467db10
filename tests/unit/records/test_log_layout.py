"""records.log_layout: the names, entries and texts around the batches, against spec §1.1-§1.8.

The storage engine's wrappers of these (files.py, topic_names.py, checkpoints.py, the index
modules) have their own tests, which check the same rules through files and the engine's errors;
here the sans-IO definitions are tested on names and bytes alone.
"""

from __future__ import annotations

import importlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records import log_layout as layout
from stratalog.records.crc import crc32c
from stratalog.records.errors import (
    CorruptIndexEntryError,
    CorruptOffsetCheckpointError,
    CorruptSnapshotError,
    InvalidFileNameError,
    InvalidTopicNameError,
    LayoutError,
    RecordError,
)

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
int32s = st.integers(-(2**31), INT_MAX)
int64s = st.integers(-(2**63), LONG_MAX)
LEGAL = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
valid_topics = st.text(alphabet=LEGAL, min_size=1, max_size=layout.TOPIC_NAME_LENGTH_MAX).filter(
    lambda name: name not in (".", "..")
)

# --- §1 segment file names -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "prefix"),
    [
        (0, "00000000000000000000"),
        (1234, "00000000000000001234"),
        (LONG_MAX, "09223372036854775807"),
    ],
)
def test_filename_prefix_is_twenty_zero_padded_digits(offset: int, prefix: str) -> None:
    assert layout.filename_prefix_from_offset(offset) == prefix


@pytest.mark.parametrize("offset", [-1, LONG_MAX + 1])
def test_filename_prefix_rejects_offsets_outside_a_java_long(offset: int) -> None:
    with pytest.raises(ValueError, match=str(offset)):
        layout.filename_prefix_from_offset(offset)


def test_suffix_constants_are_kafkas() -> None:
    assert layout.LOG_FILE_SUFFIX == ".log"
    assert layout.INDEX_FILE_SUFFIX == ".index"
    assert layout.TIME_INDEX_FILE_SUFFIX == ".timeindex"
    assert layout.TXN_INDEX_FILE_SUFFIX == ".txnindex"
    assert layout.SNAPSHOT_FILE_SUFFIX == ".snapshot"
    assert layout.DELETED_FILE_SUFFIX == ".deleted"
    assert layout.CLEANED_FILE_SUFFIX == ".cleaned"
    assert layout.SWAP_FILE_SUFFIX == ".swap"


def test_segment_file_name_puts_temporary_suffixes_last() -> None:
    assert layout.segment_file_name(0, ".log") == "00000000000000000000.log"
    assert layout.segment_file_name(100, ".index", ".swap") == "00000000000000000100.index.swap"
    assert (
        layout.segment_file_name(7, layout.LOG_FILE_SUFFIX, layout.DELETED_FILE_SUFFIX)
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
    assert layout.offset_from_file_name(name) == offset


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
        layout.offset_from_file_name(name)
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
    name = layout.segment_file_name(offset, suffix, temp_suffix)
    assert len(name) == 20 + len(suffix) + len(temp_suffix)
    assert layout.offset_from_file_name(name) == offset
    assert layout.is_log_file(name) is (suffix == ".log" and temp_suffix == "")
    assert layout.is_index_file(name) is (
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
        assert layout.offset_from_file_name(name) == int(head)
    else:
        with pytest.raises(InvalidFileNameError):
            layout.offset_from_file_name(name)


@given(st.lists(st.integers(min_value=0, max_value=LONG_MAX), min_size=2, max_size=20))
def test_names_sort_like_offsets(offsets: list[int]) -> None:
    # The reason for the padding: `ls` order is offset order.
    names = [layout.filename_prefix_from_offset(o) for o in offsets]
    assert [layout.offset_from_file_name(n + ".log") for n in sorted(names)] == sorted(offsets)


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
    assert layout.is_log_file(name) is is_log
    assert layout.is_index_file(name) is is_index


# --- §2 topic names and partition directory names --------------------------------------------


@given(topic=valid_topics, partition=st.integers(0, INT_MAX))
def test_partition_dir_names_round_trip(topic: str, partition: int) -> None:
    try:
        name = layout.partition_dir_name(topic, partition)
    except InvalidTopicNameError as error:
        assert len(f"{topic}-{partition}") > layout.DIR_NAME_LENGTH_MAX
        assert "over the file-name limit" in str(error)
        return
    assert name == f"{topic}-{partition}"
    assert layout.parse_partition_dir_name(name) == (topic, partition)
    assert layout.partition_dir_kind(name) is layout.PartitionDirKind.LIVE


@given(
    topic=valid_topics,
    partition=st.integers(0, INT_MAX),
    unique_id=st.text(alphabet="0123456789abcdef", min_size=1, max_size=32),
)
def test_deleted_dir_names_parse_back_with_a_capped_topic(
    topic: str, partition: int, unique_id: str
) -> None:
    name = layout.deleted_dir_name(topic, partition, unique_id)
    assert len(name) <= layout.DIR_NAME_LENGTH_MAX
    assert name.endswith(f"-{partition}.{unique_id}-delete")
    parsed_topic, parsed_partition = layout.parse_partition_dir_name(name)
    assert topic.startswith(parsed_topic) and parsed_partition == partition
    assert layout.partition_dir_kind(name) is layout.PartitionDirKind.DELETE
    assert layout.is_deleted_dir_name(name)
    assert not layout.is_future_dir_name(name) and not layout.is_stray_dir_name(name)


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
        layout.parse_partition_dir_name(name)
    assert isinstance(caught.value, LayoutError)
    assert not layout.is_deleted_dir_name(name)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("orders-0", layout.PartitionDirKind.LIVE),
        ("orders-0.0123456789abcdef0123456789abcdef-delete", layout.PartitionDirKind.DELETE),
        ("orders-0.0123456789abcdef0123456789abcdef-future", layout.PartitionDirKind.FUTURE),
        ("orders-0.0123456789abcdef0123456789abcdef-stray", layout.PartitionDirKind.STRAY),
    ],
)
def test_the_four_directory_forms(name: str, kind: layout.PartitionDirKind) -> None:
    assert layout.parse_partition_dir_name(name) == ("orders", 0)
    assert layout.partition_dir_kind(name) is kind


@pytest.mark.parametrize("name", ["", "orders", ".-0", "..-0", "a/b-0", "t\x00-0", "-0", "t-"])
def test_names_that_are_no_partition_directory(name: str) -> None:
    with pytest.raises(InvalidTopicNameError, match="is not of the form"):
        layout.parse_partition_dir_name(name)


def test_topic_name_errors_are_layout_errors() -> None:
    for call in (
        lambda: layout.validate_topic_name("a/b"),
        lambda: layout.validate_partition(-1),
        lambda: layout.partition_dir_name("", 0),
        lambda: layout.deleted_dir_name("t", 0, "XYZ"),
    ):
        with pytest.raises(InvalidTopicNameError):
            call()
    assert layout.validate_topic_name("orders") == "orders"
    assert layout.is_valid_topic_name("a.b_c-1") and not layout.is_valid_topic_name("..")


# --- §3, §4 offset and time index entries ----------------------------------------------------


def test_offset_index_entry_is_the_reference_example() -> None:
    # Spec §1.5: base offset 100, entry (offset 105, position 4096).
    data = layout.OFFSET_INDEX_ENTRY.pack(105 - 100, 4096)
    assert data == bytes.fromhex("0000000500001000")
    assert layout.OFFSET_INDEX_ENTRY.size == 8
    assert layout.unpack_offset_index(data) == [layout.OffsetIndexEntry(5, 4096)]
    assert layout.OFFSET_INDEX_RELATIVE_OFFSET.read(data) == 5
    assert layout.OFFSET_INDEX_POSITION.read(data) == 4096


def test_time_index_entry_is_the_reference_example() -> None:
    # Spec §1.5: base offset 100, entry (timestamp 1700000000000, offset 105).
    data = layout.TIME_INDEX_ENTRY.pack(1700000000000, 105 - 100)
    assert data == bytes.fromhex("0000018bcfe5680000000005")
    assert layout.TIME_INDEX_ENTRY.size == 12
    assert layout.unpack_time_index(data) == [layout.TimeIndexEntry(1700000000000, 5)]
    assert layout.TIME_INDEX_TIMESTAMP.read(data) == 1700000000000
    assert layout.TIME_INDEX_RELATIVE_OFFSET.read(data) == 5


@given(entries=st.lists(st.tuples(int32s, int32s), max_size=20), tail=st.binary(max_size=7))
def test_offset_index_entries_round_trip_and_a_partial_tail_is_ignored(
    entries: list[tuple[int, int]], tail: bytes
) -> None:
    data = b"".join(layout.OFFSET_INDEX_ENTRY.pack(*entry) for entry in entries)
    assert layout.unpack_offset_index(data + tail) == entries
    for slot, (relative, position) in enumerate(entries):
        start = slot * layout.OFFSET_INDEX_ENTRY.size
        assert layout.OFFSET_INDEX_RELATIVE_OFFSET.read(data, start) == relative
        assert layout.OFFSET_INDEX_POSITION.read(data, start) == position


@given(entries=st.lists(st.tuples(int64s, int32s), max_size=20), tail=st.binary(max_size=11))
def test_time_index_entries_round_trip_and_a_partial_tail_is_ignored(
    entries: list[tuple[int, int]], tail: bytes
) -> None:
    data = b"".join(layout.TIME_INDEX_ENTRY.pack(*entry) for entry in entries)
    assert layout.unpack_time_index(memoryview(data + tail)) == entries
    for slot, (timestamp, relative) in enumerate(entries):
        start = slot * layout.TIME_INDEX_ENTRY.size
        assert layout.TIME_INDEX_TIMESTAMP.read(data, start) == timestamp
        assert layout.TIME_INDEX_RELATIVE_OFFSET.read(data, start) == relative


# --- §5 transaction index entries ------------------------------------------------------------


def test_txn_index_entry_is_the_reference_example() -> None:
    # Spec §1.6: AbortedTxn(pid=983493, first=137, last=299, lso=200).
    data = layout.pack_txn_index_entry(983493, 137, 299, 200)
    assert data == bytes.fromhex(
        "000000000000000f01c50000000000000089000000000000012b00000000000000c8"
    )
    assert layout.TXN_INDEX_ENTRY.size == len(data) == 34
    assert layout.unpack_txn_index_entry(data) == layout.TxnIndexEntry(0, 983493, 137, 299, 200)


@given(fields=st.tuples(int64s, int64s, int64s, int64s), start=st.integers(0, 40))
def test_txn_index_entries_round_trip(fields: tuple[int, int, int, int], start: int) -> None:
    buffer = bytes(start) + layout.pack_txn_index_entry(*fields)
    assert layout.unpack_txn_index_entry(buffer, start) == (0, *fields)
    assert layout.unpack_txn_index(buffer[start:] + bytes(33)) == [(0, *fields)]


def test_txn_index_version_is_kafkas_first_byte() -> None:
    entry = bytearray(layout.pack_txn_index_entry(1, 2, 3, 4))
    entry[1] = 1  # 0x0001: Kafka reads byte 0 only, so this is version 0
    assert layout.unpack_txn_index_entry(entry).producer_id == 1
    entry[0] = 1
    with pytest.raises(CorruptIndexEntryError, match="version 1") as caught:
        layout.unpack_txn_index_entry(bytes(34) + entry, 34)
    assert caught.value.version == 1
    entry[0] = 0xFF  # a signed byte: -1 is not above 0
    assert layout.unpack_txn_index_entry(entry).last_stable_offset == 4
    # The raw reader (for dumps) shows versions as stored, unchecked.
    entry[0] = 1
    assert layout.unpack_txn_index(entry)[0].version == 0x0101


@pytest.mark.parametrize("field", range(4))
def test_txn_index_fields_outside_int64_are_refused(field: int) -> None:
    values = [0, 0, 0, 0]
    values[field] = 2**63
    name = ("producer_id", "first_offset", "last_offset", "last_stable_offset")[field]
    with pytest.raises(ValueError, match=f"{name}={2**63} does not fit int64"):
        layout.pack_txn_index_entry(*values)


# --- §6 producer snapshot --------------------------------------------------------------------

snapshot_entries = st.lists(
    st.builds(
        layout.ProducerSnapshotEntry,
        int64s, st.integers(-(2**15), 2**15 - 1), int32s, int64s, int32s, int64s, int32s, int64s,
    ),
    max_size=8,
)


def test_producer_snapshot_layout_is_the_reference() -> None:
    # Spec §1.7: int16 version, uint32 crc, int32 count, then 46-byte entries.
    assert layout.PRODUCER_SNAPSHOT_HEADER.size == 10
    assert layout.PRODUCER_SNAPSHOT_ENTRY.size == 46
    assert layout.PRODUCER_SNAPSHOT_CRC_START == 6
    entry = layout.ProducerSnapshotEntry(7, 1, 41, 100, 2, 1700000000000, -1, -1)
    data = layout.pack_producer_snapshot([entry])
    assert data[:2] == b"\x00\x01" and data[6:10] == b"\x00\x00\x00\x01"
    assert data[10:] == struct.pack(">qhiqiqiq", *entry)
    assert int.from_bytes(data[2:6], "big") == crc32c(data[6:])


@given(entries=snapshot_entries, extra=st.binary(max_size=10))
def test_producer_snapshots_round_trip(
    entries: list[layout.ProducerSnapshotEntry], extra: bytes
) -> None:
    data = layout.pack_producer_snapshot(entries)
    snapshot = layout.unpack_producer_snapshot(data, verify_crc=True)
    assert snapshot.version == layout.PRODUCER_SNAPSHOT_VERSION
    assert snapshot.entries == entries
    # Bytes past the declared entries are not read (but are covered by the CRC).
    assert layout.unpack_producer_snapshot(data + extra, verify_crc=False).entries == entries


def test_damaged_producer_snapshots() -> None:
    entry = layout.ProducerSnapshotEntry(1, 0, 5, 100, 2, 3, -1, -1)
    data = layout.pack_producer_snapshot([entry, entry])
    with pytest.raises(CorruptSnapshotError, match=r"^producer snapshot is truncated \(9 bytes\)$"):
        layout.unpack_producer_snapshot(data[:9], verify_crc=False)
    with pytest.raises(
        CorruptSnapshotError, match=r"^producer snapshot declares 2 entries but holds 101 bytes$"
    ):
        layout.unpack_producer_snapshot(data[:-1], verify_crc=False)
    negative = data[:6] + struct.pack(">i", -1) + data[10:]
    with pytest.raises(CorruptSnapshotError, match="declares -1 entries"):
        layout.unpack_producer_snapshot(negative, verify_crc=False)
    flipped = bytearray(data)
    flipped[-1] ^= 1
    assert layout.unpack_producer_snapshot(flipped, verify_crc=False).entries[1] != entry
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        layout.unpack_producer_snapshot(flipped, verify_crc=True)
    # Kafka's readSnapshot knows version 1 only, CRC or not.
    for version in (0, 2, -1):
        other = struct.pack(">h", version) + data[2:]
        with pytest.raises(
            CorruptSnapshotError, match=f"^Snapshot contained an unknown file version {version}$"
        ):
            layout.unpack_producer_snapshot(other, verify_crc=False)


# --- §7 offset checkpoint text ---------------------------------------------------------------

# The example of the reference, §1.8, byte for byte as Kafka writes it.
KAFKA_EXAMPLE = b"0\n2\norders 0 1234\norders 1 0\n"


def test_file_names_and_version_are_kafkas() -> None:
    assert layout.RECOVERY_POINT_CHECKPOINT_FILE == "recovery-point-offset-checkpoint"
    assert layout.LOG_START_OFFSET_CHECKPOINT_FILE == "log-start-offset-checkpoint"
    assert layout.OFFSET_CHECKPOINT_VERSION == 0


def test_kafkas_example_both_ways() -> None:
    entries = {("orders", 0): 1234, ("orders", 1): 0}
    assert layout.parse_offset_checkpoint(KAFKA_EXAMPLE) == entries
    # Given out of order: lines come out sorted by (topic, partition).
    assert layout.format_offset_checkpoint({("orders", 1): 0, ("orders", 0): 1234}) == KAFKA_EXAMPLE


def test_format_sorts_by_topic_then_partition_numerically() -> None:
    text = layout.format_offset_checkpoint({("b", 10): 1, ("b", 9): 2, ("a", 100): 3})
    assert text == b"0\n3\na 100 3\nb 9 2\nb 10 1\n"
    assert layout.format_offset_checkpoint({}) == b"0\n0\n"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", {}),  # empty file
        (b"0", {}),  # only the version line, no newline
        (b"0\n", {}),  # only the version line
        (b"0\n0\n", {}),
        (b"0\n0", {}),  # no final newline
        (b"0\n1\nt 0 5", {("t", 0): 5}),  # last entry without a newline
        (b"0\r\n1\r\nt 0 5\r\n", {("t", 0): 5}),  # CRLF, as readLine accepts
        (b"0\r1\rt 0 5\r", {("t", 0): 5}),  # lone CR
        (b"0\n1\nt\t0   5\n", {("t", 0): 5}),  # any whitespace run separates fields
        (b"0\n1\nt 0 5  \n", {("t", 0): 5}),  # trailing whitespace (Java drops trailing "")
        (b"+0\n+1\nt +3 -7\n", {("t", 3): -7}),  # parseInt/parseLong accept signs
        (b"0\n2\nt 0 5\nt 0 9\n", {("t", 0): 9}),  # a repeated partition: the last line wins
        (b"0\n1\nt 2147483647 9223372036854775807\n", {("t", 2147483647): 2**63 - 1}),
        (b"0\n1\nt 0 -9223372036854775808\n", {("t", 0): -(2**63)}),
        (b"0\n1\nt 0 0000000000000000000000001\n", {("t", 0): 1}),  # leading zeros parse
        ("0\n1\nt\u00e9 0 1\n".encode(), {("t\u00e9", 0): 1}),  # UTF-8, not validated on read
    ],
)
def test_parses_what_kafka_reads(content: bytes, expected: dict) -> None:
    assert layout.parse_offset_checkpoint(content) == expected
    assert layout.parse_offset_checkpoint(memoryview(content)) == expected


@pytest.mark.parametrize(
    ("content", "line_number", "fragment"),
    [
        (b"1\n0\n", 1, "Unrecognised version 1"),  # version mismatch
        (b"-1\n", 1, "Unrecognised version -1"),
        (b"x\n0\n", 1, "'x' is not a decimal integer"),  # version not an int
        (b"\n0\n", 1, "'' is not a decimal integer"),  # empty first line
        (b" 0\n0\n", 1, "' 0' is not a decimal integer"),  # parseInt takes no spaces
        (b"0\nx\n", 2, "'x' is not a decimal integer"),  # count not an int
        (b"0\n\n", 2, "'' is not a decimal integer"),
        (b"0\n1_0\n", 2, "'1_0' is not a decimal integer"),  # Python's int() would take it
        ("0\n\u0661\n".encode(), 2, "is not a decimal integer"),  # Arabic-Indic one
        (b"0\n-1\n", 2, "the entry count is negative"),
        (b"0\n2147483648\n", 2, "outside"),  # count over a Java int
        (b"0\n1\norders 0\n", 3, "found 2 fields"),  # too few fields
        (b"0\n1\norders 0 1 2\n", 3, "found 4 fields"),  # too many
        (b"0\n1\n orders 0 1\n", 3, "found 4 fields"),  # leading space: Java keeps a leading ""
        (b"0\n1\n\n", 3, "found 1 fields"),  # empty entry line
        (b"0\n1\norders x 1\n", 3, "'x' is not a decimal integer"),  # partition not an int
        (b"0\n1\norders 0 x\n", 3, "'x' is not a decimal integer"),  # offset not a long
        (b"0\n1\norders 2147483648 1\n", 3, "outside"),  # partition over a Java int
        (b"0\n1\norders 0 9223372036854775808\n", 3, "outside"),  # offset over a Java long
        (b"0\n1\norders 0 " + b"9" * 5000 + b"\n", 3, "far too large"),  # no int() blow-up
        (b"0\n2\na 0 1\nb 0 2\nc\n", 5, "found 1 fields"),  # the error names the bad line
    ],
)
def test_malformed_text_names_the_line(content: bytes, line_number: int, fragment: str) -> None:
    with pytest.raises(CorruptOffsetCheckpointError) as info:
        layout.parse_offset_checkpoint(content)
    error = info.value
    assert fragment in str(error)
    assert error.line_number == line_number
    if line_number > 1:
        assert f"line {line_number}" in str(error)
    assert len(str(error)) < 400  # a 5000-digit line is quoted cut short


@pytest.mark.parametrize(
    ("content", "expected", "found"),
    [
        (b"0\n3\na 0 1\nb 0 2\n", 3, 2),  # fewer entries than the count
        (b"0\n1\na 0 1\nb 0 2\n", 1, 2),  # more entries than the count
        (b"0\n1\n", 1, 0),
    ],
)
def test_entry_count_mismatch(content: bytes, expected: int, found: int) -> None:
    with pytest.raises(CorruptOffsetCheckpointError) as info:
        layout.parse_offset_checkpoint(content)
    assert str(info.value) == f"Expected [{expected}] entries, but found [{found}]"
    assert info.value.line_number is None


def test_bytes_that_are_not_utf8() -> None:
    with pytest.raises(CorruptOffsetCheckpointError) as info:
        layout.parse_offset_checkpoint(b"0\n1\nt\xff 0 1\n")
    assert str(info.value) == "not UTF-8 text: byte 5 of 11 is 0xff"
    assert info.value.line_number is None


def test_format_refuses_what_could_not_be_read_back() -> None:
    bad_entries = [
        ({("has space", 0): 1}, InvalidTopicNameError),
        ({("new\nline", 0): 1}, InvalidTopicNameError),
        ({("", 0): 1}, InvalidTopicNameError),
        ({("t", -1): 1}, ValueError),
        ({("t", 2**31): 1}, ValueError),
        ({("t", True): 1}, ValueError),
        ({("t", 0): 2**63}, ValueError),
        ({("t", 0): 1.5}, ValueError),
    ]
    for entries, error in bad_entries:
        with pytest.raises(error):
            layout.format_offset_checkpoint(entries)


@given(
    entries=st.dictionaries(
        st.tuples(valid_topics, st.integers(0, INT_MAX)), int64s, max_size=30
    )
)
def test_checkpoint_text_round_trip(entries: dict) -> None:
    data = layout.format_offset_checkpoint(entries)
    assert layout.parse_offset_checkpoint(data) == entries
    lines = data.decode("utf-8").split("\n")
    # Kafka's layout: version, count, one "<topic> <partition> <offset>" line each, final "\n".
    assert lines[0] == "0"
    assert lines[1] == str(len(entries))
    assert lines[-1] == ""
    assert len(lines) == len(entries) + 3


@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_give_entries_or_a_corrupt_checkpoint_error(data: bytes) -> None:
    try:
        result = layout.parse_offset_checkpoint(data)
    except CorruptOffsetCheckpointError as error:
        assert error.line_number is None or error.line_number >= 1
    else:
        assert isinstance(result, dict)


# --- one definition, many readers ------------------------------------------------------------


def test_storage_and_cli_read_with_the_layout_objects() -> None:
    # Agreement by construction: the engine and dump-log import these objects rather than
    # defining their own (the Spark reader's counterpart is in tests/spark/test_files.py).
    from stratalog.cli import dump_log
    from stratalog.server.storage import (
        checkpoints,
        files,
        log_manager,
        offset_index,
        recovery,
        time_index,
        topic_names,
        txn_index,
    )

    assert checkpoints.parse_offset_checkpoint is layout.parse_offset_checkpoint
    assert checkpoints.format_offset_checkpoint is layout.format_offset_checkpoint
    assert offset_index.OFFSET_INDEX_ENTRY is dump_log.OFFSET_INDEX_ENTRY is layout.OFFSET_INDEX_ENTRY
    assert time_index.TIME_INDEX_ENTRY is dump_log.TIME_INDEX_ENTRY is layout.TIME_INDEX_ENTRY
    assert log_manager.TIME_INDEX_TIMESTAMP is time_index.TIME_INDEX_TIMESTAMP
    assert txn_index.unpack_txn_index_entry is layout.unpack_txn_index_entry
    assert dump_log.unpack_txn_index is layout.unpack_txn_index
    assert dump_log.unpack_producer_snapshot is layout.unpack_producer_snapshot
    assert files.segment_file_name is layout.segment_file_name
    assert recovery.LOG_FILE_SUFFIX is dump_log.LOG_FILE_SUFFIX is layout.LOG_FILE_SUFFIX
    assert topic_names.log_layout is layout  # every name rule goes through the module
    assert log_manager.LOG_START_OFFSET_CHECKPOINT_FILE is layout.LOG_START_OFFSET_CHECKPOINT_FILE


# --- one module per format ----------------------------------------------------------------------

# The modules log_layout maps, each holding one format (or, for entry_field and checkpoint_text,
# what two or three formats share).
FORMAT_MODULES = (
    "file_names", "partition_dirs", "offset_index_file", "time_index_file", "txn_index_file",
    "producer_snapshot", "offset_checkpoint", "leader_epoch_checkpoint", "checkpoint_text",
    "entry_field",
)


@pytest.mark.parametrize("name", FORMAT_MODULES)
def test_each_format_module_opens_with_its_layout(name: str) -> None:
    module = importlib.import_module(f"stratalog.records.{name}")
    opening = "\n".join(module.__doc__.splitlines()[:25])
    # A literal block (the byte or text layout) in the opening, except for the shared pieces,
    # which point at the formats that use them.
    assert "::" in opening or name == "entry_field", opening
    assert name in layout.__doc__  # the map names it


def test_log_layout_re_exports_the_format_modules_names() -> None:
    owners = {}
    for name in FORMAT_MODULES:
        module = importlib.import_module(f"stratalog.records.{name}")
        for exported in module.__all__:
            owners.setdefault(exported, getattr(module, exported))
    for exported in layout.__all__:
        assert getattr(layout, exported) is owners[exported], exported
