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

from .entry_field import INT32, INT64, Buffer, EntryField, SanityRule, whole_entries

__all__ = [
    "TIME_INDEX_ENTRY",
    "TIME_INDEX_RELATIVE_OFFSET",
    "TIME_INDEX_TIMESTAMP",
    "TimeIndexEntry",
    "time_index_sanity",
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


def time_index_sanity(
    length_bytes: int, first_timestamp: int | None, last: TimeIndexEntry | None
) -> tuple[SanityRule, ...]:
    """The rules of Kafka's ``TimeIndex.sanityCheck`` that a time index breaks, in Kafka's order
    (empty: it passes): its last timestamp below its first (typically zeros left at the end of
    an untrimmed file), its last offset below the base offset, then a length that is not a
    multiple of 12.

    ``length_bytes``: the file's length; ``first_timestamp`` and ``last``: its first whole
    entry's timestamp and its last whole entry as stored, None without any. O(1).
    """
    broken = []
    if first_timestamp is not None and last is not None:
        if last.timestamp < first_timestamp:
            broken.append(SanityRule.LAST_TIMESTAMP_NOT_BELOW_FIRST)
        if last.relative_offset < 0:
            broken.append(SanityRule.LAST_OFFSET_NOT_BELOW_BASE)
    if length_bytes % TIME_INDEX_ENTRY.size != 0:
        broken.append(SanityRule.WHOLE_ENTRIES)
    return tuple(broken)
