"""The offset index file (``.index``, Kafka's ``OffsetIndex``): entries of 8 bytes, big-endian,
no header, no checksum::

    offset size field
         0    4 relative_offset   int32, offset - base_offset, in [0, 2^31 - 1]
         4    4 position          int32, byte position of the append in the .log

    base offset 100, entry (offset 105, position 4096) -> 00000005 00001000

The storage engine's index (``server/storage/offset_index.py``) maps the file and searches it;
``stratalog dump-log`` reads it whole with :func:`unpack_offset_index`. Both apply the one sanity
check, :func:`offset_index_problems`.

Sans-IO.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .entry_field import INT32, Buffer, EntryField, whole_entries

__all__ = [
    "OFFSET_INDEX_ENTRY",
    "OFFSET_INDEX_POSITION",
    "OFFSET_INDEX_RELATIVE_OFFSET",
    "OffsetIndexEntry",
    "unpack_offset_index",
]

OFFSET_INDEX_ENTRY = struct.Struct(
    ">"
    "i"  # relative_offset
    "i"  # position
)
OFFSET_INDEX_RELATIVE_OFFSET = EntryField(INT32, 0)
OFFSET_INDEX_POSITION = EntryField(INT32, struct.calcsize(">i"))  # 4


class OffsetIndexEntry(NamedTuple):
    """One ``.index`` entry as stored: the offset relative to the segment's base, a position."""

    relative_offset: int
    position: int


def unpack_offset_index(data: Buffer) -> list[OffsetIndexEntry]:
    """Every whole entry of ``.index`` bytes, in slot order (a partial tail is ignored).

    Values are as stored: a zero-filled (preallocated, untrimmed) file gives ``(0, 0)`` entries.
    """
    return [
        OffsetIndexEntry._make(fields)
        for fields in OFFSET_INDEX_ENTRY.iter_unpack(whole_entries(data, OFFSET_INDEX_ENTRY.size))
    ]
