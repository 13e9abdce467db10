"""records/consumer_offsets.py offset_commit_rows: the C reader of a batch's offset commits
(records/_speedups.c) against its pure-Python reference (the schema readers), on valid records
of every key and value version, tombstones, other record types, and damaged ones (truncated,
trailing bytes, flipped bytes, invalid UTF-8, negative lengths): the same rows, the same None
where the reader leaves a record to the schema readers; and where it does, decode_record
raises or the record is not an offset commit (so the error a load logs is the schema readers'
in both cases)."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.records import accel
from stratalog.records.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_record,
    encode_key,
    encode_value,
    offset_commit_rows,
    offset_commit_rows_reference,
)
from stratalog.records.errors import CorruptMessageError
from stratalog.server.groups import CommittedOffset

needs_c = pytest.mark.skipif(accel.offset_commit_rows_c is None,
                             reason="the C extension is not built")

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
NAMES = st.text(max_size=12) | st.sampled_from(["g", "group-1", "t", "ü", "日本"])


def offset_key(group: str, topic: str, partition: int, record_type: int = 1) -> bytes:
    key = encode_key(OffsetCommitKey(group, topic, partition))
    return record_type.to_bytes(2, "big") + key[2:]


@st.composite
def records(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    """A key and value: an offset commit of any key type and value version (or a tombstone),
    a group metadata record, or random bytes; then maybe damaged."""
    kind = draw(st.sampled_from(["commit", "commit", "commit", "tombstone", "group", "random"]))
    key: bytes | None
    value: bytes | None
    if kind == "random":
        key = draw(st.none() | st.binary(max_size=24))
        value = draw(st.none() | st.binary(max_size=40))
    elif kind == "group":
        key = encode_key(GroupMetadataKey(draw(NAMES)))
        value = encode_value(GroupMetadataValue("consumer", 1, "range", "m", 5))
    else:
        key = offset_key(draw(NAMES), draw(NAMES), draw(INT32), draw(st.sampled_from([0, 1])))
        value = None if kind == "tombstone" else encode_value(OffsetCommitValue(
            offset=draw(INT64), metadata=draw(NAMES), commit_timestamp_ms=draw(INT64),
            leader_epoch=draw(INT32), expire_timestamp_ms=draw(INT64),
        ), draw(st.integers(0, 4)))
    damage = draw(st.sampled_from(["none", "none", "truncate", "trail", "flip", "utf8"]))
    target = draw(st.sampled_from(["key", "value"]))
    data = key if target == "key" else value
    if data is not None and damage != "none":
        if damage == "truncate":
            data = data[:draw(st.integers(0, max(len(data) - 1, 0)))]
        elif damage == "trail":
            data = data + draw(st.binary(min_size=1, max_size=8))
        elif damage == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
        elif damage == "utf8" and len(data) > 4:
            i = draw(st.integers(4, len(data) - 1))
            data = data[:i] + b"\xff" + data[i + 1:]
        if target == "key":
            key = data
        else:
            value = data
    return key, value


def both(offsets: list[int], keys: list[Any], values: list[Any]) -> list[Any]:
    """The rows of the reader that runs, checked equal to the reference's (and to C's)."""
    expected = offset_commit_rows_reference(offsets, keys, values, CommittedOffset)
    assert offset_commit_rows(offsets, keys, values, CommittedOffset) == expected
    if accel.offset_commit_rows_c is not None:
        rows = accel.offset_commit_rows_c(offsets, keys, values, CommittedOffset)
        assert rows == expected
        assert [None if r is None else tuple(map(type, (r[0], *r[1], r[2]))) for r in rows] == [
            None if r is None else tuple(map(type, (r[0], *r[1], r[2]))) for r in expected]
    return expected


def check_against_decode_record(rows: list[Any], keys: list[Any], values: list[Any]) -> None:
    """A row is what decode_record reads; a None row is an error of decode_record, another
    record type, or a value version the reader leaves alone (4)."""
    for row, key, value in zip(rows, keys, values, strict=True):
        try:
            decoded = decode_record(key, value)
        except CorruptMessageError:
            assert row is None
            continue
        if row is None:
            assert not isinstance(decoded.key, OffsetCommitKey) or decoded.value_version == 4
            continue
        group, (topic, partition), committed = row
        assert decoded.key == OffsetCommitKey(group, topic, partition)
        if committed is None:
            assert decoded.value is None
        else:
            assert type(committed) is CommittedOffset
            assert decoded.value == OffsetCommitValue(
                committed.offset, committed.metadata, committed.commit_timestamp_ms,
                committed.leader_epoch, committed.expire_timestamp_ms)


@settings(max_examples=400, deadline=None)
@given(st.lists(records(), max_size=8))
def test_c_and_reference_agree_on_random_and_damaged_records(
    batch: list[tuple[bytes | None, bytes | None]],
) -> None:
    offsets = [1000 + 3 * i for i in range(len(batch))]
    keys = [k for k, _ in batch]
    values = [v for _, v in batch]
    rows = both(offsets, keys, values)
    check_against_decode_record(rows, keys, values)
    for offset, row in zip(offsets, rows, strict=True):
        if row is not None and row[2] is not None:
            assert row[2].record_offset == offset


KEY = offset_key("g", "t", 0)
VALUE = encode_value(OffsetCommitValue(100, "", 1_700_000_000_000))
assert VALUE is not None


@pytest.mark.parametrize(("key", "value", "handled"), [
    (KEY, VALUE, True),
    (KEY, None, True),
    (KEY + b"extra", VALUE + b"extra", True),  # bytes after a message are ignored
    (KEY[:-1], VALUE, False),  # the partition cut short
    (KEY, VALUE[:-1], False),  # the commit timestamp cut short
    (KEY[:1], VALUE, False),  # not even a record type
    (KEY, VALUE[:1], False),
    (b"\x00\x01\xff\xff" + KEY[5:], VALUE, False),  # a null group
    (b"\x00\x01\x00\x01\xff" + KEY[5:], VALUE, False),  # the group not UTF-8
    (b"\x00\x02" + KEY[2:], VALUE, False),  # another record type
    (b"\x00\x63" + KEY[2:], VALUE, False),  # an unknown one
    (KEY, b"\x00\x04" + VALUE[2:], False),  # version 4: the schema readers'
    (KEY, b"\x00\x05" + VALUE[2:], False),  # no such version
    (KEY, b"\xff\xff" + VALUE[2:], False),
    (None, VALUE, False),
    (bytearray(KEY), VALUE, False),  # not bytes: left alone
])
def test_edge_cases(key: Any, value: Any, handled: bool) -> None:
    rows = both([7], [key], [value])
    assert (rows[0] is not None) == handled
    if type(key) is bytes or key is None:
        check_against_decode_record(rows, [key], [value])


def test_every_value_version_reads_its_fields() -> None:
    value = OffsetCommitValue(5, "meta", 1700, leader_epoch=3, expire_timestamp_ms=99)
    rows = both([1, 2, 3, 4], [KEY] * 4, [encode_value(value, v) for v in range(4)])
    assert [r[2][:5] for r in rows] == [
        (5, -1, "meta", 1700, -1),  # v0: no leader epoch, no expiry
        (5, -1, "meta", 1700, 99),  # v1: the expiry
        (5, -1, "meta", 1700, -1),  # v2
        (5, 3, "meta", 1700, -1),  # v3: the leader epoch
    ]


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="must have one length"):
        offset_commit_rows([1], [KEY, KEY], [VALUE, VALUE], CommittedOffset)
    with pytest.raises(ValueError, match="must have one length"):
        offset_commit_rows_reference([1], [KEY, KEY], [VALUE, VALUE], CommittedOffset)
    if accel.offset_commit_rows_c is not None:
        with pytest.raises(TypeError, match="value_type must be a tuple subclass"):
            accel.offset_commit_rows_c([1], [KEY], [VALUE], dict)
        with pytest.raises(TypeError, match="must be lists"):
            accel.offset_commit_rows_c((1,), (KEY,), (VALUE,), CommittedOffset)
        with pytest.raises(TypeError, match="partitions must be a dict or None"):
            accel.offset_commit_rows_c([1], [KEY], [VALUE], CommittedOffset, [])


@needs_c
def test_c_shares_strings_and_leaves_rows_to_no_collection() -> None:
    keys = [offset_key("group", "topic", p) for p in range(3)] + [offset_key("other", "topic", 0)]
    rows = accel.offset_commit_rows_c([0, 1, 2, 3], keys, [VALUE] * 4, CommittedOffset)
    assert rows[0][0] is rows[1][0] is rows[2][0]  # one group string for its run of keys
    assert rows[0][1][0] is rows[3][1][0]  # and one topic string across groups
    assert rows[0][2].commit_timestamp_ms is rows[3][2].commit_timestamp_ms
    for row in rows:
        assert not gc.is_tracked(row) and not gc.is_tracked(row[1])
        assert not gc.is_tracked(row[2])


@pytest.mark.parametrize("rows_of", [offset_commit_rows, offset_commit_rows_reference])
def test_the_partitions_memo_shares_one_tuple_per_partition_across_calls(rows_of: Any) -> None:
    partitions: dict[tuple[str, int], tuple[str, int]] = {}
    first = rows_of([0, 1], [offset_key("g", "t", 1), offset_key("g", "t", 2)], [VALUE, None],
                    CommittedOffset, partitions)
    second = rows_of([2, 3], [offset_key("h", "t", 1), b"\x00\x02junk"], [VALUE, VALUE],
                     CommittedOffset, partitions)
    assert first[0][1] == ("t", 1) and second[0][1] is first[0][1]
    assert second[1] is None
    assert partitions == {("t", 1): ("t", 1), ("t", 2): ("t", 2)}
    assert first == rows_of([0, 1], [offset_key("g", "t", 1), offset_key("g", "t", 2)],
                            [VALUE, None], CommittedOffset)


@pytest.mark.parametrize("memo", [None, {}])
def test_rows_own_their_objects_and_nothing_else_holds_them(memo: Any) -> None:
    # A reference counted once too often would keep every load's strings forever.
    keys = [offset_key("group", "topic-\u00fc", 300 + p) for p in range(3)]
    value = encode_value(OffsetCommitValue(1 << 40, "meta-\u00fc", 1 << 41, 7))
    rows = offset_commit_rows([int("4398046511104"), 1, 2], keys, [value, value, None], CommittedOffset,
                              memo)
    fields = (rows[0][0], *rows[0][1], *rows[0][2])
    del rows
    if memo is not None:
        memo.clear()
    # (group, topic, partition, offset, leader_epoch, metadata, commit_timestamp_ms,
    # expire_timestamp_ms, record_offset): all but the small ints held by ``fields`` alone,
    # as a fresh string in a tuple is.
    control = ("".join(["fresh", "-", "string"]),)
    expected = sys.getrefcount(control[0])
    counts = {index: sys.getrefcount(fields[index]) for index in (0, 1, 2, 3, 5, 6, 8)}
    assert counts == dict.fromkeys(counts, expected), fields
