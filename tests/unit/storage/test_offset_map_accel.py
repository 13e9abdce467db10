"""The offset map's C loops (records/_speedups.c) against its pure-Python reference.

Two maps of the same size take the same regions, one through ``map_put_records`` /
``map_retain_records`` in C, the other through the per-key ``put``/``get`` over decoded columns
(``accelerated=False``): their results, counters and slot tables must be equal byte for byte.
The extension is required here, as in tests/unit/records/test_accel.py: without it these tests
fail rather than compare the reference with itself, unless ``STRATALOG_PURE_PYTHON=1`` asks for
the pure-Python codec on purpose.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.records import accel
from stratalog.records.errors import CorruptRecordError
from stratalog.records.key_digest import DIGEST_BYTES, key_digest, key_digest_reference
from stratalog.records.record import encode_record
from stratalog.server.storage.offset_map import SLOT_BYTES, OffsetMap

FORCED_PURE_PYTHON = os.environ.get(accel.PURE_PYTHON_ENV, "") not in ("", "0")

Record = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def region(records: list[Record]) -> bytes:
    """A records region of ``(offset_delta, key, value, headers)`` records, in order."""
    out = bytearray()
    for offset_delta, key, value, headers in records:
        encode_record(out, offset_delta, 0, key, value, headers)
    return bytes(out)


def both(memory_bytes: int, load_factor: float = 0.9) -> tuple[OffsetMap, OffsetMap]:
    """A map running the C loops and one running the reference."""
    c_map = OffsetMap(memory_bytes, load_factor)
    py_map = OffsetMap(memory_bytes, load_factor, accelerated=False)
    assert py_map._put_records_c is None
    assert (c_map._put_records_c is None) == FORCED_PURE_PYTHON, "the C extension is not built"
    return c_map, py_map


def assert_same(c_map: OffsetMap, py_map: OffsetMap) -> None:
    assert c_map.entries == py_map.entries
    assert c_map.latest_offset == py_map.latest_offset
    assert bytes(c_map._buffer) == bytes(py_map._buffer)


@given(st.binary(max_size=200))
def test_key_digest_in_c_equals_the_reference(key: bytes) -> None:
    assert key_digest(key) == key_digest_reference(key)
    assert len(key_digest(key)) == DIGEST_BYTES


def test_the_empty_key_has_a_digest_that_is_not_an_empty_slot() -> None:
    # Seed 0 would hash b"" to sixteen zero bytes, which the table reads as an empty slot.
    assert key_digest(b"") != bytes(DIGEST_BYTES)
    assert key_digest_reference(b"") == key_digest(b"")
    for offset_map in both(SLOT_BYTES * 8):
        offset_map.put_records(region([(0, b"", b"v", ()), (1, b"", b"w", ())]), 2, 10, 0)
        assert offset_map.get(b"") == 11
        assert offset_map.entries == 1


keys = st.sampled_from([b"", b"a", b"b", b"key-1", b"key-2", b"x" * 17, b"y" * 40]) | st.binary(
    max_size=24
)
headers = st.lists(
    st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2
).map(tuple)
records_strategy = st.lists(
    st.tuples(st.none() | keys, st.none() | st.binary(max_size=8), headers),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(
    batches=st.lists(
        st.tuples(records_strategy, st.lists(st.integers(0, 3), min_size=12, max_size=12)),
        min_size=1, max_size=6,
    ),
    slots=st.integers(1, 12),
    load_factor=st.sampled_from([0.5, 0.9, 1.0]),
    start=st.integers(0, 40),
    probe_latest=st.integers(-1, 200),
    retain_deletes=st.booleans(),
)
def test_c_loops_equal_the_reference(batches, slots, load_factor, start, probe_latest,
                                     retain_deletes) -> None:
    c_map, py_map = both(slots * SLOT_BYTES + 5, load_factor)
    base_offset = 0
    regions = []
    for batch_records, gaps in batches:
        # Offset deltas with holes, as a cleaned batch's.
        deltas, delta = [], 0
        for gap in gaps[:len(batch_records)]:
            deltas.append(delta)
            delta += 1 + gap
        data = region([(d, k, v, h) for d, (k, v, h) in zip(deltas, batch_records, strict=True)])
        regions.append((data, len(batch_records), base_offset))
        full_c = c_map.put_records(data, len(batch_records), base_offset, start)
        full_py = py_map.put_records(data, len(batch_records), base_offset, start)
        assert full_c == full_py
        assert_same(c_map, py_map)
        base_offset += delta + 3
        if full_c:
            break
    for data, count, base in regions:
        for latest in (c_map.latest_offset, probe_latest):
            mask = c_map.retain_mask(data, count, base, latest, retain_deletes)
            assert mask == py_map.retain_mask(data, count, base, latest, retain_deletes)
            assert len(mask) == count and set(mask) <= {0, 1}


def test_a_full_map_stops_at_the_first_new_key_it_cannot_take() -> None:
    data = region([(i, f"k{i}".encode(), b"v", ()) for i in range(5)])
    for offset_map in both(SLOT_BYTES * 4, 0.75):  # three keys at most
        assert offset_map.put_records(data, 5, 100, 0) is True
        assert offset_map.entries == 3
        assert offset_map.latest_offset == 102
        assert offset_map.get(b"k3") == -1
        # A key already in the map is still updated when the map is full.
        assert offset_map.put_records(region([(0, b"k1", b"w", ())]), 1, 200, 0) is False
        assert offset_map.get(b"k1") == 200


def test_retain_mask_decides_as_the_cleaner_does() -> None:
    data = region([
        (0, b"a", b"old", ()),   # 10: a newer 'a' is mapped: drop
        (1, b"a", b"new", ()),   # 11: the mapped one: keep
        (2, None, b"v", ()),     # 12: no key: drop
        (3, b"t", None, ()),     # 13: the latest 't', a tombstone: kept only with retain_deletes
        (4, b"z", b"v", ()),     # 14: past the mapped section: keep
    ])
    for offset_map in both(SLOT_BYTES * 16):
        mapped = region([(0, b"a", b"x", ()), (1, b"a", b"y", ()), (3, b"t", None, ())])
        offset_map.put_records(mapped, 3, 10, 0)
        assert offset_map.latest_offset == 13
        assert offset_map.retain_mask(data, 5, 10, 13, False) == bytes([0, 1, 0, 0, 1])
        assert offset_map.retain_mask(data, 5, 10, 13, True) == bytes([0, 1, 0, 1, 1])


@pytest.mark.parametrize("cut", [1, 3, 7])
def test_a_corrupt_region_raises_the_decoders_error(cut: int) -> None:
    data = region([(0, b"a", b"value", ()), (1, b"b", b"value", ())])
    for offset_map in both(SLOT_BYTES * 16):
        with pytest.raises(CorruptRecordError):
            offset_map.put_records(data[:-cut], 2, 0, 0)
        with pytest.raises(CorruptRecordError):
            offset_map.retain_mask(data[:-cut], 2, 0, 10, False)
        with pytest.raises(CorruptRecordError):  # more records declared than the region holds
            offset_map.retain_mask(data, 3, 0, 10, False)


def test_offsets_near_the_int64_end_take_the_reference_path_with_the_same_result() -> None:
    base = 2**63 - 10  # base + a delta could overflow int64 in C: the reference decides there
    data = region([(0, b"a", b"v", ()), (5, b"b", None, ())])
    c_map, py_map = both(SLOT_BYTES * 16)
    for offset_map in (c_map, py_map):
        assert offset_map.put_records(data, 2, base, 0) is False
    assert_same(c_map, py_map)
    assert c_map.get(b"b") == base + 5
    assert c_map.retain_mask(data, 2, base, base + 5, False) == bytes([1, 0])
    assert py_map.retain_mask(data, 2, base, base + 5, False) == bytes([1, 0])
