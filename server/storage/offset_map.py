"""The cleaner's offset map: key -> latest offset over a log's dirty section, in bounded memory.

Kafka's ``SkimpyOffsetMap``. The cleaner reads the dirty section ``[first dirty, first
uncleanable)`` once and records, for every key, the offset of its last record there; it then
rewrites the log keeping a keyed record only if its offset is at least the map's for its key.
Keys themselves are not kept: a key is represented by its 16-byte MD5 digest (as Kafka's
default ``MD5``), so memory per key is fixed whatever the key's size::

    slot i (24 bytes) at position 24 * i of one bytearray:
      [0, 16)   MD5 digest of the key (all zero: the slot is empty)
      [16, 24)  offset, big-endian signed int64

    slots = memory_bytes // 24; a put probes linearly from slot (first 8 digest bytes mod slots)

The map holds at most ``slots * load_factor`` keys (``log.cleaner.io.buffer.load.factor``,
0.9): open addressing degrades as it fills, and the cleaner stops mapping when :meth:`is_full`
and cleans in rounds (the rest of the dirty section next time). Two keys with the same digest
would share a slot (one key's older records removed for the other's newer one): with MD5 the
odds are ~n^2 / 2^129, as in Kafka. A key whose digest is all zero (no known MD5 input) would
read as an empty slot; this cannot happen in practice and is not guarded against either in
Kafka.

Memory: one ``bytearray`` of ``memory_bytes`` allocated at construction and reused across
cleanings (:meth:`clear` zeroes it). Not thread-safe: one per cleaner thread.
"""

from __future__ import annotations

import hashlib
import struct

__all__ = ["SLOT_BYTES", "OffsetMap"]

_DIGEST_BYTES = 16  # MD5
_OFFSET = struct.Struct(">q")
SLOT_BYTES = _DIGEST_BYTES + _OFFSET.size  # 24
_EMPTY_DIGEST = bytes(_DIGEST_BYTES)


class OffsetMap:
    """A fixed-size hash map from key digests to offsets (see the module docstring).

    Holds the slot array, the number of keys put, and the largest offset put
    (:attr:`latest_offset`, -1 when empty: the cleaner's end of the mapped section).
    Operations are O(1) expected; :meth:`put` and :meth:`get` each hash the key once.
    """

    __slots__ = ("_buffer", "_load_factor", "_max_entries", "_slots", "_view", "entries",
                 "latest_offset")

    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        """A map in ``memory_bytes`` bytes (at least one slot), holding up to
        ``slots * load_factor`` keys.

        Raises:
            ValueError: ``memory_bytes`` below one slot (24 bytes) or ``load_factor`` outside
                (0, 1].
        """
        if memory_bytes < SLOT_BYTES:
            raise ValueError(f"an offset map needs at least {SLOT_BYTES} bytes, got {memory_bytes}")
        if not 0 < load_factor <= 1:
            raise ValueError(f"load_factor must be in (0, 1], got {load_factor}")
        self._slots = memory_bytes // SLOT_BYTES
        self._buffer = bytearray(self._slots * SLOT_BYTES)
        self._view = memoryview(self._buffer)
        self._load_factor = load_factor
        self._max_entries = max(1, int(self._slots * load_factor))
        self.entries = 0
        self.latest_offset = -1

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def max_entries(self) -> int:
        """How many keys the map takes before :meth:`is_full`."""
        return self._max_entries

    @property
    def memory_bytes(self) -> int:
        return len(self._buffer)

    def is_full(self) -> bool:
        return self.entries >= self._max_entries

    def clear(self) -> None:
        """Empty the map: a fresh zeroed buffer of the same size (the old one is freed; the
        kernel hands out zeroed pages, cheaper than zeroing in place)."""
        if self.entries == 0 and self.latest_offset == -1:
            return  # never used since the last clear: already zero
        size = len(self._buffer)
        self._view.release()
        self._buffer = bytearray()  # the old buffer goes before the new one comes
        self._buffer = bytearray(size)
        self._view = memoryview(self._buffer)
        self.entries = 0
        self.latest_offset = -1

    def _slot_of(self, digest: bytes) -> int:
        """The position of ``digest``'s slot, or of the empty slot where it would go; -1 when
        every slot is taken by other keys (a full table, load factor 1)."""
        buffer = self._buffer
        slots = self._slots
        position = int.from_bytes(digest[:8], "big") % slots * SLOT_BYTES
        limit = slots * SLOT_BYTES
        for _ in range(slots):
            stored = buffer[position:position + _DIGEST_BYTES]
            if stored in (digest, _EMPTY_DIGEST):
                return position
            position += SLOT_BYTES
            if position == limit:
                position = 0
        return -1

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Map ``key`` to ``offset`` (a later put of the same key replaces it).

        Raises:
            OverflowError: the map is full and ``key`` is new (the caller checks
                :meth:`is_full` before a new round of puts; Kafka's "Attempt to add a new
                entry to a full offset map").
        """
        digest = hashlib.md5(key, usedforsecurity=False).digest()
        position = self._slot_of(digest)
        buffer = self._buffer
        if position < 0:
            raise OverflowError("attempt to add a new entry to a full offset map")
        if buffer[position:position + _DIGEST_BYTES] == _EMPTY_DIGEST:
            if self.entries >= self._max_entries:
                raise OverflowError("attempt to add a new entry to a full offset map")
            buffer[position:position + _DIGEST_BYTES] = digest
            self.entries += 1
        _OFFSET.pack_into(buffer, position + _DIGEST_BYTES, offset)
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The offset mapped for ``key``, or -1 if none."""
        digest = hashlib.md5(key, usedforsecurity=False).digest()
        position = self._slot_of(digest)
        if position < 0 or self._buffer[position:position + _DIGEST_BYTES] == _EMPTY_DIGEST:
            return -1
        return _OFFSET.unpack_from(self._buffer, position + _DIGEST_BYTES)[0]

    def update_latest_offset(self, offset: int) -> None:
        """Note that the mapped section reaches ``offset`` (a batch with no key to put)."""
        if offset > self.latest_offset:
            self.latest_offset = offset

    def utilization(self) -> float:
        """The fraction of slots in use."""
        return self.entries / self._slots
