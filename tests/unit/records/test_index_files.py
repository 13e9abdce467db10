"""records.offset_index_file, time_index_file, txn_index_file: the index entries, against the
reference examples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records import offset_index_file, time_index_file, txn_index_file
from stratalog.records.errors import (
    CorruptIndexEntryError,
)

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
int32s = st.integers(-(2**31), INT_MAX)
int64s = st.integers(-(2**63), LONG_MAX)


def test_offset_index_entry_is_the_reference_example() -> None:
    # docs/kafka-behaviours.md#index-files: base offset 100, entry (offset 105, position 4096).
    data = offset_index_file.OFFSET_INDEX_ENTRY.pack(105 - 100, 4096)
    assert data == bytes.fromhex("0000000500001000")
    assert offset_index_file.OFFSET_INDEX_ENTRY.size == 8
    assert offset_index_file.unpack_offset_index(data) == [offset_index_file.OffsetIndexEntry(5, 4096)]
    assert offset_index_file.OFFSET_INDEX_RELATIVE_OFFSET.read(data) == 5
    assert offset_index_file.OFFSET_INDEX_POSITION.read(data) == 4096


def test_time_index_entry_is_the_reference_example() -> None:
    # docs/kafka-behaviours.md#index-files: base offset 100, entry (timestamp 1700000000000, offset
    # 105).
    data = time_index_file.TIME_INDEX_ENTRY.pack(1700000000000, 105 - 100)
    assert data == bytes.fromhex("0000018bcfe5680000000005")
    assert time_index_file.TIME_INDEX_ENTRY.size == 12
    assert time_index_file.unpack_time_index(data) == [time_index_file.TimeIndexEntry(1700000000000, 5)]
    assert time_index_file.TIME_INDEX_TIMESTAMP.read(data) == 1700000000000
    assert time_index_file.TIME_INDEX_RELATIVE_OFFSET.read(data) == 5


@given(entries=st.lists(st.tuples(int32s, int32s), max_size=20), tail=st.binary(max_size=7))
def test_offset_index_entries_round_trip_and_a_partial_tail_is_ignored(
    entries: list[tuple[int, int]], tail: bytes
) -> None:
    data = b"".join(offset_index_file.OFFSET_INDEX_ENTRY.pack(*entry) for entry in entries)
    assert offset_index_file.unpack_offset_index(data + tail) == entries
    for slot, (relative, position) in enumerate(entries):
        start = slot * offset_index_file.OFFSET_INDEX_ENTRY.size
        assert offset_index_file.OFFSET_INDEX_RELATIVE_OFFSET.read(data, start) == relative
        assert offset_index_file.OFFSET_INDEX_POSITION.read(data, start) == position


@given(entries=st.lists(st.tuples(int64s, int32s), max_size=20), tail=st.binary(max_size=11))
def test_time_index_entries_round_trip_and_a_partial_tail_is_ignored(
    entries: list[tuple[int, int]], tail: bytes
) -> None:
    data = b"".join(time_index_file.TIME_INDEX_ENTRY.pack(*entry) for entry in entries)
    assert time_index_file.unpack_time_index(memoryview(data + tail)) == entries
    for slot, (timestamp, relative) in enumerate(entries):
        start = slot * time_index_file.TIME_INDEX_ENTRY.size
        assert time_index_file.TIME_INDEX_TIMESTAMP.read(data, start) == timestamp
        assert time_index_file.TIME_INDEX_RELATIVE_OFFSET.read(data, start) == relative


# --- §5 transaction index entries ------------------------------------------------------------


def test_txn_index_entry_is_the_reference_example() -> None:
    # docs/kafka-behaviours.md#transaction-index: AbortedTxn(pid=983493, first=137, last=299,
    # lso=200).
    data = txn_index_file.pack_txn_index_entry(983493, 137, 299, 200)
    assert data == bytes.fromhex(
        "000000000000000f01c50000000000000089000000000000012b00000000000000c8"
    )
    assert txn_index_file.TXN_INDEX_ENTRY.size == len(data) == 34
    assert txn_index_file.unpack_txn_index_entry(data) == txn_index_file.TxnIndexEntry(0, 983493, 137, 299, 200)


@given(fields=st.tuples(int64s, int64s, int64s, int64s), start=st.integers(0, 40))
def test_txn_index_entries_round_trip(fields: tuple[int, int, int, int], start: int) -> None:
    buffer = bytes(start) + txn_index_file.pack_txn_index_entry(*fields)
    assert txn_index_file.unpack_txn_index_entry(buffer, start) == (0, *fields)
    assert txn_index_file.unpack_txn_index(buffer[start:] + bytes(33)) == [(0, *fields)]


def test_txn_index_version_is_kafkas_first_byte() -> None:
    entry = bytearray(txn_index_file.pack_txn_index_entry(1, 2, 3, 4))
    entry[1] = 1  # 0x0001: Kafka reads byte 0 only, so this is version 0
    assert txn_index_file.unpack_txn_index_entry(entry).producer_id == 1
    entry[0] = 1
    with pytest.raises(CorruptIndexEntryError, match="version 1") as caught:
        txn_index_file.unpack_txn_index_entry(bytes(34) + entry, 34)
    assert caught.value.version == 1
    entry[0] = 0xFF  # a signed byte: -1 is not above 0
    assert txn_index_file.unpack_txn_index_entry(entry).last_stable_offset == 4
    # The raw reader (for dumps) shows versions as stored, unchecked.
    entry[0] = 1
    assert txn_index_file.unpack_txn_index(entry)[0].version == 0x0101


@pytest.mark.parametrize("field", range(4))
def test_txn_index_fields_outside_int64_are_refused(field: int) -> None:
    values = [0, 0, 0, 0]
    values[field] = 2**63
    name = ("producer_id", "first_offset", "last_offset", "last_stable_offset")[field]
    with pytest.raises(ValueError, match=f"{name}={2**63} does not fit int64"):
        txn_index_file.pack_txn_index_entry(*values)
