"""The ``.snapshot`` files a PartitionLog writes, read back by a parser written from the
reference alone (docs/kafka-behaviours.md#producer-snapshots), not by ``records.log_layout``'s
codec.

Every field of an entry is checked by name, after idempotent appends, commits, aborts, epoch
bumps (by a data batch and by a fencing marker), an open transaction and an expiry, in the
snapshots written on roll and on clean close; and the file name is the snapshot's end offset.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.storage import PartitionLog

T0 = 1_700_000_000_000
DAY_MS = 86_400_000

# docs/kafka-behaviours.md#producer-snapshots: int16 version (= 1) | uint32 crc | int32 entryCount |
# entries x 46 bytes, big-endian.
HEADER = struct.Struct(">hIi")
ENTRY = struct.Struct(">qhiqiqiq")


class SnapshotEntry(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bit by bit."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def parse_snapshot_independently(data: bytes) -> list[SnapshotEntry]:
    """The entries of a ``.snapshot``, after checking its header: version 1, the CRC-32C of
    bytes [6, end) and exactly ``entryCount`` entries of 46 bytes."""
    version, crc, count = HEADER.unpack_from(data, 0)
    assert version == 1
    assert crc == crc32c(data[6:])
    assert HEADER.size == 10 and ENTRY.size == 46
    assert len(data) == 10 + 46 * count
    return [SnapshotEntry(*ENTRY.unpack_from(data, 10 + 46 * slot)) for slot in range(count)]


def read_snapshot(directory: Path, end_offset: int) -> dict[int, SnapshotEntry]:
    """The snapshot named by ``end_offset`` (20 digits), as {producer id: entry}."""
    path = directory / f"{end_offset:020d}.snapshot"
    entries = parse_snapshot_independently(path.read_bytes())
    by_producer = {entry.producer_id: entry for entry in entries}
    assert len(by_producer) == len(entries), "one entry per producer"
    return by_producer


def test_the_parser_checks_the_header_it_reads() -> None:
    body = ENTRY.pack(7, 1, 41, 99, 2, T0, 5, 90)
    good = HEADER.pack(1, crc32c(struct.pack(">i", 1) + body), 1) + body
    assert parse_snapshot_independently(good) == [SnapshotEntry(7, 1, 41, 99, 2, T0, 5, 90)]
    with pytest.raises(AssertionError):
        parse_snapshot_independently(good[:-1])
    with pytest.raises(AssertionError):
        parse_snapshot_independently(good[:-1] + bytes([good[-1] ^ 1]))


class Clock:
    def __init__(self) -> None:
        self.now_ms = T0

    def __call__(self) -> int:
        return self.now_ms


def batch(pid: int, seq: int, count: int, *, epoch: int = 0, txn: bool = False,
          ts: int = T0) -> bytes:
    return build_batch(
        [(ts + i, None, b"v", ()) for i in range(count)],  # max timestamp: ts + count - 1
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn,
    )


def test_every_field_after_commits_aborts_epoch_bumps_and_expiry(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    clock = Clock()
    log = PartitionLog.open(directory, time_ms=clock)
    log.append(batch(1, 0, 3))  # 0-2
    log.append(batch(1, 3, 2, ts=T0 + 50))  # 3-4
    log.append(batch(2, 0, 2, txn=True))  # 5-6
    clock.now_ms = T0 + 10
    log.write_txn_marker(2, 0, coordinator_epoch=3, commit=True)  # 7
    log.append(batch(3, 0, 1, txn=True))  # 8
    clock.now_ms = T0 + 20
    log.write_txn_marker(3, 1, coordinator_epoch=4, commit=False)  # 9: fencing abort, epoch 1
    log.append(batch(4, 0, 3, txn=True, ts=T0 + 30))  # 10-12: left open
    log.append(batch(5, 0, 1, ts=T0 - 2 * DAY_MS))  # 13: idle for two days already
    log.append(batch(6, 0, 2))  # 14-15
    log.append(batch(6, 0, 1, epoch=1, ts=T0 + 40))  # 16: an epoch bump by a data batch
    log.roll()
    first = read_snapshot(directory, 17)
    assert first == {
        # pid: epoch, last seq, last offset, offset delta, timestamp, coordinator epoch, txn
        1: SnapshotEntry(1, 0, 4, 4, 1, T0 + 51, -1, -1),
        2: SnapshotEntry(2, 0, 1, 6, 1, T0 + 10, 3, -1),  # the marker's time; no open txn
        3: SnapshotEntry(3, 1, -1, -1, 0, T0 + 20, 4, -1),  # no batch of the new epoch yet
        4: SnapshotEntry(4, 0, 2, 12, 2, T0 + 32, -1, 10),
        5: SnapshotEntry(5, 0, 0, 13, 0, T0 - 2 * DAY_MS, -1, -1),
        6: SnapshotEntry(6, 1, 0, 16, 0, T0 + 40, -1, -1),
    }
    # A day later every idle producer expires (producer.id.expiration.ms), but producer 4,
    # whose transaction is open; then producer 4 aborts.
    clock.now_ms = T0 + DAY_MS + 100
    assert log.remove_expired_producers() == [1, 2, 3, 5, 6]
    log.append(batch(1, 0, 1, epoch=2, ts=clock.now_ms))  # 17: producer 1 starts over
    log.write_txn_marker(4, 0, coordinator_epoch=0, commit=False)  # 18
    log.close()
    assert sorted(path.name for path in directory.glob("*.snapshot")) == [
        f"{17:020d}.snapshot", f"{19:020d}.snapshot"
    ]
    assert read_snapshot(directory, 19) == {
        1: SnapshotEntry(1, 2, 0, 17, 0, T0 + DAY_MS + 100, -1, -1),
        4: SnapshotEntry(4, 0, 2, 12, 2, T0 + DAY_MS + 100, 0, -1),
    }


def test_a_log_whose_producers_all_expired_closes_with_an_empty_snapshot(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    clock = Clock()
    with PartitionLog.open(directory, time_ms=clock) as log:
        log.append(batch(1, 0, 1))  # 0
        log.roll()
        log.append(build_batch([(T0, None, b"plain", ())]))  # 1
        clock.now_ms = T0 + DAY_MS
        assert log.remove_expired_producers() == [1]
    assert read_snapshot(directory, 1) == {1: SnapshotEntry(1, 0, 0, 0, 0, T0, -1, -1)}
    # Written so that the snapshot at 1 cannot bring producer 1 back at the next open: a
    # header with no entries.
    assert read_snapshot(directory, 2) == {}
    assert len((directory / f"{2:020d}.snapshot").read_bytes()) == 10
