"""Fixed-size index entries: one integer field of an entry, and the whole entries of a file.

The three index files of a segment (``.index``: :mod:`~stratalog.records.offset_index_file`,
``.timeindex``: :mod:`~stratalog.records.time_index_file`, ``.txnindex``:
:mod:`~stratalog.records.txn_index_file`) are entries of a fixed size, big-endian, back to back,
with no header and no checksum. A reader of a whole file takes its whole entries and ignores a
partial tail (a torn append), as Kafka's readers do.

The sanity checks of the offset and time indexes (Kafka's ``AbstractIndex.sanityCheck``, run
when a log opens an index, and by ``kafka-dump-log.sh --index-sanity-check``) are written once,
beside each layout (:func:`~stratalog.records.offset_index_file.offset_index_sanity`,
:func:`~stratalog.records.time_index_file.time_index_sanity`); they name the rules an index
breaks with :class:`SanityRule`, and each caller words its own message (the storage engine's
error, dump-log's line).

Sans-IO.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

__all__ = ["INT32", "INT64", "Buffer", "EntryField", "SanityRule", "whole_entries"]

Buffer = bytes | bytearray | memoryview

# The widths of the entries' fields: Java's int and long, big-endian.
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


class EntryField(NamedTuple):
    """One integer field of a fixed-size entry: its format and its byte offset in the entry.

    The storage engine's indexes search a column of their memory map through these (the same
    shape as ``server/storage/index.py``'s ``Column``); other readers use :meth:`read`.
    """

    fmt: struct.Struct
    field_offset: int

    def read(self, buf: Buffer, entry_position: int = 0) -> int:
        """The field of the entry that starts at byte ``entry_position`` of ``buf``."""
        return self.fmt.unpack_from(buf, entry_position + self.field_offset)[0]


def whole_entries(data: Buffer, entry_size: int) -> memoryview:
    """The bytes of ``data``'s whole entries of ``entry_size`` bytes: a partial tail left out."""
    view = memoryview(data).cast("B")
    return view[: len(view) - len(view) % entry_size]


class SanityRule(enum.Enum):
    """A rule of an index's sanity check (Kafka's ``sanityCheck``), named for what must hold."""

    # The file holds whole entries: its length is a multiple of the entry size.
    WHOLE_ENTRIES = "whole entries"
    # The last entry's offset is not below the segment's base offset (equal is legal: the zeros
    # of an untrimmed file pass this rule).
    LAST_OFFSET_NOT_BELOW_BASE = "last offset not below the base offset"
    # Time index: the last entry's timestamp is not below the first's (zeros left at the end
    # of an untrimmed file break it).
    LAST_TIMESTAMP_NOT_BELOW_FIRST = "last timestamp not below the first"
