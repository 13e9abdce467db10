"""The producer snapshot file (``.snapshot``, Kafka's ``ProducerSnapshot.json`` v1): a 10-byte
header, then ``entry_count`` entries of 46 bytes, big-endian; the CRC-32C covers bytes [6, end)::

    offset size field                     entry:  offset size field
         0    2 version      int16, 1                  0    8 producer_id               int64
         2    4 crc          uint32                    8    2 producer_epoch            int16
         6    4 entry_count  int32                    10    4 last_sequence             int32
        10      entries                               14    8 last_offset               int64
                                                      22    4 offset_delta              int32
                                                      26    8 timestamp                 int64
                                                      34    4 coordinator_epoch         int32
                                                      38    8 current_txn_first_offset  int64

A snapshot named ``<20-digit offset>.snapshot`` holds the producer state as of (exclusive) that
offset. The storage engine writes and loads it (``server/storage/producer_state.py``); the Spark
file reader takes its open transactions; ``stratalog dump-log`` prints it.

Sans-IO.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from .crc import crc32c
from .entry_field import Buffer
from .errors import CorruptSnapshotError

__all__ = [
    "PRODUCER_SNAPSHOT_CRC_START",
    "PRODUCER_SNAPSHOT_ENTRY",
    "PRODUCER_SNAPSHOT_HEADER",
    "PRODUCER_SNAPSHOT_VERSION",
    "ProducerSnapshot",
    "ProducerSnapshotEntry",
    "pack_producer_snapshot",
    "unpack_producer_snapshot",
]

PRODUCER_SNAPSHOT_VERSION = 1
PRODUCER_SNAPSHOT_HEADER = struct.Struct(
    ">"
    "h"  # version
    "I"  # crc (unsigned), CRC-32C of bytes [6, end)
    "i"  # entry_count
)
PRODUCER_SNAPSHOT_CRC_START = struct.calcsize(">hI")  # 6
PRODUCER_SNAPSHOT_ENTRY = struct.Struct(
    ">"
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # last_sequence
    "q"  # last_offset
    "i"  # offset_delta
    "q"  # timestamp
    "i"  # coordinator_epoch
    "q"  # current_txn_first_offset, -1 when no transaction is open
)


class ProducerSnapshotEntry(NamedTuple):
    """The state of one producer in a ``.snapshot`` (Kafka's ``ProducerStateEntry``)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


class ProducerSnapshot(NamedTuple):
    """A parsed ``.snapshot``: its header fields and its entries."""

    version: int
    crc: int
    entries: list[ProducerSnapshotEntry]


def pack_producer_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """The bytes of a version-1 ``.snapshot`` holding ``entries``, CRC included.

    Raises:
        struct.error: a field does not fit its width.
    """
    body = b"".join(PRODUCER_SNAPSHOT_ENTRY.pack(*entry) for entry in entries)
    count = len(body) // PRODUCER_SNAPSHOT_ENTRY.size
    data = bytearray(PRODUCER_SNAPSHOT_HEADER.pack(PRODUCER_SNAPSHOT_VERSION, 0, count)) + body
    crc = crc32c(memoryview(data)[PRODUCER_SNAPSHOT_CRC_START:])
    PRODUCER_SNAPSHOT_HEADER.pack_into(data, 0, PRODUCER_SNAPSHOT_VERSION, crc, count)
    return bytes(data)


def unpack_producer_snapshot(data: Buffer, *, verify_crc: bool) -> ProducerSnapshot:
    """Parse ``.snapshot`` bytes. Bytes past the declared entries are ignored.

    Args:
        verify_crc: compare the stored CRC with the CRC-32C of bytes [6, end), as Kafka's
            ``readSnapshot`` does; a dump that shows what is there passes False.
    Raises:
        CorruptSnapshotError: fewer than 10 bytes, a version other than 1 (Kafka's
            ``readSnapshot`` knows no other), a negative entry count or more entries than the
            bytes hold, or (with ``verify_crc``) a CRC mismatch.
    """
    if len(data) < PRODUCER_SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"producer snapshot is truncated ({len(data)} bytes)")
    version, crc, count = PRODUCER_SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        # Kafka's words, so that logs and dumps read alike.
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}")
    needed = PRODUCER_SNAPSHOT_HEADER.size + count * PRODUCER_SNAPSHOT_ENTRY.size
    if count < 0 or needed > len(data):
        raise CorruptSnapshotError(
            f"producer snapshot declares {count} entries but holds {len(data)} bytes"
        )
    if verify_crc:
        computed = crc32c(memoryview(data)[PRODUCER_SNAPSHOT_CRC_START:])
        if computed != crc:
            raise CorruptSnapshotError(
                f"producer snapshot CRC is {crc:#010x} but bytes [{PRODUCER_SNAPSHOT_CRC_START}, "
                f"{len(data)}) give {computed:#010x}"
            )
    entries = [
        ProducerSnapshotEntry._make(
            PRODUCER_SNAPSHOT_ENTRY.unpack_from(
                data, PRODUCER_SNAPSHOT_HEADER.size + slot * PRODUCER_SNAPSHOT_ENTRY.size
            )
        )
        for slot in range(count)
    ]
    return ProducerSnapshot(version, crc, entries)
