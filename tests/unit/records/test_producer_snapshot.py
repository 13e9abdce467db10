"""records.producer_snapshot: the ``.snapshot`` layout, against the reference."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.records import producer_snapshot
from stratalog.records.crc import crc32c
from stratalog.records.errors import (
    CorruptSnapshotError,
)

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
int32s = st.integers(-(2**31), INT_MAX)
int64s = st.integers(-(2**63), LONG_MAX)


snapshot_entries = st.lists(
    st.builds(
        producer_snapshot.ProducerSnapshotEntry,
        int64s, st.integers(-(2**15), 2**15 - 1), int32s, int64s, int32s, int64s, int32s, int64s,
    ),
    max_size=8,
)


def test_producer_snapshot_layout_is_the_reference() -> None:
    # docs/kafka-behaviours.md#producer-snapshots: int16 version, uint32 crc, int32 count, then
    # 46-byte entries.
    assert producer_snapshot.PRODUCER_SNAPSHOT_HEADER.size == 10
    assert producer_snapshot.PRODUCER_SNAPSHOT_ENTRY.size == 46
    assert producer_snapshot.PRODUCER_SNAPSHOT_CRC_START == 6
    entry = producer_snapshot.ProducerSnapshotEntry(7, 1, 41, 100, 2, 1700000000000, -1, -1)
    data = producer_snapshot.pack_producer_snapshot([entry])
    assert data[:2] == b"\x00\x01" and data[6:10] == b"\x00\x00\x00\x01"
    assert data[10:] == struct.pack(">qhiqiqiq", *entry)
    assert int.from_bytes(data[2:6], "big") == crc32c(data[6:])


@given(entries=snapshot_entries, extra=st.binary(max_size=10))
def test_producer_snapshots_round_trip(
    entries: list[producer_snapshot.ProducerSnapshotEntry], extra: bytes
) -> None:
    data = producer_snapshot.pack_producer_snapshot(entries)
    snapshot = producer_snapshot.unpack_producer_snapshot(data, verify_crc=True)
    assert snapshot.version == producer_snapshot.PRODUCER_SNAPSHOT_VERSION
    assert snapshot.entries == entries
    # Bytes past the declared entries are not read (but are covered by the CRC).
    assert producer_snapshot.unpack_producer_snapshot(data + extra, verify_crc=False).entries == entries


def test_damaged_producer_snapshots() -> None:
    entry = producer_snapshot.ProducerSnapshotEntry(1, 0, 5, 100, 2, 3, -1, -1)
    data = producer_snapshot.pack_producer_snapshot([entry, entry])
    with pytest.raises(CorruptSnapshotError, match=r"^producer snapshot is truncated \(9 bytes\)$"):
        producer_snapshot.unpack_producer_snapshot(data[:9], verify_crc=False)
    with pytest.raises(
        CorruptSnapshotError, match=r"^producer snapshot declares 2 entries but holds 101 bytes$"
    ):
        producer_snapshot.unpack_producer_snapshot(data[:-1], verify_crc=False)
    negative = data[:6] + struct.pack(">i", -1) + data[10:]
    with pytest.raises(CorruptSnapshotError, match="declares -1 entries"):
        producer_snapshot.unpack_producer_snapshot(negative, verify_crc=False)
    flipped = bytearray(data)
    flipped[-1] ^= 1
    assert producer_snapshot.unpack_producer_snapshot(flipped, verify_crc=False).entries[1] != entry
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        producer_snapshot.unpack_producer_snapshot(flipped, verify_crc=True)
    # Kafka's readSnapshot knows version 1 only, CRC or not.
    for version in (0, 2, -1):
        other = struct.pack(">h", version) + data[2:]
        with pytest.raises(
            CorruptSnapshotError, match=f"^Snapshot contained an unknown file version {version}$"
        ):
            producer_snapshot.unpack_producer_snapshot(other, verify_crc=False)
