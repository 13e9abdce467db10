"""The time index file (``.timeindex``, Kafka's ``TimeIndex``): entries of 12 bytes, big-endian,
no header, no checksum::

    offset size field
         0    8 timestamp         int64, milliseconds since the epoch
         8    4 relative_offset   int32, offset - base_offset, in [0, 2^31 - 1]

    base offset 100, entry (timestamp 1700000000000, offset 105) -> 0000018bcfe56800 00000005

The storage engine's index (``server/storage/time_index.py``) maps the file and searches it;
``stratalog dump-log`` reads it whole with :func:`unpack_time_index`. Both apply the one sanity
check, :func:`time_index_problems`.

Sans-IO.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .entry_field import INT32, INT64, Buffer, EntryField, whole_entries

__all__ = [
    "TIME_INDEX_ENTRY",
    "TIME_INDEX_RELATIVE_OFFSET",
    "TIME_INDEX_TIMESTAMP",
    "TimeIndexEntry",
    "unpack_time_index",
]

TIME_INDEX_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp
    "i"  # relative_offset
)
TIME_INDEX_TIMESTAMP = EntryField(INT64, 0)
TIME_INDEX_RELATIVE_OFFSET = EntryField(INT32, struct.calcsize(">q"))  # 8


class TimeIndexEntry(NamedTuple):
    """One ``.timeindex`` entry as stored: a timestamp (ms) and a relative offset."""

    timestamp: int
    relative_offset: int


def unpack_time_index(data: Buffer) -> list[TimeIndexEntry]:
    """Every whole entry of ``.timeindex`` bytes, in slot order (a partial tail is ignored)."""
    return [
        TimeIndexEntry._make(fields)
        for fields in TIME_INDEX_ENTRY.iter_unpack(whole_entries(data, TIME_INDEX_ENTRY.size))
    ]
