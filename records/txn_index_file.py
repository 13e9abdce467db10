"""The transaction index file (``.txnindex``, Kafka's ``AbortedTxn``): entries of 34 bytes,
big-endian, no header, no checksum; trailing bytes short of a whole entry are ignored by readers::

    offset size field
         0    2 version             int16, 0 (Kafka reads only byte 0, signed, and rejects > 0)
         2    8 producer_id         int64
        10    8 first_offset        int64, first offset of the aborted transaction
        18    8 last_offset         int64, offset of the ABORT marker
        26    8 last_stable_offset  int64

    (983493, 137, 299, 200) -> 0000 00000000000f01c5 0000000000000089 000000000000012b
                               00000000000000c8

One entry per aborted transaction, in the segment its ABORT marker went into. The storage
engine (``server/storage/txn_index.py``) appends and searches it; the Spark file reader and
``stratalog dump-log`` read it.

Sans-IO.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .entry_field import Buffer, EntryField, whole_entries
from .errors import CorruptIndexEntryError

__all__ = [
    "TXN_INDEX_ENTRY",
    "TXN_INDEX_VERSION",
    "TxnIndexEntry",
    "pack_txn_index_entry",
    "unpack_txn_index",
    "unpack_txn_index_entry",
]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

TXN_INDEX_VERSION = 0
TXN_INDEX_ENTRY = struct.Struct(
    ">"
    "h"  # version
    "q"  # producer_id
    "q"  # first_offset
    "q"  # last_offset
    "q"  # last_stable_offset
)
# Kafka's AbortedTxn.version() is buffer.get(0): one signed byte of the two-byte field.
_TXN_INDEX_VERSION_BYTE = EntryField(struct.Struct(">b"), 0)
_TXN_FIELD_NAMES = ("producer_id", "first_offset", "last_offset", "last_stable_offset")


class TxnIndexEntry(NamedTuple):
    """One ``.txnindex`` entry as stored (offsets are absolute in this file)."""

    version: int
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def pack_txn_index_entry(
    producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int
) -> bytes:
    """The 34-byte ``.txnindex`` entry (version 0) of one aborted transaction.

    Raises:
        ValueError: a field does not fit an int64 (the message names it).
    """
    values = (producer_id, first_offset, last_offset, last_stable_offset)
    for name, value in zip(_TXN_FIELD_NAMES, values, strict=True):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"aborted transaction field {name}={value} does not fit int64")
    return TXN_INDEX_ENTRY.pack(TXN_INDEX_VERSION, *values)


def unpack_txn_index_entry(buf: Buffer, position: int = 0) -> TxnIndexEntry:
    """The ``.txnindex`` entry at byte ``position`` of ``buf``, checked as Kafka checks it.

    Only the first byte of the version is read, as a signed byte (``0x0001`` passes as 0).

    Raises:
        CorruptIndexEntryError: that byte is above 0 (``.version`` holds it).
        struct.error: fewer than 34 bytes from ``position`` (the caller checks the length).
    """
    version = _TXN_INDEX_VERSION_BYTE.read(buf, position)
    if version > TXN_INDEX_VERSION:
        raise CorruptIndexEntryError(
            f"unexpected aborted transaction version {version}", version=version
        )
    return TxnIndexEntry._make(TXN_INDEX_ENTRY.unpack_from(buf, position))


def unpack_txn_index(data: Buffer) -> list[TxnIndexEntry]:
    """Every whole entry of ``.txnindex`` bytes as stored, versions unchecked (for dumps).

    A reader that acts on the entries uses :func:`unpack_txn_index_entry`, which refuses a
    version it does not know.
    """
    return [
        TxnIndexEntry._make(fields)
        for fields in TXN_INDEX_ENTRY.iter_unpack(whole_entries(data, TXN_INDEX_ENTRY.size))
    ]
