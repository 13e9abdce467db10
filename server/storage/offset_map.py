"""The cleaner's offset map: key -> latest offset over a log's dirty section, in bounded memory.

Kafka's ``SkimpyOffsetMap``. The cleaner reads the dirty section ``[first dirty, first
uncleanable)`` once and records, for every key, the offset of its last record there; it then
rewrites the log keeping a keyed record only if its offset is at least the map's for its key.
Keys themselves are not kept: a key is represented by its 16-byte digest, so memory per key is
fixed whatever the key's size. Kafka's default digest is MD5; stratalog's is MurmurHash3_x64_128
(:mod:`stratalog.records.key_digest`: the digest is never persisted, and this one runs in C
without the GIL)::

    slot i (24 bytes) at position 24 * i of one bytearray:
      [0, 16)   digest of the key (all zero: the slot is empty)
      [16, 24)  offset, big-endian signed int64

    slots = memory_bytes // 24; a put probes linearly from slot (first 8 digest bytes mod slots)

The map holds at most ``slots * load_factor`` keys (``log.cleaner.io.buffer.load.factor``,
0.9): open addressing degrades as it fills, and the cleaner stops mapping when :meth:`is_full`
and cleans in rounds (the rest of the dirty section next time). Two keys with the same digest
would share a slot (one key's older records removed for the other's newer one): with a 128-bit
digest the odds are ~n^2 / 2^129, as with Kafka's MD5. A key whose digest is all zero would
read as an empty slot; at odds of 2^-128 this is not guarded against (nor is it in Kafka).

The cleaner works a records region at a time: :meth:`OffsetMap.put_records` (map every key)
and :meth:`OffsetMap.retain_mask` (which records to keep). With the C extension built these are
one C call each (``records/_speedups.c``: ``map_put_records``, ``map_retain_records``) that
releases the GIL for the whole region, so that a cleaner thread neither holds the GIL against
the server's event loop for its per-record work nor spends ~1 µs of interpreter time a record.
Without it (or with ``accelerated=False``) the same methods run the per-key :meth:`put` and
:meth:`get` over the decoded columns: the reference the C loops are tested against (the
tables compare byte for byte).

Memory: one anonymous ``mmap`` of ``memory_bytes`` made at construction and reused across
cleanings. Its pages come from the kernel zeroed and become resident only when a put touches
them, and :meth:`clear` gives them back (``madvise(MADV_DONTNEED)``: the next touch reads
zeros), so an idle cleaner holds nothing. Kafka allocates its dedupe buffer on the Java heap for
the cleaner's life (``SkimpyOffsetMap``); with a ``bytearray`` zeroed up front, every server held
``log.cleaner.dedupe.buffer.size`` (128 MiB) resident from start-up, compacted topics or not
(measured: an idle server 190 MiB resident, 164 MiB of it anonymous; and a test's memory baseline
taken before the cleaner thread had zeroed its map counted those 128 MiB against the test).
Where ``MADV_DONTNEED`` is not known to zero (not Linux), :meth:`clear` zeroes the pages in
place (in C without the GIL). Not thread-safe: one per cleaner thread.
"""

from __future__ import annotations

import mmap
import struct
import sys

from stratalog.records import accel
from stratalog.records.accel import decode_columns
from stratalog.records.key_digest import DIGEST_BYTES, key_digest, key_digest_reference

__all__ = ["SLOT_BYTES", "OffsetMap"]

_DIGEST_BYTES = DIGEST_BYTES
_OFFSET = struct.Struct(">q")
SLOT_BYTES = _DIGEST_BYTES + _OFFSET.size  # 24
_EMPTY_DIGEST = bytes(_DIGEST_BYTES)
#: Whether ``madvise(MADV_DONTNEED)`` on a private anonymous mapping gives its pages back and
#: makes them read as zeros (Linux's documented behaviour; on macOS the pages keep their data).
_DONTNEED_ZEROES = sys.platform.startswith("linux") and hasattr(mmap, "MADV_DONTNEED")


def _anonymous_pages(size: int) -> mmap.mmap:
    """``size`` bytes of private anonymous memory (zero, and not resident until touched). Private:
    ``MADV_DONTNEED`` zeroes a private mapping's pages, not a shared one's (shmem keeps them)."""
    if hasattr(mmap, "MAP_PRIVATE"):
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
    return mmap.mmap(-1, size)  # Windows: no flags; clear() zeroes in place there


class OffsetMap:
    """A fixed-size hash map from key digests to offsets (see the module docstring).

    Holds the slot array, the number of keys put, and the largest offset put
    (:attr:`latest_offset`, -1 when empty: the cleaner's end of the mapped section).
    Operations are O(1) expected; :meth:`put` and :meth:`get` each hash the key once.
    """

    __slots__ = ("_buffer", "_digest", "_load_factor", "_max_entries", "_put_records_c",
                 "_retain_records_c", "_slots", "_view", "entries", "latest_offset")

    def __init__(
        self, memory_bytes: int, load_factor: float = 0.9, *, accelerated: bool = True
    ) -> None:
        """A map in ``memory_bytes`` bytes (at least one slot), holding up to
        ``slots * load_factor`` keys. ``accelerated=False`` runs the pure-Python reference
        even where the C extension is built (tests compare the two).

        Raises:
            ValueError: ``memory_bytes`` below one slot (24 bytes) or ``load_factor`` outside
                (0, 1].
        """
        if memory_bytes < SLOT_BYTES:
            raise ValueError(f"an offset map needs at least {SLOT_BYTES} bytes, got {memory_bytes}")
        if not 0 < load_factor <= 1:
            raise ValueError(f"load_factor must be in (0, 1], got {load_factor}")
        use_c = accelerated and accel.map_put_records is not None
        self._slots = memory_bytes // SLOT_BYTES
        # Zero pages from the kernel, resident only once touched (module docstring: Memory).
        self._buffer = _anonymous_pages(self._slots * SLOT_BYTES)
        self._view = memoryview(self._buffer)
        self._load_factor = load_factor
        self._max_entries = max(1, int(self._slots * load_factor))
        self.entries = 0
        self.latest_offset = -1
        self._digest = key_digest if use_c else key_digest_reference
        self._put_records_c = accel.map_put_records if use_c else None
        self._retain_records_c = accel.map_retain_records if use_c else None

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
        """Empty the map and give its pages back to the kernel (``MADV_DONTNEED``: they read
        as zeros when touched again). Where that does not zero (not Linux) the pages are
        zeroed in place: in C without the GIL (zeroing 128 MiB takes ~60 ms: held, the GIL
        would stall the server's event loop that long)."""
        if self.entries == 0 and self.latest_offset == -1:
            return  # never used since the last clear: already zero
        if _DONTNEED_ZEROES:
            self._buffer.madvise(mmap.MADV_DONTNEED)
        elif accel.map_clear is not None:
            accel.map_clear(self._buffer)
        else:
            self._view[:] = bytes(len(self._buffer))
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
        digest = self._digest(key)
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
        digest = self._digest(key)
        position = self._slot_of(digest)
        if position < 0 or self._buffer[position:position + _DIGEST_BYTES] == _EMPTY_DIGEST:
            return -1
        return _OFFSET.unpack_from(self._buffer, position + _DIGEST_BYTES)[0]

    def put_records(
        self, records: bytes | bytearray | memoryview, count: int, base_offset: int, start: int
    ) -> bool:
        """:meth:`put` every keyed record at or after offset ``start`` of a records region
        (``count`` records, decompressed, of a batch at ``base_offset``), in order. Returns
        True if the map filled: the record that found it full and those after it were not put
        (the caller ends its round before that record, at :attr:`latest_offset` + 1).

        Raises:
            CorruptRecordError: the region is not ``count`` records (some keys may be put).
        """
        if self._put_records_c is not None:
            result = self._put_records_c(
                self._buffer, records, count, base_offset, start, self.entries,
                self._max_entries,
            )
            if result is not None:
                self.entries, latest, full = result
                if latest > self.latest_offset:
                    self.latest_offset = latest
                return full
            # Not a region the C walk reads: the decoder below raises its error (puts made
            # by the C walk put the same keys and offsets again, which changes nothing).
        columns = decode_columns(records, count, base_offset, 0)
        put = self.put
        for offset, key in zip(columns.offsets, columns.keys, strict=True):
            if key is None or offset < start:
                continue
            try:
                put(key, offset)
            except OverflowError:
                return True
        return False

    def retain_mask(
        self, records: bytes | bytearray | memoryview, count: int, base_offset: int,
        latest_mapped: int, retain_deletes: bool,
    ) -> bytes:
        """The cleaner's decision for each record of a records region (as
        :meth:`put_records`'s): ``count`` bytes, 1 to keep the record, 0 to drop it. A record
        is kept if its offset is past ``latest_mapped`` (the next round judges it), or if it
        has a key, its offset is at least the key's mapped offset (the latest) and it has a
        value or ``retain_deletes`` (a tombstone still within ``delete.retention.ms``).

        Raises:
            CorruptRecordError: the region is not ``count`` records.
        """
        if self._retain_records_c is not None:
            mask = self._retain_records_c(
                self._buffer, records, count, base_offset, latest_mapped, retain_deletes
            )
            if mask is not None:
                return mask
        columns = decode_columns(records, count, base_offset, 0)
        get = self.get
        out = bytearray(count)
        values = columns.values
        for index, (offset, key) in enumerate(zip(columns.offsets, columns.keys, strict=True)):
            if offset > latest_mapped:
                out[index] = 1
            elif key is None:
                continue
            elif offset >= get(key) and (values[index] is not None or retain_deletes):
                out[index] = 1
        return bytes(out)

    def update_latest_offset(self, offset: int) -> None:
        """Note that the mapped section reaches ``offset`` (a batch with no key to put)."""
        if offset > self.latest_offset:
            self.latest_offset = offset

    def utilization(self) -> float:
        """The fraction of slots in use."""
        return self.entries / self._slots
