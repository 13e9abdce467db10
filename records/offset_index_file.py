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

from .entry_field import INT32, Buffer, EntryField, SanityRule, whole_entries

__all__ = [
    "OFFSET_INDEX_ENTRY",
    "OFFSET_INDEX_POSITION",
    "OFFSET_INDEX_RELATIVE_OFFSET",
    "OffsetIndexEntry",
    "offset_index_sanity",
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


def offset_index_sanity(
    length_bytes: int, last_relative_offset: int | None
) -> tuple[SanityRule, ...]:
    """The rules of Kafka's ``OffsetIndex.sanityCheck`` that an offset index breaks, in Kafka's
    order (empty: it passes): its last entry's offset below the base offset (relative offsets
    are signed on disk, so a corrupt last entry can point below the segment), then a length
    that is not a multiple of 8.

    ``length_bytes``: the file's length; ``last_relative_offset``: the last whole entry's
    relative offset, None without one. O(1): Kafka's check looks at the last entry only.
    """
    broken = []
    if last_relative_offset is not None and last_relative_offset < 0:
        broken.append(SanityRule.LAST_OFFSET_NOT_BELOW_BASE)
    if length_bytes % OFFSET_INDEX_ENTRY.size != 0:
        broken.append(SanityRule.WHOLE_ENTRIES)
    return tuple(broken)
